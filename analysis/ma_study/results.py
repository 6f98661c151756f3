"""Reading a study run's directory through :class:`asyncfl.results.Run` (docs/run-directory.md
§10): its status, its evaluations, when it first reached a target accuracy, and the implicit
momentum bias of its own rule. A file that is missing or damaged reads as "no value" (None, [],
NaN), so one broken run leaves a blank cell, not a failed study."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from asyncfl.errors import RunDirError
from asyncfl.results import Run
from analysis.ma_study.spec import BIAS_KEY, NO_BIAS

#: a run with one of these ``summary.json`` statuses is not run again (divergence is deterministic)
DONE_STATUSES = ("completed", "diverged")


def read_status(run_dir: Path) -> str | None:
    try:
        return Run(run_dir).summary.get("status")
    except (OSError, RunDirError):
        return None


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    """The run's evaluations (:meth:`asyncfl.results.Run.evaluations`; ``[]`` before the first)."""
    return Run(run_dir).evaluations()


def first_reach(metrics: list[dict[str, float]], target: float) -> tuple[float, float]:
    """(step, virtual time) of the first evaluation with accuracy ≥ target; NaN if never."""
    for row in metrics:
        if row.get("accuracy", math.nan) >= target:
            return row["step"], row["time"]
    return math.nan, math.nan


def _bias_entry(run_dir: Path, *path: str) -> float:
    """``bias.json[path…]`` as a float; NaN when the run has none or it is damaged."""
    try:
        value: Any = Run(run_dir).bias
        for key in path:
            value = value[key]
        return float(value)
    except (OSError, RunDirError, ValueError, KeyError, TypeError):
        return math.nan


def run_bias(run_dir: Path, method: str) -> float:
    """The bias of the method's own rule from the run's ``bias.json`` (key :data:`BIAS_KEY`; NaN
    for a method without a linear target, :data:`NO_BIAS`)."""
    if method in NO_BIAS:
        return math.nan
    key = BIAS_KEY[method]
    if key is None:
        return 0.0  # sync: W = I and A = M
    return _bias_entry(run_dir, key)


def run_amplification(run_dir: Path, method: str) -> float:
    """The noise amplification of the method's own rule, ``‖A‖_F`` relative to naive momentum's,
    from the run's ``bias.json`` (docs/server-rules.md); 1 for sync (A = M), NaN without a linear target."""
    if method in NO_BIAS:
        return math.nan
    key = BIAS_KEY[method]
    if key is None:
        return 1.0
    return _bias_entry(run_dir, "amplification", key)


def run_epsilon(run_dir: Path) -> float:
    """The ε a private run spent (``summary.json``); NaN without DP."""
    try:
        return float(Run(run_dir).summary["privacy"]["epsilon_spent"])
    except (OSError, RunDirError, ValueError, KeyError, TypeError):
        return math.nan
