"""Momentum approximation (MA): choose the weights ``a_t`` of the history of aggregates so that
the effective weights ``A W`` on the clients' gradients match the intended momentum weights
``M`` (docs/server-rules.md; the method of *Momentum Approximation in Asynchronous Private Federated Learning*, Zhang et al., 2024, Eq. 9–15).

Indexing. The math of docs/protocol.md §7, docs/server-rules.md is 1-based (steps ``t, s = 1, …, T``). Arrays here are
0-based: ``W[t-1, s-1]`` is ``W[t, s]`` and ``a[s-1]`` is ``a_t[s]``. A *row* of step ``t``
always has length ``t`` (columns ``s = 1..t``).

The module has two layers:

* pure math on numpy float64 (:func:`target_matrix`, :func:`target_row`,
  :func:`ma_full_coefficients`, :func:`ma_full_window_coefficients`,
  :func:`ma_light_coefficients`, the offline :func:`coefficient_matrix_full` /
  :func:`coefficient_matrix_light` and the measures :func:`relative_bias`,
  :func:`row_bias`, :func:`noise_amplification`);
* the two server rules :class:`MAFull` and :class:`MALight` (``asyncfl.server.rules.ServerRule``),
  which see only ``Aggregate(step, r, weights)`` and build their rows of ``W`` themselves.

The step-by-step rules and the offline functions call the same solvers on the same numbers, so
``coefficient_matrix_*`` on the ``W`` the rules saw reproduces the coefficients they used.

Windowed MA-full (window ``L``): at step ``t`` only the last ``n = min(L, t)`` aggregates
``r_{t-n+1..t}`` are kept, so ``a_t`` is supported on ``S = {t-n+1, …, t}``::

    a_t = argmin_{a : supp(a) ⊆ S}  ‖aᵀ W_{1:t,1:t} − M[t,1:t]‖² + λ‖a‖²
        = argmin_{a_S}  ‖a_Sᵀ W[S, lo..t] − M[t, lo..t]‖² + λ‖a_S‖²,

where ``lo`` is the first column that some row of ``S`` reaches (no row of ``S`` has a nonzero
entry left of ``lo``, so those columns only add a constant to the objective), but never right
of ``t−n+1``. With ``L ≥ t`` this is literally the unwindowed problem, and both the rule and
the offline matrix then take the incremental path below, so the results are equal bit for bit.
The rule stores the last ``L`` rows of ``W`` indexed by staleness, so its memory is
``O(L·d + L·τ_max + L²)``; a step costs ``O(L·d + L³)``.

Incremental MA-full (no window, or ``t ≤ L``; :func:`band_push`, :func:`band_solve`;
docs/server-rules.md §4, "Incremental solver" and "Banded solver"). With ``λ > 0`` the Cholesky
factor ``F_t`` of ``G_t = W_{1:t,1:t} W_{1:t,1:t}ᵀ + λI`` is kept from step to step. ``W`` is
lower triangular, so row ``t`` only borders ``G``::

    G_t = [[G_{t−1}, g], [gᵀ, γ]],  g = W_{1:t−1,1:t−1} w_t,  γ = ‖w_t‖² + λ,
    F_t = [[F_{t−1}, 0], [lᵀ, √(γ − ‖l‖²)]],  F_{t−1} l = g,

and ``a_t = F_t⁻ᵀ F_t⁻¹ (W_{1:t,1:t} M[t,1:t]ᵀ)``. When every staleness seen so far is at most
``b``, ``W`` has lower bandwidth ``b`` (``W[s, s−τ] = 0`` for ``τ > b``), hence so have ``G`` and
``F`` — exactly: Cholesky makes no fill-in outside the band of ``G``. Both are kept as bands
(``O(t·b)`` memory), the bordering costs ``O(b²)`` and the solve (banded ``W m``, two banded
triangular solves) ``O(t·b)`` per step; a larger staleness widens the bands with exact zeros.
This replaced a dense ``W`` and a packed dense factor (``O(t²)`` memory and time per step): the
same equations, so the same ``a_t`` up to the round-off of a different order of operations
(tests/test_ma.py; the golden runs are unchanged). With ``λ = 0``: banded back substitution on
``W`` (``O(t·b)``), or ``numpy.linalg.lstsq`` on the dense ``W`` (``O(t³)``, kept) when the
diagonal is not safe.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, Sequence

import numpy as np
import scipy.linalg
import scipy.linalg.blas
import scipy.linalg.lapack
import torch
from threadpoolctl import ThreadpoolController

from asyncfl.server.aggregation import Aggregate
from asyncfl.server.rules import RuleOutput, ServerRule, lookahead

TargetKind = Literal["momentum", "nesterov"]
#: each MA target and whether it adds Nesterov's look-ahead ``r_t + β h_t`` to the heavy-ball
#: buffer ``h`` (``M_nest = I + β M_mom``, docs/server-rules.md §3): the one place that says so
LOOKAHEAD: dict[str, bool] = {"momentum": False, "nesterov": True}
TARGETS: tuple[str, ...] = tuple(LOOKAHEAD)

#: MA-light treats the 2-column system ``[W[t,:], b_{t−1}]`` as rank-deficient when, in its QR
#: with the longer column first, ``|r22|`` is at most this fraction of ``|r11|`` (collinear
#: columns; ``σ_min/σ_max`` up to a factor ≤ 2), and as zero when both columns are 0.
LIGHT_RANK_RTOL = 1e-10


# ----------------------------------------------------------------------------------------------
# targets
def _check_kind(kind: str) -> None:
    if kind not in TARGETS:
        raise ValueError(f"ma target {kind!r}: unknown. Allowed: {', '.join(TARGETS)}")


def has_lookahead(kind: str) -> bool:
    """Whether the target ``kind`` adds Nesterov's look-ahead to the heavy-ball buffer (:data:`LOOKAHEAD`)."""
    _check_kind(kind)
    return LOOKAHEAD[kind]


