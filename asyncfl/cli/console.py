"""Terminal output of the CLI (docs/architecture.md, "Package layout"): the two rich consoles,
one-line messages, the run progress bar and the run summary table.

Paths, scenario names and values are printed verbatim: the consoles interpret no markup, no
emoji codes and highlight nothing, and messages are never wrapped (a long path stays one
string that can be copied). Torch-free: ``asyncfl --help``, ``validate`` and ``scenarios`` use it.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

#: standard output: results (tables, ``wrote …`` lines, ``validate``'s scenario)
console = Console(highlight=False, markup=False, emoji=False)
#: standard error: progress, errors and notices
err_console = Console(stderr=True, highlight=False, markup=False, emoji=False)


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
    say(f"{summary.get('name')} — {summary.get('status')}")
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
    for key, value in rows:
        if value is None or (isinstance(value, float) and value != value):
            continue
        table.add_row(key, f"{value:.6g}" if isinstance(value, float) else str(value))
    return table
