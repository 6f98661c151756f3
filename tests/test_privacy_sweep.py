"""The privacy–utility sweep (``python -m analysis.privacy_sweep``, analysis/privacy_sweep/; docs/privacy.md):
outputs and columns, the analytic noise levels against the formulas computed here, one σ for
every point at fixed (ε, δ), γ ↔ ξ per row, and input validation (exit 2 naming the option)."""

from __future__ import annotations

import csv
import json
import math

import pytest
import tomli_w

from analysis.privacy_sweep.__main__ import main as privacy
from asyncfl.privacy import calibrate_sigma

EPS, DELTA, CLIP, C, N, T = 4.0, 1e-5, 1.0, 20, 60, 4

SCENARIO = {
    "name": "tiny-private", "seed": 1,
    "population": {"clients": N},
    "latency": {"dist": "exponential", "mean": 1.0},
    "task": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "model": "logreg"},
    "client": {"lr": 0.1, "local_steps": 2, "batch_size": 20},
    "server": {"concurrency": 40, "buffer": C, "max_staleness": 10, "staleness_exponent": 0.5,
               "rule": "momentum", "lr": 0.1, "beta": 0.9},
    "run": {"steps": T, "eval_every": T},
    "privacy": {"enabled": True, "clip": CLIP, "epsilon": EPS, "delta": DELTA, "xi": 5.0, "accountant": "rdp"},
}

REQUIRED = {"xi", "gamma", "sigma", "epsilon_spent", "delta", "rule", "final_accuracy", "final_loss",
            "bias_exact", "bias_noisy", "update_noise_std", "count_noise_std",
            "sampling", "claim", "sampling_rate", "max_participations", "noise_cohort",
            "participations_max", "participations_mean", "clients_at_cap"}


@pytest.fixture
def scenario_file(tmp_path):
    path = tmp_path / "private.toml"
    path.write_text(tomli_w.dumps(SCENARIO))
    return path


@pytest.fixture(scope="module")
def sigma() -> float:
    # q = C/N, T steps: the sweep must calibrate exactly this σ once (docs/privacy.md)
    return calibrate_sigma(EPS, DELTA, C / N, T, "rdp")