def _target_weights(kind: str, beta: float, lag: np.ndarray) -> np.ndarray:
    """``M[t, s]`` as a function of the lag ``t − s ≥ 0`` (shared by the row and the matrix so
    that both give the same bits)."""
    lag = np.asarray(lag, dtype=np.float64)
    if not has_lookahead(kind):
        return np.power(beta, lag)
    return np.where(lag == 0, 1.0 + beta, np.power(beta, lag + 1.0))


def target_matrix(kind: TargetKind, beta: float, T: int) -> np.ndarray:
    """The T×T lower-triangular target ``M`` (docs/server-rules.md), 0-based ``M[t-1, s-1]``.

    momentum: ``M[t,s] = β^(t−s)``; nesterov: ``M[t,t] = 1+β`` and ``M[t,s] = β^(t−s+1)`` for
    ``s < t``; ``M[t,s] = 0`` for ``s > t``.
    """
    i, j = np.tril_indices(T)
    M = np.zeros((T, T))
    M[i, j] = _target_weights(kind, beta, i - j)
    return M


def target_row(kind: TargetKind, beta: float, t: int) -> np.ndarray:
    """Row ``t`` (1-based) of ``M`` over ``s = 1..t`` (length ``t``)."""
    return _target_weights(kind, beta, np.arange(t - 1, -1, -1))


# ----------------------------------------------------------------------------------------------
# MA-full
def _diagonal_is_safe(W: np.ndarray) -> bool:
    """A square lower-triangular ``W`` is solved by back substitution only when every pivot is
    larger than ``n·eps·max|W|`` — the scale below which ``numpy.linalg.lstsq`` (default
    ``rcond``) would also treat a singular value as zero. Otherwise min-norm least squares."""
    return _pivots_are_safe(np.diag(W), float(np.max(np.abs(W), initial=0.0)), W.shape[0])


def _pivots_are_safe(diag: np.ndarray, scale: float, n: int) -> bool:
    """:func:`_diagonal_is_safe` from the diagonal and ``max|W|`` (the banded solver has no dense W)."""
    return scale > 0.0 and bool(np.min(np.abs(diag)) > n * np.finfo(np.float64).eps * scale)


def ma_full_coefficients(W: np.ndarray, m_row: np.ndarray, ridge: float) -> np.ndarray:
    """``a = argmin_a ‖aᵀ W − m‖² + λ‖a‖²`` (docs/server-rules.md, MA-full).

    ``W`` is the ``n×c`` block of rows of ``W`` that ``a`` weights (``W_{1:t,1:t}``, lower
    triangular, in the unwindowed case) and ``m`` the matching part of ``M[t,:]``.

    * ``λ > 0``: ``a = (W Wᵀ + λI)⁻¹ W m`` (a Cholesky solve, never an inverse);
    * ``λ = 0``, ``W`` square lower triangular with a safe diagonal (see
      :func:`_diagonal_is_safe`): ``Wᵀ a = m`` by back substitution, i.e. ``aᵀ = m W⁻¹``;
    * ``λ = 0`` otherwise: the minimum-norm least-squares solution (``numpy.linalg.lstsq``).
    """
    # C-contiguous copies: LAPACK results depend (in the last bit) on memory layout, and the rule
    # and the offline matrix must give the same bits for the same numbers
    W = np.ascontiguousarray(W, dtype=np.float64)
    m = np.ascontiguousarray(m_row, dtype=np.float64)
    if ridge < 0:
        raise ValueError(f"ridge = {ridge}: must be ≥ 0")
    if ridge > 0:
        gram = W @ W.T + ridge * np.eye(W.shape[0])
        return scipy.linalg.solve(gram, W @ m, assume_a="pos")
    n, c = W.shape
    if n == c and not np.any(np.triu(W, 1)) and _diagonal_is_safe(W):
        return scipy.linalg.solve_triangular(W.T, m, lower=False)
    return np.linalg.lstsq(W.T, m, rcond=None)[0]


