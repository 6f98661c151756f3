"""Steps to a target as censored survival times: Kaplan–Meier, the restricted mean, and the paired
comparison of two methods over the same seeds (docs/studies.md §3–§5).

Each seed ``i`` gives a time ``t_i`` (the crossing step of :func:`asyncfl.studies.crossing.crossing`)
and whether the target was reached (``d_i = 1``) or the run was right-censored at ``t_i``
(``d_i = 0``). With ``t_(1) < t_(2) < …`` the distinct reached times, ``d_k`` the runs reaching
the target at ``t_(k)`` and ``n_k`` those still at risk there (time ``≥ t_(k)``: a run censored at
``t_(k)`` counts as at risk at ``t_(k)``), the Kaplan–Meier estimate of ``S(t) = P(T > t)`` is the
product-limit

    Ŝ(t) = Π_{k: t_(k) ≤ t} (1 − d_k / n_k),

right-continuous, 1 before the first reached time, held at its last value after the last
observation. The restricted mean time to target over the horizon ``h`` (RMST) is its area,

    RMST(h) = ∫_0^h Ŝ(t) dt,

which equals ``mean_i min(t_i, h)`` when no run is censored before ``h``: a run that never reached
the target counts at ``h``, never dropped (§4). Two methods run on the same seeds are compared by

    ratio = RMST_base(h) / RMST_rule(h)          (> 1: the rule reaches the target sooner),

with a 95 % interval from the paired bootstrap over seeds (§5): by default the percentile
interval at the expanded level ``2Φ(√(n/(n−1)) · t_{0.975, n−1}) − 1``, which covers about 90 % at
5 seeds and 93.5–95 % at 10 where the plain percentile and BCa intervals cover 82–84 % and
89–92 % (docs/studies.md §5, ``python -m analysis.bootstrap_coverage``).
"""

from __future__ import annotations

import math
import warnings
from typing import NamedTuple, Sequence

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import stats

from asyncfl.studies.crossing import Crossing

__all__ = ["INTERVALS", "Comparison", "SurvivalCurve", "common_horizon", "compare_crossings", "expanded_level", "kaplan_meier",
           "log_restricted_ratios", "paired_rmst_ratio", "restricted_mean", "restricted_means"]

#: The bootstrap intervals :func:`paired_rmst_ratio` offers (docs/studies.md §5); the first is the default.
INTERVALS = ("expanded", "percentile", "BCa")


class SurvivalCurve(NamedTuple):
    """The Kaplan–Meier step function (docs/studies.md §3): ``survival[k]`` is ``Ŝ(t)`` on
    ``[t[k], t[k+1])``; ``Ŝ = 1`` before ``t[0]``. Unpacks as ``(t, survival)``."""

    t: NDArray[np.float64]
    survival: NDArray[np.float64]

    def at(self, x: ArrayLike) -> NDArray[np.float64]:
        """``Ŝ(x)`` (right-continuous: the value after any step at ``x``)."""
        k = np.searchsorted(self.t, np.asarray(x, dtype=np.float64), side="right") - 1
        return np.where(k < 0, 1.0, self.survival[np.maximum(k, 0)])


def _times(times: ArrayLike, reached: ArrayLike, name: str = "times") -> tuple[NDArray[np.float64], NDArray[np.bool_]]:
    t = np.asarray(times, dtype=np.float64)
    d = np.asarray(reached)
    if t.ndim != 1 or d.shape != t.shape:
        raise ValueError(f"{name} and its reached flags must be 1-D and of the same length (got {t.shape} and {d.shape})")
    if t.size == 0:
        raise ValueError(f"{name}: at least one run is needed")
    if not np.all(np.isfinite(t)) or np.any(t < 0):
        raise ValueError(f"{name} must be finite and ≥ 0 (count an unreached run at its censoring step, not inf or NaN)")
    if d.dtype != np.bool_ and not np.all(np.isin(d, (0, 1))):
        raise ValueError(f"reached flags for {name} must be booleans (or 0/1)")
    return t, d.astype(bool)


def _horizon(horizon: float) -> float:
    if not (math.isfinite(horizon) and horizon > 0):
        raise ValueError(f"horizon = {horizon}: must be finite and > 0")
    return float(horizon)


