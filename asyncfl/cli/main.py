"""Command line: ``asyncfl run SCENARIO [--set section.key=value ...] [--out DIR]`` and friends.

Exit codes: 0 success; 2 bad input (scenario, arguments, run directory) with one clear message
and no traceback; 3 numerical fault (the model diverged; the run directory holds everything up
to that step and a checkpoint of it); 130 interrupted (Ctrl-C / SIGINT: the run stops between two
events, writes ``checkpoint.pt`` and prints the ``asyncfl resume RUN_DIR`` command; a second
Ctrl-C aborts at once, leaving the previous checkpoint).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from asyncfl.config import scenario as scenario_mod
from asyncfl.errors import AsyncFLError, NumericalFault, RunInterrupted

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


@contextlib.contextmanager
def graceful_sigint() -> Any:
    """The first SIGINT (or SIGTERM, as batch schedulers send) asks the run to stop at the next
    event (then it checkpoints); a second one raises KeyboardInterrupt as usual. Yields the
    ``should_stop`` callable."""
    requested = [False]

    def handler(signum: int, frame: Any) -> None:
        if requested[0]:
            raise KeyboardInterrupt
        requested[0] = True
        err_console.print("stopping after the current event to write a checkpoint (Ctrl-C again aborts without one)", markup=False)

    try:
        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    except ValueError:  # not the main thread: no signal handling
        yield lambda: False
        return
    try:
        yield lambda: requested[0]
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def _drive_with_progress(total: int, start: int, quiet: bool, coroutine_of: Callable[..., Any], out: Path) -> int:
    with progress_bar(total, quiet) as progress, graceful_sigint() as should_stop:
        bar = progress.add_task("run", total=total, completed=start, vtime=0.0, loss="–")

        def on_event(event: Any) -> None:
            fields: dict[str, Any] = {"vtime": event.time}
            if event.metrics is not None:
                fields["loss"] = f"{event.metrics['loss']:.4g}"
            progress.update(bar, completed=event.step, **fields)

        try:
            summary = asyncio.run(coroutine_of(on_event=on_event, should_stop=should_stop))
        except NumericalFault:
            _plot(out)
            raise
        except RunInterrupted as exc:
            _plot(out)
            progress.stop()
            err_console.print(f"interrupted: {exc}; checkpoint written to {out / 'checkpoint.pt'}", markup=False, soft_wrap=True)
            err_console.print(f"resume with:  asyncfl resume {out}", markup=False, soft_wrap=True)
            return EXIT_INTERRUPTED
    _plot(out)
    if not quiet:
        console.print(summary_table(summary, out))
    return 0


def _plot(out: Path) -> None:
    """``metrics.png`` for a run the CLI drove (library runs and studies skip it: ~0.3 s each)."""
    from asyncfl.figures.metrics import plot_metrics

    plot_metrics([out], out / "metrics.png")


def cmd_run(args: argparse.Namespace) -> int:
    from asyncfl.run.runner import run_to_dir

    scenario = scenario_mod.load(args.scenario, args.overrides)
    out = Path(args.out) if args.out else default_out(scenario.name)

    def coroutine_of(**kw: Any) -> Any:
        return run_to_dir(scenario, out, overwrite=args.overwrite, **kw)

    return _drive_with_progress(scenario.run.steps, 0, args.quiet, coroutine_of, out)


def cmd_resume(args: argparse.Namespace) -> int:
    from asyncfl.run.runner import AlreadyCompleted, inspect_run_dir, resume_dir

    out = Path(args.run_dir)
    try:
        plan = inspect_run_dir(out)
        if plan.status == "completed":
            raise AlreadyCompleted("")
    except AlreadyCompleted:
        err_console.print(f"{out}: the run is already completed; nothing to resume", markup=False, soft_wrap=True)
        return 0
    if plan.checkpoint is None:
        err_console.print(f"{out}: no checkpoint yet; restarting the run from scratch in this directory", markup=False, soft_wrap=True)
    else:
        err_console.print(f"{out}: resuming after server step {plan.step}", markup=False, soft_wrap=True)

    def coroutine_of(**kw: Any) -> Any:
        return resume_dir(out, **kw)

    return _drive_with_progress(plan.scenario.run.steps, plan.step, args.quiet, coroutine_of, out)


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
    p = sub.add_parser("resume", help="continue an interrupted or killed run from its last checkpoint")
    p.add_argument("run_dir", help="the run directory (written by 'asyncfl run')")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no summary table")
    p.set_defaults(func=cmd_resume)
    p = sub.add_parser("validate", help="check a scenario and print it with every default resolved")
    _add_scenario_args(p)
    p.set_defaults(func=cmd_validate)


# Other subcommands live next to their feature; each module has ``register(subparsers)``.
COMMAND_MODULES: list[str] = [
    "asyncfl.run.bias_report", "asyncfl.cli.scenario_library", "asyncfl.figures.metrics", "asyncfl.cli.privacy", "asyncfl.cli.study",
]


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
    except OSError as exc:  # an unwritable --out, a full disk: the system's message, no traceback
        err_console.print(f"error: {exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''}", markup=False, soft_wrap=True)
        return EXIT_USAGE
    except KeyboardInterrupt:
        err_console.print("interrupted", markup=False)
        return EXIT_INTERRUPTED


def entry() -> None:  # pragma: no cover
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
