"""CIFAR-10 and CIFAR-100 from their python pickles (docs/tasks.md §15).

Pixels ÷255, then standardised per channel with the training set's mean and standard deviation
(float32, channel-major 3×32×32 flattened to 3072). The training set is split over the clients
by ``task.split`` (label-Dirichlet, default concentration 0.1, or shards) from the task's data
stream; the data set's test set is the test set. Model: the small CIFAR CNN
(:func:`asyncfl.tasks.models.cifar_cnn`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from asyncfl.components.contracts import BuildContext
from asyncfl.config.datasets import CIFAR10Task, CIFAR100Task
from asyncfl.datasets.cifar import read_cifar
from asyncfl.tasks.base import Task
from asyncfl.tasks.common import task_streams
from asyncfl.tasks.datasets_common import classification_task, require_files, split_indices
from asyncfl.tasks.models import cifar_cnn


def standardise(x: np.ndarray, train: np.ndarray) -> np.ndarray:
    """``(x/255 − mean_c) / std_c`` per channel ``c``, the moments of ``train/255`` (float32)."""
    t = train.reshape(len(train), 3, -1).astype(np.float32) / np.float32(255)
    mean, std = t.mean(axis=(0, 2)), t.std(axis=(0, 2))
    out = x.reshape(len(x), 3, -1).astype(np.float32) / np.float32(255)
    out -= mean[None, :, None]
    out /= std[None, :, None]
    return out.reshape(len(x), -1)


def _build(cfg: CIFAR10Task, num_clients: int, seed: int, train_files: list[str], test_files: list[str], label_key: str) -> Task:
    require_files(cfg)
    rng, torch_seed = task_streams(seed)
    root, classes = Path(cfg.path).expanduser(), cfg.classes()
    x_raw, y = read_cifar(root, train_files, label_key, classes)
    xt_raw, yt = read_cifar(root, test_files, label_key, classes)
    x, xt = standardise(x_raw, x_raw), standardise(xt_raw, x_raw)
    parts = split_indices(cfg, y, num_clients, rng)
    return classification_task(cfg.name, [(x[p], y[p]) for p in parts], (xt, yt), lambda: cifar_cnn(classes),
                               torch_seed, classes, batched=False)


def build_cifar10(cfg: CIFAR10Task, ctx: BuildContext) -> Task:
    """Build the cifar10 task (see module docstring)."""
    num_clients, seed = ctx.clients, ctx.seed
    return _build(cfg, num_clients, seed, [f"data_batch_{i}" for i in range(1, 6)], ["test_batch"], "labels")


def build_cifar100(cfg: CIFAR100Task, ctx: BuildContext) -> Task:
    """Build the cifar100 task (see module docstring); ``task.labels`` picks fine or coarse labels."""
    num_clients, seed = ctx.clients, ctx.seed
    return _build(cfg, num_clients, seed, ["train"], ["test"], f"{cfg.labels}_labels")
