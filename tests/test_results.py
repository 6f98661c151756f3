"""Results as data (docs/run-directory.md §10): ``asyncfl.load_run`` on every kind of run
directory — FedBuff, sync, private, a splitting baseline, a trace replay — checked against the
files read independently (the csv module, json, numpy); ``load_sweep`` on a privacy sweep, a
study-style and a sweep-style directory; the summary's new fields; the optimality gap of
quadratic runs against an independent least-squares solve; ``asyncfl compare`` on runs of
different protocols."""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.linalg

import asyncfl
from asyncfl.cli.main import main
from asyncfl.config.scenario import replay_scenario
from asyncfl.errors import RunDirError
from asyncfl.results import METRIC_DTYPES, UPDATE_DTYPES
from asyncfl.run.runner import run_to_dir_blocking
from asyncfl.tasks import build_task

from conftest import make_scenario

SYNC = {"server.protocol": "sync", "server.concurrency": None, "server.cohort": 6, "server.buffer": 4, "server.max_staleness": None}
PRIVATE = {"privacy": {"enabled": True, "clip": 1.0, "noise_multiplier": 0.3, "xi": 1.0}}
FEDDR = {**SYNC, "server.cohort": 8, "server.buffer": 8, "server.algorithm": "feddr", "client.mu": 5.0, "client.batch_size": None}
KINDS = {"fedbuff": {}, "sync": SYNC, "private": PRIVATE, "baseline": FEDDR}


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("runs")
    out = {}
    for kind, overrides in KINDS.items():
        scenario = make_scenario({"name": f"tiny-{kind}", **overrides})
        out[kind] = root / kind
        run_to_dir_blocking(scenario, out[kind])
    fedbuff = make_scenario({"name": "tiny-fedbuff"})
    out["replay"] = root / "replay"
    run_to_dir_blocking(replay_scenario(fedbuff, out["fedbuff"], **{"server.rule": "ma-light"}), out["replay"])
    return out


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _float(text: str) -> float:
    return math.nan if text == "" else float(text)


@pytest.mark.parametrize("kind", [*KINDS, "replay"])
def test_load_run_matches_the_files_read_independently(runs, kind):
    path = runs[kind]
    run = asyncfl.load_run(path)
    # summary.json and the scenario
    assert run.summary == json.loads((path / "summary.json").read_text())
    assert run.scenario.to_toml() == (path / "scenario.toml").read_text()
    # metrics.csv: every column, with its dtype, NaN where the field is empty
    rows = _csv(path / "metrics.csv")
    assert list(run.metrics.columns) == list(rows[0])
    assert {c: str(t) for c, t in run.metrics.dtypes.items()} == {c: METRIC_DTYPES[c] for c in rows[0]}
    for col in rows[0]:
        want = np.array([_float(r[col]) for r in rows])
        np.testing.assert_array_equal(run.metrics[col].to_numpy(dtype=float), want)
    # updates.csv: ints, floats, booleans and the reason category
    rows = _csv(path / "updates.csv")
    assert len(run.updates) == len(rows) > 0
    assert {c: str(t) for c, t in run.updates.dtypes.items()} == UPDATE_DTYPES
    for col in ("client", "version", "step", "staleness", "dispatch"):
        assert run.updates[col].tolist() == [int(r[col]) for r in rows]
    for col in ("dispatch_time", "arrival_time"):
        assert run.updates[col].tolist() == [float(r[col]) for r in rows]  # repr round-trips exactly
    assert run.updates["accepted"].tolist() == [r["accepted"] == "true" for r in rows]
    assert run.updates["reason"].astype(str).tolist() == [r["reason"] for r in rows]
    # counts.npz and W
    with np.load(path / "counts.npz") as data:
        counts = data["by_staleness"]
    np.testing.assert_array_equal(run.counts(), counts)
    p, C = run.scenario.server.staleness_exponent, run.scenario.server.buffer
    T, L = counts.shape
    W = np.zeros((T, T))
    for t in range(1, T + 1):
        for tau in range(L):
            if t - tau >= 1:
                W[t - 1, t - tau - 1] = (tau + 1) ** (-p) * counts[t - 1, tau] / C
    np.testing.assert_allclose(run.W(), W, rtol=0, atol=1e-15)
    # bias.json (FedBuff runs) and the privacy section (private runs)
    bias_file = path / "bias.json"
    assert run.bias == (json.loads(bias_file.read_text()) if bias_file.is_file() else None)
    assert run.privacy == json.loads((path / "summary.json").read_text()).get("privacy")


