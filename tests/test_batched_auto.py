"""``run.batched = "auto"`` (the default): on the CPU, batched training only where the executor, the
solver and the task allow it with the same bits as job by job; on an accelerator, where they batch
and the task declares that it batches there (``Task.batched_on_accelerator``); decided once from
their declared traits and the device (asyncfl/config/batching.py, docs/guide.md "Batched
training")."""

from __future__ import annotations

import dataclasses
import json
from typing import Literal

import pytest
import torch

from asyncfl.components.core import Component
from asyncfl.compose import batched_choice, compose
from asyncfl.compute import device as devices
from asyncfl.components.registry import register, unregister
from asyncfl.components.traits import ExecutorTraits, SolverTraits, TaskTraits
from asyncfl.config.batching import choose_batched
from asyncfl.config.tasks import QuadraticTask
from asyncfl.errors import ScenarioError
from asyncfl.run.runner import run_to_dir_blocking
from asyncfl.tasks.quadratic import build_quadratic
from tests.conftest import make_scenario

BATCHES, LOOPS = ExecutorTraits(batched=True), ExecutorTraits(batched=False)
SGD, ADAM = SolverTraits(batched=True), SolverTraits(batched=False)
EXACT, ROUNDED = TaskTraits(batched_exact=True), TaskTraits()


@pytest.mark.parametrize("executor, solver, task, batched", [
    (BATCHES, SGD, EXACT, True),  # every part batches, with the same bits: batched
    (LOOPS, SGD, EXACT, False),  # the threads executor trains one job at a time
    (BATCHES, ADAM, EXACT, False),  # Adam has no batched form
    (BATCHES, SGD, ROUNDED, False),  # batched equals job by job to round-off only: not the same files
])
def test_auto_batches_only_where_every_part_batches_with_the_same_bits(executor, solver, task, batched):
    choice = choose_batched("auto", executor, solver, task)
    assert choice.batched is batched and choice.why.startswith("auto: ")


@pytest.mark.parametrize("device, executor, solver, on_accelerator, batched, why", [
    ("cuda:0", BATCHES, SGD, True, True, "auto: on cuda:0, executor, solver and task batch"),  # bit-identity is not asked
    ("mps", BATCHES, SGD, False, False, "auto: on mps, the task does not batch on an accelerator"),  # the LSTM
    ("cuda:1", LOOPS, SGD, True, False, "auto: the executor trains one job at a time"),
    ("cuda:0", BATCHES, ADAM, True, False, "auto: the solver trains one job at a time"),
    ("cpu", BATCHES, SGD, True, False, "auto: the task's batched training equals job by job only to round-off"),
])
def test_auto_on_an_accelerator_follows_the_tasks_batched_on_accelerator_and_on_the_cpu_asks_exactness(
        device, executor, solver, on_accelerator, batched, why):
    """On an accelerator job by job is no more bit-identical to the CPU than batched is, so
    ``"auto"`` batches where the executor and the solver can and the task declares
    ``batched_on_accelerator``, even without ``batched_exact``; on the CPU nothing changes."""
    choice = choose_batched("auto", executor, solver, ROUNDED, device=device, batched_on_accelerator=on_accelerator)
    assert choice.batched is batched and choice.why.startswith(why)


def test_an_explicit_request_is_taken_as_given_on_any_device():
    assert choose_batched(False, BATCHES, SGD, ROUNDED, device="cuda:0").batched is False
    assert choose_batched(True, BATCHES, SGD, ROUNDED, device="mps", batched_on_accelerator=False).batched is True


def test_an_explicit_request_is_taken_as_given():
    assert choose_batched(True, BATCHES, SGD, ROUNDED).batched is True
    assert choose_batched(False, BATCHES, SGD, EXACT).batched is False


def test_auto_is_the_default_and_needs_no_batching_executor_while_true_still_does():
    assert make_scenario().run.batched == "auto"
    make_scenario({"run.executor": "threads", "client.solver": "adam"})  # valid: auto falls back
    with pytest.raises(ScenarioError, match="run.batched = true, run.executor = 'threads'"):
        make_scenario({"run.executor": "threads", "run.batched": True})
    with pytest.raises(ScenarioError, match=r'run.batched = \'yes\': must be true, false or "auto"'):
        make_scenario({"run.batched": "yes"})


def _files(run) -> tuple[bytes, dict[str, torch.Tensor], dict]:
    return ((run / "updates.csv").read_bytes(), torch.load(run / "model.pt", weights_only=True),
            json.loads((run / "summary.json").read_text()))


def _same_model(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_builtin_tasks_batch_to_round_off_only_so_auto_runs_them_job_by_job(tmp_path):
    """The quadratic task batched gives the same updates.csv but another model.pt (the vmapped
    products and the masked mean sum in another order): so it does not declare batched_exact,
    and the default run is the job-by-job run, file for file."""
    runs = {}
    for batched in (False, True, "auto"):
        run_to_dir_blocking(make_scenario({"run.batched": batched}), tmp_path / str(batched))
        runs[batched] = _files(tmp_path / str(batched))
    (loop_csv, loop_model, _), (batch_csv, batch_model, batch_summary), (auto_csv, auto_model, auto_summary) = (
        runs[False], runs[True], runs["auto"])
    assert batch_csv == loop_csv and not _same_model(batch_model, loop_model)
    assert batch_summary["batched"] is True
    assert auto_csv == loop_csv and _same_model(auto_model, loop_model)
    assert auto_summary["batched"] is False and "round-off" in auto_summary["batched_why"]


class LoopQuadratic(QuadraticTask):
    name: Literal["loop-quadratic"] = "loop-quadratic"  # type: ignore[assignment]


def _build_loop_quadratic(cfg, ctx):
    task = build_quadratic(cfg, ctx)
    task.batched_training = False  # train_batched trains it job by job: the same bits
    return task


def test_auto_batches_a_task_that_declares_its_batched_training_exact(tmp_path):
    """A user's task declaring ``TaskTraits(batched_exact=True)`` runs batched under auto, and its
    files equal those of run.batched = false."""
    register(Component("task", "loop-quadratic", _build_loop_quadratic, LoopQuadratic, TaskTraits(batched_exact=True)))
    try:
        task = {"name": "loop-quadratic", "problem": "random", "dim": 5, "samples_per_client": 20}
        auto, loop = tmp_path / "auto", tmp_path / "loop"
        run_to_dir_blocking(make_scenario({"task": task}), auto)
        run_to_dir_blocking(make_scenario({"task": task, "run.batched": False}), loop)
    finally:
        unregister("task", "loop-quadratic")
    (auto_csv, auto_model, auto_summary), (loop_csv, loop_model, _) = _files(auto), _files(loop)
    assert auto_summary["batched"] is True and auto_summary["batched_why"].startswith("auto: executor, solver and task")
    assert auto_csv == loop_csv and _same_model(auto_model, loop_model)


def test_the_composition_root_decides_auto_on_the_device_the_task_is_placed_on():
    """``asyncfl.compose.batched_choice`` reads the device from the placed task (torch's ``meta``
    device stands in for an accelerator) and the task's own ``batched_on_accelerator``."""
    scenario = make_scenario()
    task = compose(scenario).task
    assert batched_choice(scenario, task) == batched_choice(scenario) and not batched_choice(scenario, task).batched
    placed = devices.place_task(task, torch.device("meta"))
    assert batched_choice(scenario, placed).batched and "on meta" in batched_choice(scenario, placed).why
    assert not batched_choice(scenario, dataclasses.replace(placed, batched_on_accelerator=False)).batched
