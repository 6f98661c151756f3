"""Building where and how a run's local training happens (docs/architecture.md §4): the
executor ``run.executor`` names, with the local solver ``client.solver`` names.

Registries are resolved here, in the code that composes a run, never in the module that
implements the executors (``asyncfl.compute.executors``), which a registry points to.
"""

from __future__ import annotations

import torch

from asyncfl.compute.executors import Executor, TaskRecipe
from asyncfl.compute.solvers import LocalSolver
from asyncfl.compute.training import LocalJob
from asyncfl.config.registries import EXECUTORS, SOLVERS, TASKS
from asyncfl.config.scenario import ClientConfig, RunConfig, Scenario
from asyncfl.errors import ScenarioError
from asyncfl.tasks.base import Task


def task_recipe(scenario: Scenario) -> TaskRecipe:
    """How a worker rebuilds ``scenario``'s task: its registered builder and ``[task]`` section."""
    return TaskRecipe(TASKS.load(scenario.task.name), scenario.task, scenario.population.clients, scenario.seed)


def make_executor(task: Task, client: ClientConfig, run: RunConfig, scenario: Scenario | None = None) -> Executor:
    """The executor named by ``run.executor``, training with the solver ``client.solver`` names.
    ``scenario`` (when the task was built from it) lets process and Ray workers rebuild the task
    (:func:`task_recipe`) instead of receiving its data."""
    if run.executor not in EXECUTORS:
        raise ScenarioError([EXECUTORS.unknown(run.executor)])
    if run.batched and not EXECUTORS.get(run.executor).traits.batched:
        ok = [e.name for e in EXECUTORS if e.traits.batched]
        raise ScenarioError([
            f"run.batched = true, run.executor = {run.executor!r}: batched training runs with the executors "
            f"{', '.join(ok)} (set one of them, or run.batched = false)"
        ])
    recipe = task_recipe(scenario) if scenario is not None else None
    return EXECUTORS.load(run.executor)(task, client, solver_of(client), run, recipe)


def solver_of(client: ClientConfig) -> LocalSolver:
    """The local solver the ``[client]`` section names."""
    if client.solver not in SOLVERS:
        raise ScenarioError([SOLVERS.unknown(client.solver)])
    return SOLVERS.load(client.solver)


def local_train(task: Task, client: ClientConfig, job: LocalJob) -> torch.Tensor:
    """One job trained by the solver ``client.solver`` names, here (docs/tasks.md §8)."""
    return solver_of(client).train(task, client, job)


def train_batched(task: Task, client: ClientConfig, jobs: list[LocalJob]) -> list[torch.Tensor]:
    """The jobs of one model version trained together by the named solver."""
    return solver_of(client).train_batched(task, client, jobs)
