"""Registry entries for the rules configured by their own section (docs/async-optimisers.md).

The rules registry (:data:`asyncfl.config.registries.RULES`) builds a rule as
``Class.from_config(server)``; the comparators take only their own section
(``FADAS.from_config(FADASConfig)``). The classes here are that bridge: each reads the section
``[server.options.NAME]`` (:func:`asyncfl.config.comparators.options_of`) and hands it on.
"""

from __future__ import annotations

from typing import Any

from asyncfl.config.comparators import options_of
from asyncfl.server.async_rules import FADAS, DelayAdaptiveSGD


class FADASRule(FADAS):
    """``server.rule = "fadas"``: :class:`FADAS` from ``[server.options.fadas]``."""

    @classmethod
    def from_config(cls, server: Any) -> FADAS:  # type: ignore[override]
        return cls(options_of(server, "fadas"))


class DelayAdaptiveSGDRule(DelayAdaptiveSGD):
    """``server.rule = "sgd-delay"``: :class:`DelayAdaptiveSGD` from ``[server.options.sgd-delay]``."""

    @classmethod
    def from_config(cls, server: Any) -> DelayAdaptiveSGD:  # type: ignore[override]
        return cls(options_of(server, "sgd-delay"))
