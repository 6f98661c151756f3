"""Engine overhead: simulated arrivals per second with a zero-cost task (NullExecutor, a
1-parameter model) against a bare heapq loop doing the same FedBuff scheduling with the same
random draws. Both run in this process, alternating, ``--repeat`` rounds; the ratio of their
CPU times (``time.process_time``: a shared machine's wait for a core is left out) is reported as
the median and range over rounds, beside the best wall times. Target (issue 27): ≤ 3×.

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
import time

from asyncfl.sim.engine import Simulation
from asyncfl.compute.executors import NullExecutor
from benchmarks.common import engine_scenario, heapq_fedbuff, null_task, timed


def run_engine(scenario) -> tuple[int, float]:
    sim = Simulation(scenario, task=null_task(), executor=NullExecutor())
    _, seconds = timed(asyncio.run, sim.run())
    return len(sim.sink.updates), seconds


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
    for _ in range(args.repeat):
        cpu = time.process_time()
        arrivals, seconds = timed(heapq_fedbuff, scenario)
        heap_cpu, cpu = time.process_time() - cpu, time.process_time()
        best_heap = min(best_heap, seconds)
        engine_arrivals, seconds = run_engine(scenario)
        ratios.append((time.process_time() - cpu) / heap_cpu)
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

if __name__ == "__main__":
    main()
