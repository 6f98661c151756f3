"""``report.md`` and its figures for :mod:`analysis.study`.

Figures (PNG, next to ``report.md``):

* ``curves_<task>_<dp>.png`` — test accuracy and test loss against server steps and against
  virtual time, one column per K, one line per method: the mean over seeds, the band their
  min–max spread. Along the time axis each seed's curve is interpolated onto a common grid up to
  the earliest end of the seeds, and the axis ends where the FedBuff runs end (the slower sync
  baseline is cut there). The sync baseline does not depend on K and is drawn in every column;
* ``bias.png`` — the measured implicit momentum bias of each FedBuff method's own rule against
  K (mean over seeds), per task and DP setting.

Tables: steps and virtual time to the target accuracy (mean over the seeds that reached it, and
how many did), the speed-up of each MA variant over naive momentum (ratio of mean
steps-to-target; a bound ``≥``/``≤`` where one side did not reach the target within the run,
counting it as the run length), and the bias of every run.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from analysis.study import ALL_METHODS, METHOD_LABELS, Study, read_metrics

PAPER_SPEEDUP = (1.15, 4.0)
COLORS = {
    "fedbuff-sgd": "tab:gray", "fedbuff-momentum": "tab:red", "fedbuff-nesterov": "tab:orange",
    "fedbuff-ma-full": "tab:blue", "fedbuff-ma-light": "tab:green", "sync-momentum": "black",
}


def _mean(values: list[float]) -> float:
    vals = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    return sum(vals) / len(vals) if vals else math.nan


def _f(value: float, digits: int = 3) -> str:
    return "—" if not isinstance(value, (int, float)) or not math.isfinite(value) else f"{value:.{digits}g}"


def _group(rows: list[dict[str, Any]]) -> dict[tuple[str, int, str, int], list[dict[str, Any]]]:
    out: dict[tuple[str, int, str, int], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        out[(row["task"], row["dp"], row["method"], row["K"])].append(row)
    return out


def reach_summary(runs: list[dict[str, Any]], steps: int) -> dict[str, Any]:
    """Mean steps/time over the seeds that reached the target, how many did, and the mean
    steps with an unreached seed counted as the run length (for bounds)."""
    reached = [r for r in runs if math.isfinite(r["steps_to_target"])]
    return {
        "n": len(runs), "reached": len(reached),
        "steps": _mean([r["steps_to_target"] for r in reached]),
        "time": _mean([r["time_to_target"] for r in reached]),
        "steps_censored": _mean([r["steps_to_target"] if math.isfinite(r["steps_to_target"]) else steps for r in runs]),
        "final_accuracy": _mean([r["final_accuracy"] for r in runs]),
        "bias": _mean([r["bias"] for r in runs]),
        "lr": runs[0]["lr"] if runs else math.nan,
    }


def speedup(base: dict[str, Any], ma: dict[str, Any]) -> tuple[float, str]:
    """(value, text): momentum's steps-to-target over MA's. Exact when every seed of both
    reached the target; a lower bound (≥) when only MA's did, an upper bound (≤) when only
    momentum's did, undefined when neither."""
    base_all = base["reached"] == base["n"] and base["n"] > 0
    ma_all = ma["reached"] == ma["n"] and ma["n"] > 0
    if base_all and ma_all:
        value = base["steps"] / ma["steps"] if ma["steps"] > 0 else math.nan
        return value, f"{value:.2f}×"
    if ma_all and base["reached"] < base["n"]:
        value = base["steps_censored"] / ma["steps"] if ma["steps"] > 0 else math.nan
        return value, f"≥ {value:.2f}×"
    if base_all and ma["reached"] < ma["n"]:
        value = base["steps"] / ma["steps_censored"]
        return value, f"≤ {value:.2f}×"
    if base["reached"] == 0 and ma["reached"] == 0:
        return math.nan, "n/a (neither reached)"
    value = base["steps_censored"] / ma["steps_censored"]
    return value, f"~{value:.2f}× (censored)"


