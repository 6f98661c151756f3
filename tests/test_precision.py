"""run.precision (docs/guide.md §7 "Precision", asyncfl/compute/precision.py): "fp32", the default,
writes the same files as a scenario without the key; "bf16" runs the client solver's local
training (job by job and batched, on every executor) under bf16 autocast, with the parameters, the
uploads and the server in float32, and the same updates.csv schedule; bf16 is refused, exit 2
naming the field and what is allowed, for a float64 task or a device without bfloat16;
summary.json records the device and the precision."""

from __future__ import annotations

import json
import pickle

import pytest
import torch

from asyncfl.cli.main import main
from asyncfl.compose import compose
from asyncfl.compute import device as devices
from asyncfl.compute.precision import AutocastSolver, at_precision, bf16_supported, precision_problems
from asyncfl.compute.solvers import SGD_SOLVER
from asyncfl.compute.training import LocalJob, batch_schedule, sgd_train
from asyncfl.errors import ScenarioError
from asyncfl.run.runner import run_to_dir_blocking

from conftest import make_raw, make_scenario, whole_and_resumed

MNIST1D_CNN = {"task": {"name": "mnist1d", "model": "cnn"}, "population.clients": 12, "server.concurrency": 4,
               "server.buffer": 2, "run.steps": 6, "run.eval_every": 3, "client.lr": 0.1}
MLP = {"task": {"name": "gaussian-mlp"}, "population.clients": 8, "server.concurrency": 4, "server.buffer": 2,
       "run.steps": 6, "run.eval_every": 3}


def _files(run) -> tuple[bytes, dict[str, torch.Tensor], dict]:
    return ((run / "updates.csv").read_bytes(), torch.load(run / "model.pt", weights_only=True),
            json.loads((run / "summary.json").read_text()))


