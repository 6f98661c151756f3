"""A first look at correlated noise (issue 26; docs/privacy.md §12): on the MA study's gaussian
task at K = 20C and ε = 2, the banded matrix-factorisation mechanism against i.i.d. noise, for
FedBuff + momentum and FedBuff + MA-light, 3 seeds, with each run's per-client realised ε (§11).

Setting (everything not named here is the study's, read from ``analysis/study_paper.toml``: its
``[defaults]``, the gaussian task's overrides, C, T, ``eval_every``, and the ``eps2`` entry's δ,
noise cohort M and ξ/σ):

* FedBuff, C = 100, K = 20C = 2000, T = 300, N = 10⁴; server lr = the study's no-DP choice at
  K = 20C (``analysis/results/ma_paper/tuning.csv``, the row with ``chosen = 1``); no DP tuning.
* ε = 2 at δ = 10⁻⁶ under the participation cap (§6): correlated noise needs a schema (§12), and
  both noises run under the same one, so they differ only in the noise. k is the smallest cap
  the population can supply, ``k = ⌈T·M/N⌉``; b the largest separation that keeps the schema
  feasible, ``N ≥ b·M`` and ``⌈T/b⌉ ≥ k`` (§6, "Feasibility"), because the banded strategy may
  have at most b bands.
* Correlated noise: ``privacy.noise = "banded"``, ``noise_bands = b``, ``noise_workload =
  "momentum"`` (β = the rule's ``server.beta``). Chosen on the numbers the script prints first:
  at this (T, k, b) the banded strategy's RMSE on the momentum workload is below every BLT
  strategy's (docs/privacy.md gives no general recommendation).
* ξ = (ξ/σ)·σ with each mechanism's own σ, given as ``privacy.gamma = S_Δ/√((ξ/σ)² − 1)``, which is
  the same statement (ξ = σS/γ, S² = S_Δ² + γ², docs/privacy.md §2) without resolving σ here; the
  runs' ``summary.json`` report the ξ and σ they used.

Runs: four ``asyncfl sweep`` invocations (one per noise and rule, ``--seeds 0-2 --workers 2``)
under ``runs/privacy_first_look/`` (resumable). Outputs in
``analysis/results/privacy_factorization/first_look/``: ``results.csv`` (one row per run),
``curves.csv`` (mean ± 95 % t-interval of test accuracy per step), ``first_look.{png,pdf}`` and
``report.md``. Targets for steps-to-target are fixed by the study's rule, not read off these
curves: the gaussian task's target 0.85 and the fractions 0.8 (the study's secondary target)
and 0.5 of it.

Run from the repository root: ``python -m analysis.privacy_noise_first_look`` (≈ 3 min on 2 cores).
"""

from __future__ import annotations

import argparse
import csv
import math
import subprocess
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from asyncfl.config import scenario as scenario_mod
from asyncfl.figures.ci import mean_ci, mean_ci_columns
from asyncfl.figures.style import STEP_LABEL, figure, save
from asyncfl.privacy import factorization as F
from asyncfl.results import Run
from asyncfl.studies.stats import paired_speedup
from analysis.ma_study.design import flatten
from analysis.privacy_utility import write_csv

SPEC = Path("analysis/study_paper.toml")
TUNING = Path("analysis/results/ma_paper/tuning.csv")
STUDY_RESULTS = Path("analysis/results/ma_paper/results.csv")
OUT = Path("analysis/results/privacy_factorization/first_look")
RUNS = Path("runs/privacy_first_look")
TASK, PRIVACY, K_MULTIPLE, EPSILON = "gaussian", "eps2", 20, 2.0
RULES = {"momentum": "fedbuff-momentum", "ma-light": "fedbuff-ma-light"}
LABELS = {"momentum": "FedBuff + momentum", "ma-light": "FedBuff + MA-light"}
NOISES = ("iid", "banded")
NOISE_LABELS = {"iid": "i.i.d. noise", "banded": "banded noise"}
COLOURS = {"iid": "tab:gray", "banded": "tab:blue"}
TARGET_FRACTIONS = (1.0, 0.8, 0.5)
SEEDS = "0-2"


