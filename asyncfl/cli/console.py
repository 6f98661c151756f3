"""Terminal output of the CLI (docs/architecture.md, "Package layout"): the two rich consoles,
one-line messages, the run progress bar and the run summary table.

Paths, scenario names and values are printed verbatim: the consoles interpret no markup, no
emoji codes and highlight nothing, and messages are never wrapped (a long path stays one
string that can be copied). Torch-free: ``asyncfl --help``, ``validate`` and ``scenarios`` use it.
"""

from __future__ import annotations

import os
import shlex
import sys
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

def _width(stream: Any) -> int | None:
    """None (rich's own: the terminal's, or ``COLUMNS``) on a terminal; else wide enough that a
    table written to a file or a pipe is never cut to 80 columns (cells shortened to "0.…")."""
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return None if tty or os.environ.get("COLUMNS") else NOT_A_TERMINAL_WIDTH


#: the width of tables written to a file or a pipe (they are as wide as their content, at most this)
NOT_A_TERMINAL_WIDTH = 1000
#: standard output: results (tables, ``wrote …`` lines, ``validate``'s scenario)
console = Console(highlight=False, markup=False, emoji=False, width=_width(sys.stdout))
#: standard error: progress, errors and notices
err_console = Console(stderr=True, highlight=False, markup=False, emoji=False, width=_width(sys.stderr))


def command_line(args: Any) -> str:
    """The command as typed (``asyncfl sweep …``; :func:`asyncfl.cli.main.main` records it),
    written into the folders a command makes."""
    return str(getattr(args, "command_line", "") or "asyncfl " + " ".join(shlex.quote(a) for a in sys.argv[1:]))


def say(text: str) -> None:
    """One message on standard output, verbatim."""
    console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)


def warn(text: str) -> None:
    """One message on standard error, verbatim."""
    err_console.print(text, markup=False, highlight=False, emoji=False, soft_wrap=True)


def fault(label: str, text: str) -> None:
    """``label`` in bold red, then ``text`` verbatim, on standard error."""
    err_console.print(Text.assemble((label, "bold red"), " ", text), soft_wrap=True)


def progress_bar(total: int, quiet: bool) -> Progress:
    """The bar of ``asyncfl run`` / ``resume``: steps, virtual time, last test loss, wall time."""
    return Progress(
        TextColumn("[bold]steps"), BarColumn(), MofNCompleteColumn(),
        TextColumn("virtual t={task.fields[vtime]:.4g}"), TextColumn("loss={task.fields[loss]}", markup=False),
        TimeElapsedColumn(), console=err_console, disable=quiet, transient=False,
    )


def print_summary(summary: dict[str, Any], out: Any) -> None:
    """The end of a run: its name and status, the table of numbers, and the run directory. The
    name and the directory are lines of their own (a table cell would wrap them where they can
    no longer be copied), printed verbatim."""
    stop = summary.get("stop")
    why = f" ({stop.get('condition')} at server step {stop.get('step')})" if isinstance(stop, dict) else ""
    say(f"{summary.get('name')} — {summary.get('status')}{why}")
    console.print(summary_table(summary))
    say(f"run directory: {out}")


def summary_table(summary: dict[str, Any]) -> Table:
    """The numbers of a run, from its ``summary.json`` (docs/run-directory.md)."""
    table = Table(show_header=False)
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
    ]
    rows += privacy_rows(summary.get("privacy"))
    for key, value in rows:
        if value is None or (isinstance(value, float) and value != value):
            continue
        table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
    return table


def privacy_rows(p: dict[str, Any] | None) -> list[tuple[str, Any]]:
    """A private run's ε next to its clients' (docs/privacy.md §10–11): the mechanism's ε and
    what it rests on, and the per-client ε composed without amplification (max / median)."""
    if not p:
        return []

    def num(v: Any) -> str:
        return "inf" if v is None else f"{v:.4g}"

    rows: list[tuple[str, Any]] = [(f"ε at δ = {p.get('delta'):g} ({p.get('sampling')}: {p.get('claim')})", num(p.get("epsilon_spent")))]
    if "epsilon_client_max" in p:
        rows.append(("ε per client, max / median (no amplification)",
                     f"{num(p['epsilon_client_max'])} / {'–' if p.get('epsilon_client_p50') is None else num(p['epsilon_client_p50'])}"
                     f" (μ-GDP max {p.get('mu_client_max', 0.0):.4g}, {p.get('participations_max')} participations)"))
    if p.get("epsilon_lower") is not None:  # random allocation's lower bound (docs/privacy.md §13)
        rows.append(("ε lower bound (no accountant can prove less)", num(p["epsilon_lower"])))
    trade = p.get("tradeoff") or {}
    if isinstance(trade.get("run"), dict):  # the f-DP trade-off (docs/privacy.md §15)
        def tprs(points: Any) -> str:
            return " / ".join(f"{v:.3g}" for v in points.values()) if isinstance(points, dict) else "–"
        rows.append((f"attacker TPR at FPR {' / '.join(f'{a:g}' for a in trade.get('fpr', []))}, run; busiest client",
                     f"{tprs(trade['run'])}; {tprs(trade.get('busiest_client'))}"))
    if p.get("clients_retired") is not None:  # the privacy filter (docs/privacy.md §14)
        rows.append((f"clients retired at client_budget = {p.get('client_budget'):g}", p["clients_retired"]))
    return rows


class RunsDisplay:
    """Progress over many runs (``sweep``, ``study``, ``privacy``): done / running / failed and
    the ETA. On a terminal a live bar; otherwise (a log file, CI) one plain line per finished
    run. Call :meth:`start` with the number of runs and the runs at once, :meth:`finished` per
    outcome, :meth:`close` at the end."""

    def __init__(self, label: str, quiet: bool = False) -> None:
        self.label, self.quiet = label, quiet
        self.live = err_console.is_terminal and not quiet
        self._progress: Progress | None = None
        self._bar: Any = None
        self.total = self.slots = self.done = self.failed = 0

    def start(self, total: int, slots: int) -> None:
        self.total, self.slots = total, slots
        if self.live:
            self._progress = Progress(
                TextColumn(f"[bold]{self.label}"), BarColumn(), MofNCompleteColumn(),
                TextColumn("{task.fields[state]}", markup=False), TimeElapsedColumn(),
                TextColumn("ETA {task.fields[eta]}", markup=False), console=err_console, transient=False,
            )
            self._progress.start()
            self._bar = self._progress.add_task(self.label, total=total, state="", eta="–")
        elif not self.quiet:
            warn(f"{self.label}: {total} runs, {slots} at a time")

    def extend(self, total: int) -> None:
        """More runs than announced (a study widening its learning-rate grids)."""
        self.total = total
        if self._progress is not None:
            self._progress.update(self._bar, total=total)
        elif not self.quiet:
            warn(f"{self.label}: now {total} runs")

    def finished(self, name: str, status: str, wall: float, reused: bool, eta: float) -> None:
        self.done += 1
        self.failed += status not in ("completed", "stopped")  # config.stop.FINISHED_STATUSES (kept light)
        done, failed = self.done, self.failed
        running = min(self.slots, self.total - done)
        eta_text = "–" if eta != eta else _clock(eta)
        state = f"{running} running, {failed} failed"
        if self._progress is not None:
            self._progress.update(self._bar, completed=done, state=state, eta=eta_text)
        elif not self.quiet:
            how = "kept" if reused else f"{wall:.1f} s"
            warn(f"[{done:>{len(str(self.total))}}/{self.total}] {status:<9} {name} ({how}; {state}, ETA {eta_text})")

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
