"""The privacy–utility study of the count-noise level ξ (issue 18, part 3; docs/privacy.md §2, §7).

    python -m analysis.privacy_utility --spec analysis/study_paper.toml --study runs/ma_paper \\
        --out runs/privacy_utility --workers 2

At a fixed privacy budget (ε, δ) the noise multiplier σ is fixed; the free choice is how the
sensitivity is split between the clipped update and the one-hot staleness payload, i.e. the
count-noise level ξ (``γ = σ S_Δ / √(ξ² − σ²)``). Per coordinate, with a noise cohort M, the
update noise is ``σ S_Δ ξ / (M √(ξ² − σ²))`` (it explodes as ξ ↓ σ) and the noise on an entry of
a row of ``Ŵ`` is ``ξ / M`` (it swamps the staleness estimate as ξ grows). This script sweeps ξ
as multiples of σ, from just above σ to where the count noise dominates, for each task of the MA
study at one concurrency (``--k-multiple``, default 20: where the implicit bias is largest), at
ε ∈ ``--epsilons`` with the DP settings of the study's first Poisson setting (δ, clip, noise
cohort), for MA-light and for naive momentum (whose updates carry the same noise but which
ignores the counts): each rule at the server learning rate the study tuned for it without DP.

Writes into ``--out``: one privacy sweep directory (:mod:`analysis.privacy_sweep`) per (task, ε, rule)
(``<task>/eps<ε>/<rule>/``, resumable), ``results.csv`` (every run), ``summary.csv`` (mean and 95 %
CI over seeds per task × ε × rule × ξ/σ), ``report.md`` (the ξ that maximises MA-light's final
accuracy per task and ε, and whether that choice carries over to the other task) and
``privacy_utility.png``.
"""

from __future__ import annotations

import argparse
import csv
import math
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from asyncfl.config import scenario as scenario_mod
from asyncfl.errors import UsageError
from asyncfl.figures.ci import mean_ci
from asyncfl.figures.style import figure, save, styled, title
from asyncfl.run.parallel import Progress, RunOutcome, make_backend
from analysis.ma_study.design import Point, Study, load_spec
from analysis.ma_study.spec import NODP
from analysis.privacy_sweep.plan import resolve_budget
from analysis.privacy_sweep.run import run_sweep
from analysis.typed_csv import read_typed

#: ξ / σ swept: just above σ (update noise large) to where ξ/M swamps the counts
XI_OVER_SIGMA = (1.05, 1.2, 1.5, 2.0, 4.0, 10.0, 30.0, 100.0, 300.0)
RULES = {"ma-light": "fedbuff-ma-light", "momentum": "fedbuff-momentum"}
LABELS = {"ma-light": "MA-light", "momentum": "naive momentum"}
COLORS = {"ma-light": "tab:green", "momentum": "tab:red"}


def tuned_lrs(study_dir: Path) -> dict[tuple[str, int, str], float]:
    """The server learning rate the MA study chose per (task, K, method) without DP."""
    rows = read_typed(study_dir / "results.csv", lambda key, text: text, ("task", "K", "method", "lr", "privacy"))
    try:
        return {(row["task"], int(row["K"]), row["method"]): float(row["lr"]) for row in rows if row["privacy"] == NODP}
    except ValueError:
        raise UsageError(f"{study_dir / 'results.csv'}: its K and lr columns must hold numbers") from None


def base_scenario(study: Study, task: str, K: int, method: str, lr: float, epsilon: float) -> scenario_mod.Scenario:
    """The study's scenario of (task, K, method) under its first Poisson DP setting, at ``epsilon``."""
    setting = next(p for p in study.spec.privacy if p.sampling == "poisson" and (p.tasks is None or task in p.tasks))
    sc = study.scenario(Point(task, method, K, study.spec.seeds[0], setting.name, lr, study.spec.steps))
    raw = sc.to_dict()
    kept = {k: v for k, v in raw["privacy"].items() if v is not None and k != "xi"}
    raw["privacy"] = {**kept, "epsilon": epsilon, "gamma": 1.0}  # γ: a placeholder each sweep point replaces
    return scenario_mod.validate(raw)


def _progress(outcome: RunOutcome, progress: Progress) -> None:
    """One line per finished run (this is long work)."""
    print(f"  [{progress.done}/{progress.total}] {outcome.status:<9} {outcome.name} ({outcome.wall:.1f} s)", flush=True)


