"""Components: every plug-in declared in one place, one public way to add one (docs/extending.md).

The specification, in the order a user meets it: declaring and registering a component (from
Python, by ``"module:attribute"``), the keys it owns in its section (and the refusal of a key of a
component the scenario does not name), switching components, the traits the code asks instead of
names, the state a component checkpoints, and where it came from (``components.json``). The
installed-package path (entry points, the CLI, sweeps, resume) is ``tests/test_plugins.py``.
"""

from __future__ import annotations

import hashlib
import math
import pickle
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
import pydantic
import pytest
import torch
from pydantic import Field
from typing_extensions import Annotated

import asyncfl
from asyncfl.components import allow
from asyncfl.components.core import KINDS, Component, Origin
from asyncfl.components.registry import REGISTRY, origin_of_module, register, unregister
from asyncfl.components.traits import AlgorithmTraits, MemoryPart, RuleTraits
from asyncfl.config import memory
from asyncfl.config import scenario as sc
from asyncfl.config.base import Section
from asyncfl.errors import ScenarioError
from asyncfl.run import provenance
from asyncfl.run.bias_report import own_bias
from asyncfl.run.runner import run_to_dir_blocking
from asyncfl.server.rules import RuleOutput
from asyncfl.compose import build_simulation

from conftest import make_raw, make_scenario, whole_and_resumed

SYNC = {"server.protocol": "sync", "server.concurrency": None, "server.cohort": 6, "server.buffer": 4}


# -- a user's rule with a hyper-parameter and state, declared in this module ---------------------------
class ScaledConfig(Section):
    gain: Annotated[float, Field(gt=0)] = 2.0


class ScaledState(NamedTuple):
    steps: int
    last: torch.Tensor


class Scaled:
    """``m_t = gain · r_t``; the state counts steps and keeps the last direction."""

    in_place_state = False

    def __init__(self, gain: float) -> None:
        self.gain = gain

    @classmethod
    def from_config(cls, cfg: ScaledConfig, ctx: Any = None) -> "Scaled":
        return cls(cfg.gain)

    def init(self, theta: torch.Tensor) -> ScaledState:
        return ScaledState(0, torch.zeros_like(theta))

    def direction(self, aggregate: Any, state: ScaledState) -> RuleOutput:
        m = self.gain * aggregate.r
        return RuleOutput(m, ScaledState(state.steps + 1, m))


SCALED = Component("rule", "scaled", Scaled.from_config, ScaledConfig, RuleTraits(own_bias=None),
                   state=(ScaledState,), summary="m_t = gain · r_t")


@pytest.fixture
def scaled():
    register(SCALED)
    yield SCALED
    unregister("rule", "scaled")


# -- declaring and registering -------------------------------------------------------------------------
def test_a_component_declares_its_kind_name_config_traits_and_state() -> None:
    assert SCALED.kind_info.field == "server.rule" and SCALED.keys == ("gain",)
    assert isinstance(SCALED.traits, RuleTraits) and SCALED.state_types() == (ScaledState,)
    with pytest.raises(ValueError, match="unknown kind 'widget'"):
        Component("widget", "x", print)
    with pytest.raises(ValueError, match="traits must be a RuleTraits"):
        Component("rule", "x", print, traits=AlgorithmTraits())
    with pytest.raises(ValueError, match="a name is a non-empty string without spaces"):
        Component("rule", "two words", print)
    with pytest.raises(ValueError, match="owns its whole \\[task\\] section: give its config class"):
        Component("task", "mine", print)


def _tagged_config(kind: str, name: str) -> type | None:
    """A config class for a kind whose component owns its whole section (tag = name)."""
    info = KINDS[kind]
    if not info.whole_section:
        return None
    return pydantic.create_model(f"Tagged_{kind}", __base__=Section, **{info.key: (Literal[name], name)})


def _one_argument(cfg):  # the pre-contract shape of a rule or hook builder: build(cfg)
    return None


def _three_arguments(cfg, num_clients, seed):  # the pre-contract shape of a task builder
    return None


def _draw(cfg, rng):  # two arguments, but a latency draw's, not (cfg, ctx)
    return 0.0


