"""``asyncfl compare RUN… [--metric accuracy] [--out F.png] [--csv F.csv] [--format …]``: runs of
any protocols side by side (docs/run-directory.md §10–11).

Prints one table row per run — what ran (protocol, algorithm, server rule, task, privacy), how
far it got (steps, virtual time) and its final metrics, its own rule's implicit momentum bias
where the run has a ``bias.json`` (0 for synchronous runs: ``W = I``) — and, with ``--out``,
overlays the chosen metric's curves against server steps and against virtual time (the axis on
which synchronous and asynchronous runs are comparable; :func:`asyncfl.figures.metrics.plot_metrics`).
The runs are read with :func:`asyncfl.results.load_run`.
"""

from __future__ import annotations

import argparse
import csv
import math
from pathlib import Path
from typing import Any

from rich.table import Table

from asyncfl.cli.console import console, say, warn
from asyncfl.cli.exit_codes import EXIT_OK
from asyncfl.errors import AsyncFLError
from asyncfl.records import task_metrics
from asyncfl.figures.metrics import PLOTTABLE, plot_metrics
from asyncfl.figures.style import with_format
from asyncfl.run import outdir
from asyncfl.results import Run, load_run
from asyncfl.run.bias_report import own_bias

#: the bias.json key measuring each FedBuff rule's own bias (docs/server-rules.md §7)
COLUMNS = ("run", "protocol", "algorithm", "rule", "task", "private", "status", "steps", "virtual_time",
           "loss", "accuracy", "gap", "train_loss", "updates_accepted", "bias")


FIELD_LABELS = {"virtual_time": "virtual time", "loss": "final test loss", "accuracy": "final test accuracy",
                "gap": "final gap F − F*", "train_loss": "final training objective", "updates_accepted": "updates accepted",
                "bias": "bias of its rule"}


def row_of(run: Run, label: str) -> dict[str, Any]:
    """The table row of one run (from its summary, falling back on its scenario for runs written
    before the summary named what ran)."""
    summary, server = run.summary, run.scenario.server
    final = run.final
    bias = own_bias(run.scenario, run.bias)
    return {
        "run": label, "protocol": summary.get("protocol", server.protocol),
        "algorithm": summary.get("algorithm", server.algorithm),
        "rule": summary.get("rule", server.rule if run.scenario.component("algorithm").traits.uses_rule else None) or "—",
        "task": summary.get("task", run.scenario.task.name), "private": bool(summary.get("private", run.scenario.privacy.enabled)),
        "status": summary.get("status"), "steps": summary.get("steps"), "virtual_time": summary.get("virtual_time"),
        "loss": final.get("loss"), "accuracy": final.get("accuracy"), "gap": final.get("gap"),
        "train_loss": final.get("train_loss"), "updates_accepted": summary.get("updates_accepted"), "bias": bias,
        **{m: final.get(m) for m in task_metrics(final)},  # the task's own (macro_f1, …)
    }


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and not math.isfinite(value)):
        return "—"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def cmd_compare(args: argparse.Namespace) -> int:
    # the outputs are checked before anything is read or written: never on a run's own files
    figure = outdir.check_file(with_format(Path(args.out), args.format), args.overwrite, args.run_dirs) if args.out else None
    if args.csv:
        outdir.check_file(args.csv, args.overwrite, args.run_dirs, option="--csv")
        if figure is not None and Path(args.csv).resolve() == figure.resolve():
            raise AsyncFLError(f"--csv {args.csv}: the same file as --out; give two paths")
    runs = [load_run(p) for p in args.run_dirs]
    if args.label and len(args.label) != len(runs):
        raise AsyncFLError(f"--label: given {len(args.label)} times for {len(runs)} runs; give one per run, in order")
    names = [r.name for r in runs]
    labels = args.label or (names if len(set(names)) == len(names) else [str(r.path) for r in runs])
    rows = [row_of(run, label) for run, label in zip(runs, labels)]
    own = list(dict.fromkeys(m for run in runs for m in task_metrics(run.final)))  # the tasks' own final metrics
    columns = (*COLUMNS[:COLUMNS.index("train_loss") + 1], *own, *COLUMNS[COLUMNS.index("train_loss") + 1:])
    # one column per run, one row per field: legible in a terminal for the few runs one compares
    table = Table(title=f"{len(runs)} runs: what ran and the final metrics")
    table.add_column("")
    for r in rows:
        table.add_column(r["run"], justify="right", overflow="fold")
    for col in columns[1:]:
        if any(_cell(r.get(col)) != "—" for r in rows):
            table.add_row(FIELD_LABELS.get(col, f"final {col}"), *(_cell(r.get(col)) for r in rows))
    console.print(table)
    if args.csv:
        with open(args.csv, "w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh, lineterminator="\n")
            writer.writerow(columns)
            writer.writerows([["" if _cell(r.get(c)) == "—" else r[c] for c in columns] for r in rows])
        say(f"wrote {args.csv}")
    recorded = [m for m in (*PLOTTABLE, *dict.fromkeys(m for r in runs for m in task_metrics(r.metrics.columns))) if m != "wall_time"]
    if args.metric not in recorded:
        raise AsyncFLError(f"--metric {args.metric!r}: no run records it; allowed: {', '.join(recorded)}")
    if args.out:
        metric = args.metric
        if metric != "loss" and all(run.metrics[metric].isna().all() if metric in run.metrics else True for run in runs):
            warn(f"note: no run has {metric!r} (a regression task?); drawing 'loss' instead")
            metric = "loss"
        out = plot_metrics([r.path for r in runs], figure, labels, metrics=[metric], fmt=args.format)
        say(f"wrote {out}")
    return EXIT_OK
