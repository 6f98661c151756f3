"""Privacy accounting for private aggregation (docs/privacy.md §4–7).

Each server step releases ``Σ_k y_k + N(0, σ² S² I)``: one Gaussian mechanism with noise
multiplier ``σ`` (noise std / L2 sensitivity) with respect to each client in the step. What the
run releases about one client over the whole run — :class:`~asyncfl.privacy.accountants.Releases`
— depends on the sampling assumption (``privacy.sampling``, :mod:`asyncfl.privacy.sampling`):

* ``poisson`` (§5, an approximation): ``T`` steps, each Poisson-subsampled at ``q = M/N``::

      SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), T)

* ``participation-cap`` (§6, a guarantee): at most ``k`` steps per client, not subsampled::

      SelfComposedDpEvent(GaussianDpEvent(σ), k)

and is evaluated with a real accountant from ``dp-accounting``: ``'pld'`` (privacy loss
distributions, tight; the default) or ``'rdp'`` (Rényi DP, looser but cheap), registered in
:data:`asyncfl.config.registries.ACCOUNTANTS`; each is a function ``(releases, σ, δ) -> ε``.
:func:`epsilon_of` and :func:`sigma_for` take any releases; :func:`epsilon_spent` and
:func:`calibrate_sigma` are the Poisson case ``(q, T)``.

PLD discretisation
------------------
``PLDAccountant`` rounds privacy losses pessimistically onto a grid of width
``value_discretization_interval`` (vdi), so any vdi gives an upper bound on ε; a finer grid is
tighter but costs memory and time proportional to (range of the losses) / vdi. A fixed vdi is
wrong at both ends: at small σ the per-step loss range (≈ 10/σ + 1/(2σ²)) makes the grid
explode (σ = 10⁻³ with vdi = 10⁻³ needs tens of GB), and at small ε the rounding error
(empirically ≈ 0.3·√T·vdi) is a large fraction of ε.
:func:`~asyncfl.privacy.accountants.pld_interval` therefore uses::

    vdi = max(1e-5, min(1e-3, ε_rdp / (100 √T)), (10/σ + 1/(2σ²)) / 1e5, ε_rdp / 1e6)

with ``ε_rdp`` the (cheap, looser) RDP bound for the same releases (for ``k`` un-subsampled
releases, σ/√k and T = 1: dp-accounting evaluates them as one Gaussian mechanism): never coarser
than 10⁻³ unless a grid of more than ~10⁵ points per step or ~10⁶ points after composition would
be needed — and then ε is large enough (hundreds or more) that the relative error stays small.
With it, ``epsilon_spent`` runs in well under a second per call for ``T ≤ 10⁴``. When that
rule asks for a grid coarser than 1 (ε_rdp > 10⁶, or σ < ≈ 2·10⁻³), the PLD is not built
(it would overflow) and the RDP bound — also a valid upper bound — is reported instead:
at that point there is no meaningful protection left to measure precisely.

Noise multipliers below :data:`SIGMA_MIN` = 10⁻³ are reported as ``ε = inf``: the Gaussian
mechanism alone then has ε > 10⁵ at any δ ≤ 10⁻³, far beyond any meaningful guarantee
(``inf`` is a valid, if trivial, upper bound). Targets that would need ``σ >``
:data:`SIGMA_MAX` = 10⁶ (noise a million times the sensitivity) are refused as unreachable.
"""

from __future__ import annotations

import functools
import math

from asyncfl.config.registries import ACCOUNTANTS
from asyncfl.errors import ScenarioError
from asyncfl.privacy.accountants import Releases, dp_event, pld_epsilon, pld_interval, rdp_epsilon  # noqa: F401 (re-exported)

Accountant = str
"""A name in :data:`asyncfl.config.registries.ACCOUNTANTS` (``privacy.accountant``)."""
SIGMA_MIN = 1e-3
SIGMA_MAX = 1e6


def _check_args(sigma: float | None, delta: float, releases: Releases, accountant: str) -> None:
    if accountant not in ACCOUNTANTS:
        raise ScenarioError([ACCOUNTANTS.unknown(accountant)])
    if not 0.0 < delta < 1.0:
        raise ScenarioError([f"privacy.delta = {delta!r}: must be in (0, 1)"])
    q = releases.rate
    if q is not None and not 0.0 < q <= 1.0:
        raise ScenarioError([f"sampling rate q = M/N = {q!r}: must be in (0, 1] (privacy.noise_cohort, else server.buffer, ≤ population.clients)"])
    count = releases.count
    if int(count) != count or count < 1:
        what = "run.steps" if q is not None else "privacy.max_participations"
        raise ScenarioError([f"{what} = {count!r}: must be a positive integer"])
    if sigma is not None and not (sigma >= 0.0 and math.isfinite(sigma)):
        raise ScenarioError([f"privacy.noise_multiplier = {sigma!r}: must be a finite number ≥ 0 (0: clip only)"])


