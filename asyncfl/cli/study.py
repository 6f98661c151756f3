"""``asyncfl study SPEC.toml --out DIR``: the momentum-approximation study (issue 8;
docs/architecture.md, "Studies and sweeps"; docs/server-rules.md).

Thin: the study itself is :mod:`asyncfl.studies.ma_study` (spec, tuning, runs, tables, figures,
report). This module only validates the spec, draws a progress bar over the runs and says
where the results are.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from asyncfl.cli.console import RunsDisplay, command_line, say, warn
from asyncfl.cli.exit_codes import EXIT_OK, of_runs
from asyncfl.studies.ma_study.design import load_spec
from asyncfl.run.parallel import Progress, RunOutcome, make_backend
from asyncfl.studies.ma_study.run import run_study


def cmd_study(args: argparse.Namespace) -> int:
    study = load_spec(args.spec)  # validated in full before anything runs
    if args.check:
        say(f"{args.spec}: valid study spec ({len(study.spec.tasks)} task(s), {len(study.spec.methods)} method(s))")
        return EXIT_OK
    display = RunsDisplay("study", quiet=args.quiet)
    backend = make_backend(args.workers, args.ray)

    def on_run(outcome: RunOutcome, progress: Progress) -> None:
        display.finished(outcome.name, outcome.status, outcome.wall, outcome.reused, progress.eta(backend.slots))

    def on_total(n: int) -> None:  # the first call announces the runs, later ones add widened grid points
        if display.total:
            display.extend(n)
        else:
            display.start(n, backend.slots)

    try:
        result = run_study(study, Path(args.out), progress=on_run, total_hook=on_total, backend=backend,
                           fmt=args.format or "png", overwrite=args.overwrite, command=command_line(args))
    finally:
        display.close()
        backend.close()
    if not args.quiet:
        say(f"wrote {Path(args.out) / 'results.csv'} and {Path(args.out) / 'report.md'}")
    # a tuning run that diverged is how a learning-rate grid finds its edge (scored −∞, in
    # tuning.csv); every other run that did not complete makes the exit code non-zero
    statuses = {**{p: st for p, st in result["tuning_statuses"].items() if st != "diverged"}, **result["statuses"]}
    failed = [(p, st) for p, st in statuses.items() if st != "completed"]
    for point, status in failed:  # always said: the exit code is not 0 because of them
        warn(f"{status}: {point.rel_dir()}: {result['messages'].get(point, 'no message')}")
    if failed:
        warn(f"{len(failed)} of {len(statuses)} runs did not complete (results.csv and tuning.csv have each status and message)")
    return of_runs(list(statuses.values()))
