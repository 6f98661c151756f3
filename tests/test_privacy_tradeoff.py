"""f-DP trade-offs from the PLD (docs/privacy.md §15).

* the trade-off derived from dp-accounting's Gaussian PLD equals the Gaussian mechanism's closed
  form ``TPR = Φ(Φ⁻¹(α) + Δ/σ)`` to 1e-6 at α = 1e-3, 1e-2, 1e-1, for Δ/σ = 0.5, 1, 2, and for
  k composed releases (μ = √k/σ);
* Poisson subsampling can only lower the attacker's power, and no test does worse than a guess;
* a private run's summary reports the trade-off for the run and its busiest client (the latter
  the closed form at μ = √k_max/σ), and ``asyncfl plot --tradeoff`` draws it, refusing a
  non-private run with exit 2.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from scipy import stats

from asyncfl import privacy
from asyncfl.cli.main import main as cli_main
from asyncfl.config import scenario as sc
from asyncfl.privacy import tradeoff
from asyncfl.privacy.accountants import Releases
from asyncfl.compose import build_simulation
from conftest import make_raw


def closed_form(alpha: float, mu: float) -> float:
    return float(stats.norm.cdf(stats.norm.ppf(alpha) + mu))


@pytest.mark.parametrize("sigma", [2.0, 1.0, 0.5])
def test_gaussian_tradeoff_matches_the_closed_form(sigma):
    pld = tradeoff.releases_pld(Releases(1), sigma)
    for alpha in tradeoff.FPRS:
        assert abs(tradeoff.tpr_at(pld, alpha) - closed_form(alpha, 1.0 / sigma)) < 1e-6, (sigma, alpha)


def test_k_releases_are_mu_gdp_with_mu_sqrt_k_over_sigma():
    pld = tradeoff.releases_pld(Releases(4), 3.0)
    for alpha in tradeoff.FPRS:
        assert abs(tradeoff.tpr_at(pld, alpha) - closed_form(alpha, 2.0 / 3.0)) < 1e-6


def test_subsampling_lowers_the_attackers_power_and_nothing_is_below_a_guess():
    full = tradeoff.releases_pld(Releases(1), 1.0)
    sub = tradeoff.releases_pld(Releases(1, 0.1), 1.0)
    for alpha in tradeoff.FPRS:
        t_full, t_sub = tradeoff.tpr_at(full, alpha), tradeoff.tpr_at(sub, alpha)
        assert alpha - 1e-9 <= t_sub < t_full
    with pytest.raises(ValueError):
        tradeoff.tpr_at(full, 0.0)


def private_scenario() -> sc.Scenario:
    raw = make_raw(**{"population.clients": 12, "run.steps": 4, "run.train_loss": False})
    raw["server"] = {"protocol": "fedbuff", "concurrency": 4, "buffer": 2, "max_staleness": 4, "rule": "sgd", "lr": 0.5}
    raw["privacy"] = {"enabled": True, "noise_multiplier": 1.5, "xi": 3.0}
    return sc.validate(raw)


def test_a_private_summary_reports_the_run_and_its_busiest_client():
    setup = build_simulation(private_scenario()).privacy_setup
    report = privacy.summary(setup, np.array([0, 1, 4, 2]))["tradeoff"]
    assert report["fpr"] == [1e-3, 1e-2, 1e-1]
    for alpha in report["fpr"]:
        key = f"tpr_at_fpr_{alpha:g}"
        assert report["busiest_client"][key] == pytest.approx(closed_form(alpha, math.sqrt(4) / 1.5), abs=1e-6)
        assert alpha <= report["run"][key] <= 1.0
    assert len(report["curve"]["fpr"]) == len(report["curve"]["run"]) == len(report["curve"]["busiest_client"])


def test_plot_tradeoff_draws_a_private_run_and_refuses_another(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    curve = {"fpr": [1e-3, 1e-2, 1e-1], "run": [0.01, 0.05, 0.3], "busiest_client": [0.02, 0.1, 0.5]}
    (run / "summary.json").write_text(json.dumps({"privacy": {"tradeoff": {"curve": curve}}}))
    assert cli_main(["plot", str(run), "--tradeoff", "--out", str(tmp_path / "f.png")]) == 0
    assert (tmp_path / "f.png").stat().st_size > 0
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "summary.json").write_text(json.dumps({"privacy": None}))
    assert cli_main(["plot", str(plain), "--tradeoff", "--out", str(tmp_path / "g.png")]) == 2
    assert "no f-DP trade-off" in capsys.readouterr().err
