"""The population at scale (docs/architecture.md §10): a few bytes a client in numpy arrays, never
one Python object a client, and the compact forms answer exactly as the per-client forms they
replace (the same seed gives the same run, so every answer is compared for equality, not
closeness)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from asyncfl import rng as rngmod
from asyncfl.clients.availability import Diurnal, Schedule, diurnal
from asyncfl.clients.fedscale import AvailabilityTrace
from asyncfl.clients.fleet import draw_speeds
from asyncfl.config import memory
from asyncfl.compose import build_simulation

from conftest import make_scenario

REPO = Path(__file__).resolve().parents[1]


def per_client_diurnal(clients: int, period: float, fraction: float, rng: np.random.Generator) -> Schedule:
    """The diurnal schedule as it was built before the compact form: one profile of one window
    per client, ``[φ_k, φ_k + f·P)`` with period ``P``, always online when ``f = 1``."""
    phases = rng.uniform(0.0, period, size=clients)
    schedule = Schedule([np.array([p]) for p in phases], [np.array([p + fraction * period]) for p in phases], period)
    if fraction >= 1.0:
        schedule.always[:] = True
    return schedule


def probe_times(schedule: Schedule, period: float) -> list[float]:
    """Times around and exactly on window boundaries (``φ_k + jP`` and ``φ_k + f·P + jP``, where
    round-off decides), in the first periods and far out (``j`` up to 10⁶)."""
    times = [0.0, 0.5 * period, period, 3.7 * period, 1e6 * period + 0.25 * period]
    for k in range(0, schedule.size, max(1, schedule.size // 7)):
        for j in (0, 1, 5, 1000):
            for edge in (schedule.next_online(k, j * period), schedule.offline_time(k, j * period)):
                if math.isfinite(edge):
                    times += [edge, np.nextafter(edge, -math.inf), np.nextafter(edge, math.inf)]
    return times


def assert_same_answers(compact: Schedule, eager: Schedule, times: list[float]) -> None:
    assert compact.size == eager.size
    for x in times:
        mask = compact.online_mask(x)
        assert np.array_equal(mask, eager.online_mask(x)), x
        assert np.array_equal(compact.next_online_all(x), eager.next_online_all(x)), x
        for k in range(eager.size):
            assert compact.online(k, x) == eager.online(k, x) == mask[k], (k, x)
            assert compact.offline_time(k, x) == eager.offline_time(k, x), (k, x)
            assert compact.next_online(k, x) == eager.next_online(k, x), (k, x)


@pytest.mark.parametrize("period, fraction", [(24.0, 0.5), pytest.param(7.3, 0.9, marks=pytest.mark.slow),  # a second generic window: whole suite
                                              (1.0, 1.0), (1.0, 1e-20)])
def test_the_compact_diurnal_schedule_answers_as_the_per_client_one(period, fraction):
    """Three arrays instead of 2N one-window arrays: every answer bit-identical for N = 60 clients,
    on and next to the window boundaries. ``f = 1`` is always online; ``f = 10⁻²⁰`` gives windows
    ``φ_k + f·P = φ_k`` that round to empty (the clients are never online), as before."""
    compact = diurnal(60, period, fraction, np.random.default_rng(7))
    eager = per_client_diurnal(60, period, fraction, np.random.default_rng(7))
    assert isinstance(compact, Diurnal) and compact.start.nbytes + compact.end.nbytes + compact.always.nbytes == 60 * 17
    assert_same_answers(compact, eager, probe_times(eager, period))
    if fraction == 1e-20:
        assert not compact.online_mask(3.0).any() and np.isinf(compact.next_online_all(3.0)).all()
    if fraction == 1.0:
        assert compact.online_mask(3.0).all() and math.isinf(compact.offline_time(5, 3.0))


def test_a_fedscale_trace_keeps_one_profile_per_trace_client():
    """D = 3 trace clients serve N = 10 simulated clients: 3 profiles and an int32 index a client
    (client k follows trace client k mod 3); every answer equals the schedule that held a
    scaled copy of the windows for each of the 10 clients."""
    trace = AvailabilityTrace(
        ids=("a", "b", "c"),
        active=(np.array([0.0, 30.0]), np.array([5.0]), np.array([1.0, 2.0, 50.0])),
        inactive=(np.array([10.0, 40.0]), np.array([25.0]), np.array([1.5, 20.0, 60.0])),
        finish_time=(45.0, None, 80.0),
    )
    scale = 1 / 2.5  # 2.5 s of the trace per unit of virtual time
    compact = trace.schedule(10, 2.5)
    picks = [k % 3 for k in range(10)]
    eager = Schedule([trace.active[i] * scale for i in picks], [trace.inactive[i] * scale for i in picks],
                     [None if trace.finish_time[i] is None else trace.finish_time[i] * scale for i in picks])
    assert len(compact.starts) == 3 and compact.profile_of.dtype == np.int32 and compact.profile_of.tolist() == picks
    times = [x / 4 for x in range(0, 200)] + [18.0, 16.0, 2.0, 10.0, 1e5 + 0.3]
    assert_same_answers(compact, eager, times)
    assert trace.schedule(2, 2.5).profile_of is None and len(trace.schedule(2, 2.5).starts) == 2


@pytest.mark.parametrize("sigma, slow", [(0.5, 0.0), (1.3, 0.25), (0.0, 0.1)])
def test_speeds_are_drawn_in_place_as_exp_of_sigma_z(sigma, slow):
    """``exp(σ z)`` computed in one array equals the expression with its temporaries, bit for bit,
    and the slow clients are the same permutation head."""
    scenario = make_scenario({"population.clients": 1000, "population.speed_sigma": sigma,
                              "population.slow_fraction": slow, "population.slow_factor": 8.0})
    speeds = draw_speeds(scenario.population, rngmod.make_streams(3)["speed"])
    rng = rngmod.make_streams(3)["speed"]
    want = np.exp(sigma * rng.standard_normal(1000)) if sigma > 0 else np.ones(1000)
    want[rng.permutation(1000)[:round(slow * 1000)]] *= 8.0
    assert speeds.dtype == np.float64 and np.array_equal(speeds, want)


def test_the_fleet_asks_all_idle_clients_at_once_when_nobody_can_be_dispatched():
    """``Fleet.next_online``: the earliest window start after ``now`` among idle clients, the same
    as asking each idle client (the busy ones are not waited for)."""
    scenario = make_scenario({"population.clients": 50, "population.availability": "diurnal",
                              "population.period": 10.0, "population.online_fraction": 0.2})
    sim = build_simulation(scenario)
    fleet = sim.fleet
    fleet.busy[::3] = True
    for now in (0.0, 4.4, 17.0):
        idle = np.flatnonzero(~fleet.busy)
        assert fleet.next_online(now) == min(fleet.availability.next_online(int(k), now) for k in idle)


def test_the_memory_estimate_counts_the_population_as_built():
    """The estimate's population parts are the bytes of the arrays a simulation builds: speeds and
    busy flags (9 bytes a client), the diurnal schedule's three arrays (17), the participation
    ledger of a private run (spent, pending, last step: 17)."""
    scenario = make_scenario({"population.clients": 3000, "population.availability": "diurnal"})
    sim = build_simulation(scenario)
    parts = {p.what: p.bytes for p in memory.estimate(scenario).parts}
    fleet, schedule = sim.fleet, sim.fleet.availability
    assert parts["the population (speeds, busy flags)"] == fleet.speeds.nbytes + fleet.busy.nbytes == 3000 * 9
    assert parts["the diurnal availability schedule"] == (
        schedule.start.nbytes + schedule.end.nbytes + schedule.always.nbytes) == 3000 * 17
    private = make_scenario({"population.clients": 3000, "privacy.enabled": True, "privacy.noise_multiplier": 1.0,
                             "privacy.gamma": 1.0, "server.max_staleness": 4})
    ledger = build_simulation(private).participation
    parts = {p.what: p.bytes for p in memory.estimate(private).parts}
    assert parts["the participation ledger"] == ledger.spent.nbytes + ledger.pending.nbytes + ledger.last_step.nbytes


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc/self/statm")
def test_the_estimate_of_the_population_and_the_clients_in_flight_is_close_to_the_measured_memory():
    """In a fresh process, 10⁶ clients and 2·10⁴ in flight (the zero-cost task of
    benchmarks/scale.py): the growth of resident memory while the simulation is built and its
    first clients dispatched is within [0.7, 1.5]× the estimate's population and in-flight parts
    (9 bytes a client, 1.25 kB a client in flight: about 34 MB)."""
    script = """
import asyncio, os
from asyncfl.compute.executors import NullExecutor
from asyncfl.config.memory import estimate
from asyncfl.compose import build_simulation
from benchmarks.common import engine_scenario, null_task
resident = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
scenario = engine_scenario(1_000_000, 20_000, 100, 1)
before = resident()
async def first_step():
    sim = build_simulation(scenario, task=null_task(), executor=NullExecutor())
    await sim.events().__anext__()
    print(resident() - before, len(sim.in_flight))
asyncio.run(first_step())
parts = {p.what: p.bytes for p in estimate(scenario).parts}
print(parts["the population (speeds, busy flags)"] + parts["clients in flight (bookkeeping)"])
"""
    proc = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(REPO)}, cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (measured, in_flight), (estimated,) = (map(int, line.split()) for line in proc.stdout.split("\n")[:2])
    assert in_flight >= 19_900 and 0.7 * measured < estimated < 1.5 * measured, (measured, estimated)