@pytest.mark.parametrize("kind", list(KINDS))
@pytest.mark.parametrize("wrong", [_one_argument, _three_arguments, _draw])
def test_a_builder_of_the_wrong_shape_is_refused_at_registration_naming_the_contract(kind: str, wrong: Any) -> None:
    """pluggy's check, for every kind: a builder that is not ``build(cfg, ctx)`` is refused when
    registered, and the message names the kind and its contract (its product)."""
    info = KINDS[kind]
    component = Component(kind, "wrong-shape", wrong, _tagged_config(kind, "wrong-shape"))
    with pytest.raises(TypeError) as err:
        register(component)
    message = str(err.value)
    assert f"{info.label} 'wrong-shape'" in message and info.builds in message and info.product.__name__ in message
    assert "wrong-shape" not in REGISTRY.names(kind)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_builder_of_the_one_shape_registers_for_every_kind(kind: str) -> None:
    def build(cfg, ctx):
        return None

    register(Component(kind, "right-shape", build, _tagged_config(kind, "right-shape")))
    try:
        assert REGISTRY.get(kind, "right-shape").make(None, None) is None
    finally:
        unregister(kind, "right-shape")


def test_a_lazy_builder_of_the_wrong_shape_is_refused_when_first_imported() -> None:
    lazy = Component("latency", "lazy-draw", "asyncfl.clients.latency:constant", _tagged_config("latency", "lazy-draw"))
    with pytest.raises(TypeError, match=r"latency model 'lazy-draw': constant\(c.*not \(cfg, ctx\).*build\(cfg, ctx: FleetContext\) -> LatencyModel"):
        lazy.builder()


def test_every_builtin_builder_has_the_one_shape() -> None:
    for kind in KINDS:
        for c in REGISTRY.components(kind):
            c.builder()  # imports and checks it


def test_builtins_register_through_the_same_path_and_say_so() -> None:
    for kind in KINDS:
        for c in REGISTRY.components(kind):
            if c.origin.source == "builtin":
                assert c.origin.module == "asyncfl.components.builtin", c
    assert asyncfl.component("rule", "momentum").origin == Origin("builtin", "asyncfl.components.builtin")


def test_a_registered_rule_runs_from_a_scenario_and_is_recorded_under_its_own_name(scaled, tmp_path) -> None:
    scenario = make_scenario({"server.rule": "scaled", "server.gain": 0.5})
    assert scenario.config_of("rule") == ScaledConfig(gain=0.5)
    summary = run_to_dir_blocking(scenario, tmp_path / "run")
    assert summary["rule"] == "scaled"
    assert 'rule = "scaled"' in (tmp_path / "run" / "scenario.toml").read_text()
    record = provenance.read(tmp_path / "run")
    rule = next(c for c in record["components"] if c["kind"] == "rule")
    # the code of a module of no distribution: its source file, digested (docs/run-directory.md §1.1)
    own = {Path(__file__).name: hashlib.sha256(Path(__file__).read_bytes()).hexdigest()}
    assert rule == {"kind": "rule", "field": "server.rule", "name": "scaled", "origin": {"source": "module", "module": __name__},
                    "code": {"basis": "source", "files": own}}


def test_registering_a_taken_name_is_refused_unless_replacing(scaled) -> None:
    with pytest.raises(ValueError, match="rule 'scaled' is already registered"):
        register(Component("rule", "scaled", print))
    register(SCALED)  # the same declaration again: nothing to refuse


def test_a_scenario_can_name_a_component_by_module_and_attribute_once_its_module_is_allowed(monkeypatch) -> None:
    monkeypatch.delenv(allow.ENV, raising=False)
    name = f"{__name__}:SCALED"
    with pytest.raises(ScenarioError, match=f"names code in the module '{__name__}', which asyncfl does not import unless you allow it"):
        make_scenario({"server.rule": name, "server.gain": 3.0})
    monkeypatch.setenv(allow.ENV, f"{__name__},nowhere")
    try:
        scenario = make_scenario({"server.rule": name, "server.gain": 3.0})
        assert scenario.component("rule").build == Scaled.from_config
        assert scenario.component("rule").origin.module == __name__
    finally:
        unregister("rule", name)
    with pytest.raises(ScenarioError, match="server.rule = 'nowhere.at.all:X': importing 'X' from the allowed module 'nowhere.at.all' failed"):
        make_scenario({"server.rule": "nowhere.at.all:X"})
    with pytest.raises(ScenarioError, match="names a function, not an asyncfl.Component .* never calls"):
        make_scenario({"server.rule": f"{__name__}:scaled_factory"})


def scaled_factory() -> Scaled:
    """A callable that returns something other than a Component."""
    return Scaled(1.0)


def test_origin_of_a_module_names_its_installed_distribution() -> None:
    assert origin_of_module("asyncfl.server.rules").source == "builtin"
    numpy_origin = origin_of_module("numpy.linalg")
    assert numpy_origin.source == "package" and numpy_origin.package == "numpy" and numpy_origin.version == np.__version__
    assert origin_of_module("no_such_top_level.module") == Origin("module", "no_such_top_level.module")


