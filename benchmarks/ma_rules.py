"""Per-step cost and server memory of the MA rules against momentum (issue 3, docs/server-rules.md).

Run on demand (not collected by pytest)::

    python -m benchmarks.ma_rules            # d = 10⁶ float32, T = 2000
    python -m benchmarks.ma_rules --quick    # d = 10⁴, smoke run

``W`` comes from a simulated FedBuff staleness process (K = 5C, exponential latencies).
``momentum`` and ``ma-light`` run all T steps on the real rules; their per-step time is the
mean over the steps just before each reported t. ``ma-full`` would hold ``T·d`` floats (8 GB at
T = 2000, d = 10⁶) and spend ~O(t·d) per step, so at each t its state is pre-filled to step t−1
(random history written in chunks, the incremental factor built from the real rows of ``W``)
and a few steps are timed. A point whose history would exceed ``--max-gb`` is timed at a
smaller d and scaled linearly in d (the step is a matrix-vector product, linear in d); the
table marks it. Memory = bytes of the tensors and arrays held in the rule state (the benchmark
sizes MA-full's history exactly; the rule's doubling can hold up to 2× that).

``momentum`` is ``asyncfl.server.rules.Momentum`` (two allocations per step); ``momentum-fused`` is the
same recursion with MA-light's one-allocation update, the like-for-like reference. Times on a
shared machine are noisy: compare rows of the same run, and rerun.
"""

from __future__ import annotations

import argparse
import heapq
import time
from typing import Any, Callable

import numpy as np
import torch

from asyncfl.server import ma
from asyncfl.server.aggregation import Aggregate, weight_row
from asyncfl.server.rules import Momentum, RuleOutput


def fedbuff_weights(T: int, K: int, C: int, exponent: float, seed: int) -> list[np.ndarray]:
    """``weights[t-1][τ] = W[t, t−τ]`` from a FedBuff event simulation: K clients in flight,
    exponential latencies, every arrival redispatched on the current version, a step every C."""
    rng = np.random.default_rng(seed)
    heap = [(rng.exponential(1.0), k, 1) for k in range(K)]
    heapq.heapify(heap)
    rows: list[np.ndarray] = []
    taus: list[int] = []
    t = 1
    while t <= T:
        clock, k, version = heapq.heappop(heap)
        taus.append(t - version)
        if len(taus) == C:
            rows.append(weight_row(np.bincount(taus), C, exponent))
            taus, t = [], t + 1
        heapq.heappush(heap, (clock + rng.exponential(1.0), k, t))
    return rows


class FusedMomentum(Momentum):
    """Heavy ball with the update MA-light uses (``mul`` + in-place ``add_``: one allocation, two
    passes over d): the like-for-like reference. ``asyncfl.server.rules.Momentum`` allocates twice."""

    def direction(self, aggregate: Aggregate, state: Any) -> Any:
        if not state.started:
            return super().direction(aggregate, state)
        m = torch.mul(state.trace, self.beta).add_(aggregate.r)
        return RuleOutput(m, state._replace(trace=m))


def state_bytes(state: Any) -> int:
    """Bytes of every tensor / array reachable through tuples (the rule's server memory)."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, np.ndarray):
        return state.nbytes
    if isinstance(state, tuple):
        return sum(state_bytes(x) for x in state)
    return 0


def run_all_steps(rule: Any, weights: list[np.ndarray], d: int, points: list[int], span: int, seed: int) -> tuple[dict[int, float], int]:
    """Run ``rule`` for max(points) steps; mean seconds per step over the ``span`` steps ending at
    each point, and the state's bytes at the end."""
    gen = torch.Generator().manual_seed(seed)
    r_pool = [torch.randn(d, generator=gen) for _ in range(4)]
    state = rule.init(torch.zeros(d))
    times = np.zeros(max(points))
    for t in range(1, max(points) + 1):
        agg = Aggregate(t, r_pool[t % 4], weights[t - 1])
        start = time.perf_counter()
        out = rule.direction(agg, state)
        times[t - 1] = time.perf_counter() - start
        state = out.state
    return {p: float(times[p - span : p].mean()) for p in points}, state_bytes(state)


