"""Scale: 10⁶ clients, concurrency 10⁴, zero-cost task, 10⁶ arrivals (FedBuff, C = 100,
10⁴ steps): wall time and peak resident memory (``ru_maxrss`` of this process, which includes
the Python + torch baseline, reported too). The default Sink keeps every updates.csv row.

    python -m benchmarks.scale [--clients 1000000 --concurrency 10000 --buffer 100 --arrivals 1000000]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import resource
import time

from asyncfl.sim.engine import Simulation
from asyncfl.compute.executors import NullExecutor
from benchmarks.common import engine_scenario, null_task


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--clients", type=int, default=1_000_000)
    p.add_argument("--concurrency", type=int, default=10_000)
    p.add_argument("--buffer", type=int, default=100)
    p.add_argument("--arrivals", type=int, default=1_000_000)
    args = p.parse_args()
    gc.freeze()  # see benchmarks.engine
    baseline = rss_mib()
    scenario = engine_scenario(args.clients, args.concurrency, args.buffer, args.arrivals // args.buffer)
    sim = Simulation(scenario, task=null_task(), executor=NullExecutor())
    start = time.perf_counter()
    asyncio.run(sim.run())
    wall = time.perf_counter() - start
    arrivals = len(sim.sink.updates)
    print(f"clients {args.clients:,}  concurrency {args.concurrency:,}  buffer {args.buffer}  arrivals {arrivals:,}")
    print(f"wall time {wall:.1f} s  ({arrivals / wall:,.0f} arrivals/s)")
    print(f"peak RSS {rss_mib():,.0f} MiB (baseline after imports {baseline:,.0f} MiB; target < 4096 MiB)")


if __name__ == "__main__":
    main()
