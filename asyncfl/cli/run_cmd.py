"""``asyncfl run`` and ``asyncfl resume``: drive one run with a progress bar, handle Ctrl-C,
draw ``metrics.png`` and print the summary (docs/architecture.md, "Package layout";
docs/run-directory.md for what the run directory holds).

Loaded through the command registry only when one of these commands runs (it imports the
engine, hence torch), after :func:`asyncfl.cli.main.main` has started the figure process these
commands draw with (``args.figures``, :class:`asyncfl.figures.process.FigureProcess`): its
matplotlib import overlaps torch's and the run (docs/performance.md, "Start-up").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
from pathlib import Path
from typing import Any, Callable, Iterator

from asyncfl.cli.console import err_console, print_summary, progress_bar, warn
from asyncfl.cli.exit_codes import EXIT_INTERRUPTED, EXIT_OK
from asyncfl.cli.scenario_input import scenario_from_args
from asyncfl.config.memory import check_memory, record_warning
from asyncfl.config.stop import FINISHED_STATUSES
from asyncfl.errors import NumericalFault, RunInterrupted
from asyncfl.figures.process import FigureProcess
from asyncfl.run import outdir, rundir, runner


def default_out(name: str) -> Path:
    """``runs/NAME-TIMESTAMP``, always inside ``runs/`` (:func:`asyncfl.run.rundir.default_run_dir`)."""
    return rundir.default_run_dir(name)


@contextlib.contextmanager
def graceful_sigint() -> Iterator[Callable[[], bool]]:
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


def _drive_with_progress(total: int, start: int, quiet: bool, coroutine_of: Callable[..., Any], out: Path, fmt: str,
                         figures: FigureProcess) -> int:
    def _plot(out: Path) -> None:
        """``metrics.FORMAT`` for a run the CLI drove (library runs and studies skip it: ~0.3 s each),
        drawn by the figure process started before torch was imported (waiting for it when the
        run has already asked it to draw)."""
        figures.draw(out, fmt)

    with progress_bar(total, quiet) as progress, graceful_sigint() as should_stop:
        bar = progress.add_task("run", total=total, completed=start, vtime=0.0, loss="–")

        def on_event(event: Any) -> None:
            fields: dict[str, Any] = {"vtime": event.time}
            if event.metrics is not None:
                fields["loss"] = f"{event.metrics['loss']:.4g}"
            progress.update(bar, completed=event.step, **fields)

        try:  # the figure is started as soon as metrics.csv is complete, drawn while the run writes its last files
            summary = asyncio.run(coroutine_of(on_event=on_event, should_stop=should_stop,
                                               on_metrics_written=lambda: figures.start(out, fmt)))
        except NumericalFault:
            _plot(out)
            raise
        except RunInterrupted as exc:
            _plot(out)
            progress.stop()
            warn(f"interrupted: {exc}; checkpoint written to {out / 'checkpoint.pt'}")
            warn(f"resume with:  asyncfl resume {out}")
            return EXIT_INTERRUPTED
    _plot(out)
    if not quiet:
        print_summary(summary, out)
    return EXIT_OK


def cmd_run(args: argparse.Namespace) -> int:
    scenario = scenario_from_args(args)
    out = Path(args.out) if args.out else default_out(scenario.name)
    note = record_warning(scenario, check_memory(scenario))  # refusals that need no simulation, before the progress bar
    if note:
        warn(note)
    outdir.check_run_out(out)  # a run directory, never another command's folder or inside one
    rundir.check_out(out, overwrite=args.overwrite)

    def coroutine_of(**kw: Any) -> Any:
        return runner.run_to_dir(scenario, out, overwrite=args.overwrite, **kw)

    return _drive_with_progress(scenario.run.steps, 0, args.quiet, coroutine_of, out, args.format or "png", args.figures)


def cmd_resume(args: argparse.Namespace) -> int:
    """Every check first (:func:`asyncfl.run.runner.prepare_resume`): a refusal prints one
    message, shows no progress bar and touches no file, lock file included."""
    out = Path(args.run_dir)
    try:
        ready = runner.prepare_resume(out, accept_changed_code=args.accept_changed_code)
    except runner.AlreadyCompleted as done:
        warn(str(done))
        return EXIT_OK
    for change in ready.accepted:
        warn(f"note: {change.describe()}; accepted (--accept-changed-code), recorded in {out / 'components.json'}")
    plan = ready.plan
    if plan.checkpoint is None:
        warn(f"{out}: no checkpoint yet; restarting the run from scratch in this directory")
    else:
        warn(f"{out}: resuming after server step {plan.step}")

    def coroutine_of(**kw: Any) -> Any:
        return runner.resume_prepared(ready, **kw)

    return _drive_with_progress(plan.scenario.run.steps, plan.step, args.quiet, coroutine_of, out, args.format or "png",
                                args.figures)
