"""The FEMNIST-shaped CNN workload (issue 24's targets): client updates per second.

Workload: the FEMNIST twin (``femnist-twin``: 28×28, 62 classes, FEMNIST's per-writer counts,
docs/tasks.md §18) with LEAF's CNN (6.6 M parameters), a cohort of ``--cohort`` (50) writers,
local SGD (lr 0.05) with batches of 20 for one epoch, every client starting from the same model;
torch threads 1 everywhere.

1. **One thread each.** One cohort's local training, timed three ways on the same data, model
   and hyper-parameters, each once per round, in turn (the median over ``--rounds`` is printed):
   asyncfl's ``train_batched`` as the task declares it (``asyncfl``: LEAF's CNN trains job by job,
   docs/tasks.md §19), the same forced through ``vmap`` over each group of clients that take the
   same number of steps (``vmap``), and pfl-research's FedAvg (``pfl``: ``SimulatedBackend`` + ``FederatedAveraging``, one central
   iteration per cohort; its steady time per iteration is counted from the end of its first
   iteration, so its set-up is left out). pfl conflicts with asyncfl's pins (it needs
   ``dp-accounting < 0.6``), so it can run from another environment: ``--pfl-python PATH`` runs
   this module's ``--pfl-worker`` there (that environment needs torch, pfl, pydantic and asyncfl
   installed with ``--no-deps``). Then where the batched path's time goes (torch's profiler:
   the operators with the most CPU time) and how the cohort splits into groups.
2. **Where a run's CPU time goes** (``--system-time``, issue 34): a short FedBuff run of asyncfl
   (``asyncfl run`` in a child process, its own ``getrusage``) on the twin with LEAF's CNN and
   with the 2NN MLP (``--clients`` writers, K = ``--concurrency``, C = ``--buffer``, ``--steps``
   steps, 10 local steps of batch 20, evaluated every ``--eval-every`` steps with the training
   loss): user and system CPU seconds, the system share and the minor page faults of each; then
   the same split for part 1's ways (one cohort's local training: asyncfl, the bare torch loop of
   ``benchmarks/device.py``, and pfl). Real-data CNN runs spent 17–20 % of their CPU in system time
   against 5 % for MLP runs: evaluation's 8192-row forward passes, whose activations glibc mapped and
   faulted in afresh on every pass (docs/performance.md, "System time"). ``--smoke`` runs it at a
   toy size in seconds (``tests/test_benchmarks.py``).
3. **Two worker processes against inline** (``--parallel``): the FedBuff run of
   ``benchmarks/parallel.py`` on this workload (``--clients`` writers, K = ``--concurrency``,
   C = ``--buffer``, ``run.batched``), steady updates per second on ``processes`` (2 workers) and
   ``inline``, next to the bounds that benchmark computes from inline's own profile (Amdahl's,
   the critical path's, and that with the measured costs of going remote).

    python -m benchmarks.femnist_throughput [--rounds 3] [--cohort 50] [--pfl-python /path/to/python]
    python -m benchmarks.femnist_throughput --system-time [--clients 40 --steps 10 --eval-every 5] [--smoke]
    python -m benchmarks.femnist_throughput --parallel --steps 4 [--clients 100 --concurrency 20 --buffer 10]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import NamedTuple

import torch

from asyncfl.components.contracts import BuildContext
from asyncfl.config.datasets import FEMNISTTwinTask
from asyncfl.tasks.base import Task
from asyncfl.tasks.femnist_twin import build_femnist_twin
from benchmarks.pfl_fedavg import run_fedavg

LR, BATCH, EPOCHS, SEED = 0.05, 20, 1, 0


def cohort_task(cohort: int) -> Task:
    """The twin with exactly ``cohort`` writers, all of them clients (LEAF's CNN)."""
    return build_femnist_twin(FEMNISTTwinTask(users=cohort), BuildContext(clients=cohort, seed=SEED))


def client_config():
    from asyncfl.config.scenario import ClientConfig  # the pfl worker's environment needs only the task

    return ClientConfig(lr=LR, batch_size=BATCH, epochs=EPOCHS)


def _jobs(task: Task):
    from asyncfl.compute.training import LocalJob

    theta = task.initial_theta
    return [LocalJob(k, theta, theta, 0.0, seed=1000 + k) for k in range(task.num_clients)]


def time_batched(task: Task, vmap: bool | None = None) -> tuple[float, float]:
    """``(wall, cpu)`` seconds of one ``train_batched`` call on the cohort: as the task declares
    (``Task.batched_training``: one by one for LEAF's CNN), or forced through ``vmap``."""
    from asyncfl.compose import train_batched

    declared = task.batched_training
    task.batched_training = declared if vmap is None else vmap
    try:
        start, start_cpu = time.perf_counter(), time.process_time()
        train_batched(task, client_config(), _jobs(task))
        return time.perf_counter() - start, time.process_time() - start_cpu
    finally:
        task.batched_training = declared


def groups(task: Task) -> Counter:
    """How many clients take each number of local steps (a group trains together)."""
    from asyncfl.compute.training import local_steps_count

    cfg = client_config()
    return Counter(local_steps_count(len(c), cfg) for c in task.clients)


def profile_batched(task: Task, top: int = 6) -> list[tuple[str, float]]:
    """``(operator, share of CPU time)`` of the batched call's most expensive operators."""
    from asyncfl.compose import train_batched

    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        train_batched(task, client_config(), _jobs(task))  # as the task declares
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    ranked = sorted(events, key=lambda e: -e.self_cpu_time_total)[:top]
    return [(e.key, e.self_cpu_time_total / total) for e in ranked]


def time_pfl(cohort: int, iterations: int = 3) -> tuple[float, float] | None:
    """``(wall, cpu)`` seconds per cohort of pfl's FedAvg on the same twin, model and initial
    weights (every user in every cohort), from the end of its first central iteration on (its
    set-up left out), or None when pfl is not installed here."""
    task = cohort_task(cohort)
    t = run_fedavg(task.model, [(c.x, c.y) for c in task.clients], cohort, iterations, lr=LR, batch=BATCH, epochs=EPOCHS,
                   sampler="minimize_reuse")
    if t is None:
        return None
    steady = max(iterations - 1, 1)
    return (t.end - t.first) / steady, (t.end_cpu - t.first_cpu) / steady


def pfl_elsewhere(python: str, cohort: int) -> tuple[float, float] | None:
    """:func:`time_pfl` run by ``python`` (an environment with pfl installed)."""
    out = subprocess.run([python, "-m", "benchmarks.femnist_throughput", "--pfl-worker", "--cohort", str(cohort)],
                         capture_output=True, text=True, check=True)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return None if result is None else tuple(result)


class CpuSplit(NamedTuple):
    """User and system CPU seconds and minor page faults of a piece of work (``getrusage``)."""

    user: float
    system: float
    faults: int

    @property
    def share(self) -> float:
        """The system time's share of the CPU time."""
        return self.system / max(self.user + self.system, 1e-12)

    def __sub__(self, other: "CpuSplit") -> "CpuSplit":  # type: ignore[override]
        return CpuSplit(self.user - other.user, self.system - other.system, self.faults - other.faults)


def cpu_split(who: int = resource.RUSAGE_SELF) -> CpuSplit:
    usage = resource.getrusage(who)
    return CpuSplit(usage.ru_utime, usage.ru_stime, usage.ru_minflt)


SMOKE_RUN = {"clients": 4, "concurrency": 2, "buffer": 1, "steps": 2, "eval_every": 1, "local_steps": 1}


def run_scenario(model: str, clients: int, concurrency: int, buffer: int, steps: int, eval_every: int,
                 local_steps: int = 10) -> str:
    """The profiled run's scenario: FedBuff on the twin (``clients`` writers, all of them clients),
    LEAF's CNN or the 2NN (``model``), SGD at lr 0.05 on batches of 20, training loss evaluated."""
    return f"""name = "system-time-{model}"
seed = 0
[population]
clients = {clients}
[task]
name = "femnist-twin"
users = {clients}
model = "{model}"
[client]
solver = "sgd"
lr = {LR}
batch_size = {BATCH}
local_steps = {local_steps}
[server]
protocol = "fedbuff"
concurrency = {concurrency}
buffer = {buffer}
rule = "sgd"
lr = 1.0
[run]
steps = {steps}
eval_every = {eval_every}
train_loss = true
"""


def profile_run(model: str, sizes: dict[str, int]) -> CpuSplit:
    """``asyncfl run`` of :func:`run_scenario` in a child process; the child's own CPU split
    (the figure process it starts is another process, not counted)."""
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp, "scenario.toml")
        scenario.write_text(run_scenario(model, **sizes))
        out = subprocess.run([sys.executable, "-m", "benchmarks.femnist_throughput", "--run-worker", str(scenario),
                              str(Path(tmp, "run"))], capture_output=True, text=True, check=True,
                             env={**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [os.getcwd(), os.environ.get("PYTHONPATH")]))})
    return CpuSplit(*json.loads(out.stdout.strip().splitlines()[-1]))