def tuned_lr(method: str, K: int) -> float:
    """The study's no-DP server lr for ``method`` on the task at ``K`` (the ``chosen`` row)."""
    with open(TUNING, newline="", encoding="utf-8") as fh:
        rows = [r for r in csv.DictReader(fh) if r["task"] == TASK and r["privacy"] == "nodp"
                and int(r["K"]) == K and r["method"] == method and r["chosen"] == "1"]
    if len(rows) != 1:
        raise SystemExit(f"{TUNING}: expected one chosen row for {TASK}/{method}/K={K}, found {len(rows)}")
    return float(rows[0]["lr"])


def schema(N: int, M: int, T: int) -> tuple[int, int]:
    """(k, b): the smallest cap with k·N ≥ T·M, and the largest separation with N ≥ b·M and
    ⌈T/b⌉ ≥ k, so that k′ = min(k, ⌈T/b⌉) = k still supplies T·M (docs/privacy.md §6)."""
    k = math.ceil(T * M / N)
    b = max(b for b in range(1, T + 1) if N >= b * M and math.ceil(T / b) >= k)
    return k, b


def strategy_table(T: int, k: int, b: int, beta: float) -> list[tuple[str, float]]:
    """RMSE (σ = 1) of each candidate strategy on the momentum workload under (k, b) (§12)."""
    a = F.momentum_workload(T, beta)
    rows = [("iid", F.workload_error(F.identity_strategy(T), a, k, b)["rmse"])]
    rows.append((f"banded, {b} bands", F.workload_error(F.optimize_banded(a, b, k=k, b=b), a, k, b)["rmse"]))
    for n in (1, 2, 3):
        rows.append((f"BLT, {n} buffers", F.workload_error(F.optimize_blt(a, n, k=k, b=b), a, k, b)["rmse"]))
    return rows


def base_scenarios(spec: dict[str, Any]) -> tuple[dict[tuple[str, str], scenario_mod.Scenario], dict[str, Any]]:
    """One validated scenario per (noise, rule), and the setting they share."""
    task = next(t for t in spec["tasks"] if t["name"] == TASK)
    priv = next(p for p in spec["privacy"] if p["name"] == PRIVACY)
    overrides = {**flatten(spec["defaults"]), **flatten(task["overrides"])}
    C, T = int(spec["buffer"]), int(spec["steps"])
    K = K_MULTIPLE * C
    N, M = int(overrides["population.clients"]), int(priv["noise_cohort"])
    k, b = schema(N, M, T)
    clip = float(overrides["privacy.clip"])
    gamma = clip / math.sqrt(float(priv["xi_over_sigma"]) ** 2 - 1)
    setting = {"C": C, "K": K, "T": T, "N": N, "M": M, "k": k, "b": b, "clip": clip, "gamma": gamma,
               "delta": float(priv["delta"]), "xi_over_sigma": float(priv["xi_over_sigma"]),
               "beta": float(overrides["server.beta"]), "eval_every": int(spec["eval_every"]),
               "target": float(task["target_accuracy"]), "lr": {}}
    out = {}
    for rule, method in RULES.items():
        lr = tuned_lr(method, K)
        setting["lr"][rule] = lr
        for noise in NOISES:
            raw: dict[str, Any] = {}
            keys = {**overrides, "name": f"first-look-{TASK}-K{K}-eps2-{noise}-{rule}", "seed": 0,
                    "run.steps": T, "run.eval_every": setting["eval_every"], "server.protocol": "fedbuff",
                    "server.buffer": C, "server.concurrency": K, "server.rule": rule, "server.lr": lr,
                    "server.ma_target": "momentum",
                    "privacy.enabled": True, "privacy.epsilon": EPSILON, "privacy.delta": setting["delta"],
                    "privacy.sampling": "participation-cap", "privacy.max_participations": k,
                    "privacy.min_separation": b, "privacy.noise_cohort": M, "privacy.gamma": gamma,
                    "privacy.noise": noise}
            if noise == "banded":
                keys.update({"privacy.noise_bands": b, "privacy.noise_workload": "momentum"})
            for key, value in keys.items():
                scenario_mod.assign(raw, key, value)
            scenario_mod.drop_unowned(raw)
            out[(noise, rule)] = scenario_mod.validate(raw)
    return out, setting


def run_sweeps(scenarios: dict[tuple[str, str], scenario_mod.Scenario], workers: int) -> None:
    """``asyncfl sweep`` per (noise, rule): the seeds in parallel; a rerun resumes."""
    for (noise, rule), sc in scenarios.items():
        folder = RUNS / noise / rule
        folder.mkdir(parents=True, exist_ok=True)
        path = RUNS / f"{noise}-{rule}.toml"
        path.write_text(sc.to_toml(), encoding="utf-8")
        cmd = [sys.executable, "-m", "asyncfl", "sweep", str(path), "--seeds", SEEDS, "--workers", str(workers),
               "--out", str(folder), "--quiet"]
        print("$", " ".join(cmd[1:]), flush=True)
        subprocess.run(cmd, check=True)


