"""Implicit momentum bias and noise amplification of a recorded run (docs/server-rules.md; paper
Figure 2).

For a recorded ``W`` (from the counts ``C_{t,s}``) and a target ``M``, a rule that weights the
history with ``A`` (rows ``a_t``) has bias ``‖A W − M‖_F / ‖M‖_F`` and noise amplification
``‖A‖_F / ‖M‖_F``. Four rules are compared: no momentum (``A = I``, measured against ``I``),
naive momentum (``A = M``), MA-full and MA-light.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from asyncfl.server.aggregation import weight_matrix
from asyncfl.server.ma import (
    TargetKind,
    coefficient_matrix_full,
    light_matrix_from_uv,
    light_recursion,
    noise_amplification,
    relative_bias,
    row_bias,
    target_matrix,
)


def floor_residuals(W: np.ndarray, M: np.ndarray, tol: float = 1e-10) -> np.ndarray:
    """Per row ``t``: ``min_a ‖aᵀ W[:t, :] − M[t, :]‖₂``, the smallest residual any weighting
    ``a ∈ ℝ^t`` of the aggregates ``r_1 … r_t`` can reach — MA-full with ``λ = 0`` and no window
    (docs/server-rules.md §7, "the floor"). It is the distance of ``M[t, :]`` from the span of the
    first ``t`` rows of ``W``, computed with one orthonormal basis of that span grown row by row
    (modified Gram–Schmidt, orthogonalised twice; a row whose remainder is below ``tol`` times its
    norm adds nothing), so a singular ``W`` costs no more than an invertible one: ``O(T³)``."""
    W = np.asarray(W, dtype=np.float64)
    M = np.asarray(M, dtype=np.float64)
    T = W.shape[0]
    Q = np.zeros((T, T))  # rows 0..k-1: orthonormal basis of span(W[:t, :])
    k = 0
    out = np.zeros(T)
    for t in range(T):
        v = W[t].copy()
        norm = float(np.linalg.norm(v))
        for _ in range(2):
            v -= Q[:k].T @ (Q[:k] @ v)
        if norm > 0 and np.linalg.norm(v) > tol * norm:
            Q[k] = v / np.linalg.norm(v)
            k += 1
        m = M[t]
        out[t] = float(np.linalg.norm(m - Q[:k].T @ (Q[:k] @ m)))
    return out


def scale_free_bias(A: np.ndarray, W: np.ndarray, M: np.ndarray) -> tuple[float, float]:
    """``(min_c ‖c·AW − M‖_F / ‖M‖_F, c*)`` with the closed form ``c* = ⟨AW, M⟩_F / ‖AW‖_F²``
    (docs/server-rules.md §7): the bias left once the best overall scale is taken out, i.e. the
    error in the *shape* of the effective weights. ``AW = 0`` gives ``(1, 0)``."""
    AW = np.asarray(A, dtype=np.float64) @ np.asarray(W, dtype=np.float64)
    M = np.asarray(M, dtype=np.float64)
    denom = float(np.sum(AW * AW))
    c = float(np.sum(AW * M)) / denom if denom > 0 else 0.0
    return float(np.linalg.norm(c * AW - M) / np.linalg.norm(M)), c


def count_matrix(by_staleness: np.ndarray) -> np.ndarray:
    """``C_{t,s}`` as a T×T lower-triangular array (0-based ``[t-1, s-1]``) from ``by_staleness[t-1, τ]``."""
    return weight_matrix(by_staleness, 0.0, 1)


def sampling_noise(A: np.ndarray, W: np.ndarray, counts: np.ndarray) -> float:
    """``E‖E Aᵀ1‖² / σ²`` under the model of docs/server-rules.md §7: the sampling errors
    ``ζ_{t,s}`` are independent, with mean 0 and ``E‖ζ_{t,s}‖² = σ²/C_{t,s}`` (the mean of
    ``C_{t,s}`` independent uploads of per-client variance ``σ²``), so with ``c = Aᵀ1``

        E‖E Aᵀ1‖² = σ² Σ_t c_t² Σ_{s : C_{t,s} > 0} W[t,s]² / C_{t,s} ."""
    c = np.asarray(A, dtype=np.float64).sum(axis=0)
    counts = np.asarray(counts, dtype=np.float64)
    W = np.asarray(W, dtype=np.float64)
    per_row = np.divide(W * W, counts, out=np.zeros_like(W), where=counts > 0).sum(axis=1)
    return float(np.sum(c * c * per_row))


def _matrix_from_rows(rows: np.ndarray | Sequence[Sequence[float]], T: int) -> np.ndarray:
    """``A`` from the ``a_t`` actually used: a T×T array, or a list whose ``t``-th entry has
    length ``t`` (row ``t`` of ``A``, zeros right of the diagonal)."""
    if isinstance(rows, np.ndarray) and rows.ndim == 2:
        return np.asarray(rows, dtype=np.float64)
    A = np.zeros((T, T))
    for t, a in enumerate(rows):
        a = np.asarray(a, dtype=np.float64)
        A[t, : len(a)] = a
    return A


def bias_report(
    by_staleness: np.ndarray,
    exponent: float,
    buffer: int,
    beta: float,
    kind: TargetKind,
    ridge: float,
    window: int | None = None,
    used_light: np.ndarray | Sequence[Sequence[float]] | None = None,
    used_full: np.ndarray | Sequence[Sequence[float]] | None = None,
) -> dict[str, Any]:
    """Bias and amplification of no momentum, naive momentum, MA-full and MA-light on the exact
    ``W = weight_matrix(by_staleness, exponent, buffer)`` (docs/protocol.md §7, docs/server-rules.md).

    ``used_full`` (the ``a_t`` the MA-full rule used) and ``used_light`` (its ``(u_t, v_t)``)
    replace the offline coefficients when given — with privacy the rules solved on a noisy
    ``Ŵ``, and their bias is still measured on the exact ``W``. Otherwise the coefficients are
    computed offline from ``W`` with ``ridge`` / ``window``.

    Returns ``none``, ``momentum``, ``ma_full``, ``ma_light`` (overall relative Frobenius bias;
    ``floor`` is the lowest any rule linear in the aggregates can reach, :func:`floor_residuals`;
    ``none`` is ``‖W − I‖_F / ‖I‖_F``), ``amplification`` (same keys, ``‖A‖_F/‖M‖_F``; ``none``
    uses ``A = I``), ``per_row`` (same keys, lists of :func:`asyncfl.server.ma.row_bias`) and
    ``a_light`` (the ``[u_t, v_t]`` pairs used — given or computed; for a Nesterov target they fit
    the heavy-ball buffer and ``A_light = I + β Ã``, :func:`asyncfl.server.ma.light_matrix_from_uv`).
    """
    W = weight_matrix(by_staleness, exponent, buffer)
    T = W.shape[0]
    M = target_matrix(kind, beta, T)
    I = np.eye(T)
    if used_light is None:
        A_light, uv = light_recursion(W, kind, beta)
    else:
        uv = np.asarray(used_light, dtype=np.float64).reshape(-1, 2)
        A_light = light_matrix_from_uv(uv, kind, beta)
    A_full = coefficient_matrix_full(W, kind, beta, ridge, window) if used_full is None else _matrix_from_rows(used_full, T)
    cases = {"none": (I, I), "momentum": (M, M), "ma_full": (A_full, M), "ma_light": (A_light, M)}
    report: dict[str, Any] = {name: relative_bias(A, W, target) for name, (A, target) in cases.items()}
    report["amplification"] = {name: noise_amplification(A, M) for name, (A, _) in cases.items()}
    report["per_row"] = {name: row_bias(A, W, target).tolist() for name, (A, target) in cases.items()}
    report["a_light"] = uv.tolist()
    scale_free = {name: scale_free_bias(A, W, target) for name, (A, target) in cases.items()}
    report["scale_free"] = {name: value for name, (value, _) in scale_free.items()}
    report["best_scale"] = {name: scale for name, (_, scale) in scale_free.items()}
    counts = count_matrix(by_staleness)
    # the synchronous reference of each rule: its target weights, every step C fresh uploads
    report["sampling_noise"] = {name: sampling_noise(A, W, counts) / sampling_noise(target, I, buffer * I)
                                for name, (A, target) in cases.items()}
    floor = floor_residuals(W, M)
    report["floor"] = float(np.sqrt(np.sum(floor**2)) / np.linalg.norm(M))
    report["per_row"]["floor"] = (floor / np.linalg.norm(M, axis=1)).tolist()
    return report
