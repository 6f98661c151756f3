"""The bias report in time and memory proportional to ``T × (staleness window)`` (docs/server-rules.md §7.1).

``W`` is lower triangular with non-zeros only within the largest observed staleness ``b`` of the
diagonal, so it is kept as its band ``B[t, k] = W[t, t−k]`` (``T × (b+1)``, 0-based, zero where
``k > t``). The target ``M`` and the coefficient matrices ``A`` are dense, but every row of each
is a *recursion with a local update*::

    a_t = ρ_t a_{t−1} + Δ_t ,   Δ_t supported on the columns t−n+1 … t

(momentum target: ``ρ = β``, ``Δ = e_t``; MA-light: ``ρ = v_t``, ``Δ = u_t e_t``; MA-full:
``ρ = β``, module :func:`ma_full_rows`; a recorded or windowed row: ``ρ = 0``, ``Δ = a_t``), and
so is ``(AW)_t = ρ_t (AW)_{t−1} + Δ_tᵀ W``. :class:`RowStream` keeps each row explicitly over a
window of the last ``N`` columns and, for the columns older than the window (which only ever
scale), the few inner products the measures need (the tail's Gram matrix of the residual
``R = AW − M`` and ``M``, updated by the 2×2 transition ``[[ρ, ρ−β], [0, β]]``, and ``‖a_t‖²``),
plus each column's value when it leaves the window (for the column sums ``Aᵀ1``). Every
measure of :func:`asyncfl.server.bias.bias_report` follows from these sums exactly: the only
difference from the dense computation is the order of floating-point operations.

What is exact and what is not:

* ``none``, ``momentum``, MA-light (its ``(u_t, v_t)`` fitted on the banded ``W`` by
  :func:`light_rows`), MA-full with a window ``L`` beyond step ``L`` and recorded coefficients:
  exact (tests/test_bias_banded.py checks them against the dense report to 1e-12);
* the scale-free bias (the best overall scale taken out) is computed from the sums as
  ``(‖R‖²‖M‖² − ⟨R, M⟩²) / ‖AW‖²``: exact except where the residual ``R`` is nearly a
  multiple ``αM`` of the target, where round-off leaves an error of about ``√ε |α|`` (1e-11
  for MA-full at ``W = I``, whose ``R = −λ/(1+λ) M``, against 2e-16 dense);
* the floor (:func:`floor_banded`): exact, from an orthonormal basis of the kernel of
  ``W_{1:t,1:t}`` (its dimension, not ``t``, sets the cost);
* MA-full without a window (``λ > 0``): ``a_t = β a_{t−1} + κ_t G_t⁻¹ e_t`` with
  ``G = W Wᵀ + λI`` banded; the back substitution that gives ``G_t⁻¹ e_t`` is carried over the
  last columns that carry a change above ``2⁻⁵³`` of the largest coefficient (the length
  doubles as needed, up to :data:`FULL_WINDOW` or ``16 (b + 1)``) and the older entries of the update
  are dropped. The largest dropped entry is measured at the window's edge and reported
  (``ma_full_truncation`` in ``bias.json``, relative to the largest coefficient); the entries
  of ``G_t⁻¹ e_t`` decay geometrically away from ``t``: 1.1e-16 (the tolerance itself) on the
  20 000-step run of docs/performance.md, whose numbers equal the dense ones to 5e-15 on its
  first 1200 steps.
"""

from __future__ import annotations

from typing import Any, Iterator

import numpy as np
import scipy.linalg.blas
import scipy.linalg.lapack
from threadpoolctl import threadpool_limits

from asyncfl.server.aggregation import weight_row
from asyncfl.server.ma import LIGHT_RANK_RTOL, TargetKind, _solve_window, _target_weights, has_lookahead, light_fit_kind

#: columns of ``G_t⁻¹ e_t`` that unwindowed MA-full's back substitution carries (at least 16 bands)
FULL_WINDOW = 1024
#: unwindowed MA-full leaves out changes of its coefficients below this fraction of the largest
TRUNCATION = 2.0**-53
#: a row whose remainder is below this fraction of its norm adds nothing to the span (as in
#: :func:`asyncfl.server.bias.floor_residuals`)
FLOOR_TOL = 1e-10


