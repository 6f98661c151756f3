"""The review engine's target stops (docs/studies.md §2.1; docs/ma-review.md §2): tuning runs
scored by their restricted steps to the target may stop at it (``tuning.stop_at_target``), and
evaluation runs may stop at it where the spec declares it reads their crossings alone
(``evaluation.reads = "crossings"``, ``evaluation.stop_at_target``). On a small real spec: the
same chosen rates and the same crossing of every run with and without the stops, the stopped
runs recorded as such (``stopped_at_target``, the spec's digest), their final accuracy, ε and
bias blank in the tables and "not measured" in the report, and a rerun on the folder runs
nothing again. A spec without the keys builds the scenarios it always built."""

from __future__ import annotations

import copy
import csv
import json
import math
import tomllib
from pathlib import Path

import pytest
import tomli_w

from analysis.ma_review.__main__ import main as review
from analysis.ma_review.compare import paired, summary
from analysis.ma_review.design import load_review, review_from_raw
from analysis.ma_review.report import NOT_MEASURED
from analysis.ma_review.scenarios import Point
from analysis.ma_review.tables import read_csv

CI_SPEC = Path(__file__).resolve().parents[1] / "analysis" / "ma_review_ci.toml"


def small_spec() -> dict:
    """The CI spec without DP: FedBuff SGD and momentum at K = C, and the sync reference the
    target is read from (12 steps, evaluated every 2, one tuning seed, two evaluation seeds)."""
    raw = tomllib.loads(CI_SPEC.read_text())
    raw["privacy"] = []
    raw["cells"] = [{"name": "core", "methods": ["fedbuff-sgd", "fedbuff-momentum", "sync-momentum"], "k_multiples": [1]}]
    raw["lr_grid"] = {m: raw["lr_grid"][m] for m in ("fedbuff-sgd", "fedbuff-momentum", "sync-momentum")}
    raw["tasks"][0]["overrides"].pop("privacy.clip")
    return raw


def with_stops(raw: dict, tuning: bool = False, evaluation: bool = False) -> dict:
    raw = copy.deepcopy(raw)
    if tuning:
        raw["tuning"]["stop_at_target"] = True
    if evaluation:
        raw["evaluation"] = {"reads": "crossings", "stop_at_target": True}
    return raw


# --- the spec --------------------------------------------------------------------------------

@pytest.mark.parametrize("edit, field, phrase", [
    (lambda r: r["tuning"].update(score="final", stop_at_target=True), "tuning.stop_at_target",
     "needs tuning.score = 'rmst'; with score = 'final' a tuning run is scored by its final accuracy"),
    (lambda r: r.update(evaluation={"stop_at_target": True}), "evaluation.stop_at_target",
     "needs evaluation.reads = 'crossings' (got 'everything'); a run stopped at its target has no final accuracy, "
     "no ε spent over its T steps and no bias of all T steps"),
    (lambda r: (r["tuning"].update(stop_at_target=True), r["defaults"].update({"run.stop": {"virtual_time": 50.0}})),
     "tasks (gaussian): run.stop", "the study sets each run's stop"),
    (lambda r: r.update(evaluation={"reads": "crossing"}), "evaluation.reads", "'everything' or 'crossings'"),
])
def test_a_stop_where_the_runs_are_read_whole_is_refused_naming_the_field(tmp_path, capsys, edit, field, phrase):
    raw = small_spec()
    edit(raw)
    spec = tmp_path / "spec.toml"
    spec.write_text(tomli_w.dumps(raw))
    assert review([str(spec), "--out", str(tmp_path / "out"), "--check"]) == 2
    err = capsys.readouterr().err
    assert field in err and phrase in err, err
    assert "Traceback" not in err


def test_the_stops_change_the_digest_and_nothing_else_does():
    """Off (absent or false) adds no key: the digest and every scenario are the spec's as before;
    ``reads`` alone changes no run; each stop does. The option itself adds nothing to a scenario:
    only the target a run is told to stop at does, as ``run.stop``."""
    raw = small_spec()
    off = review_from_raw(raw)
    explicit_off = review_from_raw(raw | {"tuning": {**raw["tuning"], "stop_at_target": False},
                                          "evaluation": {"reads": "crossings", "stop_at_target": False}})
    tuning, evaluation = review_from_raw(with_stops(raw, tuning=True)), review_from_raw(with_stops(raw, evaluation=True))
    assert explicit_off.digest() == off.digest()
    assert len({off.digest(), tuning.digest(), evaluation.digest()}) == 3
    point = Point("gaussian", "fedbuff-momentum", 5, 7, "nodp", 0.4, 12)
    assert off.scenario(point).run.stop is None
    assert tuning.scenario(point).to_toml() == off.scenario(point).to_toml() == explicit_off.scenario(point).to_toml()
    stopped = tuning.scenario(point, 0.14)
    assert stopped.run.stop is not None and stopped.run.stop.target is not None
    assert (stopped.run.stop.target.metric, stopped.run.stop.target.at_least) == ("accuracy", 0.14)
    assert stopped.replace(**{"run.stop": None}).to_toml() == off.scenario(point).to_toml()  # nothing else differs
    # the committed specs' digests are pinned in tests/test_ma_review_spec.py; the CI spec's scenarios carry no stop
    assert load_review(CI_SPEC).scenario(Point("gaussian", "fedbuff-sgd", 20, 0, "eps2", 2.0, 12)).run.stop is None