def test_what_each_kind_of_run_is(runs):
    r = {kind: asyncfl.load_run(path) for kind, path in runs.items()}
    assert r["fedbuff"].bias is not None and r["sync"].bias is None and r["baseline"].bias is None
    np.testing.assert_array_equal(r["sync"].W(), np.eye(len(r["sync"].counts())))  # sync: W = I
    assert r["private"].privacy["sigma"] == pytest.approx(0.3) and r["fedbuff"].privacy is None
    assert "private_by_staleness" in r["private"].arrays
    assert r["baseline"].summary["baseline"]["rounds"] == r["baseline"].summary["steps"]
    # the replay saw the recorded staleness pattern: same W, another rule
    np.testing.assert_array_equal(r["replay"].W(), r["fedbuff"].W())
    assert (r["replay"].summary["rule"], r["fedbuff"].summary["rule"]) == ("ma-light", "momentum")
    for kind, run in r.items():
        s, server = run.summary, run.scenario.server
        assert s["protocol"] == server.protocol and s["algorithm"] == server.algorithm and s["task"] == "quadratic"
        assert s["private"] == (kind == "private")
    assert r["baseline"].summary["rule"] is None  # FedDR has no server rule
    assert r["sync"].summary["rule"] == "momentum"
    model = r["fedbuff"].model()
    assert sum(v.numel() for v in model.values()) == 5


def test_quadratic_runs_log_the_optimality_gap_against_an_independent_solve(runs):
    run = asyncfl.load_run(runs["baseline"])
    scenario = run.scenario
    task = build_task(scenario.task, scenario.population.clients, scenario.seed)
    A = [c.x.numpy() for c in task.clients]
    b = [c.y.numpy() for c in task.clients]
    theta_star = scipy.linalg.lstsq(np.vstack(A), np.concatenate(b))[0]  # the pooled optimum, by scipy

    def F(theta):  # F(θ) = (1/N) Σ_k ½‖A_k θ − b_k‖² (docs/baselines.md §4)
        return sum(0.5 * np.sum((a @ theta - y) ** 2) for a, y in zip(A, b)) / len(A)

    theta = np.concatenate([v.reshape(-1).double().numpy() for v in run.model().values()])
    final_gap = run.metrics["gap"].iloc[-1]
    assert final_gap == pytest.approx(F(theta) - F(theta_star), rel=1e-6, abs=1e-9)
    assert run.metrics["gap"].iloc[0] == pytest.approx(F(np.zeros(5)) - F(theta_star), rel=1e-9)  # θ_1 = 0
    assert (run.metrics["gap"] >= 0).all() and final_gap < 0.1 * run.metrics["gap"].iloc[0]  # FedDR (8 of 30 clients per round) converges
    # classification tasks have no closed-form optimum: the column is empty
    assert run.summary["final"]["gap"] == pytest.approx(final_gap)


