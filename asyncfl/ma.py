"""Momentum approximation (MA): choose the weights ``a_t`` of the history of aggregates so that
the effective weights ``A W`` on the clients' gradients match the intended momentum weights
``M`` (DESIGN.md §4; paper: ``shared/seeds/003_*.txt``, Eq. 9–15).

Indexing. The math of DESIGN §3–4 is 1-based (steps ``t, s = 1, …, T``). Arrays here are
0-based: ``W[t-1, s-1]`` is ``W[t, s]`` and ``a[s-1]`` is ``a_t[s]``. A *row* of step ``t``
always has length ``t`` (columns ``s = 1..t``).

The module has two layers:

* pure math on numpy float64 (:func:`target_matrix`, :func:`target_row`,
  :func:`ma_full_coefficients`, :func:`ma_full_window_coefficients`,
  :func:`ma_light_coefficients`, the offline :func:`coefficient_matrix_full` /
  :func:`coefficient_matrix_light` and the measures :func:`relative_bias`,
  :func:`row_bias`, :func:`noise_amplification`);
* the two server rules :class:`MAFull` and :class:`MALight` (``asyncfl.rules.ServerRule``),
  which see only ``Aggregate(step, r, weights)`` and build their rows of ``W`` themselves.

The step-by-step rules and the offline functions call the same solvers on the same numbers, so
``coefficient_matrix_*`` on the ``W`` the rules saw reproduces the coefficients they used.

Windowed MA-full (window ``L``): at step ``t`` only the last ``n = min(L, t)`` aggregates
``r_{t-n+1..t}`` are kept, so ``a_t`` is supported on ``S = {t-n+1, …, t}``::

    a_t = argmin_{a : supp(a) ⊆ S}  ‖aᵀ W_{1:t,1:t} − M[t,1:t]‖² + λ‖a‖²
        = argmin_{a_S}  ‖a_Sᵀ W[S, lo..t] − M[t, lo..t]‖² + λ‖a_S‖²,

where ``lo`` is the first column that some row of ``S`` reaches (no row of ``S`` has a nonzero
entry left of ``lo``, so those columns only add a constant to the objective), but never right
of ``t−n+1``. With ``L ≥ t`` this is literally the unwindowed problem (same matrix, same
solver), so the results are equal bit for bit. The rule stores the last ``L`` rows of ``W``
indexed by staleness, so its memory is ``O(L·d + L·τ_max)``.
"""

from __future__ import annotations

from typing import Any, Literal, NamedTuple, Sequence

import numpy as np
import scipy.linalg
import torch

from asyncfl.aggregation import Aggregate
from asyncfl.rules import RuleOutput

TargetKind = Literal["momentum", "nesterov"]
TARGETS: tuple[str, ...] = ("momentum", "nesterov")

