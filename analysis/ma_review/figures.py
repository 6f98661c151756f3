"""The review's figures, as PNG and PDF, from the study's tables alone (docs/ma-review.md §6):

* ``curves_<task>_<privacy>`` — test accuracy against server steps (top row) and virtual time
  (bottom row, symmetric-log axis: sync's time runs 10–100× longer), one column per K, one curve per method (mean over seeds, band: 95 % t interval);
  every method has its own colour, line style and marker, the target is a dotted line, and both
  axes cover every run in full (the sync baseline is drawn to its own end on the time axis);
* ``bias_<task>`` — the implicit momentum bias ‖AW − M‖_F/‖M‖_F of each momentum-type rule, one
  panel per K (each K has its own W), one group per privacy setting (SGD's bias is against I, not
  M, so it is not on these axes);
* ``tuning_<task>`` — final accuracy on the tuning seed(s) against the learning rate, per rule, one
  panel per (privacy, K);
* ``noise_<task>`` — the ablation cells beside their source: final accuracy and the noise gain
  η‖Aᵀ1‖₂ and amplification ‖A‖_F/‖M‖_F.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from asyncfl.figures.ci import mean_ci
from asyncfl.figures.style import STEP_LABEL, TIME_LABEL, figure, save, styled
from analysis.ma_review.entries import NODP
from analysis.ma_review.methods import METHOD_LABELS
from analysis.ma_review.compare import Rows, cells, tuning_by_cell

#: colour, line style, marker per method: distinguishable in colour and in grey print
STYLE = {
    "fedbuff-sgd": ("tab:gray", "-", "o"), "fedbuff-momentum": ("tab:red", "--", "s"),
    "fedbuff-nesterov": ("tab:orange", ":", "^"), "fedbuff-ma-full": ("tab:blue", "-", "D"),
    "fedbuff-ma-light": ("tab:green", "-.", "v"), "sync-momentum": ("black", (0, (5, 1)), "*"),
    "fedbuff-fadas": ("tab:purple", (0, (3, 1, 1, 1)), "P"), "fedbuff-ca2fl": ("tab:brown", (0, (1, 1)), "X"),
    "fedbuff-sgd-delay": ("tab:pink", (0, (5, 2, 1, 2)), "h"),
}
FORMATS = ("png", "pdf")


def draw_all(out: Path, rows: Rows, tuning: Rows, curves: Rows) -> list[Path]:
    written: list[Path] = []
    written += curves_figures(out, rows, curves)
    written += bias_figures(out, rows)
    written += tuning_figures(out, tuning)
    written += noise_figures(out, rows)
    return written


def _save(fig: Any, path: Path) -> list[Path]:
    return [save(fig, path.with_suffix("." + fmt), fmt) for fmt in FORMATS]


def _legend(fig: Any, axes: Any) -> None:
    """One legend below the figure with every method drawn on any of ``axes``."""
    handles: dict[str, Any] = {}
    for ax in axes:
        for h, name in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(name, h)
    fig.legend(list(handles.values()), list(handles), loc="outside lower center", ncol=min(5, len(handles)))


def _style(method: str) -> tuple[str, Any, str]:
    return STYLE.get(method, ("tab:cyan", "-", "."))


@styled
def curves_figures(out: Path, rows: Rows, curves: Rows) -> list[Path]:
    if not curves:
        return []
    by: dict[tuple[str, str], dict[tuple[int, str], dict[int, list[tuple[float, float, float]]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(list)))
    for r in curves:
        by[(r["task"], r["privacy"])][(r["K"], r["method"])][r["seed"]].append((r["step"], r["time"], r["accuracy"]))
    targets = {r["task"]: r["target_accuracy"] for r in rows}
    written = []
    for (task, privacy), series in sorted(by.items()):
        fedbuff_ks = sorted({K for K, m in series if m != "sync-momentum"})
        ks = fedbuff_ks or sorted({K for K, _ in series})
        sync = [(K, m) for K, m in series if m == "sync-momentum"]
        fig = figure(3.6 * len(ks) + 0.8, 6.4)
        axes = fig.subplots(2, len(ks), squeeze=False)
        tmax = max(p[1] for runs in series.values() for seed in runs.values() for p in seed)
        smax = max(p[0] for runs in series.values() for seed in runs.values() for p in seed)
        for j, K in enumerate(ks):
            methods = [key for key in series if key[0] == K and key[1] != "sync-momentum"] + sync
            for key in sorted(methods, key=lambda k: list(STYLE).index(k[1]) if k[1] in STYLE else 99):
                color, ls, marker = _style(key[1])
                runs = [sorted(v) for v in series[key].values()]
                n = max(len(r) for r in runs)
                runs = [r for r in runs if len(r) == n]  # a run that diverged stops early: the mean is over the others
                steps = np.array([p[0] for p in runs[0][:n]])
                acc = np.array([[p[2] for p in r[:n]] for r in runs])
                mean = acc.mean(axis=0)
                half = np.array([mean_ci(acc[:, i]).half for i in range(n)]) if len(runs) > 1 else np.zeros(n)
                half = np.nan_to_num(half)
                every = max(1, n // 8)
                vtime = np.mean([[p[1] for p in r[:n]] for r in runs], axis=0)  # each evaluation's mean virtual time
                for row, x in ((0, steps), (1, vtime)):
                    ax = axes[row][j]
                    ax.plot(x, mean, color=color, linestyle=ls, marker=marker, markevery=every, markersize=4, linewidth=1.4,
                            label=METHOD_LABELS.get(key[1], key[1]))
                    ax.fill_between(x, np.clip(mean - half, 0, 1), np.clip(mean + half, 0, 1), color=color, alpha=0.12, linewidth=0)
            for row in (0, 1):
                ax = axes[row][j]
                ax.axhline(targets.get(task, math.nan), color="0.3", linestyle=":", linewidth=1)
                ax.set_ylim(0, 1)
                if row == 1:  # sync's rounds wait for the slowest of C: its time axis is 10–100× FedBuff's
                    ax.set_xscale("symlog", linthresh=1.0)
                ax.set_xlim(0, smax if row == 0 else tmax)
                ax.set_xlabel(STEP_LABEL if row == 0 else "virtual time (symlog)")
                ax.set_ylabel("test accuracy")
                ax.set_title(f"K = {K}" + (" (sync: cohort C, no K)" if row == 0 and sync else ""))
        _legend(fig, axes[0])
        fig.suptitle(f"{task}, {privacy}: test accuracy (mean over seeds, 95 % band); dotted: the target\n"
                     f"bottom: against {TIME_LABEL}, linear below 1 and logarithmic above")
        written += _save(fig, out / f"curves_{task}_{privacy}")
    return written


@styled
def bias_figures(out: Path, rows: Rows) -> list[Path]:
    momentum_type = ["fedbuff-momentum", "fedbuff-nesterov", "fedbuff-ma-full", "fedbuff-ma-light"]
    by_cell = cells(rows)
    written = []
    for task in sorted({k[0] for k in by_cell}):
        ks = sorted({k[2] for k in by_cell if k[0] == task and k[3] in momentum_type})
        if not ks:
            continue
        labels = [p for p in dict.fromkeys(k[1] for k in sorted(by_cell, key=lambda k: (k[1] != NODP, k[1]))
                                           if k[0] == task and k[3] in momentum_type and not by_cell[k][0]["lr_from"])]
        fig = figure(3.4 * len(ks) + 0.6, 3.6)
        axes = fig.subplots(1, len(ks), squeeze=False)[0]
        width = 0.8 / max(1, len(momentum_type))
        for ax, K in zip(axes, ks):
            here = [p for p in labels if any((task, p, K, m) in by_cell for m in momentum_type)]
            for i, m in enumerate(momentum_type):
                color, _, marker = _style(m)
                xs, ys, es = [], [], []
                for x, p in enumerate(here):
                    runs = by_cell.get((task, p, K, m))
                    if runs:
                        ci = mean_ci([r["bias"] for r in runs])
                        xs.append(x + (i - 1.5) * width)
                        ys.append(ci.mean)
                        es.append(0 if not math.isfinite(ci.half) else ci.half)
                if xs:
                    bars = ax.bar(xs, ys, width, yerr=es, color=color, label=METHOD_LABELS[m], capsize=2,
                                  hatch=["", "//", "..", "xx"][i], edgecolor="white", linewidth=0.5)
                    ax.bar_label(bars, fmt="%.2g", fontsize=7, padding=2)  # small values stay readable
            ax.set_xticks(range(len(here)), here, rotation=0)
            ax.set_title(f"K = {K} (its own W)")
            ax.set_ylabel(r"bias $\|AW - M\|_F\,/\,\|M\|_F$")
            ax.set_ylim(bottom=0)
        _legend(fig, axes)
        fig.suptitle(f"{task}: implicit momentum bias of each rule on its run's exact W, against its own target M "
                     "(mean ± 95 % over seeds)")
        written += _save(fig, out / f"bias_{task}")
    return written


@styled
def tuning_figures(out: Path, tuning: Rows) -> list[Path]:
    scores = tuning_by_cell(tuning)
    written = []
    for task in sorted({k[0] for k in scores}):
        panels = sorted({(k[1], k[2]) for k in scores if k[0] == task}, key=lambda p: (p[0] != NODP, p[0], p[1]))
        cols = min(4, len(panels))
        nrows = math.ceil(len(panels) / cols)
        fig = figure(3.3 * cols + 0.6, 2.9 * nrows + 0.8)
        axes = fig.subplots(nrows, cols, squeeze=False).ravel()
        for ax, (privacy, K) in zip(axes, panels):
            for (t, p, k, m), by_lr in sorted(scores.items()):
                if (t, p, k) != (task, privacy, K):
                    continue
                color, ls, marker = _style(m)
                lrs = sorted(by_lr)
                ax.plot(lrs, [np.mean(by_lr[lr]) for lr in lrs], color=color, linestyle=ls, marker=marker, markersize=4,
                        label=METHOD_LABELS.get(m, m))
            ax.set_xscale("log", base=2)
            ax.set_ylim(0, 1)
            ax.set_xlabel("server learning rate η")
            ax.set_ylabel("final accuracy (tuning seed)")
            ax.set_title(f"{privacy}, K = {K}")
        for ax in axes[len(panels):]:
            ax.set_visible(False)
        _legend(fig, axes[: len(panels)])
        fig.suptitle(f"{task}: final accuracy against the learning rate, from the tuning runs")
        written += _save(fig, out / f"tuning_{task}")
    return written


@styled
def noise_figures(out: Path, rows: Rows) -> list[Path]:
    by_cell = cells(rows)
    groups: dict[tuple[str, int, str], list[tuple[str, Rows]]] = defaultdict(list)
    for (task, privacy, K, m), runs in sorted(by_cell.items()):
        source = runs[0]["lr_from"]
        if source and (task, source, K, m) in by_cell:
            key = (task, K, m)
            if not groups[key]:
                groups[key].append((source, by_cell[(task, source, K, m)]))
            groups[key].append((privacy, runs))
    written = []
    for task in sorted({k[0] for k in groups}):
        keys = [k for k in groups if k[0] == task]
        fig = figure(4.2 * len(keys) + 0.6, 6.0)
        axes = fig.subplots(3, len(keys), squeeze=False)
        for j, key in enumerate(keys):
            names = [name for name, _ in groups[key]]
            for row, (col, what) in enumerate((("final_accuracy", "final accuracy"), ("noise_gain", r"noise gain $\eta\,\|A^\top 1\|_2$"),
                                               ("amplification", r"$\|A\|_F\,/\,\|M\|_F$"))):
                ax = axes[row][j]
                cis = [mean_ci([r[col] for r in runs]) for _, runs in groups[key]]
                ax.bar(range(len(names)), [c.mean for c in cis], yerr=[0 if not math.isfinite(c.half) else c.half for c in cis],
                       color=_style(key[2])[0], capsize=2)
                ax.set_xticks(range(len(names)), names, rotation=25, ha="right")
                ax.set_ylabel(what)
                ax.set_ylim(bottom=0)
                if row == 0:
                    ax.set_title(f"{METHOD_LABELS.get(key[2], key[2])}, K = {key[1]}")
        fig.suptitle(f"{task}: ablations beside their source cell (same learning rate; mean ± 95 % over seeds)")
        written += _save(fig, out / f"noise_{task}")
    return written
