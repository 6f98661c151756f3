"""The study's tables (docs/architecture.md, "Studies and sweeps"; docs/server-rules.md): steps and
virtual time to the target accuracy (mean over the seeds that reached it, and how many did), the
speed-up of each MA variant over naive momentum (ratio of mean steps-to-target; a bound
``≥``/``≤`` where one side did not reach the target within the run, counting it as the run
length)."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

from asyncfl.studies.ma_study.design import Study
from asyncfl.studies.ma_study.results import first_reach, read_metrics

#: the speed-up range the paper reports for momentum approximation
PAPER_SPEEDUP = (1.15, 4.0)

Rows = list[dict[str, Any]]


def mean(values: list[float]) -> float:
    """Mean of the finite values (NaN when there is none)."""
    vals = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else math.nan


def fmt(value: float, digits: int = 3) -> str:
    """``digits`` significant digits, ``—`` for a missing or non-finite value."""
    return "—" if not isinstance(value, (int, float)) or not math.isfinite(value) else f"{value:.{digits}g}"


def group(rows: Rows) -> dict[tuple[str, int, str, int], Rows]:
    """Rows by (task, dp, method, K)."""
    out: dict[tuple[str, int, str, int], Rows] = defaultdict(list)
    for row in rows:
        out[(row["task"], row["dp"], row["method"], row["K"])].append(row)
    return out


def reach_summary(runs: Rows, steps: int) -> dict[str, Any]:
    """Mean steps/time over the seeds that reached the target, how many did, and the mean
    steps with an unreached seed counted as the run length (for bounds)."""
    reached = [r for r in runs if math.isfinite(r["steps_to_target"])]
    return {
        "n": len(runs), "reached": len(reached),
        "steps": mean([r["steps_to_target"] for r in reached]),
        "time": mean([r["time_to_target"] for r in reached]),
        "steps_censored": mean([r["steps_to_target"] if math.isfinite(r["steps_to_target"]) else steps for r in runs]),
        "final_accuracy": mean([r["final_accuracy"] for r in runs]),
        "bias": mean([r["bias"] for r in runs]),
        "lr": runs[0]["lr"] if runs else math.nan,
    }


def speedup(base: dict[str, Any], ma: dict[str, Any]) -> tuple[float, str]:
    """(value, text): momentum's steps-to-target over MA's. Exact when every seed of both
    reached the target; a lower bound (≥) when only MA's did, an upper bound (≤) when only
    momentum's did, undefined when neither."""
    base_all = base["reached"] == base["n"] and base["n"] > 0
    ma_all = ma["reached"] == ma["n"] and ma["n"] > 0
    if base_all and ma_all:
        value = base["steps"] / ma["steps"] if ma["steps"] > 0 else math.nan
        return value, f"{value:.2f}×"
    if ma_all and base["reached"] < base["n"]:
        value = base["steps_censored"] / ma["steps"] if ma["steps"] > 0 else math.nan
        return value, f"≥ {value:.2f}×"
    if base_all and ma["reached"] < ma["n"]:
        value = base["steps"] / ma["steps_censored"]
        return value, f"≤ {value:.2f}×"
    if base["reached"] == 0 and ma["reached"] == 0:
        return math.nan, "n/a (neither reached)"
    value = base["steps_censored"] / ma["steps_censored"]
    return value, f"~{value:.2f}× (censored)"


def retarget(study: Study, out: Path, rows: Rows, fraction: float) -> Rows:
    """``rows`` with steps/time to ``fraction`` × each task's target, read from the curves."""
    new = []
    for row in rows:
        target = fraction * study.tasks[row["task"]].target_accuracy
        step, vtime = (first_reach(read_metrics(out / row["run_dir"]), target)
                       if row["status"] == "completed" else (math.nan, math.nan))
        new.append({**row, "steps_to_target": step, "time_to_target": vtime, "target_accuracy": target})
    return new


def reach_text(s: dict[str, Any]) -> str:
    """A :func:`reach_summary` as a table cell: mean steps, ``(k/n)`` when not every seed reached."""
    if s["n"] == 0:
        return "—"
    if s["reached"] == 0:
        return f"not reached (0/{s['n']})"
    text = fmt(s["steps"], 4)
    return text if s["reached"] == s["n"] else f"{text} ({s['reached']}/{s['n']})"


def speedup_table(study: Study, rows: Rows) -> tuple[list[str], dict[str, list[float]]]:
    """The markdown speed-up table (one line per task × DP × K) and the exact speed-ups per
    ``method/dp``."""
    spec = study.spec
    groups = group(rows)
    lines = ["| task | DP | K | momentum steps | MA-full steps | MA-light steps | MA-full speed-up | MA-light speed-up |",
             "|---|---|---|---|---|---|---|---|"]
    exact: dict[str, list[float]] = defaultdict(list)
    for task in spec.tasks:
        for dp in spec.dp:
            for m in spec.k_multiples:
                K = m * spec.buffer
                base = reach_summary(groups.get((task.name, int(dp), "fedbuff-momentum", K), []), spec.steps)
                cells = []
                for method in ("fedbuff-ma-full", "fedbuff-ma-light"):
                    ma = reach_summary(groups.get((task.name, int(dp), method, K), []), spec.steps)
                    value, text = speedup(base, ma)
                    cells.append((ma, text))
                    if text.endswith("×") and not text.startswith(("≥", "≤")) and math.isfinite(value):
                        exact[f"{method}/{'dp' if dp else 'nodp'}"].append(value)
                lines.append(f"| {task.name} | {'yes' if dp else 'no'} | {m}C = {K} | {reach_text(base)} | "
                             f"{reach_text(cells[0][0])} | {reach_text(cells[1][0])} | {cells[0][1]} | {cells[1][1]} |")
    return lines, exact
