"""Reading a study run's directory (docs/run-directory.md): its status, its evaluations, when
it first reached a target accuracy, and the implicit momentum bias of its own rule."""

from __future__ import annotations

import math
from pathlib import Path

from asyncfl.errors import RunDirError
from asyncfl.run.rundir import read_csv, read_json
from asyncfl.studies.ma_study.spec import BIAS_KEY

#: a run with one of these ``summary.json`` statuses is not run again (divergence is deterministic)
DONE_STATUSES = ("completed", "diverged")


def read_status(run_dir: Path) -> str | None:
    try:
        summary = read_json(run_dir / "summary.json")
    except (OSError, RunDirError):
        return None
    return summary.get("status") if isinstance(summary, dict) else None


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    path = run_dir / "metrics.csv"
    if not path.is_file():
        return []
    rows = []
    try:
        for row in read_csv(path):
            rows.append({k: (float(v) if v not in ("", None) else math.nan) for k, v in row.items()})
    except (RunDirError, ValueError, TypeError) as exc:
        raise RunDirError(f"{path}: not a metrics.csv of numbers ({exc.__class__.__name__})") from None
    return rows


def first_reach(metrics: list[dict[str, float]], target: float) -> tuple[float, float]:
    """(step, virtual time) of the first evaluation with accuracy ≥ target; NaN if never."""
    for row in metrics:
        if row.get("accuracy", math.nan) >= target:
            return row["step"], row["time"]
    return math.nan, math.nan


def run_bias(run_dir: Path, method: str) -> float:
    """The bias of the method's own rule from the run's ``bias.json`` (key :data:`BIAS_KEY`)."""
    key = BIAS_KEY[method]
    if key is None:
        return 0.0  # sync: W = I and A = M
    try:
        return float(read_json(run_dir / "bias.json")[key])
    except (OSError, RunDirError, ValueError, KeyError, TypeError):
        return math.nan


def run_amplification(run_dir: Path, method: str) -> float:
    """The noise amplification of the method's own rule, ``‖A‖_F`` relative to naive momentum's,
    from the run's ``bias.json`` (docs/server-rules.md); 1 for sync (A = M)."""
    key = BIAS_KEY[method]
    if key is None:
        return 1.0
    try:
        return float(read_json(run_dir / "bias.json")["amplification"][key])
    except (OSError, RunDirError, ValueError, KeyError, TypeError):
        return math.nan


def run_epsilon(run_dir: Path) -> float:
    """The ε a private run spent (``summary.json``); NaN without DP."""
    try:
        summary = read_json(run_dir / "summary.json")
        return float(summary["privacy"]["epsilon_spent"])
    except (OSError, RunDirError, ValueError, KeyError, TypeError):
        return math.nan
