"""Specification of private aggregation (docs/privacy.md), with independently computed numbers."""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
import torch
from dp_accounting import pld, rdp
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import optimize, stats

from asyncfl.server.aggregation import Aggregate, ClientUpdate, ExactAggregator, staleness_weight
from asyncfl.errors import ScenarioError
from asyncfl.privacy.per_client import gdp_mu
from asyncfl.privacy import (
    PrivateAggregator,
    build_privacy,
    calibrate_sigma,
    clip,
    count_noise_std,
    decode,
    epsilon_spent,
    gamma_from_xi,
    payload,
    postprocess_counts,
    sensitivity,
    summary,
    update_noise_std,
    xi_from_gamma,
)
from asyncfl.privacy.mechanism import project_simplex
from asyncfl.config.scenario import PrivacyConfig

ALPHA = 1e-6  # family-wise false-alarm rate of every statistical test below


def _norm64(t: torch.Tensor) -> float:
    x = t.detach().to(torch.float64)
    peak = float(x.abs().max()) if x.numel() else 0.0
    return 0.0 if peak == 0.0 else peak * float(torch.linalg.vector_norm(x / peak))


# --------------------------------------------------------------------------- payload bound
@settings(max_examples=150, deadline=None)
@given(
    values=st.lists(st.floats(-1e3, 1e3, allow_nan=False), min_size=1, max_size=40),
    log_scale=st.floats(-300, 300),
    f32=st.booleans(),
    clip_norm=st.floats(1e-6, 1e6),
    gamma=st.floats(1e-6, 1e6),
    L=st.integers(1, 20),
    data=st.data(),
)
def test_payload_norm_never_exceeds_sensitivity(values, log_scale, f32, clip_norm, gamma, L, data):
    """‖w(τ)·clip(Δ, S_Δ) ⊕ γ e_τ‖ ≤ S = √(S_Δ² + γ²) for Δ of any scale (1e-300 … 1e300,
    float32 overflowing to inf excluded), any τ < L and any weight in [0, 1]."""
    dtype = torch.float32 if f32 else torch.float64
    delta = torch.tensor(values, dtype=torch.float64) * 10.0**log_scale
    delta = delta.to(dtype)
    if not bool(torch.isfinite(delta).all()):
        return
    tau = data.draw(st.integers(0, L - 1))
    weight = data.draw(st.one_of(st.floats(0, 1), st.floats(0, 3).map(lambda p: float(staleness_weight(tau, p)))))
    y = payload(delta, tau, weight, clip_norm, gamma, L)
    assert y.dtype == torch.float64 and y.numel() == delta.numel() + L
    assert _norm64(y) <= sensitivity(clip_norm, gamma) * (1 + 1e-12)  # float64 rounding only
    assert _norm64(clip(delta, clip_norm)) <= clip_norm * (1 + 1e-12)


def test_clip_keeps_small_updates_and_scales_large_ones():
    small = torch.tensor([0.3, 0.4])  # norm 0.5
    assert torch.equal(clip(small, 1.0), small)
    big = torch.tensor([3.0, 4.0])  # norm 5 → (0.6, 0.8)
    assert torch.allclose(clip(big, 1.0), torch.tensor([0.6, 0.8]))
    y = payload(big, 2, 0.5, 1.0, 2.0, 4)
    assert torch.allclose(y, torch.tensor([0.3, 0.4, 0.0, 0.0, 2.0, 0.0], dtype=torch.float64))


