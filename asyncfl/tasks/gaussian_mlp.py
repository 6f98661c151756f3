"""Gaussian inputs labelled by one fixed random linear map (docs/tasks.md), float32.

``V ∈ R^{dim×classes}`` with i.i.d. N(0, 1) entries, shared by all clients. Every client holds
``samples_per_client`` inputs ``x ~ N(0, I_dim)`` with labels ``y = argmax(xᵀ V)``; the test set
is ``TEST_SAMPLES`` fresh draws. Clients differ only by sampling noise (IID). Model:
``Linear(dim, hidden) − ReLU − Linear(hidden, classes)``, per-sample cross entropy.
"""

from __future__ import annotations

import numpy as np
import torch

from asyncfl.config.tasks import GAUSSIAN_TEST_SAMPLES, GaussianMLPTask
from asyncfl.tasks.base import ClientData, Task
from asyncfl.tasks.common import cross_entropy, mlp, seeded_model, task_streams

TEST_SAMPLES = GAUSSIAN_TEST_SAMPLES


def gaussian_mlp_data(num_clients: int, dim: int, classes: int, samples_per_client: int,
                      rng: np.random.Generator):
    """``(clients, test, V)``: ``clients`` a list of ``(x, y)``; ``test`` one ``(x, y)`` pair."""
    V = rng.standard_normal((dim, classes))

    def draw(n: int) -> tuple[np.ndarray, np.ndarray]:
        x = rng.standard_normal((n, dim)).astype(np.float32)  # label the stored float32 values
        return x, np.argmax(x.astype(np.float64) @ V, axis=1).astype(np.int64)

    clients = [draw(samples_per_client) for _ in range(num_clients)]
    return clients, draw(TEST_SAMPLES), V


def build_gaussian_mlp(cfg: GaussianMLPTask, num_clients: int, seed: int) -> Task:
    """Build the gaussian-mlp task (see module docstring)."""
    rng, torch_seed = task_streams(seed)
    clients, test, _ = gaussian_mlp_data(num_clients, cfg.dim, cfg.classes, cfg.samples_per_client, rng)
    t = lambda xy: ClientData(torch.from_numpy(xy[0]), torch.from_numpy(xy[1]))  # noqa: E731
    return Task(
        name="gaussian-mlp",
        model=seeded_model(lambda: mlp([cfg.dim, cfg.hidden, cfg.classes]), torch_seed, torch.float32),
        clients=[t(c) for c in clients],
        test=t(test),
        loss_fn=cross_entropy,
        classification=True,
    )
