"""Running a batch of a study's points (docs/ma-review.md §2; the runner: docs/architecture.md §9)
through the parallel runner (:mod:`asyncfl.run.parallel`), resumable as a sweep is: a finished run
is read back, not run again; an interrupted one is resumed from its checkpoint or restarted in
place."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from asyncfl.run import outdir
from asyncfl.run.parallel import Backend, Progress, RunJob, RunOutcome, run_jobs
from analysis.ma_review.design import ReviewStudy
from analysis.ma_review.measures import read_state
from analysis.ma_review.scenarios import Point

#: called after every run with its outcome and the counts so far (the CLI's progress display)
ProgressHook = Callable[[RunOutcome, Progress], None]


def run_points(study: ReviewStudy, points: list[Point], out: Path, backend: Backend, progress: ProgressHook | None,
               owned: outdir.OutDir | None = None, messages: dict[Point, str] | None = None,
               stop_at: dict[Point, float] | None = None, at_target: set[Point] | None = None) -> dict[Point, str]:
    """Run (or read back) every point on ``backend``; returns each point's status
    (:func:`~analysis.ma_review.measures.read_state`; the message of each run that did not
    complete goes into ``messages``). A point in ``stop_at`` stops at the first evaluation
    reaching its target there (docs/studies.md §2.1); each point that stopped at its target
    before its horizon is added to ``at_target``. With ``owned`` (the claimed study folder) the
    run directories are recorded as the study's before they are written."""
    unique = list(dict.fromkeys(points))
    stop_at = stop_at or {}
    if owned is not None:
        owned.check_runs([p.rel_dir() for p in unique])
        owned.add_runs([p.rel_dir() for p in unique])
    jobs = [RunJob(str(p.rel_dir()), study.scenario(p, stop_at.get(p)), out / p.rel_dir()) for p in unique]
    outcomes = run_jobs(jobs, backend, progress)
    statuses = {}
    for p, o in zip(unique, outcomes):
        status, stopped = o.status, False
        if o.status in ("completed", "stopped"):
            read, stopped = read_state(out / p.rel_dir(), p.steps)
            status = read or o.status
        statuses[p] = status
        if stopped and at_target is not None:
            at_target.add(p)
        # a finished run's message: why it was run again
        if messages is not None and (not (status == "completed" or stopped) or o.message):
            messages[p] = " ".join((o.message or "no message").split())
    return statuses
