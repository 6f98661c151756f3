"""Building where a run's local training happens, by name (docs/architecture.md §4):
``run.executor`` in :data:`~asyncfl.config.registries.EXECUTORS`.

Registries are resolved here, in the code that composes a run, never in the module that
implements the executors (``asyncfl.compute.executors``), which a registry points to.
"""

from __future__ import annotations

from asyncfl.compute.executors import Executor, TaskRecipe
from asyncfl.config.registries import EXECUTORS, TASKS
from asyncfl.config.scenario import ClientConfig, RunConfig, Scenario
from asyncfl.errors import ScenarioError
from asyncfl.tasks.base import Task


#: executors that train the jobs of one model version as one batched group
BATCHED = ("inline", "processes", "ray")


def task_recipe(scenario: Scenario) -> TaskRecipe:
    """How a worker rebuilds ``scenario``'s task: its registered builder and ``[task]`` section."""
    return TaskRecipe(TASKS.load(scenario.task.name), scenario.task, scenario.population.clients, scenario.seed)


def make_executor(task: Task, client: ClientConfig, run: RunConfig, scenario: Scenario | None = None) -> Executor:
    """The executor named by ``run.executor``. ``scenario`` (when the task was built from it)
    lets process and Ray workers rebuild the task (:func:`task_recipe`) instead of receiving
    its data."""
    if run.executor not in EXECUTORS:
        raise ScenarioError([EXECUTORS.unknown(run.executor)])
    if run.batched and run.executor not in BATCHED:
        raise ScenarioError([
            f"run.batched = true, run.executor = {run.executor!r}: batched training runs with the executors "
            f"{', '.join(BATCHED)} (set one of them, or run.batched = false)"
        ])
    recipe = task_recipe(scenario) if scenario is not None else None
    return EXECUTORS.load(run.executor)(task, client, run, recipe)
