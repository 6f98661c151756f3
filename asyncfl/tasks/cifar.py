"""CIFAR-10 and CIFAR-100 from their python pickles (docs/tasks.md §15).

Pixels ÷255, then standardised per channel with the training set's mean and standard deviation
(float32, channel-major 3×32×32 flattened to 3072); a channel constant over the training set is
centred and not scaled, with a note (:func:`channel_moments`). The training set is split over the clients
by ``task.split`` (label-Dirichlet, default concentration 0.1, or shards) from the task's data
stream; the data set's test set is the test set. Model: the small CIFAR CNN
(:func:`asyncfl.tasks.models.cifar_cnn`).
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from asyncfl.components.contracts import BuildContext
from asyncfl.config.datasets import CIFAR10Task, CIFAR100Task
from asyncfl.datasets.cifar import read_cifar
from asyncfl.tasks.base import Task
from asyncfl.tasks.common import task_streams
from asyncfl.tasks.datasets_common import classification_task, require_files, split_indices
from asyncfl.tasks.models import cifar_cnn

log = logging.getLogger("asyncfl.tasks")


CHANNELS = ("red", "green", "blue")


def channel_moments(train: np.ndarray, where: Path | str = "the training set") -> tuple[np.ndarray, np.ndarray]:
    """The mean and the scale of each channel of ``train/255``: its standard deviation, or 1 for a
    channel that is constant over the whole training set (it carries no information; dividing by
    its zero deviation would make every pixel of it NaN). A constant channel is logged as a note
    naming the channel and ``where`` — it usually means damaged or converted files."""
    t = train.reshape(len(train), 3, -1).astype(np.float32) / np.float32(255)
    mean, std = t.mean(axis=(0, 2)), t.std(axis=(0, 2))
    low = t.min(axis=(0, 2))
    flat = low == t.max(axis=(0, 2))
    if flat.any():
        names = ", ".join(f"{CHANNELS[c]} (every pixel {int(round(float(mean[c]) * 255))})" for c in np.flatnonzero(flat))
        log.warning("note: %s: the %s channel%s constant over all %d training images; centred and not scaled",
                    where, names, " is" if flat.sum() == 1 else "s are", len(train))
        mean, std = np.where(flat, low, mean), np.where(flat, np.float32(1), std)  # the exact constant, not a sum's
    return mean, std


def standardise(x: np.ndarray, train: np.ndarray, where: Path | str = "the training set") -> np.ndarray:
    """``(x/255 − mean_c) / scale_c`` per channel ``c``, the moments of ``train/255``
    (:func:`channel_moments`; float32)."""
    mean, std = channel_moments(train, where)
    return _scaled(x, mean, std)


def _scaled(x: np.ndarray, mean: np.ndarray, std: np.ndarray) -> np.ndarray:
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
    mean, std = channel_moments(x_raw, root)
    x, xt = _scaled(x_raw, mean, std), _scaled(xt_raw, mean, std)
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