def steps_to(evals: list[dict[str, float]], target: float) -> float:
    """The first evaluated step with test accuracy ≥ target (NaN: never)."""
    return next((e["step"] for e in evals if e["step"] > 0 and e["accuracy"] >= target), math.nan)


def collect(setting: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[tuple[str, str], np.ndarray], np.ndarray]:
    """One row per run (from its run directory) and the accuracy curves (seeds × evaluations)."""
    rows, curves, steps = [], {}, None
    for rule in RULES:
        for noise in NOISES:
            folder = RUNS / noise / rule
            with open(folder / "results.csv", newline="", encoding="utf-8") as fh:
                sweep_rows = sorted(csv.DictReader(fh), key=lambda r: int(r["seed"]))
            accs = []
            for r in sweep_rows:
                run = Run(folder / r["run_dir"])
                s, evals = run.summary, run.evaluations()
                p = s["privacy"]
                row = {"rule": rule, "noise": noise, "seed": int(r["seed"]), "status": s["status"],
                       "lr": setting["lr"][rule], "k": setting["k"], "b": setting["b"],
                       "noise_bands": setting["b"] if noise == "banded" else "",
                       "sigma": p["sigma"], "strategy_sensitivity": p.get("strategy_sensitivity") or 1.0,
                       "xi": p["xi"], "gamma": p["gamma"], "epsilon": p["epsilon_spent"], "delta": p["delta"],
                       "epsilon_client_max": p["epsilon_client_max"], "epsilon_client_p50": p["epsilon_client_p50"],
                       "epsilon_client_p99": p["epsilon_client_p99"], "participations_max": p["participations_max"],
                       "participations_mean": p["participations_mean"],
                       "final_accuracy": s["final"]["accuracy"], "final_loss": s["final"]["loss"],
                       "best_accuracy": max(e["accuracy"] for e in evals), "wall_time": s["wall_time"]}
                for frac in TARGET_FRACTIONS:
                    row[f"steps_to_{frac * setting['target']:.3g}"] = steps_to(evals, frac * setting["target"])
                row["run_dir"] = str(folder / r["run_dir"])
                rows.append(row)
                steps = np.array([e["step"] for e in evals])
                accs.append([e["accuracy"] for e in evals])
            curves[(noise, rule)] = np.array(accs)
    return rows, curves, steps


def plot(curves: dict[tuple[str, str], np.ndarray], steps: np.ndarray, setting: dict[str, Any], nodp: dict[str, float]) -> None:
    """Test accuracy against server steps, one panel per rule, mean ± 95 % t-interval over seeds
    (shaded), the study's no-DP final accuracy dotted."""
    fig = figure(7.0, 3.2)
    axes = fig.subplots(1, len(RULES), sharey=True)
    for ax, rule in zip(axes, RULES):
        for noise in NOISES:
            mean, half = mean_ci_columns(curves[(noise, rule)])
            n = curves[(noise, rule)].shape[0]
            ax.plot(steps, mean, color=COLOURS[noise], label=f"{NOISE_LABELS[noise]}, mean ± 95 % CI ({n} seeds)")
            ax.fill_between(steps, mean - half, mean + half, color=COLOURS[noise], alpha=0.25, lw=0)
        if rule in nodp:
            ax.axhline(nodp[rule], color="black", ls=":", lw=1, label="no DP (study, final)")
        ax.set_title(LABELS[rule])
        ax.set_xlabel(STEP_LABEL)
        ax.set_xlim(0, setting["T"])
        ax.set_ylim(0, 1)
    axes[0].set_ylabel("test accuracy")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=8)
    for fmt in ("png", "pdf"):
        save(fig, OUT / f"first_look.{fmt}")


def study_finals(K: int, privacy: str) -> dict[str, float]:
    """The committed study's mean final accuracy at ``K`` under its setting ``privacy`` (context)."""
    out: dict[str, list[float]] = {}
    with open(STUDY_RESULTS, newline="", encoding="utf-8") as fh:
        for r in csv.DictReader(fh):
            for rule, method in RULES.items():
                if r["task"] == TASK and r["privacy"] == privacy and int(r["K"]) == K and r["method"] == method:
                    out.setdefault(rule, []).append(float(r["final_accuracy"]))
    return {rule: float(np.mean(v)) for rule, v in out.items()}