def _solve_window(block: np.ndarray, col0: int, m_row: np.ndarray, ridge: float) -> np.ndarray:
    """The windowed problem of the module docstring. ``block`` holds the ``n`` kept rows of ``W``
    (steps ``t−n+1..t``) over the 0-based columns ``col0..t−1``; ``m_row = M[t, 1..t]``.
    Returns ``a_S`` (length ``n``). Shared by the rule and the offline matrix."""
    n, width = block.shape
    t = col0 + width
    start = t - n  # 0-based column of the first kept step
    lead = block[:, : max(start - col0, 0)]
    reached = np.flatnonzero(lead.any(axis=0))
    lo = col0 + int(reached[0]) if reached.size else start
    return ma_full_coefficients(block[:, lo - col0 :], m_row[lo:], ridge)


def ma_full_window_coefficients(W: np.ndarray, m_row: np.ndarray, ridge: float, window: int | None) -> np.ndarray:
    """Windowed MA-full on the t×t ``W = W_{1:t,1:t}``: ``a_t`` (length ``t``) supported on the
    last ``min(L, t)`` steps, zeros elsewhere (module docstring), solved directly. ``window=None``
    or ``L ≥ t`` is :func:`ma_full_coefficients` on the whole ``W``: the same solution as the
    incremental path to round-off (not bit for bit)."""
    W = np.asarray(W, dtype=np.float64)
    t = W.shape[0]
    n = t if window is None else min(window, t)
    a = np.zeros(t)
    a[t - n :] = _solve_window(W[t - n :, :], 0, np.asarray(m_row, dtype=np.float64), ridge)
    return a


def _empty_band() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((0, 0)), np.zeros((0, 0))


def _widened(band: np.ndarray, rows: int, width: int) -> np.ndarray:
    """``band`` with at least ``rows`` rows (capacity doubled, at least 8) and exactly
    ``max(width, its own)`` columns; new columns are added on the left (the diagonal stays the
    last column) and are zero, new rows are zero."""
    cap, have = band.shape
    new_width = max(width, have)
    if cap >= rows and have == new_width:
        return band
    new_cap = cap
    if rows > cap:
        new_cap = max(8, 2 * cap)
        while new_cap < rows:
            new_cap *= 2
    out = np.zeros((new_cap, new_width))
    out[:cap, new_width - have :] = band
    return out


def band_dense(band: np.ndarray, t: int) -> np.ndarray:
    """The dense ``t×t`` lower-triangular matrix of the first ``t`` rows of a band
    (:func:`band_push`'s layout ``band[i, j] = X[i, i−b+j]``, ``b = width − 1``), for checks and
    for the ``λ = 0`` least-squares fallback."""
    b = band.shape[1] - 1
    i, j = np.meshgrid(np.arange(t), np.arange(b + 1), indexing="ij")
    col = i - b + j
    ok = col >= 0
    X = np.zeros((t, t))
    X[i[ok], col[ok]] = band[:t][ok]
    return X


