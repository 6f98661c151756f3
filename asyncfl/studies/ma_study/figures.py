"""The study's figures (PNG, next to ``report.md``; docs/architecture.md, "Studies and sweeps";
docs/server-rules.md):

* ``curves_<task>_<dp>.png`` — test accuracy and test loss against server steps and against
  virtual time, one column per K, one line per method: the mean over seeds, the band their
  min–max spread. Along the time axis each seed's curve is interpolated onto a common grid up to
  the earliest end of the seeds, and the axis ends where the FedBuff runs end (the slower sync
  baseline is cut there). The sync baseline does not depend on K and is drawn in every column;
* ``bias.png`` — the measured implicit momentum bias of each FedBuff method's own rule against
  K (mean over seeds), per task and DP setting.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from asyncfl.studies.ma_study.design import Study
from asyncfl.studies.ma_study.results import read_metrics
from asyncfl.studies.ma_study.spec import METHOD_LABELS
from asyncfl.studies.ma_study.tables import Rows, group, mean

COLORS = {
    "fedbuff-sgd": "tab:gray", "fedbuff-momentum": "tab:red", "fedbuff-nesterov": "tab:orange",
    "fedbuff-ma-full": "tab:blue", "fedbuff-ma-light": "tab:green", "sync-momentum": "black",
}


def _curves(out: Path, runs: Rows) -> list[list[dict[str, float]]]:
    return [m for m in (read_metrics(out / r["run_dir"]) for r in runs) if m]


def _band(ax: Any, xs: list[np.ndarray], ys: list[np.ndarray], color: str, label: str) -> None:
    n = min(len(x) for x in xs)
    x = xs[0][:n]
    Y = np.stack([y[:n] for y in ys])
    ax.plot(x, np.nanmean(Y, axis=0), color=color, label=label, lw=1.3)
    if len(ys) > 1:
        ax.fill_between(x, np.nanmin(Y, axis=0), np.nanmax(Y, axis=0), color=color, alpha=0.15, lw=0)


def _time_band(ax: Any, curves: list[list[dict[str, float]]], key: str, color: str, label: str) -> None:
    t_end = min(c[-1]["time"] for c in curves)
    grid = np.linspace(0.0, t_end, 60)
    ys = [np.interp(grid, [r["time"] for r in c], [r[key] for r in c]) for c in curves]
    _band(ax, [grid] * len(ys), ys, color, label)


def plot_curves(study: Study, out: Path, rows: Rows, task: str, dp: int) -> str:
    """``curves_<task>_<dp>.png`` in ``out``; returns its name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = study.spec
    groups = group(rows)
    Ks = [m * spec.buffer for m in spec.k_multiples]
    fig, axes = plt.subplots(4, len(Ks), figsize=(3.6 * len(Ks), 10.5), squeeze=False, sharey="row")
    panels = [("accuracy", "step"), ("accuracy", "time"), ("loss", "step"), ("loss", "time")]
    target = study.tasks[task].target_accuracy
    for j, K in enumerate(Ks):
        t_async = 0.0  # the time panels end with the FedBuff runs (the sync curve is cut there)
        for method in spec.methods:
            key_K = study.concurrencies(method)[0] if method == "sync-momentum" else K
            curves = _curves(out, groups.get((task, dp, method, key_K), []))
            if not curves:
                continue
            if method != "sync-momentum":
                t_async = max(t_async, max(c[-1]["time"] for c in curves))
            for i, (metric, axis) in enumerate(panels):
                ax = axes[i][j]
                if axis == "step":
                    _band(ax, [np.array([r["step"] for r in c]) for c in curves],
                          [np.array([r[metric] for r in c]) for c in curves], COLORS[method], METHOD_LABELS[method])
                else:
                    _time_band(ax, curves, metric, COLORS[method], METHOD_LABELS[method])
        for i, (metric, axis) in enumerate(panels):
            ax = axes[i][j]
            ax.set_xlabel("server steps" if axis == "step" else "virtual time")
            if axis == "time" and t_async > 0:
                ax.set_xlim(0, t_async * 1.02)
            if j == 0:
                ax.set_ylabel(f"test {metric}")
            if metric == "accuracy":
                ax.axhline(target, color="k", ls=":", lw=0.8)
            if metric == "loss":
                ax.set_yscale("log")
            ax.grid(alpha=0.3)
        axes[0][j].set_title(f"K = {K // spec.buffer}C = {K}")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.suptitle(f"{task}, {'DP (ε = %g, δ = %g)' % (spec.privacy.epsilon, spec.privacy.delta) if dp else 'no DP'}: "
                 f"mean over {len(spec.seeds_of(bool(dp)))} seed(s), band = min–max", fontsize=10)
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    name = f"curves_{task}_{'dp' if dp else 'nodp'}.png"
    fig.savefig(out / name, dpi=70)
    plt.close(fig)
    return name


def plot_bias(study: Study, out: Path, rows: Rows) -> str:
    """``bias.png`` in ``out``; returns its name."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = study.spec
    groups = group(rows)
    combos = [(t.name, int(dp)) for t in spec.tasks for dp in spec.dp]
    fig, axes = plt.subplots(1, len(combos), figsize=(3.4 * len(combos), 3.2), squeeze=False, sharey=True)
    Ks = [m * spec.buffer for m in spec.k_multiples]
    for ax, (task, dp) in zip(axes[0], combos):
        for method in spec.methods:
            if method == "sync-momentum":
                continue
            ys = [mean([r["bias"] for r in groups.get((task, dp, method, K), [])]) for K in Ks]
            ax.plot(Ks, ys, "o-", color=COLORS[method], label=METHOD_LABELS[method], ms=3)
        ax.set_xscale("log")
        ax.set_xlabel("K")
        ax.set_title(f"{task}, {'DP' if dp else 'no DP'}", fontsize=9)
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("bias ‖AW − M‖_F / ‖M‖_F")
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "bias.png", dpi=70)
    plt.close(fig)
    return "bias.png"
