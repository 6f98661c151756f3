"""Server rules (docs/server-rules.md) against torch.optim driven with the same update sequence."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asyncfl.server.aggregation import Aggregate
from asyncfl.compose import build_rule as make_rule
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


def test_make_rule_builds_the_named_rule_from_its_own_keys():
    scenario = make_scenario({"server.rule": "nesterov", "server.beta": 0.3})
    assert scenario.config_of("rule").model_dump() == {"beta": 0.3}
    rule = make_rule(scenario)
    assert isinstance(rule, Nesterov) and rule.beta == 0.3


RULE_NAMES = ["sgd", "momentum", "nesterov", "adam", "ma-full", "ma-light"]


def _snapshot(state):
    """A deep copy of a state tree's tensors and arrays (to see whether anything wrote into it)."""
    if isinstance(state, torch.Tensor):
        return state.clone()
    if isinstance(state, np.ndarray):
        return state.copy()
    if isinstance(state, tuple):
        return type(state)(*map(_snapshot, state)) if hasattr(state, "_fields") else tuple(map(_snapshot, state))
    return state


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    if isinstance(a, tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a == b


@pytest.mark.parametrize("name", RULE_NAMES)
def test_pure_rules_never_write_into_the_state_they_are_given(name):
    """A rule that does not declare ``in_place_state`` leaves every state it was handed exactly as
    it was: re-running a step from an old state gives the same direction (the optax contract)."""
    rule = make_rule(make_scenario({"server.rule": name}))
    rs = _sequence(steps=12)
    state = rule.init(torch.zeros(7, dtype=torch.float64))
    history = []
    for t, r in enumerate(rs, start=1):
        history.append((t, r, state, _snapshot(state)))
        state = rule.direction(Aggregate(t, r, np.array([0.6, 0.3, 0.1])), state).state
    if rule.in_place_state:
        assert name == "ma-full"  # the one rule that declares it; its guard is tested in test_ma.py
        return
    for t, r, old, copy in history:
        assert _same(old, copy), f"{name} wrote into the state of step {t - 1}"
    t, r, old, _ = history[5]  # the same step again from its old state: the same direction
    again = rule.direction(Aggregate(t, r, np.array([0.6, 0.3, 0.1])), old)
    fresh_state = rule.init(torch.zeros(7, dtype=torch.float64))
    for s, rr in enumerate(rs[: t - 1], start=1):
        fresh_state = rule.direction(Aggregate(s, rr, np.array([0.6, 0.3, 0.1])), fresh_state).state
    assert torch.equal(again.direction, rule.direction(Aggregate(t, r, np.array([0.6, 0.3, 0.1])), fresh_state).direction)


def test_ma_full_declares_its_in_place_buffers_and_no_other_rule_does():
    declared = {name for name in RULE_NAMES if make_rule(make_scenario({"server.rule": name})).in_place_state}
    assert declared == {"ma-full"}
