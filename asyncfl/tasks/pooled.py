"""Pooled (centralised) training of a task's model: the reference a federated run is measured
against (docs/tasks.md §12). All clients' training data in one set, no federation, Adam."""

from __future__ import annotations

from typing import NamedTuple

import torch

from asyncfl.tasks.base import Task


class PooledResult(NamedTuple):
    """Test accuracy of the pooled model at the end (``final``) and the best at an evaluation."""

    final: float
    best: float


def train_pooled(task: Task, steps: int, lr: float = 1e-2, batch: int = 100, eval_every: int = 250,
                 shuffle_seed: int | None = None) -> PooledResult:
    """Adam (learning rate ``lr``) on the pooled training data from ``task.initial_theta``,
    ``steps`` mini-batches of ``batch``: taken in order (the MNIST-1D reference protocol), or
    from a fresh permutation every epoch drawn with ``shuffle_seed`` (needed when the pooled
    data come client by client, as they do for a non-IID split). Evaluated every
    ``eval_every`` steps and at the end with ``task.evaluate``."""
    data = task.pooled_training_data()
    theta = task.initial_theta.detach().clone().requires_grad_(True)
    opt = torch.optim.Adam([theta], lr=lr)
    n = len(data)
    gen = torch.Generator().manual_seed(shuffle_seed) if shuffle_seed is not None else None
    order = torch.arange(n)
    best = 0.0
    for step in range(steps + 1):
        start = (step * batch) % n
        if gen is not None and start < batch:  # a new epoch
            order = torch.randperm(n, generator=gen)
        idx = order[start:start + batch]
        loss = task.loss_fn(task.outputs(theta, data.x[idx]), data.y[idx]).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step % eval_every == 0:
            best = max(best, task.evaluate(theta.detach())["accuracy"])
    final = task.evaluate(theta.detach())["accuracy"]
    return PooledResult(final, max(best, final))
