"""The one-run audit (docs/privacy.md §16; analysis/privacy_audit).

* the bound (Steinke, Nasr & Jagielski, Theorem 5.2 as computed in their Appendix D): with δ = 0
  the p-value is the binomial tail P[Binomial(r, q) ≥ v], q = e^ε/(1+e^ε), checked against a
  brute-force sum; with δ > 0 it is β + 2mδ·α, checked against a pure-Python computation of the
  definition (e.g. m = 30, r = 12, v = 11, ε = 1, δ = 10⁻³: 0.1400815500); the test it defines has
  level at most 5 % against randomized response at exactly ε (its correct guesses are exactly
  Binomial(r, q)), summed over every outcome; its ε is the root of p-value = p;
* the scores are the likelihood ratios of their docstring: the allocation score against the mean
  over every k-subset of each window, the Poisson score against the sum over every membership
  pattern;
* on a simulated Gaussian mechanism whose ε is known exactly (μ-GDP), the lower bound at 95 % stays
  below the true ε on every seed tried, proves more than 3 at μ = 2, and grows with the signal; the
  power computation (expected counts) agrees with simulated audits, and what it says can be proved
  stays below the true ε;
* every shipped private scenario (scenarios/private_*.toml, at their own size, 4000 canaries)
  audits below its accountant's ε, and with the noise removed (a test-only override) the audit
  detects it; the cap's scenario with its noise halved is detected at 20 000 canaries (CI), and
  every shipped scenario with its noise halved at the command's 50 000 (slow).
"""

from __future__ import annotations

import itertools
import math
from pathlib import Path

import numpy as np
import pytest

from analysis.privacy_audit import power, scores
from analysis.privacy_audit.__main__ import main
from analysis.privacy_audit.audit import audit
from analysis.privacy_audit.bound import epsilon_lower_bound, p_value
from asyncfl.config import scenario as sc
from asyncfl.privacy.per_client import gdp_epsilon

ROOT = Path(__file__).resolve().parents[1]
PRIVATE = sorted((ROOT / "scenarios").glob("private_*.toml"))


# -- the bound ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("r, v, eps", [(10, 7, 0.5), (100, 80, 1.0), (40, 40, 3.0)])
def test_p_value_is_the_binomial_tail_without_delta(r, v, eps):
    q = math.exp(eps) / (1 + math.exp(eps))
    brute = sum(math.comb(r, j) * q**j * (1 - q) ** (r - j) for j in range(v, r + 1))
    assert p_value(1000, r, v, eps, 0.0) == pytest.approx(brute, rel=1e-9)
    assert p_value(1000, r, v, eps, 1e-5) >= p_value(1000, r, v, eps, 0.0)


def definition(m: int, r: int, v: int, eps: float, delta: float) -> float:
    """Theorem 5.2's bound computed from its definition in pure Python (no scipy)."""
    q = math.exp(eps) / (1 + math.exp(eps))
    pmf = [math.comb(r, j) * q**j * (1 - q) ** (r - j) for j in range(r + 1)]
    alpha = max(sum(pmf[v - i:v]) / i for i in range(1, v + 1))
    return sum(pmf[v:]) + 2 * m * delta * alpha


@pytest.mark.parametrize("m, r, v, eps, delta, expected", [
    (30, 12, 11, 1.0, 1e-3, 0.140081550), (1000, 100, 80, 1.0, 1e-5, 0.073009116), (50_000, 250, 238, 2.0, 1e-6, 0.003857226)])
def test_p_value_with_delta_is_the_theorems_definition(m, r, v, eps, delta, expected):
    assert definition(m, r, v, eps, delta) == pytest.approx(expected, rel=1e-7)
    assert p_value(m, r, v, eps, delta) == pytest.approx(definition(m, r, v, eps, delta), rel=1e-9)


