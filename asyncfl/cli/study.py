"""``asyncfl study SPEC.toml --out DIR``: the momentum-approximation study (issue 8;
docs/architecture.md, "Studies and sweeps"; docs/server-rules.md).

Thin: the study itself is :mod:`asyncfl.studies.ma_study` (spec, tuning, runs, tables, figures,
report). This module only validates the spec, draws a progress bar over the runs and says
where the results are.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from asyncfl.cli.console import err_console, say
from asyncfl.cli.exit_codes import EXIT_OK
from asyncfl.studies.ma_study.design import load_spec
from asyncfl.studies.ma_study.run import run_study


def cmd_study(args: argparse.Namespace) -> int:
    study = load_spec(args.spec)  # validated in full before anything runs
    if args.check:
        say(f"{args.spec}: valid study spec ({len(study.spec.tasks)} task(s), {len(study.spec.methods)} method(s))")
        return EXIT_OK
    with Progress(
        TextColumn("[bold]study runs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(),
        TextColumn("{task.fields[last]}", markup=False), console=err_console, disable=args.quiet,
    ) as progress:
        bar = progress.add_task("study", total=None, last="")

        def on_total(n: int) -> None:
            progress.update(bar, total=n)

        def on_run(point: Any, status: str) -> None:
            progress.update(bar, advance=1, last=f"{point.task} {point.method} K={point.K} dp={int(point.dp)} lr={point.lr:g} s{point.seed}: {status}")

        run_study(study, Path(args.out), progress=on_run, total_hook=on_total, fmt=args.format or "png")
    if not args.quiet:
        say(f"wrote {Path(args.out) / 'results.csv'} and {Path(args.out) / 'report.md'}")
    return EXIT_OK
