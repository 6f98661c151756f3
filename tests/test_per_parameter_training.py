"""Local SGD taken parameter by parameter (asyncfl/compute/training.py ``_sgd_per_parameter``, the
LEAF CNN's fast path: docs/performance.md "The LEAF CNN") gives the same bits as the flat path that
differentiates the whole ``θ`` vector, for plain SGD, heavy ball, Nesterov and weight decay, on an
MLP and on LEAF's CNN."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest
import torch

from asyncfl.components.contracts import BuildContext
from asyncfl.compute.training import LocalJob, sgd_train
from asyncfl.config.datasets import FEMNISTTwinTask
from asyncfl.config.tasks import SyntheticTask
from asyncfl.tasks.base import Task
from asyncfl.tasks.femnist_twin import build_femnist_twin
from asyncfl.tasks.synthetic import build_synthetic


@dataclasses.dataclass
class FlatTask(Task):
    """The same task with its own batch_objective: the objective may read θ as a whole, so
    training takes the flat path."""

    def batch_objective(self, theta, k, x, y):
        return super().batch_objective(theta, k, x, y)


def _flat(task: Task) -> Task:
    fields = {f.name: getattr(task, f.name) for f in dataclasses.fields(Task)}
    return FlatTask(**fields)


def _cfg(**kw) -> SimpleNamespace:
    base = dict(lr=0.05, batch_size=20, epochs=None, local_steps=3, momentum=0.0, nesterov=False, weight_decay=0.0)
    return SimpleNamespace(**{**base, **kw})


SETTINGS = [dict(), dict(momentum=0.9), dict(momentum=0.9, nesterov=True, weight_decay=1e-3), dict(epochs=1, local_steps=None)]


def _mlp() -> Task:
    return build_synthetic(SyntheticTask(model="mlp", hidden=16, dim=12, classes=5), BuildContext(clients=3, seed=1))


@pytest.mark.parametrize("settings", SETTINGS, ids=["sgd", "momentum", "nesterov+decay", "epoch"])
def test_per_parameter_sgd_has_the_flat_paths_bits_on_an_mlp(settings):
    task = _mlp()
    flat = _flat(task)
    assert task.per_parameter and not flat.per_parameter
    start = task.initial_theta + 0.01 * torch.randn(task.dim, generator=torch.Generator().manual_seed(0), dtype=task.dtype)
    for k in range(task.num_clients):
        job = LocalJob(k, start, start, 0.0, seed=7 + k)
        got, want = sgd_train(task, _cfg(**settings), job), sgd_train(flat, _cfg(**settings), job)
        assert torch.equal(got, want) and not torch.equal(got, start)


def test_per_parameter_sgd_has_the_flat_paths_bits_on_the_leaf_cnn():
    task = build_femnist_twin(FEMNISTTwinTask(users=2), BuildContext(clients=2, seed=0))
    job = LocalJob(0, task.initial_theta, task.initial_theta, 0.0, seed=3)
    cfg = _cfg(local_steps=2, momentum=0.5)
    assert torch.equal(sgd_train(task, cfg, job), sgd_train(_flat(task), cfg, job))


def test_a_ridge_term_or_a_proximal_term_keeps_the_flat_path():
    task = _mlp()
    assert not dataclasses.replace(task, l2=0.1).per_parameter
    # μ > 0: the prox term reads θ whole; the result is the flat path's (same function, same bits)
    job = LocalJob(0, task.initial_theta, task.initial_theta + 0.1, 0.5, seed=1)
    assert torch.equal(sgd_train(task, _cfg(), job), sgd_train(_flat(task), _cfg(), job))


def test_with_parameters_computes_from_the_given_parameters_then_gives_the_model_its_own_back():
    """``Task.with_parameters``: inside ``run`` the objective is ``batch_objective`` at the given
    ``θ`` (same bits), also after ``run`` updates the views in place; afterwards the model holds
    its own parameter objects with their values unchanged."""
    task = _mlp()
    own = dict(task.model.named_parameters())
    values = {name: p.detach().clone() for name, p in own.items()}
    theta = task.initial_theta + 0.5
    data = task.clients[1]

    def run(objective):
        first = objective(1, data.x, data.y)
        theta.mul_(2.0)  # the named parameters are views of θ: the next call reads the new values
        return first, objective(1, data.x, data.y)

    first, second = task.with_parameters(task.unflatten(theta), run)
    assert torch.equal(first, task.batch_objective(theta / 2.0, 1, data.x, data.y))
    assert torch.equal(second, task.batch_objective(theta, 1, data.x, data.y)) and not torch.equal(first, second)
    assert dict(task.model.named_parameters()).keys() == own.keys()
    for name, p in task.model.named_parameters():
        assert p is own[name] and torch.equal(p, values[name])
