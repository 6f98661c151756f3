"""LEAF FEMNIST and Shakespeare from a user's LEAF folder (docs/tasks.md §13–14).

One client per user: the ``population.clients`` users chosen by the seeded key of
:mod:`asyncfl.datasets.users` among those with at least ``task.min_samples`` training samples;
the test set is those users' LEAF test samples. The seed picks the users and the initial model,
never the data. FEMNIST's model is LEAF's CNN (or the 2NN MLP); Shakespeare's is LEAF's character
LSTM (:mod:`asyncfl.tasks.models`).
"""

from __future__ import annotations

from pathlib import Path

from asyncfl.components.contracts import BuildContext
from asyncfl.config.datasets import FEMNIST_CLASSES, IMAGE_SIDE, FEMNISTTask, ShakespeareTask
from asyncfl.datasets.leaf import LEAF_CHARACTERS, femnist_arrays, read_leaf, shakespeare_arrays
from asyncfl.tasks.base import Task
from asyncfl.tasks.common import task_streams
from asyncfl.tasks.datasets_common import classification_task, require_files
from asyncfl.tasks.models import CharLSTM, image_model


def build_femnist(cfg: FEMNISTTask, ctx: BuildContext) -> Task:
    """Build the femnist task (see module docstring)."""
    num_clients, seed = ctx.clients, ctx.seed
    require_files(cfg)
    _, torch_seed = task_streams(seed)
    clients, test = read_leaf(Path(cfg.path).expanduser(), femnist_arrays, num_clients, seed, cfg.min_samples)
    side = IMAGE_SIDE
    return classification_task("femnist", [xy for _, xy in clients], test,
                               lambda: image_model(cfg.model, side * side, FEMNIST_CLASSES, cfg.hidden, side),
                               torch_seed, FEMNIST_CLASSES, batched=cfg.model == "mlp")


def build_shakespeare(cfg: ShakespeareTask, ctx: BuildContext) -> Task:
    """Build the shakespeare task (see module docstring)."""
    num_clients, seed = ctx.clients, ctx.seed
    require_files(cfg)
    _, torch_seed = task_streams(seed)
    clients, test = read_leaf(Path(cfg.path).expanduser(), shakespeare_arrays, num_clients, seed, cfg.min_samples)
    vocab = len(LEAF_CHARACTERS)
    return classification_task("shakespeare", [xy for _, xy in clients], test,
                               lambda: CharLSTM(vocab, cfg.embed, cfg.hidden, cfg.layers), torch_seed, vocab,
                               batched=False, batched_on_accelerator=False)  # aten::lstm has no vmap rule
