"""The ξ study's command line (:mod:`analysis.privacy_sweep.study`)::

    python -m analysis.privacy_sweep.study run analysis/privacy_sweep/xi_study.toml --out runs/xi28 --workers 1
    python -m analysis.privacy_sweep.study report runs/xi28
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from asyncfl.cli.main import run_script
from asyncfl.errors import UsageError
from asyncfl.run.parallel import Progress, RunOutcome, make_backend
from analysis.privacy_sweep.study import COMMAND, run_study
from analysis.privacy_sweep.study_report import write_report
from analysis.privacy_sweep.study_spec import load_spec


def _args(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("run", help="run (or resume) the study of a spec")
    r.add_argument("spec", help="the study's spec (e.g. analysis/privacy_sweep/xi_study.toml)")
    r.add_argument("--out", required=True, help="output directory (runs/, results.csv, the report)")
    r.add_argument("--workers", type=int, default=1, help="parallel runs (default 1)")
    r.add_argument("--no-reference", action="store_true", help="skip the naive-momentum reference stage")
    r.add_argument("--overwrite", action="store_true", help="replace another study's files in --out")
    g = sub.add_parser("report", help="recompute summary.csv, report.md and the figures from DIR/results.csv")
    g.add_argument("dir")


_SPENT = [0.0]  # seconds of runs done by this command (the study's compute, for its notes)


def _progress(outcome: RunOutcome, progress: Progress) -> None:
    _SPENT[0] += outcome.wall
    reused = " (read back)" if outcome.reused else ""
    print(f"  [{progress.done}/{progress.total}] {outcome.status:<9} {outcome.name} {outcome.wall:.1f} s{reused} "
          f"(this command: {_SPENT[0] / 60:.1f} min)", flush=True)


def _command(args: argparse.Namespace) -> int:
    if args.what == "report":
        paths = write_report(Path(args.dir))
        print("wrote " + ", ".join(str(p) for p in paths))
        return 0
    if args.workers < 1:
        raise UsageError(f"--workers {args.workers}: must be at least 1")
    spec = load_spec(args.spec)
    backend = make_backend(args.workers, None)
    try:
        run_study(spec, args.out, backend, _progress, reference=False if args.no_reference else None,
                  overwrite=args.overwrite, command=args.command_line)
    finally:
        backend.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    return run_script(COMMAND, "The ξ study: privacy–utility of the count-noise level and the check of the ξ rule.", _args,
                      _command, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
