"""``asyncfl plot RUN_DIR… [--out FILE] [--label L]… [--format png|pdf|svg]``: learning curves of one or more runs
against server steps and virtual time (:func:`asyncfl.figures.metrics.plot_metrics`;
docs/run-directory.md, ``metrics.png``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from asyncfl.cli.console import say
from asyncfl.cli.exit_codes import EXIT_OK
from asyncfl.figures.metrics import plot_metrics


def cmd_plot(args: argparse.Namespace) -> int:
    out = Path(args.out) if args.out else Path(args.run_dirs[0]) / "metrics.png"
    out = plot_metrics(args.run_dirs, out, args.label, fmt=args.format)  # --format wins over the suffix
    say(f"wrote {out}")
    return EXIT_OK