def _band_block(band: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """The dense lower-triangular block ``X[lo:hi, lo:hi]`` of a band, ``hi − lo ≤ b``."""
    b = band.shape[1] - 1
    n = hi - lo
    r, c = np.tril_indices(n)
    block = np.zeros((n, n))
    block[r, c] = band[lo + r, b - r + c]
    return block


def band_push(
    w_band: np.ndarray, l_band: np.ndarray, by_staleness: np.ndarray, t: int, ridge: float
) -> tuple[np.ndarray, np.ndarray]:
    """Add row ``t`` (1-based; ``by_staleness[τ] = W[t, t−τ]``, entries with ``τ ≥ t`` ignored)
    to the banded MA-full solver (docs/server-rules.md §4, "Banded solver").

    Layout: with ``b`` = the band's width − 1 (the largest staleness seen so far),
    ``w_band[i, j] = W[i, i−b+j]`` and ``l_band[i, j] = F[i, i−b+j]`` (0-based rows, the diagonal in
    the last column, zeros left of column 0), where ``F_t F_tᵀ = G_t = W_t W_tᵀ + λI``. ``W`` has
    lower bandwidth ``b``, hence so has ``G`` (``G[i, j] = Σ_k W[i,k] W[j,k] = 0`` for
    ``i − j > b``) and so has ``F`` — exactly, there is no fill-in outside the band. The bordering
    of the module docstring is therefore done on the band::

        g = W[lo:t−1, lo:t−1] w̄,   F[lo:t−1, lo:t−1] l = g,   F[t, t] = √(‖w_t‖² + λ − ‖l‖²)

    with ``lo`` the first version ``w_t`` reaches (``t − 1 − lo ≤ b``): ``O(b²)`` per step, memory
    ``O(t·b)`` (row capacity doubled as needed). A staleness above ``b`` widens both bands to it
    (zero columns on the left: the entries it adds are exact zeros of ``W`` and ``F``, no
    re-factorisation). ``band[:t].T`` is LAPACK's upper band storage of ``Wᵀ`` and
    ``Fᵀ`` (``ab[b + r − c, c] = Xᵀ[r, c]``) without a copy: :func:`band_solve` uses it.

    Returns the (possibly regrown) arrays, written in place: rows ``< t`` are never changed except
    by a widening (which copies). Raises ``numpy.linalg.LinAlgError`` when ``‖w_t‖² + λ − ‖l‖² ≤ 0``
    (``λ`` too small for round-off; a direct Cholesky would fail too)."""
    w = np.asarray(by_staleness, dtype=np.float64)[:t]
    nz = np.flatnonzero(w)
    need = int(nz[-1]) if nz.size else 0
    w = np.ascontiguousarray(w[: need + 1])  # a strided view would take another order of summation in w @ w
    w_band = _widened(w_band, t, need + 1)
    b = w_band.shape[1] - 1
    i = t - 1
    w_band[i] = 0.0
    w_band[i, b - need :] = w[::-1]
    if ridge == 0:
        return w_band, l_band
    l_band = _widened(l_band, t, b + 1)
    row = l_band[i]
    row[:] = 0.0
    older = np.flatnonzero(w[1:])
    n = int(older[-1]) + 1 if older.size else 0  # lo = t − 1 − n (0-based)
    lo = i - n
    l = np.zeros(0)
    if n:
        g = _band_block(w_band, lo, i) @ np.ascontiguousarray(w[n:0:-1])
        l = scipy.linalg.solve_triangular(_band_block(l_band, lo, i), g, lower=True, check_finite=False)
        row[b - n : b] = l
    pivot = float(w @ w) + ridge - float(l @ l)
    if not pivot > 0.0:
        raise np.linalg.LinAlgError(f"MA-full step {t}: W Wᵀ + λI not positive definite in round-off (λ = {ridge})")
    row[b] = np.sqrt(pivot)
    return w_band, l_band


_BLAS: list[ThreadpoolController] = []  # made on first use: building one scans the loaded libraries (~1 ms)


def _one_blas_thread() -> Any:
    """A context in which BLAS and LAPACK run on one thread. The banded products and solves are
    ``O(t·b)``: OpenBLAS splits them over threads, which costs far more than it saves (on the
    loaded 2-core machine of docs/performance.md a step at ``t = 2000`` took 2.6 ms of CPU on two
    threads and 0.19 ms on one), and the split would depend on the machine's thread count."""
    if not _BLAS:
        _BLAS.append(ThreadpoolController())
    return _BLAS[0].limit(limits=1, user_api="blas")


def band_solve(w_band: np.ndarray, l_band: np.ndarray, t: int, m_row: np.ndarray, ridge: float) -> np.ndarray:
    """``a_t`` (length ``t``) from the banded solver after :func:`band_push` of row ``t``:

    * ``λ > 0``: ``a = F⁻ᵀ F⁻¹ (W_t M[t,:]ᵀ)`` — ``W_t m`` by BLAS ``dtbmv`` and the two banded
      triangular solves by LAPACK ``dpbtrs``, ``O(t·b)``;
    * ``λ = 0`` with a safe diagonal (:func:`_diagonal_is_safe`: every ``|W[s,s]| >
      t·eps·max|W_t|``): ``W_tᵀ a = M[t,:]ᵀ`` by banded back substitution (``dtbtrs``), ``O(t·b)``;
    * ``λ = 0`` otherwise: the minimum-norm least squares of :func:`ma_full_coefficients` on the
      dense ``W_t`` rebuilt from the band (``O(t²)`` memory and ``O(t³)`` time for that step, as
      a direct solve).

    ``a_t`` has full support in general (``G_t⁻¹`` of a banded ``G`` is dense), so the history of
    ``r_s`` and ``a_t`` stay ``O(t)`` per step."""
    with _one_blas_thread():
        return _band_solve(w_band, l_band, t, np.ascontiguousarray(m_row, dtype=np.float64), ridge)


def _band_solve(w_band: np.ndarray, l_band: np.ndarray, t: int, m: np.ndarray, ridge: float) -> np.ndarray:
    b = w_band.shape[1] - 1
    wT = w_band[:t].T  # upper band storage of W_tᵀ, Fortran-ordered
    if ridge == 0:
        if _pivots_are_safe(w_band[:t, b], float(np.max(np.abs(w_band[:t]), initial=0.0)), t):
            a, info = scipy.linalg.lapack.dtbtrs(wT, m[:, None], uplo="U", trans="N")
            if info != 0:
                raise np.linalg.LinAlgError(f"MA-full step {t}: dtbtrs info = {info}")
            return a[:, 0]
        return ma_full_coefficients(band_dense(w_band, t), m, 0.0)
    rhs = scipy.linalg.blas.dtbmv(b, wT, m, lower=0, trans=1)
    a, info = scipy.linalg.lapack.dpbtrs(l_band[:t].T, rhs, lower=0)
    if info != 0:
        raise np.linalg.LinAlgError(f"MA-full step {t}: dpbtrs info = {info}")
    return a


def coefficient_matrix_full(
    W: np.ndarray, kind: TargetKind, beta: float, ridge: float, window: int | None = None
) -> np.ndarray:
    """``A`` (T×T, row ``t`` = ``a_t``) that MA-full uses on the recorded ``W``, step by step, with
    the rule's code: the banded incremental solver (:func:`band_push`, :func:`band_solve`) while
    ``window`` is None or ``t ≤ L``, the windowed problem after. ``O(T²·b)`` with ``λ > 0`` for
    the largest staleness ``b`` in ``W`` (``O(T⁴)`` only for ``λ = 0`` with singular ``W``)."""
    W = np.asarray(W, dtype=np.float64)
    T = W.shape[0]
    A = np.zeros((T, T))
    w_band, l_band = _empty_band()
    for t in range(1, T + 1):
        m = target_row(kind, beta, t)
        if window is None or t <= window:
            w_band, l_band = band_push(w_band, l_band, W[t - 1, t - 1 :: -1], t, ridge)
            A[t - 1, :t] = band_solve(w_band, l_band, t, m, ridge)
        else:
            A[t - 1, :t] = ma_full_window_coefficients(W[:t, :t], m, ridge, window)
    return A


# ----------------------------------------------------------------------------------------------
# MA-light
def ma_light_coefficients(w_row: np.ndarray, b_prev: np.ndarray, m_row: np.ndarray) -> tuple[float, float]:
    """``(u, v) = argmin ‖u W[t,:] + v b_{t−1} − M[t,:]‖²`` (docs/server-rules.md, MA-light; paper Eq. 13).

    ``w_row = W[t, 1..t]`` and ``m_row = M[t, 1..t]`` have length ``t``; ``b_prev = b_{t−1}``
    has length ``t−1`` (empty at ``t = 1``) and is padded with a 0 for column ``t``.
    The system ``X = [W[t,:], b_{t−1}]`` is handled by its rank (``LIGHT_RANK_RTOL``):

    * rank 2: the unique least-squares solution;
    * rank 1 (``b_{t−1} = 0`` as at ``t = 1``, ``W[t,:] = 0``, or collinear columns):
      ``X = q kᵀ`` with ``q`` the unit direction of the larger column, and the minimum-norm
      solution ``(u, v) = (qᵀm) k / ‖k‖²`` — with ``b_{t−1} = 0`` this is the 1-variable
      ``u = W[t,:]·m / ‖W[t,:]‖², v = 0``;
    * rank 0 (both zero): ``(0, 0)``.
    """
    w = np.asarray(w_row, dtype=np.float64)
    m = np.asarray(m_row, dtype=np.float64)
    b = np.zeros_like(w)
    b[: len(b_prev)] = b_prev
    # QR of X = [x1, x2] by Gram–Schmidt (re-orthogonalised once), the longer column first; for two
    # columns |r22| / |r11| is the rank test (σ_min/σ_max up to a factor ≤ 2). A few O(t) dots,
    # no SVD / LAPACK call: this is on the per-step path of a rule that must cost like momentum.
    norm_w, norm_b = float(np.sqrt(w @ w)), float(np.sqrt(b @ b))
    if max(norm_w, norm_b) == 0.0:
        return 0.0, 0.0
    w_first = norm_w >= norm_b
    x1, x2, n1 = (w, b, norm_w) if w_first else (b, w, norm_b)
    q1 = x1 / n1
    r12 = float(q1 @ x2)
    y = x2 - r12 * q1
    extra = float(q1 @ y)
    y -= extra * q1
    r12 += extra
    r22 = float(np.sqrt(y @ y))
    if r22 > LIGHT_RANK_RTOL * n1:
        z2 = float(y @ m) / (r22 * r22)
        z1 = (float(q1 @ m) - r12 * z2) / n1
        return (z1, z2) if w_first else (z2, z1)
    # rank 1: X = q kᵀ with q the unit direction of the larger column
    k = np.array([q1 @ w, q1 @ b])
    u, v = float(q1 @ m) * k / (k @ k)
    return float(u), float(v)


def light_fit_kind(kind: TargetKind) -> TargetKind:
    """The target MA-light's ``(u_t, v_t)`` recursion fits: always heavy-ball ``momentum``.

    For ``nesterov`` MA-light fits the heavy-ball buffer ``h`` (target ``M_mom``) and adds
    Nesterov's look-ahead ``m_t = r_t + β h̃_t`` (:class:`MALight`), because ``M_nest = I + β M_mom``
    but a plain ``(u, v)`` fit of the Nesterov row cannot reproduce it even with ``W = I``: row 3
    needs ``v = β`` in column 1 and ``v = β²/(1+β)`` in column 2 (tests/test_ma.py)."""
    _check_kind(kind)
    return "momentum"


def light_recursion(W: np.ndarray, kind: TargetKind, beta: float) -> tuple[np.ndarray, np.ndarray]:
    """MA-light offline on the recorded ``W``: ``(A, uv)`` with ``uv[t-1] = (u_t, v_t)``.

    ``(u_t, v_t)`` fit the heavy-ball target (:func:`light_fit_kind`): ``ã_t = u_t e_t + v_t ã_{t−1}``
    and ``b_t = u_t W[t,:] + v_t b_{t−1} = ã_tᵀ W``. ``A`` is the matrix the rule effectively uses,
    :func:`light_matrix_from_uv` (``A = Ã`` for momentum, ``I + β Ã`` for Nesterov)."""
    W = np.asarray(W, dtype=np.float64)
    T = W.shape[0]
    uv = np.zeros((T, 2))
    b = np.zeros(0)
    for t in range(1, T + 1):
        uv[t - 1] = ma_light_coefficients(W[t - 1, :t], b, target_row(light_fit_kind(kind), beta, t))
        b = _light_buffer(W[t - 1, :t], b, *uv[t - 1])
    return light_matrix_from_uv(uv, kind, beta), uv


def _light_buffer(w_row: np.ndarray, b_prev: np.ndarray, u: float, v: float) -> np.ndarray:
    """``b_t = u W[t,:] + v b_{t−1}`` (``b_{t−1}`` padded with a 0 for column ``t``)."""
    b = u * np.asarray(w_row, dtype=np.float64)
    b[: len(b_prev)] += v * b_prev
    return b


def light_matrix_from_uv(
    uv: np.ndarray | Sequence[Sequence[float]], kind: TargetKind = "momentum", beta: float = 0.0
) -> np.ndarray:
    """``A`` that MA-light uses, from its pairs ``(u_t, v_t)`` (docs/server-rules.md).

    The recursion gives ``Ã`` with rows ``ã_t = u_t e_t + v_t ã_{t−1}``, ``ã_0 = 0`` (the weights
    of the buffer ``h̃_t = u_t r_t + v_t h̃_{t−1}``). ``momentum``: ``A = Ã``; ``nesterov``:
    ``m_t = r_t + β h̃_t``, so ``A = I + β Ã`` (exact for ``W = I``: ``M_nest = I + β M_mom``)."""
    _check_kind(kind)
    uv = np.asarray(uv, dtype=np.float64).reshape(-1, 2)
    T = uv.shape[0]
    A = np.zeros((T, T))
    for t in range(T):
        if t:
            A[t, :t] = uv[t, 1] * A[t - 1, :t]
        A[t, t] = uv[t, 0]
    return np.eye(T) + beta * A if has_lookahead(kind) else A


def coefficient_matrix_light(W: np.ndarray, kind: TargetKind, beta: float) -> np.ndarray:
    """``A`` (T×T) that MA-light effectively uses on the recorded ``W`` (:func:`light_recursion`)."""
    return light_recursion(W, kind, beta)[0]


# ----------------------------------------------------------------------------------------------
# measures (docs/server-rules.md: implicit momentum bias and noise amplification)
def relative_bias(A: np.ndarray, W: np.ndarray, M: np.ndarray) -> float:
    """``‖A W − M‖_F / ‖M‖_F``."""
    return float(np.linalg.norm(A @ W - M) / np.linalg.norm(M))


def row_bias(A: np.ndarray, W: np.ndarray, M: np.ndarray) -> np.ndarray:
    """Per row: ``‖(A W − M)[t,:]‖₂ / ‖M[t,:]‖₂`` (each row relative to its own target row)."""
    return np.linalg.norm(A @ W - M, axis=1) / np.linalg.norm(M, axis=1)


def noise_amplification(A: np.ndarray, M: np.ndarray) -> float:
    """``‖A‖_F / ‖M‖_F`` (1 for naive momentum, ``A = M``)."""
    return float(np.linalg.norm(A) / np.linalg.norm(M))


# ----------------------------------------------------------------------------------------------
# the server rules
def version_row(weights: np.ndarray, t: int) -> np.ndarray:
    """Row ``t`` of ``W`` over versions ``s = 1..t`` from the staleness-indexed
    ``weights[τ] = W[t, t−τ]``; entries with ``τ ≥ t`` (versions < 1) are ignored."""
    w = np.asarray(weights, dtype=np.float64)[:t]
    row = np.zeros(t)
    row[t - 1 - np.arange(len(w))] = w
    return row


class _MARule(ServerRule):
    """What both MA rules share: the target, its validation and the step bookkeeping."""

    def __init__(self, beta: float, target: TargetKind = "momentum") -> None:
        _check_kind(target)
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"beta = {beta}: must be in [0, 1)")
        self.beta, self.target = float(beta), target

    def _next_step(self, aggregate: Aggregate, step: int) -> int:
        t = step + 1
        if aggregate.step != t:
            raise ValueError(f"{type(self).__name__}: got the aggregate of step {aggregate.step}, expected step {t}")
        return t

    def _target_row(self, t: int) -> np.ndarray:
        return target_row(self.target, self.beta, t)


