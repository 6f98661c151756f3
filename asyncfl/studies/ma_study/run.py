"""Running a study (docs/architecture.md, "Studies and sweeps"; docs/server-rules.md): tune every
group's server learning rate, run every seed at the chosen rate, then write ``results.csv``,
``tuning.csv``, ``scenarios/`` and ``report.md``. Resumable: a run already done
(:data:`~asyncfl.studies.ma_study.results.DONE_STATUSES`) is read back, not run again."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from asyncfl.errors import NumericalFault
from asyncfl.run import runner
from asyncfl.studies.ma_study.design import Point, Study
from asyncfl.studies.ma_study.outputs import RESULT_FIELDS, TUNING_FIELDS, write_csv, write_scenarios
from asyncfl.studies.ma_study.plan import TuningKey, count_runs, plan_tuning, tuning_score
from asyncfl.studies.ma_study.report import write_report
from asyncfl.studies.ma_study.results import DONE_STATUSES, first_reach, read_metrics, read_status, run_bias

#: called after every run with its point and status (the CLI's progress bar)
ProgressHook = Callable[[Point, str], None]


def execute(study: Study, point: Point, out: Path) -> str:
    """Run ``point`` into its directory unless already done; returns its status."""
    run_dir = out / point.rel_dir()
    status = read_status(run_dir)
    if status in DONE_STATUSES:
        return status
    try:
        runner.run_to_dir_blocking(study.scenario(point), run_dir, overwrite=True)
    except NumericalFault:
        pass  # the run directory records the divergence (summary status "diverged")
    return read_status(run_dir) or "missing"


def run_study(study: Study, out: str | Path, progress: ProgressHook | None = None,
              total_hook: Callable[[int], None] | None = None, fmt: str = "png") -> dict[str, Any]:
    """Tune, run and report (see :mod:`asyncfl.studies.ma_study`; figures as ``fmt``). Returns the rows written."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    spec = study.spec
    groups = plan_tuning(study)
    if total_hook is not None:
        total_hook(count_runs(study, groups))

    def run(point: Point) -> str:
        status = execute(study, point, out)
        if progress is not None:
            progress(point, status)
        return status

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

    rows = []
    for key, points in groups:
        task, dp, K, method = key
        target = study.tasks[task].target_accuracy
        for seed in spec.seeds_of(dp):
            point = Point(task, method, K, seed, dp, chosen[key], spec.steps)
            status = run(point)
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
