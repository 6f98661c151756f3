"""``python -m analysis.privacy_audit SCENARIO… [--canaries M] [--guess-fraction F] [--p P] [--seed S]``:
a one-run audit of each private scenario (docs/privacy.md §16), printed as a table and, with
``--out FILE``, written as JSON. Exit 1 when some audit's lower bound exceeds the accountant's ε
(the mechanism is not what its accounting says), 2 on a bad scenario."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from asyncfl.config import scenario as sc
from asyncfl.errors import AsyncFLError
from analysis.privacy_audit.audit import audit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.privacy_audit", description=__doc__)
    parser.add_argument("scenarios", nargs="+", help="private scenario TOML files")
    parser.add_argument("--canaries", type=int, default=4000, help="canary clients m (default 4000)")
    parser.add_argument("--guess-fraction", type=float, default=0.1, help="guess on the top fraction of scores")
    parser.add_argument("--p", type=float, default=0.05, help="1 − confidence (default 0.05: 95%%)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    results = []
    try:
        for path in args.scenarios:
            results.append(audit(sc.load(Path(path)), args.canaries, args.guess_fraction, args.p, args.seed))
    except AsyncFLError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("| scenario | sampling | schedule | m | r | v | ε lower (conf.) | accountant ε | detected |")
    print("|---|---|---|---|---|---|---|---|---|")
    for res in results:
        print(f"| {res.scenario} | {res.sampling} | {res.schedule} | {res.canaries} | {res.guesses} | {res.correct} | "
              f"{res.epsilon_lower:.3f} ({res.confidence:.0%}) | {res.epsilon_accountant:.3f} | {res.detected} |")
    if args.out:
        Path(args.out).write_text(json.dumps([r.as_dict() for r in results], indent=1))
    return 1 if any(r.detected for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
