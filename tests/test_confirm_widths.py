"""Claim 3 of the confirmatory study (analysis/confirm/widths.py, docs/confirm.md §3.2): the width
rule over the learning rate and over β, read from a design's tuning runs; the base tuned over
task variants (design 3's "tuned β" momentum); and the report's rows built from them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from asyncfl.errors import UsageError
from analysis.confirm.__main__ import check_cells
from analysis.confirm.plan import PLAN, load_plan
from analysis.confirm.report import build_report, width_outcomes
from analysis.confirm.widths import (Setting, Width, beta_settings, lr_settings, setting_of, tuned_variant, width,
                                     width_verdict)
from analysis.ma_review.design import load_review, review_from_raw
from analysis.ma_review.spec import StudyError
from analysis.ma_review.tables import RESULT_FIELDS, TUNING_FIELDS, write_csv


def _s(values: list[float], acc: list[float], rmst: list[float]) -> list[Setting]:
    return [Setting(math.log2(v), v, a, r) for v, a, r in zip(values, acc, rmst)]


# --- the rule --------------------------------------------------------------------------------

def test_a_rate_qualifies_within_5_percent_of_the_best_accuracy_and_1_2x_of_the_best_rmst():
    # best accuracy 0.72 (0.95 × 0.72 = 0.684: 0.70 and 0.72 pass); best RMST 100 (≤ 120: 120 and 100 pass)
    w = width(_s([0.1, 0.2, 0.4, 0.8], [0.60, 0.70, 0.72, 0.50], [200, 120, 100, 300]))
    assert w.qualifying == (0.2, 0.4) and w.span == pytest.approx(1.0) and not w.lower_bound
    assert (w.best_accuracy, w.best_rmst) == (0.72, 100)
    # 0.684 exactly qualifies (≥), 121 does not (> 120)
    w = width(_s([0.1, 0.2, 0.4], [0.95 * 0.72, 0.72, 0.70], [100, 100, 121]))
    assert w.qualifying == (0.1, 0.2) and w.lower_bound  # 0.1 is the grid's first rate


def test_the_width_against_a_brute_force_loop_on_random_cells():
    rng = np.random.default_rng(7)
    for _ in range(300):
        n = int(rng.integers(2, 9))
        lrs = sorted(set(np.round(0.05 * 2 ** (rng.integers(0, 12, n) / 2), 6)))
        acc = [float(a) if rng.random() > 0.1 else math.nan for a in rng.uniform(0.1, 0.9, len(lrs))]
        rmst = [float(r) for r in rng.uniform(20, 100, len(lrs))]
        w = width(_s(lrs, acc, rmst))
        # brute force: every rate checked against both bests by its own arithmetic
        ok = [i for i in range(len(lrs)) if not math.isnan(acc[i])]
        if not ok:
            assert math.isnan(w.span)
            continue
        a_best = max(acc[i] for i in ok)
        r_best = min(rmst[i] for i in ok)
        q = [lrs[i] for i in ok if acc[i] >= 0.95 * a_best and rmst[i] <= 1.2 * r_best]
        assert w.qualifying == tuple(q)
        if not q:
            assert math.isnan(w.span) and width_verdict(w, w).startswith("not estimable")
            continue
        assert w.span == pytest.approx(np.log2(max(q)) - np.log2(min(q)))
        assert w.lower_bound == (min(q) == lrs[0] or max(q) == lrs[-1])


@pytest.mark.parametrize("rule, base, verdict", [
    ((3.0, False, 0.8), (1.5, False, 0.8), "holds"),                      # 1.5 octaves wider
    ((2.5, False, 0.8), (1.5, False, 0.8), "not resolved"),               # exactly one octave: not more
    ((1.0, False, 0.8), (2.5, False, 0.8), "reversed"),
    ((3.0, False, 0.8), (1.5, True, 0.8), "not resolved (momentum's width reaches"),
    ((3.0, True, 0.8), (1.5, False, 0.8), "holds"),                       # MA's could only be wider
    ((1.0, True, 0.8), (2.5, False, 0.8), "not resolved (MA's width reaches"),
    ((3.0, False, 0.8), (0.0, False, 0.19), "excluded"),                  # momentum's best near chance
])
def test_the_verdict_needs_more_than_one_octave_and_a_width_not_cut_by_the_grid(rule, base, verdict):
    def w(span: float, edge: bool, acc: float) -> Width:
        return Width(span, edge, (1.0,), acc, 50.0, (Setting(0.0, 1.0, acc, 50.0),))

    r, b = w(*rule), w(*base)
    assert width_verdict(r, b).startswith(verdict)


# --- from the tuning runs --------------------------------------------------------------------

def _tuning_row(task: str, method: str, lr: float, seed: int, final: float, cross: float | None, K: int = 500,
                chosen: bool = False, status: str = "completed", horizon: int = 300) -> dict:
    row = {k: "" for k in TUNING_FIELDS}
    row.update(task=task, privacy="nodp", K=K, method=method, lr=lr, seed=seed, target_accuracy=0.56, horizon=horizon,
               cross_point=cross if cross is not None else horizon, reached=int(cross is not None),
               final_accuracy=final if status == "completed" else math.nan, status=status, chosen=int(chosen), edge=0,
               reference=0, run_dir=f"runs/{task}/{method}/{lr}/{seed}", stopped_at_target=0)
    return row


def test_a_setting_is_its_seeds_means_an_unreached_run_counting_the_horizon_and_a_failed_one_spoiling_it():
    rows = [_tuning_row("t", "m", 0.2, 101, 0.70, 80), _tuning_row("t", "m", 0.2, 102, 0.60, None)]
    s = setting_of(rows, 0.0, 0.2)
    assert s.accuracy == pytest.approx(0.65) and s.rmst == pytest.approx((80 + 300) / 2)
    rows.append(_tuning_row("t", "m", 0.2, 103, math.nan, None, status="diverged"))
    s = setting_of(rows, 0.0, 0.2)
    assert math.isnan(s.accuracy) and math.isnan(s.rmst)


def test_the_tuned_variant_is_the_one_whose_chosen_rate_reached_soonest_on_the_tuning_seeds():
    rows = []
    for task, cross, final in (("b0.5", 150, 0.70), ("b0.7", 90, 0.70), ("b0.9", 90, 0.75)):
        rows += [_tuning_row(task, "mom", 0.1, s, final, cross, chosen=True) for s in (101, 102)]
        rows += [_tuning_row(task, "mom", 0.4, s, 0.8, 10) for s in (101, 102)]  # not chosen: never read
    # b0.7 and b0.9 tie at 90 steps: the larger mean final accuracy (b0.9) wins
    assert tuned_variant(rows, ["b0.5", "b0.7", "b0.9"], "nodp", 500, "mom") == "b0.9"
    assert tuned_variant(rows, ["b0.5", "b0.7"], "nodp", 500, "mom") == "b0.7"
    assert tuned_variant(rows, ["b0.95"], "nodp", 500, "mom") is None


def test_beta_settings_take_each_betas_chosen_rate_at_log2_of_the_momentum_horizon():
    rows = [_tuning_row("b0.5", "mom", 1.0, 101, 0.7, 50, chosen=True), _tuning_row("b0.5", "mom", 2.0, 101, 0.9, 20),
            _tuning_row("b0.9", "mom", 0.2, 101, 0.8, 40, chosen=True)]
    s = beta_settings(rows, {"b0.5": 0.5, "b0.9": 0.9, "b0.95": 0.95}, "nodp", 500, "mom")
    assert [x.x for x in s] == pytest.approx([1.0, math.log2(10), math.log2(20)])
    assert [(x.accuracy, x.rmst) for x in s[:2]] == [(0.7, 50), (0.8, 40)]
    assert math.isnan(s[2].accuracy)  # no tuning run at β = 0.95


# --- in the report ---------------------------------------------------------------------------

def _folder(root: Path, design: str, tuning: list[dict], results: list[dict] | None = None) -> None:
    loaded = load_plan(PLAN)
    folder = root / design
    folder.mkdir(parents=True)
    write_csv(folder / "tuning.csv", TUNING_FIELDS, tuning)
    write_csv(folder / "results.csv", RESULT_FIELDS, results or [])
    (folder / "confirm.json").write_text(json.dumps({"design": design, "design_digest": loaded.design_digest(design)}))


def test_design_5s_widths_in_the_report_from_its_tuning_csv(tmp_path):
    root = tmp_path / "confirm"
    grid = [0.07071, 0.1, 0.1414, 0.2, 0.2828, 0.4, 0.5657]
    rows = []
    # at 5C: MA-full good over 5 rates (0.1 … 0.4: width 2), momentum at 0.2 only (width 0) → holds
    for lr in grid:
        for seed in (101, 102, 103):
            full = 0.80 if 0.1 <= lr <= 0.4 else 0.60
            mom = 0.70 if lr == 0.2 else 0.50
            rows.append(_tuning_row("mnist1d", "fedbuff-ma-full", lr, seed, full, 40 if full > 0.7 else None, K=500, horizon=100))
            rows.append(_tuning_row("mnist1d", "fedbuff-momentum", lr, seed, mom, 60 if mom > 0.6 else None, K=500, horizon=100))
    _folder(root, "d5", rows)
    loaded = load_plan(PLAN)
    outs = {(o.width.K, o.width.rule): o for o in width_outcomes(root, loaded, "3")}
    o = outs[(500, "fedbuff-ma-full")]
    assert o.status == "confirmatory" and o.seeds == 3
    assert o.rule.qualifying == (0.1, 0.1414, 0.2, 0.2828, 0.4) and o.rule.span == pytest.approx(math.log2(4))
    assert o.base.qualifying == (0.2,) and o.base.span == 0 and o.verdict == "holds"
    assert outs[(500, "fedbuff-ma-light")].verdict == "not tested"  # MA-light has no runs: no width
    assert outs[(100, "fedbuff-ma-full")].verdict == "not tested"
    text, _ = build_report(root, loaded)
    assert "| d5 | fedbuff-ma-full vs fedbuff-momentum, mnist1d, nodp, K = 500 | η | 3 | 2.00 (0.1, 0.1414, 0.2, 0.2828, 0.4) | " \
           "0.00 (0.2) | +2.00 | 0.800 · 0.700 | holds | confirmatory |" in text


def _result(task: str, method: str, seed: int, cross: float) -> dict:
    row = {k: "" for k in RESULT_FIELDS}
    row.update(task=task, block="b", method=method, K=500, seed=seed, privacy="nodp", dp=0, lr=0.1, target_accuracy=0.56,
               horizon=300, reached=1, cross_point=cross, cross_low=cross - 6, cross_high=cross, final_accuracy=math.nan,
               status="stopped", stopped_at_target=1)
    return row


def test_design_3_compares_ma_with_momentum_at_the_beta_its_tuning_chose(tmp_path):
    root = tmp_path / "confirm"
    tuning = []
    for task, cross in (("mnist1d-beta0.5", 200), ("mnist1d-beta0.7", 120), ("mnist1d-beta0.9", 150)):
        tuning += [_tuning_row(task, "fedbuff-momentum", 0.2, s, 0.7, cross, chosen=True) for s in (101, 102)]
    seeds = range(200, 210)
    mom7 = [110, 130, 120, 125, 115, 118, 122, 128, 112, 121]
    mom9 = [150, 160, 155, 170, 140, 150, 165, 158, 149, 151]
    full = [40, 45, 42, 41, 39, 44, 43, 40, 38, 41]
    results = ([_result("mnist1d-beta0.7", "fedbuff-momentum", s, c) for s, c in zip(seeds, mom7)]
               + [_result("mnist1d-beta0.9", "fedbuff-momentum", s, c) for s, c in zip(seeds, mom9)]
               + [_result("mnist1d-beta0.9", "fedbuff-ma-full", s, c) for s, c in zip(seeds, full)])
    _folder(root, "d3", tuning, results)
    text, out = build_report(root, load_plan(PLAN))
    o = next(o for o, _ in out["1"] if o.design == "d3" and o.comparison.rule == "fedbuff-ma-full")
    assert o.base_task == "mnist1d-beta0.7" and o.n == 10  # β = 0.7 reached soonest on the tuning seeds
    assert o.effect == pytest.approx(math.exp(np.mean(np.log(mom7) - np.log(full))))
    assert "fedbuff-momentum (tuned over mnist1d-beta0.5, mnist1d-beta0.7, mnist1d-beta0.9: mnist1d-beta0.7)" in text
    light = next(o for o, _ in out["1"] if o.design == "d3" and o.comparison.rule == "fedbuff-ma-light")
    assert light.status == "not run" and light.base_task == ""


# --- the plan and the engine -----------------------------------------------------------------

def test_check_refuses_a_width_or_a_tuned_base_on_a_cell_the_spec_does_not_have():
    loaded = load_plan(PLAN)
    d3 = loaded.plan.design("d3")
    study = load_review(loaded.spec_path(d3))
    check_cells(d3, study)  # the shipped design is consistent
    bad = d3.model_copy(update={"widths": [d3.widths[0].model_copy(update={"beta_tasks": {"mnist1d-beta0.3": 0.3,
                                                                                           "mnist1d-beta0.9": 0.9}})]})
    with pytest.raises(UsageError, match="mnist1d-beta0.3, nodp, K = 500 is not a tuned cell"):
        check_cells(bad, study)
    # momentum at β = 0.95 is tuned only: it may not be a compared (evaluated) base
    comp = d3.comparisons[0].model_copy(update={"base_tasks": ["mnist1d-beta0.9", "mnist1d-beta0.95"]})
    with pytest.raises(UsageError, match="mnist1d-beta0.95, nodp, K = 500 is not an evaluated cell"):
        check_cells(d3.model_copy(update={"comparisons": [comp]}), study)


def _raw() -> dict:
    return {"name": "t", "buffer": 5, "steps": 10, "seeds": [0], "tuning_seeds": [7], "target": {"value": 0.5},
            "tasks": [{"name": "q", "overrides": {"task.name": "quadratic", "client.local_steps": 1}, "target_accuracy": 0.5}],
            "lr_grid": {"fedbuff-sgd": [1.0, 2.0]},
            "cells": [{"name": "a", "methods": ["fedbuff-sgd"]},
                      {"name": "b", "methods": ["fedbuff-momentum"], "evaluate": False,
                       "lr_grid": {"fedbuff-momentum": [0.1, 0.2]}}]}


def test_a_block_tunes_on_its_own_grid_and_evaluate_false_runs_no_evaluation_seed():
    study = review_from_raw(_raw())
    cells = {c.method: c for c in study.cells()}
    assert cells["fedbuff-sgd"].lr_grid == (1.0, 2.0) and cells["fedbuff-sgd"].evaluate
    assert cells["fedbuff-momentum"].lr_grid == (0.1, 0.2) and not cells["fedbuff-momentum"].evaluate
    # the block's grid is in the digest; a spec without one keeps the digest it had (no key added)
    raw = _raw()
    raw["cells"][1]["lr_grid"] = {"fedbuff-momentum": [0.1, 0.4]}
    assert review_from_raw(raw).digest() != study.digest()
    assert "block_lr_grids" not in review_from_raw({**_raw(), "lr_grid": {"fedbuff-sgd": [1.0], "fedbuff-momentum": [0.1]},
                                                    "cells": [{"name": "a", "methods": ["fedbuff-sgd", "fedbuff-momentum"]}]}
                                                   ).review.digest_table()


def _without_block_grid(r: dict) -> None:
    r["cells"][1].pop("lr_grid")


def _with_lr_from(r: dict) -> None:
    r["cells"][1]["lr_from"] = "nodp"


def _twice(r: dict) -> None:
    r["cells"][1]["lr_grid"]["fedbuff-momentum"] = [0.1, 0.1]


def _named_again(r: dict) -> None:
    r["lr_grid"]["fedbuff-momentum"] = [0.3]
    r["cells"].append({"name": "c", "methods": ["fedbuff-momentum"]})


@pytest.mark.parametrize("edit, phrase", [
    (_without_block_grid, "lr_grid.fedbuff-momentum: required (cells[1] (b) tunes it; or give the block's own"),
    (_with_lr_from, "cells[1] (b).lr_grid: a block with lr_from tunes nothing"),
    (_twice, "cells[1].lr_grid.fedbuff-momentum: 0.1 given twice"),
    (_named_again, "names fedbuff-momentum at task q, nodp, K = 5, already a cell of block 'b' with another lr_from, "
                   "lr_grid or evaluate"),
])
def test_a_block_grid_or_evaluate_flag_that_cannot_be_honoured_is_refused_naming_the_field(edit, phrase):
    raw = _raw()
    edit(raw)
    with pytest.raises(StudyError) as exc:
        review_from_raw(raw)
    assert phrase in str(exc.value)


@pytest.mark.slow
def test_a_tuned_only_block_is_tuned_on_its_grid_and_never_evaluated(tmp_path):
    from test_ma_review_stop import small_spec
    import tomli_w
    from analysis.ma_review.__main__ import main as review
    from analysis.ma_review.tables import read_csv

    raw = small_spec()
    raw["cells"] = [{"name": "core", "methods": ["fedbuff-sgd", "sync-momentum"], "k_multiples": [1]},
                    {"name": "tuned-only", "methods": ["fedbuff-momentum"], "k_multiples": [1], "evaluate": False,
                     "lr_grid": {"fedbuff-momentum": [0.1, 0.3]}}]
    spec = tmp_path / "spec" / "t.toml"
    spec.parent.mkdir()
    spec.write_text(tomli_w.dumps(raw))
    assert review([str(spec), "--out", str(tmp_path / "out"), "--quiet", "--workers", "2"]) == 0
    tuning = read_csv(tmp_path / "out" / "tuning.csv")
    momentum = sorted({r["lr"] for r in tuning if r["method"] == "fedbuff-momentum"})
    assert momentum[:1] == [0.1] and 0.3 in momentum and 0.4 not in momentum  # its own grid (+ refinement), not the spec's
    assert all(r["status"] == "completed" for r in tuning if r["method"] == "fedbuff-momentum")
    results = read_csv(tmp_path / "out" / "results.csv")
    assert {r["method"] for r in results} == {"fedbuff-sgd", "sync-momentum"}
