"""The command line: every documented validation error exits 2 with a message naming the field,
never a traceback; a run writes the documented run directory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tomli_w

from asyncfl.cli.main import main
from asyncfl.run.rundir import METRIC_FIELDS, read_csv
from asyncfl.records import UPDATE_FIELDS

from conftest import make_raw

# (override or raw edit, the field the message must name, a phrase of what is allowed)
BAD_SETS = [
    ("population.clients=0", "population.clients", "greater than or equal to 1"),
    ("population.clients=-5", "population.clients", "greater than or equal to 1"),
    ("population.clients=1e400", "population.clients", ""),
    ("population.speed_sigma=nan", "population.speed_sigma", "finite"),
    ("population.clients=\"ten\"", "population.clients", "integer"),
    ("latency.dist=\"gamma\"", "latency.dist", "Allowed: constant, exponential"),
    ("latency.mean=0", "latency.mean", "greater than 0"),
    ("latency.value=2", "latency.value", "unknown key"),
    ("task.name=\"cifar\"", "task.name", "Allowed:"),
    ("task.problem=\"seed-2d\"", "task.problem", "'seed-1d' or 'random'"),
    ("client.solver=\"lbfgs\"", "client.solver", "Allowed: sgd, adam, exact"),
    ("client.lr=-1", "client.lr", "greater than 0"),
    ("client.epochs=2", "client.local_steps", "exactly one"),
    ("server.protocol=\"gossip\"", "server.protocol", "Allowed: fedbuff, sync"),
    ("server.concurrency=31", "server.concurrency", "at most population.clients"),
    ("server.buffer=0", "server.buffer", "greater than or equal to 1"),
    ("server.staleness_exponent=-1", "server.staleness_exponent", "greater than or equal to 0"),
    ("server.max_staleness=-1", "server.max_staleness", "greater than or equal to 0"),
    ("server.rule=\"rmsprop\"", "server.rule", "Allowed: sgd, momentum"),
    ("server.lr=0", "server.lr", "greater than 0"),
    ("server.beta=1.0", "server.beta", "less than 1"),
    ("server.cohort=5", "server.cohort", "(a key of server.protocol = 'sync')"),
    ("server.bufer=2", "server.bufer", "did you mean 'buffer'"),
    ("run.steps=0", "run.steps", "greater than or equal to 1"),
    ("run.eval_every=0", "run.eval_every", "greater than or equal to 1"),
    ("run.steps=true", "run.steps", "integer"),
    ("seed=-1", "seed", "integer in [0, 2^63)"),
    ("name=\"\"", "name", "non-empty"),
    ("colour=1", "colour", "unknown key"),
    ("privacy.enabled=true", "privacy.epsilon", "exactly one"),
    ("client.solver=\"exact\"", "client.solver", "quadratic"),
]


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(tomli_w.dumps(make_raw()))
    return path


@pytest.mark.parametrize("override,field,allowed", BAD_SETS, ids=[b[0] for b in BAD_SETS])
def test_validation_errors_exit_2_and_name_the_field(override, field, allowed, scenario_file, tmp_path, capsys):
    raw = make_raw()
    if override.startswith("client.solver=\"exact\""):
        raw["task"] = {"name": "synthetic"}
        scenario_file.write_text(tomli_w.dumps(raw))
    code = main(["run", str(scenario_file), "--set", override, "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2
    assert field in err and allowed in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing is written for an invalid scenario


def test_sync_buffer_above_cohort_and_seed_1d_population(scenario_file, capsys):
    code = main(["validate", str(scenario_file), "--set", "server.protocol=\"sync\"", "--set", "server.concurrency=3",
                 "--set", "server.cohort=4", "--set", "server.buffer=5"])
    assert code == 2  # concurrency is FedBuff's key: given with --set, it is refused, not dropped
    assert "server.concurrency: unknown key" in capsys.readouterr().err
    code = main(["validate", str(scenario_file), "--set", "server.protocol=\"sync\"",
                 "--set", "server.cohort=4", "--set", "server.buffer=5"])
    assert code == 2
    err = capsys.readouterr().err
    assert "server.buffer = 5: must be at most server.cohort = 4" in err
    assert "server.concurrency" not in err  # the file's FedBuff key was dropped with the switch to sync
    code = main(["validate", str(scenario_file), "--set", "task.problem=\"seed-1d\""])
    assert code == 2 and "population.clients = 30: the seed-1d problem has exactly 2 clients" in capsys.readouterr().err


@pytest.mark.parametrize("content,phrase", [
    ("this is [not toml", "not valid TOML"),
    ("server = 3", "server = 3: must be a table"),
    ("[server]\nrule = 'sgd'\nrule = 'x'", "not valid TOML"),
])
def test_malformed_files_exit_2(tmp_path, capsys, content, phrase):
    path = tmp_path / "bad.toml"
    path.write_text(content)
    assert main(["validate", str(path)]) == 2
    assert phrase in capsys.readouterr().err


def test_missing_file_and_bad_arguments_exit_2(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.toml")]) == 2
    assert "no such scenario file" in capsys.readouterr().err
    assert main(["run"]) == 2
    assert main(["frobnicate"]) == 2
    assert main(["validate", str(tmp_path / "nope.toml"), "--set", "novalue"]) == 2


def test_run_writes_the_run_directory(scenario_file, tmp_path):
    out = tmp_path / "run"
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet"]) == 0
    for name in ("scenario.toml", "metrics.csv", "updates.csv", "counts.npz", "summary.json", "model.pt", "metrics.png", "bias.json"):
        assert (out / name).is_file(), name
    metrics = read_csv(out / "metrics.csv")
    assert list(metrics[0]) == list(METRIC_FIELDS)
    assert [int(r["step"]) for r in metrics] == [0, 4, 8, 12]
    updates = read_csv(out / "updates.csv")
    assert list(updates[0]) == list(UPDATE_FIELDS)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 12
    assert summary["updates_accepted"] == sum(r["accepted"] == "true" for r in updates) == 12 * 3
    counts = np.load(out / "counts.npz")["by_staleness"]
    assert counts.shape == (12, 7) and counts.dtype.kind == "i"
    # by_staleness[t-1, τ] counts the accepted rows of step t with staleness τ
    for t in range(1, 13):
        taus = [int(r["staleness"]) for r in updates if r["accepted"] == "true" and int(r["step"]) == t]
        np.testing.assert_array_equal(counts[t - 1], np.bincount(taus, minlength=7))
    # the resolved scenario re-validates to the same run
    assert main(["validate", str(out / "scenario.toml")]) == 0


def test_out_refuses_a_non_empty_directory(scenario_file, tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet"]) == 2
    assert "not empty" in capsys.readouterr().err
    assert (out / "precious.txt").read_text() == "keep me"
    # --overwrite removes only a run directory's files: a directory holding anything else is refused
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet", "--overwrite"]) == 2
    assert "holds 'precious.txt'; nothing was removed" in capsys.readouterr().err
    assert (out / "precious.txt").read_text() == "keep me"
    (out / "precious.txt").unlink()
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet"]) == 0
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet", "--overwrite"]) == 0


def test_console_script_exits_2_without_traceback(scenario_file):
    proc = subprocess.run([sys.executable, "-m", "asyncfl.cli.main", "run", str(scenario_file), "--set", "server.buffer=0"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert "server.buffer = 0" in proc.stderr and "Traceback" not in proc.stderr


def test_scenarios_lists_the_library_from_any_working_directory(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the default is the checkout's scenarios/, not ./scenarios
    assert main(["scenarios"]) == 0
    names = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert "quickstart" in names and names == sorted(names)
    assert main(["scenarios", "--dir", str(tmp_path / "nowhere")]) == 2
    assert "no such directory of scenario files" in capsys.readouterr().err


def test_names_and_paths_are_printed_verbatim(scenario_file, tmp_path, capsys):
    # rich would read "[bold]…[/bold]" as markup and ":thumbs_up:" as an emoji code
    odd = "[bold]odd[/bold] :thumbs_up: " + "x" * 150
    assert main(["validate", str(scenario_file), "--set", f'name="{odd}"']) == 0
    assert f'name = "{odd}"' in capsys.readouterr().out
    out = tmp_path / "[red]run[red] :smile:"
    assert main(["run", str(scenario_file), "--out", str(out), "--quiet"]) == 0
    png = tmp_path / ("[b]curves[b] :x: " + "y" * 120 + ".png")
    assert main(["plot", str(out), "--out", str(png)]) == 0
    assert capsys.readouterr().out == f"wrote {png}\n"
    assert png.is_file()
