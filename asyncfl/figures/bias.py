"""``bias_heatmaps.png`` (docs/server-rules.md §8, docs/run-directory.md §11): the effective
weights a rule puts on past gradients and their distance from the target, as heat maps.

Top row, on one diverging colour scale: the target ``M``, naive momentum's ``M W``, and
MA-full's and MA-light's ``A W``. Bottom row, on one scale: the residuals the bias number
measures, ``W − I`` (no momentum, against ``I``), ``M W − M``, ``A_full W − M`` and
``A_light W − M``, each titled with its relative bias ``‖AW − M‖_F / ‖M‖_F``. Rows are server
steps ``t``, columns gradient versions ``s`` (the layout of the MA paper's Figure 2).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from asyncfl.figures.style import colorbar, figure, integer_ticks, save, styled, title
from asyncfl.run.bias_report import heatmap_matrices


def _bias(residual: np.ndarray, reference: np.ndarray) -> float:
    return float(np.linalg.norm(residual) / np.linalg.norm(reference))


@styled
def draw_bias_heatmaps(W: np.ndarray, M: np.ndarray, A_full: np.ndarray, A_light: np.ndarray, path: str | Path,
                       name: str = "", fmt: str | None = None) -> Path:
    """The eight panels described in the module docstring; returns the written path."""
    T = W.shape[0]
    I = np.eye(T)
    products = [("target M", M), ("naive momentum: M W", M @ W), ("MA-full: A W", A_full @ W), ("MA-light: A W", A_light @ W)]
    residuals = [
        (f"no momentum: W − I  (bias {_bias(W - I, I):.3f})", W - I),
        (f"naive momentum: M W − M  (bias {_bias(M @ W - M, M):.3f})", M @ W - M),
        (f"MA-full: A W − M  (bias {_bias(A_full @ W - M, M):.3f})", A_full @ W - M),
        (f"MA-light: A W − M  (bias {_bias(A_light @ W - M, M):.3f})", A_light @ W - M),
    ]
    fig = figure(17, 8.4)
    axes = fig.subplots(2, 4, sharex=True, sharey=True)
    extent = (0.5, T + 0.5, T + 0.5, 0.5)  # 1-based steps and versions on the axes
    for row, (panels, label) in enumerate(((products, "weight on the gradient of version s in step t"),
                                           (residuals, "residual (A W − M)[t, s]; W − I for no momentum"))):
        vmax = max(float(np.max(np.abs(p))) for _, p in panels) or 1.0
        for ax, (text, mat) in zip(axes[row], panels):
            image = ax.imshow(mat, cmap="RdBu_r", vmin=-vmax, vmax=vmax, interpolation="nearest", extent=extent)
            ax.set_title(text)
            ax.grid(False)
            integer_ticks(ax.xaxis)
            integer_ticks(ax.yaxis)
        if row == 1:
            for ax in axes[row]:
                ax.set_xlabel("gradient version s")
        axes[row][0].set_ylabel("server step t")
        colorbar(fig, image, list(axes[row]), label, shrink=0.9)
    title(fig, name, f"implicit momentum bias over {T} steps")
    return save(fig, path, fmt)


def plot_bias_heatmaps(run_dir: str | Path, path: str | Path | None = None, fmt: str | None = None) -> Path:
    """``bias_heatmaps.png`` (or ``.pdf`` / ``.svg``) of a run directory."""
    data = heatmap_matrices(run_dir)
    out = Path(path) if path is not None else Path(run_dir) / "bias_heatmaps.png"
    return draw_bias_heatmaps(data["W"], data["M"], data["A_full"], data["A_light"], out, data["scenario"].name, fmt)
