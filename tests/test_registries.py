"""Every plug-in is a declared component, one table per kind (docs/architecture.md §4).

Every kind — tasks, latency and availability models, protocols, algorithms, server rules, local
solvers, executors, sampling assumptions, privacy accountants, count post-processing modes — is
declared once, in :mod:`asyncfl.components.builtin`, and seen by kind through the live tables of
:mod:`asyncfl.config.registries`. These tests read as the specification of that:

* every registered name loads (lazily: the registries and the scenario import no torch) and the
  object has the interface its kind promises;
* a scenario accepts exactly the registered names of each kind, and refuses any other with a
  message that names the field and lists every registered name — also through the CLI
  (exit 2, no traceback);
* what used to be unreachable from a scenario (``privacy.counts = "simplex"``) now runs.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import re
import subprocess
import sys
import typing
from pathlib import Path

import numpy as np
import pytest
import torch

from asyncfl.components.registry import REGISTRY
from asyncfl.clients import latency as latency_models
from asyncfl.config import registries
from asyncfl.config import scenario as sc
from asyncfl.config.registries import (
    ACCOUNTANTS, ALGORITHMS, COUNT_MODES, EXECUTORS, LATENCIES, PROTOCOLS, REGISTRIES, RULES, SAMPLINGS, TASKS,
)
from asyncfl.errors import ScenarioError
from asyncfl.cli.table import CommandTable
from asyncfl.components.contracts import BuildContext
from asyncfl.registry import Registry
from asyncfl.config.base import Section
from asyncfl.config.latency import (
    ConstantLatency, ExponentialLatency, HalfNormalLatency, LogNormalLatency, ParetoLatency, UniformLatency,
)
from asyncfl.config.tasks import QuadraticTask
from asyncfl.server.aggregation import Aggregate

from conftest import make_raw

ROOT = Path(__file__).resolve().parents[1]


# -- the command table type (asyncfl.cli.table) -----------------------------------------------
def test_a_registry_knows_its_names_without_importing_them() -> None:
    reg = CommandTable("widget", "section.widget", {
        "a": "json:dumps",
        "b": ("json:loads", "reads JSON"),
        "c": ("json.decoder:JSONDecoder.decode", "a method, by dotted attribute"),
    })
    assert reg.names == ("a", "b", "c")
    assert "a" in reg and "z" not in reg and ["a"] not in reg  # unhashable values are just "not in"
    assert [e.summary for e in reg.entries()] == ["", "reads JSON", "a method, by dotted attribute"]
    import json
    import json.decoder

    assert reg.load("a") is json.dumps and reg.load("b") is json.loads
    assert reg.load("c") is json.decoder.JSONDecoder.decode
    assert reg.load("a") is reg.load("a")


def test_an_unknown_name_is_answered_with_the_field_and_every_name() -> None:
    reg = CommandTable("widget", "section.widget", {"alpha": "json:dumps", "beta": "json:loads"})
    msg = reg.unknown("alpah")
    assert msg == "section.widget = 'alpah': unknown widget; did you mean 'alpha'? Allowed: alpha, beta"
    assert reg.unknown(3) == "section.widget = 3: unknown widget. Allowed: alpha, beta"
    with pytest.raises(KeyError, match="Allowed: alpha, beta"):
        reg.load("gamma")


def test_a_target_must_be_module_colon_attribute() -> None:
    with pytest.raises(ValueError, match="module:attribute"):
        CommandTable("widget", "section.widget", {"a": "json.dumps"})


def test_a_component_has_a_config_class_when_it_owns_keys() -> None:
    assert LATENCIES.config("pareto") is ParetoLatency
    assert TASKS.config("quadratic") is QuadraticTask
    assert set(RULES.config("adam").model_fields) == {"beta", "adam_beta2", "adam_eps"}
    with pytest.raises(LookupError, match="no config class"):
        RULES.config("sgd")
    with pytest.raises(LookupError, match="Allowed: constant"):
        LATENCIES.config("gamma")


def test_the_registries_and_the_scenario_import_no_torch() -> None:
    code = (
        "import sys, asyncfl.config.registries, asyncfl.config.scenario; "
        "assert 'torch' not in sys.modules, 'torch imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_every_kind_has_one_table_and_every_builtin_builder_is_a_module_attribute() -> None:
    fields = [reg.field for reg in REGISTRIES]
    assert fields == [
        "task.name", "latency.dist", "population.availability", "server.protocol", "server.algorithm",
        "server.rule", "client.solver", "client.update_hook", "run.executor", "privacy.sampling", "privacy.accountant", "privacy.counts",
        "privacy.noise", "run.trackers",
    ]
    for reg in REGISTRIES:
        for entry in reg.entries():
            if entry.origin.source == "builtin":
                module, _, attribute = entry.build.partition(":")
                assert module.startswith("asyncfl.") and attribute, (reg.kind, entry)


# -- every name loads and has its kind's interface ----------------------------------------------
def _rule_raw(name: str) -> dict:
    """A scenario naming rule ``name``; a composite (``chain``) links ``momentum``."""
    links = RULES.get(name).traits.links
    return make_raw(**{"server.rule": name, **({f"server.{links}": ["momentum"]} if links else {})})


@pytest.mark.parametrize("name", RULES.names)
def test_every_rule_builds_from_its_own_config_and_steps(name: str) -> None:
    component = RULES.get(name)
    if component.traits.links is not None:  # a composite builds from a scenario's links (tests/test_chain.py)
        scenario = sc.validate(_rule_raw(name))
        component, cfg = scenario.component("rule"), scenario.config_of("rule")
    else:
        cfg = None if component.config is None else component.config(
            **({"ma_ridge": 0.0} if "ma_ridge" in component.config.model_fields else {}))
    rule = component.make(cfg, None)
    assert callable(rule.init) and callable(rule.direction)
    theta = torch.zeros(4, dtype=torch.float64)
    state = rule.init(theta)
    r = torch.tensor([1.0, -2.0, 0.5, 0.0], dtype=torch.float64)
    out = rule.direction(Aggregate(step=1, r=r, weights=np.array([1.0, 0.0, 0.0, 0.0])), state)
    assert out.direction.shape == r.shape and torch.isfinite(out.direction).all()
    if name in ("sgd", "momentum", "nesterov", "ma-full", "ma-light"):
        # the first step of every momentum-like rule from a zero state (W = I): m_1 = r_1 ((1+β) r_1 for Nesterov)
        scale = 1.0 + cfg.beta if name == "nesterov" else 1.0
        torch.testing.assert_close(out.direction, scale * r)


def test_make_rule_builds_the_named_component() -> None:
    from asyncfl.compose import build_rule as make_rule

    for name in RULES.names:
        build = RULES.load(name)
        made = make_rule(sc.validate(_rule_raw(name)))
        assert type(made) is getattr(build, "__self__", type(made)) and type(made).__module__ == build.__module__
    with pytest.raises(ScenarioError, match="server.rule = 'rmsprop': unknown server rule.*Allowed: sgd, momentum"):
        sc.validate(make_raw(**{"server.rule": "rmsprop"}))


@pytest.mark.parametrize("name", ALGORITHMS.names)
def test_every_algorithm_builder_takes_its_own_config_and_a_context(name: str) -> None:
    build = ALGORITHMS.load(name)
    assert callable(build)
    assert list(inspect.signature(build).parameters) == ["cfg", "ctx"]


@pytest.mark.parametrize("name", PROTOCOLS.names)
def test_every_protocol_is_a_class_the_engine_can_drive(name: str) -> None:
    from asyncfl.components.contracts import ServerProtocol

    cls = PROTOCOLS.load(name)
    assert inspect.isclass(cls)
    for method in ("attach", "start", "on_arrival", "on_offline", "ready", "stepped", "state_problems"):
        assert callable(getattr(cls, method, None)), (name, method)
    protocol = PROTOCOLS.make(name, PROTOCOLS.config(name)(), BuildContext(clients=4, seed=0, buffer=2))
    assert isinstance(protocol, ServerProtocol)  # the public contract, checked structurally


DRAWN = {  # an independent statement of each drawn model, on a fresh generator of the same seed
    "constant": (ConstantLatency(value=2.5), lambda c, rng: c.value),
    "exponential": (ExponentialLatency(mean=3.0), lambda c, rng: rng.exponential(3.0)),
    "halfnormal": (HalfNormalLatency(scale=2.0), lambda c, rng: abs(rng.normal(0.0, 2.0))),
    "lognormal": (LogNormalLatency(median=2.0, sigma=0.5), lambda c, rng: 2.0 * np.exp(0.5 * rng.standard_normal())),
    "uniform": (UniformLatency(low=0.5, high=4.0), lambda c, rng: rng.uniform(0.5, 4.0)),
    "pareto": (ParetoLatency(scale=1.5, shape=2.5), lambda c, rng: 1.5 * (1.0 + rng.pareto(2.5))),
}


def test_the_latency_registry_is_the_drawn_models_and_the_replayed_ones() -> None:
    assert set(LATENCIES.names) == set(DRAWN) | {"trace", "fedscale"}


@pytest.mark.parametrize("name", LATENCIES.names)
def test_every_latency_model_has_its_config_class_and_a_draw(name: str) -> None:
    config = LATENCIES.config(name)
    assert issubclass(config, Section) and config.model_fields["dist"].default == name
    build = LATENCIES.load(name)
    assert callable(build)
    if name not in DRAWN:  # replayed / fixed per client: not drawn per job
        assert LATENCIES.get(name).traits.mode == {"trace": "replay", "fedscale": "profiles"}[name]
        return
    assert LATENCIES.get(name).traits.mode == "draw"
    cfg, reference = DRAWN[name]
    rng_a, rng_b = np.random.default_rng(7), np.random.default_rng(7)
    sample = LATENCIES.make(name, cfg, None)  # build(cfg, ctx): the draw bound to its config
    got = [sample(rng_a) for _ in range(50)]
    want = [float(reference(cfg, rng_b)) for _ in range(50)]
    assert got == want  # bit for bit, and the generators are left in the same state
    assert rng_a.random() == rng_b.random()
    assert all(x >= 0 for x in got)


TINY_TASKS = {
    "quadratic": {"dim": 3, "samples_per_client": 5},
    "synthetic": {"dim": 5, "classes": 3},
    "digits": {},
    "gaussian-mlp": {"dim": 4, "classes": 3, "samples_per_client": 5, "hidden": 4},
    "mnist1d": {"hidden": 8},
    # read from a folder (tests/fixtures/make_dataset_fixtures.py writes them; {data} is that folder)
    "femnist": {"path": "{data}/femnist", "model": "mlp", "hidden": 8},
    "shakespeare": {"path": "{data}/shakespeare", "hidden": 8},
    "cifar10": {"path": "{data}/cifar-10-batches-py"},
    "cifar100": {"path": "{data}/cifar-100-python"},
    "mnist": {"path": "{data}/mnist", "hidden": 8},
    "tff-emnist": {"path": "{data}/tff-emnist", "model": "mlp", "hidden": 8},
    "femnist-twin": {"users": 5, "model": "mlp", "hidden": 8},
    "hf-images": {"path": "{data}/hf-cifar10", "image": "img", "classes": 10, "side": 32, "channels": 3},
}


@pytest.fixture(scope="module")
def dataset_folder(tmp_path_factory) -> Path:
    from fixtures.make_dataset_fixtures import write_all

    folder = tmp_path_factory.mktemp("datasets")
    write_all(folder)
    return folder


def test_the_task_registry_is_exactly_the_tasks_tested_here() -> None:
    assert TASKS.names == tuple(TINY_TASKS)


@pytest.mark.parametrize("name", TASKS.names)
def test_every_task_builder_builds_its_config(name: str, dataset_folder: Path) -> None:
    from asyncfl.tasks import Task, build_task

    if name == "tff-emnist":
        pytest.importorskip("h5py")
    if name == "hf-images":
        pytest.importorskip("datasets")
    config = TASKS.config(name)
    assert config.model_fields["name"].default == name
    builder = TASKS.load(name)
    assert callable(builder)
    keys = {k: v.format(data=dataset_folder) if isinstance(v, str) else v for k, v in TINY_TASKS[name].items()}
    cfg = config(**keys)
    task = builder(cfg, BuildContext(clients=3, seed=0))
    assert isinstance(task, Task) and task.num_clients == 3
    assert torch.equal(build_task(cfg, 3, 0).initial_theta, task.initial_theta)


def test_build_task_refuses_an_unregistered_name_listing_every_task() -> None:
    from asyncfl.tasks import build_task

    with pytest.raises(ScenarioError) as err:
        build_task(type("Cfg", (), {"name": "imagenet"})(), 2, 0)
    assert str(err.value).count("task.name = 'imagenet'") == 1
    assert "Allowed: " + ", ".join(TASKS.names) in str(err.value)


@pytest.mark.parametrize("name", EXECUTORS.names)
def test_every_executor_builder_has_the_one_builder_shape(name: str) -> None:
    build = EXECUTORS.load(name)
    assert list(inspect.signature(build).parameters) == ["cfg", "ctx"]


@pytest.mark.asyncio
@pytest.mark.parametrize("name", ["inline", "threads"])
async def test_the_in_process_executors_train_a_job(name: str) -> None:
    from asyncfl.compose import build_executor
    from asyncfl.compute.executors import InlineExecutor, ThreadExecutor
    from asyncfl.compose import local_train
    from asyncfl.compute.training import LocalJob
    from asyncfl.tasks import build_task

    scenario = sc.validate(make_raw(**{"run.executor": name, "run.workers": 2}))
    task = build_task(scenario.task, scenario.population.clients, scenario.seed)
    executor = build_executor(scenario, task)
    assert type(executor) is {"inline": InlineExecutor, "threads": ThreadExecutor}[name]
    job = LocalJob(1, task.initial_theta, task.initial_theta, 0.0, 11)
    try:
        got = await executor.submit(job)
    finally:
        await executor.aclose()
    assert torch.equal(got, local_train(task, scenario.client, job))


def test_make_executor_refuses_an_unregistered_name() -> None:
    from asyncfl.compose import build_executor

    scenario = sc.validate(make_raw())
    run = scenario.run.model_copy(update={"executor": "mpi"})  # bypasses validation on purpose
    with pytest.raises(ScenarioError, match=r"run.executor = 'mpi': unknown executor \(a registered name.*\). Allowed: inline, threads, processes, ray"):
        build_executor(dataclasses.replace(scenario, run=run), None)


@pytest.mark.parametrize("name", ACCOUNTANTS.names)
def test_every_accountant_bounds_epsilon_like_dp_accounting(name: str) -> None:
    """An accountant is ``epsilon(releases, σ, δ)``: for Poisson releases and for un-subsampled
    ones (docs/privacy.md §4), against dp-accounting's RDP accountant built here."""
    import dp_accounting
    from dp_accounting import rdp

    from asyncfl.privacy.accountants import Releases
    from asyncfl.privacy.accounting import epsilon_of, epsilon_spent

    epsilon = ACCOUNTANTS.make(name)
    sigma, delta, q, steps = 1.2, 1e-5, 0.05, 20
    eps = epsilon(Releases(steps, q), sigma, delta)
    assert eps == epsilon_spent(sigma, delta, q, steps, name)
    poisson = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    plain = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma), 3)
    for mine, event in ((eps, poisson), (epsilon(Releases(3), sigma, delta), plain)):
        eps_rdp = rdp.RdpAccountant().compose(event).get_epsilon(delta)
        if name == "rdp":
            assert mine == pytest.approx(eps_rdp, rel=1e-12)
        else:  # PLD: an upper bound, tighter than RDP
            assert 0 < mine < eps_rdp
    assert epsilon(Releases(3), sigma, delta) == epsilon_of(Releases(3), sigma, delta, name)