def run_worker(scenario: str, out: str) -> None:
    """The child of :func:`profile_run`: the run, then this process's CPU split as JSON."""
    from asyncfl.cli.main import main as cli

    code = cli(["run", scenario, "--out", out, "--quiet"])
    if code:
        raise SystemExit(code)
    print(json.dumps(list(cpu_split())))


def describe(name: str, split: CpuSplit) -> str:
    return (f"   {name:14} user {split.user:7.2f} s  system {split.system:6.2f} s  ({split.share:5.1%} system)  "
            f"minor faults {split.faults:>9,}")


def system_time(args: argparse.Namespace) -> dict[str, CpuSplit]:
    """Part 2 (module doc): the runs' CPU split for LEAF's CNN and the MLP, then the local-training
    ways'; returns every split by name."""
    sizes = dict(SMOKE_RUN) if args.smoke else {"clients": args.clients, "concurrency": args.concurrency,
                                                "buffer": args.buffer, "steps": args.steps,
                                                "eval_every": args.eval_every}
    print(f"2. where a run's CPU time goes (load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}): FedBuff on the twin, "
          f"{sizes['clients']} writers, K = {sizes['concurrency']}, C = {sizes['buffer']}, {sizes['steps']} steps, "
          f"evaluated every {sizes['eval_every']} with the training loss", flush=True)
    splits = {}
    for model in ("cnn", "mlp"):
        splits[f"run {model}"] = profile_run(model, sizes)
        print(describe(f"run {model}", splits[f"run {model}"]), flush=True)
    cohort = 2 if args.smoke else args.cohort
    task = cohort_task(cohort)
    if args.smoke:
        from asyncfl.tasks.base import ClientData
        task.clients = [ClientData(c.x[:10], c.y[:10]) for c in task.clients]
    ways = {"asyncfl": lambda: time_batched(task), "kernel": lambda: time_kernel(task)}
    for name, way in ways.items():
        way()  # warm-up: the first call's allocations are not the steady state
        before = cpu_split()
        way()
        splits[name] = cpu_split() - before
    print(f"   one cohort's local training ({cohort} writers, {sum(len(c) for c in task.clients)} samples):", flush=True)
    for name in ways:
        print(describe(name, splits[name]))
    return splits


