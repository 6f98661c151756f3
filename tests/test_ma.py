"""Specification of momentum approximation (docs/server-rules.md; asyncfl/server/ma.py, asyncfl/server/bias.py).

Expected numbers are computed independently of the code under test: explicit loops for M and W,
``torch.optim.SGD`` for momentum/Nesterov trajectories, ``np.linalg.inv``/``np.linalg.lstsq`` on
the normal equations for the least-squares problems.
"""

from __future__ import annotations

import heapq
import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from asyncfl.server import ma
from tests.conftest import make_scenario
from asyncfl.server.aggregation import Aggregate, weight_matrix
from asyncfl.figures.bias import draw_bias_heatmaps
from asyncfl.server.bias import bias_report
from asyncfl.compose import build_rule as make_rule
from asyncfl.server.rules import Momentum, Nesterov, apply

KINDS = ("momentum", "nesterov")


# ----------------------------------------------------------------------------------------------
# independent helpers
def loop_target(kind: str, beta: float, T: int) -> np.ndarray:
    """M by the definition of docs/server-rules.md, one entry at a time (1-based t, s)."""
    M = np.zeros((T, T))
    for t in range(1, T + 1):
        for s in range(1, t + 1):
            if kind == "momentum":
                M[t - 1, s - 1] = beta ** (t - s)
            else:
                M[t - 1, s - 1] = 1 + beta if s == t else beta ** (t - s + 1)
    return M


def loop_weight_matrix(counts: np.ndarray, p: float, C: int) -> np.ndarray:
    """W[t,s] = (t−s+1)^(−p) C_{t,s} / C from by_staleness counts, one entry at a time."""
    T = counts.shape[0]
    W = np.zeros((T, T))
    for t in range(1, T + 1):
        for tau in range(counts.shape[1]):
            s = t - tau
            if s >= 1:
                W[t - 1, s - 1] = (tau + 1) ** (-p) * counts[t - 1, tau] / C
    return W


def fedbuff_counts(rng: np.random.Generator, T: int, K: int, C: int, latency: str = "exp") -> np.ndarray:
    """``by_staleness[t-1, τ]`` from a small FedBuff event simulation (docs/protocol.md): K clients in
    flight, each arrival dispatches a replacement with the current version, a step every C
    arrivals; latencies exponential or log-normal."""
    draw = (lambda: rng.exponential(1.0)) if latency == "exp" else (lambda: rng.lognormal(0.0, 1.0))
    heap = [(draw(), k, 1) for k in range(K)]
    heapq.heapify(heap)
    counts = np.zeros((T, T))
    t, filled = 1, 0
    while t <= T:
        clock, k, version = heapq.heappop(heap)
        counts[t - 1, t - version] += 1
        filled += 1
        if filled == C:
            t, filled = t + 1, 0
        heapq.heappush(heap, (clock + draw(), k, t))
    return counts


def staleness_weights(W: np.ndarray, t: int, length: int | None = None) -> np.ndarray:
    """What the aggregator hands the rule: ``weights[τ] = W[t, t−τ]`` (zero-padded to ``length``)."""
    w = np.array([W[t - 1, t - 1 - tau] for tau in range(t)])
    if length is not None and length > t:
        w = np.concatenate([w, np.zeros(length - t)])
    return w


def run_rule(rule, W: np.ndarray, d: int = 3, seed: int = 0, noisy_length: int | None = None):
    """Drive a rule over the rows of W with random r (float64). Returns directions, coefficient
    list, the r's and the final state."""
    gen = torch.Generator().manual_seed(seed)
    state = rule.init(torch.zeros(d, dtype=torch.float64))
    rs, ms, coefs = [], [], []
    for t in range(1, W.shape[0] + 1):
        r = torch.randn(d, generator=gen, dtype=torch.float64)
        out = rule.direction(Aggregate(t, r, staleness_weights(W, t, noisy_length)), state)
        state = out.state
        rs.append(r), ms.append(out.direction), coefs.append(out.coefficients)
    return ms, coefs, rs, state


def random_lower(rng: np.random.Generator, T: int) -> np.ndarray:
    """Invertible lower-triangular W, diagonal in [0.5, 1], off-diagonal in [0, 0.3]."""
    return np.tril(rng.uniform(0, 0.3, (T, T)), -1) + np.diag(rng.uniform(0.5, 1.0, T))


# ----------------------------------------------------------------------------------------------
# targets
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("beta", [0.0, 0.5, 0.9])
def test_target_matrix_and_rows_match_the_definition(kind, beta):
    T = 9
    M = ma.target_matrix(kind, beta, T)
    np.testing.assert_allclose(M, loop_target(kind, beta, T), rtol=1e-15, atol=0)
    for t in range(1, T + 1):
        np.testing.assert_array_equal(ma.target_row(kind, beta, t), M[t - 1, :t])


