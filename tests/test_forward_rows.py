"""Evaluation's forward pass in pieces (asyncfl/tasks/forward_rows.py, docs/tasks.md §1): a model
with large activations is evaluated a few dozen rows at a time, with the same numbers as one pass."""

from __future__ import annotations

import math

import pytest
import torch

from asyncfl.tasks import ClientData, Task
from asyncfl.tasks.common import cross_entropy, seeded_model
from asyncfl.tasks.forward_rows import ACTIVATION_BUDGET, forward_rows, largest_activation, pieces
from asyncfl.tasks.models import CharLSTM, cifar_cnn, leaf_cnn, mlp


def test_pieces_cover_the_rows_and_the_last_piece_takes_the_remainder() -> None:
    assert pieces(10, 3) == [(0, 3), (3, 6), (6, 10)]  # 10 = 3 + 3 + 4: no piece of 1 row
    assert pieces(9, 3) == [(0, 3), (3, 6), (6, 9)]
    assert pieces(3, 3) == [(0, 3)]
    assert pieces(2, 3) == [(0, 2)]  # a chunk shorter than a piece stays whole, as it was
    assert pieces(0, 3) == []
    assert pieces(8192, 83)[-1] == (97 * 83, 8192)  # 8192 = 98 · 83 + 58: 97 pieces of 83, the last 141 rows


def test_rows_are_the_budget_over_the_largest_activation_clamped_to_the_chunk() -> None:
    assert forward_rows(100_352, 8192) == ACTIVATION_BUDGET // 100_352 == 83
    assert forward_rows(800, 8192) == 8192  # small models: one pass per chunk, as before
    assert forward_rows(10**9, 8192) == 1


def test_the_largest_activation_of_leaf_cnn_is_its_first_convolution() -> None:
    model = leaf_cnn(62).eval()
    # 32 channels × 28 × 28 float32 (the convolution's and the ReLU's outputs) for one row
    assert largest_activation(model, model, torch.zeros(1, 784)) == 32 * 28 * 28 * 4
    assert largest_activation(model, model, torch.zeros(5, 784)) == 5 * 32 * 28 * 28 * 4


def test_the_probe_leaves_no_hook_behind() -> None:
    model = mlp([4, 3, 2])
    largest_activation(model, model, torch.zeros(1, 4))
    assert all(not m._forward_hooks for m in model.modules())


def _task(make, x: torch.Tensor, y: torch.Tensor) -> Task:
    return Task(name="t", model=seeded_model(make, 0, torch.float32), clients=[ClientData(x, y)],
                test=ClientData(x, y), loss_fn=cross_entropy, classification=True)


def _one_pass(task: Task, theta: torch.Tensor, data: ClientData) -> tuple[float, float]:
    """The loss and accuracy of one forward pass over all rows, summed as before the pieces."""
    with torch.no_grad(), task.evaluating():
        out = task.outputs(theta, data.x)
        loss = float(cross_entropy(out, data.y).sum(dtype=torch.float64)) / len(data)
        return loss, float((out.argmax(-1) == data.y).sum()) / len(data)


g = torch.Generator().manual_seed(0)
MODELS = {  # large activations, so several pieces per chunk; rows chosen so the pieces are uneven
    "leaf-cnn": (lambda: leaf_cnn(62), torch.rand(201, 784, generator=g), 62),
    "cifar-cnn": (lambda: cifar_cnn(10), torch.randn(190, 3072, generator=g), 10),
    "char-lstm": (lambda: CharLSTM(), torch.randint(0, 80, (220, 80), generator=g, dtype=torch.uint8), 80),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_evaluation_in_pieces_has_the_bits_of_one_pass(name: str) -> None:
    make, x, classes = MODELS[name]
    task = _task(make, x, torch.randint(0, classes, (len(x),), generator=g))
    theta = task.initial_theta
    with torch.no_grad(), task.evaluating():
        rows = task._forward_rows(theta, x)
    assert 4 <= rows < len(x) // 2 or name == "char-lstm" and rows < len(x)  # two or more pieces, none tiny
    loss, accuracy = _one_pass(task, theta, task.test)
    got = task.evaluate(theta)
    assert got["loss"] == loss and got["accuracy"] == accuracy  # bit for bit, not approximately
    assert task.train_loss(theta) == loss  # the same rows, pooled as one client


def test_a_small_model_still_runs_one_pass_per_chunk() -> None:
    x = torch.rand(50, 20, generator=g)
    task = _task(lambda: mlp([20, 200, 200, 10]), x, torch.randint(0, 10, (50,), generator=g))
    with torch.no_grad(), task.evaluating():
        assert task._forward_rows(task.initial_theta, x) == 8192
    assert not math.isnan(task.evaluate(task.initial_theta)["loss"])
