"""The tuning plan of a study (docs/architecture.md, "Studies and sweeps"; docs/server-rules.md):
one group of points per (task, DP, K, method) — its server-lr grid at the tuning seed and budget
— and the score that picks the winner."""

from __future__ import annotations

import math

from asyncfl.studies.ma_study.design import Point, Study

#: (task, dp, K, method): one tuned server learning rate each
TuningKey = tuple[str, bool, int, str]


def plan_tuning(study: Study) -> list[tuple[TuningKey, list[Point]]]:
    """Every tuning group in run order, no-DP first (``tuning.dp = "reuse-nodp"`` reads its
    choices; such a DP group has no points). A group of one point is not tuned: its only lr is
    taken as is."""
    spec = study.spec
    groups = []
    for task in spec.tasks:
        for dp in sorted(spec.dp):  # no-DP first: tuning.dp = "reuse-nodp" reads its choices
            for method in spec.methods:
                for K in study.concurrencies(method):
                    grid = spec.lr_grid.of(method) or []
                    if dp and spec.tuning.dp == "reuse-nodp":
                        grid = []  # takes the no-DP choice (run_study)
                    points = [Point(task.name, method, K, spec.tuning.seed, dp, lr, spec.tuning_steps) for lr in grid]
                    groups.append(((task.name, dp, K, method), points))
    return groups


def count_runs(study: Study, groups: list[tuple[TuningKey, list[Point]]]) -> int:
    """How many runs the study executes (tuning runs of groups with a choice, then every seed)."""
    n_tune = sum(len(points) if len(points) > 1 else 0 for _, points in groups)
    n_main = sum(len(study.spec.seeds_of(key[1])) for key, _ in groups)
    return n_tune + n_main


def tuning_score(metrics: list[dict[str, float]], status: str | None) -> float:
    """Mean test accuracy over the evaluations after step 0; −∞ for a diverged run."""
    if status != "completed":
        return -math.inf
    acc = [r["accuracy"] for r in metrics if r["step"] > 0 and math.isfinite(r.get("accuracy", math.nan))]
    return sum(acc) / len(acc) if acc else -math.inf
