"""The ``clipped-momentum`` server rule: ``m_t = β m_{t−1} + clip(r_t, τ)``, with
``clip(r, τ) = r · min(1, τ/‖r‖)`` (docs/extending.md §5).

Written by hand to show a rule with a hyper-parameter and its own state. The same rule is also
a chain of asyncfl's built-in rules, with the same keys: ``rule = "chain"``,
``chain = ["clip", "momentum"]`` (docs/server-rules.md §10; tests/test_chain.py compares the two
step by step and over whole runs)."""

from typing import NamedTuple

import torch

from asyncfl import Aggregate, RuleOutput, ServerRule


class ClippedTrace(NamedTuple):
    """The rule's state: the momentum buffer and the number of aggregates clipped so far."""

    trace: torch.Tensor
    clipped: int


class ClippedMomentum(ServerRule):
    def __init__(self, beta: float, tau: float) -> None:
        self.beta, self.tau = beta, tau

    @classmethod
    def from_config(cls, cfg, ctx) -> "ClippedMomentum":
        return cls(cfg.beta, cfg.clip_tau)

    def init(self, theta: torch.Tensor) -> ClippedTrace:
        return ClippedTrace(torch.zeros_like(theta), 0)

    def direction(self, aggregate: Aggregate, state: ClippedTrace) -> RuleOutput:
        r = aggregate.r
        norm = float(torch.linalg.vector_norm(r))
        scale = min(1.0, self.tau / norm) if norm > 0 else 1.0
        m = self.beta * state.trace + scale * r
        return RuleOutput(m, ClippedTrace(m, state.clipped + (scale < 1.0)))
