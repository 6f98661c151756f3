"""``sweep.png`` of the privacy–utility sweep (docs/privacy.md, "What a run reports")."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import numpy as np

from asyncfl.figures.style import figure, save, styled
from asyncfl.figures.style import title as set_title
from analysis.privacy_sweep.plan import update_noise_std
from analysis.privacy_sweep.spec import RULES, Budget, SweepRow
from analysis.privacy_sweep.tables import aggregate

COLOURS = {"ma-light": "tab:blue", "ma-full": "tab:orange", "momentum": "tab:gray"}


@styled
def plot(rows: Sequence[SweepRow], budget: Budget, path: Path, title: str | None = None, fmt: str | None = None,
         name: str = "") -> Path:
    """``sweep.png`` (or ``.pdf`` / ``.svg``): three panels against ξ (log x; top axis ξ/C):

    1. final test accuracy per rule, mean ± 95 % CI over seeds (:func:`asyncfl.figures.ci.mean_ci`);
    2. bias ``‖AW − M‖_F/‖M‖_F`` on the exact W (solid, ± 95 % CI) and on the noisy Ŵ (dashed) for
       each rule, and naive momentum's bias on the same W as the reference it is meant to beat
       (grey, dash-dotted) — MA's rises towards it once ``Ŵ`` is mostly noise;
    3. the analytic noise std: update ``σ S_Δ ξ / (M √(ξ² − σ²))`` with its floor ``σ S_Δ / M``,
       and counts ``ξ / M`` with the level 1 (the largest total of a row of W); ``M`` is the
       noise cohort, ``C`` without one (docs/privacy.md §7).

    Every panel marks ``ξ = M`` (count noise std 1 per row of ``W``)."""
    agg = aggregate(rows)
    rules = [r for r in RULES if any(a["rule"] == r for a in agg)]
    fig = figure(8.5, 10.5)
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
    if agg:  # naive momentum's bias on each point's exact W: the reference line, whatever rules ran
        by_xi: dict[float, float] = {}
        for a in agg:
            by_xi.setdefault(a["xi"], a["bias_momentum"][0])
        xs = sorted(by_xi)
        ax_bias.plot(xs, [by_xi[x] for x in xs], color="0.35", ls="-.", lw=1.3, label="naive momentum on exact W (reference)")
    seeds = max((a["n"] for a in agg), default=0)
    ax_acc.set_ylabel("final test accuracy")
    ax_acc.yaxis.set_major_formatter(_percent())
    ax_bias.set_ylabel("bias ‖AW − M‖_F / ‖M‖_F")
    ax_bias.set_yscale("log")

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
    ax_noise.set_xlabel(f"ξ, the count-noise level (σ = {budget.sigma:.3g}, C = {budget.C}, M = {M})")
    for ax in (ax_acc, ax_bias, ax_noise):
        ax.set_xscale("log")
        ax.grid(True, which="both", alpha=0.3)
        ax.axvline(M, color="k", ls=":", lw=0.9, label=f"ξ = M = {M} (count noise std 1)")
        ax.legend(fontsize=7.5, ncol=2 if ax is ax_bias else 1, loc="center left" if ax is ax_noise else "best")
    top = ax_acc.secondary_xaxis("top", functions=(lambda x: x / budget.C, lambda r: r * budget.C))
    top.set_xlabel("ξ / C")
    eps = f"ε = {budget.epsilon_target:g}, " if budget.epsilon_target is not None else ""
    spread = f"mean ± 95 % CI over {seeds} seeds" if seeds > 1 else "one seed: no interval"
    what = title or (f"private MA at fixed {eps}δ = {budget.delta:g} (σ = {budget.sigma:.3g}, S_Δ = {budget.clip:g}; "
                     f"{budget.sampling}: {budget.claim}); {spread}")
    set_title(fig, name, what)
    return save(fig, path, fmt)


def _percent():
    from matplotlib.ticker import PercentFormatter

    return PercentFormatter(xmax=1.0, decimals=0)
