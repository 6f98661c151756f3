"""Tuning on held-out seeds (asyncfl/studies/tuning.py; docs/studies.md §7): the seed split, the
×2 refinement and its extension beyond an edge, the choice with its near-ties, and the width of
the good learning-rate range against a brute-force scan of the interpolated curve."""

from __future__ import annotations

import math

import numpy as np
import pytest

from asyncfl.studies import Choice, choose, refine, sensitivity, split_seeds


def test_the_tuning_seeds_are_held_out_from_the_evaluation_seeds():
    split = split_seeds(10, 3)
    assert split.evaluation == tuple(range(10)) and split.tuning == (1000, 1001, 1002)
    assert not set(split.evaluation) & set(split.tuning)
    with pytest.raises(ValueError, match="would reach the tuning seeds"):
        split_seeds(1001, 2)


def test_refine_adds_the_halves_and_doubles_of_an_interior_best():
    """Coarse ×3 grid 0.01 … 1, best 0.1: run 0.05 and 0.2 next."""
    assert refine([0.01, 0.03, 0.1, 0.3, 1.0], 0.1) == pytest.approx([0.05, 0.2], rel=1e-12)


def test_refine_drops_rates_already_tried_and_ends_when_both_neighbours_are():
    """After 0.05 and 0.2 were run and 0.1 stays best, nothing is left to run; 0.2 best adds only
    0.4 (0.1 is tried; 0.2 / 2 = 0.1 computed in floating point still counts as tried)."""
    grid = [0.01, 0.03, 0.05, 0.1, 0.2, 0.3, 1.0]
    assert refine(grid, 0.1) == []
    assert refine(grid, 0.2) == pytest.approx([0.4], rel=1e-12)
    assert refine([0.1 * 3, 0.6 / 2 * 2, 0.15], 0.3) == []  # 0.6 / 2 * 2 = 0.6 up to round-off


def test_refine_extends_beyond_an_edge_by_the_grids_spacing_there():
    """Best at the top of the grid (1.0): 0.5 and 2.0 at ×2, and 1.0 · (1.0 / 0.3) = 3.33 at the
    grid's ratio there; at the bottom (0.01): 0.005, 0.02 and 0.01 / (0.03 / 0.01) = 0.00333."""
    assert refine([0.01, 0.03, 0.1, 0.3, 1.0], 1.0) == pytest.approx([0.5, 2.0, 1 / 0.3], rel=1e-12)
    assert refine([0.01, 0.03, 0.1, 0.3, 1.0], 0.01) == pytest.approx([0.01 / 3, 0.005, 0.02], rel=1e-12)
    assert refine([0.5, 1.0], 1.0) == pytest.approx([2.0], rel=1e-12)  # the grid's ratio is the factor: one point
    assert refine([0.1], 0.1, factor=4.0) == pytest.approx([0.025, 0.4], rel=1e-12)


def test_choose_takes_the_best_mean_over_tuning_seeds_and_reports_its_near_ties():
    """Restricted steps to target (smaller is better) over 3 tuning seeds: means 160, 118, 120,
    190. The best is 0.1 (118, s = 3, se = √3 = 1.732): 0.2 (120) is 2 away, not a tie; with
    seeds (112, 118, 124) the se is 3.464 and 0.2 ties."""
    scores = {0.05: [150, 160, 170], 0.1: [115, 118, 121], 0.2: [119, 120, 121], 0.4: [180, 190, 200]}
    c = choose(scores, smaller_is_better=True)
    assert c == Choice(0.1, pytest.approx(118.0), False, (0.1,), pytest.approx(math.sqrt(3)))
    scores[0.1] = [112, 118, 124]
    assert choose(scores, smaller_is_better=True).ties == (0.1, 0.2)


def test_choose_flags_an_edge_and_ignores_diverged_rates():
    """Accuracy (higher is better): 0.4 diverged on one seed (NaN) and cannot be chosen; the best,
    0.2, is the largest rate with a mean, but 0.4 was tried, so it is not at an edge; without 0.4
    it is."""
    scores = {0.05: [0.70, 0.72], 0.1: [0.80, 0.82], 0.2: [0.85, 0.86], 0.4: [0.90, math.nan]}
    c = choose(scores, smaller_is_better=False)
    assert (c.lr, c.score, c.edge) == (0.2, pytest.approx(0.855), False)
    del scores[0.4]
    assert choose(scores, smaller_is_better=False).edge
    with pytest.raises(ValueError, match="every learning rate has a non-finite score"):
        choose({0.1: [math.nan]}, smaller_is_better=False)