@pytest.mark.parametrize("name", SAMPLINGS.names)
def test_every_sampling_assumption_names_its_claim_releases_and_cap(name: str) -> None:
    from asyncfl.privacy.accountants import Releases
    from asyncfl.privacy.sampling import RunShape, SamplingAssumption

    assumption = SAMPLINGS.make(name)
    assert isinstance(assumption, SamplingAssumption) and assumption.name == name
    assert assumption.claim in ("approximation", "guarantee")
    shape = RunShape("fedbuff", clients=100, buffer=10, noise_cohort=20, steps=50, max_participations=4, allotment=(2, 5))
    releases = assumption.releases(shape)
    assert isinstance(releases, Releases) and releases.count >= 1
    assert assumption.so_far(shape, 0, 0) is None  # nothing released before the first step
    assert "docs/privacy.md" in assumption.statement(shape)


def test_epsilon_spent_refuses_an_unregistered_accountant() -> None:
    from asyncfl.privacy.accounting import epsilon_spent

    with pytest.raises(ScenarioError, match="privacy.accountant = 'gdp': unknown privacy accountant.*Allowed: pld, rdp"):
        epsilon_spent(1.0, 1e-5, 0.1, 10, "gdp")


C_HAT = np.array([3.5, -1.0, 0.7, 0.8, -0.2])  # one noisy row, buffer C = 4


