"""``[run] stop``: when a run may end before ``run.steps`` (docs/run-directory.md §14). Torch-free.

``stop = {target = {metric = "accuracy", at_least = 0.8}, epsilon = 2.0, virtual_time = 500.0,
wall_time = 3600.0}``, each part optional:

* ``target``: at the first evaluation after a server step whose ``metric`` (any column of
  ``metrics.csv``: ``loss``, ``accuracy``, ``train_loss``, ``gap``, the staleness columns or the
  task's own metrics) is ``≥ at_least`` — or ``≤ at_most`` (a loss) — give exactly one of them;
* ``epsilon``: at the first evaluation at which the run's ε spent (``privacy.csv``) is ``≥`` it
  (needs ``privacy.enabled``);
* ``virtual_time``: after the first server step at virtual time ``≥`` it;
* ``wall_time``: after the first server step at which this process has run the simulation for
  ``≥`` that many seconds (each ``asyncfl resume`` counts anew; the only stop that depends on the
  machine).

The first condition met ends the run with ``status = "stopped"``; ``summary.json``'s ``stop``
says which (:mod:`asyncfl.run.stops`).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator

from asyncfl.config.base import Section

Budget = Annotated[float, Field(gt=0, le=1e15)]


class TargetStop(Section):
    """``{metric = NAME, at_least = X}`` or ``{metric = NAME, at_most = X}``."""

    metric: Annotated[str, Field(min_length=1, max_length=100)]
    at_least: float | None = None
    at_most: float | None = None

    @model_validator(mode="after")
    def _one_bound(self) -> "TargetStop":
        if (self.at_least is None) == (self.at_most is None):
            raise ValueError("give exactly one of at_least (a metric that grows: accuracy) or at_most (one that falls: loss)")
        return self

    def reached(self, value: float) -> bool:
        """Whether ``value`` meets the target (NaN never does)."""
        if self.at_least is not None:
            return value >= self.at_least
        assert self.at_most is not None
        return value <= self.at_most

    def describe(self) -> str:
        return f"{self.metric} ≥ {self.at_least:g}" if self.at_least is not None else f"{self.metric} ≤ {self.at_most:g}"


class StopConfig(Section):
    """The stop conditions of a run; absent ones never fire."""

    target: TargetStop | None = None
    epsilon: Budget | None = None
    virtual_time: Budget | None = None
    wall_time: Budget | None = None


#: the statuses of a run that ended as its scenario asked: every step taken, or a stop fired
FINISHED_STATUSES = ("completed", "stopped")