# --- the statistics of rows with stopped runs ------------------------------------------------

def _row(method: str, seed: int, cross: float, final: float, stopped: bool) -> dict:
    return {"task": "t", "privacy": "nodp", "K": 5, "method": method, "seed": seed, "lr": 0.1, "horizon": 12, "reached": 1,
            "cross_low": cross - 1, "cross_high": cross + 1, "cross_point": cross, "status": "stopped" if stopped else "completed",
            "stopped_at_target": int(stopped), "final_accuracy": math.nan if stopped else final,
            "bias": math.nan if stopped else 0.1,
            **{c: math.nan for c in ("amplification", "noise_gain", "iterate_noise", "epsilon", "epsilon_client_max",
                                      "epsilon_client_p50", "sigma", "xi")}}


def test_a_stopped_run_counts_with_its_crossing_and_its_cell_has_no_final_accuracy():
    """Base crossings 4 and 6, rule 2 and 3, every run reached: RMST 5 against 2.5, a ratio of 2,
    whether the rule's runs stopped at the target or ran to T. The rule's final accuracy: a mean
    over its runs when none stopped, not measured (NaN, its stopped count beside it) when one
    did — never the mean of the run left."""
    base = [_row("b", 0, 4.0, 0.5, False), _row("b", 1, 6.0, 0.6, False)]
    whole = [_row("r", 0, 2.0, 0.7, False), _row("r", 1, 3.0, 0.8, False)]
    cut = [_row("r", 0, 2.0, math.nan, True), _row("r", 1, 3.0, 0.8, False)]
    for rule in (whole, cut):
        s = summary(rule)
        assert (s.reached, s.rmst) == (2, pytest.approx(2.5))
        assert paired(base, rule).speed.ratio == pytest.approx(2.0)
    assert summary(whole).final.mean == pytest.approx(0.75) and summary(whole).stopped == 0
    s = summary(cut)
    assert s.stopped == 1 and s.final.n == 0 and math.isnan(s.means["bias"])
    assert paired(base, whole).final_measured and paired(base, whole).final_diff.mean == pytest.approx(0.2)
    assert not paired(base, cut).final_measured and math.isnan(paired(base, cut).final_diff.mean)


# --- a small real study, with and without the stops ------------------------------------------

@pytest.fixture(scope="module")
def studies(tmp_path_factory):
    root = tmp_path_factory.mktemp("ma_review_stop")
    raw = small_spec()
    out = {}
    for name, spec in (("off", raw), ("tuning", with_stops(raw, tuning=True)),
                       ("both", with_stops(raw, tuning=True, evaluation=True))):
        path = root / f"{name}.toml"
        path.write_text(tomli_w.dumps(spec))
        assert review([str(path), "--out", str(root / name), "--quiet", "--workers", "2"]) == 0
        out[name] = (path, root / name)
    return out


TUNING_KEYS = ("task", "privacy", "K", "method", "lr", "seed", "target_accuracy", "cross_point", "reached", "chosen", "edge",
               "reference", "run_dir")
CROSSING_KEYS = ("task", "method", "K", "seed", "lr", "target_accuracy", "reached", "cross_low", "cross_high", "cross_point",
                 "time_low", "time_high", "time_point")
WHOLE_RUN = ("final_accuracy", "best_accuracy", "final_loss", "time_end", "bias", "amplification", "noise_gain")