@pytest.mark.slow
def test_tiny_sweep_writes_csv_md_png_with_the_formulas(scenario_file, tmp_path, sigma, capsys):
    out = tmp_path / "sweep"
    assert sigma < 3.0  # the points below are valid
    rc = privacy([str(scenario_file), "--xi", "3", "30", "--gamma", "0.5", "--rules", "ma-light",
               "--out", str(out), "--quiet"])
    assert rc == 0
    for name in ("sweep.csv", "sweep.md", "sweep.png"):
        assert (out / name).is_file() and (out / name).stat().st_size > 0
    assert (out / "sweep.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    with open(out / "sweep.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert REQUIRED <= set(rows[0])
    assert len(rows) == 3 and {r["rule"] for r in rows} == {"ma-light"}

    sigmas = {float(r["sigma"]) for r in rows}
    assert len(sigmas) == 1  # one σ for every point at fixed (ε, δ)
    assert float(rows[0]["sigma"]) == pytest.approx(sigma, rel=1e-5)
    assert len({r["epsilon_spent"] for r in rows}) == 1
    assert 0 < float(rows[0]["epsilon_spent"]) <= EPS * (1 + 1e-5)

    xis = sorted(float(r["xi"]) for r in rows)
    assert [x for x in xis if x in (3.0, 30.0)] == [3.0, 30.0]  # rows sorted by ξ; γ = 0.5 adds a third
    for r in rows:
        xi, gamma, s = float(r["xi"]), float(r["gamma"]), float(r["sigma"])
        assert float(r["delta"]) == DELTA
        # γ ↔ ξ: ξ = σ √(S_Δ² + γ²) / γ and γ = σ S_Δ / √(ξ² − σ²)
        assert xi == pytest.approx(s * math.sqrt(CLIP**2 + gamma**2) / gamma, rel=1e-5)
        assert gamma == pytest.approx(s * CLIP / math.sqrt(xi**2 - s**2), rel=1e-5)
        # analytic noise levels, computed independently
        assert float(r["update_noise_std"]) == pytest.approx(s * CLIP * xi / (C * math.sqrt(xi**2 - s**2)), rel=1e-5)
        assert float(r["count_noise_std"]) == pytest.approx(xi / C, rel=1e-5)
        assert 0.0 <= float(r["final_accuracy"]) <= 1.0 and math.isfinite(float(r["final_loss"]))
        assert float(r["bias_exact"]) >= 0 and float(r["bias_noisy"]) >= 0
        summary = json.loads((out / r["run_dir"] / "summary.json").read_text())
        assert summary["privacy"]["sigma"] == pytest.approx(s, rel=1e-5)
    for r in rows:  # the assumption the ε rests on (docs/privacy.md §5), in every row
        assert (r["sampling"], r["claim"], r["max_participations"], r["clients_at_cap"]) == ("poisson", "approximation", "", "")
        assert float(r["sampling_rate"]) == pytest.approx(C / N) and int(r["noise_cohort"]) == C
        assert 1 <= int(r["participations_max"]) and float(r["participations_mean"]) == pytest.approx(T * C / N, rel=1e-5)
    gamma_row = [r for r in rows if float(r["gamma"]) == pytest.approx(0.5)]
    assert len(gamma_row) == 1
    md = (out / "sweep.md").read_text()
    assert "| ξ |" in md and "ma-light" in md and md.count("\n| ") >= 4
    assert "The reported ε is an approximation" in md and "FedBuff does not sample" in md


def test_xi_not_above_sigma_exits_2_naming_xi_and_sigma(scenario_file, tmp_path, sigma, capsys):
    rc = privacy([str(scenario_file), "--xi", "0.5", "3", "--rules", "momentum", "--out", str(tmp_path / "o"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2
    assert "--xi 0.5" in err and "σ = " in err and f"{sigma:.4g}"[:4] in err
    assert not (tmp_path / "o" / "sweep.csv").exists()  # nothing ran: the bad point is not skipped


def test_no_privacy_section_and_no_points_are_clear_errors(tmp_path, capsys):
    raw = json.loads(json.dumps(SCENARIO))
    del raw["privacy"]
    path = tmp_path / "public.toml"
    path.write_text(tomli_w.dumps(raw))
    assert privacy([str(path), "--xi", "3", "--quiet"]) == 2
    assert "[privacy]" in capsys.readouterr().err
    raw["privacy"] = SCENARIO["privacy"]
    path.write_text(tomli_w.dumps(raw))
    assert privacy([str(path), "--quiet", "--out", str(tmp_path / "o")]) == 2
    assert "--xi" in capsys.readouterr().err
    assert privacy([str(path), "--gamma", "-1", "--quiet", "--out", str(tmp_path / "o")]) == 2
    assert "--gamma -1" in capsys.readouterr().err


@pytest.mark.slow
def test_a_capped_sweep_calibrates_for_k_releases_and_says_its_epsilon_is_a_guarantee(tmp_path):
    """Under privacy.sampling = 'participation-cap' the one σ of the sweep is calibrated for k
    Gaussian releases without amplification (docs/privacy.md §6), every run enforces the cap,
    and the rows and sweep.md say what the ε is; a noise cohort sets the analytic noise levels."""
    from asyncfl.privacy import Releases, sigma_for

    raw = json.loads(json.dumps(SCENARIO))
    # k·N ≥ T·M: the accounted deployment's 4 steps of M = 40 uploads need k = 3 of N = 60 clients
    raw["privacy"].update(sampling="participation-cap", max_participations=3, noise_cohort=40)
    path = tmp_path / "capped.toml"
    path.write_text(tomli_w.dumps(raw))
    out = tmp_path / "sweep"
    assert privacy([str(path), "--xi", "30", "--rules", "momentum", "--out", str(out), "--quiet"]) == 0
    with open(out / "sweep.csv", newline="") as fh:
        (row,) = list(csv.DictReader(fh))
    sigma = sigma_for(Releases(3), EPS, DELTA, "rdp")
    assert float(row["sigma"]) == pytest.approx(sigma, rel=1e-5) and float(row["epsilon_spent"]) <= EPS
    assert (row["sampling"], row["claim"], row["max_participations"], row["sampling_rate"]) == ("participation-cap", "guarantee", "3", "")
    assert int(row["noise_cohort"]) == 40 and int(row["participations_max"]) <= 3
    assert float(row["participations_mean"]) == pytest.approx(T * C / N, rel=1e-5) and int(row["clients_at_cap"]) >= 0
    xi, s = 30.0, float(row["sigma"])
    assert float(row["update_noise_std"]) == pytest.approx(s * CLIP * xi / (40 * math.sqrt(xi**2 - s**2)), rel=1e-5)
    assert float(row["count_noise_std"]) == pytest.approx(xi / 40, rel=1e-5)
    md = (out / "sweep.md").read_text()
    assert "The reported ε is a guarantee" in md and "noise cohort M = 40" in md
