"""scikit-learn's bundled 8×8 handwritten digits (docs/tasks.md), offline, float32.

All 1797 images, pixels scaled to ``[0, 1]`` (÷16). A stratified, seeded central test split of
``test_fraction``; the rest is split non-IID over the clients by a label-Dirichlet prior
(:func:`asyncfl.tasks.common.dirichlet_split`: per class, proportions ``~ Dir(α·1_K)``; every
client gets at least ``min(5, n_train // K)`` samples). Each sample is used exactly once.

Models (per-sample cross entropy): ``logreg`` = ``Linear(64, 10)``; ``mlp`` =
``Linear(64, hidden) − ReLU − Linear(hidden, 10)``; ``cnn`` = reshape to 1×8×8,
``Conv2d(1, 8, 3, padding=1) − ReLU − MaxPool2d(2) − Flatten − Linear(8·4·4, 10)``
(``hidden`` is used by ``mlp`` only).
"""

from __future__ import annotations

import numpy as np
from sklearn.datasets import load_digits
from torch import nn

from asyncfl.components.contracts import BuildContext
from asyncfl.config.tasks import DIGITS_CLASSES, DigitsTask
from asyncfl.tasks.base import Task
from asyncfl.tasks.common import Reshape, mlp, non_iid_classifier, task_streams

CLASSES = DIGITS_CLASSES


def digits_arrays() -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)``: float32 features in ``[0, 1]`` of shape (1797, 64) and int64 labels."""
    data = load_digits()
    return (data.data / 16.0).astype(np.float32), data.target.astype(np.int64)


def digits_model(kind: str, hidden: int) -> nn.Module:
    """The architecture named ``kind`` (``logreg`` | ``mlp`` | ``cnn``)."""
    if kind == "logreg":
        return mlp([64, CLASSES])
    if kind == "mlp":
        return mlp([64, hidden, CLASSES])
    return nn.Sequential(
        Reshape(1, 8, 8), nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(-3), nn.Linear(8 * 4 * 4, CLASSES),
    )


def build_digits(cfg: DigitsTask, ctx: BuildContext) -> Task:
    """Build the digits task (see module docstring)."""
    num_clients, seed = ctx.clients, ctx.seed
    rng, torch_seed = task_streams(seed)
    x, y = digits_arrays()
    return non_iid_classifier("digits", x, y, cfg, lambda: digits_model(cfg.model, cfg.hidden), num_clients, rng, torch_seed)
