"""The momentum-approximation review study (issue 28; docs/ma-review.md): the CI-sized spec runs end
to end — the target fixed from the reference on the held-out tuning seed before any evaluation run,
every cell tuned on the restricted steps to that target with a ×2 refinement, unreached targets
kept as censored rows, the report regenerated from the CSVs alone — the oracle counts keep the
update noise and give the server the exact W, and the noise-gain formula matches a loop."""

from __future__ import annotations

import json
import math
import shutil
from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

import asyncfl
from analysis.ma_review.__main__ import main as review
from analysis.ma_review.design import OWN_MODULE
from analysis.ma_review.measures import iterate_noise, noise_gain
from analysis.ma_review.tables import read_csv
from asyncfl.privacy.mechanism import postprocess_counts
from asyncfl.server.ma import target_matrix
from asyncfl.studies.survival import restricted_mean

CI_SPEC = Path(__file__).resolve().parents[1] / "analysis" / "ma_review_ci.toml"


@pytest.fixture(scope="module")
def ci_review(tmp_path_factory):
    out = tmp_path_factory.mktemp("ma_review_ci")
    assert review([str(CI_SPEC), "--out", str(out), "--quiet", "--workers", "2"]) == 0
    return out


@pytest.mark.slow
def test_the_target_comes_from_the_reference_on_the_held_out_seed_only(ci_review):
    rows, tuning = read_csv(ci_review / "results.csv"), read_csv(ci_review / "tuning.csv")
    assert {r["seed"] for r in rows} == {0, 1} and {t["seed"] for t in tuning} == {7}  # held out
    finals = defaultdict(list)
    for t in tuning:
        if t["reference"]:
            assert t["method"] == "sync-momentum" and t["privacy"] == "nodp"
            finals[t["lr"]].append(t["final_accuracy"])
    best = max(np.mean(v) for v in finals.values())
    target = math.floor(0.8 * best * 100) / 100
    assert {r["target_accuracy"] for r in rows} == {target} == {t["target_accuracy"] for t in tuning}


@pytest.mark.slow
def test_each_cell_is_tuned_on_the_restricted_steps_to_the_target_after_a_x2_refinement(ci_review):
    """Grids of two rates ×2 apart: the best is an edge, so the refinement adds one rate beyond it;
    the chosen rate is the one with the smallest mean of min(T̂, h) over the tuning seed, or, where
    no rate reached the target, the one with the best final accuracy."""
    tuning = read_csv(ci_review / "tuning.csv")
    by = defaultdict(lambda: defaultdict(list))
    for t in tuning:
        score = min(t["cross_point"], t["horizon"]) if t["status"] == "completed" else math.nan
        by[(t["privacy"], t["K"], t["method"])][t["lr"]].append((score, t["final_accuracy"], t["chosen"]))
    coarse = {"fedbuff-sgd": 2, "fedbuff-momentum": 2, "fedbuff-ma-light": 2, "fedbuff-ca2fl": 2, "sync-momentum": 2}
    for key, lrs in by.items():
        assert len(lrs) >= coarse[key[2]] + 1  # the refinement went beyond the edge that won, or both ×2 neighbours
        mean = {lr: np.mean([s for s, _, _ in v]) for lr, v in lrs.items()}
        chosen = [lr for lr, v in lrs.items() if v[0][2]]
        assert len(chosen) == 1
        if min(mean.values()) < 12:  # some rate reached the target: the smallest restricted mean wins
            assert chosen[0] == min(mean, key=lambda lr: (mean[lr], lr))
        else:  # none did: the best final accuracy
            final = {lr: np.mean([a for _, a, _ in v]) for lr, v in lrs.items()}
            assert chosen[0] == max(sorted(final), key=lambda lr: final[lr])


@pytest.mark.slow
def test_unreached_targets_are_censored_rows_counted_at_the_horizon(ci_review):
    rows = read_csv(ci_review / "results.csv")
    unreached = [r for r in rows if not r["reached"]]
    assert unreached  # ε = 2 at this size does not reach the target
    assert all(r["cross_point"] == r["horizon"] == r["cross_low"] for r in unreached)
    cell = [r for r in rows if r["privacy"] == "eps2" and r["method"] == "fedbuff-momentum"]
    t = [r["cross_point"] for r in cell]
    report = (ci_review / "report.md").read_text()
    rmst = restricted_mean(t, [bool(r["reached"]) for r in cell], 12)
    assert f"| gaussian | eps2 | 20 | FedBuff + momentum | {cell[0]['lr']:.3g}" in report
    assert f"| {rmst:.1f} | {sum(r['reached'] for r in cell)}/{len(cell)} |" in report


@pytest.mark.slow
def test_the_report_regenerates_from_the_csvs_alone(ci_review, tmp_path):
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("results.csv", "tuning.csv", "curves.csv"):
        shutil.copy(ci_review / name, copy / name)
    assert review(["report", "--out", str(copy)]) == 0
    assert (copy / "report.md").read_text() == (ci_review / "report.md").read_text()
    for stem in ("curves_gaussian_nodp", "bias_gaussian", "tuning_gaussian", "noise_gaussian"):
        assert (copy / f"{stem}.png").is_file() and (copy / f"{stem}.pdf").is_file()
    assert "## Claims" in (copy / "report.md").read_text()


