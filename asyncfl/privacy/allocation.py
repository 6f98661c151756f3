"""Amplification by random allocation: ε of ``k`` of every ``t`` steps (docs/privacy.md §13).

A client allotted ``k`` of the ``t`` steps of each of ``W`` windows, uniformly and secretly, each
allotted step a Gaussian mechanism of noise multiplier σ (sensitivity 1 after scaling by ``S``),
releases about itself what Feldman & Shenfeld's *random allocation* releases. Its privacy loss
distribution is computed by the ``pld-accounting`` package (``PLD_accounting``, MIT; Feldman &
Shenfeld, *Efficient Privacy Loss Accounting for Subsampling and Random Allocation*, ICML 2026),
which returns ``dp_accounting`` PLDs on a geometric grid, rounded to dominate (an upper bound on
ε) or to be dominated (a lower bound)::

    k of t, W windows  ≼  (1 of ⌊t/k⌋)^{⊗(k − r)W} ⊗ (1 of ⌈t/k⌉)^{⊗ rW},   r = t − k⌊t/k⌋

(the package's own decomposition and composition: composing one window's PLD with dp-accounting's
``self_compose`` instead is 4× faster but regrids, 1.2% looser at σ = 1, 1 of 10, W = 3). The grid's width is :data:`LOSS_DISCRETIZATION`: any width
gives valid bounds, a finer one is tighter and slower (without numba, ≈ 5–100 s a PLD on 2 cores).

``pld-accounting`` is imported on first use (it imports scipy and dp-accounting, ≈ 2 s, and warns
once that numba is absent: the warning is muted here, results are unaffected).
"""

from __future__ import annotations

import functools
import warnings
from typing import TYPE_CHECKING, NamedTuple, Protocol

if TYPE_CHECKING:
    from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution


class Releases(Protocol):
    """What this module reads of :class:`asyncfl.privacy.accountants.Releases` (which imports
    this module to account allocated releases: described here, not imported, so no circle)."""

    count: int
    window: int | None
    windows: int

    @property
    def allocated(self) -> bool: ...

    def describe(self) -> str: ...

#: the width of pld-accounting's loss grid (its ``loss_discretization``): at σ = 1, 1 of 10 steps,
#: 0.1 gives ε = 2.664 against 2.658 at 0.05, at half the cost (docs/privacy.md §13)
LOSS_DISCRETIZATION = 0.1


class Bounds(NamedTuple):
    """ε at δ: ``upper`` (dominating PLD: the guarantee) and ``lower`` (dominated PLD: no
    accountant can prove less for this mechanism) — ``lower`` is None when not asked for."""

    upper: float
    lower: float | None


def _package():  # type: ignore[no-untyped-def]
    # lazy: pld-accounting (and scipy, dp-accounting with it) only for runs that use allocation
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ImportWarning)
        import PLD_accounting

    return PLD_accounting


def _check(releases: Releases) -> tuple[int, int, int]:
    if not releases.allocated:
        raise ValueError(f"not random-allocation releases: {releases.describe()}")
    assert releases.window is not None
    return int(releases.count), int(releases.window), int(releases.windows)


@functools.lru_cache(maxsize=64)
def allocation_pld(releases: Releases, sigma: float, upper: bool = True,
                   loss_discretization: float = LOSS_DISCRETIZATION) -> PrivacyLossDistribution:
    """The ``dp_accounting`` PLD of ``releases`` (``k`` of ``t``, ``W`` windows) at noise
    multiplier ``σ``: dominating (``upper``) or dominated, by pld-accounting's geometric grid."""
    k, t, w = _check(releases)
    pkg = _package()
    params = pkg.PrivacyParams(sigma=float(sigma), num_steps=t, num_selected=k, num_epochs=w)
    config = pkg.AllocationSchemeConfig(loss_discretization=float(loss_discretization),
                                        convolution_method=pkg.ConvolutionMethod.GEOM)
    bound = pkg.BoundType.DOMINATES if upper else pkg.BoundType.IS_DOMINATED
    return pkg.gaussian_allocation_pld(params=params, config=config, bound_type=bound)


def allocation_epsilon(releases: Releases, sigma: float, delta: float, lower: bool = False,
                       loss_discretization: float = LOSS_DISCRETIZATION) -> Bounds:
    """ε at ``δ`` of ``releases`` at noise multiplier ``σ``: the upper bound, and the lower bound
    when ``lower`` (a second PLD, as costly as the first)."""
    up = float(allocation_pld(releases, sigma, True, loss_discretization).get_epsilon_for_delta(delta))
    lo = (float(allocation_pld(releases, sigma, False, loss_discretization).get_epsilon_for_delta(delta))
          if lower else None)
    return Bounds(up, lo)
