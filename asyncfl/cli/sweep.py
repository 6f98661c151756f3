"""``asyncfl sweep SCENARIO --grid KEY=V1,V2 … --seeds 0-4 --out DIR``: the cartesian product of
the grid over scenario keys and seeds, run on every core or on Ray (docs/architecture.md §9).

Thin: the sweep is :mod:`asyncfl.studies.sweep` and the runner :mod:`asyncfl.run.parallel`. Every
point is validated before any runs; rerunning the command resumes; Ctrl-C stops the sweep (the
runs in flight stop with it) and the same command resumes it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from asyncfl.cli.console import RunsDisplay, command_line, console, say, warn
from asyncfl.cli.exit_codes import of_runs
from asyncfl.config import scenario as scenario_mod
from asyncfl.config.stop import FINISHED_STATUSES
from asyncfl.run import tracking
from asyncfl.run.parallel import Progress, RunOutcome, make_backend
from asyncfl.studies.sweep.grid import Grid, parse_grid, parse_seeds
from asyncfl.studies.sweep.run import run_sweep


def cmd_sweep(args: argparse.Namespace) -> int:
    axes = tuple(parse_grid(g) for g in args.grid)
    seeds = parse_seeds(args.seeds) if args.seeds else None
    if seeds is None:  # the scenario's own seed, after --set
        seeds = (scenario_mod.load(args.scenario, args.overrides).seed,)
    grid = Grid(Path(args.scenario), tuple(args.overrides), axes, seeds)
    notes: list[str] = []
    points = grid.scenarios(notes)  # every point valid before a worker starts
    for note in notes:
        warn(note)
    with tracking.sweep_parent(points[0][2] if points else None, Path(args.out).name):  # before the workers start: they inherit it
        return _run(args, grid, axes)


def _run(args: argparse.Namespace, grid: Grid, axes: tuple) -> int:
    display = RunsDisplay("sweep", quiet=args.quiet)
    backend = make_backend(args.workers, args.ray)

    def on_outcome(outcome: RunOutcome, progress: Progress) -> None:
        display.finished(outcome.name, outcome.status, outcome.wall, outcome.reused, progress.eta(backend.slots))

    try:
        result = run_sweep(grid, Path(args.out), backend, extend=args.extend, on_outcome=on_outcome, on_start=display.start,
                           overwrite=args.overwrite, command=command_line(args))
    finally:
        display.close()
        backend.close()
    failed = [o for o in result.outcomes if o.status not in FINISHED_STATUSES]
    if not args.quiet:
        console.print(summary_table(result.summary, [a.key for a in axes]))
        say(f"wrote {Path(args.out) / 'results.csv'} and {Path(args.out) / 'summary.csv'}")
    for o in result.outcomes:  # a kept run that was not this command's run (another resolved scenario or asyncfl)
        if o.status == "completed" and o.message:
            warn(f"{o.name}: {o.message}")
    for o in failed:  # always said, even with --quiet: the exit code is not 0 because of them
        warn(f"{o.status}: {o.name}: {o.message or 'no message'}")
    if failed:
        warn(f"{len(failed)} of {len(result.outcomes)} runs did not complete (results.csv has each status and message)")
    return of_runs([o.status for o in result.outcomes])


def summary_table(rows: list[dict], keys: list[str]) -> Table:
    """Final accuracy and loss per grid point, mean ± 95 % CI over the completed seeds."""
    table = Table(title="sweep: mean ± 95% CI over seeds")
    for k in keys:
        table.add_column(k)
    for col in ("completed", "accuracy", "loss", "bias"):
        table.add_column(col, justify="right")
    table.add_column("not completed")
    for row in rows:
        cells = [str(row[k]) for k in keys] + [f"{row['completed']}/{row['runs']}"]
        for m in ("accuracy", "loss", "bias"):
            mean, half = row[f"{m}_mean"], row[f"{m}_ci95"]
            cells.append("–" if mean != mean else f"{mean:.4g}" if half != half else f"{mean:.4g} ± {half:.2g}")
        cells.append(row.get("not_completed", "") or "")
        table.add_row(*cells)
    return table
