"""Least-squares clients ``f_k(θ) = ½‖A_k θ − b_k‖²`` (docs/baselines.md, §7), float64.

The model is ``Linear(dim, 1, bias=False)`` with outputs squeezed to ``(B,)``, the per-sample
loss is ``½(out − y)²`` and ``reduction = "sum"``, so a full batch gives exactly ``f_k``.
``Task.quadratic`` holds ``(A_k, b_k)`` for exact proximal solves. Initial ``θ = 0``.

* ``problem = "seed-1d"``: the seed's 2-client example (fit ``y = m x``). Client 1 holds
  ``{(0, 2), (1, 2)}`` ⇒ ``f_1(m) = ½(4 + (m − 2)²)``; client 2 holds ``{(2, 0), (2, 1)}`` ⇒
  ``f_2(m) = ½(4m² + (2m − 1)²)``. Pooled optimum ``m* = 4/9``. Test set = pooled data.
* ``problem = "random"``: common model ``θ_0 ~ N(0, I_d)``; client models
  ``θ_k = θ_0 + heterogeneity · N(0, I_d)``; ``A_k ∈ R^{n×d}`` with i.i.d. N(0, 1) entries
  (``n = samples_per_client``), ``b_k = A_k θ_k + noise · N(0, I_n)``. Test set: a fresh
  ``n``-row draw ``(A, A θ̄ + noise · ε)`` from the average model ``θ̄ = mean_k θ_k``.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from asyncfl.components.contracts import BuildContext
from asyncfl.errors import ScenarioError
from asyncfl.config.tasks import QuadraticTask
from asyncfl.tasks.base import ClientData, QuadraticForm, Task
from asyncfl.tasks.common import SqueezeLast, half_squared_error, seeded_model, task_streams

SEED_1D = (((0.0, 1.0), (2.0, 2.0)), ((2.0, 2.0), (0.0, 1.0)))  # per client: (x, y)


def seed_1d_data() -> list[tuple[np.ndarray, np.ndarray]]:
    """The seed example's ``(A_k, b_k)``: ``A_k`` of shape (2, 1), ``b_k`` of shape (2,)."""
    return [(np.array(x, dtype=np.float64)[:, None], np.array(y, dtype=np.float64)) for x, y in SEED_1D]


def random_quadratic_data(num_clients: int, dim: int, samples_per_client: int, noise: float,
                          heterogeneity: float, rng: np.random.Generator):
    """``(clients, test, thetas)``: clients/test as lists/pairs of ``(A, b)``; ``thetas`` = θ_k."""
    theta0 = rng.standard_normal(dim)
    thetas = theta0 + heterogeneity * rng.standard_normal((num_clients, dim))
    clients = []
    for k in range(num_clients):
        A = rng.standard_normal((samples_per_client, dim))
        clients.append((A, A @ thetas[k] + noise * rng.standard_normal(samples_per_client)))
    A = rng.standard_normal((samples_per_client, dim))
    test = (A, A @ thetas.mean(axis=0) + noise * rng.standard_normal(samples_per_client))
    return clients, test, thetas


def build_quadratic(cfg: QuadraticTask, ctx: BuildContext) -> Task:
    """Build the quadratic task (see module docstring)."""
    num_clients, seed = ctx.clients, ctx.seed
    rng, torch_seed = task_streams(seed)
    if cfg.problem == "seed-1d":
        if num_clients != 2:
            raise ScenarioError([f"population.clients = {num_clients}: the seed-1d problem has exactly 2 clients"])
        pairs = seed_1d_data()
        test = (np.concatenate([A for A, _ in pairs]), np.concatenate([b for _, b in pairs]))
    else:
        pairs, test, _ = random_quadratic_data(num_clients, cfg.dim, cfg.samples_per_client,
                                               cfg.noise, cfg.heterogeneity, rng)
    dim = pairs[0][0].shape[1]
    make = lambda: nn.Sequential(nn.Linear(dim, 1, bias=False), SqueezeLast())  # noqa: E731
    model = seeded_model(make, torch_seed, torch.float64)  # leaves the global torch RNG alone
    with torch.no_grad():
        model[0].weight.zero_()
    t = lambda a: torch.from_numpy(np.ascontiguousarray(a, dtype=np.float64))  # noqa: E731
    clients = [ClientData(t(A), t(b)) for A, b in pairs]
    return Task(
        name="quadratic",
        model=model,
        clients=clients,
        test=ClientData(t(test[0]), t(test[1])),
        loss_fn=half_squared_error,
        classification=False,
        reduction="sum",
        quadratic=QuadraticForm(A=tuple(c.x for c in clients), b=tuple(c.y for c in clients)),
        initial_theta=torch.zeros(dim, dtype=torch.float64),
    )
