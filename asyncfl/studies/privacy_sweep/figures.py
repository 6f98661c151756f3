"""``sweep.png`` of the privacy–utility sweep (docs/privacy.md, "What a run reports")."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from asyncfl.studies.privacy_sweep.plan import update_noise_std
from asyncfl.studies.privacy_sweep.spec import RULES, Budget, SweepRow
from asyncfl.studies.privacy_sweep.tables import aggregate

COLOURS = {"ma-light": "tab:blue", "ma-full": "tab:orange", "momentum": "tab:gray"}


def plot(rows: Sequence[SweepRow], budget: Budget, path: Path, title: str | None = None) -> Path:
    """``sweep.png``: three panels against ξ (log x; top axis ξ/C):

    1. final test accuracy per rule (mean over seeds, bars = std);
    2. bias ``‖AW − M‖_F/‖M‖_F`` on the exact W (solid) and on the noisy Ŵ (dashed) for each
       rule — naive momentum's is flat, MA's rises once ``Ŵ`` is mostly noise;
    3. the analytic noise std: update ``σ S_Δ ξ / (M √(ξ² − σ²))`` with its floor ``σ S_Δ / M``,
       and counts ``ξ / M`` with the level 1 (the largest total of a row of W); ``M`` is the
       noise cohort, ``C`` without one (docs/privacy.md §7).

    Uses the Agg canvas directly (no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    agg = aggregate(rows)
    rules = [r for r in RULES if any(a["rule"] == r for a in agg)]
    fig = Figure(figsize=(8, 10), layout="constrained")
    FigureCanvasAgg(fig)
    ax_acc, ax_bias, ax_noise = fig.subplots(3, 1, sharex=True)
    for rule in rules:
        sub = [a for a in agg if a["rule"] == rule]
        xs = np.array([a["xi"] for a in sub])
        acc = np.array([a["accuracy"] for a in sub])
        ax_acc.errorbar(xs, acc[:, 0], yerr=acc[:, 1], marker="o", capsize=3, color=COLOURS[rule], label=rule)
        be = np.array([a["bias_exact"] for a in sub])
        bn = np.array([a["bias_noisy"] for a in sub])
        ax_bias.errorbar(xs, be[:, 0], yerr=be[:, 1], marker="o", capsize=3, color=COLOURS[rule], label=f"{rule} on exact W")
        if rule != "momentum":
            ax_bias.plot(xs, bn[:, 0], ls="--", marker=".", color=COLOURS[rule], alpha=0.7, label=f"{rule} on noisy Ŵ")
        for a in sub:
            if a["diverged"]:
                ax_acc.plot([a["xi"]], [np.nan if not np.isfinite(a["accuracy"][0]) else a["accuracy"][0]], "x", color="red")
    ax_acc.set_ylabel("final test accuracy")
    ax_acc.legend(fontsize=8)
    ax_acc.grid(alpha=0.3, which="both")
    ax_bias.set_ylabel("bias ‖AW − M‖_F / ‖M‖_F")
    ax_bias.set_yscale("log")
    ax_bias.legend(fontsize=7, ncol=2)
    ax_bias.grid(alpha=0.3, which="both")

    lo = min(a["xi"] for a in agg) if agg else budget.sigma * 1.1
    hi = max(a["xi"] for a in agg) if agg else budget.C
    grid = np.geomspace(max(lo / 1.3, budget.sigma * 1.0005), hi * 1.3, 400)
    M = budget.M  # the noise cohort (C without one): the levels are those of docs/privacy.md §7
    upd = np.array([update_noise_std(budget.sigma, budget.clip, x, M) for x in grid])
    ax_noise.plot(grid, upd, color="tab:green", label="update noise σ S_Δ ξ / (M √(ξ² − σ²))")
    ax_noise.axhline(budget.sigma * budget.clip / M, color="tab:green", ls=":", lw=1, label="its floor σ S_Δ / M")
    ax_noise.plot(grid, grid / M, color="tab:red", label="count noise ξ / M")
    ax_noise.axhline(1.0, color="tab:red", ls=":", lw=1, label="1 = largest row total of W")
    ax_noise.set_yscale("log")
    ax_noise.set_ylabel("noise std per coordinate")
    ax_noise.set_xlabel(f"ξ (count-noise level; σ = {budget.sigma:.3g}, C = {budget.C}, M = {M})")
    ax_noise.legend(fontsize=8)
    ax_noise.grid(alpha=0.3, which="both")
    for ax in (ax_acc, ax_bias, ax_noise):
        ax.set_xscale("log")
        ax.axvline(M, color="k", ls=":", lw=0.8)  # ξ/M = 1: the count noise reaches a row's total
    top = ax_acc.secondary_xaxis("top", functions=(lambda x: x / budget.C, lambda r: r * budget.C))
    top.set_xlabel("ξ / C")
    eps = f"ε = {budget.epsilon_target:g}, " if budget.epsilon_target is not None else ""
    fig.suptitle(title or f"Private MA at fixed {eps}δ = {budget.delta:g} (σ = {budget.sigma:.3g}, S_Δ = {budget.clip:g}; "
                 f"{budget.sampling}: {budget.claim})")
    fig.savefig(path, dpi=110)
    return path