# -- the keys a component owns -------------------------------------------------------------------------
def test_a_key_of_a_component_the_scenario_does_not_name_is_refused_naming_its_owners() -> None:
    with pytest.raises(ScenarioError) as err:
        make_scenario({"server.rule": "sgd", "server.adam_eps": 1e-6})
    (problem,) = err.value.problems
    assert problem.startswith("server.adam_eps: unknown key")
    assert problem.endswith("(a key of server.rule = 'adam')")
    with pytest.raises(ScenarioError, match="server.cohort: unknown key.*a key of server.protocol = 'sync'"):
        make_scenario({"server.cohort": 4})


def test_naming_another_component_drops_the_old_ones_keys_with_a_note() -> None:
    raw = make_raw(**{"server.beta": 0.5, "server.rule": "momentum"})
    notes = sc.apply_values(raw, [("server.rule", "sgd")])
    assert notes == ["note: server.rule 'momentum' → 'sgd': dropped the file's server.beta (momentum only)"]
    assert "beta" not in raw["server"] and sc.validate(raw).component("rule").name == "sgd"
    raw = make_raw(**{"server.beta": 0.5})
    assert sc.apply_values(raw, [("server.rule", "nesterov")]) == []  # both own beta: kept
    assert raw["server"]["beta"] == 0.5
    assert make_scenario({"server.beta": 0.5}).replace(**{"server.rule": "adam"}).server.beta == 0.5


def test_components_named_in_one_section_may_not_share_a_key(scaled) -> None:
    clash = Component("algorithm", "gainful", "asyncfl.server.algorithms:build_pseudo_gradient", ScaledConfig,
                      AlgorithmTraits(mu="any"))
    register(clash)
    try:
        with pytest.raises(ScenarioError, match="server.gain: declared by both server.algorithm = 'gainful' and server.rule = 'scaled'"):
            make_scenario({"server.rule": "scaled", "server.algorithm": "gainful"})
    finally:
        unregister("algorithm", "gainful")


def test_a_composed_section_pickles_for_worker_processes() -> None:
    scenario = make_scenario({"server.rule": "adam", "server.adam_eps": 1e-5, "client.solver": "adam"})
    again = pickle.loads(pickle.dumps(scenario))
    assert again == scenario and type(again.server) is type(scenario.server)
    assert again.server.adam_eps == 1e-5 and again.client.adam_beta2 == 0.999


# -- traits, not names ---------------------------------------------------------------------------------
def test_the_algorithms_traits_decide_what_runs_where() -> None:
    with pytest.raises(ScenarioError, match="server.algorithm = 'fedsplit': runs on server.protocol = 'sync' only"):
        make_scenario({"server.algorithm": "fedsplit", "client.mu": 1.0})
    with pytest.raises(ScenarioError, match="client.mu = 0.0: fedprox needs a positive proximal coefficient"):
        make_scenario({"server.algorithm": "fedprox"})
    with pytest.raises(ScenarioError, match="server.algorithm = 'fedavg' has no proximal term; use server.algorithm = 'fedprox'"):
        make_scenario({"client.mu": 0.5})


def test_a_users_own_check_runs_when_the_scenario_names_it() -> None:
    picky = Component("rule", "picky", "asyncfl.server.rules:SGD.from_config",
                      traits=RuleTraits(check=lambda s: [] if s.server.lr <= 1 else [f"server.lr = {s.server.lr}: picky wants ≤ 1"]))
    register(picky)
    try:
        make_scenario({"server.rule": "picky", "server.lr": 1.0})
        with pytest.raises(ScenarioError, match="server.lr = 2.0: picky wants ≤ 1"):
            make_scenario({"server.rule": "picky", "server.lr": 2.0})
    finally:
        unregister("rule", "picky")


def test_a_users_memory_trait_enters_the_estimate() -> None:
    def memory_of(cfg: Any, shape: Any) -> tuple[MemoryPart, ...]:
        return (MemoryPart("the hoard", 7 * shape.vector * shape.steps, ("run.steps",)),)

    hoarder = Component("rule", "hoarder", "asyncfl.server.rules:SGD.from_config", traits=RuleTraits(memory=memory_of))
    register(hoarder)
    try:
        scenario = make_scenario({"server.rule": "hoarder"})
        parts = {p.what: p.bytes for p in memory.estimate(scenario).parts}
        assert parts["the hoard"] == 7 * (scenario.task.model_params() * scenario.task.itemsize) * scenario.run.steps
    finally:
        unregister("rule", "hoarder")


