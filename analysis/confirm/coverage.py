"""The measured coverage of the paired t interval the confirmatory report prints, by a parametric
simulation from the comparison's own seeds (docs/confirm.md §3.1).

A comparison's data are fitted by a model, ``B`` replicate studies with the same number of seeds
are drawn from it, the report's own interval procedure (:mod:`analysis.confirm.intervals`) is
applied to each, and the coverage is the share of replicates whose interval contains the model's
true value of the estimand; its Monte Carlo standard error is ``√(ĉ (1 − ĉ) / B)``. A replicate
whose interval is not estimable (every difference the same) counts as not covering: the report
would print no interval there.

* ``log_time``. Per arm a log-normal latent crossing time, ``X = log T ~ N(μ, σ²)``, fitted by
  maximum likelihood to the seeds' log times with the unreached seeds right-censored at
  ``c = log h``:

      ℓ(μ, σ) = Σ_reached [log φ((x_s − μ)/σ) − log σ] + Σ_unreached log(1 − Φ((c − μ)/σ));

  the two arms' latent times correlated by ``ρ``, the Pearson correlation of the log times over
  the seeds where both reached (0 where fewer than 3 did). A replicate draws
  ``X_base = μ_b + σ_b z₁``, ``X_rule = μ_r + σ_r (ρ z₁ + √(1 − ρ²) z₂)`` per seed, restricts
  ``R = min(e^X, h)``, and applies :func:`~analysis.confirm.intervals.log_time_t`. The interval
  claims to estimate the restricted log-time effect ``θ = E[log R_base − log R_rule]``; since
  ``log R = min(X, c)``, by linearity ``θ = m(μ_b, σ_b) − m(μ_r, σ_r)`` with

      m(μ, σ) = E[min(X, c)] = μ Φ(a) − σ φ(a) + c (1 − Φ(a)),      a = (c − μ)/σ

  (the correlation does not enter ``θ``). Not estimable where an arm reached the target on fewer
  than two seeds or at one time only (its ``μ, σ`` are not identified).
* ``final_accuracy``. A bivariate normal on the paired accuracies, with the seeds' means,
  standard deviations and correlation; ``θ = μ_rule − μ_base``;
  :func:`~analysis.confirm.intervals.accuracy_t` per replicate. Not estimable where the
  differences have no spread. (Under this model the t interval is exact, so the value checks the
  simulation; it cannot show what accuracies bounded in [0, 1] or near chance would do.)
"""

from __future__ import annotations

import math
from typing import Callable, NamedTuple

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize, stats

from asyncfl.studies.effects import PairedTest
from analysis.confirm.intervals import accuracy_t, log_time_t

__all__ = ["REPLICATES", "Coverage", "LatentTimes", "accuracy_coverage", "fit_censored_normal", "fit_latent_times",
           "restricted_log_mean", "time_coverage"]

#: replicate studies per comparison: the coverage's Monte Carlo SE is at most √(0.25 / 2500) = 0.01
REPLICATES = 2500
#: the correlation is kept inside (−RHO_CAP, RHO_CAP) so the bivariate normal is not degenerate
RHO_CAP = 0.99


class Coverage(NamedTuple):
    """The measured coverage of one interval (module docstring): ``value`` = ĉ, the share of
    ``replicates`` replicate studies whose interval covers the model's true value, with its Monte
    Carlo SE ``se``; ``nominal`` the interval's level; ``reason`` why it is not estimable (``""``
    when it is; ``value`` is then NaN); ``censored_base`` / ``censored_rule`` the fraction of
    seeds on which each arm never reached the target (``log_time``; NaN for accuracy)."""

    value: float
    se: float
    nominal: float
    replicates: int
    reason: str = ""
    censored_base: float = math.nan
    censored_rule: float = math.nan

    @property
    def below(self) -> bool:
        """Below the nominal level by more than two Monte Carlo SEs."""
        return math.isfinite(self.value) and self.value < self.nominal - 2 * self.se

    def text(self) -> str:
        """``0.951``; ``0.781 ⚠ below nominal 0.975 (unreached: base 0 %, rule 60 %)`` where
        :attr:`below`; ``not estimable: …`` with the reason."""
        if self.reason:
            return f"not estimable: {self.reason}"
        out = f"{self.value:.3f}"
        if self.below:
            out += f" ⚠ below nominal {self.nominal:.4g}"
            if math.isfinite(self.censored_base):
                out += f" (unreached: base {self.censored_base:.0%}, rule {self.censored_rule:.0%})".replace("%", " %")
        return out


