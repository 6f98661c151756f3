"""Scale: FedBuff (C = 100) with a zero-cost task on 10⁶ clients with 10⁴ in flight and on 10⁷
clients with 10⁵ in flight, 10⁶ arrivals each (10⁴ server steps). For each size: the time to
build the simulation (the population), the wall time of the run, arrivals per second, the
population's own arrays, the CPU time of the run (less sensitive than the wall time to other
processes on a shared machine), and the peak resident memory (``ru_maxrss``) of a fresh process that
runs only that size, so a smaller size's figure is not masked by a larger one's, next to the
target (issue 27: < 8 GB at 10⁷ clients). The in-memory sink keeps every ``updates.csv`` row
(about 230 bytes each: 10⁶ rows are ~220 MiB of every figure); the baseline is the process
after its imports (Python, numpy, torch). The load average is printed before and after each
size: the machine may be shared.

    python -m benchmarks.scale                                   # both sizes, one fresh process each
    python -m benchmarks.scale --availability diurnal            # the same with a diurnal population
    python -m benchmarks.scale --one 10000000 100000 [--arrivals 1000000 --buffer 100]   # one size, in this process

docs/architecture.md §10 explains where the memory goes.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import subprocess
import sys
import time
from typing import Any

import numpy as np

from asyncfl.compute.executors import NullExecutor
from asyncfl.compose import build_simulation
from asyncfl.sim.engine import Simulation
from benchmarks.common import engine_scenario, null_task

#: (clients, clients in flight) measured by default
SIZES = ((1_000_000, 10_000), (10_000_000, 100_000))
#: peak RSS targets by population size (bytes): issue 27 for 10⁷; 4 GiB, the earlier target, for 10⁶
TARGET_BYTES = {1_000_000: 4 << 30, 10_000_000: 8 * 10**9}


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def array_bytes(obj: Any) -> int:
    """Bytes of the numpy arrays held by ``obj``'s attributes (one level deep)."""
    return sum(v.nbytes for v in vars(obj).values() if isinstance(v, np.ndarray))


def population_bytes(sim: Simulation) -> int:
    """The population's arrays: the fleet's (speeds, busy flags) and its availability schedule's."""
    fleet = sim.fleet
    return array_bytes(fleet) + (array_bytes(fleet.availability) if fleet.availability is not None else 0)


def measure(clients: int, concurrency: int, buffer: int, arrivals: int, availability: str = "always") -> dict[str, Any]:
    """One size in this process: build, run, and this process's peak RSS."""
    gc.freeze()  # see benchmarks.engine
    load_before = os.getloadavg()[0]
    baseline = peak_rss_bytes()
    scenario = engine_scenario(clients, concurrency, buffer, arrivals // buffer, availability=availability)
    start = time.perf_counter()
    sim = build_simulation(scenario, task=null_task(), executor=NullExecutor())
    built = time.perf_counter() - start
    start, cpu = time.perf_counter(), time.process_time()
    asyncio.run(sim.run())
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    done = len(sim.sink.updates)
    return {
        "clients": clients, "concurrency": concurrency, "buffer": buffer, "arrivals": done, "availability": availability,
        "build_s": built, "wall_s": wall, "cpu_s": cpu, "arrivals_per_s": done / wall, "population_bytes": population_bytes(sim),
        "peak_rss_bytes": peak_rss_bytes(), "baseline_rss_bytes": baseline,
        "load_before": load_before, "load_after": os.getloadavg()[0],
    }


def in_fresh_process(clients: int, concurrency: int, buffer: int, arrivals: int, availability: str) -> dict[str, Any]:
    """:func:`measure` in a new interpreter (its own peak RSS); the result is its last stdout line."""
    argv = [sys.executable, "-m", "benchmarks.scale", "--one", str(clients), str(concurrency),
            "--buffer", str(buffer), "--arrivals", str(arrivals), "--availability", availability]
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def mib(n: float) -> str:
    return f"{n / 2**20:,.0f} MiB"


def report(rows: list[dict[str, Any]]) -> str:
    head = (f"{'clients':>11} {'in flight':>9} {'arrivals':>9} {'build':>7} {'wall':>7} {'cpu':>7} {'arrivals/s':>10} "
            f"{'population':>11} {'peak RSS':>10} {'baseline':>9} {'target':>10} {'met':>3} {'load':>9}")
    lines = [head]
    for r in rows:
        target = TARGET_BYTES.get(r["clients"])
        met = "-" if target is None else "yes" if r["peak_rss_bytes"] < target else "NO"
        lines.append(
            f"{r['clients']:>11,} {r['concurrency']:>9,} {r['arrivals']:>9,} {r['build_s']:>6.1f}s {r['wall_s']:>6.1f}s {r['cpu_s']:>6.1f}s "
            f"{r['arrivals_per_s']:>10,.0f} {mib(r['population_bytes']):>11} {mib(r['peak_rss_bytes']):>10} "
            f"{mib(r['baseline_rss_bytes']):>9} {'< ' + mib(target) if target else '-':>10} {met:>3} "
            f"{r['load_before']:>4.1f}→{r['load_after']:<4.1f}"
        )
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--one", type=int, nargs=2, metavar=("CLIENTS", "CONCURRENCY"),
                   help="measure one size in this process and print it as one JSON line")
    p.add_argument("--buffer", type=int, default=100)
    p.add_argument("--arrivals", type=int, default=1_000_000)
    p.add_argument("--availability", choices=("always", "diurnal"), default="always")
    args = p.parse_args()
    if args.one:
        print(json.dumps(measure(*args.one, args.buffer, args.arrivals, args.availability)))
        return
    print(f"FedBuff C = {args.buffer}, zero-cost task, availability {args.availability}; one fresh process per size; "
          f"{os.cpu_count()} CPUs")
    rows = []
    for clients, concurrency in SIZES:
        rows.append(in_fresh_process(clients, concurrency, args.buffer, args.arrivals, args.availability))
        print(report(rows[-1:]) if len(rows) == 1 else report(rows[-1:]).splitlines()[1], flush=True)


if __name__ == "__main__":
    main()