def band_of(by_staleness: np.ndarray, exponent: float, buffer: int) -> np.ndarray:
    """``B[t, k] = W[t, t−k]`` (``T × (b+1)``, ``b`` the largest staleness with a non-zero count;
    zero where ``k > t``): the same numbers as :func:`asyncfl.server.aggregation.weight_matrix`."""
    counts = np.asarray(by_staleness, dtype=np.float64)
    T = counts.shape[0]
    nonzero = np.flatnonzero(counts.any(axis=0)) if T else np.zeros(0, dtype=int)
    width = int(nonzero[-1]) + 1 if nonzero.size else 1
    # W is lower-triangular: a staleness of T or more has no column in it (a private run's noisy
    # counts are non-zero at every staleness, beyond the run's length too)
    width = min(width, max(T, 1))
    rows = weight_row(counts[:, :width], buffer, exponent)
    rows[np.arange(width)[None, :] > np.arange(T)[:, None]] = 0.0  # in place: versions before 1
    return rows


def lower_band_storage(B: np.ndarray) -> np.ndarray:
    """``W`` in LAPACK's lower band storage, ``ab[k, j] = W[j+k, j]``, Fortran-ordered so that a
    block of columns is contiguous: ``(b+1) × T``."""
    T, width = B.shape
    ab = np.zeros((width, T + width), order="F")
    for k in range(width):
        ab[k, : T - k] = B[k:, k]
    return ab


def window_row(B: np.ndarray, t: int) -> tuple[int, np.ndarray]:
    """Row ``t`` of ``W`` as ``(first column, values up to column t)`` (``W[t, c] … W[t, t]``)."""
    b = B.shape[1] - 1
    c = max(0, t - b)
    return c, B[t, t - c :: -1]


class Sums:
    """A rule's sums over the run: per row ``‖R_t‖²``, ``⟨R_t, M_t⟩``, ``‖M_t‖²`` and ``‖a_t‖²``,
    and the column sums ``c = Aᵀ1``."""

    def __init__(self, rr: np.ndarray, ry: np.ndarray, yy: np.ndarray, aa: np.ndarray, colsum: np.ndarray) -> None:
        self.rr, self.ry, self.yy, self.aa, self.colsum = rr, ry, yy, aa, colsum


