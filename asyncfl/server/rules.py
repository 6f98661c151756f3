"""Server update rules as explicit-state transformations (docs/server-rules.md; STYLE: optax).

Every rule is a pair of pure functions: ``init(theta) -> state`` and
``direction(aggregate, state) -> RuleOutput(m_t, new_state, coefficients)``. The step
``θ_{t+1} = θ_t − η m_t`` is :func:`apply` and is the same for all rules. States are
NamedTuples of tensors and numbers, so a checkpoint is just that data.

Each rule is a component (:mod:`asyncfl.components.builtin`, docs/extending.md §5) whose builder
is its ``from_config(cfg, ctx)`` (the one builder shape; ``ctx`` unused by the built-ins): ``cfg`` is the rule's own config (its keys in ``[server]``, e.g.
:class:`asyncfl.config.server.MomentumConfig`; None for SGD, which has none);
:func:`asyncfl.compose.compose` builds the one a scenario names.
"""

from __future__ import annotations

from typing import Any, ClassVar, NamedTuple, Protocol

import numpy as np
import torch

from asyncfl.errors import ComponentError
from asyncfl.server.aggregation import Aggregate


class RuleOutput(NamedTuple):
    """``direction`` = ``m_t``; ``coefficients`` = what the rule used to weight history
    (``a_t`` for MA-full, ``(u_t, v_t)`` for MA-light, ``None`` otherwise), kept for analysis."""

    direction: torch.Tensor
    state: Any
    coefficients: np.ndarray | None = None


class ServerRule(Protocol):
    """``init(θ) -> state`` and ``direction(aggregate, state) -> RuleOutput`` (docs/server-rules.md §1).

    ``in_place_state``: False for a pure rule (``direction`` never writes into the state it is
    given). A rule that keeps a large buffer may write into it in place for speed and declare
    True; it must then never let an old state be silently reused: ``direction`` on a state that
    a later step has written to copies the buffers first, or raises when the data it needs is
    gone (MA-full with a window, see ``asyncfl.server.ma.MAFull``)."""

    in_place_state: ClassVar[bool] = False

    def init(self, theta: torch.Tensor) -> Any: ...

    def direction(self, aggregate: Aggregate, state: Any) -> RuleOutput: ...


def apply(theta: torch.Tensor, direction: torch.Tensor, lr: float, rule: object = None) -> torch.Tensor:
    """``θ_{t+1} = θ_t − η m_t`` (a new tensor: dispatched jobs keep the version they got).

    The one place every rule's direction meets θ, so the one shape check: ``m_t`` must be a
    tensor of θ's shape. Anything else — a scalar, which torch would silently broadcast over θ,
    or a vector of another size — is a :class:`~asyncfl.errors.ComponentError` naming the rule
    (``rule``, the rule object) and what it returned."""
    if not isinstance(direction, torch.Tensor) or direction.shape != theta.shape:
        got = f"a tensor of shape {tuple(direction.shape)}" if isinstance(direction, torch.Tensor) else f"a {type(direction).__name__}"
        who = f"{type(rule).__module__}.{type(rule).__qualname__}" if rule is not None else "the server rule"
        raise ComponentError(f"server.rule: {who}.direction returned {got} as the direction m_t; it must be a tensor of "
                             f"θ's shape {tuple(theta.shape)} (docs/server-rules.md §1)")
    return theta - lr * direction


class EmptyState(NamedTuple):
    pass


class SGD(ServerRule):
    """``m_t = r_t``; target ``M = I``."""

    @classmethod
    def from_config(cls, cfg: Any = None, ctx: Any = None) -> "SGD":
        return cls()

    def init(self, theta: torch.Tensor) -> EmptyState:
        return EmptyState()

    def direction(self, aggregate: Aggregate, state: EmptyState) -> RuleOutput:
        return RuleOutput(aggregate.r, state)


class TraceState(NamedTuple):
    trace: torch.Tensor
    started: bool


class Momentum(ServerRule):
    """Heavy ball: ``m_t = β m_{t−1} + r_t``, ``m_0 = 0``; target ``M[t,s] = β^(t−s)``.
    Identical to ``torch.optim.SGD(momentum=β, dampening=0)``."""

    def __init__(self, beta: float) -> None:
        self.beta = beta

    @classmethod
    def from_config(cls, cfg: Any, ctx: Any = None) -> "Momentum":
        return cls(cfg.beta)

    def init(self, theta: torch.Tensor) -> TraceState:
        return TraceState(torch.zeros_like(theta), False)

    def trace(self, aggregate: Aggregate, state: TraceState) -> torch.Tensor:
        """The heavy-ball buffer ``h_t = β h_{t−1} + r_t`` (one new tensor per step: torch.add
        with alpha fuses the scale and the sum)."""
        return torch.add(aggregate.r, state.trace, alpha=self.beta) if state.started else aggregate.r.clone()

    def direction(self, aggregate: Aggregate, state: TraceState) -> RuleOutput:
        m = self.trace(aggregate, state)
        return RuleOutput(m, TraceState(m, True))


def lookahead(r: torch.Tensor, h: torch.Tensor, beta: float) -> torch.Tensor:
    """Nesterov's look-ahead ``m_t = r_t + β h_t`` on a heavy-ball buffer ``h_t`` (shared by
    :class:`Nesterov` and MA-light's Nesterov target, docs/server-rules.md §5)."""
    return torch.add(r, h, alpha=beta)


class Nesterov(Momentum):
    """``h_t = β h_{t−1} + r_t``, ``m_t = r_t + β h_t``: the heavy-ball buffer with the look-ahead;
    target ``1+β`` at ``s = t``, ``β^(t−s+1)`` for ``s < t``. Identical to
    ``torch.optim.SGD(momentum=β, nesterov=True)``."""

    def direction(self, aggregate: Aggregate, state: TraceState) -> RuleOutput:
        h = self.trace(aggregate, state)
        return RuleOutput(lookahead(aggregate.r, h, self.beta), TraceState(h, True))


class AdamState(NamedTuple):
    count: int
    mu: torch.Tensor
    nu: torch.Tensor


class Adam(ServerRule):
    """Adam on ``r_t`` (as ``torch.optim.Adam``): ``m_t = m̂_t / (√v̂_t + ε)`` with bias-corrected
    first and second moments."""

    def __init__(self, beta1: float, beta2: float, eps: float) -> None:
        self.beta1, self.beta2, self.eps = beta1, beta2, eps

    @classmethod
    def from_config(cls, cfg: Any, ctx: Any = None) -> "Adam":
        return cls(cfg.beta, cfg.adam_beta2, cfg.adam_eps)

    def init(self, theta: torch.Tensor) -> AdamState:
        return AdamState(0, torch.zeros_like(theta), torch.zeros_like(theta))

    def direction(self, aggregate: Aggregate, state: AdamState) -> RuleOutput:
        g = aggregate.r
        count = state.count + 1
        mu = self.beta1 * state.mu + (1 - self.beta1) * g
        nu = self.beta2 * state.nu + (1 - self.beta2) * g * g
        mu_hat = mu / (1 - self.beta1**count)
        denom = (nu / (1 - self.beta2**count)).sqrt() + self.eps
        return RuleOutput(mu_hat / denom, AdamState(count, mu, nu))
