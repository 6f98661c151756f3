"""CA2FL: cached-update calibration on the FedBuff protocol (docs/async-optimisers.md §4; Wang et
al., ICLR 2024).

The server keeps every client's latest pseudo-gradient ``h_k`` (its cache, 0 before the client's
first accepted upload) and, at step ``t`` with the accepted uploads ``𝒮_t`` (``|𝒮_t| = C``),
replaces the aggregate by the calibrated

    v_t = h̄_t + (1/C) Σ_{i ∈ 𝒮_t} (Δ_i − h_{k_i}),      h̄_t = (1/N) Σ_k h_k,

where ``h`` is the cache at the start of the step; then ``h_{k_i} ← Δ_i`` for every accepted
upload (a client with two uploads in one step keeps the later one: both were calibrated with the
cache of the step's start). ``v_t`` goes through the server rule like ``r_t`` would
(``server.rule = "sgd"`` is the paper's ``θ_{t+1} = θ_t − η v_t``), with the aggregate's row of
``W`` unchanged. The cache is declared state (an ``N × d`` tensor) and the sum ``Σ_k h_k`` is
kept with it, so a step costs ``O(C·d)`` besides the copy of the cache that keeps the state pure.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Sequence

import torch

from asyncfl.server.aggregation import Aggregator, ClientUpdate
from asyncfl.server.algorithms import AlgorithmContext, PseudoGradient, ServerStreams, StepInfo
from asyncfl.server.rules import ServerRule, apply


class CA2FLState(NamedTuple):
    rule: Any
    cache: torch.Tensor  # (N, d): h_k, the latest accepted pseudo-gradient of client k
    cache_sum: torch.Tensor  # Σ_k h_k


def calibrated_aggregate(cache: torch.Tensor, cache_sum: torch.Tensor, clients: Sequence[int],
                         deltas: Sequence[torch.Tensor]) -> torch.Tensor:
    """``v = (1/N) Σ_k h_k + (1/C) Σ_i (Δ_i − h_{k_i})`` with ``C = len(deltas)``."""
    fresh = torch.stack(list(deltas)).sum(dim=0) - cache[list(clients)].sum(dim=0)
    return cache_sum / cache.shape[0] + fresh / len(deltas)


class CA2FL(PseudoGradient):
    """Clients as in FedBuff (``Δ_k = θ_s − θ_k^local``); the server calibrates with the cache
    (module docstring). Private runs are refused by the scenario (``AlgorithmTraits.private``
    is false): the cache needs every upload. The cache starts at 0 (the paper's choice)."""

    def __init__(self, num_clients: int, aggregator: Aggregator, rule: ServerRule, lr: float, mu: float = 0.0) -> None:
        super().__init__(aggregator, rule, lr, mu)
        self.num_clients = num_clients

    def init(self, theta: torch.Tensor) -> CA2FLState:  # type: ignore[override]
        cache = theta.new_zeros((self.num_clients, *theta.shape))
        return CA2FLState(self.rule.init(theta), cache, torch.zeros_like(theta))

    def server_update(self, theta: torch.Tensor, step: int, updates: Sequence[ClientUpdate],
                      state: CA2FLState, streams: ServerStreams) -> tuple[torch.Tensor, CA2FLState, StepInfo]:  # type: ignore[override]
        aggregate = self.aggregator.aggregate(step, updates, streams.noise)  # its row of W
        clients = [u.client for u in updates]
        v = calibrated_aggregate(state.cache, state.cache_sum, clients, [u.message for u in updates])
        out = self.rule.direction(aggregate._replace(r=v), state.rule)
        cache, cache_sum = state.cache.clone(), state.cache_sum.clone()
        for u in updates:  # in order: a client's later upload of this step wins
            cache_sum += u.message - cache[u.client]
            cache[u.client] = u.message
        info = StepInfo(coefficients=out.coefficients, private_counts=aggregate.raw_counts)
        return apply(theta, out.direction, self.lr, self.rule), CA2FLState(out.state, cache, cache_sum), info


def build_ca2fl(cfg: None, ctx: AlgorithmContext) -> CA2FL:
    """CA2FL over the context's clients with its rule and server learning rate
    (docs/async-optimisers.md §4); it has no keys of its own."""
    return CA2FL(ctx.num_clients, ctx.aggregator, ctx.rule, ctx.lr, ctx.mu)
