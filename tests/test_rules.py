"""Server rules (docs/server-rules.md) against torch.optim driven with the same update sequence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asyncfl.server.aggregation import Aggregate
from asyncfl.server.compose import make_rule
from asyncfl.server.rules import Adam, Momentum, Nesterov, SGD, apply

from conftest import make_scenario


def _sequence(steps: int = 25, dim: int = 7, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(dim, generator=g, dtype=torch.float64) for _ in range(steps)]


def _trajectory(rule, rs, lr):
    theta = torch.linspace(-1, 1, rs[0].numel(), dtype=torch.float64)
    state = rule.init(theta)
    out = [theta]
    for t, r in enumerate(rs, start=1):
        res = rule.direction(Aggregate(t, r, np.ones(1)), state)
        state = res.state
        theta = apply(theta, res.direction, lr)
        out.append(theta)
    return torch.stack(out)


def _torch_trajectory(make_opt, rs):
    p = torch.nn.Parameter(torch.linspace(-1, 1, rs[0].numel(), dtype=torch.float64))
    opt = make_opt([p])
    out = [p.detach().clone()]
    for r in rs:
        p.grad = r.clone()
        opt.step()
        out.append(p.detach().clone())
    return torch.stack(out)


@pytest.mark.parametrize("lr,beta", [(0.1, 0.9), (0.7, 0.5), (1.0, 0.0)])
def test_momentum_equals_torch_sgd_with_momentum(lr, beta):
    rs = _sequence()
    ours = _trajectory(Momentum(beta), rs, lr)
    ref = _torch_trajectory(lambda p: torch.optim.SGD(p, lr=lr, momentum=beta), rs)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("lr,beta", [(0.1, 0.9), (0.3, 0.6)])
def test_nesterov_equals_torch_sgd_nesterov(lr, beta):
    rs = _sequence(seed=1)
    ours = _trajectory(Nesterov(beta), rs, lr)
    ref = _torch_trajectory(lambda p: torch.optim.SGD(p, lr=lr, momentum=beta, nesterov=True), rs)
    torch.testing.assert_close(ours, ref, rtol=0, atol=1e-12)


@pytest.mark.parametrize("lr,b1,b2,eps", [(0.01, 0.9, 0.999, 1e-8), (0.1, 0.5, 0.9, 1e-3)])
def test_adam_equals_torch_adam(lr, b1, b2, eps):
    rs = _sequence(seed=2)
    ours = _trajectory(Adam(b1, b2, eps), rs, lr)
    ref = _torch_trajectory(lambda p: torch.optim.Adam(p, lr=lr, betas=(b1, b2), eps=eps), rs)
    torch.testing.assert_close(ours, ref, rtol=1e-10, atol=1e-12)


def test_sgd_is_plain_gradient_step():
    rs = _sequence(steps=3)
    ours = _trajectory(SGD(), rs, 0.5)
    ref = _torch_trajectory(lambda p: torch.optim.SGD(p, lr=0.5), rs)
    torch.testing.assert_close(ours, ref, rtol=0, atol=0)


def test_momentum_unrolls_to_target_row():
    """m_t = Σ_s β^(t−s) r_s (the target row M[t, :] of docs/server-rules.md)."""
    beta, rs = 0.8, _sequence(steps=6, dim=3, seed=4)
    rule, state = Momentum(beta), None
    state = rule.init(rs[0])
    for t, r in enumerate(rs, start=1):
        res = rule.direction(Aggregate(t, r, np.ones(1)), state)
        state = res.state
        expected = sum(beta ** (t - s) * rs[s - 1] for s in range(1, t + 1))
        torch.testing.assert_close(res.direction, expected, rtol=0, atol=1e-12)


def test_make_rule_reads_the_server_section():
    scenario = make_scenario({"server.rule": "nesterov", "server.beta": 0.3})
    rule = make_rule(scenario.server)
    assert isinstance(rule, Nesterov) and rule.beta == 0.3