class RowStream:
    """The rows of ``A``, ``AW`` and the target, streamed one step at a time (module docstring).

    ``step(rho, start, values)``: ``a_t = rho·a_{t−1}`` on the columns before ``start`` and
    ``a_t[start … t] = values``. ``target`` is the target's rows (one of the same form, fixed
    Toeplitz: ``M[t, t−k] = target[k]``); ``target_rho`` its ``ρ`` (β, or 0 for ``I``)."""

    def __init__(self, B: np.ndarray, target: np.ndarray, target_rho: float, window: int, WbT: np.ndarray | None = None) -> None:
        T, width = B.shape
        self.B, self.T, self.b = B, T, width - 1
        self.WbT = lower_band_storage(B) if WbT is None else WbT
        self.N = max(int(window), width + 1)
        self.target, self.beta = target, float(target_rho)
        self.A, self.X = np.zeros(T), np.zeros(T)
        self.srr = self.sry = self.syy = 0.0  # the tail Gram of (R, Y)
        self.AA = 0.0
        self.rr, self.ry, self.yy, self.aa = (np.zeros(T) for _ in range(4))
        self.colsum, self.frozen, self.rho = np.zeros(T), np.zeros(T), np.zeros(T)
        self.t = -1

    def _times_w(self, delta: np.ndarray, start: int) -> tuple[int, np.ndarray]:
        """``Δᵀ W`` for ``Δ`` on rows ``start … t``: (first column, values up to column t), as
        ``Wᵀ x`` of the triangular band block ``W[c … t, c … t]`` (BLAS ``dtbmv``; the rows
        after ``t`` in its band storage are not referenced)."""
        t, b = start + len(delta) - 1, self.b
        c = max(0, start - b)
        x = np.zeros(t - c + 1)
        x[start - c :] = delta
        return c, scipy.linalg.blas.dtbmv(b, self.WbT[:, c : t + 1], x, lower=1, trans=1)

    def step(self, rho: float, start: int, values: np.ndarray) -> None:
        t = self.t = self.t + 1
        N, beta, A, X = self.N, self.beta, self.A, self.X
        self.rho[t] = rho
        lo = max(0, t - N + 1)
        leave = t - N  # the column that leaves the window now
        # the tail Gram of (R, Y) one step on: R ← ρR + (ρ−β)Y, Y ← βY (scalars: a 2×2 in numpy costs more)
        d = rho - beta
        srr, sry, syy = self.srr, self.sry, self.syy
        srr, sry, syy = rho * rho * srr + 2.0 * rho * d * sry + d * d * syy, beta * (rho * sry + d * syy), beta * beta * syy
        self.AA *= rho * rho
        if leave >= 0:
            a_leave, x_leave = rho * A[leave], rho * X[leave]
            y_leave = self.target[N] if N < len(self.target) else 0.0
            r_leave = x_leave - y_leave
            srr += r_leave * r_leave
            sry += r_leave * y_leave
            syy += y_leave * y_leave
            self.AA += a_leave * a_leave
            self.frozen[leave] = a_leave
        self.srr, self.sry, self.syy = srr, sry, syy
        A[lo:t] *= rho
        X[lo:t] *= rho
        delta = np.asarray(values, dtype=np.float64) - A[start : t + 1]  # A[t] is 0
        A[start : t + 1] = values
        c, dw = self._times_w(delta, start)
        X[c : t + 1] += dw
        y = self.target[t - lo :: -1]
        R = X[lo : t + 1] - y
        self.rr[t] = float(R @ R) + srr
        self.ry[t] = float(R @ y) + sry
        self.yy[t] = float(y @ y) + syy
        a = A[lo : t + 1]
        self.aa[t] = float(a @ a) + self.AA
        self.colsum[lo : t + 1] += a

    def sums(self) -> Sums:
        """The sums, with each column's contributions after it left the window added:
        ``frozen[s] · Σ_{t'≥t} Π_{j=t+1}^{t'} ρ_j`` (the suffix sums of the products of ``ρ``)."""
        T, N = self.T, self.N
        colsum = self.colsum.copy()
        if T > N:
            G = np.ones(T)
            for t in range(T - 2, -1, -1):
                G[t] = 1.0 + self.rho[t + 1] * G[t + 1]
            s = np.arange(T - N)
            colsum[s] += self.frozen[s] * G[s + N]
        return Sums(self.rr, self.ry, self.yy, self.aa, colsum)


# ----------------------------------------------------------------------------------------------
# the rules' rows
def target_lags(kind: TargetKind, beta: float, n: int) -> np.ndarray:
    """``M[t, t−k]`` for ``k = 0 … n−1`` (the same numbers as :func:`asyncfl.server.ma.target_row`)."""
    return _target_weights(kind, beta, np.arange(n))


def target_rows(kind: TargetKind, beta: float) -> Iterator[tuple[float, int, np.ndarray]]:
    """The target as a rule (naive momentum, ``A = M``): ``ρ = β`` and the last one or two entries."""
    head = target_lags(kind, beta, 2)
    t = 0
    while True:
        yield (beta, t, head[:1]) if t == 0 else (beta, t - 1, head[::-1].copy())
        t += 1


def light_rows(B: np.ndarray, kind: TargetKind, beta: float) -> tuple[np.ndarray, list[tuple[float, int, np.ndarray]]]:
    """MA-light on the banded ``W``: ``(uv, rows)``. The same arithmetic as
    :func:`asyncfl.server.ma.light_recursion`, with ``b_{t−1} = Wᵀ ã_{t−1}`` kept over the band and
    its older columns as two sums (``‖b‖²`` and ``⟨b, M_t⟩`` there)."""
    T, width = B.shape
    m_lags = target_lags(light_fit_kind(kind), beta, T + 1)
    uv = np.zeros((T, 2))
    bvec = np.zeros(T)
    tbb = tbm = 0.0  # over the columns before the band of the current row, against M_t
    for t in range(T):
        c, w = window_row(B, t)
        if c > 0:  # column c−1 leaves the band: into the tail sums (M_t = β M_{t−1} there)
            tbb += bvec[c - 1] ** 2
            tbm = beta * (tbm + bvec[c - 1] * m_lags[t - c])  # M_{t−1}[c−1] = β^{t−c}
        else:
            tbm *= beta
        m = m_lags[t - c :: -1]
        b_win = bvec[c : t + 1]
        u, v = _light_split(w, b_win, tbb, tbm, m)
        uv[t] = u, v
        bvec[c : t + 1] = u * w + v * b_win
        tbb, tbm = v * v * tbb, v * tbm
    return uv, light_rows_from_uv(uv, kind, beta)


