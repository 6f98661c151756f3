"""The banded bias report (asyncfl.server.banded) against the dense one (asyncfl.server.bias), the
independent O(T³) computation on the whole ``T × T`` matrices, on staleness patterns where both
fit: every number of the report to 1e-12 (absolute; the numbers are O(1)).

The patterns are drawn like a FedBuff fleet's (buffer C, staleness up to b, about one step in
three without a fresh upload, so ``W`` is singular and the floor is not 0), plus ``W = I``; the
runs are long enough (T = 500 > 4 (b + 1)) that unwindowed MA-full's back substitution is
truncated and grows its window."""

from __future__ import annotations

import numpy as np
import pytest

from asyncfl.server import banded
from asyncfl.server.aggregation import weight_matrix
from asyncfl.server.bias import bias_report, floor_residuals
from asyncfl.server.ma import coefficient_matrix_full, light_recursion, target_matrix

TOL = 1e-12
RULES = ("none", "momentum", "ma_full", "ma_light")


def fleet_counts(T: int, buffer: int, stale: int, seed: int, fresh: float = 0.3) -> np.ndarray:
    """``by_staleness`` (T × (stale+1)): each step ``buffer`` uploads, staleness 0 with
    probability ``fresh``, else uniform on 1 … stale (capped by the step)."""
    rng = np.random.default_rng(seed)
    counts = np.zeros((T, stale + 1), dtype=np.int64)
    for t in range(T):
        for _ in range(buffer):
            tau = 0 if rng.random() < fresh else int(rng.integers(1, stale + 1))
            counts[t, min(tau, t)] += 1
    return counts


def assert_reports_equal(dense: dict, band: dict, floor: bool = True) -> None:
    for key in RULES + (("floor",) if floor else ()):
        assert band[key] == pytest.approx(dense[key], abs=TOL, rel=0), key
    for group in ("amplification", "scale_free", "best_scale", "sampling_noise"):
        for key in RULES:
            # a residual that is a multiple of M has a scale-free bias of ~0 that streaming sums
            # only resolve to ~√ε |α| (asyncfl.server.banded: 1e-11 at W = I)
            tol = 1e-10 if group == "scale_free" and dense[group][key] < 1e-6 else TOL
            assert band[group][key] == pytest.approx(dense[group][key], abs=tol, rel=0), (group, key)
    for key in dense["per_row"]:
        if key == "floor" and not floor:
            continue
        np.testing.assert_allclose(band["per_row"][key], dense["per_row"][key], atol=TOL, rtol=0, err_msg=key)
    np.testing.assert_allclose(band["a_light"], dense["a_light"], atol=TOL, rtol=0)


@pytest.mark.parametrize("kind", ["momentum", "nesterov"])
@pytest.mark.parametrize("seed,stale,window", [(0, 6, None), pytest.param(1, 12, None, marks=pytest.mark.slow),  # a second unwindowed
                                               (2, 8, 5), (3, 3, 40)])                                        # fleet: whole suite
def test_the_banded_report_equals_the_dense_one(kind, seed, stale, window, monkeypatch):
    monkeypatch.setattr(banded, "FULL_WINDOW", 256)  # MA-full's back substitution is truncated at T = 500
    counts = fleet_counts(500 if window is None else 200, 5, stale, seed)
    dense = bias_report(counts, 0.5, 5, 0.9, kind, 1e-3, window)
    band = banded.banded_report(counts, 0.5, 5, 0.9, kind, 1e-3, window)
    assert_reports_equal(dense, band)
    assert band["ma_full_truncation"] < 1e-12  # the stated error, and it is what the comparison sees
    assert 0.05 < dense["floor"] < dense["ma_full"]  # a singular W: the floor is a real number to match


def test_w_identity_gives_zero_bias_and_the_synchronous_noise():
    counts = np.zeros((60, 3), dtype=np.int64)
    counts[:, 0] = 4
    band = banded.banded_report(counts, 0.5, 4, 0.8, "momentum", 1e-3)
    dense = bias_report(counts, 0.5, 4, 0.8, "momentum", 1e-3)
    assert band["identity_w"] and band["momentum"] < 1e-15 and band["floor"] < 1e-15
    assert not banded.banded_report(fleet_counts(60, 4, 2, 0), 0.5, 4, 0.8, "momentum", 1e-3)["identity_w"]
    assert_reports_equal(dense, band)


def test_counts_at_stalenesses_beyond_the_run_have_no_column_in_w():
    """A short private run's noisy counts are non-zero at every staleness up to max_staleness,
    beyond its T steps too: W (lower-triangular, T × T) has no column for them, and the banded
    report equals the dense one (which keeps min(L, T) columns)."""
    T, L = 12, 42
    counts = np.abs(np.random.default_rng(4).normal(0.5, 1.0, (T, L)))  # noisy, every column non-zero
    assert banded.band_of(counts, 0.5, 4).shape == (T, T)
    dense = bias_report(counts, 0.5, 4, 0.9, "momentum", 1e-3)
    band = banded.banded_report(counts, 0.5, 4, 0.9, "momentum", 1e-3)
    assert_reports_equal(dense, band)


def test_recorded_coefficients_and_a_noisy_view():
    """The run's own coefficients (MA-full's rows, MA-light's pairs) computed on a noisy ``Ŵ`` and
    measured on the exact ``W``, as the report does with privacy."""
    counts = fleet_counts(160, 4, 7, 5)
    noise = np.random.default_rng(9).normal(0, 0.3, counts.shape)
    seen = np.clip(counts + noise, 0, None)
    W_hat = weight_matrix(seen, 0.5, 4)
    used_full = coefficient_matrix_full(W_hat, "momentum", 0.9, 1e-3)
    used_light = light_recursion(W_hat, "momentum", 0.9)[1]
    for given in (dict(used_full=used_full, used_light=used_light), {}):
        dense = bias_report(counts, 0.5, 4, 0.9, "momentum", 1e-3, **given) if given else \
            bias_report(counts, 0.5, 4, 0.9, "momentum", 1e-3, used_full=used_full, used_light=used_light)
        band = banded.banded_report(counts, 0.5, 4, 0.9, "momentum", 1e-3, seen=None if given else seen, **given)
        assert_reports_equal(dense, band)


def test_the_floor_of_a_kernel_that_grows():
    """Rows whose stale uploads all predate the kernel's support leave it growing (more than one
    direction at once): the banded floor still equals the Gram–Schmidt one."""
    T, b = 120, 9
    counts = np.zeros((T, b + 1), dtype=np.int64)
    rng = np.random.default_rng(4)
    for t in range(T):
        if t % 4 == 3:
            counts[t, min(b, t)] += 2  # only very stale: orthogonal to the recent kernel vectors
        else:
            counts[t, rng.integers(0, min(b, t) + 1, size=3)] += 1
    W = weight_matrix(counts, 0.5, 3)
    for kind in ("momentum", "nesterov"):
        M = target_matrix(kind, 0.7, T)
        np.testing.assert_allclose(banded.floor_banded(banded.band_of(counts, 0.5, 3), kind, 0.7),
                                   floor_residuals(W, M), atol=TOL, rtol=0)


@pytest.mark.slow
def test_the_report_keeps_to_the_band_in_memory():
    """20 000 steps at staleness ≤ 30: nothing of size T × T (3.2 GB) is ever allocated; the
    report's own allocations stay under the 100 MB the issue allows (70 MB measured)."""
    import tracemalloc

    counts = fleet_counts(20_000, 3, 30, 7)
    tracemalloc.start()
    try:
        banded.banded_report(counts, 0.5, 3, 0.9, "momentum", 1e-3, 64)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 100e6
