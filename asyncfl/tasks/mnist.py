"""MNIST and EMNIST from their IDX files (docs/tasks.md §16).

Pixels ÷255 into ``[0, 1]`` (float32, 784 per image, row-major; EMNIST's transposed images turned
back). EMNIST letters' labels 1–26 become 0–25. The training set is split over the clients by
``task.split`` (label-Dirichlet or shards) from the task's data stream; the data set's test set
is the test set. Models: the 2NN MLP (default) or LEAF's CNN (:mod:`asyncfl.tasks.models`).
"""

from __future__ import annotations

from pathlib import Path

from asyncfl.components.contracts import BuildContext
from asyncfl.config.datasets import IMAGE_SIDE, MNISTTask
from asyncfl.datasets.files import refuse
from asyncfl.datasets.idx import read_idx_images, read_idx_labels
from asyncfl.tasks.base import Task
from asyncfl.tasks.common import task_streams
from asyncfl.tasks.datasets_common import classification_task, require_files, split_indices
from asyncfl.tasks.models import image_model


def _present(root: Path, names: tuple[str, ...]) -> Path:
    """The first of a file's accepted names (:meth:`MNISTTask.file_alternatives`) under ``root``."""
    return next((root / n for n in names if (root / n).exists()), root / names[0])


def build_mnist(cfg: MNISTTask, ctx: BuildContext) -> Task:
    """Build the mnist task (see module docstring)."""
    num_clients, seed = ctx.clients, ctx.seed
    require_files(cfg)
    rng, torch_seed = task_streams(seed)
    root, files, classes = Path(cfg.path).expanduser(), cfg.file_alternatives(), cfg.classes()
    emnist, offset = cfg.variant != "mnist", 1 if cfg.variant == "emnist-letters" else 0
    x = read_idx_images(_present(root, files["train_x"]), IMAGE_SIDE, transposed=emnist)
    y = read_idx_labels(_present(root, files["train_y"]), classes, offset)
    xt = read_idx_images(_present(root, files["test_x"]), IMAGE_SIDE, transposed=emnist)
    yt = read_idx_labels(_present(root, files["test_y"]), classes, offset)
    for images, labels, key in ((x, y, "train"), (xt, yt, "test")):
        if len(images) != len(labels):
            raise_mismatch(root, files, key, len(images), len(labels))
    parts = split_indices(cfg, y, num_clients, rng)
    side = IMAGE_SIDE
    return classification_task("mnist", [(x[p], y[p]) for p in parts], (xt, yt),
                               lambda: image_model(cfg.model, side * side, classes, cfg.hidden, side), torch_seed, classes,
                               batched=cfg.model == "mlp")


def raise_mismatch(root: Path, files: dict[str, tuple[str, ...]], key: str, images: int, labels: int) -> None:
    raise refuse(_present(root, files[f"{key}_y"]), f"{labels} labels for the {images} images of "
                                                    f"{_present(root, files[f'{key}_x']).name}")
