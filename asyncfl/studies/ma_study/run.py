"""Running a study (docs/architecture.md §9; docs/server-rules.md): tune every group's server
learning rate, run every seed at the chosen rate, then write ``results.csv``, ``tuning.csv``,
``scenarios/`` and ``report.md``.

The runs go through the parallel runner (:mod:`asyncfl.run.parallel`) in two waves: every
tuning run at once, then every seed at the chosen rates. Resumable as a sweep is: a finished run
is read back, an interrupted one resumed from its checkpoint or restarted in place."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from asyncfl.run.parallel import Backend, InProcess, Progress, RunJob, RunOutcome, run_jobs
from asyncfl.studies.ma_study.design import Point, Study
from asyncfl.studies.ma_study.outputs import RESULT_FIELDS, TUNING_FIELDS, write_csv, write_scenarios
from asyncfl.studies.ma_study.plan import TuningKey, count_runs, plan_tuning, tuning_score
from asyncfl.studies.ma_study.report import write_report
from asyncfl.studies.ma_study.results import first_reach, read_metrics, read_status, run_bias

#: called after every run with its outcome and the counts so far (the CLI's progress display)
ProgressHook = Callable[[RunOutcome, Progress], None]


def run_points(study: Study, points: list[Point], out: Path, backend: Backend, progress: ProgressHook | None) -> dict[Point, str]:
    """Run (or read back) every point on ``backend``; returns each point's status."""
    unique = list(dict.fromkeys(points))
    jobs = [RunJob(str(p.rel_dir()), study.scenario(p), out / p.rel_dir()) for p in unique]
    outcomes = run_jobs(jobs, backend, progress)
    return {p: (read_status(out / p.rel_dir()) or o.status) for p, o in zip(unique, outcomes)}


def run_study(study: Study, out: str | Path, progress: ProgressHook | None = None,
              total_hook: Callable[[int], None] | None = None, backend: Backend | None = None,
              fmt: str = "png") -> dict[str, Any]:
    """Tune, run and report (see :mod:`asyncfl.studies.ma_study`; figures as ``fmt``). Returns the rows written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    spec = study.spec
    backend = backend or InProcess()
    groups = plan_tuning(study)
    if total_hook is not None:
        total_hook(count_runs(study, groups))
    tuned = run_points(study, [p for _, points in groups if len(points) > 1 for p in points], out, backend, progress)

    def run(point: Point) -> str:
        return tuned[point]

    tuning_rows: list[dict[str, Any]] = []
    chosen: dict[TuningKey, float] = {}
    for key, points in groups:
        if not points:
            chosen[key] = chosen[(key[0], False, key[2], key[3])]
            continue
        best, best_score = points[0], -math.inf
        scored = []
        for point in points if len(points) > 1 else []:
            status = run(point)
            metrics = read_metrics(out / point.rel_dir())
            score = tuning_score(metrics, status)
            scored.append((point, score, metrics, status))
            if score > best_score:
                best, best_score = point, score
        chosen[key] = best.lr
        for point, score, metrics, status in scored:
            tuning_rows.append({
                "task": point.task, "dp": int(point.dp), "K": point.K, "method": point.method, "lr": point.lr,
                "score": score, "final_accuracy": metrics[-1]["accuracy"] if metrics else math.nan,
                "status": status, "chosen": int(point.lr == best.lr), "run_dir": str(point.rel_dir()),
            })

    finals = [Point(key[0], key[3], key[2], seed, key[1], chosen[key], spec.steps)
              for key, _ in groups for seed in spec.seeds_of(key[1])]
    status_of = run_points(study, finals, out, backend, progress)
    rows = []
    for key, points in groups:
        task, dp, K, method = key
        target = study.tasks[task].target_accuracy
        for seed in spec.seeds_of(dp):
            point = Point(task, method, K, seed, dp, chosen[key], spec.steps)
            status = status_of[point]
            run_dir = out / point.rel_dir()
            metrics = read_metrics(run_dir)
            step, vtime = first_reach(metrics, target) if status == "completed" else (math.nan, math.nan)
            rows.append({
                "task": task, "method": method, "K": K, "seed": seed, "dp": int(dp), "lr": chosen[key],
                "steps_to_target": step, "time_to_target": vtime,
                "final_accuracy": metrics[-1]["accuracy"] if metrics else math.nan,
                "bias": run_bias(run_dir, method), "target_accuracy": target,
                "final_loss": metrics[-1]["loss"] if metrics else math.nan, "steps": spec.steps,
                "status": status, "run_dir": str(point.rel_dir()),
            })
    write_csv(out / "results.csv", RESULT_FIELDS, rows)
    write_csv(out / "tuning.csv", TUNING_FIELDS, tuning_rows)
    write_scenarios(study, chosen, out / "scenarios")
    write_report(study, out, rows, tuning_rows, fmt)
    return {"results": rows, "tuning": tuning_rows, "chosen": chosen}
