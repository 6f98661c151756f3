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

Incremental MA-full (no window, or ``t ≤ L``; :func:`full_factor_push`, :func:`full_factor_solve`).
With ``λ > 0`` the Cholesky factor ``L_t`` of ``G_t = W_{1:t,1:t} W_{1:t,1:t}ᵀ + λI`` is kept from
step to step. ``W`` is lower triangular, so row ``t`` only borders ``G``::

    G_t = [[G_{t−1}, g], [gᵀ, γ]],  g = W_{1:t−1,1:t−1} w_t,  γ = ‖w_t‖² + λ,
    L_t = [[L_{t−1}, 0], [lᵀ, √(γ − ‖l‖²)]],  L_{t−1} l = g,

and ``a_t = L_t⁻ᵀ L_t⁻¹ (W_{1:t,1:t} M[t,1:t]ᵀ)``: ``O(t²)`` per step instead of ``O(t³)``. ``g`` and
``l`` vanish above the first version ``lo`` that ``w_t`` reaches (rows of ``W`` before ``lo`` end
before it; forward substitution keeps those zeros), so the bordering costs ``O((t − lo)²)`` —
constant when staleness is bounded. With ``λ = 0``: back substitution on ``W`` (``O(t²)``), or
``numpy.linalg.lstsq`` (``O(t³)``, kept) when the diagonal is not safe.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, Sequence

import numpy as np
import scipy.linalg
import scipy.linalg.lapack
import torch

from asyncfl.server.aggregation import Aggregate
from asyncfl.server.rules import RuleOutput, ServerRule, lookahead

TargetKind = Literal["momentum", "nesterov"]
TARGETS: tuple[str, ...] = ("momentum", "nesterov")

#: MA-light treats the 2-column system ``[W[t,:], b_{t−1}]`` as rank-deficient when, in its QR
#: with the longer column first, ``|r22|`` is at most this fraction of ``|r11|`` (collinear
#: columns; ``σ_min/σ_max`` up to a factor ≤ 2), and as zero when both columns are 0.
LIGHT_RANK_RTOL = 1e-10


# ----------------------------------------------------------------------------------------------
# targets
def _check_kind(kind: str) -> None:
    if kind not in TARGETS:
        raise ValueError(f"ma target {kind!r}: unknown. Allowed: {', '.join(TARGETS)}")


def _target_weights(kind: str, beta: float, lag: np.ndarray) -> np.ndarray:
    """``M[t, s]`` as a function of the lag ``t − s ≥ 0`` (shared by the row and the matrix so
    that both give the same bits)."""
    _check_kind(kind)
    lag = np.asarray(lag, dtype=np.float64)
    if kind == "momentum":
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
    n = W.shape[0]
    scale = float(np.max(np.abs(W), initial=0.0))
    if scale == 0.0:
        return False
    return bool(np.min(np.abs(np.diag(W))) > n * np.finfo(np.float64).eps * scale)


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


