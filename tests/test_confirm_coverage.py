"""The measured coverage of the confirmatory report's intervals (analysis/confirm/coverage.py,
docs/confirm.md §3.1): the model fitted to a comparison's seeds, the estimand it implies, and the
share of simulated studies whose interval — the report's own — covers it."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from analysis.confirm.coverage import (Coverage, accuracy_coverage, fit_censored_normal, fit_latent_times,
                                       restricted_log_mean, time_coverage)

H = 100.0
#: a heavily censored comparison: the base reached the target on 4 of 10 seeds (60 % censored at h = 100)
BASE_T = np.array([62.0, 75.0, 88.0, 95.0] + [H] * 6)
BASE_D = np.array([True] * 4 + [False] * 6)
RULE_T = np.array([40.0, 45.0, 38.0, 52.0, 47.0, 41.0, 60.0, 44.0, 39.0, 50.0])
RULE_D = np.ones(10, dtype=bool)


def _mc_se(p: float, b: int) -> float:
    return math.sqrt(p * (1 - p) / b)


# --- the model ---------------------------------------------------------------------------------

def test_restricted_log_mean_matches_a_million_draws_and_tends_to_mu_without_censoring():
    rng = np.random.default_rng(11)
    for mu, sigma, c in ((4.6, 0.5, math.log(100)), (4.0, 0.3, math.log(100)), (5.0, 1.0, 4.0)):
        x = rng.normal(mu, sigma, 1_000_000)
        mc = np.minimum(x, c)
        assert restricted_log_mean(mu, sigma, c) == pytest.approx(mc.mean(), abs=4 * mc.std() / 1000)
    assert restricted_log_mean(4.0, 0.3, 50.0) == pytest.approx(4.0, abs=1e-12)


def test_the_censored_fit_is_the_sample_mean_and_sd_without_censoring_and_scipys_fit_with_it():
    x = np.array([3.1, 3.4, 2.9, 3.8, 3.3])
    assert fit_censored_normal(x, np.ones(5, bool), 10.0) == pytest.approx((x.mean(), x.std(ddof=0)), rel=1e-12)
    logs = np.log(BASE_T)
    ref = stats.norm.fit(stats.CensoredData(uncensored=logs[BASE_D], right=logs[~BASE_D]))
    assert fit_censored_normal(logs, BASE_D, math.log(H)) == pytest.approx(ref, rel=1e-4)


def test_an_arm_that_never_or_once_reached_the_target_is_not_estimable_and_the_report_says_why():
    none = time_coverage(np.full(10, H), np.zeros(10, bool), RULE_T, RULE_D, H, 0.95, replicates=50)
    assert math.isnan(none.value) and none.text().startswith("not estimable: the base reached the target on 0/10 seeds")
    once = time_coverage(RULE_T, RULE_D, np.array([30.0] + [H] * 9), np.array([True] + [False] * 9), H, 0.95, replicates=50)
    assert once.text().startswith("not estimable: the rule reached the target on 1/10 seeds")
    flat = accuracy_coverage([0.5, 0.25, 0.75], [0.625, 0.375, 0.875], 0.95, replicates=50)
    assert flat.text() == "not estimable: the paired differences have no spread"


def test_the_correlation_is_taken_over_the_seeds_both_reached_and_is_zero_below_three():
    model = fit_latent_times(BASE_T, BASE_D, RULE_T, RULE_D, H)
    assert model.rho == pytest.approx(np.corrcoef(np.log(BASE_T[:4]), np.log(RULE_T[:4]))[0, 1])
    two = BASE_D.copy()
    two[2:4] = False
    assert fit_latent_times(np.where(two, BASE_T, H), two, RULE_T, RULE_D, H).rho == 0.0


# --- the coverage ------------------------------------------------------------------------------

@pytest.mark.parametrize("level", [0.95, 0.975])
def test_without_censoring_on_normal_data_the_t_interval_covers_at_its_nominal_level(level):
    # the t interval is exact for normal differences: 2500 replicates land within 3 Monte Carlo SEs
    # (a z quantile in place of t would cover 0.918 / 0.948 at 10 seeds and fail this)
    b = np.array([80.0, 95.0, 70.0, 110.0, 88.0, 102.0, 76.0, 91.0, 84.0, 99.0])
    r = b / np.array([1.9, 2.1, 1.7, 2.4, 2.0, 1.8, 2.2, 2.05, 1.95, 2.3])
    cov = time_coverage(b, np.ones(10, bool), r, np.ones(10, bool), 1e6, level, seed=5)
    assert cov.replicates == 2500 and cov.se <= 0.01
    assert abs(cov.value - level) <= 3 * _mc_se(level, 2500)
    acc = accuracy_coverage([0.50, 0.52, 0.49, 0.51, 0.55, 0.47], [0.55, 0.53, 0.52, 0.56, 0.58, 0.50], level, seed=6)
    assert abs(acc.value - level) <= 3 * _mc_se(level, 2500)


def test_heavy_censoring_coverage_matches_a_plain_loop_over_replicates():
    level, b_reps, seed = 0.95, 2500, 7
    cov = time_coverage(BASE_T, BASE_D, RULE_T, RULE_D, H, level, replicates=b_reps, seed=seed)
    assert cov.censored_base == 0.6 and cov.censored_rule == 0.0

    # the same study, written out: scipy's censored fit per arm, ρ over the 4 seeds both reached,
    # the estimand from a million simulated pairs, a t interval per replicate
    c, n = math.log(H), 10
    mu_b, s_b = stats.norm.fit(stats.CensoredData(uncensored=np.log(BASE_T[BASE_D]), right=np.log(BASE_T[~BASE_D])))
    mu_r, s_r = np.log(RULE_T).mean(), np.log(RULE_T).std()
    rho = np.corrcoef(np.log(BASE_T[:4]), np.log(RULE_T[:4]))[0, 1]
    big = np.random.default_rng(99).standard_normal((2, 1_000_000))
    theta = np.mean(np.minimum(mu_b + s_b * big[0], c) - np.minimum(mu_r + s_r * (rho * big[0] + math.sqrt(1 - rho**2) * big[1]), c))
    z = np.random.default_rng(seed).standard_normal((2, b_reps, n))
    q = stats.t.ppf((1 + level) / 2, n - 1)
    hits = 0
    for i in range(b_reps):
        log_rb = np.minimum(mu_b + s_b * z[0, i], c)
        log_rr = np.minimum(mu_r + s_r * (rho * z[0, i] + math.sqrt(1 - rho**2) * z[1, i]), c)
        d = log_rb - log_rr
        if abs(d.mean() - theta) <= q * d.std(ddof=1) / math.sqrt(n):
            hits += 1
    assert cov.value == pytest.approx(hits / b_reps, abs=0.004)
    # the number the report prints here: 0.937 (seed 7), below nominal 0.95 by more than 2 Monte Carlo SEs
    assert cov.value == pytest.approx(0.9372) and cov.below
    assert cov.text().startswith(f"{cov.value:.3f} ⚠ below nominal 0.95 (unreached: base 60 %, rule 0 %)")


def test_a_coverage_is_flagged_only_when_more_than_two_monte_carlo_ses_below_nominal():
    assert Coverage(0.78, _mc_se(0.78, 2500), 0.975, 2500, "", 0.6, 0.0).text() == \
        "0.780 ⚠ below nominal 0.975 (unreached: base 60 %, rule 0 %)"
    assert Coverage(0.97, _mc_se(0.97, 2500), 0.975, 2500).text() == "0.970"  # 1.5 SE below: not flagged
    assert Coverage(0.94, _mc_se(0.94, 2500), 0.95, 2500).text() == "0.940 ⚠ below nominal 0.95"


def test_the_coverage_is_reproducible_from_its_seed():
    one = time_coverage(BASE_T, BASE_D, RULE_T, RULE_D, H, 0.95, replicates=300, seed=1)
    assert time_coverage(BASE_T, BASE_D, RULE_T, RULE_D, H, 0.95, replicates=300, seed=1) == one
