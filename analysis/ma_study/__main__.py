"""``python -m analysis.ma_study SPEC.toml --out DIR``: the momentum-approximation study (issue 8;
docs/architecture.md §9, "Studies and sweeps"; docs/server-rules.md), run from the repository root.

Thin: the study itself is the rest of :mod:`analysis.ma_study` (spec, tuning, runs, tables,
figures, report) on the library's experiment engine. This module only declares the arguments,
validates the spec, draws a progress bar over the runs and says where the results are. Exit
codes are those of ``asyncfl`` (:func:`asyncfl.cli.main.run_script`): 2 bad input, 3 a run
diverged, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from asyncfl.cli.commands import format_arg, overwrite_arg, placement_args, quiet_arg
from asyncfl.cli.console import RunsDisplay, command_line, say, warn
from asyncfl.cli.exit_codes import EXIT_OK, of_runs
from asyncfl.cli.main import run_script
from asyncfl.run.parallel import Progress, RunOutcome, make_backend
from analysis.ma_study.design import load_spec
from analysis.ma_study.run import COMMAND, run_study


def study_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="study spec TOML (see analysis/study_small.toml)")
    p.add_argument("--out", required=True, help="study directory (resumable: completed runs are kept)")
    p.add_argument("--check", action="store_true", help="validate the spec and every scenario it implies, run nothing")
    overwrite_arg(p)
    placement_args(p)
    format_arg(p)
    quiet_arg(p, "no progress bar")


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


def main(argv: list[str] | None = None) -> int:
    return run_script(COMMAND, "Momentum-approximation study: tune, run, results.csv and report.md.", study_args, cmd_study, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