def fmt_ci(values: list[float], digits: int = 3) -> str:
    ci = mean_ci(values)
    return ci.text(digits)


def report(rows: list[dict[str, Any]], setting: dict[str, Any], strategies: list[tuple[str, float]],
           nodp: dict[str, float], poisson: dict[str, float], client_eps_diff: float, wall: float) -> str:
    s = setting
    targets = [frac * s["target"] for frac in TARGET_FRACTIONS]
    L = ["# Correlated vs i.i.d. noise: a first look (issue 26)", "",
         f"Generated by `python -m analysis.privacy_noise_first_look`: {len(rows)} runs of "
         f"{np.mean([r['wall_time'] for r in rows]):.0f} s wall each on average, two at a time on a shared 2-core machine "
         f"(this invocation {wall / 60:.1f} min; runs already in `runs/privacy_first_look/` are not rerun). "
         "Mechanism: docs/privacy.md §12; per-client ε: §11.", "",
         "## Setting", "",
         f"* The MA study's gaussian task (`analysis/study_paper.toml`: gaussian-mlp, label skew Dir(0.1), "
         f"N = {s['N']}, client lr 0.05, 5 local steps, batch 10, staleness exponent 0.5, max staleness 100, "
         f"β = {s['beta']}), FedBuff with C = {s['C']}, K = 20C = {s['K']}, T = {s['T']} server steps, "
         f"evaluation every {s['eval_every']} steps, seeds 0, 1, 2. Full size (no scaling down).",
         "* Server lr: the study's no-DP tuning at K = 20C (`analysis/results/ma_paper/tuning.csv`, chosen rows): "
         + ", ".join(f"{LABELS[r]} {lr:g}" for r, lr in s["lr"].items()) + ". No DP-specific tuning.",
         f"* Privacy: ε = {EPSILON:g}, δ = {s['delta']:g}, clip S_Δ = {s['clip']}, noise cohort M = {s['M']}, "
         f"ξ = {s['xi_over_sigma']:g}σ (given as γ = S_Δ/√3 = {s['gamma']:.4f}), counts post-processing the default "
         "(`project`), the PLD accountant.",
         f"* Sampling: the participation cap with k = {s['k']} (the smallest with k·N ≥ T·M = {s['T'] * s['M']}) "
         f"and b = {s['b']} (the largest with N ≥ b·M and ⌈T/b⌉ ≥ k), for **both** noises: they differ only in "
         "`privacy.noise`. The ε is a guarantee for the deployment that sums M uploads a step (§6, §7).",
         f"* Correlated noise: `privacy.noise = \"banded\"`, `noise_bands = {s['b']}` (the most the exact "
         "sensitivity allows with k > 1), `noise_workload = \"momentum\"` (β = 0.9, the rule's). "
         "Chosen over BLT on the RMSE of the momentum workload at this (T, k, b) (σ = 1, lower is better):", ""]
    L += ["| strategy | RMSE |", "|---|---|"] + [f"| {n} | {v:.3f} |" for n, v in strategies] + [""]
    L += ["## Results", "",
          "Mean ± 95 % Student-t half-width over 3 seeds (n = runs that reached the target for steps-to-target; "
          "'—' none did). σ is the mechanism's multiplier (the banded one is calibrated for one release and "
          "multiplied by sens(C); the i.i.d. one for the k-fold composition).", ""]
    head = ["rule", "noise", "σ", "sens(C)", "final accuracy", "best accuracy"] + [f"steps to {t:.3g}" for t in targets] + [
        "ε (mechanism)", "per-client ε max", "per-client ε median", "participations max / mean"]
    L += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for rule in RULES:
        for noise in NOISES:
            g = [r for r in rows if r["rule"] == rule and r["noise"] == noise]
            per_seed = [r["epsilon_client_max"] for r in g]
            cells = [LABELS[rule], NOISE_LABELS[noise], f"{g[0]['sigma']:.3f}", f"{g[0]['strategy_sensitivity']:.3f}",
                     fmt_ci([r["final_accuracy"] for r in g]), fmt_ci([r["best_accuracy"] for r in g])]
            cells += [fmt_ci([r[f"steps_to_{t:.3g}"] for r in g]) for t in targets]
            cells += [f"{np.mean([r['epsilon'] for r in g]):.3f}",
                      f"{max(per_seed):.3f} (seeds {', '.join(f'{e:.3f}' for e in per_seed)})",
                      f"{np.median([r['epsilon_client_p50'] for r in g]):.3f}",
                      f"{max(r['participations_max'] for r in g):g} / {np.mean([r['participations_mean'] for r in g]):.2f}"]
            L.append("| " + " | ".join(cells) + " |")
    L += ["", "Paired by seed (same data split and initial model), banded minus i.i.d.:", ""]
    for rule in RULES:
        by = {n: {r["seed"]: r for r in rows if r["rule"] == rule and r["noise"] == n} for n in NOISES}
        diffs = [by["banded"][sd]["final_accuracy"] - by["iid"][sd]["final_accuracy"] for sd in by["iid"] if sd in by["banded"]]
        line = f"* {LABELS[rule]}: final accuracy {fmt_ci(diffs)}"
        for t in targets:
            key = f"steps_to_{t:.3g}"
            sp = paired_speedup(list(by["iid"].values()), list(by["banded"].values()), key=key)
            if sp.n:
                line += f"; speed-up to {t:.3g}: {sp.geo:.2f}× [{sp.low:.2f}, {sp.high:.2f}] (n = {sp.n})"
            if sp.lower_bounds:
                line += f"; to {t:.3g} only banded reached it on {sp.lower_bounds} seed(s)"
        L.append(line + ".")
    L += ["", "For context, the committed study at K = 20C (`analysis/results/ma_paper/results.csv`, mean final accuracy "
          "of 3 seeds): without DP " + ", ".join(f"{LABELS[r]} {v:.3f}" for r, v in nodp.items())
          + f"; at its ε = {EPSILON:g} accounted as Poisson subsampling (an approximation for FedBuff, §5, not a "
          "guarantee, so not the same privacy as the rows above) " + ", ".join(f"{LABELS[r]} {v:.3f}" for r, v in poisson.items()) + ".",
          "", "![test accuracy against server steps](first_look.png)", ""]
    finals = {(r, n): float(np.mean([x["final_accuracy"] for x in rows if x["rule"] == r and x["noise"] == n]))
              for r in RULES for n in NOISES}
    L += ["## What it shows", "",
          f"* At the same (k, b) schema and the same ε, the banded strategy's noise costs FedBuff + momentum much less "
          f"accuracy than i.i.d. noise: final {finals[('momentum', 'banded')]:.3f} against "
          f"{finals[('momentum', 'iid')]:.3f}, the gap to no DP shrinking from "
          f"{nodp.get('momentum', math.nan) - finals[('momentum', 'iid')]:.3f} to "
          f"{nodp.get('momentum', math.nan) - finals[('momentum', 'banded')]:.3f}; only the banded runs reach the study's "
          f"target {s['target']:g}. At equal ε the strategy's RMSE on the momentum workload is "
          f"{strategies[1][1] / strategies[0][1]:.2f}× that of i.i.d. noise (table above); the accuracy gain is consistent "
          "with that, but nothing here relates the two quantitatively.",
          f"* For FedBuff + MA-light the gain is smaller and less certain (final {finals[('ma-light', 'banded')]:.3f} "
          f"against {finals[('ma-light', 'iid')]:.3f}, paired interval above). MA-light stays below momentum under both "
          "noises, as in the study's ε = 2 results (issue 26 attributes those to MA's coefficients amplifying i.i.d. "
          "noise; not tested here). The strategy here is optimised for the momentum workload, not for MA-light's own linear map (asyncfl offers `prefix` and "
          "`momentum` workloads only); the counts that MA-light fits its weights on carry the correlated noise too.",
          "* The per-client ε is the same under both noises, client by client (largest difference over all paired "
          f"runs {client_eps_diff:.1e}: the accountant evaluates one Gaussian against a j-fold composition). This is "
          "expected: with at most b bands, columns of C b steps apart have disjoint supports, so sens(C; j, b)² = j·‖c‖² "
          "(‖c‖ the norm of a column) and a client with j contributions gets one Gaussian of multiplier "
          "σ₁·sens(C; k, b)/sens(C; j, b) = σ₁·√(k/j), σ₁ the one-release multiplier; the i.i.d. mechanism's multiplier "
          "is σ₁·√k (k releases compose to one of σ/√k) and j of its releases give the same σ₁·√(k/j). So the two "
          "mechanisms give every client the same guarantee and differ only in how the noise is spread across steps.",
          f"* The per-client ε (max ≈ {max(r['epsilon_client_max'] for r in rows):.2f}, median ≈ "
          f"{float(np.median([r['epsilon_client_p50'] for r in rows])):.2f}) is that of the simulated schedule, where "
          f"C = {s['C']} uploads a step give each client T·C/N = {s['T'] * s['C'] / s['N']:g} contributions on average "
          f"(max {max(r['participations_max'] for r in rows):g}). In the accounted deployment (M = {s['M']} uploads a "
          f"step) a client contributes T·M/N = {s['T'] * s['M'] // s['N']} = k times on average, so there the typical "
          f"client's ε is the mechanism's {EPSILON:g} (§11's assumption that a deployment client takes part as often as a "
          "simulated one does not hold with a noise cohort).", "",
          "## What it does not show", "",
          "* Three seeds: the intervals use a t with 2 degrees of freedom and are wide (MA-light's especially); a "
          "difference of a few points is not resolved.",
          f"* One task, one K (20C), one ε, one schema. The schema is the tightest the population allows (k·N = T·M "
          f"exactly: every deployment client must contribute k = {s['k']} times, {s['b']} steps apart) — feasible by the "
          "counting check, which is necessary, not sufficient.",
          "* No DP-specific tuning: both noises run at the no-DP server lr; at i.i.d. noise's larger per-step noise a "
          "smaller lr may do better, so part of the gap could be the lr.",
          f"* Steps-to-target has the evaluation's resolution ({s['eval_every']} steps); the targets are the study's "
          "0.85 and the fractions 0.8 and 0.5 of it, fixed before these runs.",
          "* No BLT run: BLT was not run end to end, only compared on RMSE (within 3 % of banded here); no "
          "`prefix`-workload run.", ""]
    return "\n".join(L) + "\n"


