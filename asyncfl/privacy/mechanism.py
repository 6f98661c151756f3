"""The Gaussian mechanism on staleness-tagged payloads, as pure functions (docs/privacy.md).

Client side (pfl's ``postprocess_one_user``): client ``k`` with staleness ``τ_k`` sends::

    y_k = w(τ_k)·clip(Δ_k, S_Δ) ⊕ γ·onehot_L(τ_k),     ‖y_k‖ ≤ S = √(S_Δ² + γ²)

Server side (``postprocess_server``): it sees only ``Σ_k y_k + N(0, σ² S² I)`` and decodes
``r_t = (first d coordinates)/C`` and ``ĉ_τ = (last L coordinates)/γ``. The count noise has
std ``ξ = σS/γ`` (seed eq. 17); choosing ``ξ > σ`` fixes ``γ = σ S_Δ / √(ξ² − σ²)``.
Everything after the noisy sum — decoding and :func:`postprocess_counts` — is post-processing
and costs no privacy (docs/privacy.md). The count post-processing modes (``privacy.counts``)
are registered in :data:`asyncfl.config.registries.COUNT_MODES`; each is a function
``(ĉ, C) -> c'`` of one row of noisy counts.
"""

from __future__ import annotations

import math

import numpy as np
import torch

from asyncfl.config.registries import COUNT_MODES
from asyncfl.errors import NumericalFault, ScenarioError
from asyncfl.privacy.counts import counts_clamp, counts_project, counts_raw, project_simplex  # noqa: F401 (re-exported)
from asyncfl.tensor_checks import all_finite

CountsMode = str
"""A name in :data:`asyncfl.config.registries.COUNT_MODES` (``privacy.counts``)."""


def clip(delta: torch.Tensor, S: float) -> torch.Tensor:
    """``clip(Δ, S) = Δ · min(1, S/‖Δ‖₂)``: a copy of ``Δ`` scaled to L2 norm at most ``S``.

    The norm is computed in float64 after dividing by ``max|Δ|`` (no overflow for huge ``Δ``,
    no underflow for tiny ones), and the result is shrunk by a few ulps if rounding left it a
    hair above ``S``, so ``‖clip(Δ, S)‖ ≤ S`` holds exactly as computed in float64. A
    non-finite ``Δ`` raises :class:`NumericalFault` (it cannot be given a bounded norm)."""
    if S <= 0 or not math.isfinite(S):
        raise ValueError(f"clip norm S = {S!r}: must be positive and finite")
    x = delta.detach()
    if not all_finite(x):
        raise NumericalFault("a client update has non-finite entries; it cannot be clipped")
    x64 = x.to(torch.float64)
    peak = float(x64.abs().max()) if x64.numel() else 0.0
    if peak == 0.0:
        return x.clone()
    norm = peak * float(torch.linalg.vector_norm(x64 / peak))
    if norm <= S:
        return x.clone()
    factor = S / norm
    for _ in range(16):  # rounding (also of the cast back to Δ's dtype): shrink by a few ulps
        out = (x64 * factor).to(x.dtype)
        n = float(torch.linalg.vector_norm(out.to(torch.float64)))
        if n <= S:
            return out
        factor *= (S / n) * (1.0 - 4.0 * float(torch.finfo(x.dtype).eps))
    return torch.zeros_like(x)  # unreachable in practice; zero is always within the bound


def sensitivity(clip: float, gamma: float) -> float:
    """L2 sensitivity of one payload: ``S = √(S_Δ² + γ²)``."""
    return math.hypot(clip, gamma)


def payload(delta: torch.Tensor, tau: int, weight: float, clip: float, gamma: float, L: int) -> torch.Tensor:
    """``y = w(τ)·clip(Δ, S_Δ) ⊕ γ·onehot_L(τ)`` (flattened, float64, length ``d + L``).

    ``weight = w(τ) = (τ+1)^(−p)`` must lie in ``[0, 1]`` so that ``‖y‖ ≤ S``. Built in float64
    so the sensitivity bound is not undone by float32 rounding of ``γ``."""
    if not 0 <= tau < L:
        raise ValueError(f"staleness τ = {tau}: the one-hot payload has length L = {L} (0 ≤ τ < L)")
    if not 0.0 <= weight <= 1.0:
        raise ValueError(f"staleness weight w(τ) = {weight!r}: must lie in [0, 1] for ‖y‖ ≤ S")
    head = _clip_fn(delta, clip).reshape(-1).to(torch.float64) * float(weight)
    tail = torch.zeros(L, dtype=torch.float64, device=head.device)
    tail[tau] = gamma
    return torch.cat([head, tail])


_clip_fn = clip  # `payload`'s parameter named `clip` shadows the function


