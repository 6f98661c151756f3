"""The review's statistics, computed from ``results.csv`` and ``tuning.csv`` rows (docs/ma-review.md
§4; the estimators: docs/studies.md):

* per cell: the restricted mean steps to the target over the evaluation seeds (Kaplan–Meier area
  to the horizon; an unreached seed counts, censored at the horizon), how many reached it, the
  final accuracy's mean and Student-t interval, and the means of the bias, amplification, noise
  gain and ε columns;
* per pair of methods on the same seeds: ``RMST_base / RMST_rule`` with its paired-bootstrap
  interval and the range the crossing intervals allow, and the paired difference of final
  accuracy (absolute, and relative to the base's mean);
* per pair across K: the interaction (one-way ANOVA of the per-seed log ratios of restricted
  times across K, and their slope per doubling of K);
* per tuned cell: the learning-rate sensitivity from the tuning runs (the width in log₂ η where
  the tuning seeds' mean final accuracy stays within a tolerance of the best).

A run stopped at its target (``stopped_at_target = 1``, docs/studies.md §2.1) counts with its
crossing; its whole-run values (:data:`WHOLE_RUN`) are not measured, and neither is any mean or
difference of them over a cell holding such a run — a mean over the runs left would be one over
the slowest seeds. Those come out NaN with the count of stopped runs beside them
(``CellSummary.stopped``, ``Pair.final_measured``, :func:`stopped_tuning`), and the report prints
"not measured".
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any, NamedTuple

import numpy as np

from asyncfl.figures.ci import MeanCI, mean_ci
from asyncfl.studies.effects import Difference, Interaction, interaction, paired_difference
from asyncfl.studies.survival import Comparison, log_restricted_ratios, paired_rmst_ratio, restricted_mean
from asyncfl.studies.tuning import sensitivity
from analysis.ma_review.tables import crossing_measured, stopped_early

Rows = list[dict[str, Any]]
CellId = tuple[str, str, int, str]  # (task, privacy, K, method)

#: final-accuracy tolerance of the learning-rate sensitivity (absolute accuracy)
SENSITIVITY_TOLERANCE = 0.02


def cells(rows: Rows) -> dict[CellId, Rows]:
    """Evaluation rows by (task, privacy, K, method), each list sorted by seed; rows of runs that
    were not run (``missing``) are left out."""
    out: dict[CellId, Rows] = defaultdict(list)
    for r in rows:
        if r["status"] != "missing":
            out[(r["task"], r["privacy"], r["K"], r["method"])].append(r)
    return {k: sorted(v, key=lambda r: r["seed"]) for k, v in out.items()}


def times(runs: Rows) -> tuple[np.ndarray, np.ndarray]:
    """Each run's crossing point and whether it reached the target (a run that did not complete
    counts as not reaching it, at the horizon; one stopped at its target counts with its crossing)."""
    reached = np.array([bool(r["reached"]) and crossing_measured(r) for r in runs])
    t = np.array([r["cross_point"] if ok else r["horizon"] for r, ok in zip(runs, reached)], dtype=np.float64)
    return t, reached


def intervals(runs: Rows) -> list[tuple[float, float]]:
    """Each run's crossing interval ``(low, high]`` (``high = ∞`` when unreached)."""
    out = []
    for r in runs:
        if r["reached"] and crossing_measured(r):
            out.append((float(r["cross_low"]), float(r["cross_high"])))
        else:
            out.append((float(r["horizon"]), math.inf))
    return out


class CellSummary(NamedTuple):
    n: int
    reached: int
    rmst: float
    final: MeanCI
    lr: float
    means: dict[str, float]
    stopped: int = 0  # runs stopped at their target: final accuracy and the whole-run means not measured


MEAN_COLUMNS = ("bias", "amplification", "noise_gain", "iterate_noise", "epsilon", "epsilon_client_max", "epsilon_client_p50",
                "sigma", "xi")
#: the columns of the whole run, which a run stopped at its target does not measure (σ and ξ are
#: calibrated for the planned T steps before the run: they are)
WHOLE_RUN = ("final_accuracy", "best_accuracy", "final_loss", "time_end", "bias", "amplification", "noise_gain", "iterate_noise",
             "epsilon", "epsilon_client_max", "epsilon_client_p50")
NAN_CI = MeanCI(math.nan, math.nan, 0)


def summary(runs: Rows) -> CellSummary:
    t, reached = times(runs)
    horizon = float(runs[0]["horizon"])
    stopped = sum(stopped_early(r) for r in runs)
    means = {c: math.nan if stopped and c in WHOLE_RUN else _mean([r[c] for r in runs]) for c in MEAN_COLUMNS}
    final = NAN_CI if stopped else mean_ci([r["final_accuracy"] for r in runs])
    return CellSummary(len(runs), int(reached.sum()), restricted_mean(t, reached, horizon), final, float(runs[0]["lr"]), means,
                       stopped)


def _mean(values: list[float]) -> float:
    vals = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return float(np.mean(vals)) if vals else math.nan


