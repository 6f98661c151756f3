"""``hf-images``: an image data set in the Hugging Face ``datasets`` layouts, partitioned by
Flower Datasets' partitioners (docs/tasks.md §20; the reading and partitioning are
:mod:`asyncfl.datasets.hf`).

The training split is partitioned over the clients by ``task.partitioner`` with
``task.partition_seed``. The test set is ``task.test_split`` when the data set has it (CIFAR-10);
otherwise (FEMNIST is published as one split) each client's partition is cut by ``datasets``'
``train_test_split(test_size = task.test_fraction, seed = task.partition_seed)``, as Flower's
tutorials do, and the clients' held-out samples, pooled in client order, are the test set.
Features: 28×28 grey images as 784 float32 pixels ÷255 (LEAF's CNN or the 2NN MLP); 32×32×3
images channel-major, ÷255 and standardised per channel with the training samples' moments as
``cifar10`` does (the CIFAR CNN or the MLP).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from asyncfl.components.contracts import BuildContext
from asyncfl.config.datasets import HFImagesTask
from asyncfl.datasets.hf import class_count, hold_out, image_arrays, import_hf, load_splits, partition_rows, require_columns, split_of
from asyncfl.tasks.base import Task
from asyncfl.tasks.cifar import channel_moments
from asyncfl.tasks.common import task_streams
from asyncfl.tasks.datasets_common import classification_task, require_files
from asyncfl.tasks.models import cifar_cnn, image_model


def _features(x: np.ndarray, cfg: HFImagesTask, mean: np.ndarray | None, std: np.ndarray | None) -> np.ndarray:
    if cfg.channels == 1:
        return x.reshape(len(x), -1).astype(np.float32) / np.float32(255)
    out = x.transpose(0, 3, 1, 2).reshape(len(x), 3, -1).astype(np.float32) / np.float32(255)
    assert mean is not None and std is not None
    out -= mean[None, :, None]
    out /= std[None, :, None]
    return out.reshape(len(x), -1)


def build_hf_images(cfg: HFImagesTask, ctx: BuildContext) -> Task:
    """Build the hf-images task (see module docstring)."""
    num_clients, seed = ctx.clients, ctx.seed
    import_hf()  # refuse early, naming the install command
    require_files(cfg)
    _, torch_seed = task_streams(seed)
    root = Path(cfg.path).expanduser()
    splits = load_splits(root)
    train = split_of(splits, cfg.train_split, root, "task.train_split")
    require_columns(train, {"task.image": cfg.image, "task.label": cfg.label, "task.partition_by": cfg.partition_by}, root)
    classes = class_count(train, cfg.label, cfg.classes, root)
    cfg = cfg.model_copy(update={"classes": classes})
    parts = partition_rows(train, cfg, num_clients, seed, root)
    x, y = image_arrays(train, cfg.image, cfg.label, cfg.side, cfg.channels, classes, root)
    if cfg.test_split in splits:
        test_split = splits[cfg.test_split]
        require_columns(test_split, {"task.image": cfg.image, "task.label": cfg.label}, root)
        xt, yt = image_arrays(test_split, cfg.image, cfg.label, cfg.side, cfg.channels, classes, root)
        rows = [r for _, r in parts]
    else:
        cuts = [hold_out(r, cfg.test_fraction, cfg.partition_seed) for _, r in parts]
        rows = [train_rows for train_rows, _ in cuts]
        held = np.concatenate([test_rows for _, test_rows in cuts])
        xt, yt = x[held], y[held]
    mean = std = None
    if cfg.channels == 3:
        used = np.concatenate(rows)
        mean, std = channel_moments(x[used].transpose(0, 3, 1, 2).reshape(len(used), -1), root)
    features, test_features = _features(x, cfg, mean, std), _features(xt, cfg, mean, std)
    if cfg.model == "cnn" and cfg.channels == 3:
        make = lambda: cifar_cnn(classes)  # noqa: E731
    else:
        make = lambda: image_model(cfg.model, cfg.features(), classes, cfg.hidden, cfg.side)  # noqa: E731
    return classification_task("hf-images", [(features[r], y[r]) for r in rows], (test_features, yt), make, torch_seed,
                               classes, batched=cfg.model == "mlp")
