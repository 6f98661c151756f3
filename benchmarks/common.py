"""Shared pieces of the benchmarks: a zero-cost task and a bare heapq FedBuff loop."""

from __future__ import annotations

import heapq
import time
from typing import Any

import numpy as np
import torch

from asyncfl import rng as rngmod
from asyncfl.config import scenario as sc
from asyncfl.tasks.base import ClientData, Task
from asyncfl.tasks.common import half_squared_error


def null_task() -> Task:
    """A 1-parameter task with no client data: with :class:`~asyncfl.compute.executors.NullExecutor`
    a run costs only the engine (evaluation sees one test sample)."""
    model = torch.nn.Linear(1, 1, bias=False).double()
    one = ClientData(torch.zeros(1, 1, dtype=torch.float64), torch.zeros(1, dtype=torch.float64))
    return Task(name="null", model=model, clients=[], test=one, loss_fn=lambda out, y: half_squared_error(out.squeeze(-1), y),
                classification=False, initial_theta=torch.zeros(1, dtype=torch.float64))


def engine_scenario(clients: int, concurrency: int, buffer: int, steps: int, seed: int = 0,
                    availability: str = "always") -> sc.Scenario:
    """FedBuff on ``clients`` log-normal-speed clients (σ = 0.5) with exponential latencies;
    ``availability``: the population's availability model (its default keys)."""
    return sc.validate({
        "name": "engine-bench", "seed": seed,
        "population": {"clients": clients, "speed_sigma": 0.5, "availability": availability},
        "latency": {"dist": "exponential", "mean": 1.0},
        "task": {"name": "quadratic", "dim": 1, "samples_per_client": 1},  # not built: null_task is passed
        "client": {"lr": 0.1, "local_steps": 1},
        "server": {"protocol": "fedbuff", "concurrency": concurrency, "buffer": buffer, "rule": "sgd", "lr": 1.0},
        "run": {"steps": steps, "eval_every": steps},
    })


def heapq_fedbuff(scenario: sc.Scenario) -> int:
    """The same FedBuff scheduling as the engine (same streams and draws: speeds, selection by
    rejection sampling, latency, one job seed per dispatch) on a bare heap; returns arrivals."""
    server, pop = scenario.server, scenario.population
    streams = rngmod.make_streams(scenario.seed)
    n = pop.clients
    speeds = np.exp(pop.speed_sigma * streams["speed"].standard_normal(n)) if pop.speed_sigma > 0 else np.ones(n)
    busy = np.zeros(n, dtype=bool)
    sel, lat, jobs = streams["selection"], streams["latency"], streams["jobs"]
    mean = scenario.latency.mean
    heap: list[tuple[float, int, int, int, float]] = []
    rows: list[tuple] = []
    buffer: list[tuple] = []
    seq, version, arrivals = 0, 1, 0

    def choose() -> int:
        for _ in range(32):
            k = int(sel.integers(n))
            if not busy[k]:
                return k
        return int(sel.choice(np.flatnonzero(~busy)))

    def dispatch(now: float) -> None:
        nonlocal seq
        k = choose()
        busy[k] = True
        rngmod.job_seed(jobs)
        seq += 1
        heapq.heappush(heap, (now + float(speeds[k]) * float(lat.exponential(mean)), seq, k, version, now))

    for _ in range(server.concurrency):
        dispatch(0.0)
    while version <= scenario.run.steps:
        t, _, k, v, d = heapq.heappop(heap)
        arrivals += 1
        busy[k] = False
        buffer.append((k, v, version, d, t, version - v, True, ""))
        if len(buffer) == server.buffer:
            rows.extend(buffer)
            buffer = []
            version += 1
            if version > scenario.run.steps:
                break
        dispatch(t)
    return arrivals


def timed(fn, *args: Any, **kwargs: Any) -> tuple[Any, float]:
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start
