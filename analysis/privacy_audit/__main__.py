"""``python -m analysis.privacy_audit SCENARIO… [--canaries M] [--guess-in F] [--guess-out F] [--block B] [--p P] [--seed S]``:
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
from analysis.privacy_audit.audit import BLOCK, CANARIES, audit


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.privacy_audit", description=__doc__)
    parser.add_argument("scenarios", nargs="+", help="private scenario TOML files")
    parser.add_argument("--canaries", type=int, default=CANARIES, help=f"canary clients m (default {CANARIES})")
    parser.add_argument("--guess-in", type=float, default=None,
                        help="guess 'included' on this top fraction of scores (default: the schedule's, docs/privacy.md §16)")
    parser.add_argument("--guess-out", type=float, default=None,
                        help="guess 'not included' on this bottom fraction of scores (default: the schedule's)")
    parser.add_argument("--block", type=int, default=BLOCK, help=f"canaries per pass of the aggregator (default {BLOCK})")
    parser.add_argument("--p", type=float, default=0.05, help="1 − confidence (default 0.05: 95%%)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    results = []
    try:
        for path in args.scenarios:
            results.append(audit(sc.load(Path(path)), args.canaries, args.guess_in, args.guess_out, args.p, args.seed,
                                 args.block))
    except (AsyncFLError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print("| scenario | sampling | schedule | m | k+ | k- | v | ε lower (conf.) | accountant ε | detected |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for res in results:
        print(f"| {res.scenario} | {res.sampling} | {res.schedule} | {res.canaries} | {res.guess_in} | {res.guess_out} | {res.correct} | "
              f"{res.epsilon_lower:.3f} ({res.confidence:.0%}) | {res.epsilon_accountant:.3f} | {res.detected} |")
    if args.out:
        Path(args.out).write_text(json.dumps([r.as_dict() for r in results], indent=1))
    return 1 if any(r.detected for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
