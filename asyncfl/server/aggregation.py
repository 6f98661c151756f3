"""Buffered aggregation: from the C buffered client updates to the one aggregate the server
rule is allowed to see (docs/protocol.md, §5; STYLE: pfl postprocessors).

The server rule receives an :class:`Aggregate` and nothing else: ``r_t`` and the row of ``W``
that a real server could know. Without privacy that row is exact; with privacy it is the noisy
estimate decoded from the noisy sum (``asyncfl.privacy``). Per-client objects never leave the
aggregator.
"""

from __future__ import annotations

import itertools
import operator
from typing import NamedTuple, Protocol, Sequence

import numpy as np
import torch


class ClientUpdate(NamedTuple):
    """One accepted upload of a client trained on model version ``s``, consumed by step ``t``
    with staleness ``τ = t − s``. ``message`` is what the algorithm's client sent: the
    pseudo-gradient ``Δ_k = θ_s − θ_k^local`` for FedAvg/FedBuff, a splitting baseline's new
    client memory for FedSplit/FedDR/FedPD."""

    client: int
    version: int
    staleness: int
    message: torch.Tensor


class Aggregate(NamedTuple):
    """What the server rule sees at step ``t``.

    ``r`` is ``r_t``; ``weights[τ]`` is ``W[t, t−τ]`` (indexed by staleness, length ``L``),
    exact or estimated. ``raw_counts``: with privacy, the noisy staleness counts ``ĉ_τ`` as
    decoded from the noisy sum, before post-processing (recorded as ``private_by_staleness``);
    ``None`` without privacy.
    """

    step: int
    r: torch.Tensor
    weights: np.ndarray
    raw_counts: np.ndarray | None = None


def staleness_weight(tau: np.ndarray | int, exponent: float) -> np.ndarray | float:
    """``w(τ) = (τ + 1)^(−p)`` (docs/protocol.md)."""
    return (np.asarray(tau, dtype=np.float64) + 1.0) ** (-exponent)


def weight_row(counts: np.ndarray, buffer: int, exponent: float) -> np.ndarray:
    """Row ``t`` of ``W`` indexed by staleness: ``W[t, t−τ] = (τ+1)^(−p) C_{t,t−τ} / C``."""
    counts = np.asarray(counts, dtype=np.float64)
    return staleness_weight(np.arange(counts.shape[-1]), exponent) * counts / buffer


def weight_matrix(by_staleness: np.ndarray, exponent: float, buffer: int) -> np.ndarray:
    """The lower-triangular ``W`` (T×T, 0-based: ``W[t-1, s-1]``) from ``by_staleness[t-1, τ]``."""
    by_staleness = np.asarray(by_staleness, dtype=np.float64)
    T, L = by_staleness.shape
    W = np.zeros((T, T))
    rows = weight_row(by_staleness, buffer, exponent)
    for tau in range(min(L, T)):
        t = np.arange(tau, T)  # 0-based row index; column = t - tau
        W[t, t - tau] = rows[t, tau]
    return W


def stack_rows(tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """``torch.stack(tensors)`` as an ``(n, d)`` block of flattened rows (tensors of one shape).
    When the tensors already are the ``n`` consecutive rows of one contiguous ``(n, d)`` block —
    the rows of the message block the simulator screened, when a step accepted every upload —
    that block is returned as it is: the same numbers without a copy of every upload."""
    first = tensors[0]
    base = first._base
    if (base is not None and base.dim() == 2 and base.shape[0] == len(tensors) and base.shape[1] == first.numel()
            and base.is_contiguous()):
        d, offset = base.shape[1], base.storage_offset()
        if (all(map(operator.is_, [t._base for t in tensors], itertools.repeat(base)))
                and [t.storage_offset() for t in tensors] == list(range(offset, offset + len(tensors) * d, d))
                and all([t.is_contiguous() for t in tensors])):
            return base
    return torch.stack(list(tensors)).reshape(len(tensors), -1)


def weighted_sum(weights: np.ndarray, tensors: Sequence[torch.Tensor]) -> torch.Tensor:
    """``Σ_k weights[k] · tensors[k]`` (tensors of one shape) as one matrix-vector product over
    the stacked tensors (:func:`stack_rows`): a loop of ``add_`` cost ~3 µs per update in op
    overhead."""
    block = stack_rows(tensors)
    return (torch.as_tensor(weights, dtype=block.dtype, device=block.device) @ block).reshape(tensors[0].shape)


class Aggregator(Protocol):
    """Turns the buffered updates of step ``t`` into the :class:`Aggregate` the rule sees."""

    def aggregate(self, step: int, updates: Sequence[ClientUpdate], rng: np.random.Generator) -> Aggregate: ...


class ExactAggregator:
    """``r_t = (1/C) Σ_k w(τ_k) Δ_k`` and the exact row of ``W`` (no privacy).

    ``C`` is the number of updates aggregated: ``server.buffer`` for FedBuff (every step
    consumes exactly C), the accepted part of the cohort for sync rounds.
    """

    def __init__(self, exponent: float, num_staleness: int | None) -> None:
        self.exponent = exponent
        self.num_staleness = num_staleness  # L, or None when staleness is unbounded

    def aggregate(self, step: int, updates: Sequence[ClientUpdate], rng: np.random.Generator) -> Aggregate:
        taus = np.array([u.staleness for u in updates], dtype=np.int64)
        length = self.num_staleness or int(taus.max(initial=0)) + 1
        counts = np.bincount(taus, minlength=length)
        w = staleness_weight(taus, self.exponent)
        r = weighted_sum(w, [u.message for u in updates]).div_(len(updates))
        return Aggregate(step=step, r=r, weights=weight_row(counts, len(updates), self.exponent))