def _same_model(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


# -- fp32, the default -------------------------------------------------------------------------
@pytest.mark.parametrize("overrides", [{}, {**MLP, "run.batched": True}], ids=["quadratic", "mlp-batched"])
def test_fp32_writes_the_same_files_as_a_scenario_without_the_key(overrides, tmp_path):
    without, fp32 = tmp_path / "without", tmp_path / "fp32"
    run_to_dir_blocking(make_scenario(overrides), without)
    run_to_dir_blocking(make_scenario({**overrides, "run.precision": "fp32"}), fp32)
    (csv_a, model_a, summary_a), (csv_b, model_b, summary_b) = _files(without), _files(fp32)
    assert csv_a == csv_b and _same_model(model_a, model_b)
    assert (without / "metrics.csv").read_text().count("\n") == (fp32 / "metrics.csv").read_text().count("\n")
    assert summary_a["precision"] == summary_b["precision"] == "fp32"


def test_the_default_precision_is_fp32_and_its_solver_is_the_solver_itself():
    assert make_scenario().run.precision == "fp32"
    assert at_precision(SGD_SOLVER, "fp32") is SGD_SOLVER
    assert compose(make_scenario()).make_executor().solver is SGD_SOLVER


def test_the_summary_records_the_resolved_device_and_the_precision(tmp_path):
    run_to_dir_blocking(make_scenario({**MLP, "run.device": "auto", "run.precision": "bf16"}), tmp_path / "run")
    summary = _files(tmp_path / "run")[2]
    assert summary["device"] == str(devices.resolve("auto"))  # "cpu" on a machine without an accelerator
    assert summary["precision"] == "bf16"
    assert {"batched", "batched_why", "device", "precision"} <= summary.keys()


# -- bf16 --------------------------------------------------------------------------------------
def test_bf16_trains_local_sgd_as_autocast_does_by_hand_step_by_step():
    """Three mini-batch SGD steps of the solver at bf16 equal ``θ ← θ − lr · ∇ℓ(θ; B)`` with each
    gradient taken by hand through the model under its own ``torch.autocast("cpu",
    torch.bfloat16)`` region, on the job's mini-batches: the convolutions and the linear layer
    see the weights of the current step (autocast's weight cache, kept over a whole job, would
    give them the starting weights at every step), and the result differs from fp32's."""
    scenario = make_scenario({**MNIST1D_CNN, "client.local_steps": 3, "client.batch_size": 10})
    task = compose(scenario).task
    theta, k, lr = task.initial_theta, 2, scenario.client.lr
    job = LocalJob(k, theta, theta, 0.0, seed=5)
    got = at_precision(SGD_SOLVER, "bf16").train(task, scenario.client, job)

    data = task.clients[k]
    params = {n: p.detach().clone() for n, p in task.unflatten(theta).items()}
    for idx in batch_schedule(len(data), scenario.client, torch.Generator().manual_seed(job.seed)):
        leaves = {n: p.requires_grad_() for n, p in params.items()}
        with torch.autocast("cpu", dtype=torch.bfloat16):
            outputs = torch.func.functional_call(task.model, leaves, (data.x[idx],))
            assert outputs.dtype == torch.bfloat16
            loss = task.loss_fn(outputs, data.y[idx]).mean()
        grads = torch.autograd.grad(loss, list(leaves.values()))
        params = {n: (p - lr * g).detach() for (n, p), g in zip(leaves.items(), grads)}
    want = torch.cat([p.reshape(-1) for p in params.values()])
    assert got.dtype == torch.float32
    torch.testing.assert_close(got, want, rtol=0, atol=1e-6)
    assert not torch.equal(got, SGD_SOLVER.train(task, scenario.client, job))


def test_bf16_batched_mlp_training_is_bf16_job_by_job_to_round_off():
    """Batched, an MLP at bf16 takes ``vmap`` (the fused path, written in float32 buffers, gives
    way): its models equal bf16 job by job's to 2e-5 while bf16 and fp32 differ by up to 2.4e-4."""
    scenario = make_scenario(MLP)
    task = compose(scenario).task
    theta = task.initial_theta
    jobs = [LocalJob(k, theta, theta, 0.0, seed=10 + k) for k in range(4)]
    bf16 = at_precision(SGD_SOLVER, "bf16")
    batched, one_by_one = bf16.train_batched(task, scenario.client, jobs), [bf16.train(task, scenario.client, j) for j in jobs]
    fp32 = [sgd_train(task, scenario.client, j) for j in jobs]
    for b, o in zip(batched, one_by_one):
        assert b.dtype == torch.float32
        torch.testing.assert_close(b, o, rtol=0, atol=2e-5)
    assert max(float((o - f).abs().max()) for o, f in zip(one_by_one, fp32)) > 1e-4


def test_under_vmap_torch_computes_convolutions_in_float32_even_at_bf16():
    """What docs/guide.md §7 states of batched CNNs at bf16: torch's batching rule for a
    convolution runs beneath autocast, so under ``vmap`` a convolution returns float32 where a
    linear layer returns bfloat16; job by job both return bfloat16."""
    w, x = torch.randn(3, 4, 1, 5), torch.randn(3, 2, 1, 12)
    conv = lambda w, x: torch.nn.functional.conv1d(x, w, padding=2)  # noqa: E731
    linear = lambda w, x: torch.nn.functional.linear(x, w.reshape(4, 5))  # noqa: E731
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert conv(w[0], x[0]).dtype == linear(w[0], x[0, ..., :5]).dtype == torch.bfloat16
        assert torch.func.vmap(conv)(w, x).dtype == torch.float32
        assert torch.func.vmap(linear)(w, x[..., :5]).dtype == torch.bfloat16


def test_bf16_runs_end_to_end_on_a_cnn_with_the_fp32_schedule(tmp_path):
    """The MNIST-1D CNN at bf16: the same updates.csv as fp32 (no decision reads the model's
    numbers here), a float32 model.pt close to fp32's but not equal, and the summary says bf16."""
    runs = {}
    for precision in ("fp32", "bf16"):
        run_to_dir_blocking(make_scenario({**MNIST1D_CNN, "run.precision": precision}), tmp_path / precision)
        runs[precision] = _files(tmp_path / precision)
    (csv32, model32, _), (csv16, model16, summary16) = runs["fp32"], runs["bf16"]
    assert csv16 == csv32
    assert all(v.dtype == torch.float32 for v in model16.values()) and not _same_model(model16, model32)
    assert max(float((model16[k] - model32[k]).abs().max()) for k in model32) < 0.05
    assert summary16["precision"] == "bf16" and summary16["status"] == "completed"


@pytest.mark.parametrize("executor", ["threads", pytest.param("processes", marks=pytest.mark.slow)])
def test_bf16_reaches_every_executor_through_its_context(executor, tmp_path):
    """The executor's context carries the solver at bf16: threads (autocast is per thread) and
    spawned workers (which receive it pickled) write the inline bf16 run's files."""
    base = {**MLP, "run.precision": "bf16", "run.batched": False}
    run_to_dir_blocking(make_scenario(base), tmp_path / "inline")
    run_to_dir_blocking(make_scenario({**base, "run.executor": executor, "run.workers": 2}), tmp_path / executor)
    (csv_a, model_a, _), (csv_b, model_b, _) = _files(tmp_path / "inline"), _files(tmp_path / executor)
    assert csv_a == csv_b and _same_model(model_a, model_b)


def test_a_bf16_run_resumes_exactly_at_bf16(tmp_path):
    """The scenario saved with the run carries run.precision: a resumed bf16 run continues at bf16
    and ends with the uninterrupted run's files (and the summary says bf16)."""
    _, cut = whole_and_resumed(make_scenario({**MLP, "run.precision": "bf16", "run.checkpoint_every": 2}), tmp_path)
    assert _files(cut)[2]["precision"] == "bf16"


def test_the_bf16_solver_is_picklable_and_keeps_what_it_wraps():
    solver = pickle.loads(pickle.dumps(at_precision(SGD_SOLVER, "bf16")))
    assert isinstance(solver, AutocastSolver) and solver.dtype == torch.bfloat16
    assert type(solver.solver) is type(SGD_SOLVER)
    assert isinstance(compose(make_scenario({**MLP, "run.precision": "bf16"})).make_executor().solver, AutocastSolver)


# -- refusals ----------------------------------------------------------------------------------
def test_bf16_is_refused_for_a_float64_task_naming_the_field_and_what_to_set():
    problems = precision_problems("bf16", task="quadratic", dtype=torch.float64, device="cpu", bf16=True)
    assert problems == ["run.precision = 'bf16': task 'quadratic' computes in float64; bf16 autocast applies to "
                        "float32 tasks only (set run.precision = \"fp32\")"]
    with pytest.raises(ScenarioError, match=r"run\.precision = 'bf16': task 'quadratic' computes in float64"):
        compose(make_scenario({"run.precision": "bf16"}))


def test_bf16_is_refused_on_a_device_without_bfloat16():
    (problem,) = precision_problems("bf16", task="cifar10", dtype=torch.float32, device="cuda:0", bf16=False)
    assert problem.startswith("run.precision = 'bf16': device cuda:0 does not support bfloat16")
    assert 'set run.precision = "fp32"' in problem


def test_fp32_is_never_refused_and_the_cpu_supports_bf16():
    assert precision_problems("fp32", task="quadratic", dtype=torch.float64, device="mps", bf16=False) == []
    assert precision_problems("bf16", task="cifar10", dtype=torch.float32, device="cpu", bf16=True) == []
    assert bf16_supported(torch.device("cpu")) and not bf16_supported(torch.device("meta"))


def test_an_unknown_precision_is_refused_by_the_scenario_naming_the_allowed_values():
    for bad in ("fp16", "bfloat16", 16, True):
        with pytest.raises(ScenarioError, match=r'run\.precision = .*must be "fp32" or "bf16"'):
            make_scenario({"run.precision": bad})


def test_the_cli_refuses_bf16_for_a_float64_task_with_exit_2_and_no_traceback(tmp_path, capsys):
    import tomli_w

    scenario = tmp_path / "tiny.toml"
    scenario.write_text(tomli_w.dumps(make_raw()))
    code = main(["run", str(scenario), "--set", 'run.precision="bf16"', "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert "run.precision = 'bf16': task 'quadratic' computes in float64" in err and "Traceback" not in err
    assert not (tmp_path / "out" / "updates.csv").exists()