def test_one_answer_for_a_rules_own_bias() -> None:
    """The bias a table shows for a run is its rule's ``own_bias`` row of bias.json, 0 on a
    protocol whose uploads are never stale, NaN for a rule without a linear target."""
    report = {"none": 0.1, "momentum": 0.3, "ma_full": 0.01, "ma_light": 0.05}
    assert own_bias(make_scenario({"server.rule": "momentum"}), report) == 0.3
    assert own_bias(make_scenario({"server.rule": "nesterov"}), report) == 0.3
    assert own_bias(make_scenario({"server.rule": "ma-light"}), report) == 0.05
    assert math.isnan(own_bias(make_scenario({"server.rule": "adam"}), report))
    assert own_bias(make_scenario({**SYNC, "server.rule": "momentum"}), None) == 0.0
    assert math.isnan(own_bias(make_scenario({**SYNC, "server.rule": "sgd", "server.algorithm": "fedsplit",
                                              "client.mu": 1.0}), report))


# -- state ---------------------------------------------------------------------------------------------
def test_a_users_rule_state_is_checkpointed_and_resumed(scaled, tmp_path) -> None:
    scenario = make_scenario({"server.rule": "scaled", "run.steps": 12, "run.checkpoint_every": 4})
    whole_and_resumed(scenario, tmp_path)  # same updates.csv and model.pt as the run never stopped


# -- provenance ----------------------------------------------------------------------------------------
def test_the_task_fingerprint_follows_its_data_and_its_architecture() -> None:
    a = build_simulation(make_scenario()).task
    b = build_simulation(make_scenario()).task
    assert provenance.data_fingerprint(a) == provenance.data_fingerprint(b)
    other = build_simulation(make_scenario({"seed": 4})).task
    assert provenance.data_fingerprint(other) != provenance.data_fingerprint(a)
    assert provenance.model_fingerprint(other) == provenance.model_fingerprint(a)  # same architecture
    wider = build_simulation(make_scenario({"task.dim": 6})).task
    assert provenance.model_fingerprint(wider) != provenance.model_fingerprint(a)


def test_provenance_names_a_missing_component_and_what_changed(scaled) -> None:
    scenario = make_scenario({"server.rule": "scaled"})
    task = build_simulation(scenario).task
    record = provenance.record(scenario, task)
    assert provenance.problems(record, scenario, task) == []
    moved = {**record, "components": [dict(c, origin={"source": "package", "module": "x", "package": "lab-rules",
                                                        "version": "1.0"}) if c["kind"] == "rule" else c
                                      for c in record["components"]]}
    assert provenance.problems(moved, scenario, task) == [
        f"server.rule = 'scaled': the run used it from package lab-rules 1.0, now it comes from module {__name__}"]
    other_task = build_simulation(make_scenario({"server.rule": "scaled", "seed": 9})).task
    assert provenance.problems(record, scenario, other_task) == [
        "task.name = 'quadratic': its data differ from the data the run started on (the clients' or the test set's tensors changed)"]
    unregister("rule", "scaled")
    assert provenance.missing(record) == [
        f"server.rule = 'scaled' came from module {__name__}, which is not installed or registered now"]
    register(SCALED)


# -- the build context and the composition root ------------------------------------------------------
def test_a_plug_in_gets_its_own_stream_from_the_seed_and_its_name() -> None:
    """``ctx.stream(name)``: one of the run's streams by its name, else a generator derived from
    ``(seed, name)`` alone — the same draws for the same seed and name, others for another name
    or seed, and no run stream is touched."""
    from asyncfl import rng as rngmod
    from asyncfl.components.contracts import BuildContext

    streams = rngmod.make_streams(3)
    before = streams["latency"].bit_generator.state
    ctx = BuildContext(clients=4, seed=3, streams=streams)
    assert ctx.stream("latency") is streams["latency"]
    mine = ctx.stream("mylab.dropout").random(5)
    again = BuildContext(clients=4, seed=3).stream("mylab.dropout").random(5)
    np.testing.assert_array_equal(mine, again)
    assert not np.array_equal(mine, BuildContext(clients=4, seed=4).stream("mylab.dropout").random(5))
    assert not np.array_equal(mine, ctx.stream("mylab.other").random(5))
    assert streams["latency"].bit_generator.state == before


def test_the_engine_takes_parts_not_a_scenario() -> None:
    from asyncfl.compose import compose
    from asyncfl.sim.engine import Simulation

    scenario = make_scenario()
    with pytest.raises(TypeError, match=r"Simulation takes the parts of a run \(asyncfl.compose.compose\(scenario\)\)"):
        Simulation(scenario)  # type: ignore[arg-type]
    sim = Simulation(compose(scenario))
    assert not hasattr(sim, "scenario") and sim.settings.steps == scenario.run.steps
    with pytest.raises(TypeError, match="unknown overrides"):
        compose(scenario, fleet_factory=None)
