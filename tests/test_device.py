"""run.device (docs/guide.md §7, asyncfl.compute.device): a name is resolved against what the
machine offers or refused with exit 2 naming it; ``"cpu"`` (and ``"auto"`` on a machine without an
accelerator) gives the same files as a scenario without the key, through every executor; the
task, local training and a restored state are placed on the device (checked on torch's ``meta``
device, which has no data but refuses to mix with CPU tensors); the device memory estimate
refuses a run that cannot fit."""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch

from asyncfl.cli.main import main
from asyncfl.components.registry import REGISTRY
from asyncfl.compose import compose
from asyncfl.compute import device as devices
from asyncfl.compute.device import Available
from asyncfl.compute.training import LocalJob, sgd_train, sgd_train_batched
from asyncfl.config import memory
from asyncfl.config.scenario import validate
from asyncfl.errors import ScenarioError
from asyncfl.run import checkpoint
from asyncfl.run.runner import run_to_dir_blocking
from asyncfl.sim.engine import Simulation

from conftest import make_raw, make_scenario, through_file, whole_and_resumed

META = torch.device("meta")
NONE = Available(cuda=0, mps=False)


# -- resolving a name --------------------------------------------------------------------------
@pytest.mark.parametrize("offer,want", [(NONE, "cpu"), (Available(2, False), "cuda:0"), (Available(0, True), "mps"),
                                        (Available(1, True), "cuda:0")])
def test_auto_is_cuda_else_mps_else_cpu(offer, want):
    assert devices.resolve("auto", offer) == torch.device(want)


@pytest.mark.parametrize("name,offer,want", [("cpu", NONE, "cpu"), ("cuda", Available(1, False), "cuda:0"),
                                             ("cuda:1", Available(2, False), "cuda:1"), ("mps", Available(0, True), "mps")])
def test_an_offered_device_resolves_to_itself(name, offer, want):
    assert devices.resolve(name, offer) == torch.device(want)


@pytest.mark.parametrize("name,offer,listed", [("cuda", NONE, "available: cpu"), ("cuda:2", Available(2, True), "available: cpu, cuda:0, cuda:1, mps"),
                                               ("mps", Available(1, False), "available: cpu, cuda:0")])
def test_an_absent_device_is_refused_naming_the_key_the_request_and_what_there_is(name, offer, listed):
    with pytest.raises(ScenarioError) as caught:
        devices.resolve(name, offer)
    message = str(caught.value)
    assert "run.device = " in message and repr(name if name != "cuda" else "cuda:0") in message and listed in message


def test_cpu_asks_torch_nothing(monkeypatch):
    def no(*_):
        raise AssertionError("the default device asked torch what the machine offers")

    monkeypatch.setattr(devices, "available", no)
    assert devices.resolve("cpu") == torch.device("cpu")


@pytest.mark.parametrize("bad", ["gpu", "cuda:", "CUDA", "cuda:x", "tpu", ""])
def test_a_malformed_name_is_refused_by_the_scenario_naming_the_allowed_values(bad):
    with pytest.raises(ScenarioError, match=r'run\.device = .*allowed: "cpu", "cuda", "cuda:N", "mps", "auto"'):
        validate(make_raw(**{"run.device": bad}))