@pytest.mark.parametrize("kind,rule", [("momentum", Momentum), ("nesterov", Nesterov)])
def test_unrolled_momentum_is_the_target_row(kind, rule):
    # m_t = Σ_s M[t,s] r_s for the heavy-ball / Nesterov recursions of asyncfl.server.rules
    beta, T = 0.8, 7
    rule = rule(beta)
    rs = torch.randn(T, 4, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    state = rule.init(rs[0])
    for t in range(1, T + 1):
        out = rule.direction(Aggregate(t, rs[t - 1], np.ones(1)), state)
        state = out.state
        expected = sum(ma.target_row(kind, beta, t)[s] * rs[s] for s in range(t))
        torch.testing.assert_close(out.direction, expected, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# W = I: the rules are momentum / Nesterov
def torch_trajectory(rs, lr: float, beta: float, nesterov: bool) -> list[torch.Tensor]:
    p = torch.nn.Parameter(torch.zeros_like(rs[0]))
    opt = torch.optim.SGD([p], lr=lr, momentum=beta, nesterov=nesterov, dampening=0.0)
    out = []
    for r in rs:
        p.grad = r.clone()
        opt.step()
        out.append(p.detach().clone())
    return out


@pytest.mark.parametrize(
    "kind,rule",
    [
        ("momentum", lambda k: ma.MAFull(0.9, k, ridge=0.0)),
        ("nesterov", lambda k: ma.MAFull(0.9, k, ridge=0.0)),
        ("momentum", lambda k: ma.MALight(0.9, k)),
        ("nesterov", lambda k: ma.MALight(0.9, k)),
    ],
    ids=["full-momentum", "full-nesterov", "light-momentum", "light-nesterov"],
)
def test_identity_W_reproduces_torch_sgd(kind, rule):
    T, lr = 25, 0.1
    ms, _, rs, _ = run_rule(rule(kind), np.eye(T), d=5)
    theta, ours = torch.zeros(5, dtype=torch.float64), []
    for m in ms:
        theta = apply(theta, m, lr)
        ours.append(theta)
    for a, b in zip(ours, torch_trajectory(rs, lr, 0.9, kind == "nesterov")):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("kind", KINDS)
def test_light_offline_matrix_is_the_target_without_staleness(kind):
    # Nesterov: the (u, v) recursion fits the heavy-ball buffer (u = 1, v = β at W = I) and the
    # look-ahead adds I: A = I + β M_mom = M_nest
    beta, T = 0.9, 30
    A, uv = ma.light_recursion(np.eye(T), kind, beta)
    np.testing.assert_allclose(A, loop_target(kind, beta, T), rtol=0, atol=1e-12)
    np.testing.assert_allclose(uv, [[1.0, 0.0]] + [[1.0, beta]] * (T - 1), rtol=0, atol=1e-12)


def test_plain_uv_fit_of_the_nesterov_row_is_not_used():
    # Why MA-light does not fit the Nesterov row directly with ã_t = u e_t + v ã_{t−1}: even with
    # W = I, row 3 of M_nest = [β³, β², 1+β] needs v β² = β³ (v = β) and v (1+β) = β² (v = β²/(1+β))
    # at once. Written out (β = 0.9): u_t = 1.9 always, v_2 = 0.42632, v_3 = 0.49917 (the least
    # squares compromise), row biases 0, 0, 0.161, 0.234, 0.284, 0.321 and overall 0.223 — while
    # the heavy-ball fit + look-ahead that MA-light uses is exact (test above).
    beta, T = 0.9, 6
    M, prev, A, vs = loop_target("nesterov", beta, T), np.zeros(T), np.zeros((T, T)), []
    for t in range(1, T + 1):
        u, v = ma.ma_light_coefficients(np.eye(t)[t - 1], prev[: t - 1], M[t - 1, :t])
        A[t - 1] = v * prev
        A[t - 1, t - 1] = u
        prev = A[t - 1]
        vs.append(v)
    assert vs[1] == pytest.approx(beta**2 / (1 + beta)) and vs[2] == pytest.approx(0.49917, abs=1e-5)
    rows = ma.row_bias(A, np.eye(T), M)
    assert rows[0] < 1e-14 and rows[1] < 1e-14
    np.testing.assert_allclose(rows[2:], [0.161, 0.234, 0.284, 0.321], atol=1e-3)
    assert ma.relative_bias(A, np.eye(T), M) == pytest.approx(0.2233, abs=1e-4)
    assert ma.relative_bias(ma.coefficient_matrix_light(np.eye(T), "nesterov", beta), np.eye(T), M) < 1e-14


# ----------------------------------------------------------------------------------------------
# MA-full: exact inverse, minimum norm, ridge
@pytest.mark.parametrize("kind", KINDS)
def test_full_inverts_an_invertible_lower_triangular_W(kind):
    rng = np.random.default_rng(3)
    for _ in range(20):
        T = int(rng.integers(2, 20))
        W = random_lower(rng, T)
        M = loop_target(kind, 0.9, T)
        A = ma.coefficient_matrix_full(W, kind, 0.9, ridge=0.0)
        np.testing.assert_allclose(A @ W, M, atol=1e-10, rtol=0)


def test_full_singular_W_is_minimum_norm_least_squares():
    rng = np.random.default_rng(4)
    T = 10
    W = random_lower(rng, T)
    W[4, 4] = 0.0  # version 5 never arrived in step 5
    W[7, 7] = 0.0
    M = loop_target("momentum", 0.8, T)
    A = ma.coefficient_matrix_full(W, "momentum", 0.8, ridge=0.0)
    for t in range(1, T + 1):
        expected = np.linalg.lstsq(W[:t, :t].T, M[t - 1, :t], rcond=None)[0]
        np.testing.assert_allclose(A[t - 1, :t], expected, atol=1e-10)


def test_full_tiny_diagonal_falls_back_to_least_squares():
    # a pivot of 1e-300 is below n·eps·max|W|: treated as singular, not divided by
    W = np.array([[1.0, 0.0], [0.5, 1e-300]])
    a = ma.ma_full_coefficients(W, np.array([0.9, 1.0]), 0.0)
    np.testing.assert_allclose(a, np.linalg.lstsq(W.T, [0.9, 1.0], rcond=None)[0])
    assert np.all(np.isfinite(a))


@pytest.mark.parametrize("ridge", [1e-3, 0.5])
def test_full_ridge_matches_normal_equations(ridge):
    rng = np.random.default_rng(5)
    T = 12
    W = random_lower(rng, T)
    W[3, 3] = 0.0
    M = loop_target("nesterov", 0.7, T)
    A = ma.coefficient_matrix_full(W, "nesterov", 0.7, ridge=ridge)
    for t in range(1, T + 1):
        Wt = W[:t, :t]
        expected = np.linalg.inv(Wt @ Wt.T + ridge * np.eye(t)) @ Wt @ M[t - 1, :t]  # normal equations
        np.testing.assert_allclose(A[t - 1, :t], expected, rtol=1e-9, atol=1e-12)


def _direct_ridge(W: np.ndarray, m: np.ndarray, ridge: float) -> np.ndarray:
    return np.linalg.solve(W @ W.T + ridge * np.eye(W.shape[0]), W @ m)  # the straightforward formula


@pytest.mark.parametrize("shape,ridge", [(s, r) if (s, r) != ("dense", 0.5) else pytest.param(s, r, marks=pytest.mark.slow)
                                         for s in ("dense", "fedbuff", "singular", "noisy") for r in (1e-3, 0.5)])
def test_incremental_factor_matches_the_direct_ridge_solution(shape, ridge):  # dense at λ = 0.5 (1 s): whole suite
    # the bordered Cholesky update on the band against (W Wᵀ + λI)⁻¹ W m on every row, T = 200;
    # "dense" has every staleness up to t−1 (the band is the whole triangle), "noisy" a band of 8
    rng = np.random.default_rng(16)
    T = 200
    if shape == "dense":
        W = random_lower(rng, T)
    elif shape == "fedbuff":
        W = weight_matrix(fedbuff_counts(rng, T, K=50, C=10), 0.5, 10)
    elif shape == "singular":
        W = random_lower(rng, T) * (rng.uniform(size=(T, 1)) < 0.7)  # 30 % of the rows empty
    else:  # privacy-like: banded rows with noise and negative entries
        W = np.tril(np.triu(rng.normal(0.0, 0.3, (T, T)), -8))
    A, M = ma.coefficient_matrix_full(W, "nesterov", 0.9, ridge), loop_target("nesterov", 0.9, T)
    for t in [*range(1, 40), *range(40, T, 9), T]:
        expected = _direct_ridge(W[:t, :t], M[t - 1, :t], ridge)
        err = np.linalg.norm(A[t - 1, :t] - expected) / np.linalg.norm(expected)
        assert err < 1e-10, (t, err)
    w_band, l_band = np.zeros((0, 0)), np.zeros((0, 0))
    for t in range(1, T + 1):
        w_band, l_band = ma.band_push(w_band, l_band, staleness_weights(W, t), t, ridge)
    L = ma.band_dense(l_band, T)
    np.testing.assert_allclose(L @ L.T, W @ W.T + ridge * np.eye(T), rtol=0, atol=1e-12)
    np.testing.assert_array_equal(ma.band_dense(w_band, T), W)
    assert w_band.shape[1] == l_band.shape[1] == largest_staleness(W) + 1


def largest_staleness(W: np.ndarray) -> int:
    """The largest ``t − s`` with ``W[t, s] ≠ 0`` (a loop over the entries)."""
    return max([t - s for t in range(W.shape[0]) for s in range(t + 1) if W[t, s] != 0.0], default=0)


def test_full_rule_is_bit_identical_to_offline_over_many_steps():
    # the rule and coefficient_matrix_full share band_push/solve (capacities 8, 16, 32, 64, 128)
    rng = np.random.default_rng(17)
    T = 70
    W = weight_matrix(fedbuff_counts(rng, T, K=30, C=5), 0.5, 5)
    _, coefs, _, state = run_rule(ma.MAFull(0.9, "momentum", 1e-3), W, noisy_length=12)
    A = ma.coefficient_matrix_full(W, "momentum", 0.9, 1e-3)
    for t in range(1, T + 1):
        np.testing.assert_array_equal(coefs[t - 1], A[t - 1, :t])
    b = largest_staleness(W)
    assert state.history.shape == (128, 3) and state.l_band.shape == state.w_band.shape == (128, b + 1)  # doubled, not per step


# ----------------------------------------------------------------------------------------------
# the banded incremental solver (docs/server-rules.md §4, "Banded solver")
def staleness_pattern(rng: np.random.Generator, T: int, pattern: str, ridge: float) -> np.ndarray:
    """W built entry by entry: row t has non-zeros only at staleness ≤ its bound (each kept with
    probability 0.6), the diagonal always. ``bounded``: staleness ≤ 5; ``growing``: ≤ t/20, so
    the band widens during the run; ``burst``: ≤ 2 with a staleness of 30 every 37th step; ``none``:
    no staleness (W diagonal). For λ = 0 the off-diagonal entries are small enough (≤ 0.3/(b+1))
    that W is well conditioned; else they are up to 1 and may be negative."""
    W = np.zeros((T, T))
    for t in range(T):
        bound = {"bounded": 5, "growing": t // 20, "burst": 30 if t % 37 == 36 else 2, "none": 0}[pattern]
        scale = 0.3 / (bound + 1) if ridge == 0 else 1.0
        for s in range(max(0, t - bound), t):
            if rng.uniform() < 0.6:
                W[t, s] = rng.uniform(0.0 if ridge == 0 else -0.5, 1.0) * scale
        W[t, t] = rng.uniform(0.5, 1.0)
    return W


@pytest.mark.parametrize("ridge", [0.0, 1e-3, 0.5])
@pytest.mark.parametrize("pattern", ["bounded", "growing", "burst", "none"])
def test_banded_solver_matches_the_dense_solver_and_the_normal_equations(pattern, ridge):
    """a_t of the rule's banded solver on a T = 150 run (rows 1–40, every 7th, the last) against (1) the module's dense
    direct solve (ma_full_coefficients on W_{1:t,1:t}: a Cholesky solve of the dense Gram matrix,
    or dense back substitution for λ = 0) and (2) numpy.linalg.solve of the normal equations
    (W Wᵀ + λI) a = W m, or of Wᵀ a = m for λ = 0, on the W of the loop above: relative error
    ‖Δa‖/‖a‖ below 1e-10 for both (measured on this machine: ≤ 6e-14 with λ = 1e-3,
    ≤ 1e-15 with λ = 0.5, ≤ 1e-16 with λ = 0; the margin is for other BLAS builds)."""
    rng = np.random.default_rng(40)
    T = 150
    W = staleness_pattern(rng, T, pattern, ridge)
    M = loop_target("momentum", 0.9, T)
    _, coefs, _, state = run_rule(ma.MAFull(0.9, "momentum", ridge), W)
    for t in [*range(1, 41), *range(41, T, 7), T]:
        Wt, m = W[:t, :t], M[t - 1, :t]
        normal = np.linalg.solve(Wt.T, m) if ridge == 0 else np.linalg.solve(Wt @ Wt.T + ridge * np.eye(t), Wt @ m)
        dense = ma.ma_full_coefficients(Wt, m, ridge)
        for reference in (normal, dense):
            err = np.linalg.norm(coefs[t - 1] - reference) / np.linalg.norm(reference)
            assert err < 1e-10, (t, err)
    b = largest_staleness(W)
    assert b == {"bounded": 5, "growing": (T - 1) // 20, "burst": 30, "none": 0}[pattern]
    # memory O(t·b): the bands have b + 1 columns and a doubled row capacity
    assert state.w_band.shape == (256, b + 1)
    assert state.l_band.shape == ((0, 0) if ridge == 0 else (256, b + 1))


def test_the_factor_of_a_banded_gram_matrix_has_no_fill_in():
    """The fact the banded solver rests on: with staleness ≤ b, G = W Wᵀ + λI has lower
    bandwidth b and its Cholesky factor (numpy.linalg.cholesky of the dense G) is exactly zero
    outside that band; the band the solver keeps equals it to 1e-12."""
    rng = np.random.default_rng(41)
    T, b = 120, 5
    W = staleness_pattern(rng, T, "bounded", 1e-2)
    G = W @ W.T + 1e-2 * np.eye(T)
    i, j = np.indices((T, T))
    outside = i - j > b
    assert np.all(G[outside] == 0.0)
    L = np.linalg.cholesky(G)
    assert np.all(L[outside] == 0.0)
    w_band, l_band = np.zeros((0, 0)), np.zeros((0, 0))
    for t in range(1, T + 1):
        w_band, l_band = ma.band_push(w_band, l_band, staleness_weights(W, t), t, 1e-2)
    np.testing.assert_allclose(ma.band_dense(l_band, T), L, rtol=0, atol=1e-12)


def test_a_larger_staleness_widens_the_band_without_changing_earlier_rows():
    """Rows of staleness ≤ 1, then one of staleness 6: the bands widen to 7 columns by zero
    columns on the left, the earlier rows of W and of the factor keep their values bit for bit."""
    rng = np.random.default_rng(42)
    T = 10
    W = np.tril(np.triu(rng.uniform(0.1, 1.0, (T, T)), -1))
    W[9, 3] = 0.4
    w_band, l_band = np.zeros((0, 0)), np.zeros((0, 0))
    for t in range(1, 10):
        w_band, l_band = ma.band_push(w_band, l_band, staleness_weights(W, t), t, 1e-3)
    before_w, before_l = ma.band_dense(w_band, 9), ma.band_dense(l_band, 9)
    assert w_band.shape == l_band.shape == (16, 2)
    w_band, l_band = ma.band_push(w_band, l_band, staleness_weights(W, 10), 10, 1e-3)
    assert w_band.shape == l_band.shape == (16, 7)
    np.testing.assert_array_equal(ma.band_dense(w_band, 10), W)
    np.testing.assert_array_equal(ma.band_dense(w_band, 9), before_w)
    np.testing.assert_array_equal(ma.band_dense(l_band, 9), before_l)
    a = ma.band_solve(w_band, l_band, 10, loop_target("momentum", 0.9, T)[9], 1e-3)
    np.testing.assert_allclose(a, _direct_ridge(W, loop_target("momentum", 0.9, T)[9], 1e-3), rtol=1e-12)


def test_full_state_reused_with_another_aggregate_copies_its_buffers():
    # buffers are written in place; using an older state again must not see (or spoil) newer data
    rng = np.random.default_rng(18)
    T = 12
    W = weight_matrix(fedbuff_counts(rng, T, K=8, C=2), 0.5, 2)
    for rule in (ma.MAFull(0.9, "momentum", 1e-3), ma.MAFull(0.9, "nesterov", 0.0), ma.MAFull(0.9, "momentum", 1e-3, window=4)):
        ms, _, rs, _ = run_rule(rule, W)
        state = rule.init(torch.zeros(3, dtype=torch.float64))
        states = [state]
        for t in range(1, 7):
            state = rule.direction(Aggregate(t, rs[t - 1], staleness_weights(W, t)), state).state
            states.append(state)
        branch = rule.direction(Aggregate(6, -rs[5], staleness_weights(W, 6) * 0.5), states[5])  # sibling of step 6
        assert branch.state.written is not states[6].written
        state = states[6]
        for t in range(7, T + 1):  # the main line continues unharmed
            out = rule.direction(Aggregate(t, rs[t - 1], staleness_weights(W, t)), state)
            torch.testing.assert_close(out.direction, ms[t - 1], rtol=0, atol=0)
            state = out.state
    with pytest.raises(ValueError, match="stale"):  # its ring slots were overwritten by steps 7..12
        rule.direction(Aggregate(6, rs[5], staleness_weights(W, 6)), states[5])


# ----------------------------------------------------------------------------------------------
# window
@pytest.mark.parametrize("ridge", [0.0, 1e-3])
def test_window_at_least_t_is_exactly_unwindowed(ridge):
    rng = np.random.default_rng(6)
    T = 15
    W = weight_matrix(fedbuff_counts(rng, T, K=8, C=2), 0.5, 2)
    full = ma.coefficient_matrix_full(W, "momentum", 0.9, ridge)
    np.testing.assert_array_equal(ma.coefficient_matrix_full(W, "momentum", 0.9, ridge, window=T), full)
    np.testing.assert_array_equal(ma.coefficient_matrix_full(W, "momentum", 0.9, ridge, window=100), full)
    _, unwindowed, _, _ = run_rule(ma.MAFull(0.9, "momentum", ridge), W)
    _, windowed, _, _ = run_rule(ma.MAFull(0.9, "momentum", ridge, window=T), W)
    for a, b in zip(unwindowed, windowed):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("ridge", [0.0, 1e-2])
def test_small_window_solves_the_restricted_problem_and_bounds_history(ridge):
    # windowed a_t = argmin over a supported on the last L steps of ‖aᵀ W_{1:t,1:t} − M[t,:]‖² + λ‖a‖²
    rng = np.random.default_rng(7)
    T, L = 20, 4
    W = weight_matrix(fedbuff_counts(rng, T, K=10, C=2), 0.0, 2)
    M = loop_target("momentum", 0.9, T)
    A = ma.coefficient_matrix_full(W, "momentum", 0.9, ridge, window=L)
    for t in range(1, T + 1):
        n = min(L, t)
        S = W[t - n : t, :t]  # all t columns, nothing trimmed
        if ridge:
            expected = np.linalg.inv(S @ S.T + ridge * np.eye(n)) @ S @ M[t - 1, :t]
        else:
            expected = np.linalg.lstsq(S.T, M[t - 1, :t], rcond=None)[0]
        np.testing.assert_allclose(A[t - 1, t - n : t], expected, rtol=1e-8, atol=1e-10)
        assert not np.any(A[t - 1, : t - n])
    _, coefs, _, state = run_rule(ma.MAFull(0.9, "momentum", ridge, window=L), W)
    assert len(state.history) == L and len(state.rows) == L
    np.testing.assert_allclose(np.array([np.pad(c, (0, T - len(c))) for c in coefs]), A, rtol=1e-12, atol=1e-12)


# ----------------------------------------------------------------------------------------------
# random FedBuff staleness patterns
def random_patterns(seed: int, count: int):
    rng = np.random.default_rng(seed)
    for _ in range(count):
        C = int(rng.integers(1, 6))
        K = int(C * rng.uniform(1, 6))
        p = float(rng.choice([0.0, 0.5, 1.0]))
        T = int(rng.integers(10, 30))
        beta = float(rng.choice([0.5, 0.7, 0.9]))
        counts = fedbuff_counts(rng, T, K, C, str(rng.choice(["exp", "lognormal"])))
        mean_staleness = float((counts * np.arange(T)).sum() / counts.sum())
        yield weight_matrix(counts, p, C), beta, mean_staleness


@pytest.mark.parametrize("kind", KINDS)
def test_random_patterns_full_dominates_and_light_usually_beats_momentum(kind):
    worse, stale, worst = 0, 0, 0.0
    for W, beta, mean_staleness in random_patterns(seed=11, count=400):
        M = ma.target_matrix(kind, beta, W.shape[0])
        A_full = ma.coefficient_matrix_full(W, kind, beta, ridge=0.0)
        A_light = ma.coefficient_matrix_light(W, kind, beta)
        res = {name: np.linalg.norm(A @ W - M, axis=1) for name, A in [("full", A_full), ("light", A_light), ("naive", M)]}
        # MA-full (λ = 0) is the least-squares optimum of every row: both others are candidates
        assert np.all(res["full"] <= res["light"] + 1e-9)
        assert np.all(res["full"] <= res["naive"] + 1e-9)
        if mean_staleness >= 1:
            stale += 1
            excess = ma.relative_bias(A_light, W, M) - ma.relative_bias(M, W, M)
            if excess > 1e-12:
                worse, worst = worse + 1, max(worst, excess)
    assert stale > 300
    # Observed (seed 11: 400 patterns, 333 with mean staleness ≥ 1): momentum 0 worse; Nesterov
    # 1 worse (0.3 %), worst excess 0.0045. Wider runs (seed 2, 1500 patterns, 1222 with mean
    # staleness ≥ 1): momentum 0 worse (13 of 1500 when nearly fresh ones are included, worst
    # +0.067); Nesterov 6 worse (0.5 %), worst +0.002 (21 of 1500 with the fresh ones, worst +0.034).
    # Nesterov fits the heavy-ball buffer and adds the look-ahead (MALight); the earlier direct fit
    # of the Nesterov row was worse in 2.9 % of the seed-2 patterns (worst +0.056). docs/server-rules.md
    # reports ~1 in 900 worse for momentum: so no "always".
    limit, worst_limit = 0.01, 0.1
    assert worse / stale <= limit, (worse, stale, worst)
    assert worst <= worst_limit, (worse, stale, worst)


# ----------------------------------------------------------------------------------------------
# MA-light degenerate cases
def test_light_first_step_only_u_is_free():
    u, v = ma.ma_light_coefficients(np.array([0.5]), np.zeros(0), np.array([1.9]))
    assert v == 0.0 and u == pytest.approx(1.9 / 0.5)


def test_light_general_case_matches_normal_equations():
    rng = np.random.default_rng(8)
    w, b, m = rng.normal(size=6), rng.normal(size=5), rng.normal(size=6)
    X = np.stack([w, np.append(b, 0.0)], axis=1)
    expected = np.linalg.solve(X.T @ X, X.T @ m)
    np.testing.assert_allclose(ma.ma_light_coefficients(w, b, m), expected, rtol=1e-10)


@pytest.mark.parametrize(
    "w,b",
    [
        (np.array([0.2, 0.4, 0.0]), np.array([0.4, 0.8])),  # collinear: b = 2 w
        (np.array([0.2, 0.4, 0.0]), np.array([-0.1, -0.2])),  # collinear, opposite sign
        (np.zeros(3), np.array([0.3, 0.6])),  # all-zero W row: nothing arrived
        (np.array([0.1, 0.0, 0.7]), np.zeros(2)),  # b_{t−1} = 0
    ],
    ids=["collinear", "anti-collinear", "zero-row", "zero-buffer"],
)
def test_light_rank_deficient_is_minimum_norm(w, b):
    m = ma.target_row("momentum", 0.9, 3)
    X = np.stack([w, np.append(b, 0.0)], axis=1)
    expected = np.linalg.lstsq(X, m, rcond=None)[0]  # numpy's minimum-norm solution
    np.testing.assert_allclose(ma.ma_light_coefficients(w, b, m), expected, atol=1e-12)


def test_light_both_columns_zero():
    assert ma.ma_light_coefficients(np.zeros(2), np.zeros(1), np.ones(2)) == (0.0, 0.0)


# ----------------------------------------------------------------------------------------------
# rules vs offline matrices
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("ridge,window", [(0.0, None), (1e-3, None), (0.0, 5), (1e-3, 5)])
def test_full_rule_matches_offline_and_is_R_a(kind, ridge, window):
    rng = np.random.default_rng(9)
    T = 18
    W = weight_matrix(fedbuff_counts(rng, T, K=9, C=3), 0.5, 3)
    ms, coefs, rs, _ = run_rule(ma.MAFull(0.8, kind, ridge, window), W, noisy_length=T + 3)
    A = ma.coefficient_matrix_full(W, kind, 0.8, ridge, window)
    for t in range(1, T + 1):
        np.testing.assert_array_equal(coefs[t - 1], A[t - 1, :t])
        expected = sum(float(A[t - 1, s]) * rs[s] for s in range(t))  # m_t = R a_t
        torch.testing.assert_close(ms[t - 1], expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind", KINDS)
def test_light_rule_matches_offline(kind):
    rng = np.random.default_rng(10)
    T = 18
    W = weight_matrix(fedbuff_counts(rng, T, K=9, C=3), 1.0, 3)
    ms, coefs, rs, state = run_rule(ma.MALight(0.8, kind), W)
    A, uv = ma.light_recursion(W, kind, 0.8)
    np.testing.assert_array_equal(np.array(coefs), uv)
    np.testing.assert_array_equal(ma.light_matrix_from_uv(uv, kind, 0.8), A)
    buffer_rows = ma.light_matrix_from_uv(uv)  # Ã: the weights of the buffer h̃_t
    if kind == "nesterov":
        np.testing.assert_allclose(A, np.eye(T) + 0.8 * buffer_rows, rtol=1e-15)
    np.testing.assert_allclose(state.b, buffer_rows[-1] @ W, atol=1e-12)  # b_T = Wᵀ ã_T
    for t in range(1, T + 1):
        expected = sum(float(A[t - 1, s]) * rs[s] for s in range(t))
        torch.testing.assert_close(ms[t - 1], expected, rtol=1e-10, atol=1e-10)


def test_version_row_ignores_versions_before_one():
    np.testing.assert_array_equal(ma.version_row(np.array([1.0, 2.0, 3.0, 4.0]), 2), [2.0, 1.0])
    np.testing.assert_array_equal(ma.version_row(np.array([1.0]), 3), [0.0, 0.0, 1.0])


@pytest.mark.parametrize("rule", [ma.MAFull(0.9, "momentum", 0.0), ma.MAFull(0.9, "nesterov", 1e-3, 6), ma.MALight(0.9, "nesterov")])
def test_rules_survive_noisy_weights(rule):
    # privacy: Ŵ rows are noisy, with negative entries and rows not summing to 1 (docs/privacy.md)
    rng = np.random.default_rng(12)
    T, L = 40, 8
    state = rule.init(torch.zeros(4, dtype=torch.float64))
    for t in range(1, T + 1):
        weights = rng.normal(0.0, 0.3, L)
        weights[0] += 0.2
        out = rule.direction(Aggregate(t, torch.randn(4, dtype=torch.float64), weights), state)
        state = out.state
        assert torch.isfinite(out.direction).all() and np.all(np.isfinite(out.coefficients))


# ----------------------------------------------------------------------------------------------
# configuration, state as data
def test_the_ma_components_build_their_rules_from_their_own_keys():
    keys = {"server.rule": "ma-full", "server.beta": 0.7, "server.ma_target": "nesterov", "server.ma_ridge": 0.01,
            "server.ma_window": 3}
    full = make_rule(make_scenario(keys))
    assert isinstance(full, ma.MAFull) and (full.beta, full.target, full.ridge, full.window) == (0.7, "nesterov", 0.01, 3)
    light = make_rule(make_scenario({**keys, "server.rule": "ma-light", "server.ma_ridge": None, "server.ma_window": None}))
    assert isinstance(light, ma.MALight) and (light.beta, light.target) == (0.7, "nesterov")
    with pytest.raises(ValueError, match="ma target"):
        ma.MALight(0.5, "adam")


def test_state_round_trips_through_a_checkpoint(tmp_path):
    rng = np.random.default_rng(13)
    W = weight_matrix(fedbuff_counts(rng, 10, K=6, C=2), 0.5, 2)
    for rule in (ma.MAFull(0.9, "momentum", 1e-3, 4), ma.MALight(0.9, "momentum")):
        state = rule.init(torch.zeros(3, dtype=torch.float64))
        for t in range(1, 6):
            state = rule.direction(Aggregate(t, torch.ones(3, dtype=torch.float64) * t, staleness_weights(W, t)), state).state
        torch.save(state._asdict(), tmp_path / "s.pt")
        loaded = type(state)(**torch.load(tmp_path / "s.pt", weights_only=False))
        agg = Aggregate(6, torch.ones(3, dtype=torch.float64), staleness_weights(W, 6))
        a, b = rule.direction(agg, state), rule.direction(agg, loaded)
        torch.testing.assert_close(a.direction, b.direction, rtol=0, atol=0)
        with pytest.raises(ValueError, match="expected step 6"):
            rule.direction(agg._replace(step=8), state)


# ----------------------------------------------------------------------------------------------
# bias report
def test_bias_report_matches_explicit_loops(tmp_path):
    rng = np.random.default_rng(14)
    T, C, p, beta, kind = 14, 3, 0.5, 0.8, "momentum"
    counts = fedbuff_counts(rng, T, K=12, C=C)
    W = loop_weight_matrix(counts, p, C)
    M = loop_target(kind, beta, T)

    # independent MA-full (λ = 0, per row min-norm least squares) and MA-light (per-row
    # min-norm least squares on [W[t,:], b_{t−1}] over all T columns, the recursion written out;
    # early rows here are collinear, e.g. every update of step 2 came from version 1)
    A_full = np.zeros((T, T))
    for t in range(1, T + 1):
        A_full[t - 1, :t] = np.linalg.lstsq(W[:t, :t].T, M[t - 1, :t], rcond=None)[0]
    A_light, prev, uvs = np.zeros((T, T)), np.zeros(T), []
    for t in range(1, T + 1):
        w, b, m = W[t - 1], prev @ W, M[t - 1]
        u, v = np.linalg.lstsq(np.stack([w, b], axis=1), m, rcond=None)[0]
        A_light[t - 1] = v * prev
        A_light[t - 1, t - 1] = u
        prev = A_light[t - 1]
        uvs.append([u, v])

    def frob(X):
        return math.sqrt(sum(x * x for x in X.ravel()))

    expected = {
        "none": frob(W - np.eye(T)) / frob(np.eye(T)),
        "momentum": frob(M @ W - M) / frob(M),
        "ma_full": frob(A_full @ W - M) / frob(M),
        "ma_light": frob(A_light @ W - M) / frob(M),
    }
    report = bias_report(counts, p, C, beta, kind, ridge=0.0)
    for key, value in expected.items():
        assert report[key] == pytest.approx(value, rel=1e-9, abs=1e-12), key
    amp = {"none": frob(np.eye(T)) / frob(M), "momentum": 1.0, "ma_full": frob(A_full) / frob(M), "ma_light": frob(A_light) / frob(M)}
    for key, value in amp.items():
        assert report["amplification"][key] == pytest.approx(value, rel=1e-9), key
    for t in range(T):
        row = A_light[t] @ W - M[t]
        assert report["per_row"]["ma_light"][t] == pytest.approx(np.sqrt(row @ row) / np.sqrt(M[t] @ M[t]), rel=1e-9, abs=1e-12)
        assert report["per_row"]["none"][t] == pytest.approx(np.linalg.norm(W[t] - np.eye(T)[t]), rel=1e-12)
    np.testing.assert_allclose(report["a_light"], uvs, rtol=1e-9)

    # the coefficients a run actually used replace the offline ones
    used = bias_report(counts, p, C, beta, kind, ridge=0.0, used_light=uvs, used_full=[A_full[t, : t + 1] for t in range(T)])
    assert used["ma_full"] == pytest.approx(expected["ma_full"], rel=1e-12)
    assert used["ma_light"] == pytest.approx(expected["ma_light"], rel=1e-12)
    assert report["ma_full"] <= report["ma_light"] + 1e-12 and report["ma_full"] < report["momentum"]

    path = draw_bias_heatmaps(W, M, A_full, A_light, tmp_path / "bias.png")
    assert path.stat().st_size > 1000 and path.read_bytes()[:4] == b"\x89PNG"


def test_bias_report_nesterov_light_is_heavy_ball_fit_plus_look_ahead():
    # independent: fit the heavy-ball row with min-norm least squares on [W[t,:], b_{t−1}] over all
    # T columns, then A_light = I + β Ã (m_t = r_t + β h̃_t)
    rng = np.random.default_rng(15)
    T, C, p, beta = 16, 2, 0.5, 0.7
    counts = fedbuff_counts(rng, T, K=10, C=C)
    W = loop_weight_matrix(counts, p, C)
    M_mom, M_nest = loop_target("momentum", beta, T), loop_target("nesterov", beta, T)
    A_h, prev, uvs = np.zeros((T, T)), np.zeros(T), []
    for t in range(1, T + 1):
        u, v = np.linalg.lstsq(np.stack([W[t - 1], prev @ W], axis=1), M_mom[t - 1], rcond=None)[0]
        A_h[t - 1] = v * prev
        A_h[t - 1, t - 1] = u
        prev = A_h[t - 1]
        uvs.append([u, v])
    A = np.eye(T) + beta * A_h
    report = bias_report(counts, p, C, beta, "nesterov", ridge=1e-3)
    np.testing.assert_allclose(report["a_light"], uvs, rtol=1e-9, atol=1e-12)
    assert report["ma_light"] == pytest.approx(np.linalg.norm(A @ W - M_nest) / np.linalg.norm(M_nest), rel=1e-9)
    assert report["amplification"]["ma_light"] == pytest.approx(np.linalg.norm(A) / np.linalg.norm(M_nest), rel=1e-9)
    used = bias_report(counts, p, C, beta, "nesterov", ridge=1e-3, used_light=uvs)
    assert used["ma_light"] == pytest.approx(report["ma_light"], rel=1e-12)
    assert report["ma_light"] < report["momentum"]


def test_ma_full_history_slots_not_yet_written_are_zero_not_leftover_memory():
    """The history grows by doubling; the slots a step has not written yet are part of the
    checkpointed state, so they hold zeros (a NaN left in uninitialised memory once failed the
    equality of a restored state)."""
    rule = ma.MAFull(0.9, "momentum", 1e-3, None)
    state = rule.init(torch.zeros(4, dtype=torch.float64))
    for t in range(1, 6):  # capacity 8 after the first step: slots 5, 6, 7 unwritten
        state = rule.direction(Aggregate(t, torch.full((4,), float(t), dtype=torch.float64), np.eye(t)[-1]), state).state
    assert state.history.shape[0] == 8
    assert torch.equal(state.history[:5, 0], torch.arange(1.0, 6.0, dtype=torch.float64))
    assert torch.count_nonzero(state.history[5:]) == 0
