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
from asyncfl.compute.training import LocalJob, batch_schedule, owned, sgd_train
from asyncfl.config.datasets import FEMNISTTwinTask
from asyncfl.config.tasks import SyntheticTask
from asyncfl.tasks.base import ClientData, Task
from asyncfl.tasks.common import cross_entropy
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


@pytest.mark.parametrize("momentum", [0.0, 0.5], ids=["sgd (gradients scaled in place)", "momentum"])
def test_per_parameter_sgd_has_the_flat_paths_bits_on_the_leaf_cnn(momentum):
    task = build_femnist_twin(FEMNISTTwinTask(users=2), BuildContext(clients=2, seed=0))
    job = LocalJob(0, task.initial_theta, task.initial_theta, 0.0, seed=3)
    cfg = _cfg(local_steps=2, momentum=momentum)
    assert torch.equal(sgd_train(task, cfg, job), sgd_train(_flat(task), cfg, job))


def test_gradients_are_scaled_in_place_only_when_nothing_else_holds_them():
    a, b = torch.ones(3), torch.ones(3)
    assert owned((a, b))
    assert not owned((a, a))  # one tensor handed to two parameters
    assert not owned((a, a[:2]))  # two views of one storage
    assert not owned((a, torch.ones(1).expand(3)))  # an expanded tensor: one element three times


class SharedGradient(torch.nn.Module):
    """``x (W₁ + W₂)``: autograd hands ``W₁`` and ``W₂`` the very same gradient tensor."""

    def __init__(self) -> None:
        super().__init__()
        self.w1 = torch.nn.Parameter(torch.randn(4, 3, generator=torch.Generator().manual_seed(0)))
        self.w2 = torch.nn.Parameter(torch.randn(4, 3, generator=torch.Generator().manual_seed(1)))

    def forward(self, x):
        return x @ (self.w1 + self.w2)


def test_a_gradient_shared_by_two_parameters_is_not_scaled_twice():
    g = torch.Generator().manual_seed(2)
    x, y = torch.randn(10, 4, generator=g), torch.randint(0, 3, (10,), generator=g)
    task = Task(name="shared", model=SharedGradient(), clients=[ClientData(x, y)], test=ClientData(x, y),
                loss_fn=cross_entropy, classification=True)
    job = LocalJob(0, task.initial_theta, task.initial_theta, 0.0, seed=1)
    got = sgd_train(task, _cfg(batch_size=5), job)
    # independent: the same two steps by hand, θ ← θ − 0.05 ∇ on the job's batches
    w1, w2 = (p.detach().clone().requires_grad_() for p in (task.model.w1, task.model.w2))
    for idx in batch_schedule(10, _cfg(batch_size=5), torch.Generator().manual_seed(1)):
        loss = cross_entropy(x[idx] @ (w1 + w2), y[idx]).mean()
        g1, g2 = torch.autograd.grad(loss, (w1, w2))
        assert g1 is g2  # the case this test is about
        with torch.no_grad():
            w1, w2 = (w - torch.mul(gw, 0.05) for w, gw in ((w1, g1), (w2, g2)))
        w1, w2 = w1.requires_grad_(), w2.requires_grad_()
    assert torch.equal(got, torch.cat([w1.detach().reshape(-1), w2.detach().reshape(-1)]))


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
