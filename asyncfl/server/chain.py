"""Rules composed of rules: the global-norm clip, and the chain (docs/server-rules.md §10; STYLE:
optax's ``chain``).

* :func:`clip_by_norm` — ``clip(r, τ) = r · min(1, τ/‖r‖₂)``: unchanged when ``‖r‖₂ ≤ τ`` (the zero
  vector included), else rescaled to norm ``τ``; :class:`Clip` is the rule ``m_t = clip(r_t, τ)``.
* :class:`Chain` — links ``f_1 … f_n`` (any rules) applied in order: link ``k`` sees the step's
  aggregate with ``r_t`` replaced by the direction of link ``k − 1``,

  ```
  d⁰_t = r_t,   (d^k_t, s^k_t) = f_k.direction((t, d^{k−1}_t, W row t), s^k_{t−1}),   m_t = dⁿ_t ,
  ```

  and its state is the tuple of its links' states (:class:`ChainState`), so a checkpoint holds
  each link's own declared state. ``chain(clip(τ), momentum(β))`` is heavy ball on the clipped
  aggregate, ``m_t = β m_{t−1} + clip(r_t, τ)``.

The links are built by the chain's builder :func:`build_chain` from the config a scenario gives
it (its links and their keys, :meth:`asyncfl.components.Component.own_config`).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

from asyncfl.server.aggregation import Aggregate
from asyncfl.server.rules import EmptyState, RuleOutput, ServerRule


def clip_by_norm(r: torch.Tensor, tau: float) -> torch.Tensor:
    """``r · min(1, τ/‖r‖₂)``; ``r`` itself when ``‖r‖₂ ≤ τ``."""
    norm = float(torch.linalg.vector_norm(r))
    return r if norm <= tau else r * (tau / norm)


class Clip(ServerRule):
    """``m_t = clip(r_t, τ)`` (:func:`clip_by_norm`); no state. As a chain's first link, every
    later link sees the clipped aggregate."""

    def __init__(self, tau: float) -> None:
        self.tau = tau

    @classmethod
    def from_config(cls, cfg: Any, ctx: Any = None) -> "Clip":
        return cls(cfg.clip_tau)

    def init(self, theta: torch.Tensor) -> EmptyState:
        return EmptyState()

    def direction(self, aggregate: Aggregate, state: EmptyState) -> RuleOutput:
        return RuleOutput(clip_by_norm(aggregate.r, self.tau), state)


class ChainState(NamedTuple):
    """The chain's state: its links' states, in the chain's order."""

    links: tuple[Any, ...]


class Chain(ServerRule):
    """Links applied in order, each to the direction of the one before (module docstring).
    ``record``: the index of the link whose coefficients the chain passes on (the one link that
    records them, ``RuleTraits.coefficients``), None: the chain records none. The chain writes
    into its state in place exactly when one of its links does."""

    def __init__(self, links: tuple[ServerRule, ...], record: int | None = None) -> None:
        if not links:
            raise ValueError("a chain needs at least one link")
        self.links, self.record = tuple(links), record
        self.in_place_state = any(link.in_place_state for link in self.links)  # type: ignore[misc]

    def init(self, theta: torch.Tensor) -> ChainState:
        return ChainState(tuple(link.init(theta) for link in self.links))

    def direction(self, aggregate: Aggregate, state: ChainState) -> RuleOutput:
        states, coefficients = [], None
        for k, (link, link_state) in enumerate(zip(self.links, state.links)):
            out = link.direction(aggregate, link_state)
            states.append(out.state)
            if k == self.record:
                coefficients = out.coefficients
            aggregate = aggregate._replace(r=out.direction)
        return RuleOutput(aggregate.r, ChainState(tuple(states)), coefficients)


def build_chain(cfg: Any, ctx: Any) -> Chain:
    """The chain a scenario names: each of ``cfg.links`` (the link components, in order) built by
    its own builder from its own keys and the chain's context; the coefficients passed on are
    those of the one link that records them."""
    links = cfg.links
    recording = [k for k, link in enumerate(links) if link.traits.coefficients is not None]
    return Chain(tuple(link.make(link.own_config(cfg), ctx) for link in links),
                 recording[0] if len(recording) == 1 else None)
