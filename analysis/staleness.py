"""Staleness of one run: ``python -m analysis.staleness RUN_DIR`` (issue 9 item 5).

Writes ``RUN_DIR/staleness.png`` (:func:`asyncfl.figures.staleness.plot_staleness`: staleness
histogram, clients in flight over virtual time, ``W``) and prints a short text summary. The
committed figures are in ``analysis/results/staleness/``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from asyncfl.figures.staleness import in_flight, plot_staleness, run_w, staleness_stats
from asyncfl.figures.style import FORMATS

__all__ = ["in_flight", "main", "plot", "run_w", "staleness_stats"]

plot = plot_staleness


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.staleness", description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", help="an asyncfl run directory")
    parser.add_argument("--format", choices=FORMATS, default="png", help="file format of the figure (default: png)")
    args = parser.parse_args(argv)
    run_dir = Path(args.run_dir)
    for name in ("updates.csv", "counts.npz", "scenario.toml"):
        if not (run_dir / name).is_file():
            parser.error(f"{run_dir}: no {name} (not a run directory?)")
    stats = staleness_stats(run_dir)
    out = plot_staleness(run_dir, run_dir / f"staleness.{args.format}", args.format)
    print(f"{run_dir}: {stats['accepted']} accepted, staleness mean {stats['mean']:.2f}, median {stats['median']:g}, "
          f"p95 {stats['p95']:g}, max {stats['max']}; not accepted {stats['not_accepted']}")
    print(f"histogram τ=0..{len(stats['counts']) - 1}: {stats['counts']}")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
