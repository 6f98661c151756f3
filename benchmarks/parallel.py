"""Experiments at scale (issue 16): many runs on every core, and one large run on many cores.

Every figure is a ratio against a reference measured in the same invocation, in rounds: each
round runs every measurement once, in turn, so that the machine's slow spells (minutes long on a
shared VM) touch them alike; the median and the range over rounds are printed.

1. **Sweep throughput** — a sweep of 16 quickstart-sized runs (the quickstart scenario, 200
   steps) through ``asyncfl.run.parallel``: ``--workers 2`` and ``--ray auto`` (2 CPUs) against
   ``--workers 1`` (in process), in runs per second of the whole sweep, start-up included; then
   each backend's phases (its start, the first run back, all runs back, its close), the ratio
   once the backend is up, and how many such runs a sweep needs before Ray's fixed start and
   close let it reach 1.6× and 1.8×.
2. **One large run on many cores** — the throughput benchmark's FedBuff workload (gaussian-mlp,
   1000 clients, K = 100, C = 50, batch 10, one epoch) with ``run.batched``, on ``processes``
   (2 workers) and on Ray (2 CPUs) against ``inline``: steady client updates per second (from the
   first server step to the last, so the workers' start-up and shutdown are left out) over
   ``--steps`` server steps; also
   for two heavier variants (:data:`WORKLOADS`: hidden 512, and 5 local epochs) over a quarter
   of the steps.
3. **Start-up** — ``asyncfl --help`` wall time next to ``python -c pass``.
4. **Sweep overhead** — wall time per run of sweeps of 16, 64 and 256 tiny runs (a 5-dim least
   squares problem, 2 steps) on 2 workers.
5. **Where a batched step goes** (from the runs of 2) — the inline batched run's wall time per
   update, split in the proportions of its CPU time into the part inside ``train_batched``
   (what a worker pool can take over) and the parent's own (simulation, aggregation,
   evaluation), measured in the same run; from it three upper bounds on 2 workers sharing 2
   cores with the parent (:class:`Bounds`): Amdahl's, ``T / max(parent, T/2)``; the critical
   path's, ``T / (parent + train/2)``, since a step's training and the parent's work follow one
   another (the parent simulates a flush interval far faster than its jobs train, so each
   flush waits for the groups sent since the last); and that with the measured costs of going
   remote (the parent's CPU per step on ``processes``, the fixed cost of each group's
   ``train_batched`` call). Next to them the measured ratios, and the share of the
   ``processes`` run's wall time its event loop was busy (the rest it waited for workers).
   Then the targets of issue 27 next to what bounds them, measured in the same rounds: the
   parent's CPU µs per update (target ≤ 5) beside a bare heapq loop's CPU µs per arrival doing
   the same FedBuff scheduling with the same random draws (:func:`benchmarks.common.heapq_fedbuff`
   on this workload: the parent cannot do less per update than its scheduling), and processes
   ÷ inline (target ≥ 1.4) beside the critical-path bound. The load average is printed with
   the results (the machine is shared).

    python -m benchmarks.parallel [--rounds 3] [--steps 400] [--skip ray]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")  # a local Ray instance on loopback only

import torch  # noqa: E402

from asyncfl.compose import train_batched  # noqa: E402
from asyncfl.compute.solvers import SGDSolver  # noqa: E402
from asyncfl.compute.training import LocalJob  # noqa: E402
from asyncfl.config import scenario as sc  # noqa: E402
from asyncfl.run.parallel import InProcess, ProcessPool, RayPool, RunJob, run_jobs  # noqa: E402
from asyncfl.compose import build_simulation  # noqa: E402
from asyncfl.sim.engine import Simulation  # noqa: E402
from asyncfl.tasks import build_task  # noqa: E402
from benchmarks.common import heapq_fedbuff  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "scenarios" / "quickstart.toml"
TINY = {
    "name": "tiny", "seed": 0, "population": {"clients": 30}, "latency": {"dist": "exponential", "mean": 1.0},
    "task": {"name": "quadratic", "problem": "random", "dim": 5, "samples_per_client": 20},
    "client": {"lr": 0.01, "local_steps": 2, "batch_size": 10},
    "server": {"protocol": "fedbuff", "concurrency": 8, "buffer": 3, "rule": "momentum", "lr": 0.5},
    "run": {"steps": 2, "eval_every": 2},
}


def fedbuff(executor: str, steps: int, overrides: dict | None = None) -> sc.Scenario:
    """The one-large-run workload; ``overrides`` (dotted keys) make the heavier variants."""
    scenario = sc.validate({
        "name": f"bench-fedbuff-{executor}", "seed": 0, "population": {"clients": 1000},
        "latency": {"dist": "exponential", "mean": 1.0},
        "task": {"name": "gaussian-mlp", "dim": 32, "classes": 10, "samples_per_client": 50, "hidden": 64},
        "client": {"lr": 0.1, "batch_size": 10, "epochs": 1},
        "server": {"protocol": "fedbuff", "concurrency": 100, "buffer": 50, "rule": "sgd", "lr": 1.0},
        "run": {"steps": steps, "eval_every": steps, "train_loss": False, "torch_threads": 1, "workers": 2,
                "executor": executor, "batched": True},
    })
    return scenario.replace(**overrides) if overrides else scenario


#: the one-large-run workloads: the issue's (gaussian-mlp, hidden 64, one epoch), a model 8× as
#: wide (every trained model that travels back is 8× as large too), and 5 local epochs (5× the
#: training per job for the same bytes). The heavier two run a quarter of ``--steps``.
WORKLOADS = {
    "hidden 64": {},
    "hidden 512": {"task.hidden": 512},
    "5 epochs": {"client.epochs": 5},
}


# ---------------------------------------------------------------------------------------------
class SweepTiming(NamedTuple):
    """Wall seconds of a sweep's phases: the backend's start (a Ray instance and its actors
    being created), the first run back, every run back, the backend's close."""

    runs: int
    start: float
    first: float
    all_back: float
    close: float

    @property
    def rate(self) -> float:
        return self.runs / (self.start + self.all_back + self.close)


