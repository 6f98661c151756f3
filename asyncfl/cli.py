"""Command line: ``asyncfl run SCENARIO [--set section.key=value ...] [--out DIR]`` and friends.

Exit codes: 0 success; 2 bad input (scenario, arguments, run directory) with one clear message
and no traceback; 3 numerical fault (the model diverged; the run directory holds everything up
to that step); 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import sys
import time
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from asyncfl import scenario as scenario_mod
from asyncfl.errors import AsyncFLError, NumericalFault

EXIT_USAGE, EXIT_NUMERICAL, EXIT_INTERRUPTED = 2, 3, 130

err_console = Console(stderr=True, highlight=False)
console = Console(highlight=False)


class UsageError(AsyncFLError):
    pass


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so usage errors share the exit-2 path."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def default_out(name: str) -> Path:
    return Path("runs") / f"{name}-{time.strftime('%Y%m%d-%H%M%S')}"


# ---------------------------------------------------------------------------------------------
def _add_scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="scenario TOML file (see scenarios/)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a scenario key (repeatable); VALUE is read as TOML, else as a string")


def progress_bar(total: int, quiet: bool) -> Progress:
    return Progress(
        TextColumn("[bold]steps"), BarColumn(), MofNCompleteColumn(),
        TextColumn("virtual t={task.fields[vtime]:.4g}"), TextColumn("loss={task.fields[loss]}"),
        TimeElapsedColumn(), console=err_console, disable=quiet, transient=False,
    )


def summary_table(summary: dict[str, Any], out: Path) -> Table:
    table = Table(title=f"{summary.get('name')} — {summary.get('status')}", show_header=False)
    final = summary.get("final", {})
    rows = [
        ("server steps", summary.get("steps")),
        ("virtual time", final.get("time")),
        ("test loss", final.get("loss")),
        ("test accuracy", final.get("accuracy")),
        ("train objective", final.get("train_loss")),
        ("updates accepted", summary.get("updates_accepted")),
        ("dropped (stale) / cancelled (late)", f"{summary.get('updates_dropped_stale')} / {summary.get('updates_cancelled_late')}"),
        ("rejected (non-finite / norm)", f"{summary.get('updates_rejected_nonfinite')} / {summary.get('updates_rejected_norm')}"),
        ("client updates per second", summary.get("updates_per_second")),
        ("wall time [s]", summary.get("wall_time")),
        ("run directory", str(out)),
    ]
    for key, value in rows:
        if value is None or (isinstance(value, float) and value != value):
            continue
        table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
    return table


def cmd_run(args: argparse.Namespace) -> int:
    from asyncfl.runner import run_to_dir

    scenario = scenario_mod.load(args.scenario, args.overrides)
    out = Path(args.out) if args.out else default_out(scenario.name)
    with progress_bar(scenario.run.steps, args.quiet) as progress:
        bar = progress.add_task("run", total=scenario.run.steps, vtime=0.0, loss="–")

        def on_event(event: Any) -> None:
            fields: dict[str, Any] = {"vtime": event.time}
            if event.metrics is not None:
                fields["loss"] = f"{event.metrics['loss']:.4g}"
            progress.update(bar, completed=event.step, **fields)

        summary = asyncio.run(run_to_dir(scenario, out, overwrite=args.overwrite, on_event=on_event))
    if not args.quiet:
        console.print(summary_table(summary, out))
    return 0


def cmd_validate(args: argparse.Namespace) -> int:
    scenario = scenario_mod.load(args.scenario, args.overrides)
    console.print(scenario.to_toml(), markup=False)
    return 0


def register_core(sub: Any) -> None:
    p = sub.add_parser("run", help="run a scenario and write its run directory")
    _add_scenario_args(p)
    p.add_argument("--out", help="run directory (default: runs/NAME-TIMESTAMP)")
    p.add_argument("--overwrite", action="store_true", help="allow --out to be a non-empty directory")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary table")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("validate", help="check a scenario and print it with every default resolved")
    _add_scenario_args(p)
    p.set_defaults(func=cmd_validate)


# Other subcommands live next to their feature; each module has ``register(subparsers)``.
COMMAND_MODULES: list[str] = ["asyncfl.run_bias", "asyncfl.study_cli"]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="asyncfl", description="Simulate asynchronous federated learning.")
    parser.add_argument("--version", action="version", version=f"asyncfl {__import__('asyncfl').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    register_core(sub)
    for module in COMMAND_MODULES:
        importlib.import_module(module).register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args) or 0)
    except NumericalFault as exc:
        err_console.print(f"[bold red]numerical fault:[/] {exc}", markup=True, soft_wrap=True)
        return EXIT_NUMERICAL
    except AsyncFLError as exc:
        err_console.print(f"error: {exc}", markup=False, soft_wrap=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        err_console.print("interrupted", markup=False)
        return EXIT_INTERRUPTED


def entry() -> None:  # pragma: no cover
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
