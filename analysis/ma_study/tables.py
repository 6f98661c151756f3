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

from asyncfl.studies.stats import PairedSpeedup, paired_speedup
from analysis.ma_study.design import Study
from analysis.ma_study.results import first_reach, read_metrics

#: the speed-up range the paper reports for momentum approximation
PAPER_SPEEDUP = (1.15, 4.0)

Rows = list[dict[str, Any]]
__all__ = ["PAPER_SPEEDUP", "PairedSpeedup", "Rows", "baseline_table", "fmt", "group", "mean", "paired_speedup", "reach_summary",
           "reach_text", "retarget", "speedup", "speedup_table", "time_speedup_table"]


def mean(values: list[float]) -> float:
    """Mean of the finite values (NaN when there is none)."""
    vals = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else math.nan


def fmt(value: float, digits: int = 3) -> str:
    """``digits`` significant digits, ``—`` for a missing or non-finite value."""
    return "—" if not isinstance(value, (int, float)) or not math.isfinite(value) else f"{value:.{digits}g}"


def group(rows: Rows) -> dict[tuple[str, str, str, int], Rows]:
    """Rows by (task, privacy label, method, K)."""
    out: dict[tuple[str, str, str, int], Rows] = defaultdict(list)
    for row in rows:
        out[(row["task"], row["privacy"], row["method"], row["K"])].append(row)
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
    """The markdown speed-up table (one line per task × privacy × K): mean steps to target of
    momentum and of each MA rule, and each MA rule's speed-up paired by seed with its 95 % CI
    (:func:`asyncfl.studies.stats.paired_speedup`); and the exact speed-ups (every seed of both reached) per
    ``method/privacy``."""
    spec = study.spec
    groups = group(rows)
    lines = ["| task | privacy | K | momentum steps | MA-full steps | MA-light steps | MA-full speed-up [95 % CI] | "
             "MA-light speed-up [95 % CI] |", "|---|---|---|---|---|---|---|---|"]
    exact: dict[str, list[float]] = defaultdict(list)
    for task in spec.tasks:
        for label in study.settings_of(task.name):
            for m in spec.k_multiples:
                K = m * spec.buffer
                base_rows = groups.get((task.name, label, "fedbuff-momentum", K), [])
                base = reach_summary(base_rows, spec.steps)
                cells = []
                for method in ("fedbuff-ma-full", "fedbuff-ma-light"):
                    ma_rows = groups.get((task.name, label, method, K), [])
                    ma = reach_summary(ma_rows, spec.steps)
                    value, text = speedup(base, ma)
                    paired = paired_speedup(base_rows, ma_rows)
                    cells.append((ma, paired.text() if ma_rows and base_rows else text))
                    if text.endswith("×") and not text.startswith(("≥", "≤")) and math.isfinite(value):
                        exact[f"{method}/{label}"].append(value)
                lines.append(f"| {task.name} | {label} | {m}C = {K} | {reach_text(base)} | "
                             f"{reach_text(cells[0][0])} | {reach_text(cells[1][0])} | {cells[0][1]} | {cells[1][1]} |")
    return lines, exact


def time_speedup_table(study: Study, rows: Rows) -> list[str]:
    """The paired speed-up in *virtual time* to the target of each MA rule over naive momentum
    (one line per task × privacy × K; :func:`asyncfl.studies.stats.paired_speedup` on ``time_to_target``)."""
    spec = study.spec
    groups = group(rows)
    lines = ["| task | privacy | K | MA-full speed-up in virtual time [95 % CI] | MA-light speed-up in virtual time [95 % CI] |",
             "|---|---|---|---|---|"]
    for task in spec.tasks:
        for label in study.settings_of(task.name):
            for m in spec.k_multiples:
                K = m * spec.buffer
                base = groups.get((task.name, label, "fedbuff-momentum", K), [])
                cells = [paired_speedup(base, groups.get((task.name, label, method, K), []), "time_to_target").text()
                         for method in ("fedbuff-ma-full", "fedbuff-ma-light")]
                lines.append(f"| {task.name} | {label} | {m}C = {K} | {cells[0]} | {cells[1]} |")
    return lines


#: (numerator method, denominator method): "how much faster is the second than the first"
BASELINE_PAIRS = (("fedbuff-momentum", "fedbuff-sgd"), ("fedbuff-sgd", "fedbuff-ma-full"), ("fedbuff-sgd", "fedbuff-ma-light"),
                  ("fedbuff-momentum", "fedbuff-nesterov"))


def baseline_table(study: Study, rows: Rows, labels: dict[str, str]) -> list[str]:
    """Paired steps-to-target speed-ups between other methods (:data:`BASELINE_PAIRS`: plain
    FedBuff SGD over naive momentum, each MA rule over plain SGD, Nesterov over momentum), one
    line per task × privacy × K: is momentum approximation faster than not using momentum at all?"""
    spec = study.spec
    groups = group(rows)
    pairs = [(a, b) for a, b in BASELINE_PAIRS if a in spec.methods and b in spec.methods]
    head = " | ".join(f"{labels[b]} over {labels[a]}" for a, b in pairs)
    lines = [f"| task | privacy | K | {head} |", "|---|---|---|" + "---|" * len(pairs)]
    for task in spec.tasks:
        for label in study.settings_of(task.name):
            for m in spec.k_multiples:
                K = m * spec.buffer
                cells = [paired_speedup(groups.get((task.name, label, a, K), []), groups.get((task.name, label, b, K), []))
                         .text(labels[b], labels[a]) for a, b in pairs]
                lines.append(f"| {task.name} | {label} | {m}C = {K} | " + " | ".join(cells) + " |")
    return lines
