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

from asyncfl.run import outdir
from asyncfl.run.parallel import Backend, InProcess, Progress, RunJob, RunOutcome, run_jobs
from analysis.ma_study.design import Point, Study
from analysis.ma_study.outputs import POOLED_FIELDS, RESULT_FIELDS, TUNING_FIELDS, write_csv, write_scenarios
from analysis.ma_study.plan import TuningKey, best_of, count_runs, plan_tuning, tuning_score, widened
from analysis.ma_study.pooled import pooled_reference
from analysis.ma_study.report import write_report
from analysis.ma_study.results import (first_reach, read_metrics, read_status, run_amplification, run_bias,
                                              run_epsilon)
from analysis.ma_study.spec import NODP

#: how the study is run (recorded in the folders it makes, named in its messages)
COMMAND = "python -m analysis.ma_study"
#: the study's output folder (docs/run-directory.md §13): what it writes, and its legacy record file
KIND = outdir.register(outdir.Kind("study", COMMAND, ("results.csv", "tuning.csv", "pooled.csv", "report.md", "curves_*.*",
                                                      "bias.*", "speedup_vs_bias.*"), {"scenarios": ("study_*.toml",)},
                                   "tuning.csv", article="an asyncfl study folder"))

#: called after every run with its outcome and the counts so far (the CLI's progress display)
ProgressHook = Callable[[RunOutcome, Progress], None]


def run_points(study: Study, points: list[Point], out: Path, backend: Backend, progress: ProgressHook | None,
               owned: outdir.OutDir | None = None, messages: dict[Point, str] | None = None) -> dict[Point, str]:
    """Run (or read back) every point on ``backend``; returns each point's status (and puts the
    message of each run that did not complete into ``messages``). With ``owned`` (the claimed
    study folder) the run directories are recorded as the study's before they are written."""
    unique = list(dict.fromkeys(points))
    if owned is not None:
        owned.check_runs([p.rel_dir() for p in unique])
        owned.add_runs([p.rel_dir() for p in unique])
    jobs = [RunJob(str(p.rel_dir()), study.scenario(p), out / p.rel_dir()) for p in unique]
    outcomes = run_jobs(jobs, backend, progress)
    statuses = {}
    for p, o in zip(unique, outcomes):
        status = o.status if o.status not in ("completed",) else (read_status(out / p.rel_dir()) or o.status)
        statuses[p] = status
        if messages is not None and (status != "completed" or o.message):  # a completed run's message: why it was run again
            messages[p] = " ".join((o.message or "no message").split())
    return statuses


def run_study(study: Study, out: str | Path, progress: ProgressHook | None = None,
              total_hook: Callable[[int], None] | None = None, backend: Backend | None = None,
              fmt: str = "png", overwrite: bool = False, command: str = COMMAND) -> dict[str, Any]:
    """Tune, run and report (see :mod:`analysis.ma_study`; figures as ``fmt``) into
    ``out``, claimed first (:func:`asyncfl.run.outdir.claim`: a study folder of this spec's
    digest resumes, another is refused unless ``overwrite``). Returns the rows written; each
    row's ``status`` and ``message`` say how its run ended."""
    out = Path(out)
    owned = outdir.claim(out, KIND.name, command, study.digest(), overwrite=overwrite)
    try:
        return _run_study(study, out, owned, progress, total_hook, backend, fmt)
    finally:
        owned.release()


