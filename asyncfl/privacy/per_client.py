"""Each client's realised privacy loss (docs/privacy.md §11).

Whatever the sampling assumption a run's ε rests on, the engine knows how many server steps each
client actually contributed to (``Participation.spent``). With respect to client ``i`` every such
step is one Gaussian mechanism of noise multiplier ``σ`` (L2 sensitivity 1 after scaling by ``S``),
and a step it did not contribute to depends on its data only through earlier outputs. Because the
schedule — who is dispatched when, which uploads land in which step — is a function of the seed,
the latency model and the availability model, never of any client's data, the ``k_i``
contributions of client ``i`` compose adaptively *without* amplification::

    client i:   SelfComposed(Gaussian(σ), k_i)  =  Gaussian(σ / √k_i)  =  μ_i-GDP,   μ_i = √k_i / σ

and its ``(ε, δ)`` is, in closed form (Dong, Roth & Su 2019, Cor. 2.13; Balle & Wang 2018)::

    δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)

:func:`client_epsilons` evaluates ``ε_i`` with the run's own accountant (dp-accounting's PLD or
RDP on ``Releases(k_i)``, one evaluation per distinct count); :func:`gdp_epsilon` is the closed
form, which the tests use as the independent check. Clients that never contributed have ``ε = 0``.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from asyncfl.privacy import accounting
from asyncfl.privacy.accountants import Releases

#: the quantiles of the per-client ε reported in ``summary.json`` (over the clients that contributed)
QUANTILES = (0.5, 0.9, 0.99)
#: the columns of ``privacy_clients.csv``
CLIENT_FIELDS = ("client", "participations", "epsilon", "mu")


def gdp_mu(count: int, sigma: float) -> float:
    """``μ = √k / σ``: the Gaussian-DP parameter of ``k`` Gaussian releases at noise multiplier
    ``σ`` (sensitivity 1), composed without amplification (docs/privacy.md §11). Without noise
    (``σ = 0``, clip only) one release is already not private: ``μ = ∞`` for ``k ≥ 1``, 0 for ``k = 0``."""
    if count < 0 or int(count) != count:
        raise ValueError(f"participation count {count!r}: must be a non-negative integer")
    if not (sigma >= 0 and math.isfinite(sigma)):
        raise ValueError(f"noise multiplier σ = {sigma!r}: must be finite and ≥ 0")
    if sigma == 0:
        return math.inf if count > 0 else 0.0
    return math.sqrt(count) / sigma


def gdp_delta(mu: float, epsilon: float) -> float:
    """``δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)`` of ``μ``-GDP (0 for ``μ = 0``). Evaluated
    with log-CDFs so that large ``ε`` does not overflow ``e^ε``."""
    if mu <= 0.0:
        return 0.0
    from scipy import stats  # imported on first use: a run that is not private starts without scipy.stats

    a = stats.norm.logcdf(-epsilon / mu + mu / 2.0)
    b = epsilon + stats.norm.logcdf(-epsilon / mu - mu / 2.0)
    return float(math.exp(a) * -math.expm1(b - a)) if a > -math.inf else 0.0


def gdp_epsilon(mu: float, delta: float) -> float:
    """The smallest ``ε ≥ 0`` with ``δ(ε) ≤ delta`` for ``μ``-GDP (the exact ε of the Gaussian
    mechanism of multiplier ``1/μ``); 0 when already ``δ(0) ≤ delta``."""
    if not 0.0 < delta < 1.0:
        raise ValueError(f"δ = {delta!r}: must be in (0, 1)")
    if gdp_delta(mu, 0.0) <= delta:
        return 0.0
    hi = max(1.0, mu * mu)
    while gdp_delta(mu, hi) > delta:
        hi *= 2.0
    from scipy import optimize

    return float(optimize.brentq(lambda e: gdp_delta(mu, e) - delta, 0.0, hi, xtol=1e-12, rtol=1e-12))


Release = Callable[[int], tuple[Releases, float]]
"""``count -> (releases, σ)``: what a client of ``count`` contributions has released (i.i.d. noise:
``(Releases(count), σ)``; correlated noise: one release, :meth:`PrivacySetup.client_release`)."""


def _iid(sigma: float) -> Release:
    return lambda count: (Releases(int(count)), sigma)


def release_mu(releases: Releases, sigma: float) -> float:
    """``μ = √n / σ`` of ``n`` un-subsampled Gaussian releases at noise multiplier ``σ``."""
    return gdp_mu(releases.count, sigma)


def client_epsilons(participations: np.ndarray, sigma: float, delta: float, accountant: str = "pld",
                    release: Release | None = None) -> np.ndarray:
    """``ε_i`` at ``δ`` of each client's ``k_i`` contributions, composed without amplification by
    the run's accountant (:func:`asyncfl.privacy.accounting.epsilon_of` of ``Releases(k_i)`` at σ,
    or of ``release(k_i)``); 0 where ``k_i = 0``. One evaluation per distinct count."""
    release = _iid(sigma) if release is None else release
    counts = np.asarray(participations, dtype=np.int64)
    out = np.zeros(counts.shape, dtype=np.float64)
    for k in np.unique(counts):
        if k > 0:
            out[counts == k] = accounting.epsilon_of(*release(int(k)), delta, accountant)
    return out


def client_summary(participations: np.ndarray, sigma: float, delta: float, accountant: str = "pld",
                   release: Release | None = None) -> dict[str, Any]:
    """The per-client ε of ``summary.json``'s ``privacy`` section: ``epsilon_client_max``, the
    quantiles :data:`QUANTILES` over the clients that contributed (``epsilon_client_p50`` …;
    ``None`` when none did) and ``mu_client_max`` (``√max k_i / σ``)."""
    release = _iid(sigma) if release is None else release
    counts = np.asarray(participations, dtype=np.int64)
    eps = client_epsilons(counts, sigma, delta, accountant, release)
    active = eps[counts > 0]
    out: dict[str, Any] = {"epsilon_client_max": float(eps.max(initial=0.0))}
    for q in QUANTILES:
        # the lower empirical quantile: a value some client actually has
        out[f"epsilon_client_p{round(q * 100)}"] = float(np.quantile(active, q, method="lower")) if active.size else None
    most = int(counts.max(initial=0))
    out["mu_client_max"] = release_mu(*release(most)) if most else 0.0
    return out


def client_rows(participations: np.ndarray, sigma: float, delta: float, accountant: str = "pld",
                release: Release | None = None) -> list[dict[str, Any]]:
    """``privacy_clients.csv``: one row per client — ``client``, ``participations`` ``k_i``,
    ``epsilon`` ``ε_i`` (run's accountant, at the run's δ) and ``mu`` (``√k_i/σ``; with
    ``release``, that of ``release(k_i)``)."""
    release = _iid(sigma) if release is None else release
    counts = np.asarray(participations, dtype=np.int64)
    eps = client_epsilons(counts, sigma, delta, accountant, release)
    mus = {int(k): (release_mu(*release(int(k))) if k > 0 else 0.0) for k in np.unique(counts)}
    return [{"client": i, "participations": int(k), "epsilon": float(e), "mu": mus[int(k)]}
            for i, (k, e) in enumerate(zip(counts, eps))]
