"""Which trackers a scenario names (docs/run-directory.md §15). Torch-free: ``asyncfl
validate`` lists them with their origins, :mod:`asyncfl.run.tracking` builds them."""

from __future__ import annotations

from typing import Any

from asyncfl.components.core import Component
from asyncfl.config.registries import TRACKERS


def named(scenario: Any) -> tuple[Component, ...]:
    """The tracker components a validated scenario names, in order: ``run.trackers``, after
    ``"tensorboard"`` when ``run.tensorboard = true`` and the list does not name it."""
    listed = scenario.listed("tracker")
    if scenario.run.tensorboard and all(c.name != "tensorboard" for c in listed):
        listed = (TRACKERS.get("tensorboard"), *listed)
    return tuple(listed)