def test_the_cli_refuses_an_absent_device_with_exit_2_and_writes_nothing(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine has cuda")
    scenario = tmp_path / "tiny.toml"
    import tomli_w

    scenario.write_text(tomli_w.dumps(make_raw()))
    code = main(["run", str(scenario), "--set", 'run.device="cuda:0"', "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert "run.device = 'cuda:0'" in err and "available: cpu" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


# -- the same files on the CPU -----------------------------------------------------------------
def _files(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.iterdir()) if p.is_file()}


def _model(path: Path) -> dict[str, torch.Tensor]:
    return torch.load(path / "model.pt", weights_only=True)


def test_run_device_cpu_writes_the_same_files_as_no_key(tmp_path):
    """Every file that two runs without the key agree on (the ones without wall times) is the
    same, byte for byte, with ``run.device = "cpu"``, and so is the scenario written (the
    default is written out)."""
    base = make_scenario()
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "cpu"
    run_to_dir_blocking(base, a)
    run_to_dir_blocking(base, b)
    run_to_dir_blocking(make_scenario({"run.device": "cpu"}), c)
    fa, fb, fc = _files(a), _files(b), _files(c)
    stable = {name for name in fa if fa[name] == fb.get(name)}
    assert {"updates.csv", "scenario.toml", "counts.npz", "model.pt"} <= stable
    assert fa.keys() == fc.keys()
    assert {name for name in stable if fa[name] != fc[name]} == set()


EXECUTORS = [c.name for c in REGISTRY.components("executor")]
SLOW = {"processes", "ray"}  # spawn interpreters (and a Ray cluster)


def _executor_cases() -> list:
    cases = []
    for name in EXECUTORS:
        marks = [pytest.mark.slow] if name in SLOW else []
        if name == "ray" and importlib.util.find_spec("ray") is None:
            marks.append(pytest.mark.skip(reason="ray is not installed"))
        for device in ("cpu", "auto"):
            cases.append(pytest.param(name, device, marks=marks, id=f"{name}-{device}"))
    return cases


@pytest.fixture(scope="module")
def default_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("default") / "run"
    run_to_dir_blocking(make_scenario(), out)
    return out


@pytest.mark.parametrize("executor,device", _executor_cases())
def test_every_executor_through_the_device_path_gives_the_default_runs_files(executor, device, default_run, tmp_path, monkeypatch):
    """``run.device`` explicit (``cpu``) and resolved (``auto``, on a machine offering no
    accelerator) through each registered executor: the same ``updates.csv`` and ``model.pt`` as
    the inline run without the key (jobs carry their seeds; the executor does not matter)."""
    monkeypatch.setattr(devices, "available", lambda: NONE)
    out = tmp_path / "run"
    run_to_dir_blocking(make_scenario({"run.device": device, "run.executor": executor, "run.workers": 2}), out)
    assert (out / "updates.csv").read_bytes() == (default_run / "updates.csv").read_bytes()
    mine, theirs = _model(out), _model(default_run)
    assert mine.keys() == theirs.keys() and all(torch.equal(mine[k], theirs[k]) for k in mine)


def test_batched_inline_on_the_device_path_equals_batched_without_the_key(tmp_path, monkeypatch):
    monkeypatch.setattr(devices, "available", lambda: NONE)
    task = {"name": "gaussian-mlp"}
    run_to_dir_blocking(make_scenario({"task": task, "run.batched": True}), tmp_path / "a")
    run_to_dir_blocking(make_scenario({"task": task, "run.batched": True, "run.device": "auto"}), tmp_path / "b")
    assert (tmp_path / "a" / "updates.csv").read_bytes() == (tmp_path / "b" / "updates.csv").read_bytes()
    assert (tmp_path / "a" / "model.pt").read_bytes() == (tmp_path / "b" / "model.pt").read_bytes()


# -- placement (on torch's meta device: no data, but it refuses to mix with CPU tensors) --------
def _tensors(task) -> list[torch.Tensor]:
    data = [t for d in (*task.clients, task.test) for t in (d.x, d.y)]
    return [*data, task.initial_theta, *task.model.parameters(), *task.model.buffers()]


def test_the_cpu_placement_is_the_task_itself():
    task = compose(make_scenario()).task
    assert devices.place_task(task, torch.device("cpu")) is task


def test_placing_a_task_moves_its_model_data_and_initial_model_and_leaves_the_cpu_task():
    task = compose(make_scenario()).task
    placed = devices.place_task(task, META)
    assert all(t.device == META for t in _tensors(placed))
    assert all(a.device == META for a in (*placed.quadratic.A, *placed.quadratic.b))
    assert all(t.device.type == "cpu" for t in _tensors(task))
    assert devices.device_of(placed) == META and placed.dim == task.dim


def test_a_float64_task_is_refused_on_mps():
    task = compose(make_scenario()).task  # the quadratic task is float64
    with pytest.raises(ScenarioError, match=r"run\.device = 'mps'.*float64"):
        devices.place_task(task, torch.device("mps"))


@pytest.mark.parametrize("task", [{"name": "gaussian-mlp"},  # the fused MLP path
                                  {"name": "quadratic", "problem": "random", "dim": 5, "samples_per_client": 20},  # vmap
                                  {"name": "femnist-twin", "users": 4, "model": "cnn"}],  # job by job on the CPU, vmap on a device
                         ids=["mlp-fused", "quadratic-vmap", "cnn"])
def test_local_training_job_by_job_and_batched_stays_on_the_device(task):
    """Every tensor local training makes is on the task's device: a CPU tensor mixed in fails on
    ``meta`` (the batches' masks and scales, the fused path's buffers)."""
    scenario = make_scenario({"task": task, "population.clients": 4, "server.concurrency": 2, "server.buffer": 2})
    placed = devices.place_task(compose(scenario).task, META)
    theta = placed.initial_theta
    jobs = [LocalJob(k, theta, theta, 0.1, seed=10 + k) for k in range(4)]
    assert all(t.device == META for t in sgd_train_batched(placed, scenario.client, jobs))
    assert sgd_train(placed, scenario.client, jobs[0]).device == META


def test_which_path_trains_a_task_is_its_trait_and_the_device():
    task = compose(make_scenario()).task
    cnn = dataclasses.replace(task, batched_training=False, batched_on_accelerator=True)
    lstm = dataclasses.replace(task, batched_training=False, batched_on_accelerator=False)
    assert devices.batches_on(task, torch.device("cpu")) and devices.batches_on(task, META)
    assert not devices.batches_on(cnn, torch.device("cpu")) and devices.batches_on(cnn, torch.device("cuda:0"))
    assert not devices.batches_on(lstm, torch.device("mps"))


# -- checkpoints -------------------------------------------------------------------------------
def test_a_checkpointed_state_is_saved_from_the_cpu_and_restored_onto_the_runs_device():
    scenario = make_scenario()
    sim = Simulation(compose(scenario))
    state = sim.state()
    moved = devices.to_device(state, META)
    assert moved.theta.device == META and type(moved) is type(state)
    assert all(t.device == META for t in _walk(moved))
    back = devices.to_device(through_file(state), torch.device("cpu"))
    assert torch.equal(back.theta, state.theta)
    # encode() writes CPU tensors whatever the device: the file is the same from any device
    assert all(t.device.type == "cpu" for t in _walk(checkpoint.encode(state)))


def test_to_device_keeps_what_is_not_a_tensor():
    arr = np.arange(3.0)
    value = {"a": (torch.ones(2), arr, 3, "x"), "b": [torch.zeros(1)]}
    moved = devices.to_device(value, META)
    assert moved["a"][0].device == META and moved["a"][1] is arr and moved["a"][2:] == (3, "x")
    assert moved["b"][0].device == META


def _walk(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [t for f in dataclasses.fields(value) for t in _walk(getattr(value, f.name))]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _walk(v)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _walk(v)]
    return []


# -- device memory -----------------------------------------------------------------------------
def test_the_device_estimate_counts_data_pooled_copy_models_and_workspace():
    """gaussian-mlp's numbers: data_bytes(N) twice (the clients' and the pooled copy), the model
    vectors (10 fixed + 2 per client in flight + the buffer) × d × 4 bytes, and 512 MiB."""
    scenario = make_scenario({"task": {"name": "gaussian-mlp"}})
    task, n = scenario.task, scenario.population.clients
    est = memory.device_estimate(scenario)
    d = task.model_params()
    vectors = (memory.FIXED_MODEL_COPIES + 2 * 8 + 3) * d * 4
    own = sum(p.bytes for p in memory.model_parts(scenario)[1:])
    assert est.total == 2 * task.data_bytes(n) + vectors + own + (512 << 20)


def test_a_run_that_cannot_fit_on_the_device_is_refused_naming_it():
    scenario = make_scenario({"run.device": "cuda:0"})
    need = memory.device_estimate(scenario).total
    assert memory.check_device_memory(scenario, need, "cuda:0").total == need  # fits exactly
    with pytest.raises(ScenarioError, match=r"run\.device = 'cuda:0'.*device memory.*free on cuda:0"):
        memory.check_device_memory(scenario, need - 1, "cuda:0")
    assert memory.check_device_memory(scenario, None, "cpu") is None  # the CPU: host memory only


def test_a_private_run_is_refused_on_mps_which_has_no_float64():
    with pytest.raises(ScenarioError, match=r"run\.device = 'mps', privacy\.enabled = true.*float64"):
        devices.refuse_unsupported(torch.device("mps"), private=True)
    devices.refuse_unsupported(torch.device("mps"), private=False)
    devices.refuse_unsupported(torch.device("cuda:0"), private=True)


def test_resume_on_the_device_path_is_exact(tmp_path, monkeypatch):
    """A checkpoint (CPU tensors) restored through :func:`to_device` onto the run's device
    continues exactly: the same updates.csv and model as the uninterrupted run."""
    monkeypatch.setattr(devices, "available", lambda: NONE)
    whole_and_resumed(make_scenario({"run.device": "auto", "run.checkpoint_every": 4}), tmp_path)


# -- on an accelerator (skipped where there is none: ready for a machine that has one) -----------
ACCELERATOR = devices.resolve("auto")
needs_accelerator = pytest.mark.skipif(ACCELERATOR.type == "cpu", reason="no cuda or mps device here")


@needs_accelerator
@pytest.mark.parametrize("batched", [False, True])
def test_on_an_accelerator_updates_csv_is_the_cpus_and_the_model_close(batched, tmp_path):
    """The schedule and every stream that decides what happens stay on the CPU: ``updates.csv``
    (clients, versions, times, staleness) is the CPU run's byte for byte; the model differs in
    the last bits only (another summation order; float32 gaussian-mlp)."""
    over = {"task": {"name": "gaussian-mlp"}, "run.batched": batched}
    run_to_dir_blocking(make_scenario(over), tmp_path / "cpu")
    run_to_dir_blocking(make_scenario({**over, "run.device": str(ACCELERATOR)}), tmp_path / "acc")
    assert (tmp_path / "acc" / "updates.csv").read_bytes() == (tmp_path / "cpu" / "updates.csv").read_bytes()
    a, b = _model(tmp_path / "cpu"), _model(tmp_path / "acc")
    assert all(b[k].device.type == "cpu" and torch.allclose(a[k], b[k], rtol=1e-4, atol=1e-5) for k in a)


@needs_accelerator
def test_on_an_accelerator_a_run_repeats_and_resumes_exactly(tmp_path):
    scenario = make_scenario({"task": {"name": "gaussian-mlp"}, "run.device": str(ACCELERATOR), "run.checkpoint_every": 4})
    whole, _ = whole_and_resumed(scenario, tmp_path)
    run_to_dir_blocking(scenario, tmp_path / "again")
    assert (tmp_path / "again" / "model.pt").read_bytes() == (whole / "model.pt").read_bytes()


# -- determinism and the composition root's checks ----------------------------------------------
def test_prepare_asks_an_accelerator_for_deterministic_kernels_and_the_cpu_for_nothing(monkeypatch):
    calls = []
    monkeypatch.setattr(torch, "use_deterministic_algorithms", lambda on, **kw: calls.append((on, kw)))
    monkeypatch.setattr(torch.backends.cudnn, "benchmark", True)
    monkeypatch.delenv("CUBLAS_WORKSPACE_CONFIG", raising=False)
    devices.prepare(torch.device("cpu"))
    assert calls == [] and "CUBLAS_WORKSPACE_CONFIG" not in __import__("os").environ
    devices.prepare(torch.device("cuda:0"))
    assert calls == [(True, {"warn_only": True})] and torch.backends.cudnn.benchmark is False
    assert __import__("os").environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"


def test_compose_refuses_a_run_that_does_not_fit_the_devices_free_memory_before_building(monkeypatch):
    """The composition root asks the resolved device for its free memory and refuses the run
    (here: 1 kB free on a stand-in device) before the task is built."""
    monkeypatch.setattr(devices, "resolve", lambda name, offer=None: META)
    monkeypatch.setattr(devices, "prepare", lambda device: None)
    monkeypatch.setattr(devices, "device_memory", lambda device: 1000)
    built = []
    monkeypatch.setattr(devices, "place_task", lambda task, device: built.append(task))
    with pytest.raises(ScenarioError, match=r"run\.device = 'cuda'.*more than the 1\.0 kB free on meta: the device's workspaces and allocator slack: 536\.9 MB\. Lower"):
        compose(make_scenario({"run.device": "cuda"}))
    assert built == []
