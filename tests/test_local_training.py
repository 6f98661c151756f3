"""Local training as components: solvers, the update hook, modes, buffers and a task's own metrics
(docs/baselines.md §2, docs/extending.md §7, docs/tasks.md §1).

* the ``sgd`` solver with momentum, Nesterov and weight decay equals ``torch.optim.SGD``, and
  ``adam`` equals ``torch.optim.Adam``, step for step on the same mini-batches;
* the update hooks ``clip-norm`` and ``top-k`` transform each upload as their formulas say, and
  ``none`` leaves a run's files exactly as before hooks existed;
* evaluation runs the model in eval mode (dropout off); a model with running statistics is refused;
* every metric a task's evaluation returns reaches ``metrics.csv``, ``load_run`` and TensorBoard.
"""

from __future__ import annotations

import asyncio
import math

import pytest
import torch

from asyncfl.tasks.base import EVAL_CHUNK

import asyncfl
from asyncfl.compute.hooks import ClipNorm, TopK, hook_seed
from asyncfl.compose import local_train
from asyncfl.compute.training import LocalJob, batch_schedule
from asyncfl.errors import ScenarioError
from asyncfl.run.runner import run_to_dir_blocking
from asyncfl.compose import build_simulation
from asyncfl.tasks.base import ClientData, Task

from conftest import make_scenario


def _reference(task: Task, cfg, job: LocalJob, optimizer) -> torch.Tensor:
    """``job`` trained by a ``torch.optim`` optimizer on the same mini-batches (batch_schedule with
    the job's own generator) and the same objective."""
    data = task.clients[job.client]
    theta = torch.nn.Parameter(job.start.detach().clone())
    opt = optimizer([theta])
    for idx in batch_schedule(len(data), cfg, torch.Generator().manual_seed(job.seed)):
        x, y = (data.x, data.y) if idx is None else (data.x[idx], data.y[idx])
        opt.zero_grad()
        task.batch_objective(theta, job.client, x, y).backward()
        opt.step()
    return theta.detach()


@pytest.mark.parametrize("momentum,nesterov,decay", [(0.0, False, 0.0), (0.9, False, 0.0), (0.9, True, 0.01), (0.5, False, 0.1)])
def test_local_sgd_equals_torch_optim_sgd(momentum: float, nesterov: bool, decay: float) -> None:
    scenario = make_scenario({"client.momentum": momentum, "client.nesterov": nesterov, "client.weight_decay": decay,
                              "client.local_steps": 7})
    task = build_simulation(scenario).task
    job = LocalJob(client=2, start=task.initial_theta + 0.3, centre=task.initial_theta, mu=0.0, seed=11)
    got = local_train(task, scenario.client, job)
    want = _reference(task, scenario.client, job, lambda p: torch.optim.SGD(
        p, lr=scenario.client.lr, momentum=momentum, nesterov=nesterov, weight_decay=decay))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_local_adam_equals_torch_optim_adam() -> None:
    scenario = make_scenario({"client.solver": "adam", "client.adam_beta1": 0.8, "client.adam_beta2": 0.99,
                              "client.eps": 1e-6, "client.weight_decay": 0.05, "client.local_steps": 9})
    task = build_simulation(scenario).task
    job = LocalJob(client=5, start=task.initial_theta.clone(), centre=task.initial_theta, mu=0.0, seed=4)
    got = local_train(task, scenario.client, job)
    want = _reference(task, scenario.client, job, lambda p: torch.optim.Adam(
        p, lr=scenario.client.lr, betas=(0.8, 0.99), eps=1e-6, weight_decay=0.05))
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)


def test_adam_does_not_batch_and_says_so() -> None:
    with pytest.raises(ScenarioError, match="run.batched = true, client.solver = 'adam': this solver trains one job at a time"):
        make_scenario({"client.solver": "adam", "run.batched": True})


def test_the_exact_solver_needs_a_closed_form_task() -> None:
    with pytest.raises(ScenarioError, match="client.solver = 'exact': needs a task with a closed-form prox \\(quadratic\\)"):
        make_scenario({"client.solver": "exact", "task": {"name": "synthetic"}})


# -- update hooks --------------------------------------------------------------------------------------
JOB = LocalJob(client=0, start=torch.zeros(4), centre=torch.zeros(4), mu=0.0, seed=1)


def test_clip_norm_scales_an_upload_above_the_bound_onto_it() -> None:
    m = torch.tensor([3.0, 4.0, 0.0, 0.0])  # ‖m‖ = 5
    torch.testing.assert_close(ClipNorm(2.5).transform(JOB, m), torch.tensor([1.5, 2.0, 0.0, 0.0]))
    assert ClipNorm(5.0).transform(JOB, m) is m  # at the bound: untouched