# ---------------------------------------------------------------------------------------------
def _curves(out: Path, runs: list[dict[str, Any]]) -> list[list[dict[str, float]]]:
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


def plot_curves(study: Study, out: Path, rows: list[dict[str, Any]], task: str, dp: int) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = study.spec
    groups = _group(rows)
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


def plot_bias(study: Study, out: Path, rows: list[dict[str, Any]]) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    spec = study.spec
    groups = _group(rows)
    combos = [(t.name, int(dp)) for t in spec.tasks for dp in spec.dp]
    fig, axes = plt.subplots(1, len(combos), figsize=(3.4 * len(combos), 3.2), squeeze=False, sharey=True)
    Ks = [m * spec.buffer for m in spec.k_multiples]
    for ax, (task, dp) in zip(axes[0], combos):
        for method in spec.methods:
            if method == "sync-momentum":
                continue
            ys = [_mean([r["bias"] for r in groups.get((task, dp, method, K), [])]) for K in Ks]
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


# ---------------------------------------------------------------------------------------------
def _privacy_line(out: Path, rows: list[dict[str, Any]]) -> str | None:
    for row in rows:
        if row["dp"] and row["method"] != "sync-momentum":
            try:
                summary = json.loads((out / row["run_dir"] / "summary.json").read_text())
            except (OSError, ValueError):
                continue
            p = summary.get("privacy")
            if p:
                return ", ".join(f"{k} = {_f(v, 4) if isinstance(v, float) else v}" for k, v in p.items())
    return None


def retarget(study: Study, out: Path, rows: list[dict[str, Any]], fraction: float) -> list[dict[str, Any]]:
    """``rows`` with steps/time to ``fraction`` × each task's target, read from the curves."""
    from analysis.study import first_reach

    new = []
    for row in rows:
        target = fraction * study.tasks[row["task"]].target_accuracy
        step, vtime = (first_reach(read_metrics(out / row["run_dir"]), target)
                       if row["status"] == "completed" else (math.nan, math.nan))
        new.append({**row, "steps_to_target": step, "time_to_target": vtime, "target_accuracy": target})
    return new


def speedup_table(study: Study, rows: list[dict[str, Any]]) -> tuple[list[str], dict[str, list[float]]]:
    spec = study.spec
    groups = _group(rows)
    lines = ["| task | DP | K | momentum steps | MA-full steps | MA-light steps | MA-full speed-up | MA-light speed-up |",
             "|---|---|---|---|---|---|---|---|"]
    exact: dict[str, list[float]] = defaultdict(list)
    for task in spec.tasks:
        for dp in spec.dp:
            for m in spec.k_multiples:
                K = m * spec.buffer
                base = reach_summary(groups.get((task.name, int(dp), "fedbuff-momentum", K), []), spec.steps)
                cells = []
                for method in ("fedbuff-ma-full", "fedbuff-ma-light"):
                    ma = reach_summary(groups.get((task.name, int(dp), method, K), []), spec.steps)
                    value, text = speedup(base, ma)
                    cells.append((ma, text))
                    if text.endswith("×") and not text.startswith(("≥", "≤")) and math.isfinite(value):
                        exact[f"{method}/{'dp' if dp else 'nodp'}"].append(value)
                lines.append(f"| {task.name} | {'yes' if dp else 'no'} | {m}C = {K} | {_reach_text(base)} | "
                             f"{_reach_text(cells[0][0])} | {_reach_text(cells[1][0])} | {cells[0][1]} | {cells[1][1]} |")
    return lines, exact


def _reach_text(s: dict[str, Any]) -> str:
    if s["n"] == 0:
        return "—"
    if s["reached"] == 0:
        return f"not reached (0/{s['n']})"
    text = _f(s["steps"], 4)
    return text if s["reached"] == s["n"] else f"{text} ({s['reached']}/{s['n']})"


