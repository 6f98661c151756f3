"""The auditor's score of each canary: the log-likelihood ratio of "included" against "not
included" given the released sums and the sampling assumption's law of membership
(docs/privacy.md §16). Pure functions of the normalised releases.

A canary's coordinate of the step-``t`` release, divided by the claimed noise standard deviation,
is ``z_t = μ·[canary included and in step t] + N(0, 1)`` with ``μ = S_Δ / (σ S C/M)`` under the
claimed mechanism. By Neyman–Pearson the most powerful statistic for one canary is its likelihood
ratio, with ``a_t = exp(μ z_t − μ²/2)``:

* known schedule (the cap: the auditor knows the steps ``K`` of the canary):
  ``log LR = Σ_{t∈K} (μ z_t − μ²/2)``, ranked as ``Σ_{t∈K} z_t``;
* Poisson at rate ``q`` (secret): ``log LR = Σ_t log(1 − q + q a_t)``;
* random allocation, ``k`` of every window of ``t`` steps (secret):
  ``log LR = Σ_w log( e_k(a_s : s ∈ window w) / C(t, k) )``, ``e_k`` the elementary symmetric
  polynomial of degree ``k`` (the mean of ``Π_{s∈S} a_s`` over the ``C(t, k)`` subsets ``S``).

Any score gives a valid audit (the bound of :mod:`~analysis.privacy_audit.bound` holds for every
guessing rule); this one only makes it as strong as the claimed mechanism allows.
"""

from __future__ import annotations

import math

import numpy as np


def known(z: np.ndarray, in_step: np.ndarray) -> np.ndarray:
    """``Σ_{t∈K_i} z[i, t]``: the canary's own steps only (``in_step``, m × T bool)."""
    return np.where(in_step, z, 0.0).sum(axis=1)


def poisson(z: np.ndarray, mu: float, rate: float) -> np.ndarray:
    """``Σ_t log(1 − q + q·exp(μ z_t − μ²/2))`` (module docstring), computed as ``log1p(q·expm1(·))``."""
    if not 0.0 < rate <= 1.0:
        raise ValueError(f"Poisson rate q = {rate}: must lie in (0, 1]")
    return np.log1p(rate * np.expm1(mu * z - mu * mu / 2.0)).sum(axis=1)


def allocation(z: np.ndarray, mu: float, k: int, window: int) -> np.ndarray:
    """``Σ_w log(e_k(a_w) / C(t, k))`` over the windows of ``window`` = t steps (the last one may
    be short: it holds the steps the run took of that window, and the unseen ones contribute
    ``a = 1``, their expectation under "not in that step")."""
    if not 1 <= k <= window:
        raise ValueError(f"allocation of k = {k} of every t = {window} steps: need 1 ≤ k ≤ t")
    m, steps = z.shape
    windows = -(-steps // window)
    log_a = np.zeros((m, windows * window))  # unseen steps of a short last window: log a = 0
    log_a[:, :steps] = mu * z - mu * mu / 2.0
    log_a = log_a.reshape(m, windows, window)
    top = log_a.max(axis=2, keepdims=True)
    a = np.exp(log_a - top)  # in (0, 1]: e_k of the scaled values, then k·top added back
    e = np.zeros((k + 1,) + a.shape[:2])
    e[0] = 1.0
    for s in range(window):  # e_j ← e_j + a_s e_{j−1}, j = k … 1
        for j in range(min(k, s + 1), 0, -1):
            e[j] = e[j] + a[:, :, s] * e[j - 1]
    per_window = np.log(e[k]) + k * top[:, :, 0] - math.log(math.comb(window, k))
    return per_window.sum(axis=1)
