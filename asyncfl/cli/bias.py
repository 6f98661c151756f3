"""``asyncfl bias RUN_DIR``: the implicit momentum bias of a recorded run — ``bias.json``, a table
and the heat maps (docs/server-rules.md, "`bias.json` and `asyncfl bias`"). The computation is
:mod:`asyncfl.run.bias_report`; this module prints it."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from asyncfl.cli.console import console, say
from asyncfl.cli.exit_codes import EXIT_OK
from asyncfl.run.bias_report import RULE_KEYS, heatmaps, write_bias_json

LABELS = {"none": "no momentum (W vs I)", "momentum": "naive momentum (A = M)", "ma_full": "MA-full", "ma_light": "MA-light"}


def cmd_bias(args: argparse.Namespace) -> int:
    report = write_bias_json(args.run_dir)
    png = heatmaps(args.run_dir)
    table = Table(title=f"implicit momentum bias ‖AW − M‖_F/‖M‖_F — {report['steps_analysed']} steps, target {report['target']} β={report['beta']}")
    table.add_column("rule")
    table.add_column("bias", justify="right")
    table.add_column("amplification ‖A‖_F/‖M‖_F", justify="right")
    if "noisy_w" in report:
        table.add_column("bias on noisy Ŵ", justify="right")
    for key in RULE_KEYS:
        row = [LABELS[key], f"{report[key]:.4f}", f"{report['amplification'][key]:.3f}"]
        if "noisy_w" in report:
            row.append(f"{report['noisy_w'][key]:.4f}")
        table.add_row(*row)
    console.print(table)
    say(f"wrote {Path(args.run_dir) / 'bias.json'} and {png}")
    return EXIT_OK
