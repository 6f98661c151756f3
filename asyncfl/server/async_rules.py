"""Server rules built for staleness: the delay-adaptive step, and FADAS (docs/async-optimisers.md).

Both read the buffer's largest staleness from the aggregate's staleness-indexed weights,
``τ_max,t = max{τ : weights[τ] ≠ 0}`` (docs/protocol.md §7), so they are rules in the sense of
:mod:`asyncfl.server.rules`: pure ``init`` / ``direction`` on NamedTuple state.

* :func:`delay_scale` — ``s_t = 1`` if ``τ_max,t ≤ τ_c`` else ``min(1, κ/τ_max,t)``
  (docs/async-optimisers.md §2); :class:`DelayScaled` multiplies any rule's direction by it;
* :class:`AMSGrad` — FADAS's server optimiser, AMSGrad without bias correction (§3);
* :class:`FADAS` = ``DelayScaled(AMSGrad)``; :class:`DelayAdaptiveSGD` = ``DelayScaled(SGD)``.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import torch

from asyncfl.config.server import DelayScaleConfig, FADASConfig
from asyncfl.server.aggregation import Aggregate
from asyncfl.server.rules import SGD, RuleOutput, ServerRule


def max_staleness(weights: np.ndarray) -> int:
    """``τ_max = max{τ : weights[τ] ≠ 0}`` of one staleness-indexed row of ``W`` (0 for an empty
    or all-zero row)."""
    nonzero = np.flatnonzero(np.asarray(weights) != 0)
    return int(nonzero[-1]) if nonzero.size else 0


def delay_scale(tau_max: int, threshold: int, kappa: float) -> float:
    """``s_t = 1`` when ``τ_max ≤ τ_c``, else ``min(1, κ / τ_max)`` (docs/async-optimisers.md §2)."""
    if tau_max <= threshold:
        return 1.0
    return min(1.0, kappa / tau_max)


class DelayScaled(ServerRule):
    """``m_t = s_t · m_t^inner`` with :func:`delay_scale` of the aggregate's ``τ_max``; the inner
    rule's state is the state. With ``delay = None`` the inner rule's direction is unchanged."""

    def __init__(self, inner: ServerRule, delay: DelayScaleConfig | None) -> None:
        self.inner, self.delay = inner, delay

    def init(self, theta: torch.Tensor) -> Any:
        return self.inner.init(theta)

    def scale(self, aggregate: Aggregate) -> float:
        if self.delay is None:
            return 1.0
        return delay_scale(max_staleness(aggregate.weights), self.delay.delay_threshold, self.delay.delay_kappa)

    def direction(self, aggregate: Aggregate, state: Any) -> RuleOutput:
        out = self.inner.direction(aggregate, state)
        s = self.scale(aggregate)
        return out if s == 1.0 else out._replace(direction=out.direction * s)


class AMSGradState(NamedTuple):
    mu: torch.Tensor  # first moment m_t
    nu: torch.Tensor  # second moment v_t
    nu_max: torch.Tensor  # v̂_t = max(v̂_{t−1}, v_t)


class AMSGrad(ServerRule):
    """``m_t = β₁m_{t−1} + (1−β₁)r_t``, ``v_t = β₂v_{t−1} + (1−β₂)r_t⊙r_t``,
    ``v̂_t = max(v̂_{t−1}, v_t)``, direction ``m_t ⊘ (√v̂_t + ε)``; all zero at the start, no bias
    correction (docs/async-optimisers.md §3)."""

    def __init__(self, beta1: float, beta2: float, eps: float) -> None:
        self.beta1, self.beta2, self.eps = beta1, beta2, eps

    def init(self, theta: torch.Tensor) -> AMSGradState:
        zero = torch.zeros_like(theta)
        return AMSGradState(zero, zero.clone(), zero.clone())

    def direction(self, aggregate: Aggregate, state: AMSGradState) -> RuleOutput:
        r = aggregate.r
        mu = self.beta1 * state.mu + (1 - self.beta1) * r
        nu = self.beta2 * state.nu + (1 - self.beta2) * r * r
        nu_max = torch.maximum(state.nu_max, nu)
        return RuleOutput(mu / (nu_max.sqrt() + self.eps), AMSGradState(mu, nu, nu_max))


class FADAS(DelayScaled):
    """FADAS (Wang et al., ICML 2024): :class:`AMSGrad` on ``r_t`` with the delay-adaptive step
    (docs/async-optimisers.md §3)."""

    def __init__(self, cfg: FADASConfig) -> None:
        delay = DelayScaleConfig(delay_threshold=cfg.delay_threshold, delay_kappa=cfg.delay_kappa) if cfg.delay_adaptive else None
        super().__init__(AMSGrad(cfg.beta, cfg.fadas_beta2, cfg.fadas_eps), delay)
        self.cfg = cfg

    @classmethod
    def from_config(cls, cfg: FADASConfig, ctx: Any = None) -> "FADAS":
        return cls(cfg)


class DelayAdaptiveSGD(DelayScaled):
    """FedBuff's plain step with the delay-adaptive step size: ``m_t = s_t r_t``
    (docs/async-optimisers.md §2)."""

    def __init__(self, cfg: DelayScaleConfig) -> None:
        super().__init__(SGD(), cfg)

    @classmethod
    def from_config(cls, cfg: DelayScaleConfig, ctx: Any = None) -> "DelayAdaptiveSGD":
        return cls(cfg)
