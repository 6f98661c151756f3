"""Stop conditions (``[run] stop``; docs/run-directory.md §14), each against the run that goes to
``run.steps``: the stop's step is found independently in that run's own files (``metrics.csv``,
``privacy.csv``, ``counts.npz``'s ``step_time``), and the stopped run's files are a prefix of it.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from asyncfl.config import scenario as sc
from asyncfl.errors import RunInterrupted, ScenarioError
from asyncfl.run.runner import AlreadyCompleted, resume_dir_blocking, run_to_dir_blocking
from conftest import make_raw

REPO = Path(__file__).resolve().parents[1]
SYNTH = {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "model": "logreg"}
PRIVATE = {"enabled": True, "clip": 1.0, "noise_multiplier": 0.8, "xi": 4.0}


def scenario(stop=None, private=False, **run) -> sc.Scenario:
    raw = make_raw(**{"task": SYNTH, "population.clients": 40, "run.steps": 40, "run.eval_every": 4,
                      "server.max_staleness": 10, **{f"run.{k}": v for k, v in run.items()}})
    if stop is not None:
        raw["run"]["stop"] = stop
    if private:
        raw["privacy"] = dict(PRIVATE)
    return sc.validate(raw)


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def summary(path: Path) -> dict:
    return json.loads((path / "summary.json").read_text())


@pytest.fixture(scope="module")
def full(tmp_path_factory) -> Path:
    """The private run to ``run.steps`` (no stop): the reference every stop is found in."""
    out = tmp_path_factory.mktemp("full") / "run"
    run_to_dir_blocking(scenario(private=True), out)
    return out


def assert_prefix(stopped: Path, full: Path, step: int) -> None:
    """The stopped run is the full run cut after ``step``: its metrics rows are the full run's up
    to ``step`` (wall time aside), its updates.csv a byte prefix holding every row of steps ≤ step."""
    mine, theirs = rows(stopped / "metrics.csv"), rows(full / "metrics.csv")
    drop = lambda r: {k: v for k, v in r.items() if k != "wall_time"}  # noqa: E731
    assert [drop(r) for r in mine] == [drop(r) for r in theirs if int(r["step"]) <= step]
    u_stop, u_full = (stopped / "updates.csv").read_bytes(), (full / "updates.csv").read_bytes()
    assert u_full.startswith(u_stop)
    accepted = [r for r in rows(stopped / "updates.csv") if r["accepted"] == "true"]
    assert {int(r["step"]) for r in accepted} == set(range(1, step + 1))
    assert summary(stopped)["steps"] == step


def test_a_target_stops_at_the_first_evaluation_reaching_it(full, tmp_path):
    evals = [r for r in rows(full / "metrics.csv") if int(r["step"]) > 0]
    target = float(evals[3]["accuracy"])  # reached by the 4th evaluation at the latest
    first = next(int(r["step"]) for r in evals if float(r["accuracy"]) >= target)
    assert first < 40
    out = tmp_path / "run"
    s = run_to_dir_blocking(scenario({"target": {"metric": "accuracy", "at_least": target}}, private=True), out)
    assert s["status"] == "stopped" and s["stop"]["reason"] == "target" and s["stop"]["step"] == first
    assert s["stop"]["value"] == pytest.approx(target) or s["stop"]["value"] >= target
    assert_prefix(out, full, first)


def test_a_loss_target_stops_at_or_below_it(full, tmp_path):
    evals = [r for r in rows(full / "metrics.csv") if int(r["step"]) > 0]
    target = float(evals[5]["loss"])
    first = next(int(r["step"]) for r in evals if float(r["loss"]) <= target)
    out = tmp_path / "run"
    s = run_to_dir_blocking(scenario({"target": {"metric": "loss", "at_most": target}}, private=True), out)
    assert (s["status"], s["stop"]["reason"], s["stop"]["step"]) == ("stopped", "target", first)
    assert_prefix(out, full, first)


def test_an_epsilon_budget_stops_at_the_first_evaluation_spending_it(full, tmp_path):
    curve = [r for r in rows(full / "privacy.csv") if int(r["step"]) > 0]
    budget = float(curve[2]["epsilon"])  # ε after the 3rd evaluation step
    first = next(int(r["step"]) for r in curve if float(r["epsilon"]) >= budget)
    assert 0 < first < 40
    out = tmp_path / "run"
    s = run_to_dir_blocking(scenario({"epsilon": budget}, private=True), out)
    assert (s["status"], s["stop"]["reason"], s["stop"]["step"]) == ("stopped", "epsilon", first)
    assert s["stop"]["epsilon"] == pytest.approx(budget)
    assert float(rows(out / "privacy.csv")[-1]["epsilon"]) == pytest.approx(budget)
    assert_prefix(out, full, first)


def test_a_virtual_time_budget_stops_after_the_first_step_at_that_time(full, tmp_path):
    times = np.load(full / "counts.npz")["step_time"]  # virtual time of step t at [t-1]
    budget = float(times[16]) - 1e-9  # step 17 is the first at or past it
    first = int(np.argmax(times >= budget)) + 1
    assert first == 17
    out = tmp_path / "run"
    s = run_to_dir_blocking(scenario({"virtual_time": budget}, private=True), out)
    assert (s["status"], s["stop"]["reason"], s["stop"]["step"]) == ("stopped", "virtual_time", first)
    assert s["virtual_time"] == pytest.approx(float(times[16]))
    assert_prefix(out, full, first)


def test_a_wall_clock_budget_stops_the_run(full, tmp_path):
    out = tmp_path / "run"
    s = run_to_dir_blocking(scenario({"wall_time": 1e-9}, private=True), out)  # spent by the first step
    assert (s["status"], s["stop"]["reason"], s["stop"]["step"]) == ("stopped", "wall_time", 1)
    assert s["stop"]["wall_time"] >= 1e-9
    assert_prefix(out, full, 1)


def test_stops_that_never_fire_leave_the_run_byte_identical(full, tmp_path):
    out = tmp_path / "run"
    never = {"target": {"metric": "accuracy", "at_least": 2.0}, "epsilon": 1e9, "virtual_time": 1e12, "wall_time": 1e9}
    s = run_to_dir_blocking(scenario(never, private=True), out)
    assert s["status"] == "completed" and "stop" not in s
    assert (out / "updates.csv").read_bytes() == (full / "updates.csv").read_bytes()
    a, b = torch.load(out / "model.pt", weights_only=True), torch.load(full / "model.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_stopped_run_killed_before_its_stop_resumes_to_the_same_stop(tmp_path):
    plain = scenario(None, checkpoint_every=4)
    reference = tmp_path / "reference"
    run_to_dir_blocking(plain, reference)
    times = np.load(reference / "counts.npz")["step_time"]
    stop = {"virtual_time": float(times[21])}  # fires after step 22, past the first checkpoints
    sc_stop = scenario(stop, checkpoint_every=4)
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    run_to_dir_blocking(sc_stop, whole)
    with pytest.raises(RunInterrupted):
        run_to_dir_blocking(sc_stop, cut, should_stop=lambda: (cut / "checkpoint.pt").exists())
    assert summary(cut)["status"] == "interrupted"
    s = resume_dir_blocking(cut)
    assert (s["status"], s["stop"]["step"]) == ("stopped", 22) == (summary(whole)["status"], summary(whole)["stop"]["step"])
    assert (cut / "updates.csv").read_bytes() == (whole / "updates.csv").read_bytes()
    a, b = torch.load(whole / "model.pt", weights_only=True), torch.load(cut / "model.pt", weights_only=True)
    assert all(torch.equal(a[k], b[k]) for k in a)
    drop = lambda r: {k: v for k, v in r.items() if k != "wall_time"}  # noqa: E731
    assert [drop(r) for r in rows(cut / "metrics.csv")] == [drop(r) for r in rows(whole / "metrics.csv")]


def test_resuming_a_stopped_run_does_nothing(tmp_path, capsys):
    from asyncfl.cli.main import main

    out = tmp_path / "run"
    run_to_dir_blocking(scenario({"wall_time": 1e-9}, checkpoint_every=1), out)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()}
    with pytest.raises(AlreadyCompleted):
        resume_dir_blocking(out)
    assert main(["resume", str(out)]) == 0
    assert "already stopped; nothing to resume" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.is_file()} == before


@pytest.mark.parametrize("stop, private, phrase", [
    ({"target": {"metric": "accuracy"}}, False, "run.stop.target = "),
    ({"target": {"metric": "accuracy", "at_least": 0.5, "at_most": 0.6}}, False, "give exactly one of at_least"),
    ({"target": {"at_least": 0.5}}, False, "run.stop.target.metric: required key is missing"),
    ({"epsilon": 2.0}, False, "run.stop.epsilon = 2: an ε budget needs privacy.enabled = true"),
    ({"epsilon": -1.0}, True, "run.stop.epsilon = -1"),
    ({"virtual_time": 0.0}, False, "run.stop.virtual_time = 0"),
    ({"wall": 3}, False, "run.stop.wall: unknown key; did you mean 'wall_time'?"),
    ({"target": {"metric": "accuracy", "at_least": 0.5, "above": 1}}, False, "run.stop.target.above: unknown key"),
])
def test_bad_stops_are_refused_naming_the_field(stop, private, phrase):
    with pytest.raises(ScenarioError) as exc:
        scenario(stop, private=private)
    assert any(phrase in p for p in exc.value.problems), exc.value.problems


def test_a_target_on_a_metric_the_run_does_not_record_is_refused_before_anything_is_written(tmp_path, capsys):
    from asyncfl.cli.main import main

    path = tmp_path / "s.toml"
    path.write_text(scenario({"target": {"metric": "macro_f1", "at_least": 0.5}}).to_toml())
    assert main(["run", str(path), "--out", str(tmp_path / "run"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "run.stop.target.metric = 'macro_f1': not a metric this run records; allowed: time, loss, accuracy" in err
    assert "Traceback" not in err and not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_sweep_counts_a_stopped_run_as_done(tmp_path, capsys):
    from asyncfl.cli.main import main

    path = tmp_path / "s.toml"
    path.write_text(scenario({"wall_time": 1e-9}).to_toml())
    assert main(["sweep", str(path), "--grid", "server.lr=0.5,0.25", "--workers", "1", "--out", str(tmp_path / "sw"), "--quiet"]) == 0
    table = rows(tmp_path / "sw" / "results.csv")
    assert [r["status"] for r in table] == ["stopped", "stopped"]
    assert [r["completed"] for r in rows(tmp_path / "sw" / "summary.csv")] == ["1", "1"]
    shutil.rmtree(tmp_path / "sw")
