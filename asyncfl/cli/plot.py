"""``asyncfl plot RUN_DIR… [--out FILE] [--label L]… [--format png|pdf|svg] [--tradeoff]``: learning curves of one or more runs
(or, with ``--tradeoff``, the f-DP trade-off of private runs, :mod:`asyncfl.figures.tradeoff`)
against server steps and virtual time (:func:`asyncfl.figures.metrics.plot_metrics`;
docs/run-directory.md, ``metrics.png``). The figure goes to ``--out`` (default ``plot.FORMAT``
in the working directory), never into a run directory (:func:`asyncfl.run.outdir.check_file`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from asyncfl.cli.console import say
from asyncfl.cli.exit_codes import EXIT_OK
from asyncfl.figures.metrics import plot_metrics
from asyncfl.figures.style import with_format
from asyncfl.figures.tradeoff import plot_tradeoff
from asyncfl.run import outdir


def cmd_plot(args: argparse.Namespace) -> int:
    fmt = args.format
    out = with_format(Path(args.out) if args.out else Path("plot"), fmt)
    outdir.check_file(out, overwrite=args.overwrite, inputs=args.run_dirs)  # never into a run's own files
    if args.tradeoff:  # the f-DP trade-off of private runs (docs/privacy.md §15)
        out = plot_tradeoff(args.run_dirs, out, args.label, fmt=fmt)
    else:
        out = plot_metrics(args.run_dirs, out, args.label, fmt=fmt)  # --format wins over the suffix
    say(f"wrote {out}")
    return EXIT_OK