def decode(noisy_sum: torch.Tensor, d: int, L: int, C: int, gamma: float) -> tuple[torch.Tensor, np.ndarray]:
    """``r = noisy_sum[:d] / C`` and ``ĉ_τ = noisy_sum[d:d+L] / γ`` (raw, possibly negative)."""
    if noisy_sum.numel() != d + L:
        raise ValueError(f"noisy sum has {noisy_sum.numel()} coordinates, expected d + L = {d + L}")
    flat = noisy_sum.reshape(-1)
    r = flat[:d] / C
    c_hat = (flat[d:] / gamma).detach().cpu().to(torch.float64).numpy().copy()
    return r, c_hat


def postprocess_counts(c_hat: np.ndarray, C: int, mode: CountsMode = "project", exact: np.ndarray | None = None) -> np.ndarray:
    """Post-process one row of noisy counts ``ĉ_τ`` (free under DP, docs/privacy.md) with the mode
    registered as ``mode`` in :data:`~asyncfl.config.registries.COUNT_MODES`:

    * ``'raw'``: unchanged (:func:`counts_raw`);
    * ``'clamp'``: ``max(ĉ_τ, 0)`` (:func:`counts_clamp`);
    * ``'project'``: clamp, then rescale to sum ``C``; uniform ``C/L`` if nothing is left
      (:func:`counts_project`);
    * ``'simplex'``: Euclidean projection onto ``{c ≥ 0, Σc = C}`` (:func:`project_simplex`);
      never increases the L2 error. Offered for comparison (``analysis/privacy_counts_eval.py``).

    A mode whose traits declare ``exact`` (an analysis oracle, docs/privacy.md §3) also gets the
    step's ``exact`` counts, which the caller must then give."""
    if mode not in COUNT_MODES:
        raise ScenarioError([COUNT_MODES.unknown(mode)])
    c = np.asarray(c_hat, dtype=np.float64)
    if COUNT_MODES.get(mode).traits.exact:
        if exact is None:
            raise ValueError(f"privacy.counts = {mode!r} reads the exact counts, and none were given")
        return COUNT_MODES.make(mode)(c, C, np.asarray(exact, dtype=np.float64))
    return COUNT_MODES.make(mode)(c, C)


def gamma_from_xi(sigma: float, clip: float, xi: float) -> float:
    """``γ = σ S_Δ / √(ξ² − σ²)`` (docs/privacy.md); requires ``ξ > σ``."""
    if not xi > sigma:
        raise ScenarioError([f"privacy.xi = {xi}: must exceed the noise multiplier σ = {sigma:.6g} (the count noise ξ = σS/γ > σ for every γ)"])
    return sigma * clip / math.sqrt((xi - sigma) * (xi + sigma))


#: the largest count-noise level ξ: the bound ``privacy.xi`` has, and a γ may not imply more
MAX_XI = 1e12


def xi_bound_ok(sigma: float, clip: float, gamma: float) -> bool:
    """Whether ``γ`` implies a count noise ``ξ = σS/γ`` of at most :data:`MAX_XI`."""
    return sigma * sensitivity(clip, gamma) / gamma <= MAX_XI


def xi_from_gamma(sigma: float, clip: float, gamma: float) -> float:
    """``ξ = σ S / γ`` with ``S = √(S_Δ² + γ²)``: std of the noise on ``ĉ_τ`` (seed eq. 17).
    A γ so small that ξ would exceed :data:`MAX_XI` (the bound of ``privacy.xi``) is refused."""
    if not gamma > 0:
        raise ScenarioError([f"privacy.gamma = {gamma}: must be positive"])
    xi = sigma * sensitivity(clip, gamma) / gamma
    if not xi_bound_ok(sigma, clip, gamma):
        raise ScenarioError([f"privacy.gamma = {gamma:g}: implies a count noise ξ = σS/γ = {xi:.3g}, above {MAX_XI:g} "
                             f"(the largest ξ allowed); give γ ≥ {sigma * clip / MAX_XI:.3g} (σ = {sigma:.6g}, S_Δ = {clip:g})"])
    return xi


def update_noise_std(sigma: float, clip: float, xi: float, C: int) -> float:
    """Std of the noise on each coordinate of ``r_t``: ``σS/C = σ S_Δ ξ / (C √(ξ² − σ²))``."""
    if not xi > sigma:
        raise ScenarioError([f"privacy.xi = {xi}: must exceed the noise multiplier σ = {sigma:.6g}"])
    r = sigma / xi  # written with σ/ξ: ξ² overflows to inf for ξ above ~1e154 (the value tends to σS_Δ/C)
    return sigma * clip / (C * math.sqrt((1.0 - r) * (1.0 + r)))


def count_noise_std(xi: float, C: int) -> float:
    """Std of the noise on each entry ``ĉ_τ / C`` of the decoded row of ``W`` (before the
    ``(τ+1)^(−p)`` factor): ``ξ / C``."""
    return xi / C
