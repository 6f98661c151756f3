"""The models of the data sets read from disk (docs/tasks.md §13–18). Every model keeps leading
axes (works on one sample, a batch, or a batch of batches) and is built only from layers that
``torch.func.vmap`` can batch, so every task trains through the batched path (docs/tasks.md §9).

* :func:`leaf_cnn` — the CNN of LEAF's FEMNIST baseline (Caldas et al., 2018): on a 28×28 grey
  image, ``Conv2d(1, 32, 5, padding 2) − ReLU − MaxPool(2) − Conv2d(32, 64, 5, padding 2) − ReLU
  − MaxPool(2) − Flatten − Linear(7·7·64, 2048) − ReLU − Linear(2048, classes)``.
* :func:`cifar_cnn` — a small CIFAR CNN (TensorFlow's CNN tutorial): ``Conv2d(3, 32, 3) − ReLU −
  MaxPool(2) − Conv2d(32, 64, 3) − ReLU − MaxPool(2) − Conv2d(64, 64, 3) − ReLU − Flatten −
  Linear(4·4·64, 64) − ReLU − Linear(64, classes)`` on 3×32×32 inputs (no padding).
* :class:`CharLSTM` — the character LSTM of LEAF's Shakespeare baseline: ``Embedding(80, 8)``, two
  LSTM layers of 256 units, ``Linear(256, 80)`` on the last step's output (the next character).
  torch's fused ``nn.LSTM`` has no batching rule (``vmap`` fails on ``aten::lstm``), so the layer
  is written out (:class:`LSTMLayer`) with torch's gate order and equations, one bias per gate
  (LEAF's TensorFlow cell has one); ``tests/test_datasets.py`` checks it against ``nn.LSTM``.
"""

from __future__ import annotations

import math

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


class LSTMLayer(nn.Module):
    """One LSTM layer over the second-to-last axis of ``x`` (``(…, T, inputs)``), state from zero::

        (i, f, g, o) = split₄(W_ih x_t + b + W_hh h_{t−1})
        c_t = σ(f) ⊙ c_{t−1} + σ(i) ⊙ tanh(g),   h_t = σ(o) ⊙ tanh(c_t)

    Returns every ``h_t`` (``(…, T, hidden)``). Parameters start ``U(−1/√hidden, 1/√hidden)`` as
    torch's ``nn.LSTM``."""

    def __init__(self, inputs: int, hidden: int) -> None:
        super().__init__()
        self.hidden = hidden
        self.ih = nn.Linear(inputs, 4 * hidden)
        self.hh = nn.Linear(hidden, 4 * hidden, bias=False)
        bound = 1.0 / math.sqrt(hidden)
        for p in self.parameters():
            nn.init.uniform_(p, -bound, bound)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pre = self.ih(x)  # every step's input projection at once
        h = pre.new_zeros(*pre.shape[:-2], self.hidden)
        c = h
        out = []
        for t in range(pre.shape[-2]):
            i, f, g, o = (pre[..., t, :] + self.hh(h)).chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            out.append(h)
        return torch.stack(out, dim=-2)


class CharLSTM(nn.Module):
    """LEAF's Shakespeare model (module doc): character codes ``(…, T)`` → logits of the next one."""

    def __init__(self, vocab: int = 80, embed: int = 8, hidden: int = 256, layers: int = 2) -> None:
        super().__init__()
        self.embedding = nn.Embedding(vocab, embed)
        self.layers = nn.ModuleList([LSTMLayer(embed if i == 0 else hidden, hidden) for i in range(layers)])
        self.out = nn.Linear(hidden, vocab)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embedding(x.long())
        for layer in self.layers:
            h = layer(h)
        return self.out(h[..., -1, :])
