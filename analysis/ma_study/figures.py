"""The study's figures (PNG, next to ``report.md``; docs/architecture.md, "Studies and sweeps";
docs/server-rules.md):

* ``curves_<task>_<dp>.png`` — test accuracy and test loss against server steps and against
  virtual time, one column per K, one line per method: the mean over seeds, the band its 95 %
  confidence interval (Student t over seeds, :func:`asyncfl.figures.ci.mean_ci`; no band for one
  seed); accuracy bands are clipped to [0, 1], the loss (log scale) is averaged in log10 (geometric
  mean and multiplicative interval). Along the time axis each seed's curve is interpolated onto a common grid up to
  the earliest end of the seeds, and the axis ends where the FedBuff runs end (the slower sync
  baseline is cut there). The sync baseline does not depend on K and is drawn in every column;
* ``bias.png`` — the measured implicit momentum bias of each FedBuff method's own rule against
  K (mean ± 95 % CI over seeds), one panel per task (rows) and DP setting (columns).

Both are drawn with the shared style (:mod:`asyncfl.figures.style`) as PNG, PDF or SVG.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from asyncfl.figures.ci import mean_ci, mean_ci_columns
from asyncfl.figures.style import METRIC_LABELS, STEP_LABEL, TIME_LABEL, figure, save, styled, title
from analysis.ma_study.design import Study
from analysis.ma_study.results import read_metrics
from analysis.ma_study.spec import METHOD_LABELS, NODP
from analysis.ma_study.tables import Rows, group, paired_speedup

COLORS = {
    "fedbuff-sgd": "tab:gray", "fedbuff-momentum": "tab:red", "fedbuff-nesterov": "tab:orange",
    "fedbuff-ma-full": "tab:blue", "fedbuff-ma-light": "tab:green", "sync-momentum": "black",
}


def _curves(out: Path, runs: Rows) -> list[list[dict[str, float]]]:
    return [m for m in (read_metrics(out / r["run_dir"]) for r in runs) if m]


def _band(ax: Any, xs: list[np.ndarray], ys: list[np.ndarray], color: str, label: str, metric: str = "accuracy") -> None:
    """Mean over seeds and its 95 % CI band. Accuracy: arithmetic, the band clipped to [0, 1]. Loss
    (drawn on a log scale): on log10 of the values, i.e. the geometric mean with its multiplicative
    interval, which stays positive."""
    n = min(len(x) for x in xs)
    x = xs[0][:n]
    Y = np.stack([y[:n] for y in ys])
    if metric == "loss":
        mean, half = mean_ci_columns(np.log10(np.where(Y > 0, Y, np.nan)))
        centre, low, high = 10.0**mean, 10.0 ** (mean - half), 10.0 ** (mean + half)
    else:
        mean, half = mean_ci_columns(Y)
        centre, low, high = mean, np.clip(mean - half, 0.0, 1.0), np.clip(mean + half, 0.0, 1.0)
    ax.plot(x, centre, color=color, label=label, lw=1.4)
    if len(ys) > 1:
        ax.fill_between(x, low, high, color=color, alpha=0.13, lw=0)


def _time_band(ax: Any, curves: list[list[dict[str, float]]], key: str, color: str, label: str) -> None:
    t_end = min(c[-1]["time"] for c in curves)
    grid = np.linspace(0.0, t_end, 60)
    ys = [np.interp(grid, [r["time"] for r in c], [r[key] for r in c]) for c in curves]
    _band(ax, [grid] * len(ys), ys, color, label, key)


@styled
def plot_curves(study: Study, out: Path, rows: Rows, task: str, label: str, fmt: str = "png") -> str:
    """``curves_<task>_<privacy label>.FORMAT`` in ``out``; returns its name."""
    spec = study.spec
    groups = group(rows)
    Ks = [m * spec.buffer for m in spec.k_multiples]
    fig = figure(3.9 * len(Ks) + 0.8, 12)
    axes = fig.subplots(4, len(Ks), squeeze=False, sharey="row")
    panels = [("accuracy", "step"), ("accuracy", "time"), ("loss", "step"), ("loss", "time")]
    target = study.tasks[task].target_accuracy
    for j, K in enumerate(Ks):
        t_async = 0.0  # the time panels end with the FedBuff runs (the sync curve is cut there)
        for method in spec.methods:
            key_K = study.concurrencies(method)[0] if method == "sync-momentum" else K
            curves = _curves(out, groups.get((task, label, method, key_K), []))
            if not curves:
                continue
            if method != "sync-momentum":
                t_async = max(t_async, max(c[-1]["time"] for c in curves))
            for i, (metric, axis) in enumerate(panels):
                ax = axes[i][j]
                if axis == "step":
                    _band(ax, [np.array([r["step"] for r in c]) for c in curves],
                          [np.array([r[metric] for r in c]) for c in curves], COLORS[method], METHOD_LABELS[method], metric)
                else:
                    _time_band(ax, curves, metric, COLORS[method], METHOD_LABELS[method])
        for i, (metric, axis) in enumerate(panels):
            ax = axes[i][j]
            ax.set_xlabel(STEP_LABEL if axis == "step" else TIME_LABEL)
            ax.xaxis.set_major_locator(_ticks(axis == "step"))
            if axis == "time" and t_async > 0:
                ax.set_xlim(0, t_async * 1.02)
            if j == 0:
                ax.set_ylabel(METRIC_LABELS[metric])
            if metric == "accuracy":
                ax.yaxis.set_major_formatter(_percent())
                ax.axhline(target, color="k", ls=":", lw=0.9, label=f"target accuracy {target:g}" if (i, j) == (0, 0) else None)
            if metric == "loss":
                ax.set_yscale("log")
        axes[0][j].set_title(f"K = {K // spec.buffer}C = {K}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=4)
    n = len(study.seeds_of(label))
    spread = f"mean ± 95 % CI over {n} seeds" if n > 1 else "one seed: no interval"
    dp_text = f"DP {label}: {study.privacy[label].describe()}" if label in study.privacy else "no DP"
    title(fig, spec.name, f"{task}, C = {spec.buffer}: {spread}\n{dp_text}")
    name = f"curves_{task}_{label}.{fmt}"
    save(fig, out / name, fmt)
    return name


def _percent() -> Any:
    from matplotlib.ticker import PercentFormatter

    return PercentFormatter(xmax=1.0, decimals=0)


def _log_ticks() -> Any:
    from matplotlib.ticker import FixedLocator

    return FixedLocator([0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 10.0])


def _times() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _: f"{v:g}×")


def _blank() -> Any:
    from matplotlib.ticker import NullFormatter

    return NullFormatter()


def _ticks(integer: bool) -> Any:
    from matplotlib.ticker import MaxNLocator

    return MaxNLocator(nbins=4, integer=integer)


@styled
def plot_bias(study: Study, out: Path, rows: Rows, fmt: str = "png") -> str:
    """``bias.FORMAT`` in ``out``; returns its name."""
    spec = study.spec
    groups = group(rows)
    dps = study.settings
    fig = figure(max(8.0, 4.6 * len(dps) + 0.6), 3.4 * len(spec.tasks) + 1.3)
    axes = fig.subplots(len(spec.tasks), len(dps), squeeze=False, sharex=True)
    Ks = [m * spec.buffer for m in spec.k_multiples]
    for r, task in enumerate(spec.tasks):
        for c, dp in enumerate(dps):
            ax = axes[r][c]
            if dp not in study.settings_of(task.name):  # a DP setting limited to other tasks
                ax.set_axis_off()
                ax.text(0.5, 0.5, f"{task.name}: not run with {dp}", ha="center", va="center", transform=ax.transAxes, color="gray")
                continue
            for method in spec.methods:
                if method == "sync-momentum":
                    continue
                stats = [mean_ci(row["bias"] for row in groups.get((task.name, dp, method, K), [])) for K in Ks]
                means = np.array([s.mean for s in stats])
                halves = np.array([s.half for s in stats])
                # a bias is ≥ 0: the interval is cut at 0 below
                ax.errorbar(Ks, means, yerr=[np.minimum(halves, means), halves], fmt="o-", color=COLORS[method],
                            label=METHOD_LABELS[method], ms=4, capsize=3, lw=1.3)
            ax.set_xscale("log")
            ax.set_xticks(Ks, [f"{m}C = {m * spec.buffer}" for m in spec.k_multiples])
            ax.minorticks_off()
            ax.set_title(f"{task.name}, {'no DP' if dp == NODP else 'DP ' + dp}")
            if c == 0:
                ax.set_ylabel("bias ‖AW − M‖_F / ‖M‖_F")
            if r == len(spec.tasks) - 1:
                ax.set_xlabel("concurrency K (clients in flight)")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=3)
    n = max(len(study.seeds_of(dp)) for dp in dps)
    title(fig, spec.name, "bias of each rule on its own W" + (f"\n(mean ± 95 % CI over {n} seeds)" if n > 1 else ""))
    name = f"bias.{fmt}"
    save(fig, out / name, fmt)
    return name


@styled
def plot_speedup_vs_bias(study: Study, out: Path, rows: Rows, fmt: str = "png") -> str | None:
    """``speedup_vs_bias.FORMAT``: for every (task, privacy, K) and MA rule, the paired speed-up
    over naive momentum (geometric mean over seeds, 95 % CI bars) against the bias reduction
    ``1 − bias_MA / bias_momentum`` (means over seeds). ``None`` when no pair reached the target."""
    spec = study.spec
    groups = group(rows)
    markers = {label: mk for label, mk in zip(study.settings, "osD^vP*X")}
    fig = figure(7.2, 5.0)
    ax = fig.subplots()
    drawn = False
    for task in spec.tasks:
        for label in study.settings_of(task.name):
            for m in spec.k_multiples:
                K = m * spec.buffer
                base = groups.get((task.name, label, "fedbuff-momentum", K), [])
                b = mean_ci(r["bias"] for r in base).mean
                for method in ("fedbuff-ma-full", "fedbuff-ma-light"):
                    ma = groups.get((task.name, label, method, K), [])
                    ps = paired_speedup(base, ma)
                    if ps.n == 0 or not np.isfinite(b) or b <= 0:
                        continue
                    x = 1.0 - mean_ci(r["bias"] for r in ma).mean / b
                    yerr = [[ps.geo - ps.low], [ps.high - ps.geo]] if ps.n > 1 else None
                    ax.errorbar([x], [ps.geo], yerr=yerr, fmt=markers[label], color=COLORS[method], ms=5, capsize=3,
                                alpha=0.85, mfc="white" if task is not spec.tasks[0] else COLORS[method])
                    drawn = True
    if not drawn:
        fig.clf()
        return None
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhspan(1.15, 4.0, color="tab:olive", alpha=0.10, lw=0, label="paper's 1.15–4× range")
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(_log_ticks())
    ax.yaxis.set_major_formatter(_times())
    ax.yaxis.set_minor_formatter(_blank())
    ax.set_xlabel("bias reduction 1 − bias(MA) / bias(momentum)")
    ax.set_ylabel("steps-to-target speed-up over momentum")
    from matplotlib.lines import Line2D  # matplotlib only when a figure is drawn

    handles = [Line2D([], [], color=COLORS[m], marker="o", ls="", label=METHOD_LABELS[m]) for m in ("fedbuff-ma-full", "fedbuff-ma-light")]
    handles += [Line2D([], [], color="gray", marker=mk, ls="", label="no DP" if lab == NODP else f"DP {lab}") for lab, mk in markers.items()]
    handles += [Line2D([], [], color="gray", marker="o", ls="", mfc="white", label=f"open: task {t.name}") for t in spec.tasks[1:]]
    handles += ax.get_legend_handles_labels()[0]
    fig.legend(handles=handles, loc="outside lower center", ncol=3)
    title(fig, spec.name, "speed-up against bias reduction\none point per task × privacy × K; bars: 95 % CI over seeds")
    name = f"speedup_vs_bias.{fmt}"
    save(fig, out / name, fmt)
    return name