def light_rows_from_uv(uv: np.ndarray, kind: TargetKind, beta: float) -> list[tuple[float, int, np.ndarray]]:
    """MA-light's rows of ``A`` from its pairs (:func:`asyncfl.server.ma.light_matrix_from_uv`):
    ``ã_t = v_t ã_{t−1} + u_t e_t``; for Nesterov ``A = I + βÃ``, so
    ``a_t = v_t (a_{t−1} − e_{t−1}) + (1 + β u_t) e_t`` with ``a_{t−1}[t−1] = 1 + β u_{t−1}``."""
    uv = np.asarray(uv, dtype=np.float64).reshape(-1, 2)
    if not has_lookahead(kind):
        return [(float(v), t, np.array([u])) for t, (u, v) in enumerate(uv)]
    rows = []
    for t, (u, v) in enumerate(uv):
        head = np.array([1.0 + beta * u]) if t == 0 else np.array([v * beta * uv[t - 1, 0], 1.0 + beta * u])
        rows.append((float(v), max(t - 1, 0), head))
    return rows


def _light_split(w: np.ndarray, b_win: np.ndarray, tbb: float, tbm: float, m: np.ndarray) -> tuple[float, float]:
    """:func:`asyncfl.server.ma.ma_light_coefficients` with ``b = (tail, b_win)``, the tail known
    by ``‖b_tail‖² = tbb`` and ``⟨b_tail, m_tail⟩ = tbm`` (``w`` is zero there)."""
    norm_w, norm_b = float(np.sqrt(w @ w)), float(np.sqrt(b_win @ b_win + tbb))
    if max(norm_w, norm_b) == 0.0:
        return 0.0, 0.0
    if norm_w >= norm_b:
        n1 = norm_w
        q1 = w / n1
        r12 = float(q1 @ b_win)
        y = b_win - r12 * q1
        extra = float(q1 @ y)
        y -= extra * q1
        r12 += extra
        r22 = float(np.sqrt(y @ y + tbb))
        if r22 > LIGHT_RANK_RTOL * n1:
            z2 = (float(y @ m) + tbm) / (r22 * r22)
            z1 = (float(q1 @ m) - r12 * z2) / n1
            return z1, z2
        k = np.array([q1 @ w, q1 @ b_win])
        qm = float(q1 @ m)
    else:
        n1 = norm_b
        q1 = b_win / n1
        qt2 = tbb / (n1 * n1)  # ‖q1_tail‖²
        r12 = float(q1 @ w)
        y = w - r12 * q1
        extra = float(q1 @ y) - r12 * qt2
        y -= extra * q1
        r12 += extra
        r22 = float(np.sqrt(y @ y + r12 * r12 * qt2))
        qm = float(q1 @ m) + tbm / n1
        if r22 > LIGHT_RANK_RTOL * n1:
            z2 = (float(y @ m) - r12 * tbm / n1) / (r22 * r22)
            z1 = (qm - r12 * z2) / n1
            return z2, z1
        k = np.array([q1 @ w, q1 @ b_win + qt2 * n1])
    u, v = qm * k / (k @ k)
    return float(u), float(v)
def full_window(B: np.ndarray) -> int:
    """The columns of ``G_t⁻¹ e_t`` kept by unwindowed MA-full: ``max(FULL_WINDOW, 16 (b + 1))``."""
    return max(FULL_WINDOW, 16 * B.shape[1])


