"""Every scenario of the library (``scenarios/*.toml``) runs end to end through the command line
at a few steps (issue 14 item 8): from the repository root by its relative path, as a newcomer
types it; then, from another working directory, its run directory's saved ``scenario.toml`` is
rerun and writes the same ``updates.csv``, ``asyncfl resume`` sees a completed run, and
``asyncfl bias`` (FedBuff) and ``asyncfl plot`` read the directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asyncfl.cli.main import main
from asyncfl.config import scenario as sc

REPO = Path(__file__).resolve().parents[1]
SCENARIOS = sorted((REPO / "scenarios").glob("*.toml"))
FEW = ["--set", "run.steps=2", "--set", "run.eval_every=1", "--set", "run.train_loss=false", "--quiet"]


def _cli(capsys: pytest.CaptureFixture, *args: object) -> tuple[int, str]:
    code = main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    return code, err


def test_the_library_is_not_empty():
    assert len(SCENARIOS) >= 7 and any(p.name == "trace_replay.toml" for p in SCENARIOS)


@pytest.mark.slow
@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_every_scenario_runs_and_its_saved_scenario_reruns(path, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"
    monkeypatch.chdir(REPO)
    code, err = _cli(capsys, "run", path.relative_to(REPO), "--out", out, *FEW)
    assert code == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 2
    saved = sc.load(out / "scenario.toml")
    for name in ("updates.csv", "metrics.csv", "counts.npz", "model.pt", "metrics.png"):
        assert (out / name).is_file(), name
    assert (out / "bias.json").is_file() == (saved.server.protocol == "fedbuff")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    code, err = _cli(capsys, "run", out / "scenario.toml", "--out", tmp_path / "again", "--quiet")
    assert code == 0, err
    assert (tmp_path / "again" / "updates.csv").read_bytes() == (out / "updates.csv").read_bytes()
    assert (tmp_path / "again" / "scenario.toml").read_text() == (out / "scenario.toml").read_text()
    code, err = _cli(capsys, "resume", out, "--quiet")
    assert code == 0 and "already completed" in err, err
    if saved.server.protocol == "fedbuff":
        assert _cli(capsys, "bias", out)[0] == 0
    assert _cli(capsys, "plot", out, tmp_path / "again", "--out", tmp_path / "both.png")[0] == 0
