"""f-DP trade-offs: what an attacker testing "this client took part" can achieve (docs/privacy.md §15).

For a mechanism whose privacy profile is ``δ(ε)`` (ε ≥ 0, the larger of the two directions of its
privacy loss distribution), every test of "the client's data is in" against "it is not" with false
positive rate ``α`` has false negative rate at least (Dong, Roth & Su 2022, Prop. 2.12)::

    β(α) = sup_{ε ≥ 0} max( 0,  1 − δ(ε) − e^ε α,  e^{−ε} (1 − δ(ε) − α) )

so its true positive rate is at most ``TPR(α) = 1 − β(α)``. The profile is exact for the PLD, so the
trade-off is that of the PLD (an upper bound on the attacker's power when the PLD dominates the
mechanism). For the Gaussian mechanism of sensitivity Δ and noise σ (μ = Δ/σ) it is
``TPR(α) = Φ(Φ⁻¹(α) + μ)`` — the check in the tests.

:func:`tpr_at` evaluates the supremum on a grid of ε and refines the best grid point by a bounded
scalar search (the objective is smooth in ε between grid points); :func:`releases_pld` builds the
PLD of a run's releases with dp-accounting (or pld-accounting for random allocation).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import numpy as np

from asyncfl.privacy import allocation
from asyncfl.privacy.accountants import Releases
from asyncfl.privacy.accounting import SIGMA_MIN

if TYPE_CHECKING:
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution

#: the false positive rates each private run reports the attacker's true positive rate at
FPRS = (1e-3, 1e-2, 1e-1)
#: the false positive rates of the curve ``summary.json`` keeps for ``asyncfl plot --tradeoff``
CURVE_FPRS = tuple(float(a) for a in np.logspace(-5, 0, 21)[:-1])
#: the PLD grid of the trade-off: connect-the-dots PLDs at 1e-3 give the Gaussian trade-off to < 1e-7
TRADEOFF_INTERVAL = 1e-3


class Profile:
    """``δ(ε)`` of a PLD, vectorised (dp-accounting's own evaluation of many ε is too slow for a
    search): for each direction's loss pmf ``(ℓ_j, p_j)`` and mass ``p_∞`` at infinity,

        δ(ε) = p_∞ + Σ_{ℓ_j > ε} p_j (1 − e^{ε − ℓ_j}) = p_∞ + A(ε) − e^ε B(ε)

    with the suffix sums ``A = Σ_{ℓ_j > ε} p_j`` and ``B = Σ_{ℓ_j > ε} p_j e^{−ℓ_j}``; the profile is
    the larger of the two directions (remove, add)."""

    def __init__(self, pld: PrivacyLossDistribution) -> None:
        # dp-accounting keeps each direction's pmf as a (dense or sparse) PLD pmf; it has no public
        # accessor for the arrays, so the two attributes are read here, in one place
        pmfs = [pld._pmf_remove] if pld._symmetric else [pld._pmf_remove, pld._pmf_add]
        self.parts = []
        for pmf in pmfs:
            dense = pmf.to_dense_pmf() if hasattr(pmf, "to_dense_pmf") else pmf
            probs = np.asarray(dense._probs, dtype=np.float64)
            losses = (np.arange(probs.size) + dense._lower_loss) * dense._discretization
            a = np.append(np.cumsum(probs[::-1])[::-1], 0.0)
            b = np.append(np.cumsum((probs * np.exp(-losses))[::-1])[::-1], 0.0)
            self.parts.append((losses, a, b, float(dense._infinity_mass)))

    def delta(self, eps: np.ndarray) -> np.ndarray:
        out = np.zeros_like(eps, dtype=np.float64)
        for losses, a, b, inf in self.parts:
            idx = np.searchsorted(losses, eps, side="right")
            out = np.maximum(out, np.clip(inf + a[idx] - np.exp(eps) * b[idx], 0.0, 1.0))
        return out


def _objective(profile: Profile, alpha: float, eps: np.ndarray) -> np.ndarray:
    one = 1.0 - profile.delta(eps)
    return np.maximum.reduce([np.zeros_like(eps), one - np.exp(eps) * alpha, np.exp(-eps) * (one - alpha)])


def tpr_at(pld: PrivacyLossDistribution | Profile, alpha: float, eps_max: float = 60.0, grid: int = 6001) -> float:
    """``TPR(α) = 1 − β(α)`` of ``pld`` (module docstring)."""
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"false positive rate {alpha!r}: must be in (0, 1)")
    pld = pld if isinstance(pld, Profile) else Profile(pld)
    eps = np.linspace(0.0, eps_max, grid)
    values = _objective(pld, alpha, eps)
    i = int(np.argmax(values))
    lo, hi = eps[max(i - 1, 0)], eps[min(i + 1, grid - 1)]
    best = float(values[i])
    if hi > lo:
        from scipy import optimize  # imported on first use (start-up of runs that are not private)

        res = optimize.minimize_scalar(lambda e: -float(_objective(pld, alpha, np.array([e]))[0]), bounds=(lo, hi),
                                       method="bounded", options={"xatol": 1e-10})
        best = max(best, -float(res.fun))
    return float(min(1.0, max(0.0, 1.0 - best)))


def tradeoff(pld: PrivacyLossDistribution, fprs: Sequence[float] = FPRS) -> dict[str, float]:
    """``{"tpr_at_fpr_0.001": …, …}``: the attacker's best true positive rate at each ``α``."""
    profile = Profile(pld)
    return {f"tpr_at_fpr_{alpha:g}": tpr_at(profile, alpha) for alpha in fprs}


