"""``asyncfl bias RUN_DIR [--format png|pdf|svg]``: the implicit momentum bias of a recorded run —
``bias.json``, a table and the heat maps (docs/server-rules.md §7–8). The computation is
:mod:`asyncfl.run.bias_report`, the figure :mod:`asyncfl.figures.bias`; this module prints it
and says what the numbers mean: each rule's bias next to the floor for this ``W`` (MA-full with
``λ = 0``, the lowest any weighting of the aggregates can reach), and plainly when ``W = I``."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from asyncfl.cli.console import console, say
from asyncfl.cli.exit_codes import EXIT_OK
from asyncfl.figures.bias import plot_bias_heatmaps
from asyncfl.run import outdir
from asyncfl.run.bias_report import RULE_KEYS, write_bias_json

LABELS = {"none": "no momentum (W vs I)", "momentum": "naive momentum (A = M)", "ma_full": "MA-full", "ma_light": "MA-light"}


def explain(report: dict) -> list[str]:
    """The lines printed under the table: what the bias is, the floor, and the W = I case."""
    if report.get("identity_w"):
        return ["W = I: every accepted update was fresh (staleness 0), as in every synchronous run. There is no implicit "
                "momentum bias: naive momentum already applies exactly the target weights M, and every rule's bias is 0."]
    lines = ["bias = ‖AW − M‖_F / ‖M‖_F: how far the weights a rule effectively puts on past gradients (A W) are from "
             "the momentum it is meant to apply (M); 0 is exact. 'no momentum' measures W against I instead."]
    floor = report.get("floor")
    if floor is not None:
        lines.append(f"floor for this W = {floor:.4f}: the bias of MA-full with λ = 0, the lowest any weighting of the "
                     "aggregates can reach on this staleness pattern" + (" (W is invertible: M is reachable exactly)." if floor < 1e-9 else "."))
    return lines


def cmd_bias(args: argparse.Namespace) -> int:
    fmt = args.format or "png"
    outdir.check_run_dir(args.run_dir)  # a run directory no run or resume is writing
    report = write_bias_json(args.run_dir)
    figure = plot_bias_heatmaps(args.run_dir, Path(args.run_dir) / "bias_heatmaps.png", fmt)
    table = Table(title=f"implicit momentum bias ‖AW − M‖_F/‖M‖_F — {report['steps_analysed']} steps, target {report['target']} β={report['beta']}")
    table.add_column("rule")
    table.add_column("bias", justify="right")
    table.add_column("floor (best possible)", justify="right")
    table.add_column("above the floor", justify="right")
    table.add_column("amplification ‖A‖_F/‖M‖_F", justify="right")
    if "noisy_w" in report:
        table.add_column("bias on noisy Ŵ", justify="right")
    floor = report.get("floor")
    for key in RULE_KEYS:
        against_m = key != "none" and floor is not None
        row = [LABELS[key], f"{report[key]:.4f}", f"{floor:.4f}" if against_m else "—",
               f"{report[key] - floor:+.4f}" if against_m else "—", f"{report['amplification'][key]:.3f}"]
        if "noisy_w" in report:
            row.append(f"{report['noisy_w'][key]:.4f}")
        table.add_row(*row)
    console.print(table)
    for line in explain(report):
        say(line)
    say(f"wrote {Path(args.run_dir) / 'bias.json'} and {figure}")
    return EXIT_OK
