"""Registry entries for the rules configured by their own section (docs/async-optimisers.md).

The rules registry (:data:`asyncfl.config.registries.RULES`) builds a rule as
``target.from_config(server)``; the comparators take only their own section
(``FADAS.from_config(FADASConfig)``). :class:`FromOptions` is the bridge: it reads the section
``[server.options.NAME]`` (:func:`asyncfl.config.comparators.options_of`) and hands it on.
"""

from __future__ import annotations

from typing import Any

from asyncfl.config.comparators import options_of
from asyncfl.server.async_rules import FADAS, DelayAdaptiveSGD
from asyncfl.server.rules import ServerRule


class FromOptions:
    """``from_config(server)`` = ``impl.from_config(options_of(server, name))``."""

    def __init__(self, name: str, impl: Any) -> None:
        self.name, self.impl = name, impl

    def from_config(self, server: Any) -> ServerRule:
        return self.impl.from_config(options_of(server, self.name))


FADAS_RULE = FromOptions("fadas", FADAS)
SGD_DELAY_RULE = FromOptions("sgd-delay", DelayAdaptiveSGD)
