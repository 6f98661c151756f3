"""The models of the data sets read from disk (docs/tasks.md §13–18). Every model keeps leading
axes (works on one sample or a batch).

* :func:`leaf_cnn` — the CNN of LEAF's FEMNIST baseline (Caldas et al., 2018): on a 28×28 grey
  image, ``Conv2d(1, 32, 5, padding 2) − ReLU − MaxPool(2) − Conv2d(32, 64, 5, padding 2) − ReLU
  − MaxPool(2) − Flatten − Linear(7·7·64, 2048) − ReLU − Linear(2048, classes)``.
* :func:`cifar_cnn` — a small CIFAR CNN (TensorFlow's CNN tutorial): ``Conv2d(3, 32, 3) − ReLU −
  MaxPool(2) − Conv2d(32, 64, 3) − ReLU − MaxPool(2) − Conv2d(64, 64, 3) − ReLU − Flatten −
  Linear(4·4·64, 64) − ReLU − Linear(64, classes)`` on 3×32×32 inputs (no padding).
* :class:`CharLSTM` — the character LSTM of LEAF's Shakespeare baseline: ``Embedding(80, 8)``, two
  LSTM layers of 256 units, ``Linear(256, 80)`` on the last step's output (the next character).

Batched training (docs/tasks.md §9): ``vmap`` runs the two CNNs, but slower than one client at a
time on CPU (stacked weights are copied and transposed at every step: LEAF's CNN 0.27×, the CIFAR
CNN 0.73× the per-client loop's speed, measured on 8 clients × 5 steps of batch 20), and torch's
fused LSTM has no batching rule at all (``vmap`` fails on ``aten::lstm``; an LSTM written out in
``vmap``-able operations trained at 0.31× the loop's speed, and its loop 3.7× slower than torch's
fused kernel). So the tasks built on these models declare ``Task.batched_training = False`` and
``train_batched`` trains their jobs one by one; only the MLPs (``mlp``, the fused path, 2.0× the
loop) are batched.
"""

from __future__ import annotations

import torch
from torch import nn

from asyncfl.tasks.common import Reshape, mlp


def leaf_cnn(classes: int, side: int = 28) -> nn.Sequential:
    """LEAF's FEMNIST CNN (module doc) for ``side × side`` grey images given as ``side²`` pixels."""
    return nn.Sequential(
        Reshape(1, side, side),
        nn.Conv2d(1, 32, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 5, padding=2), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(-3), nn.Linear(64 * (side // 4) ** 2, 2048), nn.ReLU(), nn.Linear(2048, classes),
    )


def cifar_cnn(classes: int) -> nn.Sequential:
    """The small CIFAR CNN (module doc) for 3×32×32 images given as 3072 values (channel-major)."""
    return nn.Sequential(
        Reshape(3, 32, 32),
        nn.Conv2d(3, 32, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(64, 64, 3), nn.ReLU(),
        nn.Flatten(-3), nn.Linear(4 * 4 * 64, 64), nn.ReLU(), nn.Linear(64, classes),
    )


def image_model(kind: str, pixels: int, classes: int, hidden: int, side: int = 28) -> nn.Module:
    """``cnn``: :func:`leaf_cnn`; ``mlp``: ``pixels → hidden → hidden → classes`` with ReLU (the
    "2NN" of McMahan et al., 2017, which takes the fused MLP path of docs/tasks.md §9)."""
    return leaf_cnn(classes, side) if kind == "cnn" else mlp([pixels, hidden, hidden, classes])


class CharLSTM(nn.Module):
    """LEAF's Shakespeare model (module doc): character codes ``(…, T)`` → logits of the next one.
    torch's ``nn.LSTM`` (gates ``i, f, g, o``; ``c_t = σ(f) ⊙ c_{t−1} + σ(i) ⊙ tanh(g)``,
    ``h_t = σ(o) ⊙ tanh(c_t)``, state from zero; two bias vectors per layer, which sum to LEAF's one)."""

    def __init__(self, vocab: int = 80, embed: int = 8, hidden: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.lstm = nn.LSTM(embed, hidden, layers, batch_first=True)
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, _ = self.lstm(self.embedding(x.long()))
        return self.out(h[:, -1, :])