class FullRows:
    """MA-full's rows on the banded ``W`` (λ > 0): ``a_t = G_t⁻¹ W_{1:t} M[t,:]ᵀ`` with
    ``G = W Wᵀ + λI`` (docs/server-rules.md §4), the rule's windowed problem after step ``L``.

    ``G``'s Cholesky factor is banded like ``W`` and grows a row per step (the bordering of
    :func:`asyncfl.server.ma.band_push`). ``z_t = L_t⁻¹ W_{1:t} M[t,:]ᵀ`` only
    scales by ``β`` on the columns before ``t−1`` (``W`` is lower triangular and ``M``'s rows
    recur), and ``a_t = L_t⁻ᵀ z_t`` is back substitution from the last column: its last
    ``n`` entries are exact from the last ``n`` rows. Beyond them ``a_t = β a_{t−1}`` is kept,
    dropping ``κ_t G_t⁻¹ e_t`` there (module docstring)."""

    def __init__(self, B: np.ndarray, kind: TargetKind, beta: float, ridge: float, window: int | None) -> None:
        if ridge <= 0:
            raise ValueError("the banded MA-full needs λ > 0")
        T, width = B.shape
        self.B, self.T, self.b = B, T, width - 1
        self.beta, self.ridge, self.window = beta, ridge, window
        self.lags = target_lags(kind, beta, T + 1)
        self.n_max = min(T, full_window(B))
        self.n = min(T, 4 * width)
        self.a = np.zeros(T)  # a_t, kept for the change at the window's edge
        self.amax = self.dropped = 0.0
        self.LbT = np.zeros((width, T + width), order="F")  # LAPACK lower band storage: LbT[k, j] = L[j+k, j]
        self.z = np.zeros(T)

    @property
    def engine_window(self) -> int:
        return max(self.n_max, self.window or 0) + self.b + 2

    def _w_times(self, lo: int, t: int, w_abs: np.ndarray) -> np.ndarray:
        """``W[lo:t, :] @ w`` for a ``w`` given on the columns ``lo … t−1``."""
        rows = self.B[lo:t]  # rows[i, k] = W[lo+i, lo+i−k]
        col = np.arange(t - lo)[:, None] - np.arange(self.b + 1)[None, :]
        ok = col >= 0
        return (rows * np.where(ok, w_abs[np.where(ok, col, 0)], 0.0)).sum(axis=1)

    def __iter__(self) -> Iterator[tuple[float, int, np.ndarray]]:
        B, beta, LbT, z, lags = self.B, self.beta, self.LbT, self.z, self.lags
        for t in range(self.T):
            c, w = window_row(B, t)
            nz = np.flatnonzero(w[:-1])
            lo = c + int(nz[0]) if nz.size else t
            pivot = float(w @ w) + self.ridge
            if lo < t:
                g = self._w_times(lo, t, w[lo - c : t - c])
                l, info = scipy.linalg.lapack.dtbtrs(LbT[:, lo:t], g[:, None], uplo="L", trans="N")
                l = l[:, 0]
                LbT[t - lo - np.arange(t - lo), np.arange(lo, t)] = l
                pivot -= float(l @ l)
            if not pivot > 0.0:
                raise np.linalg.LinAlgError(f"MA-full step {t + 1}: W Wᵀ + λI not positive definite in round-off (λ = {self.ridge})")
            LbT[0, t] = np.sqrt(pivot)
            # z_t: β z_{t−1} on the old columns, the target's correction at t−1, then row t
            z_lo = max(0, t - self.n)
            z[z_lo:t] *= beta
            if t > 0:
                z[t - 1] += B[t - 1, 0] * (lags[1] - beta * lags[0]) / LbT[0, t - 1]
            gamma = float(w @ lags[t - c :: -1])
            z[t] = (gamma - float(LbT[t - np.arange(lo, t), np.arange(lo, t)] @ z[lo:t])) / LbT[0, t]
            if self.window is not None and t + 1 > self.window:
                yield 0.0, t - self.window + 1, self._windowed(t)
                continue
            yield beta, *self._back_substitution(t)

    def _back_substitution(self, t: int) -> tuple[int, np.ndarray]:
        """``(s0, a_t[s0 … t])`` from the last rows of ``L_t`` (exact there), the older entries
        left at ``β a_{t−1}``. The length doubles (up to :func:`full_window`) until the change
        ``a_t − β a_{t−1}`` at its first column is at most ``2⁻⁵³`` of the largest coefficient;
        the entries at the start whose change is below that are left out too. The largest change
        left out is :attr:`dropped` (``ma_full_truncation``)."""
        while True:
            s0 = t - min(t + 1, self.n) + 1
            x, info = scipy.linalg.lapack.dtbtrs(self.LbT[:, s0 : t + 1], self.z[s0 : t + 1, None], uplo="L", trans="T")
            a = x[:, 0]
            if info != 0:
                raise np.linalg.LinAlgError(f"MA-full step {t + 1}: dtbtrs info = {info}")
            change = np.abs(a - self.beta * self.a[s0 : t + 1])
            self.amax = max(self.amax, float(np.max(np.abs(a))))
            if s0 == 0 or change[0] <= TRUNCATION * self.amax or self.n >= self.n_max:
                break
            self.n = min(2 * self.n, self.n_max)
        keep = np.flatnonzero(change > TRUNCATION * self.amax)
        k = int(keep[0]) if keep.size else len(a) - 1
        left_out = [float(np.max(change[:k]))] if k else []
        if s0 > 0:  # the entries before s0, estimated by the change at s0 (G_t⁻¹ e_t decays away from t)
            left_out.append(float(change[0]))
        self.dropped = max([self.dropped, *left_out])
        old = max(0, t - self.n_max)  # no later step reads a[:old]
        self.a[old : s0 + k] *= self.beta
        self.a[s0 + k : t + 1] = a[k:]
        return s0 + k, a[k:]

    def _windowed(self, t: int) -> np.ndarray:
        """The rule's windowed problem at step ``t+1`` (:func:`asyncfl.server.ma._solve_window`)."""
        L = self.window
        rows = range(t - L + 1, t + 1)
        col0 = max(0, rows[0] - self.b)
        block = band_block(self.B, rows, col0)
        m_row = self.lags[t::-1]  # M[t+1, 1 … t+1], a view
        return _solve_window(block, col0, m_row, self.ridge)


