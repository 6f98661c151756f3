"""The experiment engine's paired statistics (asyncfl/studies/stats.py; docs/architecture.md §9):
the speed-up of one method over another, paired by seed, with its Student-t interval."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from asyncfl.studies.stats import paired_speedup


def test_paired_speedup_is_the_geometric_mean_of_per_seed_ratios_with_a_t_interval():
    """Seeds 0–2 with momentum/MA steps 60/30, 80/20, 50/50: ratios 2, 4, 1; geometric mean
    2 = exp(mean(ln 2, ln 4, 0)); 95 % interval exp(m ± t₀.₉₇₅,₂ · s/√3) with s the sample std of
    the logs (t = 4.3027, by scipy here against the table value). Seed 3 reached only with MA:
    counted as a lower bound, not in the interval."""
    nan = float("nan")
    base = [{"seed": s, "steps_to_target": v} for s, v in enumerate([60.0, 80.0, 50.0, nan])]
    ma = [{"seed": s, "steps_to_target": v} for s, v in enumerate([30.0, 20.0, 50.0, 40.0])]
    ps = paired_speedup(base, ma)
    logs = np.log([2.0, 4.0, 1.0])
    half = stats.t.ppf(0.975, 2) * logs.std(ddof=1) / np.sqrt(3)
    assert stats.t.ppf(0.975, 2) == pytest.approx(4.3027, abs=1e-4)
    assert (ps.n, ps.lower_bounds, ps.base_only, ps.neither) == (3, 1, 0, 0)
    assert ps.geo == pytest.approx(2.0, rel=1e-12)
    assert (ps.low, ps.high) == pytest.approx((2.0 * np.exp(-half), 2.0 * np.exp(half)), rel=1e-12)


def test_paired_speedup_counts_the_seeds_left_out_and_says_so():
    """Seed 0 both reached (60 / 30 = 2), seed 1 only the rule (a lower bound), seed 2 only the
    base, seed 3 neither, seed 4 has no base row (left out): n = 1, so no interval."""
    nan = float("nan")
    base = [{"seed": s, "steps_to_target": v} for s, v in enumerate([60.0, nan, 50.0, nan])]
    rule = [{"seed": s, "steps_to_target": v} for s, v in enumerate([30.0, 40.0, nan, nan, 10.0])]
    ps = paired_speedup(base, rule)
    assert (ps.geo, ps.n, ps.lower_bounds, ps.base_only, ps.neither) == (pytest.approx(2.0), 1, 1, 1, 1)
    assert ps.text("MA", "momentum") == "2.00× (n = 1) (+1 only MA reached; 1 only momentum reached)"
    none = paired_speedup(base[3:], rule[3:4])
    assert none.n == 0 and none.text() == "— (no seed where both reached)"
