"""The accountants a scenario can name (``privacy.accountant``, registered in
:data:`asyncfl.config.registries.ACCOUNTANTS`; docs/privacy.md §4), and what they account.

A run's releases about one client are :class:`Releases`: ``count`` Gaussian mechanisms with
noise multiplier σ (noise std / L2 sensitivity), each Poisson-subsampled at ``rate`` q, or not
subsampled at all (``rate = None``)::

    rate = q:     SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), count)
    rate = None:  SelfComposedDpEvent(GaussianDpEvent(σ), count)

Which releases a run makes is the sampling assumption's answer (:mod:`asyncfl.privacy.sampling`,
docs/privacy.md §5–6). Each accountant is a function ``(releases, σ, δ) -> ε`` evaluated with
``dp-accounting`` under its default add-or-remove-one neighbouring relation (user level: one
client's data present or absent). Argument checks, the ``inf`` floor and calibration are in
:mod:`asyncfl.privacy.accounting`, which looks these up by name.

``dp-accounting`` is imported on first use, not with this module: importing it (scipy.stats and
scipy.signal with it) takes ≈ 0.6 s, and every run imports this module through the privacy
package (the bias report reads the count mechanism), private or not — a sweep worker paid it
before its first run.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from asyncfl.privacy import allocation
from asyncfl.components.contracts import returns

if TYPE_CHECKING:
    import dp_accounting


@dataclass(frozen=True)
class Releases:
    """What a run releases about one client (docs/privacy.md §4): ``count`` Gaussian mechanisms,
    each Poisson-subsampled at ``rate`` (``None``: not subsampled, no amplification)."""

    count: int
    rate: float | None = None
    #: random allocation (docs/privacy.md §13): ``count`` = k of every ``window`` = t steps, repeated
    #: over ``windows`` windows (None: not allocated)
    window: int | None = None
    windows: int = 1

    @property
    def allocated(self) -> bool:
        return self.window is not None

    def unamplified(self) -> Releases:
        """The same contributions composed without amplification: ``k·W`` Gaussian releases (a
        valid, loose bound for allocated releases; the releases themselves otherwise)."""
        return Releases(self.count * self.windows) if self.allocated else self

    def event(self, sigma: float) -> dp_accounting.DpEvent:
        """The ``dp-accounting`` event of these releases at noise multiplier ``σ`` (random
        allocation has none in dp-accounting: :mod:`asyncfl.privacy.allocation` accounts it)."""
        import dp_accounting

        if self.allocated:
            raise ValueError("random-allocation releases have no dp-accounting event (asyncfl.privacy.allocation)")
        inner: dp_accounting.DpEvent = dp_accounting.GaussianDpEvent(sigma)
        if self.rate is not None:
            inner = dp_accounting.PoissonSampledDpEvent(self.rate, inner)
        return dp_accounting.SelfComposedDpEvent(inner, self.count)

    def describe(self) -> str:
        if self.allocated:
            return (f"{self.count} of every {self.window} steps over {self.windows} window{'s' if self.windows != 1 else ''}"
                    " (random allocation)")
        if self.rate is None:
            return f"{self.count} Gaussian release{'s' if self.count != 1 else ''} without subsampling"
        return f"{self.count} step{'s' if self.count != 1 else ''} at sampling rate q = {self.rate:.4g}"


def dp_event(sigma: float, q: float, steps: int) -> dp_accounting.DpEvent:
    """``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), T)``."""
    return Releases(steps, q).event(sigma)


def _rdp_epsilon(releases: Releases, sigma: float, delta: float) -> float:
    # dp-accounting logs (through absl) every Rényi order whose series fails to converge and
    # that it excludes; those orders only loosen the bound, so the warnings are muted here.
    from dp_accounting import rdp

    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.setLevel(logging.ERROR)
    try:
        # random allocation has no RDP event here: its unamplified composition is a valid, loose bound (§13)
        return float(rdp.RdpAccountant().compose(releases.unamplified().event(sigma)).get_epsilon(delta))
    finally:
        absl_logger.setLevel(level)


def pld_interval(releases: Releases, sigma: float, delta: float) -> float:
    """The PLD ``value_discretization_interval`` used for ``σ`` (docs/privacy.md §4)::

        vdi = max(1e-5, min(1e-3, ε_rdp / (100 √n)), (10/s + 1/(2s²)) / 1e5, ε_rdp / 1e6)

    with ``ε_rdp`` the RDP bound of the same releases, and ``(s, n)`` the noise multiplier of one
    PLD that dp-accounting builds and the number of times it composes it: ``(σ, T)`` for Poisson
    releases; ``(σ/√k, 1)`` for ``k`` un-subsampled ones, which dp-accounting evaluates as one
    Gaussian mechanism of multiplier ``σ/√k`` (the k-fold composition of ``Gaussian(σ)`` is
    exactly that mechanism)."""
    eps_ref = _rdp_epsilon(releases, sigma, delta)
    if releases.rate is None:
        s, n = sigma / math.sqrt(releases.count), 1
    else:
        s, n = sigma, releases.count
    per_step_range = 10.0 / s + 1.0 / (2.0 * s**2)
    return max(1e-5, min(1e-3, eps_ref / (100.0 * math.sqrt(n))), per_step_range / 1e5, eps_ref / 1e6)


def rdp_epsilon(releases: Releases, sigma: float, delta: float) -> float:
    """``'rdp'``: the Rényi-DP bound on ε (no argument checks: see
    :func:`asyncfl.privacy.accounting.epsilon_of`)."""
    return _rdp_epsilon(releases, sigma, delta)


def pld_epsilon(releases: Releases, sigma: float, delta: float) -> float:
    """``'pld'``: the privacy-loss-distribution bound on ε with the grid of :func:`pld_interval`
    (the RDP bound where that grid would be coarser than 1; no argument checks: see
    :func:`asyncfl.privacy.accounting.epsilon_of`)."""
    from dp_accounting import pld

    if releases.allocated:  # random allocation: Feldman & Shenfeld's PLD (docs/privacy.md §13)
        return allocation.allocation_epsilon(releases, sigma, delta).upper
    interval = pld_interval(releases, sigma, delta)
    if interval > 1.0:  # ε_rdp > 1e6 or σ ≲ 2e-3: see asyncfl.privacy.accounting
        return _rdp_epsilon(releases, sigma, delta)
    acc = pld.PLDAccountant(value_discretization_interval=interval)
    return float(acc.compose(releases.event(sigma)).get_epsilon(delta))


# the accountant components' builders (asyncfl.components.builtin): build(cfg, ctx) -> Accountant
build_pld = returns(pld_epsilon)
build_rdp = returns(rdp_epsilon)