def curve(pld: PrivacyLossDistribution, fprs: Sequence[float] = CURVE_FPRS) -> list[float]:
    """``TPR(α)`` at each of ``fprs`` (the curve a figure draws)."""
    profile = Profile(pld)
    return [tpr_at(profile, alpha) for alpha in fprs]


def gaussian_tpr(alpha: float, mu: float) -> float:
    """``Φ(Φ⁻¹(α) + μ)``: the trade-off of μ-GDP (the Gaussian mechanism with Δ/σ = μ)."""
    from scipy import stats

    return float(stats.norm.cdf(stats.norm.ppf(alpha) + mu))


def releases_pld(releases: Releases, sigma: float, interval: float = TRADEOFF_INTERVAL) -> PrivacyLossDistribution:
    """The PLD of ``releases`` at noise multiplier ``σ``: Gaussian (``k`` releases are one Gaussian
    of multiplier ``σ/√k``), Poisson-subsampled and composed, or random allocation's."""
    from dp_accounting.pld import privacy_loss_distribution as pldlib

    if releases.allocated:
        return allocation.allocation_pld(releases, sigma)
    if releases.rate is None:
        s = sigma / math.sqrt(releases.count)
        # the grid must also hold the loss range (≈ 10/s + 1/(2s²)) in ~10⁵ points (as for ε, §4)
        grid = max(interval, (10.0 / s + 1.0 / (2.0 * s * s)) / 1e5)
        return pldlib.from_gaussian_mechanism(s, value_discretization_interval=grid)
    grid = max(interval, 1e-3, (10.0 / sigma + 1.0 / (2.0 * sigma * sigma)) / 1e5)
    one = pldlib.from_gaussian_mechanism(sigma, sampling_prob=releases.rate, value_discretization_interval=grid)
    return one.self_compose(releases.count)


def trivial(releases: Releases, sigma: float) -> bool:
    """Whether the noise is too small for a trade-off to mean anything (σ below the accounting's
    floor, where ε is reported as ``inf``, docs/privacy.md §4): the attacker's TPR is then 1."""
    return sigma < SIGMA_MIN or (releases.rate is None and not releases.allocated and sigma / math.sqrt(releases.count) < 1e-2)
