"""Random allocation (docs/privacy.md §13): the allotment, the dispatcher and the ledger that
enforce it, the refusals before the run, and its accountant.

* the allotment gives every client exactly k of the t steps of every window, is a pure function of
  the seed and the window (so a resume recomputes it) and leaves the run's named streams alone;
* across random small runs, including a checkpoint taken mid-run and resumed in a fresh
  simulation, every accepted upload was dispatched for, and landed in, a step allotted to its
  client — recounted from the ``updates.csv`` rows alone against an independent redraw of the
  allotment — and an upload that arrives after its step was taken is dropped (``unallotted``);
* a checkpoint whose pending dispatch or last contribution is not allotted (tampered) is refused
  on resume, naming it;
* infeasible settings are refused naming the keys;
* ε is pld-accounting's own computation (to 1e-3) for 3 settings, between its bounds, at most the
  unamplified composition, and equal to it when k = t; σ calibrated to a target ε meets it by the
  package's own computation (within 10⁻³) and 1 % less noise does not.
"""

from __future__ import annotations

import collections
import json
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncfl import rng as rngmod
from asyncfl.config import scenario as sc
from asyncfl.errors import ScenarioError, SimulationStalled
from asyncfl.privacy import accounting, allocation
from asyncfl.privacy.accountants import Releases
from asyncfl.privacy.allotment import ALLOTMENT_KEY, Allotment
from asyncfl.records import MemorySink
from asyncfl.run import checkpoint
from asyncfl.compose import build_simulation
from conftest import make_raw, through_file
from test_privacy_schema import run_until


def independent_allotment(seed: int, clients: int, k: int, t: int, steps: int) -> set[tuple[int, int]]:
    """(client, step) allotted, redrawn here from the documented formula, window by window."""
    out = set()
    for w in range(-(-steps // t)):
        u = np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(ALLOTMENT_KEY, w)))).random((clients, t))
        for c in range(clients):
            for off in np.argsort(u[c], kind="stable")[:k]:
                if w * t + off + 1 <= steps:
                    out.add((c, int(w * t + off + 1)))
    return out


def test_allotment_is_k_of_every_t_and_a_function_of_the_seed():
    a = Allotment(50, 3, 7, seed=11)
    for w in range(4):
        steps = range(w * 7 + 1, w * 7 + 8)
        per_client = np.sum([a.mask(s) for s in steps], axis=0)
        np.testing.assert_array_equal(per_client, 3)
    b = Allotment(50, 3, 7, seed=11)
    np.testing.assert_array_equal(a.offsets(2), b.offsets(2))
    assert not np.array_equal(Allotment(50, 3, 7, seed=12).offsets(0), a.offsets(0))
    assert {(c, int(s)) for c in range(50) for s in a.steps_of(c, 20)} == independent_allotment(11, 50, 3, 7, 20)
    # the run's named streams are the children 0…6 of SeedSequence(seed), untouched
    fresh = rngmod.make_streams(11)
    ref = np.random.SeedSequence(11).spawn(len(rngmod.STREAMS))
    for (name, gen), child in zip(fresh.items(), ref):
        assert gen.random() == np.random.Generator(np.random.PCG64(child)).random(), name
    with pytest.raises(ValueError):
        Allotment(10, 4, 3, seed=0)


def alloc_raw(**over: Any) -> dict[str, Any]:
    raw = make_raw(**{"population.clients": over.pop("n", 30), "run.steps": over.pop("steps", 8), "run.eval_every": 4,
                      "run.train_loss": False})
    protocol = over.pop("protocol", "fedbuff")
    c = over.pop("buffer", 2)
    if protocol == "fedbuff":
        server = {"protocol": "fedbuff", "concurrency": over.pop("in_flight", 2 * c), "buffer": c, "max_staleness": 4}
    else:
        server = {"protocol": "sync", "cohort": over.pop("in_flight", c), "buffer": c}
    raw["server"] = {**server, "rule": "sgd", "lr": 0.5}
    raw["latency"] = over.pop("latency", {"dist": "exponential", "mean": 1.0})
    raw["privacy"] = {"enabled": True, "noise_multiplier": 0.5, "xi": 1.0, "sampling": "random-allocation",
                      "allotted_steps": over.pop("k", 1), "allotment_window": over.pop("t", 3), **over}
    return raw


