"""What the builders of the data sets read from disk share (docs/tasks.md §13–18): refusing a
missing path before anything is read, splitting a centralised data set, and assembling a
cross-entropy classification task from numpy arrays."""

from __future__ import annotations

import logging
from typing import Callable

import numpy as np
import torch
from torch import nn

from asyncfl.config.datasets import DatasetTask, SplitTask
from asyncfl.datasets.splits import shard_split, split_statistics
from asyncfl.errors import ScenarioError
from asyncfl.tasks.base import ClientData, Task
from asyncfl.tasks.common import cross_entropy, dirichlet_split, seeded_model

log = logging.getLogger("asyncfl.tasks")


def require_files(cfg: DatasetTask) -> None:
    """Refuse (:class:`ScenarioError`) a configuration whose files are not all there, naming each
    file expected and where the data set is published; reads nothing."""
    problems = cfg.file_problems()
    if problems:
        raise ScenarioError(problems)


def split_indices(cfg: SplitTask, labels: np.ndarray, num_clients: int, rng: np.random.Generator) -> list[np.ndarray]:
    """The clients' sample indices under ``cfg.split`` (``dirichlet``: the project's label-Dirichlet
    split, docs/tasks.md §7 steps 2–3; ``shards``: :func:`asyncfl.datasets.splits.shard_split`)."""
    if cfg.split == "dirichlet":
        return dirichlet_split(labels, num_clients, cfg.dirichlet_alpha, rng)
    return shard_split(labels, num_clients, cfg.shards_per_client, rng)


def classification_task(name: str, clients: list[tuple[np.ndarray, np.ndarray]], test: tuple[np.ndarray, np.ndarray],
                        make_model: Callable[[], nn.Module], torch_seed: int, classes: int, batched: bool,
                        batched_on_accelerator: bool = True) -> Task:
    """A cross-entropy classification task over the given arrays (float32 model); logs the split's
    statistics (:func:`asyncfl.datasets.splits.split_statistics`). ``batched``: whether
    ``train_batched`` batches its jobs on the CPU (:mod:`asyncfl.tasks.models` says which models gain);
    ``batched_on_accelerator``: on an accelerator (False: a model ``vmap`` cannot batch)."""
    log.info("%s: %s", name, split_statistics([y for _, y in clients], classes).describe())
    data = [ClientData(torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(np.ascontiguousarray(y))) for x, y in clients]
    return Task(name=name, model=seeded_model(make_model, torch_seed, torch.float32), clients=data,
                test=ClientData(torch.from_numpy(np.ascontiguousarray(test[0])), torch.from_numpy(np.ascontiguousarray(test[1]))),
                loss_fn=cross_entropy, classification=True, batched_training=batched,
                batched_on_accelerator=batched_on_accelerator)


def task_split_statistics(task: Task, classes: int):
    """:func:`~asyncfl.datasets.splits.split_statistics` of a built task's clients."""
    return split_statistics([d.y.numpy() for d in task.clients], classes)