def write_report(study: Study, out: Path, rows: list[dict[str, Any]], tuning_rows: list[dict[str, Any]]) -> Path:
    spec = study.spec
    groups = _group(rows)
    figures = {(t.name, int(dp)): plot_curves(study, out, rows, t.name, int(dp)) for t in spec.tasks for dp in spec.dp}
    bias_png = plot_bias(study, out, rows)
    L: list[str] = [f"# Momentum-approximation study `{spec.name}`", ""]
    L += ["Generated by `asyncfl study` (analysis/study.py). One row per run in `results.csv`, every tuning run in "
          "`tuning.csv`; each run's directory (under `runs/`, not committed) holds its `scenario.toml`.", ""]
    L += ["## Setup", "",
          f"* buffer C = {spec.buffer}; concurrency K ∈ {{{', '.join(f'{m}C' for m in spec.k_multiples)}}} = "
          f"{{{', '.join(str(m * spec.buffer) for m in spec.k_multiples)}}}; sync FedAvg + momentum uses cohort C.",
          f"* {spec.steps} server steps per run, evaluation every {spec.eval_every} steps (so steps-to-target has that resolution); "
          f"seeds {spec.seeds}{' (DP runs: %s)' % spec.dp_seeds if spec.dp_seeds is not None and True in spec.dp else ''} (the seed also draws the task's data split and initial model).",
          f"* methods: {', '.join(METHOD_LABELS[m] for m in spec.methods)}; MA targets `{spec.ma_target}`.",
          f"* server-lr tuning: seed {spec.tuning.seed}, {spec.tuning_steps} steps, per task × DP × K × method; "
          "criterion = mean test accuracy over the run's evaluations (area under the accuracy curve); grids:"]
    for method in spec.methods:
        L.append(f"  * {METHOD_LABELS[method]}: {spec.lr_grid.of(method)}")
    if True in spec.dp:
        p = spec.privacy
        clip = p.clip if p.clip is not None else "per task (below)"
        if spec.tuning.dp == "reuse-nodp":
            L.append("* DP runs use the server lr tuned without DP for the same task/K/method (`tuning.dp = \"reuse-nodp\"`).")
        L.append(f"* DP runs: ε = {p.epsilon}, δ = {p.delta}, clip S_Δ = {clip}, "
                 f"{'ξ = %g' % p.xi if p.xi is not None else 'γ = %g' % p.gamma}, accountant {p.accountant}, counts `{p.counts}`.")
        line = _privacy_line(out, rows)
        if line:
            L.append(f"  * as run (first DP run's summary): {line}")
    L += ["* tasks (target test accuracy):"]
    for t in spec.tasks:
        sc = study.scenario(next(r for r in _points_of(study, t.name)))
        L.append(f"  * `{t.name}`: {sc.task.model_dump(exclude_none=True)}, N = {sc.population.clients} clients, "
                 f"latency {sc.latency.model_dump()}, local {sc.client.local_steps or sc.client.epochs} "
                 f"{'steps' if sc.client.local_steps else 'epochs'} lr {sc.client.lr} batch {sc.client.batch_size}, "
                 f"p = {sc.server.staleness_exponent}, τ_max = {sc.server.max_staleness}, β = {sc.server.beta}"
                 f"{', DP clip S_Δ = %g' % (spec.privacy.clip or sc.privacy.clip) if True in spec.dp else ''} — target {t.target_accuracy}")
    L.append("")

    lines, exact = speedup_table(study, rows)
    L += ["## Speed-up of momentum approximation over naive FedBuff momentum", "",
          "Ratio of mean steps-to-target (momentum / MA); `≥` / `≤`: one side did not reach the target in every seed "
          "(its unreached seeds counted as the run length, so the value is a bound). Steps shown: mean over the seeds "
          "that reached the target (k/n when not all did). The paper reports 1.15–4×.", ""]
    L += lines + [""]
    for key, values in sorted(exact.items()):
        method, dp = key.split("/")
        L.append(f"* {METHOD_LABELS[method]}, {'DP' if dp == 'dp' else 'no DP'}: exact speed-ups in {len(values)} "
                 f"configuration(s): min {min(values):.2f}×, median {float(np.median(values)):.2f}×, max {max(values):.2f}×; "
                 f"{sum(1 for v in values if v >= PAPER_SPEEDUP[0])} of {len(values)} at or above the paper's lower end 1.15×.")
    L.append("")
    if spec.secondary_target_fraction is not None:
        frac = spec.secondary_target_fraction
        lines2, exact2 = speedup_table(study, retarget(study, out, rows, frac))
        L += [f"### The same at a lower target: {frac:g} × each task's target "
              f"({', '.join(f'{t.name} {frac * t.target_accuracy:.3g}' for t in spec.tasks)})", ""]
        L += lines2 + [""]
        for key, values in sorted(exact2.items()):
            method, dp = key.split("/")
            L.append(f"* {METHOD_LABELS[method]}, {'DP' if dp == 'dp' else 'no DP'}: exact speed-ups in {len(values)} "
                     f"configuration(s): min {min(values):.2f}×, median {float(np.median(values)):.2f}×, max {max(values):.2f}×.")
        L.append("")

    L += ["## Steps and virtual time to target", "",
          "Mean over seeds that reached the target (k/n when not all did); final accuracy and bias are means over all seeds.", ""]
    for t in spec.tasks:
        for dp in spec.dp:
            L += [f"### {t.name}, {'DP' if dp else 'no DP'} (target accuracy {t.target_accuracy})", "",
                  "| K | method | server lr | steps to target | virtual time to target | final accuracy | bias |",
                  "|---|---|---|---|---|---|---|"]
            for m in spec.k_multiples:
                K = m * spec.buffer
                for method in spec.methods:
                    key_K = study.concurrencies(method)[0] if method == "sync-momentum" else K
                    s = reach_summary(groups.get((t.name, int(dp), method, key_K), []), spec.steps)
                    if s["n"] == 0:
                        continue
                    tt = _f(s["time"], 4) if s["reached"] else "—"
                    L.append(f"| {m}C | {METHOD_LABELS[method]} | {_f(s['lr'])} | {_reach_text(s)} | {tt} | "
                             f"{_f(s['final_accuracy'])} | {_f(s['bias'])} |")
            L += ["", f"![curves]({figures[(t.name, int(dp))]})", ""]

    L += ["## Measured implicit momentum bias", "",
          "‖AW − M‖_F / ‖M‖_F of each run's own rule on its exact W (bias.json; see analysis/study.py for the key "
          "per method: SGD is W against I, Nesterov is naive Nesterov against the Nesterov M; sync has W = I, bias 0).",
          "", f"![bias]({bias_png})", "",
          "| task | DP | K | seed | " + " | ".join(METHOD_LABELS[m] for m in spec.methods if m != "sync-momentum") + " |",
          "|---|---|---|---|" + "---|" * len([m for m in spec.methods if m != "sync-momentum"])]
    for t in spec.tasks:
        for dp in spec.dp:
            for m in spec.k_multiples:
                K = m * spec.buffer
                for seed in spec.seeds_of(dp):
                    cells = []
                    for method in spec.methods:
                        if method == "sync-momentum":
                            continue
                        match = [r for r in groups.get((t.name, int(dp), method, K), []) if r["seed"] == seed]
                        cells.append(_f(match[0]["bias"], 3) if match else "—")
                    L.append(f"| {t.name} | {'yes' if dp else 'no'} | {K} | {seed} | " + " | ".join(cells) + " |")
    L.append("")
    failed = [r for r in rows if r["status"] != "completed"]
    if failed:
        L += ["## Runs that did not complete", ""]
        L += [f"* {r['run_dir']}: {r['status']}" for r in failed]
        L.append("")
    path = out / "report.md"
    path.write_text("\n".join(L) + "\n", encoding="utf-8")
    return path


def _points_of(study: Study, task: str):
    from analysis.study import Point

    spec = study.spec
    method = spec.methods[0]
    yield Point(task, method, study.concurrencies(method)[0], spec.seeds[0], False, spec.lr_grid.of(method)[0], spec.steps)


__all__ = ["write_report", "speedup", "reach_summary", "ALL_METHODS"]