def band_block(B: np.ndarray, rows: range, col0: int) -> np.ndarray:
    """The dense block ``W[rows, col0 … rows[-1]]``."""
    j = np.asarray(rows)[:, None]
    k = j - np.arange(col0, rows[-1] + 1)[None, :]
    ok = (k >= 0) & (k < B.shape[1])
    return np.where(ok, B[j, np.where(ok, k, 0)], 0.0)


def recorded_rows(used_full: np.ndarray) -> tuple[int, Iterator[tuple[float, int, np.ndarray]]]:
    """The rows ``a_t`` a run recorded (``T × T``, zeros outside each row's support): the widest
    support, and the rows as ``(0, first column, values)``."""
    A = np.asarray(used_full, dtype=np.float64)
    T = A.shape[0]
    first = np.array([int(np.flatnonzero(A[t, : t + 1])[0]) if A[t, : t + 1].any() else t for t in range(T)], dtype=int)
    width = int(np.max(np.arange(T) - first, initial=0)) + 1
    return width, ((0.0, int(first[t]), A[t, first[t] : t + 1]) for t in range(T))


# ----------------------------------------------------------------------------------------------
# the floor
def floor_banded(B: np.ndarray, kind: TargetKind, beta: float, tol: float = FLOOR_TOL) -> np.ndarray:
    """Per row ``t``: the distance of ``M[t, :]`` from the span of the first ``t`` rows of ``W``
    (:func:`asyncfl.server.bias.floor_residuals`), as the norm of its projection on the kernel
    ``N_t = {x : W_{1:t,1:t} x = 0}``. The kernel is kept as an orthonormal basis, each vector
    known by its entries on the band (the columns a later row can reach) and its inner product
    with the momentum row ``M_t`` (which only scales by ``β`` from row to row). Row ``t``:

    * remainder (its part orthogonal to the rows before, ``√(‖Qᵀw‖² + W[t,t]²)``) at most
      ``tol`` times its norm: it adds nothing, and ``e_t`` joins the kernel;
    * ``W[t,t] = 0``: the kernel loses the direction ``Qᵀw`` and gains ``e_t``;
    * else every kernel vector gets the entry ``−⟨w, q⟩ / W[t,t]`` in column ``t`` and the basis
      is made orthonormal again with ``(I + x xᵀ)^{−1/2}``.

    ``O(T · d · b)`` for a kernel of dimension ``d`` (small: each row with a zero diagonal
    generally trades one kernel direction for another)."""
    T, width = B.shape
    Q = np.zeros((0, width))  # Q[i, k]: kernel vector i in column t−k
    s = np.zeros(0)  # ⟨q_i, M_mom[t, :]⟩
    out = np.zeros(T)
    for t in range(T):
        Q = np.roll(Q, 1, axis=1)
        Q[:, 0] = 0.0
        s = beta * s
        w = B[t]
        c = Q[:, 1:] @ w[1:]
        norm = float(np.sqrt(w @ w))
        remainder = float(np.sqrt(c @ c + w[0] * w[0]))
        if not (norm > 0 and remainder > tol * norm):
            Q, s = _with_unit(Q, s)
        elif w[0] == 0.0:
            H = _complement(c / float(np.sqrt(c @ c)))
            Q, s = _with_unit(H.T @ Q, H.T @ s)
        else:
            x = -c / w[0]
            Q[:, 0] = x
            s = s + x
            xx = float(x @ x)
            if xx > 0:
                f = (1.0 - 1.0 / np.sqrt(1.0 + xx)) / xx
                Q = Q - f * np.outer(x, x @ Q)
                s = s - f * x * float(x @ s)
        proj = Q[:, 0] + beta * s if has_lookahead(kind) else s
        out[t] = float(np.sqrt(proj @ proj))
    return out


