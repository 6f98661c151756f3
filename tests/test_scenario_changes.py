"""``--set`` switching a tagged section's variant, and ``--unset`` (docs/scenario.md §2), through
the command line: the file's keys of the old variant are dropped with a note naming them, keys
given with ``--set`` are never dropped, bad ``--unset`` keys exit 2 naming the key."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from asyncfl.cli.main import main
from asyncfl.config import scenario as sc
from asyncfl.config.latency import LogNormalLatency

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = str(REPO / "scenarios" / "quickstart.toml")


def _validate(capsys, *argv: str) -> tuple[int, dict, str]:
    code = main(["validate", QUICKSTART, *argv])
    out, err = capsys.readouterr()
    return code, (tomllib.loads(out) if code == 0 else {}), err


def test_switching_the_latency_model_drops_the_old_variants_keys_and_says_which(capsys):
    # quickstart has dist = "lognormal", median = 1.0, sigma = 0.5: refused before this change
    code, resolved, err = _validate(capsys, "--set", "latency.dist=exponential")
    assert code == 0, err
    assert resolved["latency"] == {"dist": "exponential", "mean": 1.0}
    assert err.strip() == ("note: latency.dist 'lognormal' → 'exponential': dropped the file's "
                           "latency.median, latency.sigma (lognormal only)")


def test_keys_shared_by_both_variants_and_keys_given_with_set_are_kept(capsys):
    code, resolved, err = _validate(capsys, "--set", "latency.dist=exponential", "--set", "latency.mean=2.5")
    assert code == 0 and resolved["latency"] == {"dist": "exponential", "mean": 2.5}
    # a key the user sets for the old variant is not silently dropped: validation names it
    code, _, err = _validate(capsys, "--set", "latency.sigma=2.0", "--set", "latency.dist=exponential")
    assert code == 2 and "latency.sigma: unknown key" in err and "Traceback" not in err
    # lognormal → lognormal is no switch: nothing dropped, no note
    code, resolved, err = _validate(capsys, "--set", "latency.dist=lognormal")
    assert code == 0 and resolved["latency"]["sigma"] == 0.5 and err == ""


def test_switching_the_task_keeps_the_shared_keys(capsys):
    # synthetic (alpha, beta, model = logreg) → digits: alpha and beta dropped, model kept and valid
    code, resolved, err = _validate(capsys, "--set", "task.name=digits")
    assert code == 0, err
    assert resolved["task"]["name"] == "digits" and resolved["task"]["model"] == "logreg"
    assert "dropped the file's task.alpha, task.beta (synthetic only)" in err
    # a kept key whose value the new variant does not allow is named by validation
    code, _, err = _validate(capsys, "--set", "task.name=digits", "--set", "task.model=\"gru\"")
    assert code == 2 and "task.model = 'gru'" in err
    code, resolved, err = _validate(capsys, "--set", "task.name=mnist1d")
    assert code == 0 and resolved["task"] == {"name": "mnist1d", "dirichlet_alpha": 0.3, "model": "logreg", "hidden": 100}


def test_unset_restores_the_default(capsys):
    code, resolved, err = _validate(capsys, "--unset", "latency.sigma", "--unset", "server.max_staleness")
    assert code == 0, err
    assert resolved["latency"]["sigma"] == LogNormalLatency().sigma == 1.0
    assert "max_staleness" not in resolved["server"]  # default None is not written


def test_unset_of_the_tag_switches_to_the_default_variant(capsys):
    code, resolved, err = _validate(capsys, "--unset", "latency.dist")
    assert code == 0, err
    assert resolved["latency"] == {"dist": "exponential", "mean": 1.0}
    assert "latency.median, latency.sigma" in err


@pytest.mark.parametrize("argv,phrase", [
    (["--unset", "latency.mean"], "--unset latency.mean: the scenario file has no such key"),
    (["--unset", "server.rule.x"], "--unset server.rule.x: the scenario file has no such key"),
    (["--unset", "server.lr", "--set", "server.lr=1"], "--unset server.lr: also given with --set"),
])
def test_bad_unset_exits_2_naming_the_key(capsys, argv, phrase):
    code, _, err = _validate(capsys, *argv)
    assert code == 2 and phrase in err and "Traceback" not in err


def test_run_accepts_the_switch_and_writes_the_new_variant(tmp_path, capsys):
    out = tmp_path / "run"
    code = main(["run", QUICKSTART, "--set", "latency.dist=exponential", "--set", "run.steps=2", "--set", "run.eval_every=2",
                 "--out", str(out), "--quiet"])
    assert code == 0, capsys.readouterr().err
    assert tomllib.loads((out / "scenario.toml").read_text())["latency"] == {"dist": "exponential", "mean": 1.0}


def test_apply_changes_is_the_library_form():
    raw = tomllib.loads(Path(QUICKSTART).read_text())
    notes = sc.apply_changes(raw, ["task.name=\"quadratic\""], ["task.model"])
    assert raw["task"] == {"name": "quadratic"}
    assert notes == ["note: task.name 'synthetic' → 'quadratic': dropped the file's task.alpha, task.beta (synthetic only)"]
