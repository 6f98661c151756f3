"""FedProx's Synthetic(α, β) (docs/tasks.md), float32, per-sample cross entropy.

For each device ``k`` (one per client), with ``d = dim`` and ``C = classes``:

* ``n_k = min(⌊exp(N(4, 2²))⌋ + 50, MAX_SAMPLES)`` — the lognormal tail is capped at
  ``MAX_SAMPLES = 5000`` to bound memory (FedProx has no cap; ``P(n_k = 5000) ≈ 1.2 %``);
* ``u_k ~ N(0, α²)``, ``B_k ~ N(0, β²)`` (scalars); ``v_k ~ N(B_k, 1)^d``;
* ``W_k ~ N(u_k, 1)^{d×C}``, ``b_k ~ N(u_k, 1)^C``;
* ``x ~ N(v_k, Σ)``, ``Σ = diag(j^(−1.2))``, ``j = 1..d``; ``y = argmax(xᵀ W_k + b_k)``.

Each device keeps its first ``⌊0.9 n_k⌋`` samples for training; the remaining 10 % of all
devices are pooled into the central test set. Models: ``logreg`` = ``Linear(d, C)``;
``mlp`` = ``Linear(d, hidden) − ReLU − Linear(hidden, C)``. ``l2`` enters every client objective
as ``(l2/2)‖θ‖²`` (``Task.l2``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from asyncfl.components.contracts import BuildContext
from asyncfl.config.tasks import SYNTHETIC_MAX_SAMPLES, SYNTHETIC_TRAIN_FRACTION, SyntheticTask
from asyncfl.tasks.base import ClientData, Task
from asyncfl.tasks.common import cross_entropy, mlp, seeded_model, task_streams

MAX_SAMPLES = SYNTHETIC_MAX_SAMPLES
TRAIN_FRACTION = SYNTHETIC_TRAIN_FRACTION


@dataclass(frozen=True)
class SyntheticDevice:
    """One device's generator values and samples (all samples, before the 90/10 split)."""

    u: float
    B: float
    v: np.ndarray  # (d,)
    W: np.ndarray  # (d, C)
    b: np.ndarray  # (C,)
    x: np.ndarray  # (n_k, d), float32 (the values the model sees)
    y: np.ndarray  # (n_k,)


def covariance_diag(dim: int) -> np.ndarray:
    """Diagonal of ``Σ``: ``j^(−1.2)`` for ``j = 1..dim``."""
    return np.arange(1, dim + 1, dtype=np.float64) ** -1.2


def synthetic_devices(num_devices: int, alpha: float, beta: float, dim: int, classes: int,
                      rng: np.random.Generator) -> list[SyntheticDevice]:
    """Draw Synthetic(α, β) devices with the formulas of the module docstring."""
    sizes = np.exp(rng.normal(4.0, 2.0, num_devices))
    sizes = np.minimum(np.floor(np.minimum(sizes, MAX_SAMPLES)) + 50, MAX_SAMPLES).astype(np.int64)
    std = np.sqrt(covariance_diag(dim))
    devices = []
    for n in sizes:
        u = rng.normal(0.0, alpha)
        B = rng.normal(0.0, beta)
        v = rng.normal(B, 1.0, dim)
        W = rng.normal(u, 1.0, (dim, classes))
        b = rng.normal(u, 1.0, classes)
        x = (v + std * rng.standard_normal((int(n), dim))).astype(np.float32)
        y = np.argmax(x.astype(np.float64) @ W + b, axis=1).astype(np.int64)  # labels of stored x
        devices.append(SyntheticDevice(float(u), float(B), v, W, b, x, y))
    return devices


def build_synthetic(cfg: SyntheticTask, ctx: BuildContext) -> Task:
    """Build Synthetic(α, β) with one device per client (see module docstring)."""
    num_clients, seed = ctx.clients, ctx.seed
    rng, torch_seed = task_streams(seed)
    devices = synthetic_devices(num_clients, cfg.alpha, cfg.beta, cfg.dim, cfg.classes, rng)
    clients, test_x, test_y = [], [], []
    for dev in devices:
        n_train = int(TRAIN_FRACTION * len(dev.y))
        x = torch.from_numpy(dev.x)
        y = torch.from_numpy(dev.y)
        clients.append(ClientData(x[:n_train].clone(), y[:n_train].clone()))
        test_x.append(x[n_train:])
        test_y.append(y[n_train:])
    sizes = [cfg.dim, cfg.classes] if cfg.model == "logreg" else [cfg.dim, cfg.hidden, cfg.classes]
    model = seeded_model(lambda: mlp(sizes), torch_seed, torch.float32)
    return Task(
        name="synthetic",
        model=model,
        clients=clients,
        test=ClientData(torch.cat(test_x), torch.cat(test_y)),
        loss_fn=cross_entropy,
        classification=True,
        l2=cfg.l2,
    )