def kaplan_meier(times: ArrayLike, reached: ArrayLike) -> SurvivalCurve:
    """The Kaplan–Meier curve ``Ŝ(t) = Π_{t_(k) ≤ t} (1 − d_k / n_k)`` of right-censored times
    (module docstring; docs/studies.md §3), by :func:`scipy.stats.ecdf` on
    :class:`scipy.stats.CensoredData`: ``t`` every distinct observed time (reached or censored),
    ``survival`` the curve's value from each on."""
    t, d = _times(times, reached)
    result = stats.ecdf(stats.CensoredData(uncensored=t[d], right=t[~d]))
    return SurvivalCurve(np.asarray(result.sf.quantiles, dtype=np.float64), np.asarray(result.sf.probabilities, dtype=np.float64))


def restricted_mean(times: ArrayLike, reached: ArrayLike, horizon: float) -> float:
    """The restricted mean time to target ``∫_0^h Ŝ(t) dt`` over the Kaplan–Meier curve of
    :func:`kaplan_meier` (module docstring; docs/studies.md §4): the exact area of the step
    function, its steps below ``h`` as the knots."""
    h = _horizon(horizon)
    curve = kaplan_meier(times, reached)
    knots = np.unique(np.concatenate(([0.0], curve.t[curve.t < h], [h])))
    return float(np.sum(curve.at(knots[:-1]) * np.diff(knots)))


def restricted_means(times: ArrayLike, reached: ArrayLike, horizon: float) -> NDArray[np.float64]:
    """:func:`restricted_mean` of every row of ``times`` (``(..., n)``) at once, without scipy, for
    the bootstrap (docs/studies.md §4–§5): the runs sorted by time (reached before censored at a
    tie), the run in place ``k = 0, 1, …`` has ``n − k`` at risk, ``Ŝ`` after it is
    ``Π_{j ≤ k} (1 − d_j / (n − j))`` (tied reached times multiply to ``1 − d / n_k``), and the area
    is ``Σ_k Ŝ_{k−1} (min(t_k, h) − min(t_{k−1}, h)) + Ŝ_last (h − min(t_last, h))``."""
    h = _horizon(horizon)
    t = np.asarray(times, dtype=np.float64)
    d = np.asarray(reached).astype(bool)
    if t.shape != d.shape or t.ndim == 0 or t.shape[-1] == 0:
        raise ValueError(f"times and reached must have the same non-empty shape (got {t.shape} and {d.shape})")
    order = np.lexsort((~d, t), axis=-1)
    t = np.take_along_axis(t, order, axis=-1)
    d = np.take_along_axis(d, order, axis=-1)
    n = t.shape[-1]
    survival = np.cumprod(1.0 - d / (n - np.arange(n)), axis=-1)
    before = np.concatenate((np.ones(survival.shape[:-1] + (1,)), survival[..., :-1]), axis=-1)
    clipped = np.minimum(t, h)
    widths = np.diff(clipped, axis=-1, prepend=0.0)
    return np.asarray(np.sum(before * widths, axis=-1) + survival[..., -1] * (h - clipped[..., -1]), dtype=np.float64)


class Comparison(NamedTuple):
    """Two methods on the same seeds (docs/studies.md §5): ``ratio = RMST_base / RMST_rule`` (> 1:
    the rule reaches the target sooner) with its 95 % paired-bootstrap interval ``[low, high]``
    over ``n`` seeds (NaN with one seed); ``censored_base`` / ``censored_rule`` the seeds on which
    each never reached the target (counted at the horizon, never dropped); ``bounds`` the ratio
    with every crossing at the end of its interval least / most favourable to the rule (``None``
    without crossing intervals); ``method`` the interval actually computed (one of
    :data:`INTERVALS`; ``"percentile"`` where BCa was asked for but is undefined; ``"none"`` for
    one seed; ``"degenerate"`` where every resample gives the same ratio)."""

    ratio: float
    low: float
    high: float
    n: int
    censored_base: int
    censored_rule: int
    bounds: tuple[float, float] | None
    method: str = INTERVALS[0]

    def text(self, rule: str = "rule", base: str = "base") -> str:
        """``1.42× [1.10, 1.85]`` with the censored seeds and the interval-censoring range named."""
        if not math.isfinite(self.ratio):
            return "—"
        out = f"{self.ratio:.2f}×" + (f" [{self.low:.2f}, {self.high:.2f}]" if self.n > 1 else " (n = 1)")
        notes = []
        if self.censored_base or self.censored_rule:
            notes.append(f"unreached: {base} {self.censored_base}/{self.n}, {rule} {self.censored_rule}/{self.n}")
        if self.bounds is not None:
            notes.append(f"crossings at their interval ends: {self.bounds[0]:.2f}–{self.bounds[1]:.2f}×")
        return out + (f" ({'; '.join(notes)})" if notes else "")


