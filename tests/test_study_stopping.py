"""A study's runs stopped at its highest target (asyncfl.studies.stopping; docs/studies.md §2.1):
every target's crossing read from the stopped run equals the one read from the run to T, a run
that stops is observed at its crossing, and one that never reaches the target runs to T and is
censored there."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import pytest

from asyncfl.run.runner import run_to_dir_blocking
from asyncfl.studies.crossing import crossing
from asyncfl.studies.stopping import stopped_at_target, target_stop
from conftest import make_scenario

STEPS = 24
PLAIN = {"run.steps": STEPS, "run.eval_every": 2, "server.rule": "sgd", "server.beta": None}


def curve(run: Path) -> tuple[list[float], list[float]]:
    with (run / "metrics.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    return [float(r["step"]) for r in rows], [float(r["loss"]) for r in rows]


def test_target_stop_is_the_highest_target_or_the_lowest_loss():
    assert target_stop([0.6, 0.8, 0.7]) == {"target": {"metric": "accuracy", "at_least": 0.8}}
    assert target_stop([2.0, 0.5], "loss", higher_is_better=False) == {"target": {"metric": "loss", "at_most": 0.5}}
    with pytest.raises(ValueError, match="no target"):
        target_stop([])
    with pytest.raises(ValueError, match=r"finite, got \[nan\]"):
        target_stop([0.5, math.nan])


def test_a_run_stopped_at_the_highest_target_keeps_every_targets_crossing(tmp_path):
    scenario = make_scenario(PLAIN)
    run_to_dir_blocking(scenario, tmp_path / "whole")
    steps, loss = curve(tmp_path / "whole")
    # two losses the run reaches, at its 3rd and 8th evaluation (a loss: the lower one is the stop)
    high, low = loss[2], loss[7]
    assert low < high < loss[0] and low < min(loss[:7]) and any(v > low for v in loss[8:])  # it stops before T
    stop = target_stop([high, low], "loss", higher_is_better=False)
    assert stop == {"target": {"metric": "loss", "at_most": low}}
    stopped = tmp_path / "stopped"
    summary = run_to_dir_blocking(scenario.replace(**{"run.stop": stop}), stopped)
    assert stopped_at_target(summary) and stopped_at_target(json.loads((stopped / "summary.json").read_text()))
    s_steps, s_loss = curve(stopped)
    first = next(i for i, v in enumerate(loss) if v <= low)
    assert (s_steps, s_loss) == (steps[:first + 1], loss[:first + 1])  # a prefix of the whole run's curve
    for target in (high, low, (high + low) / 2):
        whole = crossing(steps, loss, target, higher_is_better=False, horizon=STEPS)
        cut = crossing(s_steps, s_loss, target, higher_is_better=False, horizon=STEPS)
        assert cut == whole and cut.reached, target  # observed at its crossing, interval and point unchanged


def test_a_run_that_never_reaches_the_target_runs_to_T_and_is_censored_there(tmp_path):
    scenario = make_scenario(PLAIN)
    run_to_dir_blocking(scenario, tmp_path / "whole")
    steps, loss = curve(tmp_path / "whole")
    never = min(loss) / 2
    summary = run_to_dir_blocking(scenario.replace(**{"run.stop": target_stop([never], "loss", higher_is_better=False)}),
                                  tmp_path / "unstopped")
    assert summary["status"] == "completed" and not stopped_at_target(summary)
    assert curve(tmp_path / "unstopped") == (steps, loss)
    c = crossing(*curve(tmp_path / "unstopped"), never, higher_is_better=False, horizon=STEPS)
    assert not c.reached and c.low == c.point == STEPS and c.high == math.inf