def test_top_k_keeps_the_largest_magnitudes() -> None:
    m = torch.tensor([0.5, -3.0, 1.0, 2.0, -0.1])
    # k = ⌈0.4 · 5⌉ = 2: −3 and 2 stay
    torch.testing.assert_close(TopK(0.4).transform(JOB, m), torch.tensor([0.0, -3.0, 0.0, 2.0, 0.0]))
    assert torch.equal(TopK(1.0).transform(JOB, m), m)


def test_a_hook_changes_what_the_server_receives_in_a_run(tmp_path) -> None:
    """With every upload clipped to 1e-3 the aggregate has norm ≤ 1e-3 (a convex combination), the
    heavy ball's m_t ≤ Σ_k β^k · 1e-3 < 1e-2 (β = 0.9), so T = 12 steps of η = 0.5 move θ by less
    than 12 · 0.5 · 1e-2 = 0.06; the event order (updates.csv) does not depend on the uploads."""
    none = build_simulation(make_scenario())
    asyncio.run(none.run())
    clip = build_simulation(make_scenario({"client.update_hook": "clip-norm", "client.update_clip": 1e-3}))
    asyncio.run(clip.run())
    moved = float(torch.linalg.vector_norm(clip.theta - clip.task.initial_theta))
    assert 0 < moved < 0.06 < float(torch.linalg.vector_norm(none.theta - none.task.initial_theta))
    run_to_dir_blocking(make_scenario(), tmp_path / "none")
    run_to_dir_blocking(make_scenario({"client.update_hook": "clip-norm", "client.update_clip": 1e-3}), tmp_path / "clip")
    assert (tmp_path / "none" / "updates.csv").read_bytes() == (tmp_path / "clip" / "updates.csv").read_bytes()


def test_hook_seeds_are_apart_from_the_jobs_own() -> None:
    assert hook_seed(JOB) != JOB.seed and 0 <= hook_seed(JOB) < 2**63


# -- modes, buffers, metrics ---------------------------------------------------------------------------
def _task(model: torch.nn.Module, cls: type = Task, **kwargs) -> Task:
    g = torch.Generator().manual_seed(0)
    data = ClientData(torch.randn(64, 6, generator=g), torch.randint(0, 3, (64,), generator=g))
    return cls("toy", model, [data, data], data, torch.nn.CrossEntropyLoss(reduction="none"), True, **kwargs)


def test_evaluation_runs_in_eval_mode_and_restores_the_mode() -> None:
    torch.manual_seed(0)
    task = _task(torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 3)))
    assert task.model.training
    first, second = task.evaluate(task.initial_theta), task.evaluate(task.initial_theta)
    assert first == second  # dropout off: the same model scores the same
    assert task.model.training
    task.model.eval()
    assert task.evaluate(task.initial_theta) == first and not task.model.training


def test_a_model_with_running_statistics_is_refused_and_batch_statistics_are_allowed() -> None:
    with pytest.raises(ScenarioError, match=r"its model's 1 \(BatchNorm1d\) keeps running statistics"):
        _task(torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.BatchNorm1d(4)))
    task = _task(torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.BatchNorm1d(4, track_running_stats=False)))
    assert math.isfinite(task.evaluate(task.initial_theta)["loss"])
    # its rows share the batch's statistics: evaluation is never split into pieces of rows
    assert task._forward_rows(task.initial_theta, task.test.x) == EVAL_CHUNK


class Top2Task(Task):
    """A task whose evaluation also reports top-2 accuracy."""

    def evaluate(self, theta, data=None):
        data = self.test if data is None else data
        out = super().evaluate(theta, data)
        with self.evaluating(), torch.no_grad():
            top2 = self.outputs(theta, data.x).topk(2, dim=-1).indices
        out["top2"] = float((top2 == data.y[:, None]).any(dim=-1).float().mean())
        return out


def test_a_tasks_own_metrics_reach_metrics_csv_load_run_and_tensorboard(tmp_path) -> None:
    from asyncfl.components.core import Component
    from asyncfl.components.registry import register, unregister
    from asyncfl.config.tasks import TaskSection
    from typing import Literal

    class Top2Config(TaskSection):
        name: Literal["top2-toy"] = "top2-toy"

    def build(cfg, ctx):
        torch.manual_seed(ctx.seed)
        return _task(torch.nn.Linear(6, 3), Top2Task, metric_names=("top2",))

    register(Component("task", "top2-toy", build, Top2Config))
    try:
        scenario = make_scenario({"task": {"name": "top2-toy"}, "population.clients": 2, "server.concurrency": 2,
                                  "server.buffer": 1, "run.tensorboard": True})
        run_to_dir_blocking(scenario, tmp_path / "run")
    finally:
        unregister("task", "top2-toy")
    header = (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert header[-1] == "top2"
    run = asyncfl.load_run(tmp_path / "run")
    assert run.metrics["top2"].dtype == "float64" and run.metrics["top2"].between(0, 1).all()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(tmp_path / "run" / "tensorboard"))
    events.Reload()
    assert "eval/top2" in events.Tags()["scalars"]