def _is_simplex_projection(v: np.ndarray, x: np.ndarray, C: float) -> bool:
    """KKT conditions of argmin ‖x − v‖² over {x ≥ 0, Σx = C}: x = max(v − θ, 0) for one θ."""
    if not (np.all(x >= 0) and np.isclose(x.sum(), C)):
        return False
    pos = x > 0
    theta = (v - x)[pos]
    return bool(np.allclose(theta, theta[0]) and np.all(v[~pos] <= theta[0] + 1e-12))


@pytest.mark.parametrize("name", COUNT_MODES.names)
def test_every_count_mode_post_processes_one_row(name: str) -> None:
    from asyncfl.privacy.mechanism import postprocess_counts

    mode = COUNT_MODES.make(name)
    c_hat = C_HAT.copy()
    out = mode(c_hat, 4)
    np.testing.assert_array_equal(c_hat, C_HAT)  # the input is not modified
    assert out is not c_hat and out.dtype == np.float64 and out.shape == c_hat.shape
    np.testing.assert_array_equal(postprocess_counts(C_HAT, 4, name), out)
    clamped = np.where(C_HAT > 0, C_HAT, 0.0)
    if name == "raw":
        np.testing.assert_array_equal(out, C_HAT)
    elif name == "clamp":
        np.testing.assert_array_equal(out, clamped)
    elif name == "project":  # clamp, then rescale to sum C
        assert np.all(out >= 0) and out.sum() == pytest.approx(4.0)
        np.testing.assert_allclose(out, clamped * 4.0 / clamped.sum())
    else:  # simplex: the Euclidean projection onto {c ≥ 0, Σc = C}
        assert name == "simplex"
        assert np.all(out >= 0) and out.sum() == pytest.approx(4.0)
        assert _is_simplex_projection(C_HAT, out, 4.0)
        np.testing.assert_allclose(out, [3.5 - 1 / 3, 0.0, 0.7 - 1 / 3, 0.8 - 1 / 3, 0.0])  # θ = 1/3 by hand
        # never farther from any point of the simplex than the noisy row, e.g. the true counts
        truth = np.array([2.0, 0.0, 1.0, 1.0, 0.0])
        assert np.linalg.norm(out - truth) <= np.linalg.norm(C_HAT - truth)