class MAFullState(NamedTuple):
    """Plain data (a checkpoint saves it). ``step`` = last step taken.

    ``history``: ``(capacity, d)`` tensor, ``r_s`` (flattened) in slot ``(s−1) mod capacity``;
    the capacity doubles as needed, up to ``L`` with a window (then it is a ring).
    ``w_band`` and ``l_band``: the bands of ``W_{1:t,1:t}`` and of the Cholesky factor of
    ``W Wᵀ + λI`` (``capacity × (b+1)``, ``b`` the largest staleness seen, layout of
    :func:`band_push`; ``l_band`` stays empty for ``λ = 0``): the incremental solver while
    there is no window or ``step ≤ L``; empty afterwards. ``rows``: with a window, the last ``L`` rows of ``W``
    indexed by staleness (``rows[i][τ] = W[s, s−τ]``). ``written``: a 1-element array shared by
    the states whose buffers are shared: the highest step written into them (copy-on-write)."""

    step: int
    history: torch.Tensor
    w_band: np.ndarray
    l_band: np.ndarray
    rows: tuple[np.ndarray, ...]
    written: np.ndarray


class MAFull(_MARule):
    """MA-full: ``m_t = Σ_s a_t[s] r_s`` (one matrix-vector product over the kept history) with
    ``a_t`` from the incremental solver (no window, or ``t ≤ L``) or the windowed problem (module
    docstring). ``coefficients`` = ``a_t`` (length ``t``, zeros outside the window).

    Per step: ``O(n·d)`` for ``m_t`` (``n = min(L, t)``) plus ``O(t·b + b²)`` (incremental, ``b``
    the largest staleness observed so far; docs/server-rules.md §4 "Banded solver") or ``O(L³)``
    (windowed) for ``a_t``; memory ``O(n·d + t·b)`` (``O(L·d + L²)`` with a window). Without a
    window the history of ``r_s`` stays ``O(t·d)``: ``a_t = G_t⁻¹ W_t M[t,:]ᵀ`` has full support
    in general (the inverse of a banded ``G_t`` is dense), so every ``r_s`` is needed.

    The buffers are written in place (no copy of the history per step: ``in_place_state``, see
    ``asyncfl.server.rules.ServerRule``). States are threaded linearly by the engine; a state
    used again (the same step run twice, a reloaded checkpoint) copies its buffers first, and
    raises when a ring slot it needs has been overwritten."""

    in_place_state = True

    def __init__(self, beta: float, target: TargetKind = "momentum", ridge: float = 1e-3, window: int | None = None) -> None:
        super().__init__(beta, target)
        if ridge < 0:
            raise ValueError(f"ma_ridge = {ridge}: must be ≥ 0")
        if window is not None and window < 1:
            raise ValueError(f"ma_window = {window}: must be ≥ 1 or absent")
        self.ridge, self.window = float(ridge), window

    @classmethod
    def from_config(cls, cfg: Any, ctx: Any = None) -> "MAFull":
        return cls(cfg.beta, cfg.ma_target, cfg.ma_ridge, cfg.ma_window)

    def init(self, theta: torch.Tensor) -> MAFullState:
        history = theta.new_empty((0, theta.numel()))
        return MAFullState(0, history, *_empty_band(), (), np.zeros(1, dtype=np.int64))

    def _own(self, state: MAFullState) -> MAFullState:
        """``state`` itself when its buffers hold nothing newer (the usual case), else private
        copies of them; raises when a later step overwrote a ring slot this state needs."""
        written = int(state.written[0])
        if written == state.step:
            return state
        cap = state.history.shape[0]
        if self.window is not None and cap == self.window and written >= max(state.step + 2, cap + 1):
            raise ValueError(f"MAFull: state of step {state.step} is stale (its ring buffer holds step {written})")
        return state._replace(
            history=state.history.clone(), w_band=state.w_band.copy(), l_band=state.l_band.copy(), written=np.zeros(1, dtype=np.int64)
        )

    def _store(self, history: torch.Tensor, r: torch.Tensor, t: int) -> torch.Tensor:
        """Write ``r_t`` into slot ``(t−1) mod capacity``, doubling the capacity (up to ``L``) first
        when ``t`` exceeds it; before the ring wraps, slot ``s−1`` holds ``r_s``."""
        cap, limit = history.shape[0], self.window or t
        if t > cap and cap < limit:
            new_cap = min(max(8, 2 * cap, t), limit) if self.window else max(8, 2 * cap)
            while new_cap < min(t, limit):
                new_cap *= 2
            # zeros, not empty: the slots not yet written are part of the checkpointed state, which
            # must not hold whatever memory happened to be there (a NaN there fails the equality of
            # a restored state, and the checkpoint's bytes would differ from run to run)
            grown = history.new_zeros((new_cap, history.shape[1]))
            grown[:cap] = history
            history, cap = grown, new_cap
        history[(t - 1) % cap] = r.reshape(-1)
        return history

    def _window_rows(self, rows: tuple[np.ndarray, ...], weights: np.ndarray, t: int) -> tuple[np.ndarray, ...]:
        if self.window is None:
            return ()
        return (rows + (np.asarray(weights, dtype=np.float64)[:t].copy(),))[-self.window :]

    def _windowed(self, rows: tuple[np.ndarray, ...], t: int) -> np.ndarray:
        """``a_S`` of the windowed problem from the kept staleness-indexed rows."""
        n = len(rows)
        steps = range(t - n + 1, t + 1)
        col0 = min([s - len(row) for s, row in zip(steps, rows)] + [t - n])  # 0-based
        block = np.zeros((n, t - col0))
        for i, (s, row) in enumerate(zip(steps, rows)):
            block[i, s - 1 - np.arange(len(row)) - col0] = row
        return _solve_window(block, col0, self._target_row(t), self.ridge)

    def direction(self, aggregate: Aggregate, state: MAFullState) -> RuleOutput:
        t = self._next_step(aggregate, state.step)
        state = self._own(state)
        history = self._store(state.history, aggregate.r, t)
        rows = self._window_rows(state.rows, aggregate.weights, t)
        if self.window is None or t <= self.window:
            w_band, l_band = band_push(state.w_band, state.l_band, aggregate.weights, t, self.ridge)
            a = band_solve(w_band, l_band, t, self._target_row(t), self.ridge)
            n = t
        else:
            w_band, l_band = _empty_band()
            n = self.window
            a = np.zeros(t)
            a[t - n :] = self._windowed(rows, t)
        cap = history.shape[0]
        slot_coef = np.zeros(min(cap, t))
        slot_coef[(np.arange(t - n, t)) % cap] = a[t - n :]  # step s = index + 1 lives in slot (s−1) mod cap
        coef = torch.from_numpy(slot_coef).to(dtype=history.dtype, device=history.device)
        m = (coef @ history[: len(slot_coef)]).reshape(aggregate.r.shape)
        state.written[0] = t
        return RuleOutput(m, MAFullState(t, history, w_band, l_band, rows, state.written), a)