@pytest.mark.slow
def test_tuning_runs_stopped_at_the_target_choose_the_same_rates_from_the_same_crossings(studies):
    off = read_csv(studies["off"][1] / "tuning.csv")
    on = read_csv(studies["tuning"][1] / "tuning.csv")
    assert [{k: r[k] for k in TUNING_KEYS} for r in on] == [{k: r[k] for k in TUNING_KEYS} for r in off]
    stopped = [r for r in on if r["stopped_at_target"]]
    assert len(stopped) >= 3 and all(r["reached"] and r["status"] == "stopped" and math.isnan(r["final_accuracy"])
                                     for r in stopped)
    assert not any(r["stopped_at_target"] for r in off)
    # the reference's runs the target is read from ran to T: their final accuracy is the target's source
    assert all(r["status"] == "completed" and not r["stopped_at_target"] for r in on if r["reference"])
    for r in stopped:  # the run ended at its first evaluation at the target, before T
        summary = json.loads((studies["tuning"][1] / r["run_dir"] / "summary.json").read_text())
        assert summary["stop"]["reason"] == "target" and summary["stop"]["step"] < r["horizon"]
        assert summary["stop"]["value"] >= r["target_accuracy"]
    # the evaluation was not stopped: the same runs, the same table
    assert (studies["tuning"][1] / "results.csv").read_text() == (studies["off"][1] / "results.csv").read_text()


@pytest.mark.slow
def test_evaluation_runs_stopped_at_the_target_keep_their_crossings_and_measure_nothing_else(studies):
    off = read_csv(studies["off"][1] / "results.csv")
    both = read_csv(studies["both"][1] / "results.csv")
    assert [{k: r[k] for k in CROSSING_KEYS} for r in both] == [{k: r[k] for k in CROSSING_KEYS} for r in off]
    stopped = [r for r in both if r["stopped_at_target"]]
    assert stopped and all(r["status"] == "stopped" and r["reached"] for r in stopped)
    assert all(math.isnan(r[c]) for r in stopped for c in WHOLE_RUN)
    assert all(not math.isnan(r["final_accuracy"]) for r in off)
    for r in stopped:  # its evaluations are the run to T's, cut at the crossing
        def rows(folder: Path) -> list[dict]:
            with (folder / r["run_dir"] / "metrics.csv").open(newline="") as fh:
                return [{k: v for k, v in row.items() if k != "wall_time"} for row in csv.DictReader(fh)]
        cut, whole = rows(studies["both"][1]), rows(studies["off"][1])
        assert cut == whole[:len(cut)] and len(cut) < len(whole)
    report = (studies["both"][1] / "report.md").read_text()
    assert f"{len(stopped)} evaluation run(s) stopped at the target" in report
    assert f"| {NOT_MEASURED} | {NOT_MEASURED} |" in report
    assert "| FedBuff + SGD | FedBuff + momentum |" in report and "| not measured | not measured | expanded |" in report
    # the RMST and the paired speed-up, read from the stopped runs, are those of the runs to T
    off_report = (studies["off"][1] / "report.md").read_text()
    def rmst_and_speed(text: str) -> list[str]:  # the cell's RMST, then the pair's speed-up (the tuning table follows)
        rows = [line for line in text.splitlines() if line.startswith("| gaussian | nodp | 5 | FedBuff + SGD |")]
        return [line.split(" | ")[5] for line in rows][:2]

    assert len(rmst_and_speed(off_report)) == 2 and rmst_and_speed(report) == rmst_and_speed(off_report)


@pytest.mark.slow
def test_a_stopped_study_is_recorded_and_a_rerun_runs_nothing_again(studies, monkeypatch, capsys):
    import asyncfl.run.runner

    def boom(*args, **kwargs):
        raise AssertionError("a finished run was run again")

    path, folder = studies["both"]
    spec = tomllib.loads(path.read_text())
    assert spec["evaluation"] == {"reads": "crossings", "stop_at_target": True} and spec["tuning"]["stop_at_target"]
    # the folder is claimed under the spec's digest, which the stops are part of; each run's scenario holds its stop
    assert json.loads((folder / ".asyncfl-owner.json").read_text())["spec_sha256"] == load_review(path).digest()
    run = next(r for r in read_csv(folder / "results.csv") if r["stopped_at_target"])
    scenario = tomllib.loads((folder / run["run_dir"] / "scenario.toml").read_text())
    assert scenario["run"]["stop"]["target"] == {"metric": "accuracy", "at_least": run["target_accuracy"]}
    monkeypatch.setattr(asyncfl.run.runner, "run_to_dir_blocking", boom)
    monkeypatch.setattr(asyncfl.run.runner, "resume_dir_blocking", boom)
    before = {name: (folder / name).read_text() for name in ("results.csv", "tuning.csv", "curves.csv", "report.md")}
    assert review([str(path), "--out", str(folder), "--quiet", "--workers", "1"]) == 0
    assert {name: (folder / name).read_text() for name in before} == before
    # --collect reads the stopped runs back as stopped at their target too
    assert review([str(path), "--out", str(folder), "--quiet", "--collect"]) == 0
    assert {name: (folder / name).read_text() for name in before} == before
    # the spec without the stops is another study: its folder is not this one's
    assert review([str(studies["off"][0]), "--out", str(folder), "--quiet"]) == 2
    capsys.readouterr()
