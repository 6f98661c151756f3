"""The private aggregator and the resolution of a ``[privacy]`` section (docs/privacy.md).

:class:`PrivateAggregator` implements the :class:`~asyncfl.server.aggregation.Aggregator` protocol:
per step it builds each buffered client's payload ``y_k``, adds them into one running sum,
adds one draw of ``N(0, σ² S² I)`` on all ``d + L`` coordinates, and decodes::

    r_t = (noisy sum)[:d] / C,   ĉ_τ = (noisy sum)[d:] / γ,   W[t, t−τ] = (τ+1)^(−p) ĉ'_τ / C

with ``ĉ'`` the post-processed counts (:func:`~asyncfl.privacy.mechanism.postprocess_counts`).
The server rule only ever receives the returned :class:`~asyncfl.server.aggregation.Aggregate`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from asyncfl.server.aggregation import Aggregate, ClientUpdate, staleness_weight, weight_row
from asyncfl.errors import ScenarioError
from asyncfl.privacy import accounting, mechanism


class PrivateAggregator:
    """Gaussian mechanism on staleness-tagged payloads (docs/privacy.md).

    Isolation of individual clients is structural:

    * payloads exist only inside :meth:`aggregate`, one at a time, and are added into a single
      float64 buffer of ``d + L`` coordinates before the noise; nothing per-client is stored;
    * the returned :class:`Aggregate` holds the step number, a freshly allocated ``r`` (not a
      view of the sum, detached from any autograd graph that could lead back to a client's
      tensor) and a freshly computed ``weights`` row;
    * it keeps no state: the raw noisy counts ``ĉ_τ`` (a post-processing of the noisy sum) are
      returned in the aggregate (``Aggregate.raw_counts``) for the run's ``private_by_staleness``.

    Payloads and the noisy sum are computed in float64 so that rounding cannot push a payload
    over the sensitivity ``S``; ``r`` is returned in the clients' dtype and device.
    """

    def __init__(
        self,
        buffer: int,
        exponent: float,
        num_staleness: int,
        sigma: float,
        clip: float,
        gamma: float,
        counts: mechanism.CountsMode = "project",
    ) -> None:
        if num_staleness is None or num_staleness < 1:
            raise ScenarioError(["server.max_staleness: must be set when privacy is enabled"])
        self.buffer = int(buffer)
        self.exponent = float(exponent)
        self.num_staleness = int(num_staleness)  # L = max_staleness + 1
        self.sigma = float(sigma)
        self.clip = float(clip)
        self.gamma = float(gamma)
        self.counts = counts
        self.noise_std = self.sigma * mechanism.sensitivity(self.clip, self.gamma)  # σS

    def aggregate(self, step: int, updates: Sequence[ClientUpdate], rng: np.random.Generator) -> Aggregate:
        """One private step: ``Σ_k y_k + N(0, σ²S² I)`` decoded into an :class:`Aggregate`.

        Draws exactly ``d + L`` standard normals from ``rng`` (``rng.normal(0, σS, d + L)``)."""
        if not updates:
            raise ValueError(f"step {step}: no client updates to aggregate")
        L = self.num_staleness
        like = updates[0].message
        d = like.numel()
        with torch.no_grad():
            total = torch.zeros(d + L, dtype=torch.float64, device=like.device)
            for u in updates:
                w = float(staleness_weight(u.staleness, self.exponent))
                total.add_(mechanism.payload(u.message, u.staleness, w, self.clip, self.gamma, L))
            noise = rng.normal(0.0, self.noise_std, size=d + L)
            total.add_(torch.from_numpy(noise).to(device=total.device))
            r, c_hat = mechanism.decode(total, d, L, self.buffer, self.gamma)
            r = r.to(dtype=like.dtype).reshape(like.shape).clone()
        del total  # the noisy sum is not kept either
        counts = mechanism.postprocess_counts(c_hat, self.buffer, self.counts)
        return Aggregate(step=int(step), r=r, weights=weight_row(counts, self.buffer, self.exponent), raw_counts=c_hat.copy())


@dataclass(frozen=True)
class PrivacySetup:
    """Resolved privacy parameters of a run (docs/privacy.md).

    ``sigma`` σ (noise multiplier), ``gamma`` γ, ``xi`` ξ = σS/γ, ``clip`` S_Δ, ``delta`` δ,
    ``epsilon_target`` (None when σ was given), ``accountant``, ``counts`` (post-processing),
    and what the accountant needs: ``sampling_rate`` q = C/N and ``steps`` T."""

    sigma: float
    gamma: float
    xi: float
    clip: float
    delta: float
    epsilon_target: float | None
    accountant: str
    counts: str
    sampling_rate: float
    steps: int

    @property
    def sensitivity(self) -> float:
        """``S = √(S_Δ² + γ²)``."""
        return mechanism.sensitivity(self.clip, self.gamma)


def build_privacy(
    privacy_cfg: Any,
    buffer: int,
    clients: int,
    steps: int,
    max_staleness: int | None,
    exponent: float,
) -> tuple[PrivacySetup, PrivateAggregator]:
    """Resolve a ``[privacy]`` section (:class:`~asyncfl.config.scenario.PrivacyConfig`) into a
    :class:`PrivacySetup` and its :class:`PrivateAggregator`.

    σ is ``noise_multiplier`` if given, else calibrated to (``epsilon``, ``delta``) for
    ``q = buffer / clients`` over ``steps`` server steps. γ follows from ``xi``
    (``γ = σS_Δ/√(ξ² − σ²)``, ξ must exceed σ) or ξ from ``gamma`` (``ξ = σS/γ``).
    Every problem raises :class:`ScenarioError` naming the field."""
    p = privacy_cfg
    problems: list[str] = []
    if (p.epsilon is None) == (p.noise_multiplier is None):
        problems.append("privacy.epsilon, privacy.noise_multiplier: give exactly one (a target ε to calibrate σ, or σ itself)")
    if (p.xi is None) == (p.gamma is None):
        problems.append("privacy.xi, privacy.gamma: give exactly one (the count-noise level ξ, or the payload scale γ)")
    if max_staleness is None:
        problems.append("server.max_staleness: must be set when privacy is enabled (the one-hot staleness payload has length max_staleness + 1)")
    if not 1 <= buffer <= clients:
        problems.append(f"server.buffer = {buffer}: must be between 1 and population.clients = {clients}")
    if problems:
        raise ScenarioError(problems)
    q = buffer / clients
    if p.noise_multiplier is not None:
        sigma = float(p.noise_multiplier)
    else:
        sigma = accounting.calibrate_sigma(p.epsilon, p.delta, q, steps, p.accountant)
    if p.xi is not None:
        if not p.xi > sigma:
            how = "given" if p.noise_multiplier is not None else f"calibrated to ε = {p.epsilon}, δ = {p.delta}"
            raise ScenarioError([f"privacy.xi = {p.xi}: must exceed the noise multiplier σ = {sigma:.6g} ({how})"])
        xi = float(p.xi)
        gamma = mechanism.gamma_from_xi(sigma, p.clip, xi)
    else:
        gamma = float(p.gamma)
        xi = mechanism.xi_from_gamma(sigma, p.clip, gamma)
    setup = PrivacySetup(
        sigma=sigma, gamma=gamma, xi=xi, clip=float(p.clip), delta=float(p.delta),
        epsilon_target=None if p.epsilon is None else float(p.epsilon), accountant=p.accountant,
        counts=p.counts, sampling_rate=q, steps=int(steps),
    )
    aggregator = PrivateAggregator(
        buffer=buffer, exponent=exponent, num_staleness=max_staleness + 1, sigma=sigma,
        clip=setup.clip, gamma=gamma, counts=p.counts,
    )
    return setup, aggregator


def summary(setup: PrivacySetup) -> dict[str, Any]:
    """What a run reports: ``sigma``, ``gamma``, ``xi``, ``epsilon_spent`` (by the setup's
    accountant for the σ actually used; ``inf`` for negligible noise, see
    :mod:`asyncfl.privacy.accounting`), ``delta``, ``accountant``."""
    eps = accounting.epsilon_spent(setup.sigma, setup.delta, setup.sampling_rate, setup.steps, setup.accountant)
    return {
        "sigma": setup.sigma,
        "gamma": setup.gamma,
        "xi": setup.xi,
        "epsilon_spent": eps,
        "delta": setup.delta,
        "accountant": setup.accountant,
    }
