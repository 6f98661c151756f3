"""TensorFlow Federated's EMNIST from its HDF5 files (docs/tasks.md §17).

One client per writer: the ``population.clients`` writers of ``fed_emnist_train.h5`` chosen by
the seeded key of :mod:`asyncfl.datasets.users`; the test set is the same writers' samples in
``fed_emnist_test.h5``. Pixels as stored (float32 28×28, flattened); labels in ``[0, 62)`` (or
``[0, 10)`` for the digits-only files). Needs ``h5py`` (``pip install asyncfl[h5]``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from asyncfl.components.contracts import BuildContext
from asyncfl.config.datasets import IMAGE_SIDE, TFFEMNISTTask
from asyncfl.datasets.files import refuse
from asyncfl.datasets.hdf5 import import_h5py, read_h5_users
from asyncfl.tasks.base import Task
from asyncfl.tasks.common import task_streams
from asyncfl.tasks.datasets_common import classification_task, require_files
from asyncfl.tasks.models import image_model

#: TFF's layout: group → {dataset: (trailing shape, accepted numpy dtype kinds)}
TFF_GROUP = "examples"
TFF_KEYS = {"pixels": ((IMAGE_SIDE, IMAGE_SIDE), "f"), "label": ((), "iu")}


def _arrays(path: Path, user: str, pixels: np.ndarray, label: np.ndarray, classes: int) -> tuple[np.ndarray, np.ndarray]:
    y = label.astype(np.int64)
    if len(y) and (y.min() < 0 or y.max() >= classes):
        raise refuse(path, f"writer {user[:40]!r}: labels range over [{y.min()}, {y.max()}], expected [0, {classes - 1}]")
    x = pixels.astype(np.float32).reshape(len(pixels), -1)
    if not np.isfinite(x).all():
        raise refuse(path, f"writer {user[:40]!r}: pixels must be finite")
    return x, y


def build_tff_emnist(cfg: TFFEMNISTTask, ctx: BuildContext) -> Task:
    """Build the tff-emnist task (see module docstring)."""
    num_clients, seed = ctx.clients, ctx.seed
    import_h5py()  # refuse early, naming the install command
    require_files(cfg)
    _, torch_seed = task_streams(seed)
    root, classes = Path(cfg.path).expanduser(), cfg.classes()
    train_file, test_file = (root / name for name in cfg.file_names())
    chosen = read_h5_users(train_file, TFF_GROUP, TFF_KEYS, num_clients, seed)
    clients = [_arrays(train_file, u, *a, classes) for u, a in chosen]
    tests = [_arrays(test_file, u, *a, classes) for u, a in read_h5_users(test_file, TFF_GROUP, TFF_KEYS, 0, seed,
                                                                            only=[u for u, _ in chosen])]
    if not tests:
        raise refuse(test_file, "none of the chosen writers has a test sample")
    test = (np.concatenate([x for x, _ in tests]), np.concatenate([y for _, y in tests]))
    side = IMAGE_SIDE
    return classification_task("tff-emnist", clients, test,
                               lambda: image_model(cfg.model, side * side, classes, cfg.hidden, side), torch_seed, classes,
                               batched=cfg.model == "mlp")