def allotment_problems(rows: list[Any], allotted: set[tuple[int, int]]) -> list[str]:
    out = []
    for r in rows:
        if r.accepted and ((r.client, r.step) not in allotted or r.version != r.step):
            out.append(f"client {r.client} accepted by step {r.step} (dispatched at {r.version})")
        if r.reason == "unallotted" and r.step == r.version:
            out.append(f"client {r.client} dropped as unallotted in its own step {r.step}")
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(k=st.integers(1, 3), extra=st.integers(0, 3), protocol=st.sampled_from(["fedbuff", "sync"]),
       buffer=st.integers(1, 3), steps=st.integers(2, 9), stop=st.integers(3, 60), seed=st.integers(0, 5))
def test_uploads_satisfy_the_allotment_exactly_across_a_resume(k, extra, protocol, buffer, steps, stop, seed):
    t = k + extra
    n = -(-t * buffer // k) * 3  # three times the fewest that can supply the steps on average
    raw = alloc_raw(n=n, k=k, t=t, protocol=protocol, buffer=buffer, steps=steps)
    raw["seed"] = seed
    scenario = sc.validate(raw)
    first = build_simulation(scenario, sink=MemorySink())
    try:
        interrupted = run_until(first, stop)
    except SimulationStalled:  # a step could not fill from its allotted clients: a clean stop
        interrupted = False
    rows = list(first.sink.updates)
    if interrupted:
        second = build_simulation(scenario, sink=MemorySink())
        second.restore(through_file(first.state()))
        try:
            run_until(second, None)
        except SimulationStalled:
            pass
        rows += second.sink.updates
    allotted = independent_allotment(seed, n, k, t, steps)
    assert not allotment_problems(rows, allotted)
    per_window = collections.Counter((r.client, (r.step - 1) // t) for r in rows if r.accepted)
    assert max(per_window.values(), default=0) <= k


def test_a_late_upload_is_dropped_not_counted_against_a_later_step():
    # exponential latencies, K = 2C: half of every step's dispatches arrive after it was taken
    sim = build_simulation(sc.validate(alloc_raw(n=40, k=1, t=2, buffer=3, in_flight=8, steps=6)), sink=MemorySink())
    run_until(sim, None)
    rows = list(sim.sink.updates)
    late = [r for r in rows if r.reason == "unallotted"]
    assert late and all(r.step > r.version and not r.accepted for r in late)
    assert all(r.step == r.version for r in rows if r.accepted)
    assert sum(r.accepted for r in rows) == 6 * 3


@pytest.mark.parametrize("over, needle", [
    ({"k": 4, "t": 3}, "privacy.allotted_steps = 4, privacy.allotment_window = 3: k must be at most t"),
    ({"n": 5, "k": 1, "t": 3}, "too few clients for server.buffer = 2"),
    ({"in_flight": 1}, "server.concurrency = 1: must be at least server.buffer = 2"),
])
def test_infeasible_settings_are_refused_naming_the_keys(over, needle):
    with pytest.raises(ScenarioError) as err:
        sc.validate(alloc_raw(**over))
    assert needle in str(err.value)


def test_missing_allotment_keys_are_named():
    raw = alloc_raw()
    del raw["privacy"]["allotment_window"]
    with pytest.raises(ScenarioError, match="privacy.allotment_window: required"):
        sc.validate(raw)


def _package_epsilon(sigma: float, t: int, k: int, w: int, delta: float) -> tuple[float, float]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import PLD_accounting as P
    cfg = P.AllocationSchemeConfig(loss_discretization=allocation.LOSS_DISCRETIZATION)
    params = P.PrivacyParams(sigma=sigma, num_steps=t, num_selected=k, num_epochs=w, delta=delta)
    return (P.gaussian_allocation_epsilon_configurable(params=params, config=cfg),
            P.gaussian_allocation_epsilon_configurable(params=params, config=cfg, bound_type=P.BoundType.IS_DOMINATED))


@pytest.mark.parametrize("sigma, t, k, w", [(1.0, 10, 1, 1), (2.0, 6, 2, 1), (1.5, 4, 1, 2)])
def test_epsilon_is_pld_accountings_own_and_between_its_bounds(sigma, t, k, w):
    delta = 1e-6
    releases = Releases(k, window=t, windows=w)
    ours = accounting.epsilon_of(releases, sigma, delta)
    up, lo = _package_epsilon(sigma, t, k, w, delta)
    assert ours == pytest.approx(up, abs=1e-3)
    bounds = allocation.allocation_epsilon(releases, sigma, delta, lower=True)
    assert bounds.lower == pytest.approx(lo, abs=1e-3)
    assert bounds.lower <= bounds.upper
    # amplification: never above the k·W releases composed without it (dp-accounting), and the RDP
    # accountant reports exactly that unamplified bound
    assert ours <= accounting.epsilon_of(Releases(k * w), sigma, delta)
    assert accounting.epsilon_of(releases, sigma, delta, "rdp") == accounting.epsilon_of(Releases(k * w), sigma, delta, "rdp")


def test_k_equal_t_is_the_unamplified_composition():
    # every step allotted: k Gaussian releases, no amplification (dp-accounting's exact Gaussian)
    delta, sigma = 1e-5, 2.0
    ours = allocation.allocation_epsilon(Releases(3, window=3, windows=1), sigma, delta, lower=True)
    exact = accounting.epsilon_of(Releases(3), sigma, delta)
    assert ours.lower - 0.02 <= exact <= ours.upper + 1e-9
    assert ours.upper == pytest.approx(exact, rel=0.02)


# -- a checkpoint whose dispatches disagree with the allotment is refused on resume ---------------
def _stopped_allocation_run(out: Any) -> tuple[Any, Any]:
    """A random-allocation run (FedBuff, exponential latencies) stopped mid-run with dispatches in
    flight, and its scenario."""
    from test_reliability import _run

    raw = alloc_raw(n=40, k=1, t=3, buffer=3, in_flight=8, steps=9)
    raw["run"]["checkpoint_every"] = 1
    scenario = sc.validate(raw)
    assert _run(scenario, out, stop_at=40)
    return scenario, checkpoint.read(out / "checkpoint.pt").state


def _rewrite(out: Any, state: Any) -> None:
    """The checkpoint with ``state`` in it, sealed again: well formed, its digest recomputed."""
    raw = torch.load(out / "checkpoint.pt", weights_only=True)
    raw["state"] = checkpoint.encode(state)
    torch.save(checkpoint.seal(raw), out / "checkpoint.pt")


def _unallotted_client(allotment: Allotment, step: int, busy: set[int]) -> int:
    return next(c for c in range(allotment.clients) if not allotment.allows(c, step) and c not in busy)


@pytest.mark.parametrize("tamper", ["pending-dispatch", "last-step"])
def test_a_checkpoint_that_disagrees_with_the_allotment_is_refused_on_resume(tamper, tmp_path, capsys):
    """The allotment is a function of the seed, not stored state: a checkpoint whose undecided
    dispatch is for a step not allotted to its client, or whose ledger says a client last
    contributed to a step not allotted to it, was altered (or belongs to another seed). The
    resume refuses it naming the dispatch or the client and the allotment, exit 2, no traceback,
    and leaves the run directory as it was."""
    from asyncfl.cli.main import main

    out = tmp_path / "run"
    scenario, state = _stopped_allocation_run(out)
    allot = Allotment(scenario.population.clients, 1, 3, scenario.seed)
    led = state.participation
    undecided = [c for c in state.clients if led.pending[c.client]]
    assert undecided and led.spent.sum() > 0
    assert checkpoint.validate(checkpoint.read(out / "checkpoint.pt"), *_fresh(scenario)) == []
    busy = {c.client for c in state.clients}
    if tamper == "pending-dispatch":  # one in-flight dispatch handed to a client not allotted its step
        victim = undecided[0]
        other = _unallotted_client(allot, victim.version, busy)
        pending = led.pending.copy()
        pending[victim.client], pending[other] = False, True
        clients = tuple(c._replace(client=other) if c.seq == victim.seq else c for c in state.clients)
        state = state._replace(clients=clients, participation=led._replace(pending=pending))
        needle = f"state.clients[seq {victim.seq}]: client {other} has a pending dispatch for step {victim.version}, which is not allotted"
    else:  # a contribution moved to a step of the same window not allotted to that client
        client = int(np.flatnonzero(led.spent > 0)[0])
        step = int(led.last_step[client])
        wrong = next(s for s in range(int(led.first_step[-1]), state.version) if not allot.allows(client, s))
        last = led.last_step.copy()
        last[client] = wrong
        state = state._replace(participation=led._replace(last_step=last))
        needle = f"client {client} last contributed to step {wrong}, which is not allotted to it"
        assert wrong != step
    _rewrite(out, state)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    assert main(["resume", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert needle in err and "privacy.allotted_steps = 1 of every privacy.allotment_window = 3" in err, err
    assert "Traceback" not in err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


def _fresh(scenario: Any) -> tuple[Any, Any, Any]:
    sim = build_simulation(scenario)
    return sim.state(), scenario, sim.protocol


def test_a_run_with_late_uploads_resumes_bit_for_bit_through_its_run_directory(tmp_path):
    """A random-allocation run stopped after some uploads were dropped as ``unallotted`` resumes
    through the run directory (the checkpoint's row count includes those drops: before checkpoint
    format 6 they were not counted and such a checkpoint was refused) and ends as the uninterrupted
    run, bit for bit."""
    from test_reliability import _resume_check

    _resume_check({"population.clients": 40, "server.concurrency": 8, "server.buffer": 3, "run.steps": 9,
                   "privacy.enabled": True, "privacy.noise_multiplier": 0.5, "privacy.xi": 1.0,
                   "privacy.sampling": "random-allocation", "privacy.allotted_steps": 1, "privacy.allotment_window": 3},
                  tmp_path, stops=(0.5, 0.9))
    summary = json.loads((tmp_path / "ref" / "summary.json").read_text())
    assert summary["updates_dropped_unallotted"] > 0


def test_sigma_calibrated_for_a_target_epsilon_meets_it_by_pld_accountings_own_computation():
    """A random-allocation scenario that gives ``privacy.epsilon`` instead of σ: 1 of every 4 steps,
    one window, ε = 2 at δ = 10⁻⁵. The calibrated σ (1.2985) gives, by pld-accounting's own
    ``gaussian_allocation_epsilon_configurable``, ε within 10⁻³ below the target (1.99999…), and
    1 % less noise exceeds it (2.033): σ is the smallest that meets the target, not merely a safe one."""
    from asyncfl.compose import private_aggregator

    raw = alloc_raw(n=30, k=1, t=4, steps=4, xi=5.0, epsilon=2.0, delta=1e-5)
    del raw["privacy"]["noise_multiplier"]
    setup, _ = private_aggregator(sc.validate(raw))
    assert setup.releases == Releases(1, window=4, windows=1)
    assert setup.sigma == pytest.approx(1.2985, abs=1e-4)
    at_sigma, _ = _package_epsilon(setup.sigma, 4, 1, 1, 1e-5)
    assert 2.0 - 1e-3 <= at_sigma <= 2.0
    less_noise, _ = _package_epsilon(0.99 * setup.sigma, 4, 1, 1, 1e-5)
    assert less_noise > 2.0 + 0.02
