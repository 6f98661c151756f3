"""Local training per device (issue 34 item 7): client updates per second of the LEAF FEMNIST CNN
and the CIFAR CNN on ``--device``, four ways in one run.

Workloads (generated data, nothing read from disk): ``leaf-cnn``, LEAF's FEMNIST CNN (6.6 M
parameters) on the FEMNIST twin's first ``--cohort`` writers (docs/tasks.md §18: their own sample
counts, 28×28 grey images, 62 classes); ``cifar-cnn``, the small CIFAR CNN (docs/tasks.md §15) on
``--cohort`` clients of ``--cifar-samples`` Gaussian 3×32×32 images each, 10 classes. Local SGD
(lr 0.05) with batches of ``--batch`` for one epoch, every client starting from the same model.

Ways, each timed once per round in rotated order (the rounds interleave the ways, so a slow spell
of a shared machine falls on all of them), after one warm-up call each (cuda's kernels and
cuDNN's plans, mps' shaders):

* ``jobs``: asyncfl job by job (``SGDSolver.train`` per client, the task on the device);
* ``batched``: asyncfl batched (``sgd_train_batched`` with the task's batching traits forced on:
  ``vmap`` over each group of clients taking the same number of steps);
* ``pfl``: pfl-research's FedAvg (``benchmarks/pfl_fedavg.py``) on the same model, data and
  hyper-parameters, one central iteration per cohort after one untimed one, on pfl's own default
  device (cuda when torch sees one), when pfl is importable here or through ``--pfl-python``;
* ``kernel``: a bare torch loop, the floor: one ``nn.Module`` loaded with the start weights per
  client, ``cross_entropy(model(x), y).backward()`` and ``p -= lr · p.grad`` over the same
  mini-batches, the batches on the device.

Printed: the device (its name), the host (CPU model, load average, torch and its threads), per
workload and way the median updates per second over ``--rounds`` rounds and their spread
(min–max), of wall time and of this process's CPU time (on a loaded machine the CPU time is the
fair measure; on an accelerator the wall time is), and the ratios to the kernel and to pfl
paired by round (the median of the per-round ratios). On an accelerator each timing ends with a synchronisation. Also printed: how far the
batched models are from the job-by-job ones (float round-off: another summation order).

    python -m benchmarks.device [--device auto] [--rounds 5] [--cohort 20] [--pfl-python PATH]
    python -m benchmarks.device --smoke     # seconds, on the CPU: what CI runs (tests/test_benchmarks.py)
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from typing import Callable

import numpy as np
import torch

from asyncfl.components.contracts import BuildContext
from asyncfl.compute import device as devices
from asyncfl.compute.solvers import SGD_SOLVER
from asyncfl.compute.training import LocalJob, batch_schedule, sgd_train_batched
from asyncfl.config.datasets import FEMNISTTwinTask
from asyncfl.config.scenario import ClientConfig
from asyncfl.tasks.base import ClientData, Task
from asyncfl.tasks.common import cross_entropy, seeded_model
from asyncfl.tasks.femnist_twin import build_femnist_twin
from asyncfl.tasks.models import cifar_cnn
from benchmarks.pfl_fedavg import run_fedavg

LR, EPOCHS, SEED = 0.05, 1, 0
WAYS = ("jobs", "batched", "pfl", "kernel")
WORKLOADS = ("leaf-cnn", "cifar-cnn")
SMOKE = {"rounds": 2, "cohort": 2, "batch": 5, "samples": 10, "cifar_samples": 10}


# -- the workloads (on the CPU; placed on the device by the caller) ------------------------------
def leaf_task(cohort: int, samples: int | None) -> Task:
    """The twin's first ``cohort`` writers with LEAF's CNN (``samples``: at most this many
    training samples a writer, for the smoke size)."""
    task = build_femnist_twin(FEMNISTTwinTask(users=cohort), BuildContext(clients=cohort, seed=SEED))
    return _truncated(task, samples)


def cifar_task(cohort: int, samples: int) -> Task:
    """The CIFAR CNN on ``cohort`` clients of ``samples`` standard-normal 3×32×32 images with
    uniform labels of 10 classes (numpy's generator seeded with :data:`SEED`)."""
    rng = np.random.default_rng(SEED)

    def data(n: int) -> ClientData:
        return ClientData(torch.from_numpy(rng.standard_normal((n, 3072), dtype=np.float32)),
                          torch.from_numpy(rng.integers(0, 10, n)))

    clients = [data(samples) for _ in range(cohort)]
    return Task(name="cifar-cnn", model=seeded_model(lambda: cifar_cnn(10), SEED, torch.float32), clients=clients,
                test=data(samples), loss_fn=cross_entropy, classification=True, batched_training=False)


def _truncated(task: Task, samples: int | None) -> Task:
    if samples is None:
        return task
    return dataclasses.replace(task, clients=[ClientData(c.x[:samples], c.y[:samples]) for c in task.clients])


def workload(name: str, args: argparse.Namespace) -> Task:
    return leaf_task(args.cohort, args.samples) if name == "leaf-cnn" else cifar_task(args.cohort, args.cifar_samples)


# -- the ways ------------------------------------------------------------------------------------
def client_config(batch: int) -> ClientConfig:
    return ClientConfig(lr=LR, batch_size=batch, epochs=EPOCHS)


def jobs_of(task: Task) -> list[LocalJob]:
    theta = task.initial_theta
    return [LocalJob(k, theta, theta, 0.0, seed=1000 + k) for k in range(task.num_clients)]


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued kernels (a timing ends here)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elif device.type == "mps":
        torch.mps.synchronize()


def train_jobs(task: Task, cfg: ClientConfig) -> list[torch.Tensor]:
    return [SGD_SOLVER.train(task, cfg, job) for job in jobs_of(task)]


def train_batched(task: Task, cfg: ClientConfig) -> list[torch.Tensor]:
    forced = dataclasses.replace(task, batched_training=True, batched_on_accelerator=True)
    return sgd_train_batched(forced, cfg, jobs_of(forced))


def kernel_batches(task: Task, cfg: ClientConfig) -> list[list[tuple[torch.Tensor, torch.Tensor]]]:
    """Every client's mini-batches (asyncfl's schedule with the job's seed), gathered on the
    device before the kernel is timed."""
    out = []
    for job in jobs_of(task):
        data = task.clients[job.client]
        schedule = batch_schedule(len(data), cfg, torch.Generator().manual_seed(job.seed))
        out.append([(data.x, data.y) if idx is None else (data.x[idx.to(data.x.device)], data.y[idx.to(data.x.device)])
                    for idx in schedule])
    return out


def train_kernel(task: Task, cfg: ClientConfig, batches: list[list[tuple[torch.Tensor, torch.Tensor]]]) -> None:
    """The bare loop (module doc): no flat vector, no functional call, the module's own weights."""
    model = task.model
    start = [p.detach().clone() for p in model.parameters()]
    for client in batches:
        with torch.no_grad():
            for p, s in zip(model.parameters(), start):
                p.copy_(s)
        for x, y in client:
            loss = torch.nn.functional.cross_entropy(model(x), y)
            grads = torch.autograd.grad(loss, list(model.parameters()))
            with torch.no_grad():
                for p, g in zip(model.parameters(), grads):
                    p.sub_(g, alpha=cfg.lr)
    with torch.no_grad():
        for p, s in zip(model.parameters(), start):
            p.copy_(s)


def time_pfl(task: Task, batch: int) -> tuple[float, float] | None:
    """``(wall, CPU)`` seconds per cohort of pfl's FedAvg (one timed central iteration after an
    untimed one), or None when pfl is not importable here."""
    data = [(c.x, c.y) for c in task.clients]
    t = run_fedavg(copy.deepcopy(task.model), data, task.num_clients, 2, lr=LR, batch=batch, epochs=EPOCHS, sampler="minimize_reuse")
    return None if t is None else (t.end - t.first, t.end_cpu - t.first_cpu)


def pfl_elsewhere(python: str, name: str, args: argparse.Namespace) -> tuple[float, float] | None:
    """:func:`time_pfl` run by ``python`` (an environment with pfl, torch, pydantic and asyncfl)."""
    cmd = [python, "-m", "benchmarks.device", "--pfl-worker", name, "--cohort", str(args.cohort), "--batch", str(args.batch),
           "--cifar-samples", str(args.cifar_samples), *(["--samples", str(args.samples)] if args.samples else [])]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return None if result is None else tuple(result)


# -- the run -------------------------------------------------------------------------------------
def host() -> str:
    """The CPU model, the load average and torch's version and threads."""
    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    load = " ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{model}, {os.cpu_count()} cores, load average {load}; torch {torch.__version__}, {torch.get_num_threads()} thread(s)"


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):8.2f} ({min(values):.2f}–{max(values):.2f})"