def same_client_eps(rows: list[dict[str, Any]]) -> float:
    """Largest |ε_i(banded) − ε_i(iid)| over clients, paired by rule and seed (``privacy_clients.csv``)."""
    worst = 0.0
    for rule in RULES:
        for seed in sorted({r["seed"] for r in rows}):
            eps = {}
            for noise in NOISES:
                (row,) = [r for r in rows if r["rule"] == rule and r["seed"] == seed and r["noise"] == noise]
                with open(Path(row["run_dir"]) / "privacy_clients.csv", newline="", encoding="utf-8") as fh:
                    eps[noise] = {int(c["client"]): (int(c["participations"]), float(c["epsilon"])) for c in csv.DictReader(fh)}
            if eps["iid"].keys() != eps["banded"].keys():
                return math.inf
            for c, (n, e) in eps["iid"].items():
                n2, e2 = eps["banded"][c]
                worst = max(worst, math.inf if n != n2 else abs(e - e2))
    return worst


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    spec = tomllib.loads(SPEC.read_text(encoding="utf-8"))
    scenarios, setting = base_scenarios(spec)
    strategies = strategy_table(setting["T"], setting["k"], setting["b"], setting["beta"])
    for name, rmse in strategies:
        print(f"momentum workload, T={setting['T']} k={setting['k']} b={setting['b']}: {name:18s} RMSE {rmse:.3f}")
    run_sweeps(scenarios, args.workers)
    rows, curves, steps = collect(setting)
    OUT.mkdir(parents=True, exist_ok=True)
    write_csv(OUT / "results.csv", rows)
    curve_rows = []
    for (noise, rule), acc in curves.items():
        mean, half = mean_ci_columns(acc)
        curve_rows += [{"rule": rule, "noise": noise, "step": int(t), "accuracy_mean": float(m), "accuracy_ci95": float(h),
                        "seeds": acc.shape[0]} for t, m, h in zip(steps, mean, half)]
    write_csv(OUT / "curves.csv", curve_rows)
    nodp = study_finals(setting["K"], "nodp")
    poisson = study_finals(setting["K"], PRIVACY)
    plot(curves, steps, setting, nodp)
    wall = time.perf_counter() - t0
    (OUT / "report.md").write_text(report(rows, setting, strategies, nodp, poisson, same_client_eps(rows), wall), encoding="utf-8")
    print(f"wrote {OUT}/results.csv, curves.csv, first_look.png/.pdf, report.md in {wall:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
