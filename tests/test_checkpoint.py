"""The declared state and its checkpoint file (docs/architecture.md §5).

* The state of a stopped simulation survives the file round trip exactly: the decoded tree has
  the same types and the same values (tensors and arrays bit for bit) as the one written, for
  every protocol, rule, algorithm, availability model, replay and privacy setting the resume
  tests cover; and it validates against a fresh simulation of its scenario.
* Only declared state types are written: a foreign object in the tree is refused, naming its
  path; a file whose types changed fields is refused, naming the type.
* Validation finds what does not fit before anything is touched (the run-directory side of
  this, through the CLI, is in tests/test_reliability.py).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import torch

from asyncfl.errors import CheckpointError, RunInterrupted
from asyncfl.run import checkpoint
from asyncfl.run.runner import run_to_dir_blocking
from asyncfl.compose import build_simulation
from asyncfl.sim.engine import Simulation

from conftest import make_scenario, through_file

CAPPED = {"privacy.enabled": True, "privacy.noise_multiplier": 0.5, "privacy.xi": 1.0,
          "privacy.sampling": "participation-cap", "privacy.max_participations": 4}
SYNC = {"server.protocol": "sync", "server.concurrency": None, "server.cohort": 6, "server.buffer": 4, "server.max_staleness": None}
COMBINATIONS = {
    "fedbuff-momentum": {"server.rule": "momentum"},
    "fedbuff-nesterov": {"server.rule": "nesterov"},
    "fedbuff-ma-full": {"server.rule": "ma-full"},
    "fedbuff-ma-full-window": {"server.rule": "ma-full", "server.ma_window": 3},
    "fedbuff-ma-light": {"server.rule": "ma-light"},
    "fedasync-adam": {"server.rule": "adam", "server.buffer": 1, "server.lr": 0.05, "run.steps": 200},
    "sync-fedavg": {**SYNC},
    "sync-fedprox": {**SYNC, "server.algorithm": "fedprox", "server.rule": "sgd", "client.mu": 0.5},
    "sync-fedsplit": {**SYNC, "server.algorithm": "fedsplit", "server.rule": "sgd", "client.mu": 0.5},
    "sync-feddr": {**SYNC, "server.algorithm": "feddr", "server.rule": "sgd", "client.mu": 0.5, "server.alpha": 1.5},
    "sync-fedpd": {**SYNC, "server.algorithm": "fedpd", "server.rule": "sgd", "client.mu": 0.5, "server.skip_probability": 0.3},
    "diurnal": {"population.availability": "diurnal", "population.period": 3.0, "population.online_fraction": 0.4},
    "private-ma-light": {"server.rule": "ma-light", "privacy.enabled": True, "privacy.noise_multiplier": 0.5, "privacy.xi": 1.0},
    "private-capped": {"server.rule": "ma-light", **CAPPED},
    "private-capped-sync": {**SYNC, **CAPPED, "privacy.max_participations": 5},
    "threads": {"run.executor": "threads", "run.workers": 2},
}


def fresh_of(scenario):
    """What validating a checkpoint against ``scenario`` needs: a fresh simulation's state, the
    scenario, and the simulation's built protocol."""
    sim = build_simulation(scenario)
    return sim.state(), scenario, sim.protocol


def stopped(scenario: Any, after_events: int) -> Simulation:
    """A simulation stopped (as SIGINT stops it) before its ``after_events``-th event."""
    sim = build_simulation(scenario)
    calls = [0]

    def should_stop() -> bool:
        calls[0] += 1
        return calls[0] >= after_events

    sim.should_stop = should_stop

    async def go() -> None:
        try:
            async for _ in sim.events():
                pass
        except RunInterrupted:
            await sim.aclose()
            return
        raise AssertionError("the run finished before it was stopped")

    asyncio.run(go())
    return sim


