"""The confirmatory study (analysis/confirm/, docs/confirm.md): the plan and its digests, the record
that ties a design's folder to the plan, the tests and Holm's adjustment, and the report's verdicts."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from asyncfl.errors import UsageError
from asyncfl.studies.effects import paired_t
from asyncfl.studies.multiplicity import holm
from analysis.confirm.__main__ import main as confirm_main
from analysis.confirm.plan import PLAN, load_plan
from analysis.confirm.record import claim_design
from analysis.confirm.report import build_report
from analysis.ma_review.tables import RESULT_FIELDS, write_csv


# --- the statistics --------------------------------------------------------------------------

def test_holm_matches_the_step_down_rule_computed_by_hand():
    # sorted: 0.005·4 = 0.02, 0.01·3 = 0.03, 0.03·2 = 0.06, 0.04·1 = 0.04 → running max 0.06
    assert holm([0.01, 0.04, 0.03, 0.005]) == pytest.approx([0.03, 0.06, 0.06, 0.02])


def test_holm_caps_at_one_and_counts_an_untested_comparison_as_one():
    assert holm([0.5, 0.6]) == [1.0, 1.0]
    assert holm([0.01, math.nan]) == pytest.approx([0.02, 1.0])
    with pytest.raises(ValueError):
        holm([1.5])


def test_holm_against_brute_force_closed_testing_on_random_families():
    # Holm's adjusted p equals the max over every intersection containing H_i of its Bonferroni p
    import itertools
    rng = np.random.default_rng(3)
    for _ in range(50):
        p = list(rng.uniform(0, 0.2, size=4))
        brute = []
        for i in range(4):
            worst = 0.0
            for k in range(1, 5):
                for subset in itertools.combinations(range(4), k):
                    if i in subset:
                        worst = max(worst, min(1.0, k * min(p[j] for j in subset)))
            brute.append(worst)
        assert holm(p) == pytest.approx(brute)


def test_paired_t_matches_scipy_and_the_formula():
    base = np.array([0.51, 0.48, 0.55, 0.50, 0.47, 0.52])
    rule = np.array([0.55, 0.50, 0.58, 0.49, 0.52, 0.57])
    d = rule - base
    res = paired_t(d, 0.95)
    ref = stats.ttest_rel(rule, base)
    assert res.t == pytest.approx(ref.statistic) and res.p == pytest.approx(ref.pvalue)
    se = d.std(ddof=1) / math.sqrt(6)
    q = stats.t.ppf(0.975, 5)
    assert (res.low, res.high) == pytest.approx((d.mean() - q * se, d.mean() + q * se))
    assert res.n == 6


def test_paired_t_leaves_out_diverged_seeds_and_has_nothing_to_test_without_variance():
    assert paired_t([0.1, math.nan, 0.3]).n == 2
    same = paired_t([0.2, 0.2, 0.2])
    assert same.mean == pytest.approx(0.2) and math.isnan(same.p)


# --- the plan --------------------------------------------------------------------------------

def test_the_shipped_plan_and_every_spec_it_names_are_valid(capsys):
    assert confirm_main(["check"]) == 0
    out = capsys.readouterr().out
    assert "d1: designs/d1_malight_eps2.toml valid" in out and "plan " in out


def _plan_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "plan"
    shutil.copytree(PLAN.parent, dst, ignore=shutil.ignore_patterns("*.py", "__pycache__"))
    return dst / "plan.toml"


def test_a_design_digest_changes_with_its_spec_and_not_with_another_design(tmp_path):
    path = _plan_copy(tmp_path)
    before = load_plan(path)
    d1, d6, whole = before.design_digest("d1"), before.design_digest("d6"), before.plan_digest()
    spec6 = path.parent / "designs" / "d6_gaussian_horizon.toml"
    spec6.write_text(spec6.read_text().replace("fraction = 0.9", "fraction = 0.8"))
    after = load_plan(path)
    assert after.design_digest("d1") == d1
    assert after.design_digest("d6") != d6
    assert after.plan_digest() != whole


def test_a_plan_naming_an_unknown_claim_or_a_missing_spec_is_refused(tmp_path):
    path = _plan_copy(tmp_path)
    text = path.read_text()
    path.write_text(text.replace('claim = "2b"', 'claim = "9"', 1))
    with pytest.raises(UsageError, match="claim '9'"):
        load_plan(path)
    path.write_text(text.replace("designs/d1_malight_eps2.toml", "designs/nowhere.toml"))
    with pytest.raises(UsageError, match="nowhere.toml"):
        load_plan(path)


def test_a_folder_started_under_another_version_of_its_design_is_refused_unless_exploratory(tmp_path):
    path = _plan_copy(tmp_path)
    loaded = load_plan(path)
    out = tmp_path / "d1"
    out.mkdir()
    claim_design(out, loaded, "d1")(out)
    record = json.loads((out / "confirm.json").read_text())
    assert record["design_digest"] == loaded.design_digest("d1") and record["exploratory"] is False
    spec = path.parent / "designs" / "d1_malight_eps2.toml"
    spec.write_text(spec.read_text().replace("value = 0.45", "value = 0.40"))
    changed = load_plan(path)
    with pytest.raises(UsageError, match="only be exploratory"):
        claim_design(out, changed, "d1")
    claim_design(out, changed, "d1", exploratory=True)(out)
    assert json.loads((out / "confirm.json").read_text())["exploratory"] is True


# --- the report ------------------------------------------------------------------------------

def _rows(method: str, finals: list[float], crossings: list[float | None], privacy: str = "eps2", K: int = 2000,
          task: str = "mnist1d", horizon: int = 100) -> list[dict]:
    out = []
    for seed, (f, c) in enumerate(zip(finals, crossings), start=200):
        row = {k: "" for k in RESULT_FIELDS}
        row.update(task=task, block="b", method=method, K=K, seed=seed, privacy=privacy, dp=1, lr=0.1, target_accuracy=0.45,
                   horizon=horizon, reached=int(c is not None), cross_point=c if c is not None else horizon,
                   cross_low=math.nan, cross_high=math.nan, final_accuracy=f, status="completed", epsilon=2.0,
                   epsilon_client_max=3.1)
        out.append(row)
    return out


def _study(tmp_path: Path, rows: list[dict], design: str = "d1", exploratory: bool = False) -> tuple[Path, object]:
    loaded = load_plan(PLAN)
    root = tmp_path / "confirm"
    folder = root / design
    folder.mkdir(parents=True)
    write_csv(folder / "results.csv", RESULT_FIELDS, rows)
    digest = "0" * 64 if exploratory else loaded.design_digest(design)
    (folder / "confirm.json").write_text(json.dumps({"design": design, "design_digest": digest}))
    return root, loaded


def test_a_clear_planned_gain_is_reported_with_its_test_interval_and_verdict(tmp_path):
    sgd = [0.50, 0.52, 0.49, 0.51, 0.50, 0.53, 0.48, 0.50, 0.52, 0.51]
    light = [s + g for s, g in zip(sgd, [0.04, 0.05, 0.03, 0.06, 0.05, 0.04, 0.05, 0.03, 0.04, 0.05])]
    root, loaded = _study(tmp_path, _rows("fedbuff-sgd", sgd, [None] * 10) + _rows("fedbuff-ma-light", light, [None] * 10))
    text, out = build_report(root, loaded)
    (o, p_holm), = out["2b"]
    d = np.array(light) - np.array(sgd)
    assert o.effect == pytest.approx(d.mean()) and o.p == pytest.approx(stats.ttest_rel(light, sgd).pvalue)
    assert p_holm == pytest.approx(o.p)  # a family of one
    assert o.status == "confirmatory" and "| reproduced | confirmatory |" in text  # +9 % of the base: in 3–20 %
    assert "digest `" + loaded.plan_digest() in text


def test_unrun_comparisons_enter_the_family_with_p_one(tmp_path):
    root, loaded = _study(tmp_path, [])
    _, out = build_report(root, loaded)
    assert len(out["1"]) == 6 and all(o.status == "not run" and ph == 1.0 for o, ph in out["1"])
    text, _ = build_report(root, loaded)
    assert "**Verdict:** **not tested**" in text


def test_an_exploratory_folder_is_reported_but_never_decides_a_claim(tmp_path):
    sgd = [0.50] * 5 + [0.52] * 5
    light = [0.60] * 5 + [0.63] * 5
    root, loaded = _study(tmp_path, _rows("fedbuff-sgd", sgd, [None] * 10) + _rows("fedbuff-ma-light", light, [None] * 10),
                          exploratory=True)
    text, out = build_report(root, loaded)
    (o, p_holm), = out["2b"]
    assert o.status == "exploratory" and p_holm == 1.0 and "not resolved" in text


def test_a_speed_up_where_the_base_mostly_never_reached_the_target_is_a_lower_bound(tmp_path):
    # d6's claim-1g comparison: momentum reached on 3 of 10 seeds, MA-full on all, at about 40 steps
    mom = _rows("fedbuff-momentum", [0.6] * 10, [90, 95, 85] + [None] * 7, privacy="nodp", K=500, task="gaussian", horizon=300)
    full = _rows("fedbuff-ma-full", [0.7] * 10, [40, 42, 38, 41, 39, 40, 43, 37, 40, 41], privacy="nodp", K=500, task="gaussian",
                 horizon=300)
    root, loaded = _study(tmp_path, mom + full, design="d6")
    text, out = build_report(root, loaded)
    o, p_holm = out["1g"][0]
    assert o.base_reached == 3 and o.rule_reached == 10
    assert o.effect > 4 and "holds, outside the paper's range (a lower bound)" in text and "≥ " in text
    # the effect is the geometric mean of min(T, h) ratios, computed independently here
    bt = np.array([90, 95, 85] + [300] * 7, dtype=float)
    rt = np.array([40, 42, 38, 41, 39, 40, 43, 37, 40, 41], dtype=float)
    assert o.effect == pytest.approx(math.exp(np.mean(np.log(bt) - np.log(rt))))


def test_each_interval_is_labelled_with_its_coverage_measured_on_the_comparisons_own_data(tmp_path):
    # d1's secondary log_time comparison, MA-light unreached on 6 of 10 seeds: the report's column is
    # time_coverage on the same restricted times, seeded by the plan's bootstrap seed, at 95 %
    from analysis.confirm.coverage import time_coverage

    sgd_t = [30, 34, 28, 40, 33, 31, 36, 29, 35, 32]
    light_t = [60, 75, 88, 95] + [None] * 6
    root, loaded = _study(tmp_path, _rows("fedbuff-sgd", [0.55] * 10, sgd_t) + _rows("fedbuff-ma-light", [0.4] * 10, light_t))
    text, _ = build_report(root, loaded)
    expected = time_coverage(np.array(sgd_t, float), np.ones(10, bool), np.array([60, 75, 88, 95] + [100] * 6, float),
                             np.array([True] * 4 + [False] * 6), 100.0, 0.95, seed=loaded.plan.bootstrap_seed)
    row = next(line for line in text.splitlines() if line.startswith("| d1 | fedbuff-ma-light vs fedbuff-sgd") and "log_time" in line)
    assert f"| {expected.text()} |" in row and math.isfinite(expected.value)
    assert "| coverage (measured) |" in text and "Coverage (measured):" in text
    unrun = next(line for line in text.splitlines() if line.startswith("| d2 | fedbuff-ma-full"))
    assert "| — | — | — | — | — | 1 (not run) |" in unrun


def test_the_committed_report_regenerates_from_the_committed_csvs_with_one_command(tmp_path, capsys):
    committed = Path(__file__).resolve().parents[1] / "analysis" / "results" / "confirm"
    copy = tmp_path / "confirm"
    shutil.copytree(committed, copy)
    (copy / "report.md").unlink()
    assert confirm_main(["report", str(copy)]) == 0
    assert (copy / "report.md").read_text(encoding="utf-8") == (committed / "report.md").read_text(encoding="utf-8")


def test_the_plan_was_committed_before_any_committed_result():
    import subprocess
    root = Path(__file__).resolve().parents[1]

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=True).stdout.strip()

    try:
        if git("rev-parse", "--is-shallow-repository") == "true":
            pytest.skip("a shallow clone has no history to check")
        plan_first = git("log", "--diff-filter=A", "--format=%H", "--", "analysis/confirm/plan.toml").splitlines()[-1]
        results_first = git("log", "--diff-filter=A", "--format=%H", "--", "analysis/results/confirm").splitlines()[-1]
    except (OSError, subprocess.CalledProcessError, IndexError):
        pytest.skip("not a git checkout with the study's history")
    assert plan_first != results_first
    assert subprocess.run(["git", "-C", str(root), "merge-base", "--is-ancestor", plan_first, results_first]).returncode == 0


def test_a_clients_deployment_epsilon_is_its_count_times_m_over_c_in_closed_form():
    from asyncfl.privacy.per_client import gdp_epsilon, gdp_mu
    from analysis.confirm.report import deployment_epsilon

    # a client with k = 6 contributions at σ = 2.95 (d1's σ at ε = 2): simulated ε, then k = 60
    simulated = gdp_epsilon(gdp_mu(6, 2.95), 1e-6)
    assert deployment_epsilon(simulated, 10, 1e-6) == pytest.approx(gdp_epsilon(gdp_mu(60, 2.95), 1e-6), rel=1e-9)
    assert deployment_epsilon(simulated, 1, 1e-6) == pytest.approx(simulated, rel=1e-9)
    assert math.isnan(deployment_epsilon(math.nan))


# --- runs stopped at their target (docs/studies.md §2.1) -------------------------------------

def test_a_design_that_stops_its_evaluation_runs_may_not_plan_a_final_accuracy_comparison(tmp_path, capsys):
    """d1 compares final accuracy (primary) and time to 0.45 (secondary): with its evaluation runs
    stopped at the target the first could never be computed, so check and run refuse it."""
    path = _plan_copy(tmp_path)
    spec = path.parent / "designs" / "d1_malight_eps2.toml"
    spec.write_text(spec.read_text() + '\n[evaluation]\nreads = "crossings"\nstop_at_target = true\n')
    for argv in (["check", "--plan", str(path)], ["run", "d1", "--out", str(tmp_path / "d1"), "--plan", str(path)]):
        assert confirm_main(argv) == 2
        err = capsys.readouterr().err
        assert "designs (d1)" in err and "evaluation.stop_at_target" in err
        assert "fedbuff-ma-light vs fedbuff-sgd, mnist1d, eps2, K = 2000, final_accuracy" in err
        assert "Traceback" not in err
    assert not (tmp_path / "d1").exists()


def test_runs_stopped_at_their_target_count_with_their_crossing_and_have_no_final_accuracy(tmp_path):
    """d1's runs, every rule run stopped at its target (crossing at 40 steps, final accuracy and ε
    blank as the engine writes them): the planned final-accuracy comparison is not measured and
    enters claim 2b's family with p = 1; the secondary time comparison counts the stopped runs as
    reached, at their crossing; the cells table prints no final accuracy or ε for the rule."""
    sgd = _rows("fedbuff-sgd", [0.50] * 10, [None] * 10)
    light = _rows("fedbuff-ma-light", [0.55] * 10, [40.0] * 10)
    for r in light:
        r.update(status="stopped", stopped_at_target=1, final_accuracy=math.nan, epsilon=math.nan, epsilon_client_max=math.nan)
    root, loaded = _study(tmp_path, sgd + light)
    text, out = build_report(root, loaded)
    (o, p_holm), = out["2b"]
    assert not o.measured and o.p == 1.0 and p_holm == 1.0
    assert "| not measured | — | — | — | 1 | not measured (runs stopped at their target) | confirmatory |" in text  # no coverage, bootstrap, p
    time_row = next(line for line in text.splitlines() if line.startswith("| d1 |") and "| log_time |" in line)
    assert "| 0/10 · 10/10 |" in time_row and "≥ 2.50×" in time_row  # min(T̂, h): 100 / 40, the base never reached
    cells = "| d1 | mnist1d, eps2, K = 2000 | fedbuff-ma-light | 0.1 | 10 | 10/10 | not measured | not measured | not measured |"
    assert cells in text
