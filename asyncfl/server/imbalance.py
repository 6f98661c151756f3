"""Participation imbalance: how unevenly the clients took part in the server steps
(docs/server-rules.md §7.1).

FedBuff replaces each arrival at once, so fast clients are dispatched, and counted, more often.
For the accepted uploads per client ``n_1 … n_N`` (zeros included):

    max/mean = max_k n_k / n̄,      Gini = Σ_i Σ_j |n_i − n_j| / (2 N² n̄),

``n̄`` the mean. Both are 1 and 0 for perfectly even participation; the Gini coefficient reaches
``1 − 1/N`` when one client did everything.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def gini(counts: np.ndarray) -> float:
    """``Σ_i Σ_j |n_i − n_j| / (2 N² n̄)`` in ``O(N log N)``: with ``n`` sorted ascending,
    ``Σ_i Σ_j |n_i − n_j| = 2 Σ_i (2i − N − 1) n_(i)`` (1-based ``i``). 0 when every count is 0."""
    n = np.sort(np.asarray(counts, dtype=np.float64))
    N, total = n.size, float(n.sum())
    if N == 0 or total == 0:
        return 0.0
    i = np.arange(1, N + 1)
    return float(np.sum((2 * i - N - 1) * n) / (N * total))


def participation_summary(counts: np.ndarray) -> dict[str, Any]:
    """Per-client counts and their imbalance (module docstring)."""
    counts = np.asarray(counts, dtype=np.int64)
    mean = float(counts.mean()) if counts.size else 0.0
    return {
        "clients": int(counts.size), "total": int(counts.sum()), "mean": mean,
        "max": int(counts.max(initial=0)), "min": int(counts.min()) if counts.size else 0,
        "max_over_mean": float(counts.max(initial=0) / mean) if mean > 0 else float("nan"),
        "gini": gini(counts), "never": int(np.sum(counts == 0)),
    }