def _grown(arr: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``arr`` if every dimension is at least ``shape``, else a zero array whose dimensions are
    doubled (at least 8, at least ``shape``) with ``arr`` copied into its leading block."""
    if all(have >= need for have, need in zip(arr.shape, shape)):
        return arr
    new_shape = []
    for have, need in zip(arr.shape, shape):
        cap = max(8, 2 * have)
        while cap < need:
            cap *= 2
        new_shape.append(cap)
    out = np.zeros(new_shape)
    out[tuple(slice(0, n) for n in arr.shape)] = arr
    return out


def _packed(t: int) -> int:
    """Length of rows ``1..t`` of a lower-triangular matrix packed by rows: ``L[i, j]`` (0-based,
    ``j ≤ i``) at ``i(i+1)/2 + j``. This is LAPACK's column-packed upper ``U = Lᵀ`` (``dpptrs``,
    ``uplo = 'U'``), and appending row ``t`` never moves rows ``< t``."""
    return t * (t + 1) // 2


def unpack_factor(chol: np.ndarray, t: int) -> np.ndarray:
    """The dense ``t×t`` lower-triangular ``L_t`` from the packed factor (for checks and analysis)."""
    i, j = np.tril_indices(t)
    L = np.zeros((t, t))
    L[i, j] = chol[_packed(i) + j]
    return L


def full_factor_push(
    w_dense: np.ndarray, chol: np.ndarray, w_row: np.ndarray, t: int, ridge: float
) -> tuple[np.ndarray, np.ndarray]:
    """Add row ``t`` (1-based, ``w_row = W[t, 1..t]``) to the incremental MA-full solver (module
    docstring): ``w_dense[:t, :t] = W_{1:t,1:t}`` and, for ``λ > 0``, the Cholesky factor ``L_t``
    (``L_t L_tᵀ = W Wᵀ + λI``) packed by rows in ``chol[:t(t+1)/2]`` (:func:`_packed`).

    Both arrays are capacity-sized (doubling, :func:`_grown`) and written in place: rows ``< t``
    are never touched, so a state that saw ``t−1`` rows stays valid. Returns the (possibly
    regrown) arrays. Raises ``numpy.linalg.LinAlgError`` when ``γ − ‖l‖² ≤ 0`` (``λ`` too small
    for round-off; a direct Cholesky would fail too)."""
    w = np.asarray(w_row, dtype=np.float64)
    w_dense = _grown(w_dense, (t, t))
    w_dense[t - 1, :t] = w
    if ridge == 0:
        return w_dense, chol
    chol = _grown(chol, (_packed(t),))
    row = chol[_packed(t - 1) : _packed(t)]  # view: L_t[t−1, :t]
    nz = np.flatnonzero(w[: t - 1])
    lo = int(nz[0]) if nz.size else t - 1
    row[:lo] = 0.0
    l = np.zeros(0)
    if lo < t - 1:
        g = w_dense[lo : t - 1, lo : t - 1] @ w[lo : t - 1]
        i, j = np.tril_indices(t - 1 - lo)
        block = np.zeros((t - 1 - lo, t - 1 - lo))
        block[i, j] = chol[_packed(i + lo) + j + lo]  # L_{t−1}[lo:, lo:]
        l = scipy.linalg.solve_triangular(block, g, lower=True, check_finite=False)
        row[lo : t - 1] = l
    pivot = float(w @ w) + ridge - float(l @ l)
    if not pivot > 0.0:
        raise np.linalg.LinAlgError(f"MA-full step {t}: W Wᵀ + λI not positive definite in round-off (λ = {ridge})")
    row[t - 1] = np.sqrt(pivot)
    return w_dense, chol


def full_factor_solve(w_dense: np.ndarray, chol: np.ndarray, t: int, m_row: np.ndarray, ridge: float) -> np.ndarray:
    """``a_t`` (length ``t``) from the incremental solver after :func:`full_factor_push` of row ``t``:
    ``λ > 0``: ``a = L⁻ᵀ L⁻¹ W m`` (LAPACK ``dpptrs`` on the packed factor, no copy, ``O(t²)``);
    ``λ = 0``: :func:`ma_full_coefficients` on ``W_{1:t,1:t}`` (back substitution, or lstsq)."""
    W = w_dense[:t, :t]
    m = np.asarray(m_row, dtype=np.float64)
    if ridge == 0:
        return ma_full_coefficients(W, m, 0.0)
    a, info = scipy.linalg.lapack.dpptrs(t, chol[: _packed(t)], W @ m, lower=0)
    if info != 0:
        raise np.linalg.LinAlgError(f"MA-full step {t}: dpptrs info = {info}")
    return a


def _empty_factor() -> tuple[np.ndarray, np.ndarray]:
    return np.zeros((0, 0)), np.zeros(0)


def coefficient_matrix_full(
    W: np.ndarray, kind: TargetKind, beta: float, ridge: float, window: int | None = None
) -> np.ndarray:
    """``A`` (T×T, row ``t`` = ``a_t``) that MA-full uses on the recorded ``W``, step by step, with
    the rule's code: the incremental solver while ``window`` is None or ``t ≤ L``, the windowed
    problem after. ``O(T³)`` with ``λ > 0`` (``O(T⁴)`` only for ``λ = 0`` with singular ``W``)."""
    W = np.asarray(W, dtype=np.float64)
    T = W.shape[0]
    A = np.zeros((T, T))
    w_dense, chol = _empty_factor()
    for t in range(1, T + 1):
        m = target_row(kind, beta, t)
        if window is None or t <= window:
            w_dense, chol = full_factor_push(w_dense, chol, W[t - 1, :t], t, ridge)
            A[t - 1, :t] = full_factor_solve(w_dense, chol, t, m, ridge)
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
    return A if kind == "momentum" else np.eye(T) + beta * A


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
    ``w_dense`` (``W_{1:t,1:t}``, capacity-sized) and ``chol`` (``L_t`` packed by rows): the
    incremental solver (:func:`full_factor_push`) while there is no window or ``step ≤ L``;
    empty afterwards. ``rows``: with a window, the last ``L`` rows of ``W``
    indexed by staleness (``rows[i][τ] = W[s, s−τ]``). ``written``: a 1-element array shared by
    the states whose buffers are shared: the highest step written into them (copy-on-write)."""

    step: int
    history: torch.Tensor
    w_dense: np.ndarray
    chol: np.ndarray
    rows: tuple[np.ndarray, ...]
    written: np.ndarray


class MAFull(_MARule):
    """MA-full: ``m_t = Σ_s a_t[s] r_s`` (one matrix-vector product over the kept history) with
    ``a_t`` from the incremental solver (no window, or ``t ≤ L``) or the windowed problem (module
    docstring). ``coefficients`` = ``a_t`` (length ``t``, zeros outside the window).

    Per step: ``O(n·d)`` for ``m_t`` (``n = min(L, t)``) plus ``O(t²)`` (incremental) or ``O(L³)``
    (windowed) for ``a_t``; memory ``O(n·d + t²)`` (``O(L·d + L²)`` with a window).

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
        return MAFullState(0, history, *_empty_factor(), (), np.zeros(1, dtype=np.int64))

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
            history=state.history.clone(), w_dense=state.w_dense.copy(), chol=state.chol.copy(), written=np.zeros(1, dtype=np.int64)
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
            w_dense, chol = full_factor_push(state.w_dense, state.chol, version_row(aggregate.weights, t), t, self.ridge)
            a = full_factor_solve(w_dense, chol, t, self._target_row(t), self.ridge)
            n = t
        else:
            w_dense, chol = _empty_factor()
            n = self.window
            a = np.zeros(t)
            a[t - n :] = self._windowed(rows, t)
        cap = history.shape[0]
        slot_coef = np.zeros(min(cap, t))
        slot_coef[(np.arange(t - n, t)) % cap] = a[t - n :]  # step s = index + 1 lives in slot (s−1) mod cap
        coef = torch.from_numpy(slot_coef).to(dtype=history.dtype, device=history.device)
        m = (coef @ history[: len(slot_coef)]).reshape(aggregate.r.shape)
        state.written[0] = t
        return RuleOutput(m, MAFullState(t, history, w_dense, chol, rows, state.written), a)


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
        m = h if self.target == "momentum" else lookahead(aggregate.r, h, self.beta)
        return RuleOutput(m, MALightState(t, h, _light_buffer(w, state.b, u, v)), np.array([u, v]))