@pytest.mark.slow
def test_a_rerun_reads_every_run_back_and_writes_the_same_tables(ci_review, monkeypatch, capsys):
    """Resuming (docs/ma-review.md §2): the same spec on the same folder runs nothing again (a
    run started would fail this test) and writes the same tables, row for row."""
    import asyncfl.run.runner

    def boom(*args, **kwargs):
        raise AssertionError("a finished run was run again")

    monkeypatch.setattr(asyncfl.run.runner, "run_to_dir_blocking", boom)
    monkeypatch.setattr(asyncfl.run.runner, "resume_dir_blocking", boom)
    before = {name: (ci_review / name).read_text() for name in ("results.csv", "tuning.csv", "curves.csv", "report.md")}
    assert review([str(CI_SPEC), "--out", str(ci_review), "--quiet", "--workers", "1"]) == 0
    assert {name: (ci_review / name).read_text() for name in before} == before
    capsys.readouterr()


@pytest.mark.slow
def test_the_oracle_keeps_the_update_noise_and_gives_the_exact_w(ci_review):
    """Same seed and learning rate: the noisy counts decoded are the same draws (so is the update
    noise), but the oracle's server used the exact W: its MA-light bias against the W it saw equals
    its bias against the exact W, and its run says it is not private."""
    rows = read_csv(ci_review / "results.csv")
    for seed in (0, 1):
        private = next(r for r in rows if r["privacy"] == "eps2" and r["method"] == "fedbuff-ma-light" and r["seed"] == seed)
        oracle = next(r for r in rows if r["privacy"] == "eps2-oracle" and r["seed"] == seed)
        assert oracle["lr"] == private["lr"] and oracle["sigma"] == private["sigma"] and oracle["xi"] == private["xi"]
        a = np.load(ci_review / private["run_dir"] / "counts.npz")
        b = np.load(ci_review / oracle["run_dir"] / "counts.npz")
        np.testing.assert_array_equal(a["by_staleness"][0], b["by_staleness"][0])  # the same first buffer
        assert np.abs(b["private_by_staleness"] - b["by_staleness"][:, : b["private_by_staleness"].shape[1]]).max() > 0
        bias = json.loads((ci_review / oracle["run_dir"] / "bias.json").read_text())
        assert bias["noisy_w"]["ma_light"] == pytest.approx(bias["ma_light"], rel=1e-12)
        summary = json.loads((ci_review / oracle["run_dir"] / "summary.json").read_text())
        assert summary["privacy"]["statement"].startswith("NOT PRIVATE")
        assert not json.loads((ci_review / private["run_dir"] / "summary.json").read_text())["privacy"]["statement"].startswith("NOT")


def test_a_counts_mode_that_reads_the_exact_counts_needs_them():
    asyncfl.allow_modules(OWN_MODULE)  # as the review allows its own oracle
    exact = np.array([3.0, 1.0, 0.0])
    assert postprocess_counts(np.array([2.5, 1.7, -0.3]), 4, "analysis.ma_review.oracle:ORACLE_COUNTS", exact).tolist() == [3, 1, 0]
    with pytest.raises(ValueError, match="reads the exact counts"):
        postprocess_counts(np.array([2.5, 1.7, -0.3]), 4, "analysis.ma_review.oracle:ORACLE_COUNTS")
    # a built-in mode ignores them: simplex of (2.5, 1.7, −0.3) onto Σ = 4 is (2.4, 1.6, 0)
    np.testing.assert_allclose(postprocess_counts(np.array([2.5, 1.7, -0.3]), 4, "simplex", exact), [2.4, 1.6, 0.0])


def test_noise_gain_is_eta_times_the_norm_of_the_column_sums_of_a():
    """Heavy ball, T = 3, β = 0.5, η = 2: the impulse r_s = e_s, run through m_t = β m_{t−1} + r_t
    and summed over the steps, leaves c = (1.75, 1.5, 1) in θ; η‖c‖ = 2·√6.3125 = 5.0249…"""
    T, beta, lr = 3, 0.5, 2.0
    c = np.zeros(T)
    for s in range(T):  # the loop: the rule's recursion on one impulse at a time
        m = 0.0
        for t in range(T):
            m = beta * m + (1.0 if t == s else 0.0)
            c[s] += m
    assert c.tolist() == [1.75, 1.5, 1.0]
    assert noise_gain(target_matrix("momentum", beta, T), lr) == pytest.approx(lr * np.linalg.norm(c)) == pytest.approx(5.02494, rel=1e-5)
    assert noise_gain(np.eye(4), 3.0) == pytest.approx(6.0)  # SGD: η√T
    # σ = 2, S_Δ = 1, γ = 0.5, M = 100: s_r = 2·√1.25/100 = 0.022360…, times the gain 5
    priv = {"sigma": 2.0, "gamma": 0.5, "noise_cohort": 100.0}
    assert iterate_noise(5.0, priv, 1.0, 10, iid=True) == pytest.approx(0.1118034, rel=1e-6)
    assert math.isnan(iterate_noise(5.0, priv, 1.0, 10, iid=False))


@pytest.mark.parametrize("edit, phrase", [
    (lambda raw: raw.update(tuning_seeds=[0]), "tuning_seeds: [0] are also evaluation seeds"),
    (lambda raw: raw["cells"][0].update(privacy=["eps9"]), "cells[0] (core).privacy: 'eps9'"),
    (lambda raw: raw["cells"][3].update(lr_from="eps2-oracle"), "has no tuned cell"),
    (lambda raw: raw["target"].update(reference="fedbuff-nesterov"), "target.reference"),
])
def test_bad_review_specs_exit_2_naming_the_field(tmp_path, capsys, edit, phrase):
    import tomllib

    import tomli_w

    raw = tomllib.loads(CI_SPEC.read_text())
    edit(raw)
    bad = tmp_path / "bad.toml"
    bad.write_text(tomli_w.dumps(raw))
    assert review([str(bad), "--out", str(tmp_path / "o"), "--check"]) == 2
    assert phrase in capsys.readouterr().err