# --------------------------------------------------------------------------- γ ↔ ξ
def test_gamma_xi_formulas_both_ways():
    # σ = 1, S_Δ = 1, ξ = 2: γ = 1/√3, S = √(1 + 1/3) = 2/√3, σS/γ = 2 (seed eq. 17)
    gamma = gamma_from_xi(1.0, 1.0, 2.0)
    assert gamma == pytest.approx(0.5773502691896258, rel=1e-14)
    assert sensitivity(1.0, gamma) == pytest.approx(1.1547005383792515, rel=1e-14)
    assert xi_from_gamma(1.0, 1.0, gamma) == pytest.approx(2.0, rel=1e-14)
    # σ = 0.7, S_Δ = 3, γ = 4: S = 5, ξ = 0.7·5/4 = 0.875; and back
    assert xi_from_gamma(0.7, 3.0, 4.0) == pytest.approx(0.875, rel=1e-14)
    assert gamma_from_xi(0.7, 3.0, 0.875) == pytest.approx(4.0, rel=1e-12)
    # noise on r: σS/C = σ S_Δ ξ / (C √(ξ² − σ²)); σ=1, S_Δ=1, ξ=2, C=10 → 2/(10√3)
    assert update_noise_std(1.0, 1.0, 2.0, 10) == pytest.approx(0.11547005383792516, rel=1e-14)
    assert update_noise_std(1.0, 1.0, 2.0, 10) == pytest.approx(1.0 * sensitivity(1.0, gamma) / 10, rel=1e-14)
    assert count_noise_std(2.0, 10) == pytest.approx(0.2)


@settings(max_examples=200, deadline=None)
@given(sigma=st.floats(1e-3, 1e2), clip_norm=st.floats(1e-3, 1e3), ratio=st.floats(1.0001, 1e3))
def test_gamma_xi_roundtrip(sigma, clip_norm, ratio):
    xi = sigma * ratio
    gamma = gamma_from_xi(sigma, clip_norm, xi)
    assert sigma * sensitivity(clip_norm, gamma) / gamma == pytest.approx(xi, rel=1e-9)
    assert xi_from_gamma(sigma, clip_norm, gamma) == pytest.approx(xi, rel=1e-9)


def test_xi_not_above_sigma_names_field():
    for xi in (1.0, 0.5):
        with pytest.raises(ScenarioError) as err:
            gamma_from_xi(1.0, 1.0, xi)
        assert "privacy.xi" in err.value.problems[0]


# --------------------------------------------------------------------------- aggregator
def _updates(rng: np.random.Generator, taus, d: int, scale: float = 1.0, dtype=torch.float64):
    return [
        ClientUpdate(client=k, version=10 - t, staleness=int(t), message=torch.tensor(rng.normal(0, scale, d), dtype=dtype))
        for k, t in enumerate(taus)
    ]