def test_project_spreads_an_empty_row_uniformly() -> None:
    out = COUNT_MODES.make("project")(np.array([-1.0, -0.5, -2.0, -0.1]), 6)
    np.testing.assert_array_equal(out, [1.5, 1.5, 1.5, 1.5])


def test_postprocess_counts_refuses_an_unregistered_mode() -> None:
    from asyncfl.privacy.mechanism import postprocess_counts

    with pytest.raises(ScenarioError, match="privacy.counts = 'median': unknown count post-processing.*Allowed: raw, clamp, project, simplex"):
        postprocess_counts(C_HAT, 4, "median")


# -- the scenario accepts exactly the registered names -------------------------------------------
def _raw_for(field: str, name: str, tmp_path: Path) -> dict:
    """A valid raw scenario (conftest's tiny one) with ``field = name`` and whatever else that
    name needs to be valid."""
    raw = make_raw()
    section, key = field.split(".")
    if field == "task.name":
        raw["task"] = {"name": name}
        if "path" in TINY_TASKS.get(name, {}):  # a required key (the folder is read when the task is built)
            raw["task"]["path"] = str(tmp_path)
        return raw
    if field == "latency.dist":
        raw["latency"] = {"dist": name}
        if name in ("trace", "fedscale"):
            raw["population"]["speed_sigma"] = 0.0
            if name == "trace":
                (tmp_path / "updates.csv").write_text("seq\n")
                raw["latency"]["file"] = str(tmp_path / "updates.csv")
            else:
                raw["latency"]["file"] = "asyncfl:fedscale_sample_devices.pkl"
        return raw
    raw.setdefault(section, {})[key] = [name] if KINDS_BY_FIELD[field].many else name  # run.trackers lists its names
    if field == "population.availability" and name == "trace":
        raw["population"]["availability_file"] = "asyncfl:fedscale_sample_availability.pkl"
    if field == "server.protocol" and name == "sync":
        raw["server"].pop("concurrency")
    if field == "server.rule" and REGISTRY.get("rule", name).traits.links is not None:  # a composite lists its links
        raw["server"][REGISTRY.get("rule", name).traits.links] = ["momentum"]
    if field == "server.algorithm" and name != "fedavg":
        raw["server"]["protocol"] = "sync"
        raw["server"].pop("concurrency")
        if name != "ca2fl":  # CA2FL's clients are FedAvg's: no proximal term
            raw["client"]["mu"] = 0.1
    if field.startswith("privacy."):
        raw["privacy"].update(enabled=True, noise_multiplier=0.5, xi=1.0)
    if field == "privacy.sampling" and name == "participation-cap":
        raw["privacy"]["max_participations"] = 2
    if field == "privacy.sampling" and name == "random-allocation":
        raw["privacy"].update(allotted_steps=1, allotment_window=1)
    if field == "privacy.noise" and REGISTRY.get("noise", name).traits.correlated:  # needs a participation schema
        raw["privacy"].update(sampling="participation-cap", max_participations=4, min_separation=4)
    return raw