def _run_study(study: Study, out: Path, owned: outdir.OutDir, progress: ProgressHook | None,
               total_hook: Callable[[int], None] | None, backend: Backend | None, fmt: str) -> dict[str, Any]:
    spec = study.spec
    messages: dict[Point, str] = {}
    backend = backend or InProcess()
    groups = plan_tuning(study)
    n_runs = count_runs(study, groups)
    if total_hook is not None:
        total_hook(n_runs)
    tuned = run_points(study, [p for _, points in groups if len(points) > 1 for p in points], out, backend, progress, owned, messages)
    grids = {key: list(points) for key, points in groups}
    curves: dict[Point, list[dict[str, float]]] = {}  # each tuning run's metrics.csv, read once

    def curve(point: Point) -> list[dict[str, float]]:
        if point not in curves:
            curves[point] = read_metrics(out / point.rel_dir())
        return curves[point]

    # widen every grid whose best learning rate sits at an edge (tuning.widen rounds at most)
    for _ in range(spec.tuning.widen):
        extra = {}
        for key, points in grids.items():
            if len(points) > 1:
                nxt = widened(points, [tuning_score(curve(p), tuned[p]) for p in points])
                if nxt is not None:
                    extra[key] = nxt
        if not extra:
            break
        n_runs += len(extra)
        if total_hook is not None:
            total_hook(n_runs)
        tuned.update(run_points(study, list(extra.values()), out, backend, progress, owned, messages))
        for key, point in extra.items():
            grids[key].append(point)

    tuning_rows: list[dict[str, Any]] = []
    chosen: dict[TuningKey, float] = {}
    for key, _ in groups:
        points = grids[key]
        if not points:
            chosen[key] = chosen[(key[0], NODP, key[2], key[3])]
            continue
        if len(points) == 1:
            chosen[key] = points[0].lr
            continue
        scored = [(point, tuning_score(curve(point), tuned[point]), curve(point), tuned[point]) for point in points]
        best = scored[best_of([sc for _, sc, _, _ in scored])][0]
        chosen[key] = best.lr
        lrs = sorted(p.lr for p in points)
        for point, score, metrics, status in sorted(scored, key=lambda item: item[0].lr):
            tuning_rows.append({
                "task": point.task, "dp": int(point.dp), "privacy": point.privacy, "K": point.K, "method": point.method,
                "lr": point.lr, "score": score, "final_accuracy": metrics[-1]["accuracy"] if metrics else math.nan,
                "status": status, "chosen": int(point.lr == best.lr),
                "edge": int(point.lr == best.lr and best.lr in (lrs[0], lrs[-1])), "run_dir": str(point.rel_dir()),
                "message": messages.get(point, ""),
            })

    finals = [Point(key[0], key[3], key[2], seed, key[1], chosen[key], spec.steps)
              for key, _ in groups for seed in study.seeds_of(key[1])]
    status_of = run_points(study, finals, out, backend, progress, owned, messages)
    rows = []
    for key, points in groups:
        task, label, K, method = key
        target = study.tasks[task].target_accuracy
        for seed in study.seeds_of(label):
            point = Point(task, method, K, seed, label, chosen[key], spec.steps)
            status = status_of[point]
            run_dir = out / point.rel_dir()
            metrics = read_metrics(run_dir)
            step, vtime = first_reach(metrics, target) if status == "completed" else (math.nan, math.nan)
            rows.append({
                "task": task, "method": method, "K": K, "seed": seed, "dp": int(point.dp), "privacy": label,
                "lr": chosen[key], "steps_to_target": step, "time_to_target": vtime,
                "final_accuracy": metrics[-1]["accuracy"] if metrics else math.nan,
                "best_accuracy": max((r["accuracy"] for r in metrics), default=math.nan),
                "bias": run_bias(run_dir, method), "amplification": run_amplification(run_dir, method),
                "target_accuracy": target, "final_loss": metrics[-1]["loss"] if metrics else math.nan,
                "steps": spec.steps, "epsilon": run_epsilon(run_dir), "status": status, "run_dir": str(point.rel_dir()),
                "message": messages.get(point, ""),
            })
    pooled_rows = pooled_reference(study, out)
    write_csv(out / "results.csv", RESULT_FIELDS, rows)
    write_csv(out / "tuning.csv", TUNING_FIELDS, tuning_rows)
    write_csv(out / "pooled.csv", POOLED_FIELDS, pooled_rows)
    write_scenarios(study, chosen, out / "scenarios")
    write_report(study, out, rows, tuning_rows, fmt, pooled_rows)
    return {"results": rows, "tuning": tuning_rows, "chosen": chosen, "pooled": pooled_rows, "messages": messages,
            "tuning_statuses": tuned, "statuses": status_of}
