"""The canonical MNIST-1D (Greydanus & Kobak, 2020), split non-IID (docs/tasks.md §6), float32.

The data are exactly those of the ``mnist1d`` package's ``mnist1d.data.make_dataset()`` with its
default arguments (seed 42: 4000 training and 1000 test signals of length 40, ten classes),
generated offline — ``make_dataset`` computes the signals from templates with numpy and scipy
and downloads nothing — and cast to float32, the models' dtype. The package seeds numpy's and
Python's *global* random generators; :func:`canonical_arrays` restores both afterwards, so
building the task disturbs no other random stream, and keeps the arrays for the rest of the
process (generating them takes about a second).

The canonical test set is the task's test set (so a pooled, centralised model is comparable with
the accuracies published for MNIST-1D: ``benchmarks/mnist1d_pooled.py``); the 4000 training
signals are split over the clients by the label-Dirichlet prior shared with ``digits``
(:func:`asyncfl.tasks.common.dirichlet_split`, concentration ``dirichlet_alpha``) from the task's
data stream, so the seed changes the split and the initial model, never the data.

Models (per-sample cross entropy): ``logreg`` = ``Linear(40, 10)``; ``mlp`` = ``40 → hidden →
hidden → 10`` with ReLU; ``cnn`` = ``Conv1d(1, 16, 5, p=2) − ReLU − MaxPool(2) − Conv1d(16, 16,
5, p=2) − ReLU − MaxPool(2) − Flatten − Linear(16·10, 10)`` (``hidden`` is used by ``mlp`` only).
"""

from __future__ import annotations

import functools
import random
from typing import NamedTuple

import numpy as np
import torch
from torch import nn

from asyncfl.components.contracts import BuildContext
from asyncfl.config.tasks import MNIST1D_CLASSES, MNIST1D_LENGTH, MNIST1DTask
from asyncfl.tasks.base import ClientData, Task
from asyncfl.tasks.common import Reshape, cross_entropy, dirichlet_split, mlp, seeded_model, task_streams

CLASSES = MNIST1D_CLASSES
LENGTH = MNIST1D_LENGTH


class MNIST1DArrays(NamedTuple):
    """The canonical data set: ``x`` (4000, 40) float32, ``y`` (4000,) int64, and the test
    set ``x_test`` (1000, 40), ``y_test`` (1000,)."""

    x: np.ndarray
    y: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray


def generate(samples: int | None = None) -> dict:
    """``mnist1d.data.make_dataset()`` with its default arguments (``samples`` given: the same
    arguments with ``num_samples = samples``), leaving numpy's and Python's global random state
    as it found them (the package seeds both with its seed 42)."""
    from mnist1d.data import get_dataset_args, make_dataset  # third-party, imports matplotlib: only when built

    np_state, py_state = np.random.get_state(), random.getstate()
    try:
        if samples is None:
            return make_dataset()
        args = get_dataset_args()
        args.num_samples = samples
        return make_dataset(args)
    finally:
        np.random.set_state(np_state)
        random.setstate(py_state)


@functools.lru_cache(maxsize=2)
def canonical_arrays(samples: int | None = None) -> MNIST1DArrays:
    """The canonical MNIST-1D as float32 / int64 arrays (``samples`` given: that many signals
    from the same generator, 80 % training), generated once per process (read-only)."""
    data = generate(samples)
    arrays = MNIST1DArrays(
        np.ascontiguousarray(data["x"], dtype=np.float32), np.asarray(data["y"], dtype=np.int64),
        np.ascontiguousarray(data["x_test"], dtype=np.float32), np.asarray(data["y_test"], dtype=np.int64),
    )
    for a in arrays:
        a.setflags(write=False)
    return arrays


def mnist1d_model(kind: str, hidden: int) -> nn.Module:
    """The architecture named ``kind`` (``logreg`` | ``mlp`` | ``cnn``)."""
    if kind == "logreg":
        return mlp([LENGTH, CLASSES])
    if kind == "mlp":
        return mlp([LENGTH, hidden, hidden, CLASSES])
    return nn.Sequential(
        Reshape(1, LENGTH),
        nn.Conv1d(1, 16, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
        nn.Conv1d(16, 16, 5, padding=2), nn.ReLU(), nn.MaxPool1d(2),
        nn.Flatten(-2), nn.Linear(16 * (LENGTH // 4), CLASSES),
    )


def build_mnist1d(cfg: MNIST1DTask, ctx: BuildContext) -> Task:
    """Build the mnist1d task (see module docstring)."""
    num_clients, seed = ctx.clients, ctx.seed
    rng, torch_seed = task_streams(seed)
    data = canonical_arrays(cfg.samples)
    parts = dirichlet_split(data.y, num_clients, cfg.dirichlet_alpha, rng)
    # torch.tensor copies: the cached arrays stay read-only and shared between tasks
    X, Y = torch.tensor(data.x), torch.tensor(data.y)
    clients = [ClientData(X[p], Y[p]) for p in parts]
    test = ClientData(torch.tensor(data.x_test), torch.tensor(data.y_test))
    model = seeded_model(lambda: mnist1d_model(cfg.model, cfg.hidden), torch_seed, torch.float32)
    return Task(name="mnist1d", model=model, clients=clients, test=test, loss_fn=cross_entropy, classification=True)
