"""``asyncfl study SPEC.toml --out DIR``: the momentum-approximation study (issue 8).

Thin: the study itself lives in :mod:`analysis.study` (spec, tuning, runs, results) and
:mod:`analysis.study_report` (report.md and figures). This module only parses arguments and
draws a progress bar over the runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def cmd_study(args: Any) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

    from analysis.study import load_spec, run_study
    from asyncfl.cli.main import console, err_console

    study = load_spec(args.spec)  # validated in full before anything runs
    if args.check:
        console.print(f"{args.spec}: valid study spec ({len(study.spec.tasks)} task(s), {len(study.spec.methods)} method(s))")
        return 0
    with Progress(
        TextColumn("[bold]study runs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
        TextColumn("{task.fields[last]}"), console=err_console, disable=args.quiet,
    ) as progress:
        bar = progress.add_task("study", total=None, last="")

        def on_total(n: int) -> None:
            progress.update(bar, total=n)

        def on_run(point: Any, status: str) -> None:
            progress.update(bar, advance=1, last=f"{point.task} {point.method} K={point.K} dp={int(point.dp)} lr={point.lr:g} s{point.seed}: {status}")

        run_study(study, Path(args.out), progress=on_run, total_hook=on_total)
    if not args.quiet:
        console.print(f"wrote {Path(args.out) / 'results.csv'} and {Path(args.out) / 'report.md'}")
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("study", help="momentum-approximation study: tune, run, results.csv and report.md")
    p.add_argument("spec", help="study spec TOML (see analysis/study_small.toml)")
    p.add_argument("--out", required=True, help="study directory (resumable: completed runs are kept)")
    p.add_argument("--check", action="store_true", help="validate the spec and every scenario it implies, run nothing")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_study)
