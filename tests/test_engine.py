"""The simulator's clock and protocols (docs/protocol.md), checked against a brute-force heapq loop
and against invariants that must hold on every run."""

from __future__ import annotations

import asyncio
import heapq
import math

import numpy as np
import pytest

from asyncfl import rng as rngmod
from asyncfl.server.aggregation import weight_matrix
from asyncfl.sim.engine import Simulation, StepEvent
from asyncfl.compose import build_simulation, run_blocking

from conftest import make_scenario


def reference_fedbuff(scenario):
    """An independent FedBuff loop on a heap: same seeded streams, no simpy, no training."""
    server, pop = scenario.server, scenario.population
    streams = rngmod.make_streams(scenario.seed)
    n = pop.clients
    speeds = np.exp(pop.speed_sigma * streams["speed"].standard_normal(n)) if pop.speed_sigma > 0 else np.ones(n)
    busy = np.zeros(n, dtype=bool)
    sel, lat = streams["selection"], streams["latency"]

    def choose():
        for _ in range(32):
            k = int(sel.integers(n))
            if not busy[k]:
                return k
        return int(sel.choice(np.flatnonzero(~busy)))

    heap, rows, buffer = [], [], []
    state = {"seq": 0, "version": 1}

    def dispatch(now):
        k = choose()
        busy[k] = True
        latency = speeds[k] * lat.exponential(scenario.latency.mean)
        state["seq"] += 1
        heapq.heappush(heap, (now + latency, state["seq"], k, state["version"], now))

    for _ in range(server.concurrency):
        dispatch(0.0)
    while state["version"] <= scenario.run.steps:
        t, _, k, v, d = heapq.heappop(heap)
        busy[k] = False
        tau = state["version"] - v
        if server.max_staleness is not None and tau > server.max_staleness:
            rows.append((k, v, state["version"], tau, False, t))
        else:
            buffer.append((k, v, state["version"], tau, True, t))
            if len(buffer) == server.buffer:
                rows.extend(buffer)
                buffer = []
                state["version"] += 1
                if state["version"] > scenario.run.steps:
                    break
        dispatch(t)
    return rows


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("concurrency,buffer,max_staleness", [(8, 3, 4), (12, 1, None), (5, 5, 0)])
def test_fedbuff_matches_heapq_reference(seed, concurrency, buffer, max_staleness):
    scenario = make_scenario({
        "seed": seed, "server.concurrency": concurrency, "server.buffer": buffer,
        "server.max_staleness": max_staleness, "run.steps": 25, "run.eval_every": 25,
    })
    sim = run_blocking(scenario)
    got = [(r.client, r.version, r.step, r.staleness, r.accepted, r.arrival_time) for r in sim.sink.updates]
    want = reference_fedbuff(scenario)
    assert got == [(k, v, s, tau, acc, pytest.approx(t, abs=1e-12)) for k, v, s, tau, acc, t in want]


def _check_invariants(sim: Simulation, scenario) -> None:
    rows = sim.sink.updates
    accepted = [r for r in rows if r.accepted]
    # staleness = step − version ≥ 0
    assert all(r.staleness == r.step - r.version >= 0 for r in rows if r.reason != "late")
    # each step consumes exactly C accepted updates (FedBuff)
    steps = np.bincount([r.step for r in accepted], minlength=scenario.run.steps + 1)[1:]
    if scenario.server.protocol == "fedbuff":
        assert (steps == scenario.server.buffer).all()
        assert all(r.staleness <= (scenario.server.max_staleness if scenario.server.max_staleness is not None else 10**9) for r in accepted)
    counts = sim.by_staleness()
    assert counts.shape[0] == scenario.run.steps
    assert (counts.sum(axis=1) == steps).all()
    # never more than K (or the cohort) clients in flight: sweep the dispatch/arrival intervals
    limit = scenario.server.concurrency if scenario.server.protocol == "fedbuff" else scenario.server.cohort
    events = sorted([(r.dispatch_time, 1) for r in rows] + [(r.arrival_time, -1) for r in rows], key=lambda e: (e[0], e[1]))
    level, peak = 0, 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    assert peak <= limit
    # arrivals never precede their dispatch; virtual time is monotone in the log of accepted rows per step
    assert all(r.arrival_time >= r.dispatch_time for r in rows)


@pytest.mark.parametrize("overrides", [
    {},
    {"server.buffer": 1, "server.max_staleness": None},
    {"server.concurrency": 20, "server.buffer": 2, "server.max_staleness": 3, "latency.dist": "lognormal", "latency.mean": None, "latency.median": 1.0, "latency.sigma": 1.0},
    {"latency.dist": "uniform", "latency.mean": None, "latency.low": 0.1, "latency.high": 2.0, "server.staleness_exponent": 0.5},
    {"server.protocol": "sync", "server.concurrency": None, "server.cohort": 6, "server.buffer": 4, "server.max_staleness": None},
    {"server.protocol": "sync", "server.concurrency": None, "server.cohort": 5, "server.buffer": None, "server.max_staleness": None},
])
def test_invariants_hold(overrides):
    scenario = make_scenario({"run.steps": 20, **overrides})
    sim = run_blocking(scenario)
    _check_invariants(sim, scenario)