class Pair(NamedTuple):
    """``rule`` against ``base`` on their common seeds."""

    speed: Comparison            # RMST_base / RMST_rule (> 1: the rule reaches the target sooner)
    final_diff: Any              # asyncfl.studies.effects.Difference of final accuracy, rule − base
    final_rel: tuple[float, float, float]  # the same relative to the base's mean final accuracy
    n: int
    final_measured: bool = True  # False where a run of either side stopped at its target: no final accuracy


def paired(base: Rows, rule: Rows) -> Pair | None:
    """The pair on the seeds both cells ran (None without two of them)."""
    seeds = sorted({r["seed"] for r in base} & {r["seed"] for r in rule})
    if not seeds:
        return None
    b = [r for r in base if r["seed"] in seeds]
    u = [r for r in rule if r["seed"] in seeds]
    bt, bd = times(b)
    rt, rd = times(u)
    speed = paired_rmst_ratio(bt, bd, rt, rd, float(b[0]["horizon"]), bounds=(intervals(b), intervals(u)))
    if any(stopped_early(r) for r in b + u):
        return Pair(speed, Difference(math.nan, math.nan, math.nan, 0), (math.nan,) * 3, len(seeds), False)
    diff = paired_difference([r["final_accuracy"] for r in b], [r["final_accuracy"] for r in u])
    base_mean = _mean([r["final_accuracy"] for r in b])
    rel = tuple(v / base_mean if base_mean else math.nan for v in (diff.mean, diff.low, diff.high))
    return Pair(speed, diff, rel, len(seeds))  # type: ignore[arg-type]


def across_k(by_cell: dict[CellId, Rows], task: str, privacy: str, base: str, rule: str) -> Interaction | None:
    """The interaction of ``rule`` over ``base`` across the K both ran (None with fewer than two)."""
    groups: dict[float, list[float]] = {}
    for (t, p, K, m), runs in sorted(by_cell.items()):
        if t != task or p != privacy or m != rule or (t, p, K, base) not in by_cell:
            continue
        b = by_cell[(t, p, K, base)]
        seeds = sorted({r["seed"] for r in b} & {r["seed"] for r in runs})
        bt, _ = times([r for r in b if r["seed"] in seeds])
        rt, _ = times([r for r in runs if r["seed"] in seeds])
        try:
            groups[float(K)] = list(log_restricted_ratios(bt, rt, float(runs[0]["horizon"])))
        except ValueError:
            continue
    if len(groups) < 2:
        return None
    try:
        return interaction(groups)
    except ValueError:
        return None


def tuning_by_cell(tuning: Rows) -> dict[CellId, dict[float, list[float]]]:
    """Each tuned cell's final accuracy per learning rate and tuning seed."""
    out: dict[CellId, dict[float, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in tuning:
        out[(r["task"], r["privacy"], r["K"], r["method"])][float(r["lr"])].append(float(r["final_accuracy"]))
    return {k: dict(v) for k, v in out.items()}


def stopped_tuning(tuning: Rows) -> dict[CellId, int]:
    """Each tuned cell with tuning runs stopped at their target, and how many: its final
    accuracies per rate, hence its learning-rate sensitivity, are not measured."""
    out: dict[CellId, int] = defaultdict(int)
    for r in tuning:
        if stopped_early(r):
            out[(r["task"], r["privacy"], r["K"], r["method"])] += 1
    return dict(out)


def lr_sensitivity(scores: dict[float, list[float]], tolerance: float = SENSITIVITY_TOLERANCE) -> float:
    """Width in log₂ η of the rates whose mean final accuracy is within ``tolerance`` of the best
    (:func:`asyncfl.studies.tuning.sensitivity`); NaN when no rate has a finite score."""
    finite = {lr: v for lr, v in scores.items() if all(math.isfinite(x) for x in v)}
    if not finite:
        return math.nan
    try:
        return float(sensitivity(scores, tolerance))
    except ValueError:
        return math.nan


def chosen_lr(tuning: Rows) -> dict[CellId, tuple[float, bool]]:
    """Each tuned cell's chosen rate and whether it is at an edge of the rates tried."""
    out = {}
    for r in tuning:
        if r["chosen"]:
            out[(r["task"], r["privacy"], r["K"], r["method"])] = (float(r["lr"]), bool(r["edge"]))
    return out


def reference_target(tuning: Rows) -> dict[str, tuple[float, float, float]]:
    """Per task: (reference's chosen lr, its mean final accuracy on the tuning seeds, the target)
    as the study fixed it (``reference = 1`` rows of ``tuning.csv``)."""
    out: dict[str, tuple[float, float, float]] = {}
    by: dict[tuple[str, float], list[float]] = defaultdict(list)
    target: dict[str, float] = {}
    for r in tuning:
        if r["reference"]:
            by[(r["task"], float(r["lr"]))].append(float(r["final_accuracy"]))
            target[r["task"]] = float(r["target_accuracy"])
    for task in target:
        best = max(((lr, float(np.mean(v))) for (t, lr), v in by.items() if t == task and all(math.isfinite(x) for x in v)),
                   key=lambda item: item[1], default=(math.nan, math.nan))
        out[task] = (best[0], best[1], target[task])
    return out