def test_aggregate_is_sum_of_payloads_plus_one_seeded_draw():
    C, L, d, p, S_d, gamma, sigma = 4, 3, 6, 0.5, 1.0, 0.8, 1.3
    agg = PrivateAggregator(buffer=C, exponent=p, num_staleness=L, sigma=sigma, clip=S_d, gamma=gamma, counts="raw")
    updates = _updates(np.random.default_rng(0), [0, 2, 1, 2], d, scale=2.0)
    out = agg.aggregate(7, updates, np.random.default_rng(42))

    # only the fields of an Aggregate, of the right kinds: everything is a post-processing of
    # the one noisy sum (r, the post-processed W row, and the raw noisy counts it came from)
    assert type(out) is Aggregate and out._fields == ("step", "r", "weights", "raw_counts")
    assert isinstance(out.raw_counts, np.ndarray) and out.raw_counts.shape == (L,)
    assert out.step == 7
    assert isinstance(out.r, torch.Tensor) and out.r.shape == (d,) and out.r._base is None
    assert isinstance(out.weights, np.ndarray) and out.weights.shape == (L,)

    # independent reconstruction: Σ_k [w(τ_k) clip(Δ_k) ⊕ γ e_τk] + rng.normal(0, σS, d+L)
    S = math.sqrt(S_d**2 + gamma**2)
    noise = np.random.default_rng(42).normal(0.0, sigma * S, d + L)
    total = np.zeros(d + L)
    for u in updates:
        v = u.message.numpy()
        total[:d] += (u.staleness + 1.0) ** (-p) * v * min(1.0, S_d / np.linalg.norm(v))
        total[d + u.staleness] += gamma
    noisy = total + noise
    np.testing.assert_allclose(out.r.numpy(), noisy[:d] / C, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.raw_counts, noisy[d:] / gamma, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(out.weights, (np.arange(L) + 1.0) ** (-p) * (noisy[d:] / gamma) / C, rtol=1e-12)

    # the aggregator keeps nothing of a client between steps: its configuration scalars, and the
    # noise strategy and stream (past noise only, declared state; docs/privacy.md §12)
    for name, value in vars(agg).items():
        if name in ("strategy", "stream"):
            assert value is None or type(value).__name__ in ("Strategy", "CorrelatedNoise"), name
            continue
        assert isinstance(value, (int, float, str)), name


def test_aggregate_detached_from_client_tensors():
    agg = PrivateAggregator(buffer=2, exponent=0.0, num_staleness=2, sigma=1.0, clip=1.0, gamma=1.0)
    deltas = [torch.randn(3, 2, requires_grad=True) for _ in range(2)]
    ups = [ClientUpdate(k, 0, k, (2.0 * x)) for k, x in enumerate(deltas)]  # carries a graph
    out = agg.aggregate(1, ups, np.random.default_rng(1))
    assert out.r.shape == (3, 2) and out.r.dtype == torch.float32
    assert out.r.grad_fn is None and not out.r.requires_grad


def test_tiny_noise_matches_exact_aggregator():
    cfg = PrivacyConfig(enabled=True, clip=1e3, noise_multiplier=1e-9, gamma=1e3, counts="project")
    C, N, L, p, d = 5, 20, 4, 0.7, 8
    setup, agg = build_privacy(cfg, buffer=C, clients=N, steps=50, max_staleness=L - 1, exponent=p)
    exact = ExactAggregator(exponent=p, num_staleness=L)
    rng = np.random.default_rng(3)
    for step in range(1, 20):
        ups = _updates(rng, rng.integers(0, L, C), d, scale=5.0, dtype=torch.float32)
        mine = agg.aggregate(step, ups, np.random.default_rng(step))
        ref = exact.aggregate(step, ups, np.random.default_rng(step))
        assert mine.step == ref.step
        torch.testing.assert_close(mine.r, ref.r, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(mine.weights, ref.weights, atol=1e-7)
    info = summary(setup)
    assert {"sigma", "gamma", "xi", "epsilon_spent", "delta", "accountant", "sampling", "claim", "statement",
            "sampling_rate", "max_participations", "noise_cohort"} <= set(info)
    assert info["sigma"] == 1e-9 and info["epsilon_spent"] == math.inf  # negligible noise: no guarantee



def test_clip_only_is_the_weighted_sum_of_clipped_updates_with_exact_counts():
    """``noise_multiplier = 0`` (clip only, the ablation of DP's noise): the aggregate is
    ``r = Σ_k w(τ_k) clip(Δ_k) / C`` computed here by a loop over the updates (clip to
    ``S_Δ = 0.5``, weights ``(1+τ)^-0.7``), the decoded counts are the true counts exactly (γ = 1:
    ``Y/γ`` is a sum of ones), and ε and every client's μ are infinite."""
    cfg = PrivacyConfig(enabled=True, clip=0.5, noise_multiplier=0.0, gamma=1.0, counts="raw")
    C, N, L, p, d = 5, 20, 4, 0.7, 8
    setup, agg = build_privacy(cfg, buffer=C, clients=N, steps=50, max_staleness=L - 1, exponent=p)
    rng = np.random.default_rng(4)
    for step in range(1, 6):
        taus = rng.integers(0, L, C)
        ups = _updates(rng, taus, d, scale=5.0, dtype=torch.float64)
        out = agg.aggregate(step, ups, np.random.default_rng(step))
        ref = torch.zeros(d, dtype=torch.float64)
        for u in ups:
            norm = float(u.message.norm())
            ref += (1.0 + u.staleness) ** -p * u.message * min(1.0, 0.5 / norm)
        torch.testing.assert_close(out.r.reshape(-1), ref / C, rtol=1e-12, atol=1e-15)
        np.testing.assert_array_equal(out.raw_counts, np.bincount(taus, minlength=L))
    info = summary(setup)
    assert info["sigma"] == 0.0 and info["epsilon_spent"] == math.inf
    assert gdp_mu(3, 0.0) == math.inf and gdp_mu(0, 0.0) == 0.0


def test_clip_only_refuses_xi_and_names_gamma():
    cfg = PrivacyConfig(enabled=True, clip=0.5, noise_multiplier=0.0, xi=4.0)
    with pytest.raises(ScenarioError, match="privacy.gamma"):
        build_privacy(cfg, buffer=5, clients=20, steps=50, max_staleness=3, exponent=0.5)


# --------------------------------------------------------------------------- noise statistics
def _noise_draws(agg, ups, true_counts, n, rng):
    """``n`` aggregates of zero updates: the decoded ``r_t`` (``(n, d)``, pure noise) and the raw
    counts minus the true ones (``(n, L)``)."""
    outs = [agg.aggregate(i, ups, rng) for i in range(n)]
    return np.stack([out.r.numpy() for out in outs]), np.stack([out.raw_counts - true_counts for out in outs])


def _chi2_bounds(n: int, m: int) -> tuple[float, float]:
    """Two-sided bounds on Σx²/s² ~ χ²_n for each of m coordinates, family-wise rate ALPHA."""
    a = ALPHA / (2 * m)
    return stats.chi2.ppf(a, n), stats.chi2.isf(a, n)


def test_noise_has_std_sigma_S_on_every_coordinate_and_counts_std_xi():
    """Zero updates (Δ = 0) make the noisy sum = γ·counts + noise, so the noise is observed
    exactly. For each of the d + L coordinates, n·(sample second moment)/(σS)² ~ χ²_n; the
    bounds use Bonferroni over the coordinates (and the second family, the counts) at a total
    false-alarm rate of 2·ALPHA = 2e-6. A 10% error in the std would be caught: χ²-bounds for
    n = 3000 are within ±9% of n."""
    C, L, d, n = 3, 4, 20, 3000
    sigma, S_d, xi = 0.9, 2.0, 1.5
    gamma = gamma_from_xi(sigma, S_d, xi)
    S = sensitivity(S_d, gamma)
    agg = PrivateAggregator(buffer=C, exponent=1.0, num_staleness=L, sigma=sigma, clip=S_d, gamma=gamma, counts="raw")
    rng = np.random.default_rng(2024)
    taus = [0, 1, 3]
    ups = [ClientUpdate(k, 0, t, torch.zeros(d, dtype=torch.float64)) for k, t in enumerate(taus)]
    true_counts = np.bincount(taus, minlength=L)
    r, noise_c = _noise_draws(agg, ups, true_counts, n, rng)
    noise_r = r * C  # = noise on the first d coordinates; noise_c = noise / γ, std ξ
    lo, hi = _chi2_bounds(n, d + L)
    stat_r = (noise_r**2).sum(axis=0) / (sigma * S) ** 2
    stat_c = (noise_c**2).sum(axis=0) / xi**2
    assert np.all((lo < stat_r) & (stat_r < hi)), (lo, hi, stat_r)
    assert np.all((lo < stat_c) & (stat_c < hi)), (lo, hi, stat_c)
    # the noise on γ·ĉ is the same σS: ξ = σS/γ
    assert np.all((lo < stat_c * xi**2 * gamma**2 / (sigma * S) ** 2) & (stat_c * xi**2 * gamma**2 / (sigma * S) ** 2 < hi))
    # means are zero: |mean| < z·std/√n, z from the same budget
    z = stats.norm.isf(ALPHA / (2 * (d + L)))
    assert np.all(np.abs(noise_r.mean(axis=0)) < z * sigma * S / math.sqrt(n))
    assert np.all(np.abs(noise_c.mean(axis=0)) < z * xi / math.sqrt(n))
    # and the analytic per-coordinate std of r and of the W entries
    assert update_noise_std(sigma, S_d, xi, C) == pytest.approx(sigma * S / C, rel=1e-12)
    assert count_noise_std(xi, C) == pytest.approx(xi / C)


@pytest.mark.parametrize("M", [3, 12, pytest.param(50, marks=pytest.mark.slow)])  # M = 50: the scaling again (whole suite)
def test_noise_cohort_scales_the_noise_of_the_sums_by_C_over_M(M):
    """A noise cohort M ≥ C (docs/privacy.md §7): the noise on the sum of C payloads is
    N(0, (σ S C/M)²), so each coordinate of r_t = Y[:d]/C carries std σS/M — the deployment's —
    and each raw count ĉ_τ = Y[d+τ]/γ carries std ξC/M (ĉ_τ/C: ξ/M). Measured from the noisy sums
    with zero updates, as the χ² test above: n·(second moment)/std² ~ χ²_n per coordinate,
    Bonferroni over the d + L coordinates of both families, total false-alarm rate 2·ALPHA. M = C
    is the plain mechanism (bit for bit the noise of a run without a noise cohort)."""
    C, L, d, n = 3, 3, 12, 3000
    sigma, S_d, xi = 0.9, 2.0, 1.5
    gamma = gamma_from_xi(sigma, S_d, xi)
    S = sensitivity(S_d, gamma)
    agg = PrivateAggregator(buffer=C, exponent=0.5, num_staleness=L, sigma=sigma, clip=S_d, gamma=gamma, counts="raw",
                            noise_cohort=M)
    plain = PrivateAggregator(buffer=C, exponent=0.5, num_staleness=L, sigma=sigma, clip=S_d, gamma=gamma, counts="raw")
    assert agg.noise_std == (plain.noise_std if M == C else pytest.approx(sigma * S * C / M, rel=1e-15))
    rng = np.random.default_rng(17 + M)
    taus = [0, 2, 2]
    ups = [ClientUpdate(k, 0, t, torch.zeros(d, dtype=torch.float64)) for k, t in enumerate(taus)]
    true_counts = np.bincount(taus, minlength=L)
    r_noise, c_noise = _noise_draws(agg, ups, true_counts, n, rng)  # r_t's noise: the deployment's σS/M
    lo, hi = _chi2_bounds(n, d + L)
    stat_r = (r_noise**2).sum(axis=0) / (sigma * S / M) ** 2
    stat_c = (c_noise**2).sum(axis=0) / (xi * C / M) ** 2
    assert np.all((lo < stat_r) & (stat_r < hi)), (lo, hi, stat_r)
    assert np.all((lo < stat_c) & (stat_c < hi)), (lo, hi, stat_c)
    # and the decoded row of Ŵ: ĉ_τ/C has std ξ/M (the analytic count_noise_std with M for C)
    assert np.all(np.abs(np.std(c_noise / C, axis=0) / (xi / M) - 1) < 0.1)
    assert update_noise_std(sigma, S_d, xi, M) == pytest.approx(sigma * S / M, rel=1e-12)
    assert count_noise_std(xi, M) == pytest.approx(xi / M)


# --------------------------------------------------------------------------- accounting
def _pld_eps(sigma, delta, q, steps, vdi=1e-4):
    ev = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    return pld.PLDAccountant(value_discretization_interval=vdi).compose(ev).get_epsilon(delta)


def _rdp_eps(sigma, delta, q, steps):
    ev = dp_accounting.SelfComposedDpEvent(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    return rdp.RdpAccountant().compose(ev).get_epsilon(delta)


@pytest.mark.parametrize("eps, delta, q, steps", [(2.0, 1e-6, 0.1, 100),  # a second target, 500 steps (3 s): whole suite
                                                   pytest.param(4.0, 1e-5, 0.02, 500, marks=pytest.mark.slow)])
def test_calibrated_sigma_meets_target_under_independent_accountants(eps, delta, q, steps):
    s_pld = calibrate_sigma(eps, delta, q, steps, "pld")
    s_rdp = calibrate_sigma(eps, delta, q, steps, "rdp")
    # fresh accountants built here (PLD on a 10× finer grid than the module's): ε(σ) ≈ target
    assert _pld_eps(s_pld, delta, q, steps) == pytest.approx(eps, rel=5e-3)
    assert _pld_eps(s_pld, delta, q, steps) <= eps * (1 + 1e-4)
    assert _rdp_eps(s_rdp, delta, q, steps) == pytest.approx(eps, rel=1e-4)
    assert _rdp_eps(s_rdp, delta, q, steps) <= eps
    # RDP is looser than PLD, so it needs more noise for the same target
    assert s_pld <= s_rdp
    # the reported ε of the calibrated σ never exceeds the target
    assert epsilon_spent(s_pld, delta, q, steps, "pld") <= eps
    assert epsilon_spent(s_rdp, delta, q, steps, "rdp") <= eps


def test_calibration_matches_analytic_gaussian_mechanism():
    """q = 1: T compositions of the Gaussian mechanism with multiplier σ are one Gaussian
    mechanism with multiplier σ/√T, whose exact δ(ε) is (Balle & Wang 2018)
    δ = Φ(1/(2s) − εs) − e^ε Φ(−1/(2s) − εs), s = σ/√T. For ε = 1, δ = 1e-5: s* ≈ 3.7305."""
    Phi = stats.norm.cdf

    def delta_of(s, eps=1.0):
        return Phi(0.5 / s - eps * s) - math.exp(eps) * Phi(-0.5 / s - eps * s)

    s_star = optimize.brentq(lambda s: delta_of(s) - 1e-5, 0.5, 50.0, xtol=1e-12)
    assert s_star == pytest.approx(3.7305, abs=1e-3)
    sigma = calibrate_sigma(1.0, 1e-5, 1.0, 100, "pld")
    assert sigma / 10.0 == pytest.approx(s_star, rel=2e-3)
    assert sigma / 10.0 >= s_star * (1 - 1e-4)  # pessimistic: never less noise than needed


def test_epsilon_spent_for_given_sigma():
    sigma, delta, q, steps = 1.0, 1e-6, 0.1, 100
    assert epsilon_spent(sigma, delta, q, steps, "pld") == pytest.approx(_pld_eps(sigma, delta, q, steps), rel=2e-3)
    assert epsilon_spent(sigma, delta, q, steps, "rdp") == pytest.approx(_rdp_eps(sigma, delta, q, steps), rel=1e-9)
    # more noise, less ε; RDP at least PLD
    assert epsilon_spent(2.0, delta, q, steps) < epsilon_spent(1.0, delta, q, steps)
    assert epsilon_spent(sigma, delta, q, steps, "rdp") >= epsilon_spent(sigma, delta, q, steps, "pld")


def test_unreachable_target_names_fields():
    with pytest.raises(ScenarioError) as err:
        calibrate_sigma(1e-7, 1e-6, 0.1, 100)
    assert "privacy.epsilon" in err.value.problems[0] and "privacy.delta" in err.value.problems[0]


# --------------------------------------------------------------------------- build_privacy
def test_build_privacy_resolves_sigma_gamma_xi():
    cfg = PrivacyConfig(enabled=True, clip=0.5, epsilon=2.0, delta=1e-6, xi=5.0, accountant="rdp")
    setup, agg = build_privacy(cfg, buffer=10, clients=100, steps=100, max_staleness=4, exponent=0.5)
    assert setup.sigma == pytest.approx(calibrate_sigma(2.0, 1e-6, 0.1, 100, "rdp"))
    assert setup.gamma == pytest.approx(setup.sigma * 0.5 / math.sqrt(25 - setup.sigma**2))
    assert setup.xi == 5.0 and agg.num_staleness == 5 and agg.gamma == setup.gamma
    info = summary(setup)
    assert info["epsilon_spent"] <= 2.0 and info["epsilon_spent"] == pytest.approx(2.0, rel=1e-3)
    assert info["accountant"] == "rdp" and info["delta"] == 1e-6

    cfg = PrivacyConfig(enabled=True, clip=3.0, noise_multiplier=0.7, gamma=4.0)
    setup, _ = build_privacy(cfg, buffer=5, clients=50, steps=10, max_staleness=2, exponent=0.0)
    assert setup.xi == pytest.approx(0.875) and setup.epsilon_target is None


def test_build_privacy_invalid_combinations_name_fields():
    cases = [
        (PrivacyConfig(enabled=True, noise_multiplier=1.0, xi=1.0), "privacy.xi"),
        (PrivacyConfig(enabled=True, noise_multiplier=2.0, xi=0.5), "privacy.xi"),
        # ε = 0.5 over 100 steps at q = 0.1 needs σ ≈ 6 > ξ = 1.5 (calibrated σ vs ξ)
        (PrivacyConfig(enabled=True, epsilon=0.5, xi=1.5, accountant="rdp"), "privacy.xi"),
        (PrivacyConfig(enabled=True, epsilon=1e-7, xi=1e9), "privacy.epsilon"),
        (PrivacyConfig(enabled=True, noise_multiplier=1.0), "privacy.xi"),
    ]
    for cfg, field in cases:
        with pytest.raises(ScenarioError) as err:
            build_privacy(cfg, buffer=10, clients=100, steps=100, max_staleness=3, exponent=0.0)
        assert any(field in p for p in err.value.problems), (field, err.value.problems)


# --------------------------------------------------------------------------- counts
@settings(max_examples=150, deadline=None)
@given(c_hat=st.lists(st.floats(-1e3, 1e3), min_size=1, max_size=30), C=st.integers(1, 100))
def test_postprocess_counts_properties(c_hat, C):
    c_hat = np.array(c_hat)
    assert np.array_equal(postprocess_counts(c_hat, C, "raw"), c_hat)
    clamped = postprocess_counts(c_hat, C, "clamp")
    assert np.all(clamped >= 0) and np.array_equal(clamped, np.maximum(c_hat, 0))
    for mode in ("project", "simplex"):
        row = postprocess_counts(c_hat, C, mode)
        assert np.all(row >= 0) and row.sum() == pytest.approx(C, rel=1e-9)
    if np.all(c_hat <= 0):  # nothing survives the clamp: uniform C/L
        np.testing.assert_allclose(postprocess_counts(c_hat, C, "project"), C / c_hat.size)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), L=st.integers(1, 12), C=st.integers(1, 50), xi=st.floats(0.01, 50))
def test_simplex_projection_never_increases_error(seed, L, C, xi):
    rng = np.random.default_rng(seed)
    true = np.bincount(rng.integers(0, L, C), minlength=L).astype(float)
    noisy = true + rng.normal(0, xi, L)
    proj = project_simplex(noisy, C)
    assert np.linalg.norm(proj - true) <= np.linalg.norm(noisy - true) + 1e-9


def test_decode_splits_and_scales():
    v = torch.tensor([2.0, 4.0, 6.0, 1.5, 3.0], dtype=torch.float64)
    r, c = decode(v, d=3, L=2, C=2, gamma=1.5)
    assert torch.equal(r, torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64))
    np.testing.assert_allclose(c, [1.0, 2.0])