def sweep_timing(backend_name: str, jobs: int, scenario: sc.Scenario) -> SweepTiming:
    """A sweep of ``jobs`` runs (seeds 0..jobs-1), phase by phase."""
    with tempfile.TemporaryDirectory() as tmp:
        todo = [RunJob(f"s{i}", scenario.replace(seed=i), Path(tmp) / f"s{i}") for i in range(jobs)]
        start = time.perf_counter()
        backend = {"workers1": InProcess, "workers2": lambda: ProcessPool(2), "ray2": lambda: RayPool("auto", cpus=2)}[backend_name]()
        up = time.perf_counter()
        back: list[float] = []
        try:
            outcomes = run_jobs(todo, backend, lambda outcome, progress: back.append(time.perf_counter()))
        finally:
            done = time.perf_counter()
            backend.close()
        closed = time.perf_counter()
    assert all(o.status == "completed" for o in outcomes), [o.message for o in outcomes if o.status != "completed"]
    return SweepTiming(jobs, up - start, back[0] - up, done - up, closed - done)


def sweep_rate(backend_name: str, jobs: int, scenario: sc.Scenario) -> float:
    """Runs per second of a sweep of ``jobs`` runs (seeds 0..jobs-1), backend start-up included."""
    return sweep_timing(backend_name, jobs, scenario).rate


class RunProfile(NamedTuple):
    """One run's steady window (from its first server step to its last; worker start-up left
    out): server steps, accepted updates, wall seconds, the CPU seconds spent inside ``train_batched`` calls
    made in this process (inline batched only: there they are the work a pool could take
    over), the CPU seconds of the event loop's thread and of the whole process (all its
    threads: the process executor's reader and queue feeders, Ray's own). CPU, not wall, for
    the parts: on a busy machine a part's wall time also counts the time it waited for a core."""

    steps: int
    updates: int
    seconds: float
    train_cpu: float
    loop_cpu: float
    process_cpu: float

    @property
    def rate(self) -> float:
        return self.updates / self.seconds