CHOSEN = [(reg.field, reg) for reg in REGISTRIES]
KINDS_BY_FIELD = {reg.field: reg.info for reg in REGISTRIES}


def _named(registry: Registry, name: str) -> object:
    """What a scenario writes to name ``name``: the name, or a list of it for a list-valued kind."""
    return [name] if registry.info.many else name


@pytest.mark.parametrize("field,registry", CHOSEN, ids=[f for f, _ in CHOSEN])
def test_the_scenario_accepts_every_registered_name(field: str, registry: Registry, tmp_path: Path) -> None:
    section, key = field.split(".")
    for name in registry.names:
        scenario = sc.validate(_raw_for(field, name, tmp_path))
        assert getattr(getattr(scenario, section), key) == _named(registry, name)


@pytest.mark.parametrize("field,registry", CHOSEN, ids=[f for f, _ in CHOSEN])
def test_the_scenario_refuses_any_other_name_listing_the_registered_ones(field: str, registry: Registry, tmp_path: Path) -> None:
    raw = _raw_for(field, registry.names[0], tmp_path)
    section, key = field.split(".")
    raw.setdefault(section, {})[key] = _named(registry, "bogus")
    with pytest.raises(ScenarioError) as err:
        sc.validate(raw)
    problems = [p for p in err.value.problems if p.startswith(f"{field} = 'bogus'")]
    assert len(problems) == 1, err.value.problems
    assert _listed(problems[0]) == set(registry.names)