def run_all(args: argparse.Namespace) -> list[dict[str, Any]]:
    study = load_spec(args.spec)
    out = Path(args.out)
    backend = make_backend(args.workers, None)
    rows: list[dict[str, Any]] = []
    lrs = tuned_lrs(Path(args.study))
    try:
        for task in study.spec.tasks:
            K = args.k_multiple * study.spec.buffer
            for epsilon in args.epsilons:
                for rule, method in RULES.items():
                    if (task.name, K, method) not in lrs:
                        raise SystemExit(f"{args.study}/results.csv: no no-DP row for task {task.name}, K = {K}, {method}")
                    lr = lrs[(task.name, K, method)]
                    sc = base_scenario(study, task.name, K, method, lr, epsilon)
                    budget = resolve_budget(sc)
                    xis = [float(f"{f * budget.sigma:.6g}") for f in args.xi_over_sigma]
                    where = out / task.name / f"eps{epsilon:g}" / rule
                    print(f"{task.name}, ε = {epsilon:g}, {rule} (server lr {lr:g}): σ = {budget.sigma:.4g}, "
                          f"{len(xis)} ξ × {len(args.seeds)} seeds → {where}", flush=True)
                    _, sweep_rows = run_sweep(sc, where, xis=xis, rules=[rule], seeds=args.seeds, backend=backend,
                                              on_outcome=_progress)
                    for r in sweep_rows:
                        rows.append({"task": task.name, "K": K, "epsilon": epsilon, "server_lr": lr,
                                     "xi_over_sigma": r.xi / r.sigma, **r.as_dict(),
                                     "run_dir": str((where / r.run_dir).relative_to(out))})
    finally:
        backend.close()
    return rows


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Mean ± 95 % CI over seeds per (task, ε, rule, ξ/σ) of final accuracy and bias."""
    groups: dict[tuple[str, float, str, float], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        groups[(r["task"], r["epsilon"], r["rule"], round(r["xi_over_sigma"], 6))].append(r)
    out = []
    for (task, eps, rule, f), group in sorted(groups.items()):
        acc = mean_ci(r["final_accuracy"] if r["status"] == "completed" else math.nan for r in group)
        bias = mean_ci(r["bias_exact"] for r in group)
        out.append({"task": task, "epsilon": eps, "rule": rule, "xi_over_sigma": f, "xi": group[0]["xi"],
                    "sigma": group[0]["sigma"], "count_noise_std": group[0]["count_noise_std"],
                    "update_noise_std": group[0]["update_noise_std"], "n": len(group),
                    "completed": sum(r["status"] == "completed" for r in group),
                    "accuracy_mean": acc.mean, "accuracy_ci": acc.half, "bias_mean": bias.mean, "bias_ci": bias.half})
    return out


def write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in row.items()})


@styled
def plot(summary: list[dict[str, Any]], path: Path) -> Path:
    from matplotlib.ticker import FuncFormatter, NullFormatter  # matplotlib only when drawing

    tasks = list(dict.fromkeys(s["task"] for s in summary))
    epsilons = list(dict.fromkeys(s["epsilon"] for s in summary))
    fig = figure(4.4 * len(epsilons) + 0.6, 6.2 * len(tasks) / 1.3 + 1.0)
    axes = fig.subplots(2 * len(tasks), len(epsilons), squeeze=False, sharex=True)
    for i, task in enumerate(tasks):
        for j, eps in enumerate(epsilons):
            acc_ax, bias_ax = axes[2 * i][j], axes[2 * i + 1][j]
            for rule in RULES:
                pts = sorted((s for s in summary if (s["task"], s["epsilon"], s["rule"]) == (task, eps, rule)),
                             key=lambda s: s["xi_over_sigma"])
                if not pts:
                    continue
                x = np.array([s["xi_over_sigma"] for s in pts])
                for ax, key in ((acc_ax, "accuracy"), (bias_ax, "bias")):
                    m = np.array([s[f"{key}_mean"] for s in pts])
                    h = np.nan_to_num(np.array([s[f"{key}_ci"] for s in pts]))
                    # a bias is positive and spans decades: log axis, its band cut at a tenth of the mean below
                    low = m - h if key == "accuracy" else np.maximum(m - h, 0.1 * m)
                    ax.plot(x, m, "o-", color=COLORS[rule], ms=3.5, lw=1.3, label=LABELS[rule])
                    ax.fill_between(x, low, m + h, color=COLORS[rule], alpha=0.15, lw=0)
            acc_ax.set_title(f"{task}, ε = {eps:g}")
            acc_ax.set_ylabel("final test accuracy")
            bias_ax.set_ylabel("bias ‖AW − M‖_F/‖M‖_F")
            for ax in (acc_ax, bias_ax):
                ax.set_xscale("log")
            bias_ax.set_yscale("log")
            plain = FuncFormatter(lambda v, _: f"{v:g}")
            bias_ax.yaxis.set_major_formatter(plain)
            bias_ax.yaxis.set_minor_formatter(plain if bias_ax.get_ylim()[1] / bias_ax.get_ylim()[0] < 20 else NullFormatter())
            if i == len(tasks) - 1:
                bias_ax.set_xlabel("count-noise level ξ / σ")
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=2)
    title(fig, "privacy–utility", "MA-light and naive momentum against ξ at fixed (ε, δ): mean ± 95 % CI over seeds")
    return save(fig, path)


def best_xi(summary: list[dict[str, Any]], task: str, eps: float) -> dict[str, Any] | None:
    pts = [s for s in summary if (s["task"], s["epsilon"], s["rule"]) == (task, eps, "ma-light") and math.isfinite(s["accuracy_mean"])]
    return max(pts, key=lambda s: s["accuracy_mean"]) if pts else None


def report(summary: list[dict[str, Any]], out: Path, figure_name: str) -> Path:
    tasks = list(dict.fromkeys(s["task"] for s in summary))
    epsilons = list(dict.fromkeys(s["epsilon"] for s in summary))
    L = ["# Privacy–utility study of ξ", "", "Generated by `python -m analysis.privacy_utility` (see its docstring). "
         "Every run: `results.csv`; mean ± 95 % CI over seeds: `summary.csv`.", "", f"![privacy–utility]({figure_name})", "",
         "## Best ξ per task and ε (MA-light, final test accuracy)", "",
         "| task | ε | σ | best ξ/σ | accuracy at best (95 % CI) | momentum at the same ξ | momentum's best (its ξ/σ) | "
         "ξ/σ within the best's CI |", "|---|---|---|---|---|---|---|---|"]
    for task in tasks:
        for eps in epsilons:
            b = best_xi(summary, task, eps)
            if b is None:
                continue
            mom = next((s for s in summary if (s["task"], s["epsilon"], s["rule"], s["xi_over_sigma"]) ==
                        (task, eps, "momentum", b["xi_over_sigma"])), None)
            mom_pts = [s for s in summary if (s["task"], s["epsilon"], s["rule"]) == (task, eps, "momentum")
                       and math.isfinite(s["accuracy_mean"])]
            mom_best = max(mom_pts, key=lambda s: s["accuracy_mean"]) if mom_pts else None
            mom_best_text = (f"{mom_best['accuracy_mean']:.4f} ± {np.nan_to_num(mom_best['accuracy_ci']):.4f} "
                             f"({mom_best['xi_over_sigma']:g})" if mom_best else "—")
            near = [s["xi_over_sigma"] for s in summary if (s["task"], s["epsilon"], s["rule"]) == (task, eps, "ma-light")
                    and s["accuracy_mean"] + np.nan_to_num(s["accuracy_ci"]) >= b["accuracy_mean"] - np.nan_to_num(b["accuracy_ci"])]
            L.append(f"| {task} | {eps:g} | {b['sigma']:.3g} | {b['xi_over_sigma']:g} | {b['accuracy_mean']:.4f} ± "
                     f"{np.nan_to_num(b['accuracy_ci']):.4f} | "
                     + (f"{mom['accuracy_mean']:.4f} ± {np.nan_to_num(mom['accuracy_ci']):.4f}" if mom else "—")
                     + f" | {mom_best_text} | {', '.join(f'{v:g}' for v in sorted(near))} |")
    L += ["", "## Every point", "", "| task | ε | rule | ξ/σ | ξ | count noise ξ/M | update noise | completed | final accuracy | bias |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for s in summary:
        L.append(f"| {s['task']} | {s['epsilon']:g} | {s['rule']} | {s['xi_over_sigma']:g} | {s['xi']:.4g} | {s['count_noise_std']:.3g} | "
                 f"{s['update_noise_std']:.3g} | {s['completed']}/{s['n']} | {s['accuracy_mean']:.4f} ± {np.nan_to_num(s['accuracy_ci']):.4f} | "
                 f"{s['bias_mean']:.3f} ± {np.nan_to_num(s['bias_ci']):.3f} |")
    path = out / "report.md"
    path.write_text("\n".join(L) + "\n", encoding="utf-8")
    return path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m analysis.privacy_utility", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="the MA study's spec (its tasks, scale and DP settings)")
    parser.add_argument("--study", required=True, help="the MA study's output directory (its tuned server learning rates)")
    parser.add_argument("--out", required=True)
    parser.add_argument("--k-multiple", type=int, default=20, help="K = this × C (default 20)")
    parser.add_argument("--epsilons", type=float, nargs="+", default=[2.0, 8.0])
    parser.add_argument("--xi-over-sigma", type=float, nargs="+", default=list(XI_OVER_SIGMA))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--workers", type=int, default=None)
    args = parser.parse_args(argv)
    if any(f <= 1 for f in args.xi_over_sigma):
        parser.error("--xi-over-sigma: every value must exceed 1 (ξ > σ)")
    rows = run_all(args)
    out = Path(args.out)
    write_csv(out / "results.csv", rows)
    summary = summarise(rows)
    write_csv(out / "summary.csv", summary)
    fig = plot(summary, out / "privacy_utility.png")
    print(f"wrote {report(summary, out, fig.name)}, {out / 'summary.csv'}, {fig}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
