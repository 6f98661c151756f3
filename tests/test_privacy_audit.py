"""The one-run audit (docs/privacy.md §16; analysis/privacy_audit).

* the bound: with δ = 0 the p-value is the binomial tail P[Binomial(r, q) ≥ v], q = e^ε/(1+e^ε),
  checked against a brute-force sum; with δ > 0 it is never smaller;
* on a simulated Gaussian mechanism whose ε is known exactly (μ-GDP), the lower bound at 95 % stays
  below the true ε on every seed tried, proves more than 3 at μ = 2, and grows with the signal;
* every shipped private scenario (scenarios/private_*.toml, at their own size, with 4000 canaries)
  audits below its accountant's ε, and with the noise removed (a test-only override) the audit
  detects it: its lower bound is well above the accountant's ε.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from analysis.privacy_audit.audit import audit
from analysis.privacy_audit.bound import epsilon_lower_bound, p_value
from asyncfl.config import scenario as sc
from asyncfl.privacy.per_client import gdp_epsilon

ROOT = Path(__file__).resolve().parents[1]
PRIVATE = sorted((ROOT / "scenarios").glob("private_*.toml"))


@pytest.mark.parametrize("r, v, eps", [(10, 7, 0.5), (100, 80, 1.0), (40, 40, 3.0)])
def test_p_value_is_the_binomial_tail_without_delta(r, v, eps):
    q = math.exp(eps) / (1 + math.exp(eps))
    brute = sum(math.comb(r, j) * q**j * (1 - q) ** (r - j) for j in range(v, r + 1))
    assert p_value(1000, r, v, eps, 0.0) == pytest.approx(brute, rel=1e-9)
    assert p_value(1000, r, v, eps, 1e-5) >= p_value(1000, r, v, eps, 0.0)


def gaussian_audit(mu: float, seed: int, m: int = 4000, fraction: float = 0.1, delta: float = 1e-6) -> float:
    rng = np.random.default_rng(seed)
    included = rng.random(m) < 0.5
    scores = included * mu + rng.standard_normal(m)  # the Gaussian mechanism of sensitivity μ, σ = 1
    r = int(fraction * m)
    top = np.argsort(-scores)[:r]
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


def test_every_shipped_private_scenario_is_audited():
    assert {p.name for p in PRIVATE} >= {"private_cap.toml", "private_synthetic.toml", "private_allocation.toml"}


@pytest.mark.parametrize("path", PRIVATE, ids=[p.stem for p in PRIVATE])
def test_the_audit_passes_and_detects_a_mechanism_without_noise(path):
    scenario = sc.load(path)
    honest = audit(scenario)
    assert honest.epsilon_lower < honest.epsilon_accountant and not honest.detected
    broken = audit(scenario, _noise_scale=0.0)
    assert broken.detected and broken.epsilon_lower > 1.2 * broken.epsilon_accountant, broken
