"""Effects over seeds (asyncfl/studies/effects.py; docs/studies.md §6): the paired t interval of a
difference against scipy's paired t test, and the interaction across K against F and the slope's
standard error computed by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from asyncfl.studies import interaction, paired_difference


def test_the_paired_difference_is_scipys_paired_t_interval():
    """Final accuracies of 6 seeds: the mean of rule − base and the 95 % interval of
    ``scipy.stats.ttest_rel(rule, base).confidence_interval()``; by hand, d = (+.02, +.03, −.01,
    +.04, +.00, +.02), mean 0.01667, s = 0.01862, t₀.₉₇₅,₅ = 2.5706, half-width 0.01954."""
    base = [0.81, 0.79, 0.84, 0.80, 0.82, 0.78]
    rule = [0.83, 0.82, 0.83, 0.84, 0.82, 0.80]
    diff = paired_difference(base, rule)
    ci = stats.ttest_rel(rule, base).confidence_interval(0.95)
    assert diff.n == 6
    assert diff.mean == pytest.approx(0.1 / 6, rel=1e-9)
    assert (diff.low, diff.high) == pytest.approx((ci.low, ci.high), rel=1e-9)
    assert diff.high - diff.mean == pytest.approx(2.5706 * 0.018619 / math.sqrt(6), rel=1e-4)


def test_a_seed_with_a_non_finite_value_is_left_out_of_the_pairs():
    """Seed 2 of the rule diverged (NaN): the interval is that of the other 4 pairs."""
    base = [0.81, 0.79, 0.84, 0.80, 0.82]
    rule = [0.83, 0.82, math.nan, 0.84, 0.82]
    diff = paired_difference(base, rule)
    ci = stats.ttest_rel([0.83, 0.82, 0.84, 0.82], [0.81, 0.79, 0.80, 0.82]).confidence_interval()
    assert diff.n == 4 and (diff.low, diff.high) == pytest.approx((ci.low, ci.high), rel=1e-9)
    one = paired_difference([0.8], [0.9])
    assert one.n == 1 and one.mean == pytest.approx(0.1) and math.isnan(one.low)


def anova_by_hand(groups):
    """F = [Σ n_g (ȳ_g − ȳ)² / (G − 1)] / [ΣΣ (y − ȳ_g)² / (N − G)] and its upper tail on (G − 1, N − G)."""
    ys = [np.asarray(g, float) for g in groups]
    all_ = np.concatenate(ys)
    big_n, g = all_.size, len(ys)
    between = sum(y.size * (y.mean() - all_.mean()) ** 2 for y in ys) / (g - 1)
    within = sum(((y - y.mean()) ** 2).sum() for y in ys) / (big_n - g)
    f = between / within
    return f, stats.f.sf(f, g - 1, big_n - g)


def slope_by_hand(x, y):
    """b = Σ(x − x̄)(y − ȳ)/Σ(x − x̄)², se(b) = √(Σ residual² / (N − 2) / Σ(x − x̄)²)."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    sxx = ((x - x.mean()) ** 2).sum()
    b = ((x - x.mean()) * (y - y.mean())).sum() / sxx
    a = y.mean() - b * x.mean()
    se = math.sqrt(((y - a - b * x) ** 2).sum() / (x.size - 2) / sxx)
    return b, se


def test_the_interaction_is_the_one_way_anova_and_the_slope_on_log2_k():
    """Log ratios at K = 10, 50, 200 (C = 10: K = C, 5C, 20C), 5 seeds each, falling with K: the
    p value equals the F test by hand, the slope per doubling of K and its t interval
    (t₀.₉₇₅,₁₃ = 2.1604) equal the least-squares slope and its standard error by hand."""
    data = {10: [0.22, 0.18, 0.25, 0.20, 0.15], 50: [0.05, -0.02, 0.08, 0.01, 0.03], 200: [-0.35, -0.28, -0.40, -0.31, -0.38]}
    out = interaction(data)
    f, p = anova_by_hand(data.values())
    x = np.repeat(np.log2([10, 50, 200]), 5)
    y = np.concatenate(list(data.values()))
    b, se = slope_by_hand(x, y)
    assert out.n == 15
    assert out.p_anova == pytest.approx(p, rel=1e-9) and f > 100
    assert out.slope_per_log2K == pytest.approx(b, rel=1e-12)
    assert stats.t.ppf(0.975, 13) == pytest.approx(2.1604, abs=1e-4)
    assert (out.slope_low, out.slope_high) == pytest.approx((b - stats.t.ppf(0.975, 13) * se, b + stats.t.ppf(0.975, 13) * se), rel=1e-9)
    assert out.slope_high < 0


def test_no_interaction_gives_a_large_p_and_a_slope_interval_around_zero():
    """The same 6 per-seed values at every K but one changed by 0.01: F = 6.4e-4 by hand,
    p = 0.99936, and the slope interval covers 0. Exactly equal group means give F = 0 (scipy's
    round-off can make it −1e-32 and p NaN): p = 1."""
    seeds = [0.1, -0.05, 0.2, 0.0, 0.15, 0.05]
    data = {1: seeds, 5: seeds[::-1], 20: seeds[:5] + [0.06]}
    out = interaction(data)
    f, p = anova_by_hand(data.values())
    assert f == pytest.approx(6.3694e-4, rel=1e-4) and out.p_anova == pytest.approx(p, rel=1e-9) and p > 0.999
    assert out.slope_low < 0 < out.slope_high
    same = interaction({1: seeds, 5: seeds[::-1], 20: seeds[2:] + seeds[:2]})
    assert same.p_anova == 1.0 and same.slope_per_log2K == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize("data,message", [
    ({10: [0.1, 0.2]}, "at least two values of K"),
    ({0: [0.1, 0.2], 5: [0.1]}, "K = 0"),
    ({1: [0.1, math.nan], 5: [0.1, 0.2]}, r"per_seed_log_ratios\[1\]"),
    ({1: [0.1], 5: [0.2]}, "no degrees of freedom"),
])
def test_bad_input_is_refused_naming_the_field(data, message):
    with pytest.raises(ValueError, match=message):
        interaction(data)
    with pytest.raises(ValueError, match="pair seed by seed"):
        paired_difference([1, 2], [1])