def test_the_allowed_values_of_a_kind_are_whatever_is_registered_when_the_scenario_is_read() -> None:
    """No kind's names are fixed at import (no ``Literal``): a component registered later is
    accepted, and an unregistered one refused again."""
    from asyncfl.components.core import Component
    from asyncfl.components.registry import register, unregister

    for registry in REGISTRIES:
        section, key = registry.field.split(".")
        model = sc.TAGGED[section].traits if section in sc.TAGGED else sc.SECTIONS[section]
        if section not in sc.TAGGED and not registry.info.many:  # a list-valued kind's key is a list of str
            assert model.model_fields[key].annotation is str, registry.field
    raw = make_raw(**{"server.rule": "late-rule"})
    with pytest.raises(ScenarioError, match="server.rule = 'late-rule': unknown server rule"):
        sc.validate(raw)
    register(Component("rule", "late-rule", "asyncfl.server.rules:SGD.from_config"))
    try:
        assert sc.validate(raw).component("rule").name == "late-rule"
    finally:
        unregister("rule", "late-rule")
    with pytest.raises(ScenarioError, match="late-rule"):
        sc.validate(raw)


def _listed(message: str) -> set[str]:
    """The names a refusal lists: ``must be 'a', 'b' or 'c'`` or ``Allowed: a, b, c``."""
    text = message.split("Allowed:", 1)[1] if "Allowed:" in message else message.split("must be", 1)[1]
    if "Allowed:" in message:
        return {part.strip() for part in text.split(",")}
    return set(re.findall(r"'([^']*)'", text))


