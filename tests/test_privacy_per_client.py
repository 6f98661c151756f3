"""Each client's realised ε (docs/privacy.md §11, issue 26 item 1).

* ``client_epsilons`` (the run's accountant on ``Releases(k)``) against dp-accounting's own
  composition ``SelfComposedDpEvent(GaussianDpEvent(σ), k)`` built here, for k ∈ {1, 3, 12}, and
  against the closed-form μ-GDP conversion (μ = √k/σ) — two independent computations;
* the issue's numbers: 12 releases at σ = 1.382 give ε ≈ 14.5 and at σ = 4.023 ε ≈ 4.1 (δ = 10⁻⁶),
  where the study's runs reported ε = 8 and 2 under the Poisson approximation;
* a run writes ``privacy_clients.csv`` whose counts are those of ``updates.csv``, the summary's
  max and quantiles of it, and ``privacy.csv``'s worst-client ε per evaluation step.
"""

from __future__ import annotations

import collections
import csv
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld, rdp
from scipy import stats

from asyncfl.cli.console import summary_table
from asyncfl.config import scenario as sc
from asyncfl.privacy.per_client import client_epsilons, client_rows, client_summary, gdp_delta, gdp_epsilon, gdp_mu
from asyncfl.run.runner import run_to_dir_blocking

from conftest import make_raw

DELTA = 1e-6


def _dp_accounting_epsilon(sigma: float, k: int, delta: float) -> float:
    """dp-accounting's k-fold composition, on a fixed fine PLD grid (independent of asyncfl's grid rule)."""
    event = dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma), k)
    return pld.PLDAccountant(value_discretization_interval=1e-4).compose(event).get_epsilon(delta)


@pytest.mark.parametrize("sigma", [1.382, 4.023])
def test_per_client_epsilon_is_dp_accountings_composition_and_the_gdp_closed_form(sigma):
    counts = np.array([0, 1, 3, 12, 3, 1])
    got = client_epsilons(counts, sigma, DELTA, "pld")
    assert got[0] == 0.0 and got[2] == got[4] and got[1] == got[5]
    for k, eps in zip(counts[1:4], got[1:4]):
        want = _dp_accounting_epsilon(sigma, int(k), DELTA)
        closed = gdp_epsilon(math.sqrt(k) / sigma, DELTA)
        assert eps == pytest.approx(want, rel=2e-3)  # two PLD grids of one upper bound
        assert eps == pytest.approx(closed, rel=2e-3) and eps >= closed * (1 - 1e-9)  # PLD rounds up, never below the exact ε
    # RDP is a looser upper bound than the exact GDP ε
    rdp_eps = client_epsilons(counts, sigma, DELTA, "rdp")
    for k, eps in zip(counts[1:4], rdp_eps[1:4]):
        want = rdp.RdpAccountant().compose(dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(sigma), int(k))).get_epsilon(DELTA)
        assert eps == pytest.approx(want, rel=1e-12) and eps > gdp_epsilon(math.sqrt(k) / sigma, DELTA)


def test_the_issues_numbers_twelve_releases_compose_to_far_more_than_the_poisson_epsilon():
    assert client_epsilons(np.array([12]), 1.382, DELTA)[0] == pytest.approx(14.5, abs=0.05)  # the run reported 8
    assert client_epsilons(np.array([12]), 4.023, DELTA)[0] == pytest.approx(4.1, abs=0.05)  # the run reported 2


def test_gdp_closed_form():
    # μ = √k/σ; δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2), evaluated directly at moderate ε
    assert gdp_mu(12, 1.382) == pytest.approx(math.sqrt(12) / 1.382) and gdp_mu(0, 2.0) == 0.0
    Phi = stats.norm.cdf
    for mu, eps in [(0.5, 0.3), (1.0, 1.0), (2.5, 4.0)]:
        assert gdp_delta(mu, eps) == pytest.approx(Phi(-eps / mu + mu / 2) - math.exp(eps) * Phi(-eps / mu - mu / 2), rel=1e-10)
        assert gdp_delta(mu, gdp_epsilon(mu, 1e-5)) == pytest.approx(1e-5, rel=1e-8)
    # a Gaussian mechanism of multiplier 3.7305 has ε = 1 at δ = 10⁻⁵ (Balle & Wang 2018; tests/test_privacy_sampling.py)
    assert gdp_epsilon(1 / 3.7305, 1e-5) == pytest.approx(1.0, abs=2e-4)
    assert gdp_epsilon(0.0, 1e-5) == 0.0 and gdp_delta(40.0, 800.0) >= 0.0  # no overflow of e^ε
    with pytest.raises(ValueError, match="must be in"):
        gdp_epsilon(1.0, 0.0)
    with pytest.raises(ValueError, match="non-negative integer"):
        gdp_mu(-1, 1.0)


