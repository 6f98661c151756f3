"""Tasks that ship (docs/tasks.md): ``build_task(cfg, num_clients, seed)`` builds the task named
by ``cfg.name`` with the builder ``build(cfg, ctx)`` registered under that name in
:data:`asyncfl.config.registries.TASKS` (imported on first use). Same seed ⇒ bit-identical data
and ``initial_theta``."""

from __future__ import annotations

from asyncfl.components.contracts import BuildContext
from asyncfl.config.registries import TASKS
from asyncfl.config.tasks import TaskConfig
from asyncfl.errors import ScenarioError
from asyncfl.tasks.base import ClientData, QuadraticForm, Task


def build_task(cfg: TaskConfig, num_clients: int, seed: int) -> Task:
    """Build the task described by ``cfg`` for ``num_clients`` clients, seeded by ``seed``."""
    name = getattr(cfg, "name", None)
    if name not in TASKS:
        raise ScenarioError([TASKS.unknown(name)])
    return TASKS.make(name, cfg, BuildContext(clients=num_clients, seed=seed))


__all__ = ["ClientData", "QuadraticForm", "Task", "build_task"]