def time_kernel(task: Task) -> None:
    """The bare torch loop of ``benchmarks/device.py`` on the cohort (the same mini-batches)."""
    from benchmarks.device import kernel_batches, train_kernel

    cfg = client_config()
    train_kernel(task, cfg, kernel_batches(task, cfg))


def parallel(args: argparse.Namespace) -> None:
    from benchmarks.parallel import bounds, group_cost, run_profile

    overrides = {"population.clients": args.clients, "task": {"name": "femnist-twin", "users": args.clients},
                 "server.concurrency": args.concurrency, "server.buffer": args.buffer,
                 "client.lr": LR, "client.batch_size": BATCH}
    rates: dict[str, list[float]] = {"inline": [], "processes": []}
    profiles = {}
    for r in range(args.rounds):
        for kind in rates:
            profiles[kind] = run_profile(kind, args.steps, overrides)
            rates[kind].append(profiles[kind].rate)
        print(f"  round {r + 1}: " + ", ".join(f"{k} {v[-1]:.1f} upd/s" for k, v in rates.items()), flush=True)
    fixed, per_job = group_cost(overrides, repeats=2)
    b = bounds(profiles["inline"], profiles["processes"], fixed)
    ratio = statistics.median(p / i for p, i in zip(rates["processes"], rates["inline"]))
    print(f"2. FedBuff on the twin ({args.clients} writers, K = {args.concurrency}, C = {args.buffer}, {args.steps} steps): "
          f"processes (2 workers) ÷ inline = {ratio:.2f}")
    print(f"   bounds from inline's profile: Amdahl {b.amdahl:.2f}, critical path {b.critical:.2f}, with the remote "
          f"costs {b.with_overhead:.2f}; inline µs per update {b.total:.0f} (training {b.train:.0f}, parent {b.parent:.0f}); "
          f"a group's fixed cost {fixed * 1e3:.1f} ms, {per_job * 1e3:.1f} ms per job")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cohort", type=int, default=50)
    parser.add_argument("--pfl-python", default=None, help="a python with pfl installed (default: this one)")
    parser.add_argument("--pfl-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--parallel", action="store_true", help="part 3 only")
    parser.add_argument("--system-time", action="store_true", help="part 2 only")
    parser.add_argument("--smoke", action="store_true", help="part 2 at a toy size, in seconds (CI)")
    parser.add_argument("--eval-every", type=int, default=5)
    parser.add_argument("--run-worker", nargs=2, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--no-vmap", action="store_true", help="skip the forced vmap measurement")
    parser.add_argument("--steps", type=int, default=None, help="server steps (default: 10 for --system-time, 4 for --parallel)")
    parser.add_argument("--clients", type=int, default=None, help="writers (default: 40 for --system-time, 100 for --parallel)")
    parser.add_argument("--concurrency", type=int, default=20)
    parser.add_argument("--buffer", type=int, default=10)
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    if args.run_worker:
        run_worker(*args.run_worker)
        return
    if args.pfl_worker:
        print(json.dumps(time_pfl(args.cohort)))
        return
    if args.system_time:
        args.clients, args.steps = args.clients or 40, args.steps or 10
        system_time(args)
        return
    args.clients, args.steps = args.clients or 100, args.steps or 4
    if args.parallel:
        parallel(args)
        return
    task = cohort_task(args.cohort)
    sizes = [len(c) for c in task.clients]
    print(f"twin cohort: {args.cohort} writers, {sum(sizes)} training samples ({min(sizes)}–{max(sizes)} each), "
          f"d = {task.dim}; batch {BATCH}, {EPOCHS} epoch; groups by step count: "
          f"{len(groups(task))} ({dict(sorted(groups(task).items()))})", flush=True)
    times: dict[str, list[tuple[float, float]]] = {"asyncfl": [], "vmap": [], "pfl": []}
    for r in range(args.rounds):
        times["asyncfl"].append(time_batched(task))
        if not args.no_vmap:
            times["vmap"].append(time_batched(task, vmap=True))
        pfl = pfl_elsewhere(args.pfl_python, args.cohort) if args.pfl_python else time_pfl(args.cohort)
        if pfl is not None:
            times["pfl"].append(pfl)
        print(f"  round {r + 1} (wall / CPU s): " + ", ".join(f"{k} {v[-1][0]:.1f} / {v[-1][1]:.1f}" for k, v in times.items() if v),
              flush=True)
    print(f"1. one cohort of {args.cohort}, one thread each: client updates per second of wall and of CPU time "
          f"(median of {args.rounds} rounds; CPU time does not count waiting for a core on a shared machine)")
    for k, v in times.items():
        if not v:
            continue
        wall, cpu = (args.cohort / statistics.median(t[i] for t in v) for i in (0, 1))
        line = f"   {k:8} {wall:6.2f} /s wall  {cpu:6.2f} /s CPU"
        if times["pfl"]:
            paired = statistics.median(p[1] / t[1] for t, p in zip(v, times["pfl"]))
            line += f"   ÷ pfl, paired by round: {statistics.median(p[0] / t[0] for t, p in zip(v, times['pfl'])):.2f} wall, {paired:.2f} CPU"
        print(line)
    if not times["pfl"]:
        print("   pfl: not installed here (give --pfl-python)")
    print("   where asyncfl's CPU time goes: " + ", ".join(f"{k} {s:.0%}" for k, s in profile_batched(task)))


if __name__ == "__main__":
    sys.exit(main())
