"""A rule for choosing the count-noise level ξ before any training run (docs/privacy.md §2,
"Choosing ξ").

At a fixed budget the noise multiplier σ is fixed and ξ only splits the sensitivity between the
update and the staleness counts. Each side's cost is a *relative* error, so the two can be added:

* update: the noise on ``r_t`` is ``σ S_Δ ξ / (M √(ξ² − σ²))``, its floor (no counts sent) is
  ``σ S_Δ / M``; the counts cost the update the excess factor
  ``u(ξ) = ξ / √(ξ² − σ²) − 1``  (``x = ξ/σ``: ``x/√(x² − 1) − 1``; 0.155 at x = 2, 0.033 at x = 4);
* counts: the relative L2 error of a row of ``Ŵ`` after post-processing,
  ``e(ξ) = E ‖ŵ′ − w‖ / ‖w‖`` with ``w_τ = (τ+1)^(−p) c_τ / C``, the noise on ``ĉ_τ / C`` being
  ``ξ / M`` (docs/privacy.md §7), the post-processing that of the recommendation of §3
  (:func:`counts_mode`), and the staleness rows those of FedBuff at ``K`` (negative binomial with
  mean ``K/C − 1``, :func:`analysis.privacy_counts_eval.study_rows`), averaged by Monte Carlo with
  common random numbers (the same rows and standard normal draws at every ξ, so ``e`` is a smooth
  function of ξ).

The rule is ``ξ* = argmin_ξ u(ξ) + e(ξ)``: it needs only public configuration (σ, M, C, K, p,
L) — no data and no run. For small ``ξ/M`` the simplex error is close to linear, ``e ≈ a ξ/M``,
and the minimiser solves ``σ² / (ξ² − σ²)^{3/2} = a / M``: ``ξ*`` grows like ``(σ² M / a)^{1/3}``,
so ``ξ*/σ`` *falls* as σ grows (a tighter budget leaves a narrower window between the two
noises) and rises with the noise cohort M.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
from scipy.optimize import minimize_scalar

from asyncfl.privacy.mechanism import postprocess_counts
from analysis.privacy_counts_eval import study_rows  # the staleness rows of the measurement behind docs/privacy.md §3

#: the recommendation of docs/privacy.md §3: ``simplex`` up to this ``ξ/M``, ``project`` above
SIMPLEX_UP_TO = 0.03


def counts_mode(xi: float, M: int) -> str:
    """The count post-processing docs/privacy.md §3 recommends at ``ξ/M``: ``simplex`` when
    ``ξ/M ≤ 0.03``, else ``project`` (free: ξ and M are public)."""
    return "simplex" if xi / M <= SIMPLEX_UP_TO else "project"


def update_excess(xi: float, sigma: float) -> float:
    """``u(ξ) = ξ / √(ξ² − σ²) − 1``: by how much sending counts raises the update noise above its
    floor ``σ S_Δ / M`` (docs/privacy.md §2); ``inf`` at ``ξ ≤ σ``."""
    if not xi > sigma:
        return math.inf
    r = sigma / xi
    return 1.0 / math.sqrt((1.0 - r) * (1.0 + r)) - 1.0


@dataclass(frozen=True)
class CountModel:
    """The staleness rows and the noise draws of the Monte Carlo of ``e(ξ)``: ``counts[t, τ]``
    (``rows`` steps of ``C`` uploads), ``z[r, t, τ]`` standard normal draws, ``weights`` the
    staleness weights ``(τ+1)^(−p)``."""

    counts: np.ndarray
    z: np.ndarray
    weights: np.ndarray
    C: int
    M: int
    mode: str | None = None  # the post-processing; None: the recommendation (:func:`counts_mode`) at each ξ
    _memo: dict[tuple[float, str], float] = field(default_factory=dict, compare=False, repr=False)

    @classmethod
    def fedbuff(cls, C: int, M: int, K: int, L: int, exponent: float, rows: int = 40, reps: int = 4,
                seed: int = 0, mode: str | None = None) -> "CountModel":
        """FedBuff's staleness at concurrency ``K``: mean ``K/C − 1`` (dispersion 4, truncated at
        ``L − 1``; :func:`analysis.privacy_counts_eval.study_rows`)."""
        rng = np.random.default_rng(seed)
        counts = study_rows(rng, rows, C, L, max(K / C - 1.0, 0.0))
        return cls(counts, rng.standard_normal((reps, rows, L)), (np.arange(L) + 1.0) ** (-exponent), C, M, mode)

    def error(self, xi: float, mode: str | None = None) -> float:
        """``e(ξ)``: the mean relative L2 error of a row of ``Ŵ`` when ``ĉ_τ`` carries noise
        ``ξ C / M`` (so ``ĉ_τ / C`` carries ``ξ / M``), post-processed by ``mode`` (default: the
        model's, else :func:`counts_mode`)."""
        mode = mode or self.mode or counts_mode(xi, self.M)
        if (xi, mode) in self._memo:
            return self._memo[(xi, mode)]
        true_w = self.counts * self.weights / self.C
        norms = np.linalg.norm(true_w, axis=1)
        errs = []
        for draw in self.z:
            noisy = self.counts + (xi * self.C / self.M) * draw
            est = np.array([postprocess_counts(row, self.C, mode) for row in noisy])
            errs.append(np.linalg.norm(est * self.weights / self.C - true_w, axis=1) / norms)
        self._memo[(xi, mode)] = value = float(np.mean(errs))
        return value


@dataclass(frozen=True)
class RuleChoice:
    """The rule's ``xi`` (ξ*), ``xi/σ``, and its two terms and their sum at ξ*."""

    xi: float
    xi_over_sigma: float
    update: float
    counts: float

    @property
    def total(self) -> float:
        return self.update + self.counts


def total_noise(xi: float, sigma: float, model: CountModel) -> float:
    """``u(ξ) + e(ξ)`` (module docstring)."""
    return update_excess(xi, sigma) + model.error(xi)


def rule_xi(sigma: float, model: CountModel, grid: Sequence[float] | None = None) -> RuleChoice:
    """``ξ* = argmin u(ξ) + e(ξ)``: the best point of a log grid of ``ξ/σ`` (default 1.02 … 100,
    ×1.1 apart), then Brent's bounded search in ``log ξ`` between its two neighbours."""
    grid = np.asarray(grid if grid is not None else np.geomspace(1.02, 100.0, 48), float)
    values = [total_noise(g * sigma, sigma, model) for g in grid]
    i = int(np.argmin(values))
    lo, hi = grid[max(i - 1, 0)] * sigma, grid[min(i + 1, len(grid) - 1)] * sigma
    best = grid[i] * sigma
    if hi > lo:
        res = minimize_scalar(lambda s: total_noise(math.exp(s), sigma, model), bounds=(math.log(lo), math.log(hi)),
                              method="bounded", options={"xatol": 1e-3})
        if res.fun < values[i]:
            best = math.exp(res.x)
    return RuleChoice(best, best / sigma, update_excess(best, sigma), model.error(best))