@pytest.mark.parametrize("r, eps", [(20, 0.5), (200, 2.0), (400, 4.0)])
def test_the_test_has_its_level_against_randomized_response(r, eps):
    """Randomized response at exactly ε is ε-DP and its correct guesses are Binomial(r, q): the
    probability, summed over every outcome v, that the audit proves more than ε is at most 5 %."""
    q = math.exp(eps) / (1 + math.exp(eps))
    rejected = sum(math.comb(r, v) * q**v * (1 - q) ** (r - v) for v in range(r + 1) if p_value(10 * r, r, v, eps, 0.0) < 0.05)
    assert rejected <= 0.05
    lower_at = {v: epsilon_lower_bound(10 * r, r, v, 0.0) for v in range(r + 1)}
    assert sum(math.comb(r, v) * q**v * (1 - q) ** (r - v) for v in lower_at if lower_at[v] > eps) <= 0.05


def test_the_lower_bound_is_the_root_of_p_value_equals_p():
    m, r, v, delta = 50_000, 250, 238, 1e-6
    eps = epsilon_lower_bound(m, r, v, delta, 0.05)
    assert p_value(m, r, v, eps, delta) == pytest.approx(0.05, abs=1e-6)
    assert p_value(m, r, v, eps - 0.01, delta) < 0.05 < p_value(m, r, v, eps + 0.01, delta)


# -- the scores --------------------------------------------------------------------------------------
def test_the_allocation_score_is_the_mean_over_every_allotment():
    rng = np.random.default_rng(1)
    mu, k, t = 0.8, 2, 4
    z = rng.normal(size=(3, 7))  # 7 steps: a full window and a short one of 3 (its 4th unseen: a = 1)
    a = np.exp(mu * np.concatenate([z, np.zeros((3, 1))], axis=1) - mu * mu / 2)
    a[:, 7] = 1.0
    for i in range(3):
        lr = 1.0
        for w in range(2):
            win = a[i, 4 * w:4 * w + 4]
            lr *= np.mean([np.prod(win[list(s)]) for s in itertools.combinations(range(t), k)])
        assert scores.allocation(z, mu, k, t)[i] == pytest.approx(math.log(lr), rel=1e-12)


def test_the_poisson_score_is_the_sum_over_every_membership_pattern():
    rng = np.random.default_rng(2)
    mu, q = 1.1, 0.3
    z = rng.normal(size=(2, 5))
    a = np.exp(mu * z - mu * mu / 2)
    for i in range(2):
        lr = sum(q ** sum(s) * (1 - q) ** (5 - sum(s)) * np.prod(a[i][np.array(s, bool)])
                 for s in itertools.product((0, 1), repeat=5))
        assert scores.poisson(z, mu, q)[i] == pytest.approx(math.log(lr), rel=1e-12)


# -- a Gaussian mechanism of known ε -------------------------------------------------------------------
def gaussian_audit(mu: float, seed: int, m: int = 4000, fraction: float = 0.1, delta: float = 1e-6) -> float:
    rng = np.random.default_rng(seed)
    included = rng.random(m) < 0.5
    scores_ = included * mu + rng.standard_normal(m)  # the Gaussian mechanism of sensitivity μ, σ = 1
    r = int(fraction * m)
    top = np.argsort(-scores_)[:r]
    return epsilon_lower_bound(m, r, int(included[top].sum()), delta)


@pytest.mark.parametrize("mu", [0.5, 1.0, 2.0, 4.0])
def test_the_bound_stays_below_a_known_gaussian_epsilon(mu):
    true = gdp_epsilon(mu, 1e-6)
    bounds = [gaussian_audit(mu, seed) for seed in range(5)]
    assert max(bounds) < true, (bounds, true)
    if mu >= 2.0:  # and it is not vacuous: at μ = 2 (true ε ≈ 7.9) it proves more than 3
        assert min(bounds) > 3.0


def test_the_bound_grows_with_the_signal():
    assert gaussian_audit(0.5, 0) < gaussian_audit(2.0, 0) < gaussian_audit(8.0, 0)