def measure(name: str, args: argparse.Namespace, device: torch.device) -> dict:
    """One workload: every way timed once per round in rotated order; returns the updates per
    second of wall and of CPU time (this process's: it does not count waiting for a core on a
    shared machine, nor an accelerator's work) per way and round, and the batched models'
    distance from the job-by-job ones."""
    cpu_task = workload(name, args)
    task = devices.place_task(cpu_task, device)
    cfg = client_config(args.batch)
    batches = kernel_batches(task, cfg)
    n = task.num_clients

    def pfl() -> tuple[float, float] | None:  # the CPU task's data and a copy of its model: pfl places them itself
        return pfl_elsewhere(args.pfl_python, name, args) if args.pfl_python else time_pfl(cpu_task, args.batch)

    def timed(fn: Callable[[], object]) -> tuple[float, float]:
        synchronize(device)
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        synchronize(device)
        return time.perf_counter() - start, time.process_time() - start_cpu

    ways: dict[str, Callable[[], tuple[float, float] | None]] = {
        "jobs": lambda: timed(lambda: train_jobs(task, cfg)),
        "batched": lambda: timed(lambda: train_batched(task, cfg)),
        "pfl": pfl,
        "kernel": lambda: timed(lambda: train_kernel(task, cfg, batches)),
    }
    rates: dict[str, list[float]] = {w: [] for w in WAYS}
    cpu_rates: dict[str, list[float]] = {w: [] for w in WAYS}
    for way in ("jobs", "batched", "kernel"):  # warm-up (pfl times a second iteration itself)
        ways[way]()
    for r in range(args.rounds):
        for way in WAYS[r % len(WAYS):] + WAYS[: r % len(WAYS)]:
            seconds = ways[way]()
            if seconds is not None:
                rates[way].append(n / seconds[0])
                cpu_rates[way].append(n / seconds[1])
    a, b = train_jobs(task, cfg), train_batched(task, cfg)
    gap = max(float((x - y).abs().max()) for x, y in zip(a, b))
    return {"workload": name, "clients": n, "samples": sum(len(c) for c in task.clients), "d": task.dim,
            "rates": {w: v for w, v in rates.items() if v}, "cpu_rates": {w: v for w, v in cpu_rates.items() if v},
            "batched_max_abs_diff": gap}


