"""Steinke, Nasr & Jagielski's one-run audit bound (*Privacy Auditing with One (1) Training Run*,
NeurIPS 2023, Theorem 5.2 with its Appendix D computation; docs/privacy.md §16).

``m`` canaries are each included independently with probability ½; the auditor guesses in or
out for ``r`` of them (abstaining on the rest) and ``v`` guesses are correct. If the mechanism is
(ε, δ)-DP, then for every ``v``::

    P[W ≥ v] ≤ β(ε) + 2 m δ · α(ε),   q = e^ε / (1 + e^ε)
    β(ε) = P[Binomial(r, q) ≥ v]
    α(ε) = max_{1 ≤ i ≤ v}  P[v − i ≤ Binomial(r, q) < v] / i

(the guesses of an (ε, δ)-DP mechanism are no better than randomized response's plus the δ
slack). So if the right-hand side — the p-value of ε — is below ``p``, the mechanism is not
(ε, δ)-DP, at confidence ``1 − p``. :func:`epsilon_lower_bound` returns the largest ε whose p-value
is below ``p`` (the p-value grows with ε): an empirical lower bound on ε at confidence ``1 − p``.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, stats


def p_value(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """The bound on ``P[W ≥ v]`` of an (ε, δ)-DP mechanism (module docstring)."""
    if not 0 <= v <= r <= m:
        raise ValueError(f"need 0 ≤ v ≤ r ≤ m, got m = {m}, r = {r}, v = {v}")
    if eps < 0 or not 0 <= delta <= 1:
        raise ValueError(f"need ε ≥ 0 and δ in [0, 1], got {eps}, {delta}")
    q = 1.0 / (1.0 + math.exp(-eps))
    beta = float(stats.binom.sf(v - 1, r, q))
    alpha = 0.0
    if delta > 0 and v > 0:  # below_i = P[v − i ≤ B < v], i = 1 … v: a running sum of the pmf from v − 1 down
        below = np.cumsum(stats.binom.pmf(np.arange(v - 1, -1, -1), r, q))
        alpha = float(np.max(below / np.arange(1, v + 1)))
    return min(1.0, beta + alpha * delta * 2 * m)


def epsilon_lower_bound(m: int, r: int, v: int, delta: float, p: float = 0.05) -> float:
    """The largest ε with ``p_value(ε) < p``: the mechanism is not (ε, δ)-DP at confidence
    ``1 − p`` (0 when even ε = 0 cannot be rejected)."""
    if not 0 < p < 1:
        raise ValueError(f"p = {p}: must be in (0, 1)")
    if p_value(m, r, v, 0.0, delta) >= p:
        return 0.0
    hi = 1.0
    while p_value(m, r, v, hi, delta) < p:
        hi *= 2.0
        if hi > 1e3:
            return math.inf
    return float(optimize.brentq(lambda e: p_value(m, r, v, e, delta) - p, 0.0, hi, xtol=1e-9))