def _ratio(base_t: NDArray[np.float64], base_d: NDArray[np.bool_], rule_t: NDArray[np.float64], rule_d: NDArray[np.bool_],
           horizon: float) -> NDArray[np.float64]:
    with np.errstate(divide="ignore", invalid="ignore"):
        return restricted_means(base_t, base_d, horizon) / restricted_means(rule_t, rule_d, horizon)


def _ends(pairs: Sequence[tuple[float, float]], n: int, name: str) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    ends = np.asarray(pairs, dtype=np.float64)
    if ends.shape != (n, 2):
        raise ValueError(f"bounds for {name}: one (low, high) crossing interval per seed is needed (got shape {ends.shape}, want ({n}, 2))")
    if np.any(np.isnan(ends)) or np.any(ends[:, 0] > ends[:, 1]) or np.any(ends[:, 0] < 0):
        raise ValueError(f"bounds for {name}: every interval must have 0 ≤ low ≤ high")
    return ends[:, 0], ends[:, 1]


def expanded_level(n: int, confidence: float = 0.95) -> float:
    """The confidence level at which the expanded percentile interval reads the bootstrap
    distribution, ``2Φ(√(n/(n−1)) · t_{(1+c)/2, n−1}) − 1`` (docs/studies.md §5): the normal
    quantile widened to Student's t on ``n − 1`` degrees of freedom and by ``√(n/(n−1))``, the
    bootstrap's missing degree of freedom (0.9981 at 5 seeds, 0.9829 at 10, 0.9682 at 20)."""
    if n < 2:
        raise ValueError(f"n = {n}: the expanded level needs at least two seeds")
    z = math.sqrt(n / (n - 1)) * float(stats.t.ppf(0.5 + confidence / 2, n - 1))
    return float(2 * stats.norm.cdf(z) - 1)


def paired_rmst_ratio(base_times: ArrayLike, base_reached: ArrayLike, rule_times: ArrayLike, rule_reached: ArrayLike,
                      horizon: float, *, bounds: tuple[Sequence[tuple[float, float]], Sequence[tuple[float, float]]] | None = None,
                      interval: str = INTERVALS[0], resamples: int = 19_999, seed: int = 0, confidence: float = 0.95) -> Comparison:
    """The paired comparison ``RMST_base(h) / RMST_rule(h)`` of two methods whose entry ``i`` is the
    same seed (module docstring; docs/studies.md §5).

    The interval (95 % unless ``confidence`` says otherwise) comes from the paired bootstrap over seeds: ``resamples`` resamplings of the
    seed indices with replacement, each taking both methods' runs of the drawn seeds
    (:func:`scipy.stats.bootstrap` with ``paired=True``); every run, reached or not, enters each
    resample's Kaplan–Meier areas. ``interval``: ``"expanded"`` (default) the percentile interval
    at :func:`expanded_level` — at 5–10 seeds the plain intervals are too narrow (docs/studies.md
    §5 gives the simulation), and BCa's corrections do not help there; ``"percentile"`` the plain
    2.5 / 97.5 % quantiles; ``"BCa"`` the bias-corrected and accelerated interval (falling back
    to the percentile interval where its jackknife is degenerate; ``method`` says so).

    ``bounds = (base_intervals, rule_intervals)``: each seed's ``(low, high)`` crossing interval
    (:class:`asyncfl.studies.crossing.Crossing`'s ``low``, ``high``; ``high = inf`` for a run that
    never reached the target). ``Comparison.bounds`` is then the ratio with the base at its
    ``low`` ends and the rule at its ``high`` ends, and the reverse, times restricted at ``h``:
    where censoring happens only at ``h`` the restricted mean grows with every time, so these are
    the smallest and largest ratio the interval-censored data allow.
    """
    h = _horizon(horizon)
    bt, bd = _times(base_times, base_reached, "base_times")
    rt, rd = _times(rule_times, rule_reached, "rule_times")
    if bt.size != rt.size:
        raise ValueError(f"base_times and rule_times must pair seed by seed (got {bt.size} and {rt.size} runs)")
    if interval not in INTERVALS:
        raise ValueError(f"interval = {interval!r}: must be one of {', '.join(INTERVALS)}")
    if resamples < 1:
        raise ValueError(f"resamples = {resamples}: must be ≥ 1")
    n = int(bt.size)
    ratio = float(_ratio(bt, bd, rt, rd, h))
    ranged: tuple[float, float] | None = None
    if bounds is not None:
        b_lo, b_hi = _ends(bounds[0], n, "base")
        r_lo, r_hi = _ends(bounds[1], n, "rule")
        low_end = float(_ratio(np.minimum(b_lo, h), bd, np.minimum(r_hi, h), rd, h))
        high_end = float(_ratio(np.minimum(b_hi, h), bd, np.minimum(r_lo, h), rd, h))
        ranged = (low_end, high_end)
    censored = (int(np.sum(~bd)), int(np.sum(~rd)))
    if n < 2 or not math.isfinite(ratio):
        return Comparison(ratio, math.nan, math.nan, n, *censored, ranged, "none")

    def statistic(b_t: NDArray[np.float64], b_d: NDArray[np.float64], r_t: NDArray[np.float64], r_d: NDArray[np.float64],
                  axis: int = -1) -> NDArray[np.float64]:
        return _ratio(b_t, b_d > 0.5, r_t, r_d > 0.5, h)

    data = (bt, bd.astype(np.float64), rt, rd.astype(np.float64))
    level = expanded_level(n, confidence) if interval == "expanded" else confidence
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a degenerate or infinite resample is handled below
        res = stats.bootstrap(data, statistic, n_resamples=resamples, paired=True, vectorized=True,
                              method="BCa" if interval == "BCa" else "percentile", confidence_level=level,
                              random_state=np.random.default_rng(seed))
        draws = res.bootstrap_distribution
        if np.all(draws == draws[0]):
            return Comparison(ratio, float(draws[0]), float(draws[0]), n, *censored, ranged, "degenerate")
        low, high = float(res.confidence_interval.low), float(res.confidence_interval.high)
        method = interval
        if not (math.isfinite(low) and math.isfinite(high)):
            pct = stats.bootstrap(data, statistic, n_resamples=0, paired=True, vectorized=True, method="percentile",
                                  confidence_level=level, bootstrap_result=res, random_state=np.random.default_rng(seed))
            low, high, method = float(pct.confidence_interval.low), float(pct.confidence_interval.high), "percentile"
    return Comparison(ratio, low, high, n, *censored, ranged, method)