@pytest.mark.slow
def test_load_sweep_reads_the_privacy_sweep_study_and_sweep_layouts(runs, tmp_path):
    # a study-style directory: results.csv (one row per run, run_dir relative) + tuning.csv + runs/
    study = tmp_path / "study"
    (study / "runs").mkdir(parents=True)
    for kind in ("fedbuff", "sync"):
        shutil.copytree(runs[kind], study / "runs" / kind)
    pd.DataFrame({"method": ["fedbuff", "sync"], "seed": [0, 0], "run_dir": ["runs/fedbuff", "runs/sync"]}).to_csv(study / "results.csv", index=False)
    pd.DataFrame({"lr": [0.1]}).to_csv(study / "tuning.csv", index=False)
    sweep = asyncfl.load_sweep(study)
    assert sweep.kind == "study" and len(sweep) == 2 and list(sweep.results["method"]) == ["fedbuff", "sync"]
    assert sweep.run(1).summary["protocol"] == "sync" and sweep.runs[0].summary["protocol"] == "fedbuff"
    assert [r.name for r in sweep] == ["tiny-fedbuff", "tiny-sync"] and sweep.tuning is not None
    # asyncfl sweep's layout: results.csv, summary.csv, sweep.toml, runs/ (no run_dir column: runs/ is listed)
    (study / "tuning.csv").unlink()
    pd.DataFrame({"method": ["fedbuff", "sync"]}).to_csv(study / "results.csv", index=False)
    pd.DataFrame({"mean": [0.5]}).to_csv(study / "summary.csv", index=False)
    (study / "sweep.toml").write_text('name = "s"\n')
    sweep = asyncfl.load_sweep(study)
    assert sweep.kind == "sweep" and sweep.spec == {"name": "s"} and sweep.summary["mean"].tolist() == [0.5]
    assert [r.path.name for r in sweep.runs] == ["fedbuff", "sync"]
    # the privacy sweep's sweep.csv
    priv = tmp_path / "priv"
    (priv / "runs").mkdir(parents=True)
    shutil.copytree(runs["private"], priv / "runs" / "p")
    pd.DataFrame({"xi": [1.0], "rule": ["momentum"], "run_dir": ["runs/p"]}).to_csv(priv / "sweep.csv", index=False)
    sweep = asyncfl.load_sweep(priv)
    assert sweep.kind == "privacy" and sweep.run(0).privacy is not None
    with pytest.raises(IndexError):
        sweep.run(1)


def test_load_run_and_load_sweep_refuse_what_is_not_one(tmp_path):
    with pytest.raises(RunDirError, match="no such run directory"):
        asyncfl.load_run(tmp_path / "nope")
    with pytest.raises(RunDirError, match="not a run directory"):
        asyncfl.load_run(tmp_path)
    with pytest.raises(RunDirError, match="not a sweep directory"):
        asyncfl.load_sweep(tmp_path)


def test_compare_runs_of_different_protocols(runs, tmp_path, capsys):
    out = tmp_path / "cmp.svg"
    table = tmp_path / "cmp.csv"
    argv = ["compare", str(runs["fedbuff"]), str(runs["sync"]), str(runs["baseline"]), str(runs["private"]),
            "--metric", "gap", "--out", str(out), "--csv", str(table)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    for word in ("tiny-fedbuff", "tiny-sync", "tiny-baseline", "fedbuff", "sync", "feddr", "final gap"):
        assert word in text
    assert out.read_bytes().lstrip().startswith(b"<?xml") and out.stat().st_size > 5_000
    rows = _csv(table)
    assert [r["protocol"] for r in rows] == ["fedbuff", "sync", "sync", "fedbuff"]
    assert [r["algorithm"] for r in rows] == ["fedavg", "fedavg", "feddr", "fedavg"]
    fedbuff = json.loads((runs["fedbuff"] / "bias.json").read_text())["momentum"]
    assert float(rows[0]["bias"]) == pytest.approx(fedbuff) and float(rows[1]["bias"]) == 0.0
    for row, kind in zip(rows, ("fedbuff", "sync", "baseline", "private")):
        final = json.loads((runs[kind] / "summary.json").read_text())["final"]
        assert float(row["loss"]) == pytest.approx(final["loss"], rel=1e-12)
    # a metric no run has falls back to the loss with a note; --label must match the runs
    assert main(["compare", str(runs["fedbuff"]), str(runs["sync"]), "--out", str(tmp_path / "acc.png")]) == 0
    assert "drawing 'loss' instead" in capsys.readouterr().err
    assert main(["compare", str(runs["fedbuff"]), "--label", "a", "--label", "b"]) == 2
    assert "--label: given 2 times for 1 runs" in capsys.readouterr().err
    assert main(["compare", str(tmp_path / "missing")]) == 2