# -- through the CLI -------------------------------------------------------------------------------
CLI_FIELDS = [
    (RULES.field, RULES), (LATENCIES.field, LATENCIES), (TASKS.field, TASKS),
    (EXECUTORS.field, EXECUTORS), (COUNT_MODES.field, COUNT_MODES), (ACCOUNTANTS.field, ACCOUNTANTS),
    (SAMPLINGS.field, SAMPLINGS),
    (ALGORITHMS.field, ALGORITHMS), (PROTOCOLS.field, PROTOCOLS),
]


def _asyncfl() -> list[str]:
    script = Path(sys.executable).with_name("asyncfl")
    return [str(script)] if script.exists() else [sys.executable, "-m", "asyncfl.cli.main"]


@pytest.fixture(scope="module")
def every_field_bogus() -> subprocess.CompletedProcess:
    """``asyncfl validate`` with every field of :data:`CLI_FIELDS` set to ``bogus``, in one fresh
    command: validation lists every problem, each on its own ``-`` line."""
    sets = [arg for field, _ in CLI_FIELDS for arg in ("--set", f"{field}=bogus")]
    return subprocess.run(
        [*_asyncfl(), "validate", "scenarios/quickstart.toml", *sets],
        cwd=ROOT, capture_output=True, text=True, timeout=120,
        env={**os.environ, "COLUMNS": "400", "NO_COLOR": "1"},
    )


@pytest.mark.parametrize("field,registry", CLI_FIELDS, ids=[f for f, _ in CLI_FIELDS])
def test_cli_validate_refuses_an_unknown_name_with_exit_2_and_every_allowed_name(
        field: str, registry: Registry, every_field_bogus: subprocess.CompletedProcess) -> None:
    proc = every_field_bogus
    err = " ".join(proc.stderr.split())  # immune to line wrapping
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert f"{field} = 'bogus'" in err, err
    after = err.split(f"{field} = 'bogus'", 1)[1]
    line = after.split(" - ", 1)[0]  # this problem's line only
    # a "module:attribute" name is registered in the process whose scenario named it (an earlier
    # test may have, e.g. the review's oracle counts), never in a fresh command's
    assert _listed(line) == {n for n in registry.names if ":" not in n}, line


# -- what the registries made reachable ---------------------------------------------------------
def test_simplex_counts_are_accepted_and_a_private_run_uses_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from asyncfl.privacy import aggregator as private_aggregator
    from asyncfl.privacy.mechanism import project_simplex
    from asyncfl.server.aggregation import weight_row
    from asyncfl.compose import run_blocking

    raw = make_raw(**{"run.steps": 6, "run.eval_every": 6})
    raw["privacy"] = {"enabled": True, "clip": 1.0, "noise_multiplier": 0.5, "xi": 1.0, "counts": "simplex"}
    scenario = sc.validate(raw)
    assert scenario.privacy.counts == "simplex"

    seen: list[Aggregate] = []
    real = private_aggregator.PrivateAggregator.aggregate

    def spy(self, step, updates, rng):
        out = real(self, step, updates, rng)
        seen.append(out)
        return out

    monkeypatch.setattr(private_aggregator.PrivateAggregator, "aggregate", spy)
    sim = run_blocking(scenario)
    assert sim.steps_done == 6 and len(seen) == 6
    C, p = scenario.server.buffer, scenario.server.staleness_exponent
    for aggregate in seen:
        counts = project_simplex(aggregate.raw_counts, C)
        assert _is_simplex_projection(aggregate.raw_counts, counts, C)
        np.testing.assert_allclose(aggregate.weights, weight_row(counts, C, p), rtol=0, atol=0)
    assert torch.isfinite(sim.theta).all()


def test_registries_module_lists_every_kind() -> None:
    found = {name for name, value in vars(registries).items() if isinstance(value, Registry)}
    assert found == {"RULES", "ALGORITHMS", "PROTOCOLS", "LATENCIES", "AVAILABILITIES", "TASKS", "SOLVERS", "HOOKS", "EXECUTORS",
                     "SAMPLINGS", "ACCOUNTANTS", "COUNT_MODES", "NOISES", "TRACKERS"}
    assert len(REGISTRIES) == len(found)