def _not_estimable(reason: str, level: float, censored: tuple[float, float] = (math.nan, math.nan)) -> Coverage:
    return Coverage(math.nan, math.nan, level, 0, reason, *censored)


class LatentTimes(NamedTuple):
    """The fitted model of a ``log_time`` comparison (module docstring): each arm's log-normal
    latent crossing time ``log T ~ N(μ, σ²)``, their correlation ``rho`` and the horizon."""

    mu_base: float
    sigma_base: float
    mu_rule: float
    sigma_rule: float
    rho: float
    horizon: float

    def estimand(self) -> float:
        """``θ = E[log min(T_base, h)] − E[log min(T_rule, h)]`` (module docstring)."""
        c = math.log(self.horizon)
        return restricted_log_mean(self.mu_base, self.sigma_base, c) - restricted_log_mean(self.mu_rule, self.sigma_rule, c)

    def sample(self, rng: np.random.Generator, replicates: int, n: int) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """``(R_base, R_rule)``, each ``(replicates, n)``: restricted times ``min(T, h)`` of
        ``replicates`` studies of ``n`` seeds (module docstring)."""
        x_b, x_r = _correlated(rng, replicates, n, self.mu_base, self.sigma_base, self.mu_rule, self.sigma_rule, self.rho)
        return np.minimum(np.exp(x_b), self.horizon), np.minimum(np.exp(x_r), self.horizon)


def restricted_log_mean(mu: float, sigma: float, c: float) -> float:
    """``E[min(X, c)]`` for ``X ~ N(μ, σ²)``: ``μ Φ(a) − σ φ(a) + c (1 − Φ(a))``, ``a = (c − μ)/σ``
    (module docstring)."""
    a = (c - mu) / sigma
    return float(mu * stats.norm.cdf(a) - sigma * stats.norm.pdf(a) + c * stats.norm.sf(a))


def fit_censored_normal(x: ArrayLike, observed: ArrayLike, c: float) -> tuple[float, float]:
    """The maximum-likelihood ``(μ, σ)`` of a normal sample ``x`` whose entries with
    ``observed = False`` are right-censored at ``c`` (module docstring's ``ℓ``), by
    :func:`scipy.optimize.minimize` over ``(μ, log σ)`` from the observed values' mean and SD.
    Without censoring this is the sample mean and the SD with divisor ``n``. Raises
    ``ValueError`` where fewer than two distinct values are observed."""
    x = np.asarray(x, dtype=np.float64)
    seen = np.asarray(observed, dtype=bool)
    obs, n_cens = x[seen], int(np.sum(~seen))
    if obs.size < 2 or np.all(obs == obs[0]):
        raise ValueError(f"{obs.size} observed value(s), {np.unique(obs).size} distinct: μ and σ are not identified")
    if n_cens == 0:
        return float(obs.mean()), float(obs.std())

    def nll(p: NDArray[np.float64]) -> float:
        mu, sigma = p[0], math.exp(p[1])
        return -float(np.sum(stats.norm.logpdf(obs, mu, sigma)) + n_cens * stats.norm.logsf(c, mu, sigma))

    res = optimize.minimize(nll, np.array([obs.mean(), math.log(obs.std())]), method="Nelder-Mead",
                            options={"xatol": 1e-10, "fatol": 1e-12, "maxiter": 10_000})
    if not res.success or not np.all(np.isfinite(res.x)):
        raise ValueError(f"the censored fit did not converge ({res.message})")
    return float(res.x[0]), float(math.exp(res.x[1]))


def fit_latent_times(base_restricted: ArrayLike, base_reached: ArrayLike, rule_restricted: ArrayLike, rule_reached: ArrayLike,
                     horizon: float) -> LatentTimes:
    """:class:`LatentTimes` fitted to one comparison's seeds (module docstring): each arm by
    :func:`fit_censored_normal` on its log restricted times censored at ``log h``, ``ρ`` the
    correlation over the seeds both reached (0 with fewer than 3 such seeds or no spread there).
    Raises ``ValueError`` naming the arm that cannot be fitted."""
    c = math.log(horizon)
    arms = {}
    for name, t, d in (("base", base_restricted, base_reached), ("rule", rule_restricted, rule_reached)):
        t, d = np.asarray(t, dtype=np.float64), np.asarray(d, dtype=bool)
        try:
            arms[name] = fit_censored_normal(np.log(t), d, c)
        except ValueError as err:
            raise ValueError(f"the {name} reached the target on {int(d.sum())}/{d.size} seeds; {err}") from None
    both = np.asarray(base_reached, dtype=bool) & np.asarray(rule_reached, dtype=bool)
    rho = 0.0
    if both.sum() >= 3:
        lb, lr = np.log(np.asarray(base_restricted, dtype=np.float64)[both]), np.log(np.asarray(rule_restricted, dtype=np.float64)[both])
        if lb.std() > 0 and lr.std() > 0:
            rho = float(np.clip(np.corrcoef(lb, lr)[0, 1], -RHO_CAP, RHO_CAP))
    return LatentTimes(*arms["base"], *arms["rule"], rho, float(horizon))


