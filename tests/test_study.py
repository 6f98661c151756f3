"""The momentum-approximation study (issue 8): the scaled-down spec runs end to end and writes
results.csv and report.md with all six methods; it resumes without rerunning; bad specs exit 2
with a message naming the field."""

from __future__ import annotations

import csv
import tomllib
from pathlib import Path

import pytest
import tomli_w

from asyncfl.cli.main import main
from asyncfl.studies.ma_study.design import Point, study_from_raw
from asyncfl.studies.ma_study.spec import ALL_METHODS, METHOD_LABELS
from asyncfl.studies.ma_study.tables import reach_summary, speedup

SMALL = Path(__file__).resolve().parents[1] / "analysis" / "study_small.toml"


@pytest.fixture(scope="module")
def small_study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study_small")
    assert main(["study", str(SMALL), "--out", str(out), "--quiet"]) == 0
    return out


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
    for label in METHOD_LABELS.values():
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


def test_rerun_resumes_without_running_again(small_study, monkeypatch):
    import asyncfl.run.runner

    def boom(*args, **kwargs):
        raise AssertionError("a completed run was run again")

    monkeypatch.setattr(asyncfl.run.runner, "run_to_dir_blocking", boom)
    before = (small_study / "results.csv").read_text()
    assert main(["study", str(SMALL), "--out", str(small_study), "--quiet"]) == 0
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
    assert main(["study", str(spec), "--out", str(tmp_path / "out"), "--quiet"]) == 2
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
