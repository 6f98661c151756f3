"""The momentum-approximation study (issue 8): the scaled-down spec runs end to end and writes
results.csv and report.md with all six methods; it resumes without rerunning; bad specs exit 2
with a message naming the field."""

from __future__ import annotations

import csv
import json
import tomllib
from pathlib import Path

import numpy as np
import pytest
import tomli_w
from scipy import stats

from analysis.privacy_utility import main as privacy_utility
from analysis.ma_study.__main__ import main as study
from analysis.ma_study.design import Point, study_from_raw
from analysis.ma_study.plan import widened
from analysis.ma_study.spec import ALL_METHODS, METHOD_LABELS, StudyError
from analysis.ma_study.tables import reach_summary, speedup

SMALL = Path(__file__).resolve().parents[1] / "analysis" / "study_small.toml"
PAPER_CI = Path(__file__).resolve().parents[1] / "analysis" / "study_paper_ci.toml"


@pytest.fixture(scope="module")
def small_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study_small")
    assert study([str(SMALL), "--out", str(out), "--quiet"]) == 0
    return out


@pytest.mark.slow
def test_small_study_writes_results_and_report_with_all_six_methods(small_study):
    with open(small_study / "results.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    for field in ("task", "method", "K", "seed", "dp", "lr", "steps_to_target", "time_to_target", "final_accuracy", "bias"):
        assert field in rows[0]
    assert {r["method"] for r in rows} == set(ALL_METHODS)
    spec = tomllib.loads(SMALL.read_text())
    Ks = {m * spec["buffer"] for m in spec["k_multiples"]}
    for method in ALL_METHODS:
        got = {int(r["K"]) for r in rows if r["method"] == method}
        assert got == ({spec["buffer"]} if method == "sync-momentum" else Ks), method
    assert all(r["status"] == "completed" for r in rows)
    for r in rows:  # empty exactly where the target was not reached
        assert (r["steps_to_target"] == "") == (r["time_to_target"] == "")
        if r["steps_to_target"]:
            assert 0 <= float(r["steps_to_target"]) <= spec["steps"]
        assert 0.0 <= float(r["bias"])
    sync = [r for r in rows if r["method"] == "sync-momentum"]
    assert all(float(r["bias"]) == 0.0 for r in sync)
    report = (small_study / "report.md").read_text()
    for label in (METHOD_LABELS[m] for m in ALL_METHODS):  # the six the spec runs by default
        assert label in report
    assert "Speed-up of momentum approximation" in report
    for png in ("curves_synthetic_nodp.png", "bias.png"):
        assert (small_study / png).stat().st_size > 1000
        assert f"]({png})" in report
    # every tuning grid point ran, and the chosen lr is the one in results.csv
    with open(small_study / "tuning.csv", newline="") as fh:
        tuning = list(csv.DictReader(fh))
    for r in rows:
        chosen = [t for t in tuning if (t["method"], t["K"], t["chosen"]) == (r["method"], r["K"], "1")]
        assert len(chosen) == 1 and float(chosen[0]["lr"]) == float(r["lr"])
    # a generated scenario reruns with `asyncfl run`
    scen = sorted((small_study / "scenarios").glob("study_*.toml"))
    assert {p.name for p in scen} == {"study_synthetic_K1C.toml", "study_synthetic_K5C.toml", "study_synthetic_sync.toml"}


@pytest.mark.slow
def test_rerun_resumes_without_running_again(small_study, monkeypatch):
    import asyncfl.run.runner

    def boom(*args, **kwargs):
        raise AssertionError("a completed run was run again")

    monkeypatch.setattr(asyncfl.run.runner, "run_to_dir_blocking", boom)
    before = (small_study / "results.csv").read_text()
    assert study([str(SMALL), "--out", str(small_study), "--quiet"]) == 0
    assert (small_study / "results.csv").read_text() == before


def _spec_with(tmp_path: Path, edit) -> Path:
    raw = tomllib.loads(SMALL.read_text())
    edit(raw)
    path = tmp_path / "spec.toml"
    path.write_text(tomli_w.dumps(raw))
    return path


@pytest.mark.parametrize("edit, field, phrase", [
    (lambda r: r.update(k_multipels=[1]), "k_multipels", "did you mean 'k_multiples'"),
    (lambda r: r["tasks"][0].update(target=0.5), "tasks[0].target", "unknown key"),
    (lambda r: r["lr_grid"].update({"fedbuff-adam": [1.0]}), "lr_grid.fedbuff-adam", "unknown key"),
    (lambda r: r["tuning"].update(sed=1), "tuning.sed", "did you mean 'seed'"),
    (lambda r: r.update(methods=["fedbuff-sgd", "fedasync"]), "methods[1]", "fedbuff-momentum"),
    (lambda r: r["tasks"][0].update(target_accuracy=1.5), "tasks[0].target_accuracy", "less than or equal to 1"),
    (lambda r: r.update(buffer=0), "buffer", "greater than or equal to 1"),
    (lambda r: r["lr_grid"].pop("fedbuff-ma-light"), "lr_grid.fedbuff-ma-light", "required"),
    (lambda r: r.update(k_multiples=[1, 20]), "server.concurrency", "at most population.clients"),
    (lambda r: r["tasks"][0]["overrides"].update({"task.modle": "mlp"}), "task.modle", "did you mean 'model'"),
    (lambda r: r["tasks"][0].update(scenario="nope.toml"), "tasks[0] (synthetic).scenario", "no such scenario file"),
    (lambda r: (r.update(dp=[True]), r["tuning"].update(dp="reuse-nodp")), "tuning.dp", "needs false in dp"),
    (lambda r: r.update(privacy={"epsilon": 2.0, "xi": 3.0, "gama": 1.0}), "privacy.gama", "did you mean 'gamma'"),
])
def test_bad_spec_exits_2_naming_the_field(tmp_path, capsys, edit, field, phrase):
    spec = _spec_with(tmp_path, edit)
    assert study([str(spec), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert field in err and phrase in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "out" / "runs").exists()  # nothing ran


def test_speedup_bounds_when_a_side_misses_the_target():
    T = 100
    row = lambda s: {"steps_to_target": s, "time_to_target": s, "final_accuracy": 0.5, "bias": 0.1, "lr": 1.0}
    nan = float("nan")
    base = reach_summary([row(40.0), row(60.0)], T)
    ma = reach_summary([row(20.0), row(30.0)], T)
    assert speedup(base, ma) == (2.0, "2.00×")
    assert speedup(reach_summary([row(nan), row(60.0)], T), ma)[1] == "≥ 3.20×"
    assert speedup(base, reach_summary([row(nan), row(50.0)], T))[1] == "≤ 0.67×"
    assert speedup(reach_summary([row(nan)], T), reach_summary([row(nan)], T))[1].startswith("n/a")
    assert speedup(reach_summary([row(nan), row(nan)], T), reach_summary([row(nan), row(50.0)], T))[1] == "~1.33× (censored)"


def test_dp_scenarios_carry_the_spec_privacy_and_short_tuning_runs_keep_the_full_runs_noise():
    from asyncfl.privacy import calibrate_sigma

    raw = tomllib.loads(SMALL.read_text())
    raw.update(dp=[False, True], privacy={"epsilon": 2.0, "delta": 1e-6, "xi": 5.0, "clip": 0.5}, tuning={"steps": 10})
    study = study_from_raw(raw)
    full = study.scenario(Point("synthetic", "fedbuff-ma-light", 15, 0, "dp", 0.1, raw["steps"]))
    assert full.privacy.enabled and full.privacy.epsilon == 2.0 and full.privacy.noise_multiplier is None
    assert (full.privacy.xi, full.privacy.clip, full.privacy.delta) == (5.0, 0.5, 1e-6)
    short = study.scenario(Point("synthetic", "fedbuff-ma-light", 15, 0, "dp", 0.1, 10))
    assert short.privacy.epsilon is None
    sigma = calibrate_sigma(2.0, 1e-6, raw["buffer"] / raw["defaults"]["population.clients"], raw["steps"], "pld")
    assert short.privacy.noise_multiplier == pytest.approx(sigma, rel=1e-9)
    nodp = study.scenario(Point("synthetic", "sync-momentum", 3, 0, "nodp", 0.1, 20))
    assert not nodp.privacy.enabled and nodp.server.protocol == "sync" and nodp.server.cohort == raw["buffer"]


# -- several DP settings, σ as the runner resolves it, grid widening, paired speed-ups ---------
def _dp_study(**privacy_overrides):
    raw = tomllib.loads(SMALL.read_text())
    settings = [
        {"name": "eps2", "epsilon": 2.0, "noise_cohort": 20, "xi_over_sigma": 2.0, "clip": 0.5},
        {"name": "cap", "epsilon": 8.0, "sampling": "participation-cap", "max_participations": 2, "xi": 40.0,
         "clip": 0.5, "tasks": ["synthetic"], **privacy_overrides},
    ]
    raw.update(dp=[False, True], privacy=settings)
    return raw, study_from_raw(raw)


def test_each_dp_setting_gets_the_sigma_a_run_of_its_scenario_would_resolve():
    """σ of a setting is the runner's own (noise cohort, sampling assumption, cap), computed for
    the full run; ``xi_over_sigma`` = 2 gives ξ = 2σ. Independent checks: the Poisson
    calibration at q = M/N = 20/30 directly; for the cap (k = 2 un-subsampled releases, i.e. one
    Gaussian mechanism of noise σ/√2), the analytic Gaussian mechanism's exact δ at ε = 8 (Balle
    & Wang 2018: δ = Φ(1/(2s) − εs) − e^ε Φ(−1/(2s) − εs), s = σ/√2) must be the target 10⁻⁶ —
    9.99992·10⁻⁷ at the σ = 0.92339 calibrated here."""
    from asyncfl.privacy import calibrate_sigma

    raw, study = _dp_study()
    assert study.settings == ["nodp", "eps2", "cap"]
    sc = study.scenario(Point("synthetic", "fedbuff-ma-light", 15, 0, "eps2", 0.1, raw["steps"]))
    sigma = calibrate_sigma(2.0, 1e-6, 20 / 30, raw["steps"], "pld")
    assert sc.privacy.noise_cohort == 20 and sc.privacy.xi == pytest.approx(2 * sigma, rel=1e-9)
    cap = study.scenario(Point("synthetic", "fedbuff-ma-light", 15, 0, "cap", 0.1, 10))  # a short (tuning) run
    assert cap.privacy.sampling == "participation-cap" and cap.privacy.max_participations == 2 and cap.privacy.xi == 40.0
    s = cap.privacy.noise_multiplier / np.sqrt(2)
    delta = stats.norm.cdf(1 / (2 * s) - 8.0 * s) - np.exp(8.0) * stats.norm.cdf(-1 / (2 * s) - 8.0 * s)
    assert cap.privacy.noise_multiplier == pytest.approx(0.92339, abs=1e-5)
    assert delta == pytest.approx(1e-6, rel=1e-3)


@pytest.mark.parametrize("edit, phrase", [
    ({"name": "eps2"}, "must be unique"),
    ({"tasks": ["digits"]}, "privacy[1].tasks: 'digits' is not a task"),
    ({"xi_over_sigma": 3.0}, "at most one of xi, gamma, xi_over_sigma"),
])
def test_bad_dp_settings_are_named(edit, phrase):
    with pytest.raises(StudyError) as info:
        _dp_study(**edit)
    assert phrase in str(info.value)


def test_a_grid_is_widened_beyond_the_edge_that_won_by_its_outer_ratio():
    pts = [Point("t", "fedbuff-momentum", 3, 0, "nodp", lr, 20) for lr in (0.1, 0.3, 1.0)]
    assert widened(pts, [0.5, 0.6, 0.7]).lr == pytest.approx(1.0 * (1.0 / 0.3), rel=1e-5)  # best at the top: ×3.33
    assert widened(pts, [0.8, 0.6, 0.7]).lr == pytest.approx(0.1 / 3, rel=1e-5)  # best at the bottom: ÷3
    assert widened(pts, [0.5, 0.9, 0.7]) is None  # interior
    assert widened(pts, [float("-inf")] * 3) is None  # every run diverged: nothing to follow
    assert widened(pts[::-1], [0.7, 0.6, 0.5]).lr == pytest.approx(3.33333, rel=1e-5)  # order of the grid does not matter


@pytest.mark.slow
def test_the_ci_sized_paper_study_runs_end_to_end(tmp_path):
    """analysis/study_paper_ci.toml — the paper-scale spec's structure at CI size — runs on two
    workers and writes every output: three DP settings (the cap only on its task), the pooled
    reference per task and seed, tuning rows with the widened points, a report with the paired
    speed-ups, the sync-vs-pooled table and the speed-up-vs-bias figure. A capped run keeps
    every client within its k participations."""
    out = tmp_path / "ci"
    assert study([str(PAPER_CI), "--out", str(out), "--quiet", "--workers", "2"]) == 0
    rows = list(csv.DictReader(open(out / "results.csv", newline="")))
    spec = tomllib.loads(PAPER_CI.read_text())
    assert {(r["task"], r["privacy"]) for r in rows} == {
        ("gaussian", "nodp"), ("gaussian", "eps2"), ("gaussian", "eps8"), ("gaussian", "cap-eps8"),
        ("mnist1d", "nodp"), ("mnist1d", "eps2"), ("mnist1d", "eps8")}
    assert all(r["status"] == "completed" for r in rows)
    assert all(float(r["epsilon"]) == pytest.approx(2.0 if r["privacy"] == "eps2" else 8.0, rel=1e-3)
               for r in rows if r["privacy"] != "nodp" and r["method"] != "sync-momentum")
    pooled = list(csv.DictReader(open(out / "pooled.csv", newline="")))
    assert {(p["task"], int(p["seed"])) for p in pooled} == {(t["name"], s) for t in spec["tasks"] for s in spec["seeds"]}
    tuning = list(csv.DictReader(open(out / "tuning.csv", newline="")))
    grid = spec["lr_grid"]
    assert any(float(t["lr"]) not in grid[t["method"]] for t in tuning)  # some grid was widened
    for r in rows:
        if r["privacy"] == "cap-eps8":
            summary = json.loads((out / r["run_dir"] / "summary.json").read_text())
            assert summary["privacy"]["participations_max"] <= 5
    report = (out / "report.md").read_text()
    for phrase in ("95 % CI", "Do the tasks learn?", "speedup_vs_bias.png", "DP setting `cap-eps8` (tasks gaussian)",
                   "Against not using momentum at all"):
        assert phrase in report
    # the privacy–utility script on this study: ξ = 1.5σ and 20σ, one ε, two seeds, both tasks and rules
    pu = tmp_path / "pu"
    assert privacy_utility(["--spec", str(PAPER_CI), "--study", str(out), "--out", str(pu), "--epsilons", "8",
                            "--xi-over-sigma", "1.5", "20", "--seeds", "0", "1", "--workers", "2"]) == 0
    summary = list(csv.DictReader(open(pu / "summary.csv", newline="")))
    assert {(s["task"], s["rule"], float(s["xi_over_sigma"])) for s in summary} == {
        (t, r, f) for t in ("gaussian", "mnist1d") for r in ("ma-light", "momentum") for f in (1.5, 20.0)}
    assert all(int(s["n"]) == 2 for s in summary)
    assert "Best ξ per task and ε" in (pu / "report.md").read_text() and (pu / "privacy_utility.png").is_file()