def test_summary_quantiles_are_over_the_clients_that_contributed():
    counts = np.array([0, 0, 1, 1, 1, 2, 2, 3, 4, 5])  # 8 contributing clients
    s = client_summary(counts, 2.0, DELTA, "rdp")
    eps = {k: client_epsilons(np.array([k]), 2.0, DELTA, "rdp")[0] for k in range(1, 6)}
    assert s["epsilon_client_max"] == eps[5]
    assert s["epsilon_client_p50"] == eps[2]  # lower median of 1,1,1,2,2,3,4,5
    assert s["epsilon_client_p90"] == eps[4] and s["epsilon_client_p99"] == eps[4]  # lower quantiles: index 6
    assert s["mu_client_max"] == pytest.approx(math.sqrt(5) / 2.0)
    assert client_summary(np.zeros(3, dtype=int), 2.0, DELTA)["epsilon_client_p50"] is None
    rows = client_rows(counts, 2.0, DELTA, "rdp")
    assert [r["participations"] for r in rows] == counts.tolist() and rows[9]["epsilon"] == eps[5]


def test_a_poisson_run_writes_each_clients_epsilon_next_to_the_approximation(tmp_path):
    overrides = {"privacy.enabled": True, "privacy.noise_multiplier": 0.8, "privacy.xi": 2.0, "privacy.accountant": "rdp",
                 "run.steps": 12, "run.eval_every": 4}
    summary = run_to_dir_blocking(sc.validate(make_raw(**overrides)), tmp_path / "run")
    p = summary["privacy"]
    with open(tmp_path / "run" / "updates.csv", newline="") as fh:
        accepted = [r for r in csv.DictReader(fh) if r["accepted"] == "true"]
    spent = np.bincount([int(r["client"]) for r in accepted], minlength=30)
    with open(tmp_path / "run" / "privacy_clients.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [int(r["participations"]) for r in rows] == spent.tolist()
    for r in rows:
        k = int(r["participations"])
        want = 0.0 if k == 0 else rdp.RdpAccountant().compose(
            dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(0.8), k)).get_epsilon(DELTA)
        assert float(r["epsilon"]) == pytest.approx(want, rel=1e-12)
        assert float(r["mu"]) == pytest.approx(math.sqrt(k) / 0.8)
    assert p["epsilon_client_max"] == pytest.approx(max(float(r["epsilon"]) for r in rows), rel=1e-12)
    # the busiest client's unamplified ε exceeds the Poisson approximation the run reports
    assert spent.max() >= 3 and p["epsilon_client_max"] > p["epsilon_spent"]
    with open(tmp_path / "run" / "privacy.csv", newline="") as fh:
        curve = list(csv.DictReader(fh))
    first_at: dict[int, int] = {}
    seen: collections.Counter[str] = collections.Counter()
    for r in sorted(accepted, key=lambda r: int(r["step"])):
        seen[r["client"]] += 1
        first_at.setdefault(seen[r["client"]], int(r["step"]))
    for row in curve:
        m = sum(1 for s in first_at.values() if s <= int(row["step"]))
        assert int(row["participations_max"]) == m
        assert float(row["epsilon_client_max"]) == pytest.approx(0.0 if m == 0 else client_epsilons(np.array([m]), 0.8, DELTA, "rdp")[0])
    assert float(curve[-1]["epsilon_client_max"]) == pytest.approx(p["epsilon_client_max"])
    # the printed summary shows both
    text = " ".join(str(c) for col in summary_table(summary).columns for c in col._cells)
    assert "ε per client, max / median (no amplification)" in text and "poisson: approximation" in text
