"""The accuracy cost and the speed of ``run.precision = "bf16"`` (issue 34 item 3), measured through
asyncfl itself: the same scenario run with ``run.precision = "fp32"`` and ``"bf16"``, seed by seed
(the same clients, schedule and mini-batches; only local training's arithmetic differs), on two
convolutional workloads:

* ``mnist1d``: the MNIST-1D CNN (docs/tasks.md §6), 100 clients, FedBuff (10 training at a time,
  buffer 5, the server averaging the buffer: rule sgd, lr 1), 10 local SGD steps of batch 32 at
  lr 0.2, ``--mnist1d-steps`` server steps (150);
* ``femnist``: LEAF's FEMNIST CNN on the FEMNIST twin (docs/tasks.md §18), ``--femnist-users``
  writers (30), FedBuff (10 at a time, buffer 5), 10 local SGD steps of batch 20 at lr 0.05,
  ``--femnist-steps`` server steps (30).

Each run is one process-CPU measurement of the simulation (composition and data excluded; one
torch thread; the test set evaluated at step 0 and at the end only, ``run.train_loss`` off).
Prints, per workload, the final test accuracy per seed both ways, the mean paired difference
(bf16 − fp32) with its 95 % t interval, and CPU seconds per server step with their ratio
(fp32 ÷ bf16: above 1, bf16 is faster). fp32 and bf16 runs alternate, so load drifts touch both.

    python -m benchmarks.bf16_accuracy [--workloads mnist1d femnist] [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import platform
import statistics
import time
from typing import Any

import torch

from asyncfl.compose import compose
from asyncfl.config.scenario import validate
from asyncfl.sim.engine import Simulation

COMMON: dict[str, Any] = {
    "latency": {"dist": "exponential", "mean": 1.0},
    "server": {"protocol": "fedbuff", "concurrency": 10, "buffer": 5, "rule": "sgd", "lr": 1.0},
}


def scenario(workload: str, seed: int, precision: str, args: argparse.Namespace) -> dict[str, Any]:
    """The raw scenario of ``workload`` with ``seed`` and ``run.precision = precision``."""
    if workload == "mnist1d":
        task, clients, steps = {"name": "mnist1d", "model": "cnn"}, 100, args.mnist1d_steps
        client = {"solver": "sgd", "lr": 0.2, "batch_size": 32, "local_steps": 10}
    else:
        task, clients, steps = {"name": "femnist-twin", "users": args.femnist_users}, args.femnist_users, args.femnist_steps
        client = {"solver": "sgd", "lr": 0.05, "batch_size": 20, "local_steps": 10}
    return {"name": f"bf16-{workload}", "seed": seed, "population": {"clients": clients}, "task": task, "client": client,
            **COMMON, "run": {"steps": steps, "eval_every": steps, "train_loss": False, "batched": False,
                               "precision": precision, "torch_threads": 1}}


def measure(raw: dict[str, Any]) -> tuple[float, float]:
    """``(final test accuracy, CPU seconds per server step)`` of one run."""
    sim = Simulation(compose(validate(raw)))
    start = time.process_time()
    asyncio.run(sim.run())
    cpu = time.process_time() - start
    return sim.last_metrics["accuracy"], cpu / sim.steps_done


def t_interval(diffs: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """``(mean, low, high)``: the mean of ``diffs`` and its Student-t interval at ``level``
    (``mean ± t_{n−1, (1+level)/2} · s / √n``)."""
    from scipy import stats

    n, mean = len(diffs), statistics.fmean(diffs)
    if n < 2:
        return mean, math.nan, math.nan
    half = stats.t.ppf((1 + level) / 2, n - 1) * statistics.stdev(diffs) / math.sqrt(n)
    return mean, mean - half, mean + half


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workloads", nargs="+", choices=["mnist1d", "femnist"], default=["mnist1d", "femnist"])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--mnist1d-steps", type=int, default=150)
    parser.add_argument("--femnist-steps", type=int, default=30)
    parser.add_argument("--femnist-users", type=int, default=30)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    print(f"host {platform.node()} · {platform.processor() or platform.machine()} · torch {torch.__version__} · "
          f"load {os.getloadavg()[0]:.2f} · {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}", flush=True)
    for workload in args.workloads:
        rows = []
        for seed in args.seeds:
            (a32, c32), (a16, c16) = (measure(scenario(workload, seed, p, args)) for p in ("fp32", "bf16"))
            rows.append((seed, a32, a16, c32, c16))
            print(f"{workload} seed {seed}: accuracy fp32 {a32:.4f} bf16 {a16:.4f} (Δ {a16 - a32:+.4f}) · CPU s/step "
                  f"fp32 {c32:.3f} bf16 {c16:.3f} (fp32 ÷ bf16 {c32 / c16:.2f}×) · load {os.getloadavg()[0]:.2f}", flush=True)
        mean, low, high = t_interval([a16 - a32 for _, a32, a16, _, _ in rows])
        ratio = statistics.fmean(c32 / c16 for *_, c32, c16 in rows)
        print(f"{workload}: mean accuracy fp32 {statistics.fmean(r[1] for r in rows):.4f} bf16 "
              f"{statistics.fmean(r[2] for r in rows):.4f}; paired Δ (bf16 − fp32) {mean:+.4f}, 95 % t interval "
              f"[{low:+.4f}, {high:+.4f}] (n = {len(rows)}); CPU per step fp32 ÷ bf16 {ratio:.2f}× (mean of seeds)",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
