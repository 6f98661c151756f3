"""Local solvers: how a client turns its job into a local model (docs/tasks.md §8,
docs/extending.md §7).

A solver is a component of kind ``solver`` (``client.solver``) whose builder is a
:class:`LocalSolver`: ``train(task, cfg, job) -> θ_local`` for one job, and optionally
``train_batched(task, cfg, jobs)`` for the jobs of one model version at once (the default runs
them one by one). ``cfg`` is the ``[client]`` section, with the solver's own keys. A job carries
its own seed, so a solver that draws from ``torch.Generator().manual_seed(job.seed)`` gives the
same result on any executor (docs/architecture.md §2 principle 2).
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from asyncfl.components.contracts import returns
from asyncfl.compute.linearised import linearised_train
from asyncfl.compute.training import LocalJob, adam_train, sgd_train, sgd_train_batched
from asyncfl.tasks.base import Task


class LocalSolver:
    """``train(task, cfg, job) -> θ_local``; ``train_batched`` has a default (one job at a time)
    that a solver overrides when it can train a group together."""

    def train(self, task: Task, cfg: Any, job: LocalJob) -> torch.Tensor:
        raise NotImplementedError

    def train_batched(self, task: Task, cfg: Any, jobs: Sequence[LocalJob]) -> list[torch.Tensor]:
        return [self.train(task, cfg, job) for job in jobs]


class SGDSolver(LocalSolver):
    """Mini-batch SGD (:func:`asyncfl.compute.training.sgd_train`); batched with
    ``torch.func``/fused MLP passes when it is plain SGD (no momentum, no weight decay), else job by
    job."""

    def train(self, task: Task, cfg: Any, job: LocalJob) -> torch.Tensor:
        return sgd_train(task, cfg, job)

    def train_batched(self, task: Task, cfg: Any, jobs: Sequence[LocalJob]) -> list[torch.Tensor]:
        if getattr(cfg, "momentum", 0.0) or getattr(cfg, "weight_decay", 0.0):
            return super().train_batched(task, cfg, jobs)
        return sgd_train_batched(task, cfg, list(jobs))


class AdamSolver(LocalSolver):
    """Mini-batch Adam (:func:`asyncfl.compute.training.adam_train`)."""

    def train(self, task: Task, cfg: Any, job: LocalJob) -> torch.Tensor:
        return adam_train(task, cfg, job)


class ExactSolver(LocalSolver):
    """The closed-form ``prox_{f_k,μ}(centre) = (H_k + μI)⁻¹(g_k + μ·centre)`` of a quadratic
    task (``μ = 0``: the client's own least-squares solution; docs/baselines.md §2)."""

    def train(self, task: Task, cfg: Any, job: LocalJob) -> torch.Tensor:
        if task.quadratic is None:
            raise ValueError(f"client.solver = {cfg.solver!r} needs a task with a closed-form prox")
        return task.quadratic.prox(job.client, job.centre, job.mu).to(task.dtype)


SGD_SOLVER = SGDSolver()
ADAM_SOLVER = AdamSolver()
EXACT_SOLVER = ExactSolver()


class LinearisedSolver(LocalSolver):
    """The linearised closed-form local step with a plain or variance-reduced gradient oracle
    (:func:`asyncfl.compute.linearised.linearised_train`; docs/baselines.md §5.1)."""

    def train(self, task: Task, cfg: Any, job: LocalJob) -> torch.Tensor:
        return linearised_train(task, cfg, job)


LINEARISED_SOLVER = LinearisedSolver()

# the solver components' builders (asyncfl.components.builtin): build(cfg, ctx) -> LocalSolver
build_sgd = returns(SGD_SOLVER)
build_adam = returns(ADAM_SOLVER)
build_exact = returns(EXACT_SOLVER)
build_linearised = returns(LINEARISED_SOLVER)
