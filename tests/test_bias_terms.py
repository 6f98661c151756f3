"""The measurements next to the momentum bias (docs/server-rules.md §7): the scale-free bias
against scipy's scalar minimiser, the Gini coefficient against its double sum, the sampling-noise
factor against a Monte Carlo of the sampling errors, and the participation counts of a run
against its own updates.csv rows."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import scipy.optimize

from asyncfl.config import scenario as sc
from asyncfl.run.runner import run_to_dir_blocking
from asyncfl.server.aggregation import weight_matrix
from asyncfl.server.bias import count_matrix, sampling_noise, scale_free_bias
from asyncfl.server.imbalance import gini, participation_summary
from asyncfl.server.ma import coefficient_matrix_full, relative_bias, target_matrix


def _pattern(T: int, C: int, seed: int) -> np.ndarray:
    """A FedBuff-like by_staleness[t-1, τ]: C uploads per step, staleness at most t − 1."""
    rng = np.random.default_rng(seed)
    out = np.zeros((T, 6), dtype=np.int64)
    for t in range(T):
        taus = np.minimum(rng.geometric(0.45, size=C) - 1, min(t, 5))
        out[t] = np.bincount(taus, minlength=6)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_scale_free_bias_is_the_minimum_over_the_scale(seed):
    counts = _pattern(30, 5, seed)
    W = weight_matrix(counts, 0.0, 5)
    M = target_matrix("momentum", 0.9, 30)
    for A in (M, coefficient_matrix_full(W, "momentum", 0.9, 1e-3)):
        value, c = scale_free_bias(A, W, M)
        res = scipy.optimize.minimize_scalar(lambda x: np.linalg.norm(x * A @ W - M) / np.linalg.norm(M),
                                             bracket=(0.1, 2.0), tol=1e-12)
        assert c == pytest.approx(res.x, rel=1e-6) and value == pytest.approx(res.fun, rel=1e-9)
        assert value <= relative_bias(A, W, M) + 1e-15  # c = 1 is a candidate
    # no staleness: W = I and naive momentum is exact, with c* = 1
    assert scale_free_bias(M, np.eye(30), M) == (pytest.approx(0.0, abs=1e-15), pytest.approx(1.0, rel=1e-15))


def test_gini_is_the_mean_absolute_difference_over_twice_the_mean():
    rng = np.random.default_rng(4)
    for n in (rng.integers(0, 20, size=37), np.array([12, 3, 3, 3, 0]), np.array([5, 5, 5])):
        brute = sum(abs(a - b) for a in n for b in n) / (2 * len(n) ** 2 * n.mean())
        assert gini(n) == pytest.approx(brute, rel=1e-13)
    assert gini(np.array([0, 0, 0, 9])) == pytest.approx(0.75)  # one client did everything: 1 − 1/N
    s = participation_summary(np.array([12, 3, 3, 3, 0]))
    assert (s["max_over_mean"], s["min"], s["never"], s["total"]) == (pytest.approx(12 / 4.2), 0, 1, 21)


def test_sampling_noise_matches_a_monte_carlo_of_the_sampling_errors():
    """E‖EAᵀ1‖² = σ² Σ_t c_t² Σ_s W[t,s]²/C_{t,s}: here each ζ_{t,s} is the mean of C_{t,s}
    independent draws of per-client variance σ² = 2 (d = 2, unit variance per coordinate)."""
    T, C, p = 12, 4, 0.5
    counts = _pattern(T, C, 7)
    W, Cts = weight_matrix(counts, p, C), count_matrix(counts)
    A = coefficient_matrix_full(W, "momentum", 0.8, 1e-2)
    c = A.sum(axis=0)
    rng = np.random.default_rng(0)
    draws = 20000
    total = np.zeros(draws)
    acc = np.zeros((draws, 2))
    for t in range(T):
        for s in range(t + 1):
            n = int(Cts[t, s])
            if n:
                zeta = rng.normal(size=(draws, n, 2)).mean(axis=1)
                acc += c[t] * W[t, s] * zeta
    total = np.sum(acc * acc, axis=1)
    expected = 2.0 * sampling_noise(A, W, Cts)
    assert total.mean() == pytest.approx(expected, rel=0.03)
    # p = 0: Σ_s W[t,s]²/C_{t,s} = 1/C in every row, so the factor is ‖Aᵀ1‖²/C
    W0 = weight_matrix(counts, 0.0, C)
    assert sampling_noise(A, W0, Cts) == pytest.approx(np.sum(c * c) / C, rel=1e-13)


def test_a_fedbuff_run_writes_participation_and_the_new_bias_keys(tmp_path):
    s = sc.validate({"population": {"clients": 12, "speed_sigma": 1.5}, "client": {"local_steps": 1},
                     "task": {"name": "quadratic", "problem": "random", "dim": 3, "samples_per_client": 5},
                     "server": {"rule": "momentum", "concurrency": 6, "buffer": 3}, "run": {"steps": 30, "eval_every": 30}})
    run_to_dir_blocking(s, tmp_path / "run")
    bias = json.loads((tmp_path / "run" / "bias.json").read_text())
    rows = [r for r in csv.DictReader(open(tmp_path / "run" / "updates.csv")) if r["accepted"] == "true"]
    counts = np.bincount([int(r["client"]) for r in rows], minlength=12)
    assert bias["participation"] == participation_summary(counts)
    assert bias["participation"]["total"] == 30 * 3
    assert set(bias["scale_free"]) == set(bias["sampling_noise"]) == {"none", "momentum", "ma_full", "ma_light"}
    assert bias["sampling_noise"]["momentum"] == pytest.approx(1.0)  # p = 0: A = M has the synchronous factor
    for key in ("momentum", "ma_full"):
        assert bias["scale_free"][key] <= bias[key] + 1e-12
