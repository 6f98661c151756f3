"""The review study's spec and scenarios (docs/ma-review.md §2): a bad spec exits 2 naming every bad
field before anything runs; each point's scenario is the task's, with the method's and the DP
setting's keys on top and σ as the runner resolves it; and the digest a study folder is claimed
under is the one folders started before the engine moved into ``analysis/ma_review/`` were
claimed under, so they resume."""

from __future__ import annotations

import copy
import tomllib
from pathlib import Path

import numpy as np
import pytest
import tomli_w
from scipy import stats

from analysis.ma_review.__main__ import main as review
from analysis.ma_review.design import load_review, review_from_raw
from analysis.ma_review.scenarios import Point
from analysis.ma_review.spec import StudyError
from asyncfl.privacy import calibrate_sigma

ANALYSIS = Path(__file__).resolve().parents[1] / "analysis"
CI_SPEC = ANALYSIS / "ma_review_ci.toml"
RAW = tomllib.loads(CI_SPEC.read_text())


def edited(edit) -> dict:
    raw = copy.deepcopy(RAW)
    edit(raw)
    return raw


@pytest.mark.parametrize("edit, field, phrase", [
    (lambda r: r.update(sedes=[0]), "sedes", "did you mean 'seeds'"),
    (lambda r: r["cells"][0].update(k_multipels=[1]), "cells[0].k_multipels", "did you mean 'k_multiples'"),
    (lambda r: r["tasks"][0].update(target=0.5), "tasks[0].target", "unknown key"),
    (lambda r: r["lr_grid"].update({"fedbuff-adam": [1.0]}), "lr_grid.fedbuff-adam", "unknown key"),
    (lambda r: r["tuning"].update(refin=1), "tuning.refin", "did you mean 'refine'"),
    (lambda r: r["cells"][0].update(methods=["fedbuff-sgd", "fedasync"]), "cells[0].methods[1]", "fedbuff-momentum"),
    (lambda r: r["tasks"][0].update(target_accuracy=1.5), "tasks[0].target_accuracy", "less than or equal to 1"),
    (lambda r: r.update(buffer=0), "buffer", "greater than or equal to 1"),
    (lambda r: r["lr_grid"].pop("fedbuff-ma-light"), "lr_grid.fedbuff-ma-light", "required"),
    (lambda r: r["lr_grid"].update({"fedbuff-sgd": [2.0, 4.0, 2.0]}), "lr_grid.fedbuff-sgd", "2.0 given twice"),
    (lambda r: r["cells"][0].update(k_multiples=[1, 20]), "K=100, privacy=nodp: server.concurrency", "at most population.clients = 60"),
    (lambda r: r["tasks"][0]["overrides"].update({"task.hiden": 8}), "task.hiden", "did you mean 'hidden'"),
    (lambda r: r["tasks"][0].update(scenario="nope.toml"), "tasks[0] (gaussian).scenario", "no such scenario file"),
    (lambda r: r["tasks"].append({**r["tasks"][0]}), "tasks", "task names must be unique"),
    (lambda r: r["privacy"][0].update(gama=1.0), "privacy[0].gama", "did you mean 'gamma'"),
    (lambda r: r["privacy"][1].update(name="eps2"), "privacy", "must be unique and not 'nodp'"),
    (lambda r: r["privacy"][0].update(tasks=["digits"]), "privacy[0].tasks", "'digits' is not a task of the study (gaussian)"),
    (lambda r: r["privacy"][0].update(xi=3.0), "privacy[0] (eps2)", "at most one of xi, gamma, xi_over_sigma"),
    (lambda r: r["privacy"][0].update(sampling="participation-cap"), "privacy[0] (eps2).max_participations",
     "required with sampling = 'participation-cap'"),
    (lambda r: (r["privacy"][0].pop("xi_over_sigma"), r["privacy"][0].update(xi=0.01)),
     "privacy=eps2: privacy.xi = 0.01", "must exceed the noise multiplier"),
    (lambda r: r.update(name=".."), "name = '..'", "should match pattern"),
    (lambda r: r["privacy"][0].update(noise_multiplier=1.0), "privacy[0] (eps2)", "epsilon (σ calibrated to it) or noise_multiplier"),
    (lambda r: (r["privacy"][0].pop("epsilon"), r["privacy"][0].pop("xi_over_sigma"), r["privacy"][0].update(noise_multiplier=0.0)),
     "privacy[0] (eps2).gamma", "required with noise_multiplier = 0"),
])
def test_a_bad_spec_exits_2_naming_the_field_before_anything_runs(tmp_path, capsys, edit, field, phrase):
    spec = tmp_path / "spec.toml"
    spec.write_text(tomli_w.dumps(edited(edit)))
    assert review([str(spec), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert field in err and phrase in err, err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()  # nothing ran, nothing was claimed


def test_a_points_scenario_has_the_tasks_keys_and_the_methods_on_top():
    """Defaults, then the task's overrides (its ``privacy.clip`` = 0.4), then the point's own keys
    and its method's: sync runs a cohort of C clients, MA-full approximates the spec's
    ``ma_target``, CA2FL runs the ``ca2fl`` algorithm with staleness exponent 0."""
    study = review_from_raw(edited(lambda r: r["cells"].append(
        {"name": "more", "methods": ["fedbuff-nesterov", "fedbuff-ma-full"], "k_multiples": [4]})) | {"lr_grid": {
            **RAW["lr_grid"], "fedbuff-nesterov": [0.2], "fedbuff-ma-full": [0.2]}})
    sgd = study.scenario(Point("gaussian", "fedbuff-sgd", 20, 3, "nodp", 2.0, 12))
    assert (sgd.name, sgd.seed, sgd.run.steps, sgd.run.eval_every) == ("ma_review_ci-gaussian-fedbuff-sgd-K20-nodp-s3", 3, 12, 2)
    assert (sgd.server.protocol, sgd.server.rule, sgd.server.buffer, sgd.server.concurrency, sgd.server.lr) == ("fedbuff", "sgd", 5, 20, 2.0)
    assert (sgd.population.clients, sgd.client.batch_size, sgd.task.name, sgd.privacy.clip) == (60, 10, "gaussian-mlp", 0.4)
    assert not sgd.privacy.enabled
    sync = study.scenario(Point("gaussian", "sync-momentum", 5, 0, "nodp", 0.2, 12))
    assert (sync.server.protocol, sync.server.rule, sync.server.cohort) == ("sync", "momentum", 5)
    assert study.scenario(Point("gaussian", "fedbuff-nesterov", 20, 0, "nodp", 0.2, 12)).server.rule == "nesterov"
    assert study.scenario(Point("gaussian", "fedbuff-ma-full", 20, 0, "nodp", 0.2, 12)).server.ma_target == "momentum"
    ca2fl = study.scenario(Point("gaussian", "fedbuff-ca2fl", 20, 0, "nodp", 2.0, 12))
    assert (ca2fl.server.algorithm, ca2fl.server.rule, ca2fl.server.staleness_exponent) == ("ca2fl", "sgd", 0.0)
    assert Point("gaussian", "fedbuff-sgd", 20, 3, "nodp", 2.0, 12).rel_dir() == Path("runs/gaussian/nodp/K20/fedbuff-sgd/lr2/T12-s3")


def test_a_dp_setting_carries_its_keys_and_xi_over_sigma_uses_the_sigma_the_run_resolves():
    """``eps2``: ε = 2 under Poisson sampling with a noise cohort M = 20 of N = 60 clients over
    T = 12 steps, ξ = 4σ. Independent check: the Poisson calibration at q = M/N = 1/3 directly
    (σ = 2.97351, the value the spec's validation reports)."""
    study = load_review(CI_SPEC)
    sc = study.scenario(Point("gaussian", "fedbuff-ma-light", 20, 0, "eps2", 0.2, 12))
    sigma = calibrate_sigma(2.0, 1e-6, 20 / 60, 12, "pld")
    assert sigma == pytest.approx(2.97351, abs=1e-5)
    assert sc.privacy.enabled and (sc.privacy.epsilon, sc.privacy.delta, sc.privacy.noise_cohort) == (2.0, 1e-6, 20)
    assert sc.privacy.noise_multiplier is None and sc.privacy.counts == "simplex" and sc.privacy.clip == 0.4
    assert sc.privacy.xi == pytest.approx(4 * sigma, rel=1e-9)
    oracle = study.scenario(Point("gaussian", "fedbuff-ma-light", 20, 0, "eps2-oracle", 0.2, 12))
    assert oracle.privacy.counts == "analysis.ma_review.oracle:ORACLE_COUNTS" and oracle.privacy.xi == sc.privacy.xi


def test_a_clip_only_setting_gives_sigma_zero_and_no_target_epsilon():
    """``noise_multiplier = 0`` (the clip-only ablation, docs/privacy.md §4): the run's σ is 0 as
    given, no ε is calibrated, the clip and γ are the setting's."""
    raw = edited(lambda r: (r["privacy"].append({"name": "cliponly", "noise_multiplier": 0.0, "gamma": 1.0, "clip": 0.5,
                                                  "counts": "raw"}),
                            r["cells"].append({"name": "clip", "methods": ["fedbuff-ma-light"], "k_multiples": [4],
                                               "privacy": ["cliponly"]})))
    study = review_from_raw(raw)
    point = Point("gaussian", "fedbuff-ma-light", 20, 0, "cliponly", 0.2, 12)
    sc = study.scenario(point)
    assert sc.privacy.enabled and (sc.privacy.noise_multiplier, sc.privacy.epsilon, sc.privacy.gamma, sc.privacy.clip) == (0.0, None, 1.0, 0.5)
    assert study.scenarios.sigma(point, 60) == 0.0


def test_a_participation_cap_gets_the_sigma_of_its_k_releases():
    """k = 2 un-subsampled releases at ε = 8 are one Gaussian mechanism of noise σ/√2, so the
    analytic Gaussian mechanism's exact δ (Balle & Wang 2018: δ = Φ(1/(2s) − εs) − e^ε Φ(−1/(2s) − εs),
    s = σ/√2) at the σ the study resolves must be the target 10⁻⁶ — 9.99992·10⁻⁷ at σ = 0.92339."""
    raw = edited(lambda r: (r["privacy"].append({"name": "cap", "epsilon": 8.0, "sampling": "participation-cap",
                                                  "max_participations": 2, "xi": 40.0, "clip": 0.5}),
                            r["cells"].append({"name": "cap", "methods": ["fedbuff-ma-light"], "k_multiples": [4], "privacy": ["cap"]})))
    study = review_from_raw(raw)
    point = Point("gaussian", "fedbuff-ma-light", 20, 0, "cap", 0.2, 12)
    cap = study.scenario(point)
    assert (cap.privacy.sampling, cap.privacy.max_participations, cap.privacy.xi, cap.privacy.clip) == ("participation-cap", 2, 40.0, 0.5)
    sigma = study.scenarios.sigma(point, 60)
    s = sigma / np.sqrt(2)
    delta = stats.norm.cdf(1 / (2 * s) - 8.0 * s) - np.exp(8.0) * stats.norm.cdf(-1 / (2 * s) - 8.0 * s)
    assert sigma == pytest.approx(0.92339, abs=1e-5)
    assert delta == pytest.approx(1e-6, rel=1e-3)


def test_the_digest_is_the_one_folders_were_claimed_under_before_the_engine_moved():
    """Computed by ``analysis/ma_study``'s engine at commit b6a6716 for the two committed specs;
    any change to these values makes every study folder started before refuse to resume."""
    assert load_review(CI_SPEC).digest() == "166e3117d9227ff349c2048ab42de17b175a31ff5aeb8a14e8a0c13085da6dc6"
    assert load_review(ANALYSIS / "ma_review.toml").digest() == "282eee9652e201d844bf2a44c37d4215eba618a8889192f59ba89a61af08b5c7"
    # and what the runs follow from changes it: a step more, another learning rate
    assert review_from_raw(edited(lambda r: r.update(steps=13))).digest() != load_review(CI_SPEC).digest()
    assert review_from_raw(edited(lambda r: r["lr_grid"].update({"fedbuff-sgd": [2.0, 5.0]}))).digest() != load_review(CI_SPEC).digest()


def test_an_lr_from_cell_needs_a_tuned_source():
    with pytest.raises(StudyError, match=r"cells \(oracle\)\.lr_from: 'eps2' has no tuned cell for task gaussian, K = 20"):
        review_from_raw(edited(lambda r: r["cells"].__setitem__(2, {**r["cells"][2], "methods": ["fedbuff-momentum"]})))