def _correlated(rng: np.random.Generator, replicates: int, n: int, mu_a: float, sd_a: float, mu_b: float, sd_b: float,
                rho: float) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
    z = rng.standard_normal((2, replicates, n))
    return mu_a + sd_a * z[0], mu_b + sd_b * (rho * z[0] + math.sqrt(1 - rho * rho) * z[1])


def _share_covering(interval: Callable[[NDArray[np.float64], NDArray[np.float64], float], PairedTest], base: NDArray[np.float64],
                    rule: NDArray[np.float64], theta: float, level: float) -> tuple[float, float]:
    hits = 0
    for b, r in zip(base, rule):
        test = interval(b, r, level)
        hits += bool(test.low <= theta <= test.high)  # NaN ends (not estimable) compare False
    value = hits / len(base)
    return value, math.sqrt(value * (1 - value) / len(base))


def time_coverage(base_restricted: ArrayLike, base_reached: ArrayLike, rule_restricted: ArrayLike, rule_reached: ArrayLike,
                  horizon: float, level: float, replicates: int = REPLICATES, seed: int = 0) -> Coverage:
    """The measured coverage of :func:`~analysis.confirm.intervals.log_time_t` at ``level`` for
    one ``log_time`` comparison (module docstring): :func:`fit_latent_times`, ``replicates``
    studies of as many seeds drawn from ``numpy.random.default_rng(seed)``, the share whose
    interval covers :meth:`LatentTimes.estimand`."""
    bd, rd = np.asarray(base_reached, dtype=bool), np.asarray(rule_reached, dtype=bool)
    censored = (float(np.mean(~bd)), float(np.mean(~rd))) if bd.size else (math.nan, math.nan)
    if bd.size < 2:
        return _not_estimable(f"{bd.size} paired seed(s)", level, censored)
    try:
        model = fit_latent_times(base_restricted, bd, rule_restricted, rd, horizon)
    except ValueError as err:
        return _not_estimable(str(err), level, censored)
    rb, rr = model.sample(np.random.default_rng(seed), replicates, bd.size)
    value, se = _share_covering(log_time_t, rb, rr, model.estimand(), level)
    return Coverage(value, se, level, replicates, "", *censored)


def accuracy_coverage(base_accuracy: ArrayLike, rule_accuracy: ArrayLike, level: float, replicates: int = REPLICATES,
                      seed: int = 0) -> Coverage:
    """The measured coverage of :func:`~analysis.confirm.intervals.accuracy_t` at ``level`` for
    one ``final_accuracy`` comparison (module docstring): a bivariate normal with the finite
    pairs' means, SDs (divisor ``n − 1``) and correlation, ``replicates`` studies of as many
    seeds, the share whose interval covers ``μ_rule − μ_base``."""
    b, r = np.asarray(base_accuracy, dtype=np.float64), np.asarray(rule_accuracy, dtype=np.float64)
    ok = np.isfinite(b) & np.isfinite(r)
    b, r = b[ok], r[ok]
    if b.size < 2:
        return _not_estimable(f"{b.size} paired seed(s) with both runs finite", level)
    if np.all(r - b == (r - b)[0]):
        return _not_estimable("the paired differences have no spread", level)
    sb, sr = float(b.std(ddof=1)), float(r.std(ddof=1))
    rho = float(np.clip(np.corrcoef(b, r)[0, 1], -RHO_CAP, RHO_CAP)) if sb > 0 and sr > 0 else 0.0
    xb, xr = _correlated(np.random.default_rng(seed), replicates, b.size, float(b.mean()), sb, float(r.mean()), sr, rho)
    value, se = _share_covering(accuracy_t, xb, xr, float(r.mean() - b.mean()), level)
    return Coverage(value, se, level, replicates)