@functools.lru_cache(maxsize=4096)
def _epsilon(releases: Releases, sigma: float, delta: float, accountant: str) -> float:
    return float(ACCOUNTANTS.make(accountant)(releases, sigma, delta))


def epsilon_of(releases: Releases, sigma: float, delta: float, accountant: Accountant = "pld") -> float:
    """ε spent at ``δ`` by ``releases`` at noise multiplier ``σ`` (docs/privacy.md §4). An upper
    bound (PLD with pessimistic rounding, or RDP); ``inf`` when ``σ <`` :data:`SIGMA_MIN`.
    Results are cached (a pure function of its arguments: a sweep's runs share one curve)."""
    _check_args(sigma, delta, releases, accountant)
    if sigma < SIGMA_MIN:
        return math.inf
    return _epsilon(releases, float(sigma), float(delta), accountant)


def epsilon_spent(sigma: float, delta: float, q: float, steps: int, accountant: Accountant = "pld") -> float:
    """ε spent at ``δ`` by ``T = steps`` releases of the Poisson-subsampled Gaussian mechanism
    with sampling rate ``q`` and noise multiplier ``σ`` (docs/privacy.md §5): :func:`epsilon_of`
    of ``Releases(T, q)``."""
    return epsilon_of(Releases(steps, q), sigma, delta, accountant)


def sigma_for(releases: Releases, epsilon: float, delta: float, accountant: Accountant = "pld") -> float:
    """The smallest noise multiplier ``σ`` (to relative tolerance 10⁻⁵) whose
    :func:`epsilon_of` ``releases`` is at most ``epsilon`` at ``delta`` (docs/privacy.md §4).

    Works like ``dp_accounting.calibrate_dp_mechanism`` (bracket by doubling, then Brent's
    method, then make sure the returned σ is on the private side), but on :func:`epsilon_of`
    itself so that the PLD grid follows σ and the reported ε of the returned σ is the one it was
    calibrated with (never above the target).

    If even σ = :data:`SIGMA_MIN` meets the target, that σ is returned (it spends less than
    the target). Raises :class:`ScenarioError` naming ``privacy.epsilon`` / ``privacy.delta``
    when the target would need ``σ >`` :data:`SIGMA_MAX`.
    """
    _check_args(None, delta, releases, accountant)
    if not (epsilon > 0.0 and math.isfinite(epsilon)):
        raise ScenarioError([f"privacy.epsilon = {epsilon!r}: must be a positive finite number"])

    def gap(sigma: float) -> float:
        return epsilon_of(releases, sigma, delta, accountant) - epsilon

    lo, hi = 0.5, 1.0
    if gap(hi) > 0:  # too little noise at σ = 1: double up
        lo = hi
        while gap(hi) > 0:
            lo, hi = hi, 2.0 * hi
            if hi > SIGMA_MAX:
                raise ScenarioError([
                    f"privacy.epsilon = {epsilon}, privacy.delta = {delta}: unreachable with "
                    f"{releases.describe()} — it would need a noise multiplier "
                    f"σ > {SIGMA_MAX:g}; raise privacy.epsilon or privacy.delta (or run fewer steps)"
                ])
    else:  # σ = 1 already suffices: halve down
        while gap(lo) <= 0:
            if lo <= SIGMA_MIN:
                return SIGMA_MIN
            lo, hi = max(lo / 2.0, SIGMA_MIN), lo
    # now gap(lo) > 0 ≥ gap(hi)
    from scipy import optimize  # imported here: a run that calibrates nothing starts without scipy.optimize

    sigma = optimize.brentq(gap, lo, hi, xtol=1e-12, rtol=1e-5)
    step = 1e-5 * sigma
    while gap(sigma) > 0:  # Brent's root may sit a hair on the wrong side
        sigma += step
        step *= 2.0
    return float(sigma)


def calibrate_sigma(epsilon: float, delta: float, q: float, steps: int, accountant: Accountant = "pld") -> float:
    """:func:`sigma_for` the Poisson releases ``Releases(T = steps, q)`` (docs/privacy.md §5)."""
    return sigma_for(Releases(steps, q), epsilon, delta, accountant)


def sigma_for_strategy(epsilon: float, delta: float, accountant: str = "pld") -> float:
    """σ for a run with correlated noise (docs/privacy.md §12): one Gaussian release of ``C X``
    with sensitivity ``sens(C)·S`` and noise std ``σ·sens(C)·S`` (the participations are inside
    ``sens``), so σ is the calibration of one ``GaussianDpEvent`` (``Releases(1)``)."""
    return sigma_for(Releases(1), epsilon, delta, accountant)
