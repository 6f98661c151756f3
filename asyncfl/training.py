"""Local training: the client's solver (DESIGN.md §6 "inexact local solver").

A job minimises ``f_k(θ) + (μ/2)‖θ − centre‖²`` starting from ``start``:

* ``sgd``: gradient steps ``θ ← θ − lr ∇[f_k(θ; B) + (μ/2)‖θ − centre‖²]`` on mini-batches
  ``B`` (``batch_size``; absent = full batch), for ``local_steps`` steps or ``epochs`` passes
  over a fresh permutation each pass;
* ``exact`` (quadratic tasks): the closed-form ``prox_{f_k,μ}(centre)`` (``μ = 0``: the client's
  own least-squares solution).

All randomness comes from the job's own ``seed``, so a job's result does not depend on the
executor that runs it (DESIGN §2 principle 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from asyncfl.scenario import ClientConfig
from asyncfl.tasks.base import Task


@dataclass(frozen=True)
class LocalJob:
    """One local training job. ``start`` is the initial iterate; ``centre`` the prox centre
    (used when ``mu > 0`` or by the exact solver)."""

    client: int
    start: torch.Tensor
    centre: torch.Tensor
    mu: float
    seed: int


def batch_schedule(n: int, cfg: ClientConfig, generator: torch.Generator) -> list[torch.Tensor | None]:
    """Index sets of the local steps. ``None`` stands for the full batch."""
    size = cfg.batch_size if cfg.batch_size is not None and cfg.batch_size < n else None
    if cfg.epochs is not None:
        if size is None:
            return [None] * cfg.epochs
        batches = []
        for _ in range(cfg.epochs):
            batches.extend(torch.randperm(n, generator=generator).split(size))
        return batches
    steps = cfg.local_steps or 1
    if size is None:
        return [None] * steps
    batches, perm = [], torch.empty(0, dtype=torch.long)
    while len(batches) < steps:
        if perm.numel() < size:  # new pass over the data (the remainder starts the next one)
            perm = torch.cat([perm, torch.randperm(n, generator=generator)])
        batches.append(perm[:size])
        perm = perm[size:]
    return batches


def local_steps_count(n: int, cfg: ClientConfig) -> int:
    """Number of gradient steps a job takes (used by batched training to pad)."""
    if cfg.epochs is not None:
        size = cfg.batch_size if cfg.batch_size is not None and cfg.batch_size < n else n
        return cfg.epochs * math.ceil(n / size)
    return cfg.local_steps or 1


def local_train(task: Task, cfg: ClientConfig, job: LocalJob) -> torch.Tensor:
    """Run one job and return the client's final local model ``θ_k^local``."""
    if cfg.solver == "exact":
        if task.quadratic is None:
            raise ValueError("client.solver = 'exact' needs a quadratic task")
        return task.quadratic.prox(job.client, job.centre, job.mu).to(task.dtype)
    data = task.clients[job.client]
    generator = torch.Generator().manual_seed(job.seed)
    k, mu, centre = job.client, job.mu, job.centre

    def objective(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        value = task.batch_objective(theta, k, x, y)
        if mu > 0:
            value = value + 0.5 * mu * (theta - centre).square().sum()
        return value

    grad = torch.func.grad(objective)
    theta = job.start.detach().clone()
    for idx in batch_schedule(len(data), cfg, generator):
        x, y = (data.x, data.y) if idx is None else (data.x[idx], data.y[idx])
        theta = theta - cfg.lr * grad(theta, x, y)
    return theta
