"""Correlated noise by matrix factorisation: banded-Toeplitz and BLT strategies (docs/privacy.md §12).

The server's private sums over ``T`` steps form a matrix ``X`` (row ``t`` = step ``t``'s sum of
payloads). A linear *workload* ``A`` (lower-triangular ``T × T``) is what the training algorithm
ultimately computes from them: prefix sums for SGD (``A[t, s] = 1``), the momentum matrix
``M_mom[t, s] = β^(t−s)`` of docs/server-rules.md §2, or the model trajectory of momentum SGD
(their product). A factorisation ``A = B C`` with ``C`` lower-triangular releases ``C X + Z``,
``Z`` i.i.d. Gaussian, and hands the algorithm ``X̂ = X + C⁻¹ Z``: each step's sum carries noise
``w_t = (C⁻¹ Z)_t``, correlated across steps, and ``A X̂ = A X + B Z``.

Every strategy here is **lower-triangular Toeplitz**, given by its first column ``c``
(``c_0 = 1``): ``C[i, j] = c_{i−j}`` for ``i ≥ j``. Two families:

* **banded** (``b̂`` bands): ``c_j = 0`` for ``j ≥ b̂``. The inverse recursion
  ``w_t = z_t − Σ_{j=1}^{b̂−1} c_j w_{t−j}`` keeps ``b̂ − 1`` noise vectors;
* **BLT** (buffered linear Toeplitz, ``n`` buffers): ``c_j = Σ_i ω_i θ_i^(j−1)`` for ``j ≥ 1``,
  ``θ_i ∈ (0, 1)``, ``ω_i ≥ 0``. Then ``Σ_{j≥1} c_j w_{t−j} = Σ_i ω_i s_{i,t}`` with buffers
  ``s_{i,t+1} = θ_i s_{i,t} + w_t``: ``n`` noise vectors, whatever ``T``.

Sensitivity under a participation schema (k, b)
-----------------------------------------------
A client contributes to at most ``k`` steps, any two at least ``b`` apart (``k = 1``: once).
Under zero-out adjacency its contributions ``x_t`` (``‖x_t‖ ≤ 1`` after scaling by ``S``) change
``C X`` by ``Σ_{t∈π} C[:, t] x_tᵀ``, so::

    sens²(C) = max_{π admissible} max_{‖x_t‖≤1} ‖Σ_{t∈π} C[:, t] x_tᵀ‖_F²  =  max_π Σ_{s,t∈π} (CᵀC)[s, t]

the second equality when ``CᵀC ≥ 0`` entrywise (then all ``x_t`` equal is optimal). Exact
evaluation (:func:`sensitivity_squared`):

* if every two columns ``b`` or more apart have disjoint supports (banded with ``b̂ ≤ b``, or
  ``k = 1``), the cross terms vanish and the best pattern maximises ``Σ_{t∈π} ‖C[:, t]‖²``: a
  dynamic programme over ``t`` (the column norms of a banded Toeplitz ``C`` do not increase
  with ``t``, so ``π = {0, b, 2b, …}``);
* if ``c`` is non-negative and non-increasing, ``(CᵀC)[s, t] = Σ_{i ≥ max(s,t)} c_{i−s} c_{i−t}``
  is non-negative, does not increase when ``s`` or ``t`` moves later (a shorter sum) nor when
  ``|s − t|`` grows (``Σ_j c_j c_{j+Δ}`` decreases in ``Δ``), so the earliest, densest pattern
  ``π = {0, b, 2b, …, (k′−1) b}``, ``k′ = min(k, ⌈T/b⌉)``, is optimal.

Anything else is refused (no exact method). ``tests/test_privacy_factorization.py`` checks both
against a brute-force maximum over every admissible pattern and sign vector at ``T ≤ 12``.

The whole run is then **one** Gaussian mechanism of noise multiplier ``σ`` on ``C X`` with
sensitivity ``sens(C)·S``: ``Z ~ N(0, (σ · sens(C) · S)²)`` per entry, and σ is calibrated with
dp-accounting for a single Gaussian release
(:func:`asyncfl.privacy.accounting.sigma_for_strategy`).

Optimisation
------------
:func:`optimize_banded` and :func:`optimize_blt` minimise the expected total squared error of the
workload at unit noise multiplier, ``loss(C) = sens²(C) · ‖A C⁻¹‖_F²`` (reported as
``RMSE = √(loss / T)``, the root-mean-square noise std over the ``T`` queries), with torch's
L-BFGS in float64. ``A C⁻¹`` is Toeplitz; its first column is ``a * c⁻¹`` (the convolution of
the workload's column with the power series ``1/c``, both by FFT: ``O(T log T)`` a step) and
``‖Toeplitz(v)‖_F² = Σ_j (T − j) v_j²``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np
import torch

from asyncfl.config.privacy import WORKLOAD_NEEDS_BETA
from asyncfl.privacy.accountants import Releases


# ------------------------------------------------------------------------------ workloads
def prefix_workload(T: int) -> np.ndarray:
    """First column of the prefix-sum workload (lower-triangular ones): ``a_j = 1``."""
    return np.ones(int(T))


def momentum_workload(T: int, beta: float) -> np.ndarray:
    """First column of ``M_mom[t, s] = β^(t−s)`` (docs/server-rules.md §2): ``a_j = β^j``."""
    if not 0.0 <= beta < 1.0:
        raise ValueError(f"momentum β = {beta!r}: must be in [0, 1)")
    return beta ** np.arange(int(T), dtype=np.float64)


def momentum_trajectory_workload(T: int, beta: float) -> np.ndarray:
    """The model trajectory of momentum SGD, prefix sums of ``M_mom``: ``a_j = Σ_{i≤j} β^i``."""
    return np.cumsum(momentum_workload(T, beta))


def toeplitz(c: np.ndarray | torch.Tensor, T: int | None = None) -> np.ndarray:
    """The lower-triangular Toeplitz ``T × T`` matrix with first column ``c`` (zero-padded)."""
    col = np.asarray(c, dtype=np.float64)
    T = col.size if T is None else int(T)
    col = np.pad(col[:T], (0, max(0, T - col.size)))
    i, j = np.indices((T, T))
    return np.where(i >= j, col[np.clip(i - j, 0, T - 1)], 0.0)


def _toeplitz_t(c: torch.Tensor, T: int) -> torch.Tensor:
    col = torch.nn.functional.pad(c[:T], (0, max(0, T - c.numel())))
    idx = torch.arange(T)
    diff = idx[:, None] - idx[None, :]
    return torch.where(diff >= 0, col[diff.clamp(min=0)], torch.zeros((), dtype=c.dtype))


def inverse_column(c: np.ndarray, T: int) -> np.ndarray:
    """First column of ``C⁻¹`` (itself lower-triangular Toeplitz), by one triangular solve."""
    ct = torch.as_tensor(np.asarray(c, dtype=np.float64))
    return _inverse_column_t(ct, T).numpy()


def _conv_t(x: torch.Tensor, y: torch.Tensor, T: int) -> torch.Tensor:
    """The first ``T`` terms of the convolution ``x * y`` (the product of two lower-triangular
    Toeplitz matrices' first columns), by FFT."""
    n = 1 << (2 * T - 1).bit_length()
    return torch.fft.irfft(torch.fft.rfft(x[:T], n) * torch.fft.rfft(y[:T], n), n)[:T]


def _inverse_column_t(c: torch.Tensor, T: int) -> torch.Tensor:
    """First ``T`` terms of the power series ``1/c(z)`` by Newton's iteration
    ``g ← g (2 − c g)`` (mod ``z^m``, ``m`` doubling): ``O(T log T)``, differentiable."""
    c = torch.nn.functional.pad(c[:T], (0, max(0, T - c.numel())))
    g = (1.0 / c[:1])
    m = 1
    while m < T:
        m = min(2 * m, T)
        cg = _conv_t(c[:m], torch.nn.functional.pad(g, (0, m - g.numel())), m)
        two = torch.zeros(m, dtype=c.dtype)
        two[0] = 2.0
        g = _conv_t(torch.nn.functional.pad(g, (0, m - g.numel())), two - cg, m)
    return g[:T]


# ------------------------------------------------------------------------------ strategies
@dataclass(frozen=True)
class Strategy:
    """A lower-triangular Toeplitz strategy ``C`` (first column ``column``, ``column[0] = 1``)
    for ``T`` steps; ``bands`` ``b̂`` (None: not banded) or BLT parameters ``(θ, ω)``."""

    kind: str  # "banded" | "blt" | "identity" | "sqrt"
    T: int
    column: np.ndarray
    bands: int | None = None
    theta: np.ndarray | None = None
    omega: np.ndarray | None = None

    def matrix(self) -> np.ndarray:
        return toeplitz(self.column, self.T)


def identity_strategy(T: int) -> Strategy:
    """``C = I``: i.i.d. noise on every step (the mechanism of docs/privacy.md §1)."""
    col = np.zeros(T)
    col[0] = 1.0
    return Strategy("identity", T, col, bands=1)


def sqrt_strategy(T: int) -> Strategy:
    """``C = A^{1/2}`` for prefix sums: ``c_j = binom(2j, j) / 4^j`` (the Toeplitz square root of
    the lower-triangular ones, Fichtenberger, Henzinger & Upadhyay 2023)."""
    j = np.arange(1, T)
    col = np.concatenate([[1.0], np.cumprod(1.0 - 0.5 / j)])
    return Strategy("sqrt", T, col)


def blt_column(theta: np.ndarray, omega: np.ndarray, T: int) -> np.ndarray:
    """``c_0 = 1``, ``c_j = Σ_i ω_i θ_i^(j−1)`` (j ≥ 1)."""
    th, om = np.asarray(theta, dtype=np.float64), np.asarray(omega, dtype=np.float64)
    j = np.arange(T - 1, dtype=np.float64)
    return np.concatenate([[1.0], (om[None, :] * th[None, :] ** j[:, None]).sum(axis=1)])


def blt_strategy(theta: np.ndarray, omega: np.ndarray, T: int) -> Strategy:
    th, om = np.asarray(theta, dtype=np.float64), np.asarray(omega, dtype=np.float64)
    if np.any(th <= 0) or np.any(th >= 1) or np.any(om < 0):
        raise ValueError("BLT parameters: need 0 < θ_i < 1 and ω_i ≥ 0")
    return Strategy("blt", T, blt_column(th, om, T), theta=th, omega=om)


def banded_strategy(column: np.ndarray, T: int) -> Strategy:
    col = np.asarray(column, dtype=np.float64)
    if col[0] != 1.0:
        raise ValueError(f"banded strategy: c_0 = {col[0]!r}, must be 1")
    full = np.pad(col[:T], (0, max(0, T - col.size)))
    nz = np.nonzero(full)[0]
    return Strategy("banded", T, full, bands=int(nz.max()) + 1)


# ------------------------------------------------------------------------------ sensitivity
def _admissible_count(T: int, k: int, b: int) -> int:
    """``k′ = min(k, ⌈T/b⌉)``: the most participations that fit in ``T`` steps ``b`` apart."""
    return min(int(k), -(-int(T) // int(b)))


def _check_schema(k: int, b: int) -> None:
    if int(k) != k or k < 1:
        raise ValueError(f"max participations k = {k!r}: must be a positive integer")
    if int(b) != b or b < 1:
        raise ValueError(f"min separation b = {b!r}: must be a positive integer")


def sensitivity_squared(C: np.ndarray, k: int, b: int) -> float:
    """``sens²(C)`` under the (k, b) participation schema, exactly (module docstring): the
    dynamic programme when columns ``b`` apart have disjoint supports, the pattern
    ``{0, b, 2b, …}`` for a Toeplitz ``C`` with non-negative, non-increasing first column.
    Raises :class:`ValueError` otherwise."""
    _check_schema(k, b)
    C = np.asarray(C, dtype=np.float64)
    T = C.shape[0]
    if np.any(np.triu(C, 1)):
        raise ValueError("sensitivity: the strategy C must be lower-triangular")
    # column t is supported on rows t … last[t]; columns ≥ b apart are disjoint if last[t] < t + b
    nonzero = C != 0
    last = np.where(nonzero.any(axis=0), T - 1 - np.argmax(nonzero[::-1], axis=0), -1)
    if k == 1 or np.all(last < np.arange(T) + b):
        return _best_separated_sum(np.einsum("ij,ij->j", C, C), k, b)
    col = C[:, 0]
    if np.array_equal(C, toeplitz(col, T)) and np.all(col >= 0) and np.all(np.diff(col) <= 0):
        summed = _pattern_sum(col, T, _admissible_count(T, k, b), b)  # Σ_{p∈π} C[:, p], π = {0, b, 2b, …}
        return float((summed**2).sum())
    raise ValueError("sensitivity: no exact method for this strategy and schema (need columns b apart with "
                     "disjoint supports, or a Toeplitz strategy with a non-negative, non-increasing column)")


def _best_separated_sum(values: np.ndarray, k: int, b: int) -> float:
    """``max Σ_{t∈π} values[t]`` over ``|π| ≤ k`` with gaps ``≥ b`` (values ≥ 0): the dynamic
    programme ``best_j[t] = max(best_j[t+1], values[t] + best_{j−1}[t+b])`` (the best sum of at
    most ``j`` picks among columns ``≥ t``). For each ``j`` it is a running maximum from the right
    of ``values[t] + best_{j−1}[t+b]``, one numpy pass of ``O(T)`` (the same additions and
    comparisons as the scalar loop, so the same bits); ``j`` stops at ``k′ = min(k, ⌈T/b⌉)``,
    or earlier once another pick adds nothing."""
    values = np.asarray(values, dtype=np.float64)
    T = values.size
    best = np.zeros(T + b + 1)  # best_0 = 0; entries t ≥ T stay 0 (no columns left)
    for _ in range(_admissible_count(T, k, b) if T else 0):
        candidate = values + best[b: b + T]
        nxt = best.copy()
        nxt[:T] = np.maximum.accumulate(candidate[::-1])[::-1]
        if np.array_equal(nxt, best):
            break
        best = nxt
    return float(best[0])


#: up to this many pattern terms the optimisers sum the shifted columns one by one, as before
#: (the same bits as earlier versions); beyond it by a windowed cumulative sum, O(T) per step
DIRECT_TERMS = 64


def _pattern_sum_t(col: torch.Tensor, T: int, terms: int, b: int) -> torch.Tensor:
    """``Σ_{m < terms} col`` shifted down by ``m·b`` (the columns ``{0, b, 2b, …}`` of a Toeplitz
    ``C`` summed), differentiable. Entry ``t`` is the sum of ``col[t − m b]`` over the last
    ``terms`` indices of ``t``'s residue class mod ``b``: with ``x[i, r] = col[i b + r]`` and
    ``S = cumsum(x)`` over ``i``, it is ``S[i] − S[i − terms]``."""
    if terms <= DIRECT_TERMS:
        return sum(torch.nn.functional.pad(col[: T - q], (q, 0)) for q in range(0, min(terms * b, T), b))
    n = -(-T // b)
    x = torch.nn.functional.pad(col[:T], (0, n * b - T)).reshape(n, b)
    cs = torch.cumsum(x, dim=0)
    if terms < n:
        cs = cs - torch.nn.functional.pad(cs[: n - terms], (0, 0, terms, 0))
    return cs.reshape(-1)[:T]


def _pattern_sum(col: np.ndarray, T: int, terms: int, b: int) -> np.ndarray:
    """:func:`_pattern_sum_t` in numpy, summed term by term (exact; ``terms`` numpy passes of
    ``O(T)``)."""
    summed = np.zeros(T)
    for q in range(0, min(terms * b, T), b):
        summed[q:] += col[: T - q]
    return summed


def strategy_sensitivity_squared(strategy: Strategy, k: int, b: int) -> float:
    """:func:`sensitivity_squared` of a Toeplitz strategy from its column alone (``O(kT)``, no
    ``T × T`` matrix): ``‖C[:, t]‖² = Σ_{j < T−t} c_j²``; the same two exact cases."""
    _check_schema(k, b)
    c, T = strategy.column, strategy.T
    nz = np.nonzero(c)[0]
    bands = int(nz.max()) + 1
    if k == 1 or bands <= b:
        tail = np.cumsum(c**2)  # ‖C[:, t]‖² = tail[T − 1 − t]
        return _best_separated_sum(tail[::-1].copy(), k, b)
    if np.all(c >= 0) and np.all(np.diff(c) <= 0):
        summed = _pattern_sum(c, T, _admissible_count(T, k, b), b)
        return float((summed**2).sum())
    return sensitivity_squared(strategy.matrix(), k, b)  # raises: no exact method


def strategy_sensitivity(strategy: Strategy, k: int, b: int) -> float:
    """``sens(C)`` of a strategy under (k, b) (:func:`strategy_sensitivity_squared`, square-rooted)."""
    return math.sqrt(strategy_sensitivity_squared(strategy, k, b))


# ------------------------------------------------------------------------------ error
def workload_error(strategy: Strategy, workload: np.ndarray, k: int, b: int) -> dict[str, float]:
    """Error of the workload ``A`` (first column ``workload``) at noise multiplier 1:
    ``loss = sens²(C) ‖A C⁻¹‖_F²``, ``rmse = √(loss/T)`` and ``max_error`` (the largest
    per-query std, ``sens(C) · max_t ‖(A C⁻¹)[t, :]‖``)."""
    T = strategy.T
    a = np.asarray(workload, dtype=np.float64)[:T]
    v = np.convolve(a, inverse_column(strategy.column, T))[:T]  # first column of A C⁻¹
    sens2 = strategy_sensitivity_squared(strategy, k, b)
    frob2 = float(np.sum((T - np.arange(T)) * v**2))
    return {"loss": sens2 * frob2, "rmse": math.sqrt(sens2 * frob2 / T),
            "max_error": math.sqrt(sens2 * float(np.sum(v**2))), "sensitivity": math.sqrt(sens2)}


def _loss_t(col: torch.Tensor, a: torch.Tensor, T: int, sens2: torch.Tensor) -> torch.Tensor:
    v = _conv_t(a, _inverse_column_t(col, T), T)  # first column of A C⁻¹ (Toeplitz product)
    weights = torch.arange(T, 0, -1, dtype=col.dtype)
    return sens2 * (weights * v**2).sum()


def _minimize(params: torch.Tensor, loss_fn: Callable[[torch.Tensor], torch.Tensor], iters: int) -> torch.Tensor:
    params = params.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([params], lr=1.0, max_iter=iters, tolerance_grad=1e-10, tolerance_change=1e-14,
                            history_size=50, line_search_fn="strong_wolfe")

    def closure() -> torch.Tensor:
        opt.zero_grad()
        loss = loss_fn(params)
        loss.backward()
        return loss

    opt.step(closure)
    return params.detach()


def optimize_banded(workload: np.ndarray, bands: int, k: int = 1, b: int | None = None, iters: int = 300) -> Strategy:
    """The ``b̂``-banded Toeplitz strategy (``c_0 = 1``) minimising ``sens²(C)‖A C⁻¹‖_F²``
    under (k, b) with ``b̂ ≤ b`` (default ``b = b̂``; with ``k = 1`` any ``b̂``), so that the
    sensitivity is the dynamic programme's ``Σ_{m<k′} ‖C[:, m b]‖²``. Starts from the truncated
    square root."""
    a_np = np.asarray(workload, dtype=np.float64)
    T = a_np.size
    bands = int(min(bands, T))
    b = bands if b is None else int(b)
    _check_schema(k, b)
    if k > 1 and bands > b:
        raise ValueError(f"banded optimisation: b̂ = {bands} bands need min separation b ≥ b̂ (b = {b}) for k > 1")
    a = torch.as_tensor(a_np)
    starts = torch.arange(_admissible_count(T, k, b) if k > 1 else 1) * b
    init = torch.as_tensor(sqrt_strategy(bands).column[1:])

    def column(p: torch.Tensor) -> torch.Tensor:
        return torch.cat([torch.ones(1, dtype=p.dtype), p])

    def loss(p: torch.Tensor) -> torch.Tensor:
        col = column(p)
        sq = col**2
        # ‖C[:, t]‖² = Σ_{j < min(b̂, T−t)} c_j²
        if len(starts) <= DIRECT_TERMS:
            sens2 = sum(sq[: min(bands, T - int(t))].sum() for t in starts)
        else:  # every start but the last few sees all b̂ bands: cumulative sums, O(k′)
            sens2 = torch.cumsum(sq, 0)[(T - starts).clamp(max=bands) - 1].sum()
        return _loss_t(col, a, T, sens2) / T

    p = _minimize(init, loss, iters) if bands > 1 else init
    return banded_strategy(column(p).numpy(), T)


def optimize_blt(workload: np.ndarray, buffers: int, k: int = 1, b: int = 1, iters: int = 300) -> Strategy:
    """The BLT strategy with ``buffers`` buffers minimising ``sens²(C)‖A C⁻¹‖_F²`` under (k, b).
    Parameterised so that its column is non-negative and non-increasing (``θ_i = sigmoid(u_i)``,
    ``ω = sigmoid(v) · softmax(w)``, so ``Σ ω_i ≤ 1 = c_0``) and the sensitivity is the
    ``{0, b, 2b, …}`` pattern's."""
    _check_schema(k, b)
    a_np = np.asarray(workload, dtype=np.float64)
    T = a_np.size
    a = torch.as_tensor(a_np)
    n = int(buffers)
    terms = _admissible_count(T, k, b)
    j = torch.arange(T - 1, dtype=torch.float64)
    # start: decays spread on a log scale, mass 1/2 on c_1 as in the square root
    init = torch.cat([torch.logit(torch.as_tensor(1.0 - np.geomspace(0.5, 2.0 / T, n))),
                      torch.zeros(1, dtype=torch.float64), torch.zeros(n, dtype=torch.float64)])

    def unpack(p: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        theta = torch.sigmoid(p[:n]).clamp(max=1 - 1e-12)
        omega = torch.sigmoid(p[n]) * torch.softmax(p[n + 1:], dim=0)
        return theta, omega

    def column(p: torch.Tensor) -> torch.Tensor:
        theta, omega = unpack(p)
        tail = (omega[None, :] * theta[None, :] ** j[:, None]).sum(dim=1)
        return torch.cat([torch.ones(1, dtype=p.dtype), tail])

    def loss(p: torch.Tensor) -> torch.Tensor:
        col = column(p)
        # Σ_{p∈π} C[:, p] = Σ_p (c shifted down by p): the pattern's columns summed
        summed = _pattern_sum_t(col, T, terms, b)
        sens2 = (summed**2).sum()
        return _loss_t(col, a, T, sens2) / T

    p = _minimize(init, loss, iters)
    theta, omega = unpack(p)
    return blt_strategy(theta.numpy(), omega.numpy(), T)


# ------------------------------------------------------------------------------ noise stream
class CorrelatedNoise:
    """Streams ``w_t = (C⁻¹ z)_t`` for a banded or BLT strategy, one step at a time, from the
    i.i.d. draws ``z_t`` the caller takes (so a step still draws exactly one vector of normals):

    * banded: ``w_t = z_t − Σ_{j=1}^{b̂−1} c_j w_{t−j}`` (keeps ``b̂ − 1`` vectors);
    * BLT: ``w_t = z_t − Σ_i ω_i s_i``, then ``s_i ← θ_i s_i + w_t`` (keeps ``n`` vectors);
    * identity: ``w_t = z_t``.

    ``state()`` / ``restore()`` give the buffers as data (:class:`NoiseState`, the declared state
    the checkpoint holds)."""

    def __init__(self, strategy: Strategy, dim: int) -> None:
        self.strategy, self.dim = strategy, int(dim)
        if strategy.theta is not None:  # BLT
            self.buffers = np.zeros((strategy.theta.size, self.dim))
        elif strategy.bands is not None:  # banded (the identity: one band)
            self.buffers = np.zeros((max(0, (strategy.bands or 1) - 1), self.dim))  # w_{t−1}, w_{t−2}, …
        else:
            raise ValueError(f"no streaming noise for a {strategy.kind!r} strategy (dense C⁻¹)")

    def next(self, z: np.ndarray) -> np.ndarray:
        s = self.strategy
        z = np.asarray(z, dtype=np.float64)
        if s.theta is not None:
            assert s.omega is not None
            w = z - s.omega @ self.buffers
            self.buffers = s.theta[:, None] * self.buffers + w[None, :]
            return w
        if self.buffers.shape[0] == 0:
            return z.copy()
        w = z - s.column[1 : self.buffers.shape[0] + 1] @ self.buffers
        self.buffers = np.vstack([w[None, :], self.buffers[:-1]])
        return w

    def state(self) -> "NoiseState":
        return NoiseState(self.buffers.copy())

    def restore(self, state: "NoiseState") -> None:
        buffers = np.asarray(state.buffers)
        if buffers.shape != self.buffers.shape or buffers.dtype != np.float64:
            raise ValueError(f"noise buffers of shape {buffers.shape} ({buffers.dtype}), expected {self.buffers.shape} (float64)")
        self.buffers = buffers.copy()


# ------------------------------------------------------------------------------ the noise components
class NoiseState(NamedTuple):
    """The noise stream's buffers as data (declared state of ``privacy.noise``, docs/privacy.md
    §12): ``(b̂ − 1) × D`` past noise vectors (banded), ``n × D`` buffers (BLT), ``0 × D`` (i.i.d.);
    ``D = d + L``, float64."""

    buffers: np.ndarray


@dataclass(frozen=True)
class NoiseContext:
    """What a noise builder is told of the run: ``steps`` T, the schema ``(k, b)`` the engine
    enforces (``k`` None: no cap) and the momentum ``beta`` of a ``"momentum"`` workload."""

    steps: int
    k: int | None
    b: int
    beta: float | None


def workload_column(cfg: Any, ctx: NoiseContext) -> np.ndarray:
    """The first column of the workload a strategy is optimised for (``privacy.noise_workload``):
    prefix sums, or the momentum matrix ``β^(t−s)`` (docs/server-rules.md §2)."""
    if WORKLOAD_NEEDS_BETA[cfg.noise_workload]:
        if ctx.beta is None:
            raise ValueError(f"the {cfg.noise_workload} noise workload needs β (privacy.noise_beta or the rule's beta)")
        return momentum_workload(ctx.steps, ctx.beta)
    return prefix_workload(ctx.steps)


def build_iid(cfg: Any, ctx: NoiseContext) -> Strategy:
    """``privacy.noise = "iid"``: the identity strategy (independent noise on every step)."""
    return identity_strategy(ctx.steps)


def build_banded(cfg: Any, ctx: NoiseContext) -> Strategy:
    """``privacy.noise = "banded"``: :func:`optimize_banded` with ``noise_bands`` bands under (k, b)."""
    k = 1 if ctx.k is None else ctx.k
    b = min(cfg.noise_bands, ctx.steps) if k == 1 else ctx.b
    return optimize_banded(workload_column(cfg, ctx), cfg.noise_bands, k=k, b=b)


def build_blt(cfg: Any, ctx: NoiseContext) -> Strategy:
    """``privacy.noise = "blt"``: :func:`optimize_blt` with ``noise_buffers`` buffers under (k, b)."""
    return optimize_blt(workload_column(cfg, ctx), cfg.noise_buffers, k=1 if ctx.k is None else ctx.k, b=ctx.b)