def test_the_power_computation_agrees_with_simulated_audits():
    """At the cap's halved noise (μ = 0.893, true ε = 4.30 at δ = 10⁻⁶), m = 20 000, 0.5 % guessed
    in each tail: the expected audit proves 2.24; five simulated audits (2.05 … 2.77) average within 0.15."""
    mu, m, f, delta = 0.8931, 20_000, 0.005, 1e-6
    expected = power.expected_bound(mu, m, f, f, delta)
    sims = []
    for seed in range(5):
        rng = np.random.default_rng(seed)
        inc = rng.random(m) < 0.5
        order = np.argsort(-(inc * mu + rng.standard_normal(m)))
        k = int(f * m)
        sims.append(epsilon_lower_bound(m, 2 * k, int(inc[order[:k]].sum() + (~inc[order[m - k:]]).sum()), delta))
    assert expected == pytest.approx(2.24, abs=0.01)
    assert abs(np.mean(sims) - expected) < 0.15, (sims, expected)


def test_what_can_be_proved_stays_below_the_true_epsilon():
    """The most an audit of a million canaries can be expected to prove about the cap's mechanism
    (μ = 0.4465, ε = 2) is 1.42; at its halved noise (μ = 0.893, true ε = 4.30) 2.90, above 2."""
    few = (0.0005, 0.001, 0.002)  # the best guess fractions at this m (docs/privacy.md §16)
    honest, _ = power.attainable(0.4465, 1_000_000, 1e-6, fractions=few)
    halved, _ = power.attainable(0.8931, 1_000_000, 1e-6, fractions=few)
    assert honest == pytest.approx(1.42, abs=0.01) and honest < gdp_epsilon(0.4465, 1e-6)
    assert halved == pytest.approx(2.90, abs=0.01) and 2.0 < halved < gdp_epsilon(0.8931, 1e-6)


# -- the shipped scenarios -------------------------------------------------------------------------------
def test_every_shipped_private_scenario_is_audited():
    assert {p.name for p in PRIVATE} >= {"private_cap.toml", "private_synthetic.toml", "private_allocation.toml"}


@pytest.mark.parametrize("path", PRIVATE, ids=[p.stem for p in PRIVATE])
def test_the_audit_passes_and_detects_a_mechanism_without_noise(path):
    scenario = sc.load(path)
    honest = audit(scenario, canaries=4000)
    assert honest.epsilon_lower < honest.epsilon_accountant and not honest.detected
    broken = audit(scenario, canaries=4000, guess_in=0.1, guess_out=0.0, _noise_scale=0.0)
    assert broken.detected and broken.epsilon_lower > 1.2 * broken.epsilon_accountant, broken


def test_the_audit_detects_the_caps_noise_halved():
    """20 000 canaries, 100 guessed in each tail: σ/2 proves 2.11 > ε = 2; the scenario's own
    noise 1.00."""
    scenario = sc.load(ROOT / "scenarios" / "private_cap.toml")
    honest = audit(scenario, canaries=20_000)
    halved = audit(scenario, canaries=20_000, _noise_scale=0.5)
    assert (honest.guess_in, honest.guess_out) == (100, 100)
    assert not honest.detected and honest.epsilon_lower < 1.2
    assert halved.detected and halved.epsilon_lower > 2.05, halved


@pytest.mark.slow
@pytest.mark.parametrize("path", PRIVATE, ids=[p.stem for p in PRIVATE])
def test_the_command_detects_every_shipped_mechanism_with_its_noise_halved(path):
    """At the command's size (50 000 canaries) every shipped scenario audits below its ε and its
    noise halved is detected (docs/privacy.md §16's table)."""
    scenario = sc.load(path)
    honest = audit(scenario)
    halved = audit(scenario, _noise_scale=0.5)
    assert not honest.detected
    assert halved.detected and halved.epsilon_lower > 1.15 * halved.epsilon_accountant, halved


def test_bad_guess_fractions_are_refused_naming_them(capsys):
    assert main([str(ROOT / "scenarios" / "private_cap.toml"), "--guess-in", "1.5"]) == 2
    err = capsys.readouterr().err
    assert "guess_in = 1.5" in err and "Traceback" not in err