class MALightState(NamedTuple):
    """``step`` = last step taken; ``buffer`` = ``h̃_{t−1}`` (``= m_{t−1}`` for the momentum target);
    ``b`` = ``b_{t−1} = Wᵀ ã_{t−1}`` of that buffer."""

    step: int
    buffer: torch.Tensor
    b: np.ndarray


class MALight(_MARule):
    """MA-light (docs/server-rules.md): one model-sized buffer ``h̃_t = u_t r_t + v_t h̃_{t−1}``, like momentum,
    with ``(u_t, v_t)`` from :func:`ma_light_coefficients` fitted to the heavy-ball row
    ``M_mom[t,:]`` (:func:`light_fit_kind`).

    * target ``momentum``: ``m_t = h̃_t`` (row ``a_t = ã_t``);
    * target ``nesterov``: ``m_t = r_t + β h̃_t`` (row ``a_t = e_t + β ã_t``, ``A = I + β Ã``), which
      is Nesterov exactly when ``W = I`` because ``M_nest = I + β M_mom``.

    ``coefficients`` = ``[u_t, v_t]`` (:func:`light_matrix_from_uv` rebuilds ``A``)."""

    @classmethod
    def from_config(cls, cfg: Any, ctx: Any = None) -> "MALight":
        return cls(cfg.beta, cfg.ma_target)

    def init(self, theta: torch.Tensor) -> MALightState:
        return MALightState(0, torch.zeros_like(theta), np.zeros(0))

    def direction(self, aggregate: Aggregate, state: MALightState) -> RuleOutput:
        t = self._next_step(aggregate, state.step)
        w = version_row(aggregate.weights, t)
        u, v = ma_light_coefficients(w, state.b, target_row(light_fit_kind(self.target), self.beta, t))
        h = torch.mul(state.buffer, v).add_(aggregate.r, alpha=u)  # two passes over d, like momentum
        m = lookahead(aggregate.r, h, self.beta) if has_lookahead(self.target) else h
        return RuleOutput(m, MALightState(t, h, _light_buffer(w, state.b, u, v)), np.array([u, v]))