def prefilled_full(rule: ma.MAFull, weights: list[np.ndarray], t: int, d: int, extra: int, seed: int) -> ma.MAFullState:
    """An MA-full state after step ``t−1`` with room for ``extra`` more steps: the real rows of W
    (incremental factor, or the last L staleness rows with a window) and a random history."""
    gen = torch.Generator().manual_seed(seed)
    step = t - 1
    cap = step + extra if rule.window is None else min(rule.window, step + extra)
    history = torch.empty((cap, d))
    for lo in range(0, min(step, cap), 64):  # chunks: never a second d×t temporary
        hi = min(lo + 64, min(step, cap))
        history[lo:hi] = torch.randn(hi - lo, d, generator=gen)
    w_band, l_band = np.zeros((0, 0)), np.zeros((0, 0))
    if rule.window is None or step <= rule.window:
        for s in range(1, step + 1):
            w_band, l_band = ma.band_push(w_band, l_band, weights[s - 1], s, rule.ridge)
    rows: tuple[np.ndarray, ...] = ()
    if rule.window is not None:
        rows = tuple(np.asarray(weights[s - 1], dtype=np.float64)[:s].copy() for s in range(max(1, step - rule.window + 1), step + 1))
    return ma.MAFullState(step, history, w_band, l_band, rows, np.array([step], dtype=np.int64))


def time_full(rule: ma.MAFull, weights: list[np.ndarray], t: int, d: int, steps: int, seed: int) -> tuple[float, int]:
    """Mean seconds per step of steps t..t+steps−1 from a pre-filled state, and the state's bytes."""
    state = prefilled_full(rule, weights, t, d, steps, seed)
    r = torch.randn(d, generator=torch.Generator().manual_seed(seed + 1))
    elapsed = []
    for s in range(t, t + steps):
        start = time.perf_counter()
        state = rule.direction(Aggregate(s, r, weights[s - 1]), state).state
        elapsed.append(time.perf_counter() - start)
    size = state_bytes(state)
    del state
    return float(np.mean(elapsed[1:] if steps > 1 else elapsed)), size


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="d = 10⁴, T = 400: a smoke run")
    parser.add_argument("--d", type=int, default=None)
    parser.add_argument("--T", type=int, default=None)
    parser.add_argument("--points", type=str, default=None, help="comma-separated t (default 250,1000,T)")
    parser.add_argument("--buffer", type=int, default=10, help="C; K = 5C")
    parser.add_argument("--window", type=int, default=50)
    parser.add_argument("--ridge", type=float, default=1e-3)
    parser.add_argument("--steps", type=int, default=4, help="timed MA-full steps per point")
    parser.add_argument("--max-gb", type=float, default=4.5, help="largest MA-full history timed at full d")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--skip-full", action="store_true", help="only momentum and ma-light")
    args = parser.parse_args(argv)
    d = args.d or (10_000 if args.quick else 1_000_000)
    T = args.T or (400 if args.quick else 2000)
    points = [int(p) for p in args.points.split(",")] if args.points else sorted({min(250, T), min(1000, T), T})
    torch.set_num_threads(args.threads)
    weights = fedbuff_weights(T + args.steps + 1, 5 * args.buffer, args.buffer, 0.5, seed=0)
    span = min(50, min(points))
    print(f"d = {d} (float32), T = {T}, C = {args.buffer}, K = {5 * args.buffer}, λ = {args.ridge}, torch threads = {args.threads}")

    rows: list[tuple[str, int, float, int, str]] = []
    sequential: dict[str, Callable[[], Any]] = {
        "momentum": lambda: Momentum(0.9),
        "momentum-fused": lambda: FusedMomentum(0.9),
        "ma-light": lambda: ma.MALight(0.9, "momentum"),
    }
    per_step: dict[str, dict[int, float]] = {}
    for name, make in sequential.items():
        per_step[name], size = run_all_steps(make(), weights, d, points, span, seed=1)
        rows += [(name, p, per_step[name][p], size, f"mean of steps {p - span + 1}..{p}") for p in points]
    for label, window in () if args.skip_full else (("ma-full", None), (f"ma-full L={args.window}", args.window)):
        rule = ma.MAFull(0.9, "momentum", args.ridge, window)
        for p in points:
            kept = p if window is None else min(window, p)
            d_run, note = d, f"{args.steps} steps from a state pre-filled to t−1"
            if 4 * d * (kept + args.steps) > args.max_gb * 2**30:
                d_run = int(args.max_gb * 2**30 / (4 * (kept + args.steps)))
                note += f"; timed at d = {d_run}, time and memory scaled ×{d / d_run:.2f}"
            seconds, size = time_full(rule, weights, p, d_run, args.steps, seed=2)
            history = 4 * d_run * (kept + args.steps)
            scale = d / d_run
            rows.append((label, p, seconds * scale, int(history * scale + (size - history)), note))

    base = {p: per_step["momentum"][p] for p in points}
    print(f"\n{'rule':<16}{'t':>6}{'ms/step':>12}{'× momentum':>12}{'state MB':>12}  how")
    for name, p, seconds, size, note in rows:
        print(f"{name:<16}{p:>6}{1e3 * seconds:>12.3f}{seconds / base[p]:>12.3f}{size / 2**20:>12.1f}  {note}")


if __name__ == "__main__":
    main()
