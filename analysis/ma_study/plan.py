"""The tuning plan of a study (docs/architecture.md, "Studies and sweeps"; docs/server-rules.md):
one group of points per (task, DP, K, method) — its server-lr grid at the tuning seed and budget
— and the score that picks the winner."""

from __future__ import annotations

import dataclasses
import math

from analysis.ma_study.design import Point, Study
from analysis.ma_study.spec import NODP

#: (task, privacy label, K, method): one tuned server learning rate each
TuningKey = tuple[str, str, int, str]


def plan_tuning(study: Study) -> list[tuple[TuningKey, list[Point]]]:
    """Every tuning group in run order, no-DP first (``tuning.dp = "reuse-nodp"`` reads its
    choices; such a DP group has no points). A group of one point is not tuned: its only lr is
    taken as is."""
    spec = study.spec
    groups = []
    for task in spec.tasks:
        for label in study.settings_of(task.name):  # no-DP first: tuning.dp = "reuse-nodp" reads its choices
            for method in spec.methods:
                for K in study.concurrencies(method):
                    grid = spec.lr_grid.of(method) or []
                    if label != NODP and spec.tuning.dp == "reuse-nodp":
                        grid = []  # takes the no-DP choice (run_study)
                    points = [Point(task.name, method, K, spec.tuning.seed, label, lr, spec.tuning_steps) for lr in grid]
                    groups.append(((task.name, label, K, method), points))
    return groups


def best_of(scores: list[float]) -> int:
    """Index of the highest score (the first of equal ones; 0 when none is finite)."""
    best, best_score = 0, -math.inf
    for i, score in enumerate(scores):
        if score > best_score:
            best, best_score = i, score
    return best


def widened(points: list[Point], scores: list[float]) -> Point | None:
    """The next grid point when the best score (:func:`best_of`) is at an edge of the grid sorted
    by learning rate: one ratio of the two outermost values beyond that edge. ``None`` when the
    best is interior, or when no run scored (every one diverged)."""
    if len(points) < 2 or not any(math.isfinite(s) for s in scores):
        return None
    order = sorted(range(len(points)), key=lambda i: points[i].lr)
    best = best_of(scores)
    if best == order[0]:
        ratio = points[order[1]].lr / points[order[0]].lr
        return dataclasses.replace(points[best], lr=float(f"{points[best].lr / ratio:.6g}"))
    if best == order[-1]:
        ratio = points[order[-1]].lr / points[order[-2]].lr
        return dataclasses.replace(points[best], lr=float(f"{points[best].lr * ratio:.6g}"))
    return None


def count_runs(study: Study, groups: list[tuple[TuningKey, list[Point]]]) -> int:
    """How many runs the study executes (tuning runs of groups with a choice, then every seed)."""
    n_tune = sum(len(points) if len(points) > 1 else 0 for _, points in groups)
    n_main = sum(len(study.seeds_of(key[1])) for key, _ in groups)
    return n_tune + n_main


def tuning_score(metrics: list[dict[str, float]], status: str | None) -> float:
    """Mean test accuracy over the evaluations after step 0; −∞ for a diverged run."""
    if status != "completed":
        return -math.inf
    acc = [r["accuracy"] for r in metrics if r["step"] > 0 and math.isfinite(r.get("accuracy", math.nan))]
    return sum(acc) / len(acc) if acc else -math.inf
