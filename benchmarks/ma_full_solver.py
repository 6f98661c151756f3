"""MA-full's incremental solver alone over a long run: CPU time and peak memory (issue 34 item 5,
docs/server-rules.md §4 "Banded solver", figures in docs/performance.md).

Run on demand (not collected by pytest)::

    python -m benchmarks.ma_full_solver --T 20000        # K = 40, C = 7, d = 5 (the quadratic run)
    python -m benchmarks.ma_full_solver --quick          # T = 300, a smoke run

``W`` comes from the FedBuff staleness process of :func:`benchmarks.ma_rules.fedbuff_weights`
(exponential latencies, staleness exponent 0.5). The rule (``asyncfl.server.ma.MAFull``, no
window) runs every step on a model of ``d`` floats; nothing else of a run (records, evaluation)
is involved. Reported: CPU seconds (``time.process_time``) of all steps, CPU per step over the
last 50 steps, the peak of the allocations traced by ``tracemalloc`` (numpy's arrays are traced,
torch's are not: with ``d = 5`` the history is ``20 B`` per step) and the bytes of the rule's
final state. The script only calls ``MAFull``'s public ``init``/``direction``, so running it
against an older checkout of asyncfl (``PYTHONPATH``) measures the code before a change.
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numpy as np
import torch

from asyncfl.server import ma
from asyncfl.server.aggregation import Aggregate
from benchmarks.ma_rules import fedbuff_weights, state_bytes


def run(T: int, K: int, C: int, d: int, ridge: float, seed: int) -> dict[str, float]:
    """Drive MA-full over ``T`` steps; the figures of the module docstring."""
    weights = fedbuff_weights(T, K, C, 0.5, seed)
    staleness = max(int(np.flatnonzero(w)[-1]) for w in weights)
    gen = torch.Generator().manual_seed(seed)
    r_pool = [torch.randn(d, generator=gen) for _ in range(4)]
    rule = ma.MAFull(0.9, "momentum", ridge)
    state = rule.init(torch.zeros(d))
    per_step = np.zeros(T)
    tracemalloc.start()
    start = time.process_time()
    for t in range(1, T + 1):
        before = time.process_time()
        state = rule.direction(Aggregate(t, r_pool[t % 4], weights[t - 1]), state).state
        per_step[t - 1] = time.process_time() - before
    total = time.process_time() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {"T": T, "staleness": staleness, "cpu_s": total, "last_50_ms": 1e3 * float(per_step[-50:].mean()),
            "peak_mb": peak / 2**20, "state_mb": state_bytes(state) / 2**20}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="T = 300: a smoke run")
    parser.add_argument("--T", type=int, default=20_000)
    parser.add_argument("--K", type=int, default=40)
    parser.add_argument("--C", type=int, default=7)
    parser.add_argument("--d", type=int, default=5)
    parser.add_argument("--ridge", type=float, default=1e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    T = 300 if args.quick else args.T
    res = run(T, args.K, args.C, args.d, args.ridge, args.seed)
    print(f"asyncfl from {ma.__file__}")
    print(f"MA-full, T = {res['T']}, K = {args.K}, C = {args.C}, d = {args.d}, λ = {args.ridge}, largest staleness {res['staleness']}")
    print(f"CPU {res['cpu_s']:.2f} s in all, {res['last_50_ms']:.3f} ms per step over the last 50 steps; "
          f"traced peak {res['peak_mb']:.1f} MB; final state {res['state_mb']:.1f} MB")


if __name__ == "__main__":
    main()
