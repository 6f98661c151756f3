"""When a curve first reaches its target (asyncfl/studies/crossing.py; docs/studies.md §2): the
interval between the last evaluation below and the first at/above it, the interpolated point, and
right-censoring when it never gets there."""

from __future__ import annotations

import math

import numpy as np
import pytest

from asyncfl.studies import Crossing, crossing


def test_a_crossing_between_two_evaluations_is_that_interval_and_its_interpolation():
    """Evaluated every 10 steps: 0.50 at step 20, 0.90 at step 30, target 0.80. T ∈ (20, 30];
    the line through (20, 0.5) and (30, 0.9) reaches 0.8 at 20 + 0.3/0.4 · 10 = 27.5."""
    c = crossing([0, 10, 20, 30, 40], [0.1, 0.3, 0.5, 0.9, 0.95], 0.8)
    assert c == Crossing(20.0, 30.0, pytest.approx(27.5, rel=1e-12), True, 40.0)
    assert c.width == 10.0


def test_a_value_exactly_at_the_target_is_reached_there():
    """0.8 at step 30 meets target 0.8: T ∈ (20, 30], interpolated to its upper end 30."""
    c = crossing([0, 10, 20, 30], [0.1, 0.3, 0.5, 0.8], 0.8)
    assert (c.low, c.high, c.point, c.reached) == (20.0, 30.0, 30.0, True)


def test_only_the_first_crossing_counts_and_later_dips_do_not_matter():
    """Above 0.6 at step 2 (0.7), below again at step 3: T ∈ (1, 2], point 1 + (0.6 − 0.4)/(0.7 − 0.4) = 1.667."""
    c = crossing([0, 1, 2, 3, 4], [0.2, 0.4, 0.7, 0.5, 0.9], 0.6)
    assert (c.low, c.high) == (1.0, 2.0) and c.point == pytest.approx(1 + 0.2 / 0.3, rel=1e-12)


def test_at_the_target_at_step_zero_is_a_crossing_at_zero():
    c = crossing([0, 5, 10], [0.9, 0.95, 0.97], 0.85)
    assert c == Crossing(0.0, 0.0, 0.0, True, 10.0)


def test_at_the_target_at_a_first_evaluation_after_zero_is_interval_censored_from_zero():
    """First evaluated at step 5, already there: T ∈ (0, 5], no value below to interpolate from."""
    c = crossing([5, 10], [0.9, 0.95], 0.85)
    assert (c.low, c.high, c.point, c.reached) == (0.0, 5.0, 5.0, True)


def test_never_reached_is_right_censored_at_the_horizon():
    """Best value 0.79 < 0.8 over steps 0–300: T > 300, low = point = horizon = 300, high = ∞."""
    steps = np.arange(0, 301, 10)
    c = crossing(steps, np.linspace(0.1, 0.79, steps.size), 0.8)
    assert c == Crossing(300.0, math.inf, 300.0, False, 300.0)
    assert c.width == math.inf


def test_a_run_that_stopped_early_is_censored_at_the_horizon_given():
    """A run diverged after step 40 (NaN there) of a planned 300: censored at 300, not at 40."""
    c = crossing([0, 20, 40], [0.1, 0.2, float("nan")], 0.8, horizon=300)
    assert (c.low, c.high, c.point, c.reached, c.horizon) == (300.0, math.inf, 300.0, False, 300.0)


def test_a_non_finite_value_counts_as_below_and_is_never_interpolated_from():
    c = crossing([0, 10, 20], [0.1, float("nan"), 0.9], 0.8)
    assert (c.low, c.high, c.point) == (10.0, 20.0, 20.0)


def test_a_loss_reaches_its_target_from_above():
    """Loss 2.0, 1.0, 0.4 at steps 0, 10, 20, target 0.5: T ∈ (10, 20], point 10 + 0.5/0.6 · 10 = 18.33."""
    c = crossing([0, 10, 20], [2.0, 1.0, 0.4], 0.5, higher_is_better=False)
    assert (c.low, c.high) == (10.0, 20.0) and c.point == pytest.approx(10 + 10 * 0.5 / 0.6, rel=1e-12)


def test_the_true_crossing_of_a_fine_curve_lies_in_the_interval_read_from_a_coarse_one():
    """Brute force: a concave curve 1 − e^{−t/40} evaluated every step crosses 0.8 first at step
    ⌈40 ln 5⌉ = 65; read every 10 steps the interval is (60, 70] and the chord lies below the
    concave curve, so the interpolation sits above the true crossing 64.38, inside the interval."""
    fine = np.arange(0, 301)
    curve = 1 - np.exp(-fine / 40)
    exact = crossing(fine, curve, 0.8)
    assert (exact.low, exact.high) == (64.0, 65.0)
    coarse = crossing(fine[::10], curve[::10], 0.8)
    assert (coarse.low, coarse.high) == (60.0, 70.0)
    assert 40 * math.log(5) == pytest.approx(64.3775, abs=1e-4)
    assert 40 * math.log(5) < coarse.point <= 70.0


@pytest.mark.parametrize("steps,values,target,horizon,message", [
    ([0, 10], [0.1], 0.5, None, "same length"),
    ([], [], 0.5, None, "at least one evaluation"),
    ([0, 10, 10], [0.1, 0.2, 0.3], 0.5, None, "strictly increasing"),
    ([-1, 10], [0.1, 0.2], 0.5, None, "≥ 0"),
    ([0, 10], [0.1, 0.2], float("nan"), None, "target"),
    ([0, 10], [0.1, 0.2], 0.5, 5, "horizon = 5"),
])
def test_bad_input_is_refused_naming_the_field(steps, values, target, horizon, message):
    with pytest.raises(ValueError, match=message):
        crossing(steps, values, target, horizon=horizon)
