"""``python -m analysis.ma_review SPEC.toml --out DIR``: the momentum-approximation review study
(issue 28; docs/ma-review.md), run from the repository root; ``python -m analysis.ma_review report
DIR`` recomputes ``report.md`` and the figures from the folder's ``results.csv``, ``tuning.csv``
and ``curves.csv`` alone.

Thin: arguments, a progress bar, exit codes as ``asyncfl``'s (2 bad input, 3 a run diverged in
evaluation, 130 interrupted)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from asyncfl.cli.commands import placement_args, quiet_arg
from asyncfl.cli.console import RunsDisplay, say, warn
from asyncfl.cli.exit_codes import EXIT_OK, of_runs
from asyncfl.cli.main import run_script
from asyncfl.errors import UsageError
from asyncfl.run.parallel import Progress, RunOutcome, make_backend
from analysis.ma_review.design import ReviewStudy, load_review
from analysis.ma_review.report import write_report
from analysis.ma_review.run import COMMAND, run_review


def review_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("spec", help="review spec TOML (analysis/ma_review.toml), or 'report' to redo the report of --out")
    p.add_argument("--out", required=True, help="study folder (resumable: finished runs are kept)")
    p.add_argument("--check", action="store_true", help="validate the spec and every scenario it implies, run nothing")
    p.add_argument("--extend", action="store_true", help="take over a folder of an earlier version of the spec, reusing its runs")
    p.add_argument("--collect", action="store_true",
                   help="run nothing: write the tables and report from the runs finished so far (missing ones are rows with status 'missing')")
    p.add_argument("--overwrite", action="store_true", help="take over a folder of another study")
    placement_args(p)
    quiet_arg(p, "no progress bar")


def cmd_review(args: argparse.Namespace) -> int:
    if args.spec == "report":
        out = Path(args.out)
        if not (out / "results.csv").is_file():
            raise UsageError(f"--out {out}: has no results.csv to report on")
        write_report(out)
        say(f"wrote {out / 'report.md'}")
        return EXIT_OK
    study = load_review(args.spec)
    if args.check:
        say(f"{args.spec}: valid review spec ({len(study.cells())} cells)")
        return EXIT_OK
    result, code = run_with_progress("review", study, Path(args.out), args, overwrite=args.overwrite, extend=args.extend,
                                     collect=args.collect)
    if not args.quiet:
        say(f"wrote {Path(args.out) / 'results.csv'} and {Path(args.out) / 'report.md'}")
    return code


def run_with_progress(label: str, study: ReviewStudy, out: Path, args: argparse.Namespace,
                      **options: Any) -> tuple[dict[str, Any], int]:
    """:func:`run_review` with a progress bar (each batch — the target, each tuning round, the
    evaluation — announced as it starts) on ``args``' workers; warns of every evaluation run that
    did not complete (or stop at its target) and returns the result with the exit code of the
    evaluation runs."""
    display = RunsDisplay(label, quiet=args.quiet)
    backend = make_backend(args.workers, args.ray)

    def on_run(outcome: RunOutcome, progress: Progress) -> None:
        if progress.done == 1:  # the first run of a batch: announce it
            if display.total:
                display.extend(display.total + progress.total)
            else:
                display.start(progress.total, backend.slots)
        display.finished(outcome.name, outcome.status, outcome.wall, outcome.reused, progress.eta(backend.slots))

    try:
        result = run_review(study, out, progress=on_run, backend=backend, **options)
    finally:
        display.close()
        backend.close()
    evaluation = {p: st for p, st in result["statuses"].items() if p.seed in study.review.seeds}
    for point, status in evaluation.items():
        if status != "completed" and point not in result["at_target"]:  # a run stopped at its target finished as asked
            warn(f"{status}: {point.rel_dir()}: {result['messages'].get(point, 'no message')}")
    return result, of_runs(list(evaluation.values()))


def main(argv: list[str] | None = None) -> int:
    return run_script(COMMAND, "Momentum-approximation review: target, held-out tuning, evaluation, report.", review_args,
                      cmd_review, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