def test_one_tuning_seed_has_no_standard_error_and_only_exact_ties():
    c = choose({0.1: [0.8], 0.2: [0.9], 0.4: [0.9]}, smaller_is_better=False)
    assert (c.lr, c.ties) == (0.2, (0.2, 0.4)) and math.isnan(c.se)


def test_sensitivity_is_the_width_in_log2_of_the_good_range_by_interpolation():
    """Accuracy 0.70, 0.86, 0.90, 0.84, 0.60 at η = 0.025 … 0.4 (×2 apart: x = log₂ η one apart),
    tolerance 0.05 (good: ≥ 0.85). Left, 0.86 → 0.70 crosses 0.85 1/16 of the way below 0.05;
    right, 0.90 → 0.84 crosses 5/6 of the way to 0.2: width 1 + 1/16 + 5/6 = 1.8958."""
    scores = {0.025: [0.70], 0.05: [0.86], 0.1: [0.90], 0.2: [0.84], 0.4: [0.60]}
    assert sensitivity(scores, 0.05) == pytest.approx(1 + 1 / 16 + 5 / 6, rel=1e-12)


def brute_force_width(rates, means, tolerance, smaller_is_better):
    """Scan the piecewise-linear curve on 200 001 points of log₂ η and measure the run of points
    within tolerance that contains the best rate."""
    x = np.log2(rates)
    fine = np.linspace(x[0], x[-1], 200_001)
    y = np.interp(fine, x, means)
    best = np.min(means) if smaller_is_better else np.max(means)
    ok = (y <= best + tolerance) if smaller_is_better else (y >= best - tolerance)
    i = int(np.argmin(np.abs(fine - x[int(np.argmin(means) if smaller_is_better else np.argmax(means))])))
    lo = hi = i
    while lo > 0 and ok[lo - 1]:
        lo -= 1
    while hi < fine.size - 1 and ok[hi + 1]:
        hi += 1
    return fine[hi] - fine[lo], fine[1] - fine[0]


@pytest.mark.parametrize("seed", range(6))
def test_sensitivity_matches_a_brute_force_scan_on_random_curves(seed):
    """Random unimodal-ish curves over 9 rates (×√2 to ×3 apart), 3 tuning seeds, both directions."""
    rng = np.random.default_rng(seed)
    rates = 0.01 * np.cumprod(np.r_[1, rng.uniform(1.4, 3.0, 8)])
    x = np.log2(rates)
    peak = rng.uniform(x[2], x[6])
    smaller = bool(seed % 2)
    curve = 100 + 30 * (x - peak) ** 2 if smaller else 0.9 - 0.05 * (x - peak) ** 2
    scores = {r: list(c + rng.normal(0, 3 if smaller else 0.005, 3)) for r, c in zip(rates, curve)}
    means = np.array([np.mean(scores[r]) for r in rates])
    tol = 40.0 if smaller else 0.06
    want, cell = brute_force_width(rates, means, tol, smaller)
    assert sensitivity(scores, tol, smaller_is_better=smaller) == pytest.approx(want, abs=2 * cell)


def test_a_relative_tolerance_is_a_fraction_of_the_best():
    """Steps to target 100 (best), 120, 200 at η = 0.1, 0.2, 0.4; 10 % of the best is 10 steps:
    from 0.1 to where 100 → 120 reaches 110, half a doubling: width 0.5 (the grid's left end
    bounds the range below)."""
    scores = {0.1: [100.0], 0.2: [120.0], 0.4: [200.0]}
    assert sensitivity(scores, 0.1, smaller_is_better=True, relative=True) == pytest.approx(0.5, rel=1e-12)


@pytest.mark.parametrize("call,message", [
    (lambda: refine([], 0.1), "at least one learning rate"),
    (lambda: refine([0.1, -0.2], 0.1), "finite and > 0"),
    (lambda: refine([0.1, 0.2], 0.3), "best = 0.3"),
    (lambda: refine([0.1, 0.2], 0.1, factor=1.0), "factor = 1.0"),
    (lambda: choose({0.1: []}, True), r"scores\[0.1\]"),
    (lambda: sensitivity({0.1: [1.0]}, -1), "tolerance = -1"),
])
def test_bad_input_is_refused_naming_the_field(call, message):
    with pytest.raises(ValueError, match=message):
        call()