#: MA-light treats the 2-column system ``[W[t,:], b_{t−1}]`` as rank-deficient when its smaller
#: singular value is at most this fraction of the larger one (collinear columns), and as zero
#: when its larger singular value is 0.
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
    """The T×T lower-triangular target ``M`` (DESIGN §4), 0-based ``M[t-1, s-1]``.

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
    """``a = argmin_a ‖aᵀ W − m‖² + λ‖a‖²`` (DESIGN §4, MA-full).

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
    last ``min(L, t)`` steps, zeros elsewhere (module docstring). ``window=None`` or ``L ≥ t``
    is exactly :func:`ma_full_coefficients` on the whole ``W``."""
    W = np.asarray(W, dtype=np.float64)
    t = W.shape[0]
    n = t if window is None else min(window, t)
    a = np.zeros(t)
    a[t - n :] = _solve_window(W[t - n :, :], 0, np.asarray(m_row, dtype=np.float64), ridge)
    return a


def coefficient_matrix_full(
    W: np.ndarray, kind: TargetKind, beta: float, ridge: float, window: int | None = None
) -> np.ndarray:
    """``A`` (T×T, row ``t`` = ``a_t``) that MA-full uses on the recorded ``W``, step by step."""
    W = np.asarray(W, dtype=np.float64)
    T = W.shape[0]
    A = np.zeros((T, T))
    for t in range(1, T + 1):
        A[t - 1, :t] = ma_full_window_coefficients(W[:t, :t], target_row(kind, beta, t), ridge, window)
    return A


# ----------------------------------------------------------------------------------------------
# MA-light
def ma_light_coefficients(w_row: np.ndarray, b_prev: np.ndarray, m_row: np.ndarray) -> tuple[float, float]:
    """``(u, v) = argmin ‖u W[t,:] + v b_{t−1} − M[t,:]‖²`` (DESIGN §4, MA-light; paper Eq. 13).

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
    X = np.stack([w, b], axis=1)
    sv = np.linalg.svd(X, compute_uv=False)  # one value only when t = 1 (X is 1×2: rank ≤ 1)
    if sv[0] == 0.0:
        return 0.0, 0.0
    if len(sv) == 2 and sv[1] > LIGHT_RANK_RTOL * sv[0]:
        u, v = np.linalg.lstsq(X, m, rcond=None)[0]
        return float(u), float(v)
    big = w if np.linalg.norm(w) >= np.linalg.norm(b) else b
    q = big / np.linalg.norm(big)
    k = np.array([q @ w, q @ b])
    u, v = (q @ m) * k / (k @ k)
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
    """``A`` that MA-light uses, from its pairs ``(u_t, v_t)`` (DESIGN §4).

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
# measures (DESIGN §4: implicit momentum bias and noise amplification)
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


class _MARule:
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
    """``step`` = last step taken; ``history`` = kept ``r_s`` (oldest first); ``rows`` = the
    matching rows of ``W`` indexed by staleness (``rows[i][τ] = W[s, s−τ]``, ``τ < s``)."""

    step: int
    history: tuple[torch.Tensor, ...]
    rows: tuple[np.ndarray, ...]


class MAFull(_MARule):
    """MA-full: ``m_t = Σ_s a_t[s] r_s`` with ``a_t`` from :func:`ma_full_coefficients` on the kept
    rows of ``W`` (windowed problem in the module docstring). ``coefficients`` = ``a_t`` (length
    ``t``, zeros outside the window). Memory ``O(n·d)`` with ``n = min(L, t)``; time per step
    ``O(n²)`` (``λ = 0``, triangular) to ``O(n³)`` (ridge, least squares)."""

    def __init__(self, beta: float, target: TargetKind = "momentum", ridge: float = 1e-3, window: int | None = None) -> None:
        super().__init__(beta, target)
        if ridge < 0:
            raise ValueError(f"ma_ridge = {ridge}: must be ≥ 0")
        if window is not None and window < 1:
            raise ValueError(f"ma_window = {window}: must be ≥ 1 or absent")
        self.ridge, self.window = float(ridge), window

    @classmethod
    def from_config(cls, server: Any) -> "MAFull":
        return cls(server.beta, server.ma_target, server.ma_ridge, server.ma_window)

    def init(self, theta: torch.Tensor) -> MAFullState:
        return MAFullState(0, (), ())

    def direction(self, aggregate: Aggregate, state: MAFullState) -> RuleOutput:
        t = self._next_step(aggregate, state.step)
        keep = t if self.window is None else self.window
        history = (state.history + (aggregate.r,))[-keep:]
        rows = (state.rows + (np.asarray(aggregate.weights, dtype=np.float64)[:t].copy(),))[-keep:]
        n = len(rows)
        steps = range(t - n + 1, t + 1)
        col0 = min([s - len(row) for s, row in zip(steps, rows)] + [t - n])  # 0-based
        block = np.zeros((n, t - col0))
        for i, (s, row) in enumerate(zip(steps, rows)):
            block[i, s - 1 - np.arange(len(row)) - col0] = row
        a_window = _solve_window(block, col0, self._target_row(t), self.ridge)
        m = torch.zeros_like(aggregate.r)
        for coef, r in zip(a_window, history):
            m.add_(r, alpha=float(coef))
        a = np.zeros(t)
        a[t - n :] = a_window
        return RuleOutput(m, MAFullState(t, history, rows), a)


class MALightState(NamedTuple):
    """``step`` = last step taken; ``buffer`` = ``h̃_{t−1}`` (``= m_{t−1}`` for the momentum target);
    ``b`` = ``b_{t−1} = Wᵀ ã_{t−1}`` of that buffer."""

    step: int
    buffer: torch.Tensor
    b: np.ndarray


class MALight(_MARule):
    """MA-light (DESIGN §4): one model-sized buffer ``h̃_t = u_t r_t + v_t h̃_{t−1}``, like momentum,
    with ``(u_t, v_t)`` from :func:`ma_light_coefficients` fitted to the heavy-ball row
    ``M_mom[t,:]`` (:func:`light_fit_kind`).

    * target ``momentum``: ``m_t = h̃_t`` (row ``a_t = ã_t``);
    * target ``nesterov``: ``m_t = r_t + β h̃_t`` (row ``a_t = e_t + β ã_t``, ``A = I + β Ã``), which
      is Nesterov exactly when ``W = I`` because ``M_nest = I + β M_mom``.

    ``coefficients`` = ``[u_t, v_t]`` (:func:`light_matrix_from_uv` rebuilds ``A``)."""

    @classmethod
    def from_config(cls, server: Any) -> "MALight":
        return cls(server.beta, server.ma_target)

    def init(self, theta: torch.Tensor) -> MALightState:
        return MALightState(0, torch.zeros_like(theta), np.zeros(0))

    def direction(self, aggregate: Aggregate, state: MALightState) -> RuleOutput:
        t = self._next_step(aggregate, state.step)
        w = version_row(aggregate.weights, t)
        u, v = ma_light_coefficients(w, state.b, target_row(light_fit_kind(self.target), self.beta, t))
        h = u * aggregate.r + v * state.buffer
        m = h if self.target == "momentum" else aggregate.r + self.beta * h
        return RuleOutput(m, MALightState(t, h, _light_buffer(w, state.b, u, v)), np.array([u, v]))