class _TrainClock:
    """CPU time of the calling thread inside the SGD solver's ``train_batched`` (what
    :class:`~asyncfl.compute.executors.BatchedExecutor` calls), while installed."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self) -> "_TrainClock":
        real = self._real = SGDSolver.train_batched

        def timed(*args, **kwargs):
            start = time.thread_time()
            try:
                return real(*args, **kwargs)
            finally:
                self.seconds += time.thread_time() - start

        SGDSolver.train_batched = timed
        return self

    def __exit__(self, *exc) -> None:
        SGDSolver.train_batched = self._real


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return time.thread_time(), usage.ru_utime + usage.ru_stime


async def _steady(sim: Simulation, clock: _TrainClock) -> RunProfile:
    """From the first server step's event to the last one's: not the executor's close after it
    (joining the worker processes; ``ray.shutdown()``, ≈ 1.3 s, where the executor started Ray)."""
    first = last = None
    async for event in sim.events():
        mark = (event.step, event.accepted, time.perf_counter(), clock.seconds, *_cpu())  # RunProfile's order
        first, last = first or mark, mark
    assert first is not None and last is not None and last is not first, "a profile needs two server steps or more"
    return RunProfile(*(b - a for a, b in zip(first, last)))


def run_profile(executor: str, steps: int, overrides: dict | None = None) -> RunProfile:
    with _TrainClock() as clock:
        return asyncio.run(_steady(build_simulation(fedbuff(executor, steps, overrides)), clock))


def run_rate(executor: str, steps: int) -> float:
    return run_profile(executor, steps).rate


def group_cost(overrides: dict | None = None, repeats: int = 7) -> tuple[float, float]:
    """``(fixed, per job)`` CPU seconds of one ``train_batched`` call on the workload's task,
    for jobs of one model version: the best of ``repeats`` calls of 10 and of 50 jobs, fitted
    with a line (the fixed part is what every group pays, however small)."""
    scenario = fedbuff("inline", 2, overrides)
    task = build_task(scenario.task, scenario.population.clients, scenario.seed)
    theta = task.initial_theta

    def best(n: int) -> float:
        jobs = [LocalJob(k, theta, theta, 0.0, k) for k in range(n)]
        times = []
        for _ in range(repeats):
            start = time.thread_time()
            train_batched(task, scenario.client, jobs)
            times.append(time.thread_time() - start)
        return min(times)

    t10, t50 = best(10), best(50)
    per_job = max(t50 - t10, 0.0) / 40
    return max(t10 - 10 * per_job, 0.0), per_job


class Bounds(NamedTuple):
    """What inline batched's own profile allows 2 workers on 2 cores. Inline's wall time per
    update ``T`` (µs) is split in the proportions of its CPU time: ``train`` inside
    train_batched (what the workers can take over), ``parent`` the rest (simulation,
    aggregation, evaluation: it stays in the parent, on one of the 2 cores).

    * ``amdahl`` — training moved to the workers for free, parent and workers overlapping
      perfectly: the parent's part is serial and every part needs one of the 2 cores, so
      ``T / max(parent, T/2)`` ≤ 2;
    * ``critical`` — the parent and a step's training one after the other, the training split
      in two: ``T / (parent + train/2)``. This is how the steps go: the parent simulates a
      flush interval's events in far less time than they take to train (every dispatch is a
      few µs of simulation), so each flush waits for the groups sent since the last one;
    * ``with_overhead`` — ``critical`` with the costs a remote step adds, each measured: the
      parent's CPU per step on ``processes`` (messages, receiving the trained models) in place
      of its inline part, and the fixed cost of a ``train_batched`` call (:func:`group_cost`),
      which each worker's group pays again (the inline step paid it once). The round trips'
      latency is still left out: an upper bound."""

    total: float
    train: float
    parent: float
    amdahl: float
    critical: float
    with_overhead: float


def bounds(inline: RunProfile, remote: RunProfile | None = None, fixed_cpu: float = 0.0) -> Bounds:
    share = inline.train_cpu / inline.process_cpu  # CPU proportions: robust to waiting for a core
    total = 1e6 * inline.seconds / inline.updates
    amdahl = 1.0 / max(1.0 - share, 0.5)
    critical = 1.0 / ((1.0 - share) + share / 2)
    with_overhead = math.nan
    if remote is not None:  # per step, in units of inline's CPU per step
        step_cpu = inline.process_cpu / inline.steps
        parent, fixed = (remote.process_cpu / remote.steps) / step_cpu, min(fixed_cpu / step_cpu, share)
        with_overhead = 1.0 / (parent + fixed + (share - fixed) / 2)
    return Bounds(total, share * total, (1 - share) * total, amdahl, critical, with_overhead)


def startup() -> tuple[float, float]:
    def wall(cmd: list[str]) -> float:
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            subprocess.run(cmd, check=True, capture_output=True)
            best = min(best, time.perf_counter() - start)
        return best

    return wall([sys.executable, "-m", "asyncfl.cli", "--help"]), wall([sys.executable, "-c", "pass"])


def heapq_cpu(steps: int, overrides: dict | None = None) -> float:
    """CPU µs per arrival of the bare heapq loop doing the workload's FedBuff scheduling
    (:func:`benchmarks.common.heapq_fedbuff`: the same selection, latency and job-seed draws)."""
    scenario = fedbuff("inline", steps, overrides)
    start = time.process_time()
    arrivals = heapq_fedbuff(scenario)
    return 1e6 * (time.process_time() - start) / arrivals


def parent_cpu(profile: RunProfile) -> float:
    """The parent's CPU µs per update of an inline batched run: its process CPU outside
    ``train_batched``."""
    return 1e6 * (profile.process_cpu - profile.train_cpu) / profile.updates


def load() -> str:
    return "load average (1, 5, 15 min) " + ", ".join(f"{x:.2f}" for x in os.getloadavg())


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
        timings: dict[str, list[SweepTiming]] = {b: [] for b in backends}
        for r in range(args.rounds):
            for b in backends:
                timings[b].append(sweep_timing(b, 16, quick))
            print(f"  sweep round {r + 1}: " + ", ".join(f"{b} {timings[b][-1].rate:.2f} runs/s" for b in backends), flush=True)
        print("1. sweep of 16 quickstart runs: runs/s, and ÷ --workers 1 in the same round")
        for b in backends:
            ratios = [x.rate / ref.rate for x, ref in zip(timings[b], timings["workers1"])]
            print(f"   {b:9} {spread([t.rate for t in timings[b]])} runs/s   ratio {spread(ratios)}")
        print("   phases, wall s (median): backend start | first run back | all runs back | close;"
              " and the ratio without the backend's start and close")
        for b in backends:
            ts = timings[b]
            med = lambda f: statistics.median(f(t) for t in ts)  # noqa: E731
            steady = [ref.all_back / t.all_back for t, ref in zip(ts, timings["workers1"])]
            print(f"   {b:9} {med(lambda t: t.start):5.2f} | {med(lambda t: t.first):5.2f} | {med(lambda t: t.all_back):6.2f} |"
                  f" {med(lambda t: t.close):5.2f}   ratio once started {spread(steady)}")
        if "ray2" in timings:
            # n runs of t1 s each (in process) take n·t1 alone and F + n·t2 on Ray (F: its start and
            # close); the ratio reaches x from n = x·F / (t1 − x·t2) on
            t1 = statistics.median(t.all_back / t.runs for t in timings["workers1"])
            t2 = statistics.median(t.all_back / t.runs for t in timings["ray2"])
            fixed = statistics.median(t.start + t.close for t in timings["ray2"])
            need = {x: f"{math.ceil(x * fixed / (t1 - x * t2))} runs" if t1 > x * t2 else "no size" for x in (1.6, 1.8)}
            print(f"   Ray's start + close, {fixed:.1f} s, is fixed: with {t1:.2f} s runs ({t2:.2f} s each on 2 CPUs once"
                  f" started) a sweep gains 1.6x from {need[1.6]} on, 1.8x from {need[1.8]}")

    if "run" not in skip:
        kinds = ["inline", "processes"] + ([] if "ray" in skip else ["ray"])
        profiles: dict[str, dict[str, list[RunProfile]]] = {w: {k: [] for k in kinds} for w in WORKLOADS}
        loop_cpu: list[float] = []
        print(f"   {load()} at the start of 2", flush=True)
        for r in range(args.rounds):
            loop_cpu.append(heapq_cpu(args.steps))
            for w, overrides in WORKLOADS.items():
                steps = args.steps if not overrides else max(2, args.steps // 4)
                for k in kinds:
                    profiles[w][k].append(run_profile(k, steps, overrides))
            print(f"  run round {r + 1}: " + "; ".join(
                f"{w}: " + ", ".join(f"{k} {profiles[w][k][-1].rate:.0f}" for k in kinds) for w in WORKLOADS) + " upd/s", flush=True)
        print(f"2. FedBuff gaussian-mlp K=100 C=50, batched, {args.steps} steps (the heavier workloads"
              f" {max(2, args.steps // 4)}): steady updates/s, ÷ inline batched")
        for w in WORKLOADS:
            for k in kinds:
                ratios = [x.rate / ref.rate for x, ref in zip(profiles[w][k], profiles[w]["inline"])]
                print(f"   {w:10} {k:9} {spread([p.rate for p in profiles[w][k]])} upd/s   ratio {spread(ratios)}")
        print("5. where inline batched spends a step, and what 2 workers on 2 cores could gain (medians; wall µs per update):")
        print("   train = inside train_batched (a pool can take it over), parent = the rest (simulation, aggregation,"
              " evaluation); bounds: Amdahl = T / max(parent, T/2),")
        print("   critical = T / (parent + train/2) (a step's training waits for the parent, the parent for it),"
              " +overhead = critical with the parent's CPU on processes")
        print("   and a train_batched call's fixed cost paid by each group (fixed); busy = processes' event loop CPU ÷ wall")
        print(f"   {'workload':10} {'inline':>7} {'train':>6} {'parent':>7} {'fixed':>6} {'Amdahl':>7} {'critical':>8} "
              f"{'+overhead':>9} {'processes':>9} {'ray':>5} {'busy':>5}")
        for w, overrides in WORKLOADS.items():
            ps = profiles[w]
            fixed, _ = group_cost(overrides)
            bs = [bounds(i, p, fixed) for i, p in zip(ps["inline"], ps["processes"])]
            med = statistics.median
            ratio = lambda k: med([x.rate / ref.rate for x, ref in zip(ps[k], ps["inline"])]) if k in ps else math.nan  # noqa: E731
            print(f"   {w:10} {med([b.total for b in bs]):7.1f} {med([b.train for b in bs]):6.1f} {med([b.parent for b in bs]):7.1f} "
                  f"{1e3 * fixed:4.2f}ms {med([b.amdahl for b in bs]):6.2f}x {med([b.critical for b in bs]):7.2f}x "
                  f"{med([b.with_overhead for b in bs]):8.2f}x {ratio('processes'):8.2f}x {ratio('ray'):4.2f}x "
                  f"{med([p.loop_cpu / p.seconds for p in ps['processes']]):5.0%}")
        ps = profiles["hidden 64"]
        parents = [parent_cpu(p) for p in ps["inline"]]
        print(f"   targets (issue 27), the issue's workload, median (range) over {args.rounds} rounds; {load()}:")
        print(f"   parent's CPU per update, inline batched {spread(parents)} µs (target ≤ 5); bound: a bare heapq loop's "
              f"CPU per arrival on the same scheduling and draws {spread(loop_cpu)} µs, "
              f"parent ÷ loop {spread([p / q for p, q in zip(parents, loop_cpu)])}")
        crit = [bounds(i).critical for i in ps["inline"]]
        print(f"   processes (2) ÷ inline batched {spread([x.rate / ref.rate for x, ref in zip(ps['processes'], ps['inline'])])}"
              f" (target ≥ 1.4); bound: critical path T / (parent + train/2) {spread(crit)}")

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
