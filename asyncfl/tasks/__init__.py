"""Tasks that ship (DESIGN.md §7): ``build_task(cfg, num_clients, seed)`` picks a builder by
``cfg.name`` from :data:`BUILDERS`. Same seed ⇒ bit-identical data and ``initial_theta``."""

from __future__ import annotations

from typing import Callable

from asyncfl.errors import ScenarioError
from asyncfl.config.scenario import TaskConfig
from asyncfl.tasks.base import ClientData, QuadraticForm, Task
from asyncfl.tasks.digits import build_digits
from asyncfl.tasks.gaussian_mlp import build_gaussian_mlp
from asyncfl.tasks.mnist1d import build_mnist1d
from asyncfl.tasks.quadratic import build_quadratic
from asyncfl.tasks.synthetic import build_synthetic

BUILDERS: dict[str, Callable[..., Task]] = {
    "quadratic": build_quadratic,
    "synthetic": build_synthetic,
    "digits": build_digits,
    "gaussian-mlp": build_gaussian_mlp,
    "mnist1d": build_mnist1d,
}


def build_task(cfg: TaskConfig, num_clients: int, seed: int) -> Task:
    """Build the task described by ``cfg`` for ``num_clients`` clients, seeded by ``seed``."""
    builder = BUILDERS.get(cfg.name)
    if builder is None:
        raise ScenarioError([f"task.name = {cfg.name!r}: must be one of {', '.join(sorted(BUILDERS))}"])
    return builder(cfg, num_clients, seed)


__all__ = ["BUILDERS", "ClientData", "QuadraticForm", "Task", "build_task"]
