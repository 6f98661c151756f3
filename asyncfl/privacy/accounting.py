"""Privacy accounting for private aggregation (docs/privacy.md).

Each server step releases ``Σ_k y_k + N(0, σ² S² I)`` over a buffer of ``C`` clients drawn
from ``N``; it is accounted as the Poisson-subsampled Gaussian mechanism with sampling rate
``q = C / N`` and noise multiplier ``σ`` (noise std / L2 sensitivity), self-composed over the
``T`` server steps::

    SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), T)

and evaluated with a real accountant from ``dp-accounting``: ``'pld'`` (privacy loss
distributions, tight; the default; :func:`pld_epsilon`) or ``'rdp'`` (Rényi DP, looser but
cheap; :func:`rdp_epsilon`). The accountants (``privacy.accountant``) are registered in
:data:`asyncfl.config.registries.ACCOUNTANTS` (docs/privacy.md); each is a function
``(σ, δ, q, steps) -> ε``.

PLD discretisation
------------------
``PLDAccountant`` rounds privacy losses pessimistically onto a grid of width
``value_discretization_interval`` (vdi), so any vdi gives an upper bound on ε; a finer grid is
tighter but costs memory and time proportional to (range of the losses) / vdi. A fixed vdi is
wrong at both ends: at small σ the per-step loss range (≈ 10/σ + 1/(2σ²)) makes the grid
explode (σ = 10⁻³ with vdi = 10⁻³ needs tens of GB), and at small ε the rounding error
(empirically ≈ 0.3·√T·vdi) is a large fraction of ε. :func:`pld_interval` therefore uses::

    vdi = max(1e-5, min(1e-3, ε_rdp / (100 √T)), (10/σ + 1/(2σ²)) / 1e5, ε_rdp / 1e6)

with ``ε_rdp`` the (cheap, looser) RDP bound for the same event: never coarser than 10⁻³
unless a grid of more than ~10⁵ points per step or ~10⁶ points after composition would be
needed — and then ε is large enough (hundreds or more) that the relative error stays small.
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

import math

from scipy import optimize

from asyncfl.config.registries import ACCOUNTANTS
from asyncfl.errors import ScenarioError
from asyncfl.privacy.accountants import dp_event, pld_epsilon, pld_interval, rdp_epsilon  # noqa: F401 (re-exported)

Accountant = str
"""A name in :data:`asyncfl.config.registries.ACCOUNTANTS` (``privacy.accountant``)."""
SIGMA_MIN = 1e-3
SIGMA_MAX = 1e6


def _check_args(sigma: float | None, delta: float, q: float, steps: int, accountant: str) -> None:
    if accountant not in ACCOUNTANTS:
        raise ScenarioError([ACCOUNTANTS.unknown(accountant)])
    if not 0.0 < delta < 1.0:
        raise ScenarioError([f"privacy.delta = {delta!r}: must be in (0, 1)"])
    if not 0.0 < q <= 1.0:
        raise ScenarioError([f"sampling rate q = C/N = {q!r}: must be in (0, 1] (server.buffer ≤ population.clients)"])
    if int(steps) != steps or steps < 1:
        raise ScenarioError([f"run.steps = {steps!r}: must be a positive integer"])
    if sigma is not None and not (sigma > 0.0 and math.isfinite(sigma)):
        raise ScenarioError([f"privacy.noise_multiplier = {sigma!r}: must be a positive finite number"])


def epsilon_spent(sigma: float, delta: float, q: float, steps: int, accountant: Accountant = "pld") -> float:
    """ε spent at ``δ`` by ``T = steps`` releases of the Poisson-subsampled Gaussian mechanism
    with sampling rate ``q = C/N`` and noise multiplier ``σ`` (docs/privacy.md). An upper bound
    (PLD with pessimistic rounding, or RDP); ``inf`` when ``σ <`` :data:`SIGMA_MIN`."""
    _check_args(sigma, delta, q, steps, accountant)
    if sigma < SIGMA_MIN:
        return math.inf
    return ACCOUNTANTS.load(accountant)(sigma, delta, q, steps)


def calibrate_sigma(epsilon: float, delta: float, q: float, steps: int, accountant: Accountant = "pld") -> float:
    """The smallest noise multiplier ``σ`` (to relative tolerance 10⁻⁵) whose
    :func:`epsilon_spent` is at most ``epsilon`` at ``delta`` (docs/privacy.md).

    Works like ``dp_accounting.calibrate_dp_mechanism`` (bracket by doubling, then Brent's
    method, then make sure the returned σ is on the private side), but on
    :func:`epsilon_spent` itself so that the PLD grid follows σ and the reported ε of the
    returned σ is the one it was calibrated with (never above the target).

    If even σ = :data:`SIGMA_MIN` meets the target, that σ is returned (it spends less than
    the target). Raises :class:`ScenarioError` naming ``privacy.epsilon`` / ``privacy.delta``
    when the target would need ``σ >`` :data:`SIGMA_MAX`.
    """
    _check_args(None, delta, q, steps, accountant)
    if not (epsilon > 0.0 and math.isfinite(epsilon)):
        raise ScenarioError([f"privacy.epsilon = {epsilon!r}: must be a positive finite number"])

    def gap(sigma: float) -> float:
        return epsilon_spent(sigma, delta, q, steps, accountant) - epsilon

    lo, hi = 0.5, 1.0
    if gap(hi) > 0:  # too little noise at σ = 1: double up
        lo = hi
        while gap(hi) > 0:
            lo, hi = hi, 2.0 * hi
            if hi > SIGMA_MAX:
                raise ScenarioError([
                    f"privacy.epsilon = {epsilon}, privacy.delta = {delta}: unreachable with "
                    f"{steps} steps at sampling rate q = {q:.4g} — it would need a noise multiplier "
                    f"σ > {SIGMA_MAX:g}; raise privacy.epsilon or privacy.delta (or run fewer steps)"
                ])
    else:  # σ = 1 already suffices: halve down
        while gap(lo) <= 0:
            if lo <= SIGMA_MIN:
                return SIGMA_MIN
            lo, hi = max(lo / 2.0, SIGMA_MIN), lo
    # now gap(lo) > 0 ≥ gap(hi)
    sigma = optimize.brentq(gap, lo, hi, xtol=1e-12, rtol=1e-5)
    step = 1e-5 * sigma
    while gap(sigma) > 0:  # Brent's root may sit a hair on the wrong side
        sigma += step
        step *= 2.0
    return float(sigma)
