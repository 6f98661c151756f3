"""Implicit momentum bias and noise amplification of a recorded run (docs/server-rules.md; paper
Figure 2).

For a recorded ``W`` (from the counts ``C_{t,s}``) and a target ``M``, a rule that weights the
history with ``A`` (rows ``a_t``) has bias ``‖A W − M‖_F / ‖M‖_F`` and noise amplification
``‖A‖_F / ‖M‖_F``. Four rules are compared: no momentum (``A = I``, measured against ``I``),
naive momentum (``A = M``), MA-full and MA-light.
"""

from __future__ import annotations

from pathlib import Path
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
    return report


def plot_bias_heatmaps(W: np.ndarray, M: np.ndarray, A_full: np.ndarray, A_light: np.ndarray, path: str | Path) -> Path:
    """Heat maps of ``M``, ``M W`` (naive momentum), ``A_full W`` and ``A_light W`` side by side on
    one colour scale, like the paper's Figure 2. Uses the Agg canvas directly (no pyplot state,
    no display). Returns the written path."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = [("M (target)", M), ("M W (momentum)", M @ W), ("A W (MA-full)", A_full @ W), ("A W (MA-light)", A_light @ W)]
    vmax = max(float(np.max(np.abs(p))) for _, p in panels) or 1.0
    fig = Figure(figsize=(4 * len(panels), 3.6))
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels))
    for ax, (title, mat) in zip(axes, panels):
        image = ax.imshow(mat, cmap="RdBu_r", vmin=-vmax, vmax=vmax, interpolation="nearest")
        ax.set_title(title)
        ax.set_xlabel("s (gradient version)")
        ax.set_ylabel("t (server step)")
    fig.colorbar(image, ax=list(axes), shrink=0.8)
    path = Path(path)
    fig.savefig(path, dpi=100)
    return path
