"""Procedurally generated 1-D digits, after the MNIST-1D idea (docs/tasks.md), float32.

Our own generator (seeded numpy, nothing downloaded). Ten fixed templates ``T_c`` of
``TEMPLATE_LEN = 12`` points (a plateau, a spike, ramps, bumps, a step, waves …, see
:func:`templates`). A sample of class ``c``:

1. pad ``T_c`` with ``ℓ, r ~ U{PAD_MIN..PAD_MAX}`` zeros on the left / right and resample the
   padded signal linearly to ``LENGTH = 40`` points — a random shift *and* time-scale;
2. multiply by an amplitude ``a ~ U(1 − SCALE, 1 + SCALE)``;
3. add a shear ``s · τ`` with ``s ~ U(−SHEAR, SHEAR)``, ``τ = linspace(−1, 1, 40)``;
4. add correlated noise ``CORR_NOISE · (k ⊛ ε)/‖k‖`` (``ε`` white, ``k`` a Gaussian kernel of
   width ``CORR_SIGMA`` points, circular) and white noise ``WHITE_NOISE · ε'``.

Labels are balanced (``samples`` × 1/10 each, shuffled). A stratified test split of
``test_fraction``; the training part is split non-IID by the label-Dirichlet prior shared with
``digits`` (:func:`asyncfl.tasks.common.dirichlet_split`).

Models (per-sample cross entropy): ``mlp`` = ``40 → hidden → hidden → 10`` with ReLU;
``cnn`` = ``Conv1d(1, 16, 5, p=2) − ReLU − MaxPool(2) − Conv1d(16, 16, 5, p=2) − ReLU −
MaxPool(2) − Flatten − Linear(16·10, 10)`` (``hidden`` is used by ``mlp`` only).
"""

from __future__ import annotations

import numpy as np
from scipy.ndimage import convolve1d
from torch import nn

from asyncfl.config.tasks import MNIST1D_CLASSES, MNIST1D_LENGTH, MNIST1DTask
from asyncfl.tasks.base import Task
from asyncfl.tasks.common import Reshape, mlp, non_iid_classifier, task_streams

CLASSES = MNIST1D_CLASSES
LENGTH = MNIST1D_LENGTH
TEMPLATE_LEN = 12
PAD_MIN, PAD_MAX = 4, 20
SCALE = 0.3
SHEAR = 0.6
CORR_NOISE, CORR_SIGMA = 0.3, 2.0
WHITE_NOISE = 0.1


def templates() -> np.ndarray:
    """The ten fixed class templates, shape ``(10, TEMPLATE_LEN)``, values in ``[−1, 1]``."""
    t = np.linspace(0.0, 1.0, TEMPLATE_LEN)
    bump = lambda c, w: np.exp(-(((t - c) / w) ** 2))  # noqa: E731
    return np.stack([
        ((t > 0.15) & (t < 0.85)).astype(float),        # 0 plateau
        bump(0.5, 0.08),                                # 1 narrow spike
        t,                                              # 2 ramp up
        -t,                                             # 3 ramp down (negative)
        bump(0.2, 0.1) + bump(0.8, 0.1),                # 4 two bumps
        np.where(t < 0.5, 1.0, -1.0),                   # 5 step from +1 to −1
        np.sin(2 * np.pi * t),                          # 6 one sine period
        2 * np.abs(t - 0.5),                            # 7 V shape
        bump(0.1, 0.06) + bump(0.5, 0.06) + bump(0.9, 0.06),  # 8 three spikes
        np.cos(4 * np.pi * t),                          # 9 two cosine periods
    ])


def mnist1d_arrays(samples: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: float32 signals of shape ``(samples, 40)`` and int64 labels in ``0..9``."""
    y = rng.permutation(np.arange(samples) % CLASSES).astype(np.int64)
    left = rng.integers(PAD_MIN, PAD_MAX + 1, samples)
    right = rng.integers(PAD_MIN, PAD_MAX + 1, samples)
    padded_len = TEMPLATE_LEN + left + right
    # output point j sits at j·(L_p − 1)/(LENGTH − 1) in padded coordinates
    pos = np.arange(LENGTH) * ((padded_len - 1) / (LENGTH - 1))[:, None] - left[:, None]
    x = np.empty((samples, LENGTH))
    grid = np.arange(TEMPLATE_LEN, dtype=float)
    for c, tpl in enumerate(templates()):
        m = y == c
        x[m] = np.interp(pos[m].ravel(), grid, tpl, left=0.0, right=0.0).reshape(-1, LENGTH)
    x *= rng.uniform(1 - SCALE, 1 + SCALE, (samples, 1))
    x += rng.uniform(-SHEAR, SHEAR, (samples, 1)) * np.linspace(-1.0, 1.0, LENGTH)
    half = int(4 * CORR_SIGMA)
    kernel = np.exp(-0.5 * (np.arange(-half, half + 1) / CORR_SIGMA) ** 2)
    kernel /= np.linalg.norm(kernel)  # unit-variance correlated noise
    x += CORR_NOISE * convolve1d(rng.standard_normal((samples, LENGTH)), kernel, axis=1, mode="wrap")
    x += WHITE_NOISE * rng.standard_normal((samples, LENGTH))
    return x.astype(np.float32), y


def mnist1d_model(kind: str, hidden: int) -> nn.Module:
    """The architecture named ``kind`` (``mlp`` | ``cnn``)."""
    if kind == "mlp":
        return mlp([LENGTH, hidden, hidden, CLASSES])
    return nn.Sequential(
        Reshape(1, LENGTH),
        nn.Conv1d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
        nn.Conv1d(16, 16, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
        nn.Flatten(-2), nn.Linear(16 * (LENGTH // 4), CLASSES),
    )


def build_mnist1d(cfg: MNIST1DTask, num_clients: int, seed: int) -> Task:
    """Build the mnist1d task (see module docstring)."""
    rng, torch_seed = task_streams(seed)
    x, y = mnist1d_arrays(cfg.samples, rng)
    return non_iid_classifier("mnist1d", x, y, cfg, lambda: mnist1d_model(cfg.model, cfg.hidden), num_clients, rng, torch_seed)
