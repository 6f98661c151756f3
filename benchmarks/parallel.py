"""Experiments at scale (issue 16): many runs on every core, and one large run on many cores.

Every figure is a ratio against a reference measured in the same invocation, in rounds: each
round runs every measurement once, in turn, so that the machine's slow spells (minutes long on a
shared VM) touch them alike; the median and the range over rounds are printed.

1. **Sweep throughput** — a sweep of 16 quickstart-sized runs (the quickstart scenario, 200
   steps) through ``asyncfl.run.parallel``: ``--workers 2`` and ``--ray auto`` (2 CPUs) against
   ``--workers 1`` (in process), in runs per second of the whole sweep, start-up included.
2. **One large run on many cores** — the throughput benchmark's FedBuff workload (gaussian-mlp,
   1000 clients, K = 100, C = 50, batch 10, one epoch) with ``run.batched``, on ``processes``
   (2 workers) and on Ray (2 CPUs) against ``inline``: steady client updates per second (from the
   first server step on, so worker start-up is left out) over ``--steps`` server steps.
3. **Start-up** — ``asyncfl --help`` wall time next to ``python -c pass``.
4. **Sweep overhead** — wall time per run of sweeps of 16, 64 and 256 tiny runs (a 5-dim least
   squares problem, 2 steps) on 2 workers.

    python -m benchmarks.parallel [--rounds 3] [--steps 400] [--skip ray]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # a local Ray instance on loopback only

import torch  # noqa: E402

from asyncfl.config import scenario as sc  # noqa: E402
from asyncfl.run.parallel import InProcess, ProcessPool, RayPool, RunJob, run_jobs  # noqa: E402
from asyncfl.sim.engine import Simulation  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "scenarios" / "quickstart.toml"
TINY = {
    "name": "tiny", "seed": 0, "population": {"clients": 30}, "latency": {"dist": "exponential", "mean": 1.0},
    "task": {"name": "quadratic", "problem": "random", "dim": 5, "samples_per_client": 20},
    "client": {"lr": 0.01, "local_steps": 2, "batch_size": 10},
    "server": {"protocol": "fedbuff", "concurrency": 8, "buffer": 3, "rule": "momentum", "lr": 0.5},
    "run": {"steps": 2, "eval_every": 2},
}


def fedbuff(executor: str, steps: int) -> sc.Scenario:
    return sc.validate({
        "name": f"bench-fedbuff-{executor}", "seed": 0, "population": {"clients": 1000},
        "latency": {"dist": "exponential", "mean": 1.0},
        "task": {"name": "gaussian-mlp", "dim": 32, "classes": 10, "samples_per_client": 50, "hidden": 64},
        "client": {"lr": 0.1, "batch_size": 10, "epochs": 1},
        "server": {"protocol": "fedbuff", "concurrency": 100, "buffer": 50, "rule": "sgd", "lr": 1.0},
        "run": {"steps": steps, "eval_every": steps, "train_loss": False, "torch_threads": 1, "workers": 2,
                "executor": executor, "batched": True},
    })


# ---------------------------------------------------------------------------------------------
def sweep_rate(backend_name: str, jobs: int, scenario: sc.Scenario) -> float:
    """Runs per second of a sweep of ``jobs`` runs (seeds 0..jobs-1), backend start-up included."""
    with tempfile.TemporaryDirectory() as tmp:
        todo = [RunJob(f"s{i}", scenario.replace(seed=i), Path(tmp) / f"s{i}") for i in range(jobs)]
        start = time.perf_counter()
        backend = {"workers1": InProcess, "workers2": lambda: ProcessPool(2), "ray2": lambda: RayPool("auto", cpus=2)}[backend_name]()
        try:
            outcomes = run_jobs(todo, backend)
        finally:
            backend.close()
        elapsed = time.perf_counter() - start
    assert all(o.status == "completed" for o in outcomes), [o.message for o in outcomes if o.status != "completed"]
    return jobs / elapsed


async def _steady(sim: Simulation) -> float:
    first = None
    async for event in sim.events():
        if first is None:
            first = (time.perf_counter(), event.accepted)
    return (sim.counters.accepted - first[1]) / (time.perf_counter() - first[0])


def run_rate(executor: str, steps: int) -> float:
    return asyncio.run(_steady(Simulation(fedbuff(executor, steps))))


def startup() -> tuple[float, float]:
    def wall(cmd: list[str]) -> float:
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            best = min(best, time.perf_counter() - start)
        return best

    return wall([sys.executable, "-m", "asyncfl.cli", "--help"]), wall([sys.executable, "-c", "pass"])


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f} (range {min(values):.2f}–{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400, help="server steps of the one-large-run workload")
    parser.add_argument("--skip", default="", help="comma-separated: ray, sweep, run, startup, overhead")
    args = parser.parse_args()
    skip = set(args.skip.split(",")) - {""}
    torch.set_num_threads(1)
    quick = sc.load(QUICKSTART)
    print(f"machine: {os.cpu_count()} cores; {args.rounds} rounds, each measurement once per round", flush=True)

    if "sweep" not in skip:
        backends = ["workers1", "workers2"] + ([] if "ray" in skip else ["ray2"])
        rates: dict[str, list[float]] = {b: [] for b in backends}
        for r in range(args.rounds):
            for b in backends:
                rates[b].append(sweep_rate(b, 16, quick))
            print(f"  sweep round {r + 1}: " + ", ".join(f"{b} {rates[b][-1]:.2f} runs/s" for b in backends), flush=True)
        print("1. sweep of 16 quickstart runs: runs/s, and ÷ --workers 1 in the same round")
        for b in backends:
            ratios = [x / ref for x, ref in zip(rates[b], rates["workers1"])]
            print(f"   {b:9} {spread(rates[b])} runs/s   ratio {spread(ratios)}")

    if "run" not in skip:
        executors = ["inline", "processes"] + ([] if "ray" in skip else ["ray"])
        rates = {e: [] for e in executors}
        for r in range(args.rounds):
            for e in executors:
                rates[e].append(run_rate(e, args.steps))
            print(f"  run round {r + 1}: " + ", ".join(f"{e} {rates[e][-1]:.0f} upd/s" for e in executors), flush=True)
        print(f"2. FedBuff gaussian-mlp K=100 C=50, batched, {args.steps} steps: steady updates/s, ÷ inline batched")
        for e in executors:
            ratios = [x / ref for x, ref in zip(rates[e], rates["inline"])]
            print(f"   {e:9} {spread(rates[e])} upd/s   ratio {spread(ratios)}")

    if "startup" not in skip:
        help_s, pass_s = startup()
        print(f"3. asyncfl --help: {help_s:.3f} s wall (best of 5); python -c pass: {pass_s:.3f} s")

    if "overhead" not in skip:
        tiny = sc.validate(TINY)
        print("4. sweep overhead on 2 workers (tiny 2-step runs): wall seconds per run")
        for n in (16, 64, 256):
            per = [1.0 / sweep_rate("workers2", n, tiny) for _ in range(max(1, args.rounds - 1))]
            print(f"   {n:4} runs: {spread(per)} s/run", flush=True)


if __name__ == "__main__":
    main()