def common_horizon(crossings: Sequence[Crossing], horizon: float | None = None) -> float:
    """``horizon`` if given, else the one horizon all ``crossings`` share (refused if they differ:
    a comparison restricts every run at the same ``h``; docs/studies.md §4)."""
    if horizon is not None:
        return _horizon(horizon)
    found = sorted({c.horizon for c in crossings})
    if len(found) != 1:
        raise ValueError(f"horizon: the crossings have horizons {found}; give the study's horizon explicitly")
    return _horizon(found[0])


def compare_crossings(base: Sequence[Crossing], rule: Sequence[Crossing], horizon: float | None = None, *,
                      interval: str = INTERVALS[0], resamples: int = 19_999, seed: int = 0, confidence: float = 0.95) -> Comparison:
    """:func:`paired_rmst_ratio` of two methods' crossings on the same seeds (entry ``i`` of each
    is seed ``i``): times the crossings' ``point``, reached as they say, ``bounds`` their
    ``(low, high)`` intervals, ``horizon`` the crossings' common one unless given
    (docs/studies.md §5)."""
    h = common_horizon([*base, *rule], horizon)
    return paired_rmst_ratio([c.point for c in base], [c.reached for c in base], [c.point for c in rule],
                             [c.reached for c in rule], h, bounds=([(c.low, c.high) for c in base], [(c.low, c.high) for c in rule]),
                             interval=interval, resamples=resamples, seed=seed)


def log_restricted_ratios(base_times: ArrayLike, rule_times: ArrayLike, horizon: float) -> NDArray[np.float64]:
    """Per-seed ``ln(min(b_i, h) / min(r_i, h))``: each seed's log ratio of restricted times (an
    unreached run counted at ``h``), the input of :func:`asyncfl.studies.effects.interaction`
    (docs/studies.md §6). A restricted time of 0 (the target met at step 0) has no log ratio and
    is refused."""
    h = _horizon(horizon)
    b = np.minimum(np.asarray(base_times, dtype=np.float64), h)
    r = np.minimum(np.asarray(rule_times, dtype=np.float64), h)
    if b.shape != r.shape or b.ndim != 1:
        raise ValueError(f"base_times and rule_times must be 1-D and pair seed by seed (got {b.shape} and {r.shape})")
    if not (np.all(np.isfinite(b)) and np.all(np.isfinite(r))) or np.any(b <= 0) or np.any(r <= 0):
        raise ValueError("times must be finite and > 0 for a log ratio (a target met at step 0 has none: raise the target)")
    return np.asarray(np.log(b / r), dtype=np.float64)