def assert_same_tree(a: Any, b: Any, path: str = "state") -> None:
    assert type(a) is type(b), f"{path}: {type(a).__name__} vs {type(b).__name__}"
    if isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b), path
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape and np.array_equal(a, b), path
    elif isinstance(a, dict):
        assert list(a) == list(b), path
        for k in a:
            assert_same_tree(a[k], b[k], f"{path}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), path
        fields = getattr(type(a), "_fields", None) or range(len(a))
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same_tree(x, y, f"{path}.{fields[i] if isinstance(fields, tuple) else i}")
    elif hasattr(a, "__dataclass_fields__"):
        for f in a.__dataclass_fields__:
            assert_same_tree(getattr(a, f), getattr(b, f), f"{path}.{f}")
    else:
        assert a == b or (a != a and b != b), f"{path}: {a!r} vs {b!r}"


@pytest.mark.parametrize("name", sorted(COMBINATIONS))
def test_state_round_trip_is_exact_and_validates(name):
    scenario = make_scenario({"run.steps": 30, **COMBINATIONS[name]})
    sim = stopped(scenario, after_events=60)
    state = sim.state()
    assert state.version > 1 and state.clients, "stopped before anything happened"
    back = through_file(state)
    assert_same_tree(state, back)
    ck = checkpoint.Checkpoint(None, scenario.to_toml(), back,  # type: ignore[arg-type]
                               {"updates.csv": state.counters.rows, "metrics.csv": 1 + (state.version - 1) // scenario.run.eval_every}, {})
    assert checkpoint.validate(ck, *fresh_of(scenario)) == []


def test_a_restored_simulation_reports_the_state_it_was_given():
    scenario = make_scenario({"server.rule": "ma-full", "run.steps": 30})
    state = stopped(scenario, after_events=60).state()
    fresh = build_simulation(scenario)
    fresh.restore(through_file(state))
    assert_same_tree(state, fresh.state())


def test_the_initial_state_is_the_state_before_any_event():
    sim = build_simulation(make_scenario())
    state = sim.state()
    assert (state.version, state.clients, state.in_flight, state.protocol.buffer, state.next_seq) == (1, (), (), (), 0)
    assert state.counters.rows == 0 and not state.fleet.busy.any()


def test_only_declared_state_types_are_written():
    state = build_simulation(make_scenario()).state()
    with pytest.raises(CheckpointError, match=r"state\.last_metrics\.oops: .*object is not a declared state type"):
        checkpoint.encode(state._replace(last_metrics={"oops": object()}))
    with pytest.raises(CheckpointError, match="keys that are not strings"):
        checkpoint.encode(state._replace(last_metrics={1: 2.0}))


def test_a_type_whose_fields_changed_is_refused_by_name():
    encoded = checkpoint.encode(build_simulation(make_scenario()).state())
    encoded["fields"]["counters"]["fields"]["accepted_total"] = encoded["fields"]["counters"]["fields"].pop("accepted")
    with pytest.raises(CheckpointError, match="state.counters: Counters has fields .*accepted_total.*this asyncfl's Counters has accepted"):
        checkpoint.decode(encoded)
    encoded["__t"] = "Simulation"
    with pytest.raises(CheckpointError, match="type 'Simulation' is not a state type"):
        checkpoint.decode(encoded)


@pytest.mark.parametrize("edit,message", [
    (lambda s: s._replace(theta=torch.zeros(s.theta.numel() + 2, dtype=s.theta.dtype)), "state.theta: torch.float64 of shape (7,)"),
    (lambda s: s._replace(version=99), "state.version = 99: the run has run.steps = 30"),
    (lambda s: s._replace(next_seq=s.next_seq + 1), "state.next_seq"),
    (lambda s: s._replace(clients=tuple(c._replace(client=10_000) for c in s.clients)), "client = 10000: population.clients = 30"),
    (lambda s: s._replace(clients=tuple(c._replace(job=type(c.job)(c.job.client, c.job.start[:2], c.job.centre, c.job.mu, c.job.seed)) for c in s.clients)),
     "job.start: torch.float64 of shape (2,), but the model is a torch.float64 tensor of shape (5,)"),
    (lambda s: s._replace(fleet=s.fleet._replace(busy=s.fleet.busy[:3])), "state.fleet.busy"),
])
def test_validation_names_what_does_not_fit(edit, message):
    scenario = make_scenario({"run.steps": 30})
    state = stopped(scenario, after_events=60).state()
    rows = {"updates.csv": state.counters.rows, "metrics.csv": 1 + (state.version - 1) // scenario.run.eval_every}
    ck = checkpoint.Checkpoint(None, scenario.to_toml(), edit(state), rows, {})  # type: ignore[arg-type]
    problems = checkpoint.validate(ck, *fresh_of(scenario))
    assert any(message in p for p in problems), problems


def test_checkpoint_of_another_scenario_with_another_model_size_is_refused(tmp_path):
    """A checkpoint moved between run directories of two scenarios whose models differ in size."""
    small, large = make_scenario({"run.checkpoint_every": 2}), make_scenario({"run.checkpoint_every": 2, "task.dim": 9})
    run_to_dir_blocking(small, tmp_path / "a")
    ck = checkpoint.read(tmp_path / "a" / "checkpoint.pt")
    problems = checkpoint.validate(ck, *fresh_of(large))
    assert problems and "state.theta: torch.float64 of shape (5,), but this scenario's is torch.float64 of shape (9,)" in problems[0]


@pytest.mark.parametrize("edit,message", [
    (lambda p: p._replace(spent=p.spent + 5), "above privacy.max_participations = 4"),
    (lambda p: p._replace(spent=p.spent[:-1]), "state.participation.spent: int64 of shape (29,), but this scenario's is int64 of shape (30,)"),
    (lambda p: p._replace(pending=~p.pending), "state.participation.pending"),
    (lambda p: p._replace(first_step=p.first_step[:-1]), "state.participation.first_step"),
])
def test_validation_checks_the_participation_ledger(edit, message):
    """A capped run's participations are declared state, checked against the scenario: one
    entry per client, none over the cap, adding up to the accepted uploads, and pending exactly
    for the clients of the undecided dispatches (docs/privacy.md §6)."""
    scenario = make_scenario({"run.steps": 30, **CAPPED})
    state = stopped(scenario, after_events=60).state()
    assert state.participation is not None and state.participation.spent.max() >= 1 and state.participation.pending.any()
    rows = {"updates.csv": state.counters.rows, "metrics.csv": 1 + (state.version - 1) // scenario.run.eval_every}
    fresh = fresh_of(scenario)
    good = checkpoint.Checkpoint(None, scenario.to_toml(), state, rows, {})  # type: ignore[arg-type]
    assert checkpoint.validate(good, *fresh) == []
    bad = checkpoint.Checkpoint(None, scenario.to_toml(), state._replace(participation=edit(state.participation)), rows, {})  # type: ignore[arg-type]
    problems = checkpoint.validate(bad, *fresh)
    assert any(message in p for p in problems), problems


def test_a_plug_in_declares_its_own_state_type_on_its_component_and_it_round_trips():
    """The one path: a state type is declared with its component (``Component.state``), not
    registered apart; a second type of that name on another component is refused, naming both."""
    from typing import NamedTuple

    from asyncfl.components.core import Component
    from asyncfl.components.registry import register, unregister

    class PluginState(NamedTuple):
        buffer: torch.Tensor
        steps: int

    def build(cfg, ctx):
        return None

    register(Component("hook", "stateful-plugin", build, state=(PluginState,)))
    try:
        value = PluginState(torch.arange(3.0), 7)
        back = checkpoint.decode(checkpoint.encode(value))
        assert type(back) is PluginState and torch.equal(back.buffer, value.buffer) and back.steps == 7

        class Other(NamedTuple):  # another type of the same name is refused
            x: int

        Other.__name__ = "PluginState"
        register(Component("hook", "other-plugin", build, state=(Other,)))
        try:
            with pytest.raises(CheckpointError, match="state type 'PluginState' of update hook 'other-plugin' clashes"):
                checkpoint.state_types()
        finally:
            unregister("hook", "other-plugin")
    finally:
        unregister("hook", "stateful-plugin")
