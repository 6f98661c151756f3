"""Engine overhead: simulated arrivals per second with a zero-cost task (NullExecutor, a
1-parameter model) against a bare heapq loop doing the same FedBuff scheduling with the same
random draws. Both run in this process, alternating, ``--repeat`` rounds; the ratio of their
CPU times (``time.process_time``: a shared machine's wait for a core is left out) is reported as
the median and range over rounds, beside the best wall times. Target (issue 27): ≤ 3×. Next to it
a floor for the engine's design (:func:`carried_objects`): the bare loop plus the objects every
arrival carries through the engine (its job, its asyncio future, its in-flight record, its clock
entry and its ``updates.csv`` row), made and dropped as many times as there are arrivals; and
the Python-level function calls per arrival of each loop (:func:`python_calls`), the layering
(protocol → host → fleet → executor → clock) that the rest of the engine's time goes to.

    python -m benchmarks.engine [--clients 10000 --concurrency 1000 --buffer 100 --steps 500]

``gc.freeze()`` is called once after imports (``--no-freeze`` to skip): it moves torch's
import-time objects out of the collector's view, so full collections triggered by the run's
records do not rescan them; it applies to both loops.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import time

from asyncfl.compute.executors import NullExecutor
from asyncfl.compute.training import LocalJob
from asyncfl.records import UpdateRow
from asyncfl.sim.clock import Arrival
from asyncfl.sim.engine import InFlight
from asyncfl.compose import build_simulation
from benchmarks.common import engine_scenario, heapq_fedbuff, null_task, timed


def run_engine(scenario) -> tuple[int, float]:
    sim = build_simulation(scenario, task=null_task(), executor=NullExecutor())
    _, seconds = timed(asyncio.run, sim.run())
    return len(sim.sink.updates), seconds


def carried_objects(arrivals: int) -> float:
    """CPU seconds to make, resolve and drop what the engine carries per arrival — a
    :class:`LocalJob`, an asyncio future set with its result, an :class:`InFlight` record, an
    :class:`Arrival` on a clock and an :class:`UpdateRow` kept in a list — ``arrivals`` times
    (one queue entry pushed and popped each), with nothing else: what the engine costs beyond the
    bare loop before any decision is taken."""
    import heapq

    import simpy
    import torch

    async def carry() -> float:
        loop, env, theta, rows = asyncio.get_running_loop(), simpy.Environment(), torch.zeros(1), []
        start = time.process_time()
        for i in range(arrivals):
            job = LocalJob(i, theta, theta, 0.0, i)
            future = loop.create_future()
            rec = InFlight(i, i, 1, 0.0, 1.0, job, future)
            rec.arrival = Arrival(env, 1.0, rows.append, rec)
            heapq.heappop(env._queue)
            future.set_result(theta)
            rows.append(UpdateRow(rec.client, rec.version, 1, rec.dispatch_time, rec.arrival_time, 0, True, "", rec.seq))
        return time.process_time() - start

    return asyncio.run(carry())


def python_calls(fn, *args) -> int:
    """Python-level function calls (not C builtins) made by ``fn(*args)``."""
    count = 0

    def profile(frame, event, arg) -> None:
        nonlocal count
        count += event == "call"

    sys.setprofile(profile)
    try:
        fn(*args)
    finally:
        sys.setprofile(None)
    return count


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=10_000)
    p.add_argument("--concurrency", type=int, default=1000)
    p.add_argument("--buffer", type=int, default=100)
    p.add_argument("--steps", type=int, default=500)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--no-freeze", action="store_true")
    args = p.parse_args()
    if not args.no_freeze:
        gc.freeze()
    scenario = engine_scenario(args.clients, args.concurrency, args.buffer, args.steps)
    best_engine = best_heap = float("inf")
    ratios: list[float] = []
    floors: list[float] = []
    for _ in range(args.repeat):
        cpu = time.process_time()
        arrivals, seconds = timed(heapq_fedbuff, scenario)
        heap_cpu, cpu = time.process_time() - cpu, time.process_time()
        best_heap = min(best_heap, seconds)
        engine_arrivals, seconds = run_engine(scenario)
        ratios.append((time.process_time() - cpu) / heap_cpu)
        floors.append((heap_cpu + carried_objects(arrivals)) / heap_cpu)
        best_engine = min(best_engine, seconds)
        assert engine_arrivals == arrivals, (engine_arrivals, arrivals)
    print(f"FedBuff N={args.clients} K={args.concurrency} C={args.buffer} steps={args.steps}: {arrivals} arrivals, "
          f"{args.repeat} rounds, gc.freeze={'no' if args.no_freeze else 'yes'}; load average " +
          ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    print(f"{'loop':14} {'seconds':>8} {'arrivals/s':>11}  (best wall of {args.repeat})")
    print(f"{'heapq (bare)':14} {best_heap:8.2f} {arrivals / best_heap:11.0f}")
    print(f"{'asyncfl engine':14} {best_engine:8.2f} {arrivals / best_engine:11.0f}")
    print(f"engine / heapq CPU time ratio: {statistics.median(ratios):.1f}x (range {min(ratios):.1f}–{max(ratios):.1f}; "
          f"best walls {best_engine / best_heap:.1f}x) (target ≤ 3x)")
    print(f"floor of the engine's design: (heapq + the objects each arrival carries) / heapq = "
          f"{statistics.median(floors):.1f}x (range {min(floors):.1f}–{max(floors):.1f})")
    small = engine_scenario(args.clients, args.concurrency, args.buffer, max(2, args.steps // 10))
    n = heapq_fedbuff(small)
    print(f"Python function calls per arrival: engine {python_calls(run_engine, small) / n:.1f}, "
          f"heapq loop {python_calls(heapq_fedbuff, small) / n:.1f}")

if __name__ == "__main__":
    main()