def _with_unit(Q: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The basis with ``e_t`` added (column ``t`` is lag 0; ``M_mom[t, t] = 1``)."""
    e = np.zeros((1, Q.shape[1]))
    e[0, 0] = 1.0
    return np.vstack([Q, e]), np.append(s, 1.0)


def _complement(u: np.ndarray) -> np.ndarray:
    """``d × (d−1)`` orthonormal columns orthogonal to the unit vector ``u`` (a Householder reflector)."""
    d = len(u)
    e = np.zeros(d)
    e[0] = 1.0
    v = u - e if u[0] <= 0 else u + e
    v /= np.linalg.norm(v)
    P = np.eye(d) - 2.0 * np.outer(v, v)
    return P[:, 1:]


# ----------------------------------------------------------------------------------------------
# the report
def stream(B: np.ndarray, rows: Any, target: np.ndarray, target_rho: float, window: int,
           WbT: np.ndarray | None = None) -> RowStream:
    """Feed ``rows`` (``(ρ, start, values)`` per step) through a :class:`RowStream`."""
    engine = RowStream(B, target, target_rho, window, WbT)
    for rho, start, values in rows:
        engine.step(rho, start, values)
    return engine


def _measures(sums: Sums, target_colsum: np.ndarray, m_frob2: float, noise_rows: np.ndarray, buffer: int) -> dict[str, Any]:
    """Bias, amplification (against ``M``), per-row bias, the scale-free bias and its scale, and
    the sampling noise of one rule from its :class:`Sums` (docs/server-rules.md §7)."""
    RR, RY, YY = float(sums.rr.sum()), float(sums.ry.sum()), float(sums.yy.sum())
    AW2 = RR + 2.0 * RY + YY  # ‖AW‖² with AW = R + Y
    if AW2 > 0:
        c = (RY + YY) / AW2
        # min_c ‖cAW − M‖² = (‖AW‖²‖M‖² − ⟨AW, M⟩²) / ‖AW‖² = (‖R‖²‖M‖² − ⟨R, M⟩²) / ‖AW‖² (the
        # terms in ‖M‖⁴ cancel algebraically, not in round-off); where R is nearly a multiple αM
        # the difference still loses digits: its error is about ε α² ‖M‖² (docs/server-rules.md §7.1)
        free = float(np.sqrt(max(RR * YY - RY * RY, 0.0) / (AW2 * YY)))
    else:
        c, free = 0.0, 1.0
    return {
        "bias": float(np.sqrt(RR) / np.sqrt(YY)),
        "amplification": float(np.sqrt(sums.aa.sum()) / np.sqrt(m_frob2)),
        "per_row": (np.sqrt(sums.rr) / np.sqrt(sums.yy)).tolist(),
        "scale_free": free, "best_scale": float(c),
        "sampling_noise": float(np.sum(sums.colsum**2 * noise_rows)) / (float(np.sum(target_colsum**2)) / buffer),
    }


def banded_report(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """:func:`_banded_report` with BLAS on one thread: its calls are small (a band of
    ``(b+1) × n``), where a second thread costs far more than it gives (a ``75 × 500`` band
    product: 11 µs on one thread, 1.8 ms on two, on a loaded 2-core machine)."""
    with threadpool_limits(1, user_api="blas"):
        return _banded_report(*args, **kwargs)


def _banded_report(by_staleness: np.ndarray, exponent: float, buffer: int, beta: float, kind: TargetKind, ridge: float,
                  window: int | None = None, used_light: np.ndarray | None = None, used_full: np.ndarray | None = None,
                  floor: bool = True, seen: np.ndarray | None = None) -> dict[str, Any]:
    """:func:`asyncfl.server.bias.bias_report` on the band of ``W`` (same keys; module docstring),
    plus ``ma_full_truncation``. ``seen``: the counts the server saw (privacy: the noisy ``Ŵ``),
    on which MA-full and MA-light fit their coefficients when they are not given; the bias is
    measured on ``by_staleness``. ``floor=False`` leaves the floor out."""
    counts = np.asarray(by_staleness, dtype=np.float64)
    B = band_of(counts, exponent, buffer)
    B_view = B if seen is None else band_of(seen, exponent, buffer)
    T, width = B.shape
    # Σ_s W[t,s]² / C_{t,s} over C > 0; W ≠ 0 exactly where C > 0 (and the version exists)
    noise = B * B
    np.divide(noise, counts[:, :width], out=noise, where=B != 0)
    noise_rows = noise.sum(axis=1)
    del noise, counts
    m_lags = target_lags(kind, beta, T + 1)
    identity = np.zeros(T + 1)
    identity[0] = 1.0
    m_colsum = np.cumsum(m_lags[:T])[::-1]  # Σ_{t ≥ s} M[t, s]
    if used_light is None:
        uv, light = light_rows(B_view, kind, beta)
    else:
        uv = np.asarray(used_light, dtype=np.float64).reshape(-1, 2)
        light = light_rows_from_uv(uv, kind, beta)
    truncation = 0.0
    if used_full is None:
        full_rows = FullRows(B_view, kind, beta, ridge, window)
        full, full_window_size = iter(full_rows), full_rows.engine_window + width
    else:
        support, full = recorded_rows(used_full)
        full_window_size = support + width + 1
    WbT = lower_band_storage(B)
    engines = {
        "none": stream(B, ((0.0, t, np.ones(1)) for t in range(T)), identity, 0.0, width + 1, WbT),
        "momentum": stream(B, (next(r) for r in [target_rows(kind, beta)] for _ in range(T)), m_lags, beta, width + 2, WbT),
        "ma_full": stream(B, full, m_lags, beta, full_window_size, WbT),
        "ma_light": stream(B, light, m_lags, beta, width + 2, WbT),
    }
    if used_full is None and full_rows.amax > 0:
        truncation = full_rows.dropped / full_rows.amax
    m_frob2 = float(engines["momentum"].sums().yy.sum())
    report: dict[str, Any] = {"amplification": {}, "per_row": {}, "scale_free": {}, "best_scale": {}, "sampling_noise": {}}
    for name, engine in engines.items():
        target_colsum = np.ones(T) if name == "none" else m_colsum
        measures = _measures(engine.sums(), target_colsum, m_frob2, noise_rows, buffer)
        report[name] = measures.pop("bias")
        for key, value in measures.items():
            report[key][name] = value
    report["a_light"] = uv.tolist()
    report["ma_full_truncation"] = truncation
    if floor:
        residuals = floor_banded(B, kind, beta)
        report["floor"] = float(np.sqrt(np.sum(residuals**2)) / np.sqrt(m_frob2))
        report["per_row"]["floor"] = (residuals / np.sqrt(engines["momentum"].sums().yy)).tolist()
    report["identity_w"] = bool(np.all(np.abs(B[:, 0] - 1.0) <= 1e-12) and np.all(np.abs(B[:, 1:]) <= 1e-12))
    return report
