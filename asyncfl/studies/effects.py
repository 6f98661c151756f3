"""Effects over seeds: the paired difference of two methods, and how an effect changes across the
concurrency ``K`` (docs/studies.md §6).

* **Paired difference.** With ``x_i = rule_i − base_i`` on seed ``i`` (both finite), the mean
  ``x̄`` and its Student-t interval ``x̄ ± t_{0.975, n−1} · s_x / √n`` (the paired t interval).
* **Interaction across K.** Given per-seed effects ``y_{g,i}`` (log ratios of restricted times)
  in groups ``g`` (the values of ``K``), the one-way ANOVA

      F = [Σ_g n_g (ȳ_g − ȳ)² / (G − 1)] / [Σ_g Σ_i (y_{g,i} − ȳ_g)² / (N − G)]

  tests whether the effect is the same at every ``K`` (``p = P(F_{G−1, N−G} ≥ F)``), and the
  least-squares line ``y = a + b · log₂ K`` through all ``N`` points gives the change of the
  effect per doubling of ``K``, ``b ± t_{0.975, N−2} · se(b)`` with
  ``se(b) = √(Σ (y − a − b x)² / (N − 2) / Σ (x − x̄)²)``.
"""

from __future__ import annotations

import math
from typing import Mapping, NamedTuple, Sequence

import numpy as np
from scipy import stats

from asyncfl.figures.ci import mean_ci

__all__ = ["Difference", "Interaction", "PairedTest", "interaction", "paired_difference", "paired_t"]


class Difference(NamedTuple):
    """``mean`` of ``rule − base`` over ``n`` paired seeds and its 95 % paired t interval
    ``[low, high]`` (docs/studies.md §6; NaN with fewer than two seeds)."""

    mean: float
    low: float
    high: float
    n: int


def paired_difference(base: Sequence[float], rule: Sequence[float], confidence: float = 0.95) -> Difference:
    """The paired t interval of ``rule − base`` (entry ``i`` of each is the same seed; a seed where
    either is not finite — a diverged run — is left out and not counted in ``n``): the mean
    difference ``± t_{(1+c)/2, n−1} · s / √n`` (module docstring; docs/studies.md §6)."""
    b = np.asarray(base, dtype=np.float64)
    r = np.asarray(rule, dtype=np.float64)
    if b.ndim != 1 or b.shape != r.shape:
        raise ValueError(f"base and rule must be 1-D and pair seed by seed (got {b.shape} and {r.shape})")
    ci = mean_ci((r - b)[np.isfinite(b) & np.isfinite(r)], confidence)
    return Difference(ci.mean, ci.low, ci.high, ci.n)


class PairedTest(NamedTuple):
    """The paired t-test of per-seed differences ``d_i`` (docs/studies.md §9): ``mean`` = d̄, its
    ``confidence`` interval ``[low, high]``, the statistic ``t = d̄ / (s_d / √n)`` and its two-sided
    p-value ``2 · P(T_{n−1} ≥ |t|)`` over the ``n`` finite differences (NaN with fewer than two, or
    when every difference is the same: nothing to test)."""

    mean: float
    low: float
    high: float
    t: float
    p: float
    n: int


def paired_t(differences: Sequence[float], confidence: float = 0.95) -> PairedTest:
    """Paired t-test and interval of ``differences`` (one per seed, ``rule − base``; a non-finite
    entry — a diverged run — is left out): ``d̄ ± t_{(1+c)/2, n−1} · s_d / √n`` and the two-sided
    p-value of ``H0: E d = 0`` (docs/studies.md §9)."""
    d = np.asarray(differences, dtype=np.float64)
    d = d[np.isfinite(d)]
    n = int(d.size)
    if n < 2:
        return PairedTest(float(d.mean()) if n else math.nan, math.nan, math.nan, math.nan, math.nan, n)
    mean = float(d.mean())
    if np.all(d == d[0]):  # no spread (rounding would make s_d tiny, not 0): nothing to test
        return PairedTest(mean, math.nan, math.nan, math.nan, math.nan, n)
    se = float(d.std(ddof=1)) / math.sqrt(n)
    t = mean / se
    q = float(stats.t.ppf((1 + confidence) / 2, n - 1))
    p = float(2 * stats.t.sf(abs(t), n - 1))
    return PairedTest(mean, mean - q * se, mean + q * se, t, p, n)


class Interaction(NamedTuple):
    """Whether an effect depends on ``K`` (docs/studies.md §6): ``p_anova`` the one-way ANOVA's p
    value across the ``K`` groups; ``slope_per_log2K`` the fitted change of the effect per doubling
    of ``K`` with its 95 % t interval ``[slope_low, slope_high]``; ``n`` the values used."""

    p_anova: float
    slope_per_log2K: float
    slope_low: float
    slope_high: float
    n: int


def interaction(per_seed_log_ratios: Mapping[float, Sequence[float]], confidence: float = 0.95) -> Interaction:
    """One-way ANOVA of the per-seed effects across ``K`` (:func:`scipy.stats.f_oneway`) and the
    slope of their least-squares line on ``log₂ K`` (:func:`scipy.stats.linregress`) with its
    t interval on ``N − 2`` degrees of freedom (module docstring; docs/studies.md §6).

    ``per_seed_log_ratios`` maps each ``K`` (> 0) to its seeds' effects, typically
    :func:`asyncfl.studies.survival.log_restricted_ratios`. Non-finite values are refused: a
    censored run enters at its restricted time, so every seed has a finite effect.
    """
    if not 0 < confidence < 1:
        raise ValueError(f"confidence = {confidence}: must be in (0, 1)")
    groups = {float(k): np.asarray(v, dtype=np.float64) for k, v in per_seed_log_ratios.items()}
    if len(groups) < 2:
        raise ValueError(f"per_seed_log_ratios: at least two values of K are needed (got {sorted(groups)})")
    for k, y in groups.items():
        if not (math.isfinite(k) and k > 0):
            raise ValueError(f"per_seed_log_ratios: K = {k} must be finite and > 0")
        if y.ndim != 1 or y.size == 0 or not np.all(np.isfinite(y)):
            raise ValueError(f"per_seed_log_ratios[{k:g}]: one finite value per seed is needed (got {y.tolist()})")
    x = np.concatenate([np.full(y.size, math.log2(k)) for k, y in groups.items()])
    y = np.concatenate(list(groups.values()))
    n = int(y.size)
    if n - len(groups) < 1:
        raise ValueError(f"per_seed_log_ratios: {n} values in {len(groups)} groups leave no degrees of freedom within groups")
    anova = stats.f_oneway(*groups.values())
    # equal group means give F = 0 up to round-off, which can come out below 0 (and p = NaN)
    p = 1.0 if float(anova.statistic) <= 0 else float(anova.pvalue)
    fit = stats.linregress(x, y)
    half = float(stats.t.ppf(0.5 + confidence / 2, n - 2)) * float(fit.stderr)  # n ≥ G + 1 ≥ 3
    slope = float(fit.slope)
    return Interaction(p, slope, slope - half, slope + half, n)
