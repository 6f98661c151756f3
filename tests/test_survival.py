"""Steps to target as censored times (asyncfl/studies/survival.py; docs/studies.md §3–§5):
Kaplan–Meier against a hand-written product-limit loop, the restricted mean against its closed
form and a brute-force integral, and the paired bootstrap ratio against a hand-written BCa."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from asyncfl.studies import (compare_crossings, crossing, expanded_level, kaplan_meier, log_restricted_ratios, paired_rmst_ratio, restricted_mean,
                             restricted_means)


def product_limit(times, reached):
    """The Kaplan–Meier estimate written out: at each distinct reached time, S ← S · (1 − d/n) with
    n the runs whose time is ≥ it (a run censored at that time still at risk)."""
    pairs = list(zip(map(float, times), map(bool, reached)))
    s, out = 1.0, {}
    for t in sorted({t for t, _ in pairs}):
        d = sum(1 for u, r in pairs if u == t and r)
        n = sum(1 for u, _ in pairs if u >= t)
        s *= 1 - d / n
        out[t] = s
    return out


def survival_at(curve, x):
    """S(x) from the loop's {time: S after it}: 1 before the first time."""
    below = [t for t in curve if t <= x]
    return curve[max(below)] if below else 1.0


def test_kaplan_meier_matches_the_hand_values_with_tied_and_censored_times():
    """Reached at 1, 3, 3, 5; censored at 3, 4, 10 (n = 7). S = 6/7 after 1; at 3 six are at risk
    (the run censored at 3 included), two reach: 6/7 · 4/6 = 4/7; at 5 two at risk: 4/7 · 1/2 = 2/7."""
    times = [1, 3, 3, 5, 3, 4, 10]
    reached = [True, True, True, True, False, False, False]
    t, s = kaplan_meier(times, reached)
    assert t.tolist() == [1, 3, 4, 5, 10]
    assert s == pytest.approx([6 / 7, 4 / 7, 4 / 7, 2 / 7, 2 / 7], rel=1e-12)
    loop = product_limit(times, reached)
    assert s == pytest.approx([loop[x] for x in t.tolist()], rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_kaplan_meier_matches_the_product_limit_loop_on_random_censored_times(seed):
    """12 runs on a 10-step evaluation grid (so times tie), about a third censored."""
    rng = np.random.default_rng(seed)
    times = rng.integers(1, 8, 12) * 10.0
    reached = rng.random(12) > 0.35
    reached[0] = True
    t, s = kaplan_meier(times, reached)
    loop = product_limit(times, reached)
    assert sorted(loop) == t.tolist()
    assert s == pytest.approx([loop[x] for x in t.tolist()], rel=1e-12)


def test_the_restricted_mean_is_the_mean_restricted_time_when_censoring_is_only_at_the_horizon():
    """Reached at 12, 30, 45; one run censored at h = 60: RMST = (12 + 30 + 45 + 60) / 4 = 36.75."""
    assert restricted_mean([12, 30, 45, 60], [True, True, True, False], 60) == pytest.approx(36.75, rel=1e-12)


@pytest.mark.parametrize("seed", range(5))
def test_the_restricted_mean_is_the_mean_of_min_t_h_on_random_times(seed):
    """No censoring before h = 300 (unreached runs sit at h; reached ones may lie beyond h)."""
    rng = np.random.default_rng(seed)
    times = rng.integers(0, 40, 15) * 10.0
    reached = times < 300
    times[~reached] = 300.0
    assert restricted_mean(times, reached, 300) == pytest.approx(np.minimum(times, 300).mean(), rel=1e-12)


def test_the_restricted_mean_with_earlier_censoring_is_the_area_under_the_steps():
    """The curve of the hand example over [0, 8]: 1·1 + 2·6/7 + 2·4/7 + 3·2/7 = 33/7 = 4.714."""
    times = [1, 3, 3, 5, 3, 4, 10]
    reached = [True, True, True, True, False, False, False]
    assert restricted_mean(times, reached, 8) == pytest.approx(33 / 7, rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_the_restricted_mean_matches_a_brute_force_integral_of_the_loop_curve(seed):
    """Midpoint sum of the loop's S over 20 000 cells of [0, h]; censoring at arbitrary times."""
    rng = np.random.default_rng(100 + seed)
    times = np.round(rng.uniform(1, 250, 10))
    reached = rng.random(10) > 0.4
    h = 200.0
    loop = product_limit(times, reached)
    cells = 20_000
    mids = (np.arange(cells) + 0.5) * h / cells
    brute = sum(survival_at(loop, x) for x in mids) * h / cells
    assert restricted_mean(times, reached, h) == pytest.approx(brute, abs=h / cells * 2)


def test_the_batched_restricted_means_equal_the_scipy_ones_row_by_row():
    """200 rows of 8 runs with tied and censored times, against :func:`restricted_mean`."""
    rng = np.random.default_rng(7)
    times = rng.integers(0, 12, (200, 8)) * 25.0
    reached = rng.random((200, 8)) > 0.3
    batched = restricted_means(times, reached, 250.0)
    one_by_one = [restricted_mean(t, r, 250.0) for t, r in zip(times, reached)]
    assert batched == pytest.approx(one_by_one, rel=1e-12, abs=1e-12)


def hand_bca(theta, jack, draws, alpha=0.05):
    """BCa by its formulas: z₀ = Φ⁻¹(share of draws below θ̂), a = Σ(J̄ − J_i)³ / (6 (Σ(J̄ − J_i)²)^{3/2})
    from the jackknife J, and the draws' quantiles at Φ(z₀ + (z₀ + z)/(1 − a(z₀ + z))), z = ±z_{1−α/2}."""
    z0 = stats.norm.ppf(np.mean(draws < theta))
    d = jack.mean() - jack
    a = np.sum(d ** 3) / (6 * np.sum(d ** 2) ** 1.5)
    ends = []
    for z in (stats.norm.ppf(alpha / 2), stats.norm.ppf(1 - alpha / 2)):
        ends.append(np.quantile(draws, stats.norm.cdf(z0 + (z0 + z) / (1 - a * (z0 + z)))))
    return ends


def test_the_expanded_level_widens_the_normal_quantile_to_t_and_by_the_missing_degree_of_freedom():
    """2Φ(√(n/(n−1)) t_{0.975,n−1}) − 1: n = 5: √1.25 · 2.7764 = 3.1041 → 0.99809; n = 10:
    √(10/9) · 2.2622 = 2.3846 → 0.98290; n = 1000 → 0.9504 (the plain level in the limit)."""
    assert expanded_level(5) == pytest.approx(2 * stats.norm.cdf(math.sqrt(1.25) * 2.7764) - 1, abs=2e-6)
    assert expanded_level(5) == pytest.approx(0.99809, abs=1e-5)
    assert expanded_level(10) == pytest.approx(0.98290, abs=1e-5)
    assert expanded_level(1000) == pytest.approx(0.9504, abs=1e-4)


@pytest.mark.parametrize("interval", ["expanded", "percentile", "BCa"])
def test_the_paired_ratio_and_its_interval_match_a_hand_written_paired_bootstrap(interval):
    """12 seeds; the base takes 1.1–2× the rule's steps, a seed's split shifting both; two base
    runs never reach the target (counted at h = 400, the only censoring, so each resample's
    RMST is its mean of min(t, h)). The ratio is RMST_base / RMST_rule by :func:`restricted_mean`;
    the interval is checked against an independent paired bootstrap (seed indices resampled with
    numpy, 40 000 draws): the draws' quantiles at (1 ∓ level)/2 — level 0.95, or the expanded
    level 0.9785 at 12 seeds — or the BCa formulas written out; to within 1 %, the Monte Carlo
    error of the two bootstraps."""
    rng = np.random.default_rng(3)
    rule = np.round(rng.uniform(60, 200, 12))
    base = np.round(rule * rng.uniform(1.1, 2.0, 12))
    base_reached = base < 250
    base[~base_reached] = 400.0
    assert (~base_reached).sum() == 2
    h = 400.0
    comp = paired_rmst_ratio(base, base_reached, rule, np.ones(12, bool), h, interval=interval, resamples=40_000, seed=1)
    theta = restricted_mean(base, base_reached, h) / restricted_mean(rule, np.ones(12, bool), h)
    assert theta == pytest.approx(base.mean() / rule.mean(), rel=1e-12)
    assert comp.ratio == pytest.approx(theta, rel=1e-12)
    assert (comp.n, comp.censored_base, comp.censored_rule, comp.method) == (12, 2, 0, interval)
    idx = np.random.default_rng(99).integers(0, 12, (40_000, 12))
    draws = base[idx].mean(axis=1) / rule[idx].mean(axis=1)
    if interval == "BCa":
        keep = [np.delete(np.arange(12), j) for j in range(12)]
        jack = np.array([base[k].mean() / rule[k].mean() for k in keep])
        low, high = hand_bca(theta, jack, draws)
    else:
        level = 2 * stats.norm.cdf(math.sqrt(12 / 11) * stats.t.ppf(0.975, 11)) - 1 if interval == "expanded" else 0.95
        assert interval != "expanded" or level == pytest.approx(0.9785, abs=1e-4)
        low, high = np.quantile(draws, [(1 - level) / 2, (1 + level) / 2])
    assert (comp.low, comp.high) == pytest.approx((low, high), rel=0.01)
    assert comp.low < comp.ratio < comp.high


def test_the_expanded_interval_is_wider_than_the_plain_one():
    args = ([107, 151, 400, 278, 99, 204], [True, True, False, False, True, True], [72, 93, 172, 142, 73, 121], [True] * 6, 400)
    plain, wide = paired_rmst_ratio(*args, interval="percentile"), paired_rmst_ratio(*args)
    assert wide.method == "expanded" and wide.low < plain.low < plain.high < wide.high


def test_a_seed_where_the_rule_never_reaches_is_counted_at_the_horizon_not_dropped():
    """The base reaches at 100 on all three seeds; the rule at 50, 50 and never (h = 300). Dropping
    the third seed would report 2×; counted at h: RMST_rule = (50 + 50 + 300)/3 = 133.3, ratio 0.75."""
    comp = paired_rmst_ratio([100, 100, 100], [True] * 3, [50, 50, 300], [True, True, False], 300, resamples=2000)
    assert comp.ratio == pytest.approx(0.75, rel=1e-12)
    assert (comp.censored_base, comp.censored_rule) == (0, 1)


def test_the_crossing_intervals_give_the_ratios_range_at_their_ends():
    """Evaluations every 10 steps: base crossings in (20, 30], (40, 50], rule in (10, 20] and never
    (censored at h = 100: (100, ∞)). Least favourable to the rule: base at 20, 40 and rule at
    20, 100: (20 + 40)/2 / ((20 + 100)/2) = 0.5; most favourable: base at 30, 50, rule at 10, 100:
    40 / 55 = 0.7273."""
    comp = paired_rmst_ratio([25, 45], [True, True], [15, 100], [True, False], 100,
                             bounds=([(20, 30), (40, 50)], [(10, 20), (100, math.inf)]), resamples=2000)
    assert comp.bounds == pytest.approx((0.5, 40 / 55), rel=1e-12)
    assert comp.ratio == pytest.approx(35 / 57.5, rel=1e-12)
    assert "crossings at their interval ends: 0.50–0.73×" in comp.text()


def test_one_seed_has_no_interval_and_identical_resamples_a_point_interval():
    one = paired_rmst_ratio([100], [True], [50], [True], 300)
    assert (one.ratio, one.n, one.method) == (2.0, 1, "none") and math.isnan(one.low) and math.isnan(one.high)
    same = paired_rmst_ratio([100, 100, 100], [True] * 3, [50, 50, 50], [True] * 3, 300, resamples=500)
    assert (same.ratio, same.low, same.high, same.method) == (2.0, 2.0, 2.0, "degenerate")


def test_the_bootstrap_is_reproducible_from_its_seed():
    args = ([100, 80, 120, 90], [True] * 4, [50, 70, 60, 100], [True] * 4, 300)
    assert paired_rmst_ratio(*args, resamples=999, seed=5) == paired_rmst_ratio(*args, resamples=999, seed=5)


def test_log_restricted_ratios_count_unreached_runs_at_the_horizon():
    """ln(100/50), ln(300/150) with the base's 500 restricted to h = 300, and ln(300/300) = 0 for a seed neither reached."""
    out = log_restricted_ratios([100, 500, math.inf], [50, 150, 300], 300)
    assert out == pytest.approx([math.log(2), math.log(2), 0.0], rel=1e-12, abs=1e-15)
    with pytest.raises(ValueError, match="target met at step 0"):
        log_restricted_ratios([0, 10], [5, 5], 300)


@pytest.mark.parametrize("call,message", [
    (lambda: kaplan_meier([1, 2], [True]), "same length"),
    (lambda: kaplan_meier([], []), "at least one run"),
    (lambda: kaplan_meier([1, math.nan], [True, True]), "finite and ≥ 0"),
    (lambda: kaplan_meier([1, 2], [1, 2]), "booleans"),
    (lambda: restricted_mean([1, 2], [True, True], 0), "horizon = 0"),
    (lambda: paired_rmst_ratio([1, 2], [True] * 2, [1, 2], [True] * 2, 10, interval="bca"), "interval = 'bca'"),
    (lambda: paired_rmst_ratio([1, 2], [True] * 2, [1], [True], 10), "pair seed by seed"),
    (lambda: paired_rmst_ratio([1, 2], [True] * 2, [1, 2], [True] * 2, 10, bounds=([(0, 1)], [(0, 1), (1, 2)])), "bounds for base"),
    (lambda: paired_rmst_ratio([1, 2], [True] * 2, [1, 2], [True] * 2, 10, bounds=([(0, 1), (1, 2)], [(0, 1), (2, 1)])), "0 ≤ low ≤ high"),
])
def test_bad_input_is_refused_naming_the_field(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_crossings_compare_by_their_points_with_their_intervals_as_the_range():
    """Curves evaluated every 10 steps up to h = 100, target 0.8. Base crossings: 0.5 → 0.9 over
    (20, 30] (point 27.5) and 0.7 → 0.9 over (40, 50] (point 45); rule: 0.6 → 1.0 over (10, 20]
    (point 15) and never (censored at 100). Ratio (27.5 + 45)/2 / ((15 + 100)/2) = 0.6304, the
    same as paired_rmst_ratio on those numbers; range 0.5 to 40/55 as in the test above."""
    steps = list(range(0, 101, 10))
    flat = [0.1] * 11
    base = [crossing(steps, flat[:2] + [0.5, 0.9] + flat[4:], 0.8), crossing(steps, flat[:4] + [0.7, 0.9] + flat[6:], 0.8)]
    rule = [crossing(steps, flat[:1] + [0.6, 1.0] + flat[3:], 0.8), crossing(steps, flat, 0.8)]
    comp = compare_crossings(base, rule, resamples=2000)
    assert comp.ratio == pytest.approx((27.5 + 45) / 115, rel=1e-12)
    assert comp.bounds == pytest.approx((0.5, 40 / 55), rel=1e-12)
    assert comp == paired_rmst_ratio([27.5, 45], [True, True], [15, 100], [True, False], 100, resamples=2000,
                                     bounds=([(20, 30), (40, 50)], [(10, 20), (100, math.inf)]))
    with pytest.raises(ValueError, match="horizons"):
        compare_crossings(base, [crossing(steps[:5], flat[:5], 0.8)] * 2)