def test_rows_of_w_sum_to_one_without_staleness_weighting():
    scenario = make_scenario({"server.staleness_exponent": 0.0, "server.concurrency": 15, "server.buffer": 4, "run.steps": 30})
    sim = run_blocking(scenario)
    W = weight_matrix(sim.by_staleness(), 0.0, scenario.server.buffer)
    np.testing.assert_allclose(W.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    assert np.allclose(W, np.tril(W))  # lower triangular: nothing from the future


def test_sync_protocol_has_identity_w_and_a_round_lasts_until_its_cth_arrival():
    scenario = make_scenario({"server.protocol": "sync", "server.concurrency": None, "server.cohort": 6, "server.buffer": 4, "server.max_staleness": None})
    sim = run_blocking(scenario)
    W = weight_matrix(sim.by_staleness(), 0.7, scenario.server.buffer)
    np.testing.assert_array_equal(W, np.eye(scenario.run.steps))
    rows = sim.sink.updates
    for step in range(1, scenario.run.steps + 1):
        this = [r for r in rows if r.version == step]
        accepted = sorted(r.arrival_time for r in this if r.accepted)
        late = [r for r in this if r.reason == "late"]
        assert len(accepted) == 4 and len(late) == 2
        assert all(r.arrival_time >= accepted[-1] for r in late)  # the first C arrivals are kept
        assert sim.records.step_times[step - 1] == accepted[-1]  # the round ends at its C-th arrival
        if step > 1:  # the next cohort is dispatched when the previous round closes
            assert all(r.dispatch_time == sim.records.step_times[step - 2] for r in this)


def test_same_seed_same_records_and_different_seed_differs():
    a = run_blocking(make_scenario())
    b = run_blocking(make_scenario())
    c = run_blocking(make_scenario({"seed": 99}))
    strip = lambda rows: [{k: v for k, v in r.items() if k != "wall_time"} for r in rows]
    assert a.sink.updates == b.sink.updates
    assert strip(a.sink.metrics) == strip(b.sink.metrics)
    assert bool((a.theta == b.theta).all())
    assert a.sink.updates != c.sink.updates


def test_fedasync_is_buffer_one():
    sim = run_blocking(make_scenario({"server.buffer": 1, "server.max_staleness": None, "run.steps": 15}))
    assert (sim.by_staleness().sum(axis=1) == 1).all()


@pytest.mark.asyncio
async def test_events_is_an_async_iterator_of_steps():
    sim = build_simulation(make_scenario({"run.steps": 9, "run.eval_every": 3}))
    events: list[StepEvent] = [e async for e in sim.events()]
    assert [e.step for e in events] == list(range(1, 10))
    assert [e.step for e in events if e.metrics is not None] == [3, 6, 9]
    assert all(e2.time >= e1.time for e1, e2 in zip(events, events[1:]))
    assert sim.finished


@pytest.mark.asyncio
async def test_thread_executor_gives_the_same_run_as_inline():
    inline = build_simulation(make_scenario())
    await inline.run()
    threaded = build_simulation(make_scenario({"run.executor": "threads", "run.workers": 2}))
    await threaded.run()
    assert inline.sink.updates == threaded.sink.updates
    assert bool((inline.theta == threaded.theta).all())


def test_training_reduces_the_loss_on_the_quadratic_task():
    sim = run_blocking(make_scenario({"run.steps": 40, "run.eval_every": 40, "server.rule": "sgd", "server.lr": 1.0, "client.lr": 0.01}))
    first, last = sim.sink.metrics[0], sim.sink.metrics[-1]
    optimum = sim.task.train_loss(sim.task.quadratic.pooled_solution())  # F* of the pooled problem
    assert last["train_loss"] - optimum < 0.1 * (first["train_loss"] - optimum)


def test_train_loss_off_skips_the_pass_over_all_clients_and_changes_nothing_else(monkeypatch):
    on = run_blocking(make_scenario())
    sim = build_simulation(make_scenario({"run.train_loss": False}))
    monkeypatch.setattr(type(sim.task), "train_loss", lambda self, theta: pytest.fail("train_loss evaluated"))
    asyncio.run(sim.run())
    assert all(math.isnan(row["train_loss"]) for row in sim.sink.metrics)
    assert [r["loss"] for r in sim.sink.metrics] == [r["loss"] for r in on.sink.metrics]
    assert sim.sink.updates == on.sink.updates and bool((sim.theta == on.theta).all())
