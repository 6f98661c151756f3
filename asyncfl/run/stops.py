"""The stop conditions of a run (``[run] stop``, :mod:`asyncfl.config.stop`; docs/run-directory.md §14).

:class:`StopWatch` is asked after every server step the simulation yields and reads only what
the run records: the step's metrics row (at an evaluation), the ε spent by then (the row
``privacy.csv`` would hold for that step), the step's virtual time, and this process's wall time.
The first condition met ends the run after that step with ``status = "stopped"`` and
``summary["stop"]`` naming it. A condition that never fires changes nothing: the watch takes no
random draw and writes nothing, so the run's files are those of a run without it.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

from asyncfl.config.stop import StopConfig
from asyncfl.errors import ScenarioError
from asyncfl.privacy import epsilon_curve
from asyncfl.records import StepEvent

STOPPED = "stopped"
#: metrics.csv columns a target may not name (bookkeeping, not a measurement of the model)
NOT_TARGETS = ("step", "wall_time")


def check_metric(config: StopConfig | None, fields: Sequence[str]) -> None:
    """Refuse a target on a metric the run does not record (names the recorded ones)."""
    if config is None or config.target is None:
        return
    allowed = [f for f in fields if f not in NOT_TARGETS]
    if config.target.metric not in allowed:
        raise ScenarioError([f"run.stop.target.metric = {config.target.metric!r}: not a metric this run records; "
                             f"allowed: {', '.join(allowed)}"])


class StopWatch:
    """Decides, after each server step, whether the run stops there (see the module docstring)."""

    def __init__(self, config: StopConfig | None) -> None:
        self.config = config

    def check(self, sim: Any, event: StepEvent) -> dict[str, Any] | None:
        """``None``, or ``summary["stop"]``: ``{"reason", "step", "virtual_time", …}`` of the
        condition that fired (the first in the order target, ε, virtual time, wall time)."""
        cfg = self.config
        if cfg is None:
            return None
        where = {"step": event.step, "virtual_time": event.time}
        if event.metrics is not None and cfg.target is not None:
            value = float(event.metrics.get(cfg.target.metric, math.nan))
            if math.isfinite(value) and cfg.target.reached(value):
                return {"reason": "target", **where, "metric": cfg.target.metric, "value": value,
                        "condition": cfg.target.describe()}
        if event.metrics is not None and cfg.epsilon is not None and sim.privacy_setup is not None:
            row = epsilon_curve(sim.privacy_setup, [(event.step, sim.participation.most_by(event.step))])[0]
            if row["epsilon"] >= cfg.epsilon:
                return {"reason": "epsilon", **where, "epsilon": row["epsilon"], "condition": f"ε ≥ {cfg.epsilon:g}"}
        if cfg.virtual_time is not None and event.time >= cfg.virtual_time:
            return {"reason": "virtual_time", **where, "condition": f"virtual time ≥ {cfg.virtual_time:g}"}
        if cfg.wall_time is not None and event.wall_time >= cfg.wall_time:
            return {"reason": "wall_time", **where, "wall_time": event.wall_time,
                    "condition": f"wall time ≥ {cfg.wall_time:g} s"}
        return None
