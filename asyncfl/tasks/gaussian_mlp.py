"""Gaussian inputs labelled by one fixed random linear map (docs/tasks.md), float32.

``V ∈ R^{dim×classes}`` with i.i.d. N(0, 1) entries, shared by all clients. Every client holds
``samples_per_client`` inputs ``x ~ N(0, I_dim)`` with labels ``y = argmax(xᵀ V)``; the test set
is ``TEST_SAMPLES`` fresh draws. Clients differ only by sampling noise (IID). Model:
``Linear(dim, hidden) − ReLU − Linear(hidden, classes)``, per-sample cross entropy.

With ``label_alpha`` = α the clients are label-skewed (:func:`label_skewed_data`): client ``k``
draws class proportions ``p_k ~ Dir(α·1)`` and its label counts ``~ Multinomial(n, p_k)``, and
its inputs are draws of ``x ~ N(0, I)`` whose label ``argmax(xᵀV)`` is that class; the test set
is class-balanced (``TEST_SAMPLES / classes`` per class, the clients' mean label distribution).
"""

from __future__ import annotations

import numpy as np
import torch

from asyncfl.components.contracts import BuildContext
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


def _class_pools(V: np.ndarray, need: np.ndarray, rng: np.random.Generator) -> list[np.ndarray]:
    """``need[c]`` float32 inputs ``x ~ N(0, I)`` with ``argmax(xᵀV) = c`` for every class ``c``
    (rejection: draw in batches sized by the classes' observed frequencies, keep what is needed)."""
    dim, classes = V.shape
    pools: list[list[np.ndarray]] = [[] for _ in range(classes)]
    have = np.zeros(classes, dtype=np.int64)
    seen = np.ones(classes)  # draws per class so far (+1: no class has frequency 0)
    drawn = classes
    while (have < need).any():
        short = np.maximum(need - have, 0)
        n = int(min(max(1.1 * np.max(short / (seen / drawn)), 1024), 5_000_000))
        x = rng.standard_normal((n, dim)).astype(np.float32)
        y = np.argmax(x.astype(np.float64) @ V, axis=1)
        seen += np.bincount(y, minlength=classes)
        drawn += n
        for c in np.flatnonzero(short):
            take = x[y == c][: short[c]]
            pools[c].append(take)
            have[c] += len(take)
    return [np.concatenate(p) if p else np.empty((0, dim), np.float32) for p in pools]


def label_skewed_data(num_clients: int, dim: int, classes: int, samples_per_client: int, alpha: float,
                      rng: np.random.Generator):
    """``(clients, test, V)`` as :func:`gaussian_mlp_data`, with client ``k``'s label counts
    ``~ Multinomial(samples_per_client, p_k)``, ``p_k ~ Dir(α·1)``, and a class-balanced test set."""
    V = rng.standard_normal((dim, classes))
    counts = rng.multinomial(samples_per_client, rng.dirichlet(np.full(classes, alpha), size=num_clients))
    per_class_test = -(-TEST_SAMPLES // classes)
    pools = _class_pools(V, counts.sum(axis=0) + per_class_test, rng)
    test_x = np.concatenate([p[:per_class_test] for p in pools])[:TEST_SAMPLES]
    test_y = np.repeat(np.arange(classes), per_class_test)[:TEST_SAMPLES]
    # the training inputs in (class, client) order, then stably regrouped by client
    x = np.concatenate([p[per_class_test:] for p in pools])
    y = np.repeat(np.arange(classes), counts.sum(axis=0))
    owner = np.concatenate([np.repeat(np.arange(num_clients), counts[:, c]) for c in range(classes)])
    order = np.argsort(owner, kind="stable")
    x, y = x[order], y[order]
    cuts = np.cumsum(counts.sum(axis=1))[:-1]
    clients = list(zip(np.split(x, cuts), np.split(y.astype(np.int64), cuts)))
    return clients, (test_x, test_y.astype(np.int64)), V


def build_gaussian_mlp(cfg: GaussianMLPTask, ctx: BuildContext) -> Task:
    """Build the gaussian-mlp task (see module docstring)."""
    num_clients, seed = ctx.clients, ctx.seed
    rng, torch_seed = task_streams(seed)
    if cfg.label_alpha is None:
        clients, test, _ = gaussian_mlp_data(num_clients, cfg.dim, cfg.classes, cfg.samples_per_client, rng)
    else:
        clients, test, _ = label_skewed_data(num_clients, cfg.dim, cfg.classes, cfg.samples_per_client,
                                             cfg.label_alpha, rng)
    t = lambda xy: ClientData(torch.from_numpy(xy[0]), torch.from_numpy(xy[1]))  # noqa: E731
    return Task(
        name="gaussian-mlp",
        model=seeded_model(lambda: mlp([cfg.dim, cfg.hidden, cfg.classes]), torch_seed, torch.float32),
        clients=[t(c) for c in clients],
        test=t(test),
        loss_fn=cross_entropy,
        classification=True,
    )