def report(result: dict) -> None:
    rates, cpu = result["rates"], result["cpu_rates"]
    print(f"{result['workload']}: {result['clients']} clients, {result['samples']} training samples, d = {result['d']}; "
          f"batched − job by job: max |Δθ| = {result['batched_max_abs_diff']:.2e}")
    print("   way      updates/s of wall: median (min–max), of CPU time; ratios paired by round (wall, CPU)")
    for way, values in rates.items():
        line = f"   {way:8} {spread(values)}  {spread(cpu[way])}"
        for ref in ("kernel", "pfl"):
            if ref in rates and ref != way:
                paired = [statistics.median(v / r for v, r in zip(mine[way], mine[ref])) for mine in (rates, cpu)]
                line += f"   ÷ {ref} {paired[0]:.2f}, {paired[1]:.2f}"
        print(line)
    if "pfl" not in rates:
        print("   pfl      not importable here (pip install pfl, or give --pfl-python)")


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="auto", help="a run.device value (default: auto)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cohort", type=int, default=20)
    parser.add_argument("--batch", type=int, default=20)
    parser.add_argument("--samples", type=int, default=None, help="at most this many samples a FEMNIST writer")
    parser.add_argument("--cifar-samples", type=int, default=100)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads (CPU)")
    parser.add_argument("--workloads", default=",".join(WORKLOADS))
    parser.add_argument("--smoke", action="store_true", help="a seconds-long run on tiny sizes (CI)")
    parser.add_argument("--pfl-python", default=None, help="a python with pfl installed (default: this one)")
    parser.add_argument("--pfl-worker", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        for key, value in SMOKE.items():
            setattr(args, key, value)
    torch.set_num_threads(args.threads)
    if args.pfl_worker:
        print(json.dumps(time_pfl(workload(args.pfl_worker, args), args.batch)))
        return []
    device = devices.resolve(args.device)
    devices.prepare(device)
    print(f"device: {devices.describe(device)}")
    print(f"host: {host()}")
    print(f"{args.rounds} rounds, batch {args.batch}, {EPOCHS} epoch, lr {LR}", flush=True)
    results = []
    for name in args.workloads.split(","):
        results.append(measure(name, args, device))
        report(results[-1])
    return results


if __name__ == "__main__":
    main()
    sys.exit(0)
