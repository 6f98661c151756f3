"""The ξ study's numbers, report and figures, all from ``results.csv`` alone (docs/privacy.md,
"Choosing ξ"; the statistics of docs/studies.md):

* **target** per task, fixed after the runs by one rule: ``target_fraction`` (0.9) × the best
  mean final accuracy over the ξ grid, rounded down to 0.01 — it changes only what is read from
  the curves, never a run;
* per run: final test accuracy (a run that diverged counts at its untrained model's, never
  dropped) and the interval-censored step at which the curve first reaches
  the target (:func:`asyncfl.studies.crossing.crossing`; right-censored at T when never reached);
* per ξ: mean final accuracy ± 95 % t interval, the restricted mean steps to target over the
  horizon T (:func:`asyncfl.studies.survival.restricted_mean`; unreached runs count at T, never
  dropped) and how many were censored; against the best ξ (the highest mean final accuracy) the
  paired difference of final accuracy (:func:`asyncfl.studies.effects.paired_difference`) and
  the paired RMST ratio ``RMST(best) / RMST(ξ)`` (< 1: ξ reaches the target later than the best;
  :func:`asyncfl.studies.survival.compare_crossings`: the paired bootstrap's expanded percentile
  interval, with the range the crossing intervals allow);
* **identified set**: the ξ not significantly worse than the best (the paired interval of the
  accuracy difference reaches 0); the best ξ is *identified* when tried points on both sides
  are significantly worse, and the interval is then bracketed by them;
* **the rule's check**: ξ\\* (recomputed from the configuration columns) against each task's best,
  in both metrics.

``python -m analysis.privacy_sweep.study report DIR`` rewrites ``summary.csv``, ``report.md`` and
``xi_utility``/``xi_curves``/``xi_rule`` (PDF and PNG) in DIR from ``DIR/results.csv``.
"""

from __future__ import annotations

import csv
import functools
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from asyncfl.figures.ci import mean_ci
from asyncfl.figures.style import figure, save, styled, title
from asyncfl.studies.crossing import Crossing, crossing
from asyncfl.studies.effects import Difference, paired_difference
from asyncfl.studies.survival import Comparison, compare_crossings, restricted_mean
from asyncfl.studies.tuning import choose
from analysis.typed_csv import read_typed
from analysis.privacy_sweep.xi_rule import CountModel, rule_xi, update_excess

TEXT = {"study": "study task", "check": "check task"}
TARGET_FRACTION = 0.9
#: bootstrap resamples of the RMST ratios (docs/studies.md §5)
RESAMPLES = 9999


# ----------------------------------------------------------------------------------------------
# reading
@dataclass
class RunRecord:
    """One run read back from ``results.csv``: its configuration row and its curve."""

    head: dict[str, Any]
    steps: list[float] = field(default_factory=list)
    accuracy: list[float] = field(default_factory=list)

    def __getitem__(self, key: str) -> Any:
        return self.head[key]

    @property
    def final(self) -> float:
        """The final test accuracy; a run that did not complete (diverged) counts at its untrained
        model's (the step-0 evaluation) — it learned nothing usable — and is never dropped."""
        if self.head["status"] == "completed":
            return self.head["final_accuracy"]
        return self.accuracy[0] if self.steps and self.steps[0] == 0 else math.nan

    @property
    def wall(self) -> float:
        finite = [w for w in self.head.get("_walls", []) if math.isfinite(w)]
        return max(finite) if finite else math.nan


NUMERIC = {"lr", "xi_over_sigma", "rule_xi_over_sigma", "xi", "gamma", "sigma", "epsilon_target", "epsilon_spent", "delta",
           "final_accuracy", "final_loss", "bias_exact", "bias_noisy", "bias_momentum", "update_noise_std",
           "count_noise_std", "participations_max", "step", "accuracy", "loss", "wall_time", "staleness_exponent"}
INTEGER = {"clients", "buffer", "K", "noise_cohort", "staleness_bins", "steps", "seed"}


def _value(key: str, text: str) -> Any:
    if key in NUMERIC:
        return float(text) if text not in ("", None) else math.nan
    if key in INTEGER:
        return int(text)
    return text


def read_results(path: str | Path) -> list[RunRecord]:
    """The runs of ``results.csv`` (one row per evaluation), in file order; a cell that is not of
    its column's kind, or a file that is not a UTF-8 table, is a UsageError naming it
    (:func:`analysis.typed_csv.read_typed`)."""
    runs: dict[str, RunRecord] = {}
    required = ("run_dir", "task", "role", "stage", "status", "step", "accuracy", "wall_time", "steps")
    for row in read_typed(path, _value, required, lambda key: "an integer" if key in INTEGER else "a number (or blank)"):
        rec = runs.get(row["run_dir"])
        if rec is None:
            rec = runs[row["run_dir"]] = RunRecord({**row, "_walls": []})
        if math.isfinite(row["step"]):
            rec.steps.append(row["step"])
            rec.accuracy.append(row["accuracy"])
            rec.head["_walls"].append(row["wall_time"])
    return list(runs.values())


# ----------------------------------------------------------------------------------------------
# statistics
def target_of(means: Sequence[float], fraction: float = TARGET_FRACTION) -> float:
    """``fraction`` × the best finite mean, rounded down to 0.01."""
    best = max(m for m in means if math.isfinite(m))
    return math.floor(fraction * best * 100 + 1e-9) / 100


def crossing_of(run: RunRecord, target: float) -> Crossing:
    """When ``run`` first reached ``target``; right-censored at its planned T."""
    if not run.steps:
        return Crossing(run["steps"], math.inf, run["steps"], False, run["steps"])
    return crossing(run.steps, run.accuracy, target, horizon=max(float(run["steps"]), run.steps[-1]))


@dataclass
class Point:
    """One ξ of one task (all its evaluation seeds, in seed order)."""

    x: float
    runs: list[RunRecord]
    crossings: list[Crossing] = field(default_factory=list)

    @property
    def finals(self) -> np.ndarray:
        return np.array([r.final for r in self.runs])

    @property
    def seeds(self) -> list[int]:
        return [r["seed"] for r in self.runs]


@dataclass
class TaskResult:
    """Everything the report says about one task's ξ grid."""

    task: str
    role: str
    head: dict[str, Any]
    target: float
    points: list[Point]
    best: Point
    rule_x: float
    diffs: dict[float, Difference]
    ratios: dict[float, Comparison]
    rmst: dict[float, float]

    def point(self, x: float) -> Point | None:
        return next((p for p in self.points if math.isclose(p.x, x, rel_tol=1e-9)), None)

    def not_worse(self, x: float) -> bool:
        """The paired interval of the accuracy difference (ξ − best) reaches 0."""
        d = self.diffs[x]
        return x == self.best.x or not (d.high < 0)

    def not_slower(self, x: float) -> bool:
        """The paired interval of the RMST ratio best/ξ reaches 1 (or there is none)."""
        c = self.ratios[x]
        return c is None or not (c.high < 1)

    def identified(self, speed: bool = False) -> tuple[list[float], float | None, float | None]:
        """The ξ/σ not significantly worse than the best in final accuracy (``speed``: not
        significantly slower to the target), ascending, and the nearest tried ξ/σ below and above
        that set that are significantly worse (``None``: the set reaches the grid's end there, so
        the optimum is not bounded on that side)."""
        ok = self.not_slower if speed else self.not_worse
        xs = [p.x for p in self.points]
        keep = [x for x in xs if ok(x)]
        below = [x for x in xs if x < min(keep) and not ok(x)]
        above = [x for x in xs if x > max(keep) and not ok(x)]
        return keep, (max(below) if below else None), (min(above) if above else None)


def _paired(a: Point, b: Point) -> tuple[list[RunRecord], list[RunRecord], list[Crossing], list[Crossing]]:
    """The runs of ``a`` and ``b`` on their common seeds, in seed order, with their crossings."""
    common = sorted(set(a.seeds) & set(b.seeds))
    ia = [a.seeds.index(s) for s in common]
    ib = [b.seeds.index(s) for s in common]
    return [a.runs[i] for i in ia], [b.runs[i] for i in ib], [a.crossings[i] for i in ia], [b.crossings[i] for i in ib]


def compare(base: Point, rule: Point) -> tuple[Difference, Comparison]:
    """``rule − base`` in final accuracy (paired t) and ``RMST(base)/RMST(rule)`` over the crossings
    (paired bootstrap, docs/studies.md §5; < 1: ``rule`` reaches the target later), on the common seeds."""
    rb, rr, cb, cr = _paired(base, rule)
    diff = paired_difference([r.final for r in rb], [r.final for r in rr])
    return diff, compare_crossings(cb, cr, resamples=RESAMPLES)


def task_result(runs: Sequence[RunRecord], task: str, fraction: float = TARGET_FRACTION) -> TaskResult:
    """The ξ grid of ``task`` (stage ``xi``): target, best, paired comparisons with the best."""
    mine = [r for r in runs if r["task"] == task and r["stage"] == "xi"]
    xs = sorted({r["xi_over_sigma"] for r in mine})
    points = [Point(x, sorted((r for r in mine if r["xi_over_sigma"] == x), key=lambda r: r["seed"])) for x in xs]
    means = [mean_ci(p.finals).mean for p in points]
    target = target_of(means, fraction)
    for p in points:
        p.crossings = [crossing_of(r, target) for r in p.runs]
    best = points[int(np.nanargmax(means))]
    horizon = float(mine[0]["steps"])
    diffs, ratios, rmst = {}, {}, {}
    for p in points:
        rmst[p.x] = restricted_mean([min(c.point, horizon) for c in p.crossings], [c.reached for c in p.crossings], horizon)
        diffs[p.x], ratios[p.x] = compare(best, p) if p is not best else (Difference(0.0, 0.0, 0.0, len(p.runs)), None)
    return TaskResult(task, mine[0]["role"], mine[0], target, points, best, mine[0]["rule_xi_over_sigma"], diffs, ratios, rmst)


def rule_check(head: dict[str, Any]) -> tuple[float, CountModel]:
    """ξ\\*/σ recomputed from a run's configuration columns (σ, C, M, K, L, p), and its count model."""
    return _rule(head["sigma"], head["buffer"], head["noise_cohort"], head["K"], head["staleness_bins"], head["staleness_exponent"])


@functools.lru_cache(maxsize=16)
def _rule(sigma: float, C: int, M: int, K: int, L: int, exponent: float) -> tuple[float, CountModel]:
    model = CountModel.fedbuff(C, M, K, L, exponent)
    return rule_xi(sigma, model).xi_over_sigma, model


def tuning_table(runs: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """Per (task, stage, lr): the tuning seeds' final accuracies."""
    out: dict[tuple[str, str, float], list[float]] = {}
    for r in runs:
        if r["stage"].startswith("tune-"):
            out.setdefault((r["task"], r["stage"], r["lr"]), []).append(r.final)
    return [{"task": t, "stage": s, "lr": lr, "finals": v} for (t, s, lr), v in sorted(out.items())]


def chosen_lr(runs: Sequence[RunRecord], task: str, stage: str) -> float | None:
    """The learning rate the evaluation of ``stage`` ran at (``xi`` or ``reference``)."""
    lrs = {r["lr"] for r in runs if r["task"] == task and r["stage"] == stage}
    return lrs.pop() if len(lrs) == 1 else None


# ----------------------------------------------------------------------------------------------
# writing
def _f(x: float, spec: str = ".3f") -> str:
    return "—" if x is None or not math.isfinite(x) else format(x, spec)


def _ci(d: Difference | Comparison | None, spec: str = "+.3f") -> str:
    if d is None:
        return "(best)"
    if isinstance(d, Difference):
        return f"{_f(d.mean, spec)} [{_f(d.low, spec)}, {_f(d.high, spec)}]"
    rng = f"; interval ends {d.bounds[0]:.2f}–{d.bounds[1]:.2f}×" if d.bounds else ""
    return f"{_f(d.ratio, '.2f')}× [{_f(d.low, '.2f')}, {_f(d.high, '.2f')}]{rng}"


def summary_rows(results: Sequence[TaskResult], runs: Sequence[RunRecord]) -> list[dict[str, Any]]:
    """``summary.csv``: one row per (task, stage, ξ/σ)."""
    rows = []
    for res in results:
        _, model = rule_check(res.head)
        for p in res.points:
            acc, bias = mean_ci(p.finals), mean_ci(r["bias_exact"] for r in p.runs)
            d, c = res.diffs[p.x], res.ratios[p.x]
            xi = p.runs[0]["xi"]
            rows.append({
                "task": res.task, "role": res.role, "stage": "xi", "rule": p.runs[0]["rule"], "lr": p.runs[0]["lr"],
                "xi_over_sigma": p.x, "xi": xi, "gamma": p.runs[0]["gamma"], "xi_over_M": xi / res.head["noise_cohort"],
                "counts": p.runs[0]["counts"], "update_excess": update_excess(xi, res.head["sigma"]), "count_error": model.error(xi),
                "n": len(p.runs), "completed": int(np.sum(np.isfinite(p.finals))), "accuracy_mean": acc.mean, "accuracy_ci": acc.half,
                "diff_vs_best": d.mean, "diff_low": d.low, "diff_high": d.high, "target": res.target,
                "rmst": res.rmst[p.x], "unreached": sum(not c_.reached for c_ in p.crossings),
                "rmst_ratio_vs_best": c.ratio if c else 1.0, "ratio_low": c.low if c else math.nan,
                "ratio_high": c.high if c else math.nan, "bias_mean": bias.mean, "bias_ci": bias.half,
                "is_best": p is res.best, "is_rule_xi": math.isclose(p.x, res.rule_x, rel_tol=1e-9),
            })
    ref = _reference_runs(runs)
    if ref:
        acc = mean_ci(r.final for r in ref)
        rows.append({"task": ref[0]["task"], "role": ref[0]["role"], "stage": "reference", "rule": ref[0]["rule"],
                     "lr": ref[0]["lr"], "xi_over_sigma": ref[0]["xi_over_sigma"], "xi": ref[0]["xi"], "gamma": ref[0]["gamma"],
                     "xi_over_M": ref[0]["xi"] / ref[0]["noise_cohort"], "counts": ref[0]["counts"],
                     "update_excess": update_excess(ref[0]["xi"], ref[0]["sigma"]), "n": len(ref),
                     "completed": sum(math.isfinite(r.final) for r in ref), "accuracy_mean": acc.mean, "accuracy_ci": acc.half})
    return rows


def _reference_runs(runs: Sequence[RunRecord]) -> list[RunRecord]:
    return sorted((r for r in runs if r["stage"] == "reference"), key=lambda r: r["seed"])


def write_csv(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    keys = list(dict.fromkeys(k for r in rows for k in r))
    with open(path, "w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    return path


def _xs(xs: Sequence[float]) -> str:
    return ", ".join(f"{x:g}" for x in xs)


def identification_text(res: TaskResult, speed: bool = False) -> str:
    """One sentence: where the best ξ lies, or on which side it is not bounded."""
    keep, below, above = res.identified(speed)
    if below is not None and above is not None:
        where = f"identified: ξ/σ ∈ ({below:g}, {above:g}) (tried points significantly worse on both sides)"
    elif below is None and above is None:
        where = "not identified: no tried ξ is significantly worse than the best"
    else:
        side = "below" if below is None else "above"
        where = f"not identified {side}: no tried ξ {side} the set is significantly worse"
    what = "not significantly slower to the target" if speed else "not significantly worse in final accuracy"
    return f"{what} than the best ξ/σ = {res.best.x:g}: {{{_xs(keep)}}}; {where}"


def report_lines(results: Sequence[TaskResult], runs: Sequence[RunRecord], figures: Sequence[str]) -> list[str]:
    study = next(r for r in results if r.role == "study")
    h = study.head
    recomputed = {res.task: rule_check(res.head)[0] for res in results}
    L = [
        "# The privacy–utility study of ξ (and γ), and a rule for choosing ξ",
        "",
        "Generated from `results.csv` by `python -m analysis.privacy_sweep.study report DIR` "
        "(method: `analysis/privacy_sweep/study/`, `study_report.py`; docs/privacy.md, \"Choosing ξ\"; "
        "statistics: docs/studies.md).",
        "",
        f"Setting: FedBuff, N = {h['clients']}, C = {h['buffer']}, K = {h['K']} ({h['K'] // h['buffer']}C), T = {h['steps']} server "
        f"steps; DP at ε = {h['epsilon_target']:g}, δ = {h['delta']:g}, noise cohort M = {h['noise_cohort']} "
        f"({h['sampling']}: an {h['claim']}), σ = {h['sigma']:.4g} calibrated once; S_Δ per task; "
        f"L = {h['staleness_bins']} staleness bins, p = {h['staleness_exponent']:g}. "
        "γ = σ S_Δ / √(ξ² − σ²) is one-to-one with ξ, so every ξ below is also a γ (column `gamma` of summary.csv). "
        "Counts post-processed by docs/privacy.md §3's recommendation (`simplex` at ξ/M ≤ 0.03, `project` above).",
        "",
        "## The rule",
        "",
        "ξ\\* = argmin over ξ of u(ξ) + e(ξ): u = ξ/√(ξ² − σ²) − 1, the relative excess of the update noise over its "
        "floor σS_Δ/M; e = the relative L2 error of a post-processed row of Ŵ at count noise ξ/M under FedBuff's staleness "
        "at K (Monte Carlo, `xi_rule.py`). Public configuration only — no data, no run.",
        "",
        "| task | σ | ξ\\*/σ (in results.csv) | ξ\\*/σ recomputed | ξ\\* | ξ\\*/M | γ at ξ\\* (S_Δ) |",
        "|---|---|---|---|---|---|---|",
    ]
    for res in results:
        hd = res.head
        clip_gamma = res.point(res.rule_x).runs[0]["gamma"] if res.point(res.rule_x) else math.nan
        L.append(f"| {res.task} | {hd['sigma']:.4g} | {res.rule_x:g} | {recomputed[res.task]:.4g} | {res.rule_x * hd['sigma']:.4g} | "
                 f"{res.rule_x * hd['sigma'] / hd['noise_cohort']:.4f} | {_f(clip_gamma, '.4g')} |")
    L += ["", "## Learning rates, tuned under DP on held-out seeds", "",
          "By mean final accuracy over the tuning seeds (docs/studies.md §7); near-ties: within one standard error of "
          "the chosen rate's mean.", "",
          "| task | rule (stage) | lr | tuning seeds' final accuracy | mean | chosen / near-tie |", "|---|---|---|---|---|---|"]
    table = tuning_table(runs)
    for t in table:
        stage = "xi" if t["stage"] == "tune-ma-light" else "reference"
        chosen = chosen_lr(runs, t["task"], stage)
        pick = choose({u["lr"]: u["finals"] for u in table if (u["task"], u["stage"]) == (t["task"], t["stage"])}, False)
        mark = "chosen" if chosen is not None and math.isclose(chosen, t["lr"]) else ("near-tie" if t["lr"] in pick.ties else "")
        L.append(f"| {t['task']} | {t['stage'][5:]} | {t['lr']:g} | {', '.join(_f(v, '.4f') for v in t['finals'])} | "
                 f"{_f(float(np.mean(t['finals'])), '.4f')} | {mark} |")
    for res in results:
        hd = res.head
        L += ["", f"## {res.task} ({TEXT[res.role]}): final accuracy and steps to {res.target:.2f} against ξ", "",
              f"MA-light, server lr {res.points[0].runs[0]['lr']:g}, {len(res.best.runs)} evaluation seeds per ξ; "
              f"target {res.target:.2f} = {TARGET_FRACTION:g} × the best mean final accuracy, rounded down to 0.01; "
              "a run that diverged counts at its untrained model's accuracy and as never reaching the target. "
              "Δ: paired difference to the best ξ (95 % t interval); RMST: restricted mean steps to target over T "
              "(unreached runs count at T); speed: RMST(best)/RMST(ξ) (< 1: ξ reaches the target later than the best; "
              "95 % paired bootstrap, expanded percentile interval (docs/studies.md §5); 'interval ends': the ratio "
              "with every crossing at the ends of its evaluation interval).", "",
              "| ξ/σ | ξ | γ | ξ/M | counts | u(ξ) | e(ξ) | final accuracy | Δ vs best | RMST (unreached) | speed vs best | bias ‖AW−M‖/‖M‖ |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
        _, model = rule_check(hd)
        for p in res.points:
            r0 = p.runs[0]
            acc, bias = mean_ci(p.finals), mean_ci(r["bias_exact"] for r in p.runs)
            mark = (" **best**" if p is res.best else "") + (" (ξ\\*)" if math.isclose(p.x, res.rule_x) else "")
            unreached = sum(not c.reached for c in p.crossings)
            diverged = sum(r["status"] != "completed" for r in p.runs)
            broke = f" ({diverged} diverged)" if diverged else ""
            L.append(f"| {p.x:g}{mark} | {r0['xi']:.4g} | {r0['gamma']:.4g} | {r0['xi'] / hd['noise_cohort']:.4f} | {r0['counts']} | "
                     f"{update_excess(r0['xi'], hd['sigma']):.3f} | {model.error(r0['xi']):.3f} | {_f(acc.mean, '.4f')} ± {_f(acc.half, '.4f')}{broke} | "
                     f"{_ci(res.diffs[p.x]) if p is not res.best else '(best)'} | {res.rmst[p.x]:.1f} ({unreached}/{len(p.runs)}) | "
                     f"{_ci(res.ratios[p.x])} | {_f(bias.mean, '.3f')} ± {_f(bias.half, '.3f')} |")
        L += ["", f"* Final accuracy — {identification_text(res)}.", f"* Steps to target — {identification_text(res, speed=True)}."]
        rule_pt = res.point(res.rule_x)
        if rule_pt is not None and rule_pt is not res.best:
            d, c = res.diffs[rule_pt.x], res.ratios[rule_pt.x]
            verdict = "not significantly worse" if res.not_worse(rule_pt.x) else "significantly worse"
            slower = "not significantly slower" if res.not_slower(rule_pt.x) else "significantly slower"
            L.append(f"* The rule's ξ\\* = {res.rule_x:g}σ is {verdict} than the best ({_ci(d)} in final accuracy) and "
                     f"{slower} (speed {_ci(c)}).")
        elif rule_pt is not None:
            L.append(f"* The rule's ξ\\* = {res.rule_x:g}σ is the best tried ξ.")
    L += ["", "## The rule's check", "",
          "| task | role | best ξ/σ | identified (accuracy) | identified (steps to target) | ξ\\*/σ | ξ\\* not significantly worse (accuracy) | "
          "Δ final accuracy (ξ\\* − best) | ξ\\* not significantly slower | speed RMST(best)/RMST(ξ\\*) |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    def bracket(res: TaskResult, speed: bool) -> str:
        _, below, above = res.identified(speed)
        if below is not None and above is not None:
            return f"yes: ({below:g}, {above:g})"
        return "no (" + ("open below" if below is None else f"> {below:g}") + ", " + ("open above" if above is None else f"< {above:g}") + ")"

    for res in results:
        rp = res.point(res.rule_x)
        ok = "—" if rp is None else ("yes" if res.not_worse(rp.x) else "no")
        fast = "—" if rp is None else ("yes" if res.not_slower(rp.x) else "no")
        L.append(f"| {res.task} | {res.role} | {res.best.x:g} | {bracket(res, False)} | {bracket(res, True)} | {res.rule_x:g} | {ok} | "
                 f"{'(is best)' if rp is res.best else _ci(res.diffs[rp.x]) if rp else '—'} | {fast} | "
                 f"{'(is best)' if rp is res.best else _ci(res.ratios[rp.x]) if rp else '—'} |")
    ref = _reference_runs(runs)
    if ref:
        ref_pt = Point(ref[0]["xi_over_sigma"], ref)
        ref_pt.crossings = [crossing_of(r, study.target) for r in ref]
        acc = mean_ci(ref_pt.finals)
        L += ["", f"## Reference: naive momentum on {study.task}, which ignores the counts", "",
              f"FedBuff + momentum at ξ = {ref_pt.x:g}σ (update noise {1 + update_excess(ref[0]['xi'], ref[0]['sigma']):.7f}× its floor: "
              f"γ ≈ 0, the counts' share of the budget ≈ nothing), server lr {ref[0]['lr']:g} tuned the same way: final accuracy "
              f"{_f(acc.mean, '.4f')} ± {_f(acc.half, '.4f')} over {len(ref)} seeds.", "",
              "| MA-light at | Δ final accuracy (MA-light − momentum) | speed RMST(momentum)/RMST(MA-light) |", "|---|---|---|"]
        for label, p in (("best ξ = " + f"{study.best.x:g}σ", study.best), (f"ξ\\* = {study.rule_x:g}σ", study.point(study.rule_x))):
            if p is None:
                continue
            d, c = compare(ref_pt, p)
            L.append(f"| {label} | {_ci(d)} | {_ci(c)} |")
    L += ["", "## Figures", ""] + [f"![{f}]({f})" for f in figures]
    walls = [r.wall for r in runs]
    L += ["", f"Runs: {len(runs)}; summed run wall time {np.nansum(walls) / 60:.1f} min "
          "(each run's last `wall_time` in metrics.csv; building the population is not in it)."]
    return L


# ----------------------------------------------------------------------------------------------
# figures
NICE = (1.1, 1.2, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 50, 64, 100, 200, 500, 1000)
COLOURS = {"study": "tab:blue", "check": "tab:orange"}


def log_ticks(ax: Any, lo: float, hi: float, min_gap: float = 0.11) -> None:
    """Major ticks of a log ξ/σ axis at round values in [lo, hi], at least ``min_gap`` decades
    apart (no overprinted labels), written plainly; no minor labels."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ticks: list[float] = []
    for t in NICE:
        if lo <= t <= hi and (not ticks or math.log10(t / ticks[-1]) >= min_gap):
            ticks.append(t)
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def plot_utility(results: Sequence[TaskResult], runs: Sequence[RunRecord], stem: Path) -> list[Path]:
    """``xi_utility.{pdf,png}``: per task (rows) final accuracy, the paired difference to the best
    ξ, and the restricted mean steps to target, against ξ/σ (log); ξ\\* dashed, the set not
    significantly worse than the best shaded; naive momentum's reference band on the study task."""
    fig = figure(11.5, 3.2 * len(results) + 0.8)
    axes = fig.subplots(len(results), 3, squeeze=False)
    ref = _reference_runs(runs)
    for row, res in zip(axes, results):
        xs = np.array([p.x for p in res.points])
        colour = COLOURS[res.role]
        acc = [mean_ci(p.finals) for p in res.points]
        ax = row[0]
        for p in res.points:
            ax.plot([p.x] * len(p.runs), p.finals, ".", color=colour, alpha=0.25, ms=4)
        ax.errorbar(xs, [a.mean for a in acc], yerr=np.nan_to_num([a.half for a in acc]), fmt="o-", color=colour, capsize=3,
                    ms=4, label="MA-light (mean ± 95 % CI; dots: seeds)")
        if ref and res.role == "study":
            r = mean_ci(x.final for x in ref)
            ax.axhspan(r.mean - np.nan_to_num(r.half), r.mean + np.nan_to_num(r.half), color="0.5", alpha=0.25, lw=0)
            ax.axhline(r.mean, color="0.35", lw=1.2, ls="-.", label="naive momentum, counts not sent")
        ax.set_ylabel(f"{res.task}\nfinal test accuracy")
        d = [res.diffs[x] for x in xs]
        ax = row[1]
        ax.errorbar(xs, [v.mean for v in d], yerr=[np.nan_to_num([v.mean - v.low for v in d]), np.nan_to_num([v.high - v.mean for v in d])],
                    fmt="o-", color=colour, capsize=3, ms=4)
        ax.axhline(0, color="k", lw=0.8)
        ax.set_ylabel("Δ final accuracy vs best ξ\n(paired, 95 % CI)")
        ax = row[2]
        rm = np.array([res.rmst[x] for x in xs])
        ax.plot(xs, rm, "o-", color=colour, ms=4, label=f"target {res.target:.2f}")
        for p, v in zip(res.points, rm):
            n_un = sum(not c.reached for c in p.crossings)
            if n_un:
                ax.annotate(f"{n_un}/{len(p.runs)}", (p.x, v), textcoords="offset points", xytext=(0, 5), ha="center", fontsize=7)
        ax.axhline(res.head["steps"], color="0.5", lw=0.8, ls=":")
        ax.set_ylabel("restricted mean steps to target\n(n/m: runs unreached by T)")
        keep, _, _ = res.identified()
        for ax in row:
            ax.set_xscale("log")
            ax.axvspan(min(keep) / 1.04, max(keep) * 1.04, color=colour, alpha=0.08, lw=0)
            ax.axvline(res.rule_x, color="k", ls="--", lw=1, label=f"rule ξ* = {res.rule_x:g}σ")
            log_ticks(ax, xs.min() * 0.95, xs.max() * 1.05)
            ax.grid(True, which="major", alpha=0.3)
            ax.set_xlabel("ξ / σ")
        row[0].legend(fontsize=7.5, loc="lower center")
        row[2].legend(fontsize=7.5, loc="upper center")
    h = results[0].head
    title(fig, "ξ study", f"MA-light against the count-noise level at ε = {h['epsilon_target']:g} (σ = {h['sigma']:.3g}, "
                          f"M = {h['noise_cohort']}, K = {h['K']}); shaded: ξ not significantly worse than the best")
    return [save(fig, stem.with_suffix(f".{ext}")) for ext in ("pdf", "png")]


def plot_rule(results: Sequence[TaskResult], stem: Path) -> list[Path]:
    """``xi_rule.{pdf,png}``: the rule's two relative errors u(ξ), e(ξ) and their sum against ξ/σ,
    ξ\\* marked, with each task's set of ξ not significantly worse than its best."""
    h = results[0].head
    rule_x, model = rule_check(h)
    grid = np.geomspace(1.05, max(max(p.x for p in r.points) for r in results) * 1.3, 120)
    u = np.array([update_excess(g * h["sigma"], h["sigma"]) for g in grid])
    e = np.array([model.error(g * h["sigma"]) for g in grid])
    fig = figure(7.5, 5.6)
    ax = fig.subplots()
    ax.plot(grid, u, color="tab:green", label="u(ξ): update noise excess over its floor")
    ax.plot(grid, e, color="tab:red", label="e(ξ): relative error of a row of Ŵ")
    ax.plot(grid, u + e, color="k", lw=2, label="u + e")
    ax.axvline(rule_x, color="k", ls="--", lw=1, label=f"ξ* = {rule_x:.3g}σ")
    switch = 0.03 * h["noise_cohort"] / h["sigma"]
    if grid[0] < switch < grid[-1]:
        ax.axvline(switch, color="tab:red", ls=":", lw=0.9, label="counts: simplex → project (ξ/M = 0.03)")
    for i, res in enumerate(results):
        keep, _, _ = res.identified()
        ax.axvspan(min(keep) / 1.02, max(keep) * 1.02, ymin=0.02 + 0.05 * i, ymax=0.06 + 0.05 * i, color=COLOURS[res.role],
                   alpha=0.8, label=f"{res.task}: ξ not significantly worse than its best (best {res.best.x:g}σ)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_ylim(max(1e-3, float(np.nanmin(u + e)) / 20), float(np.nanmax(u + e)) * 1.5)
    log_ticks(ax, grid[0], grid[-1])
    ax.set_xlabel(f"ξ / σ  (σ = {h['sigma']:.3g}; ξ/M = ξ/σ × {h['sigma'] / h['noise_cohort']:.3g})")
    ax.set_ylabel("relative error")
    ax.grid(True, which="major", alpha=0.3)
    fig.legend(*ax.get_legend_handles_labels(), fontsize=7.5, loc="outside lower center", ncol=2)
    title(fig, "ξ rule", f"ξ* = argmin u + e at σ = {h['sigma']:.3g}, M = {h['noise_cohort']}, K = {h['K']}, C = {h['buffer']}")
    return [save(fig, stem.with_suffix(f".{ext}")) for ext in ("pdf", "png")]


def plot_curves(results: Sequence[TaskResult], stem: Path) -> list[Path]:
    """``xi_curves.{pdf,png}``: per task, the mean test-accuracy curve over the evaluation seeds at
    each ξ (colour: log ξ/σ), the best ξ and ξ\\* drawn thicker, the target dotted; a run that
    stopped early (diverged) is left out of its ξ's mean curve (the tables count it)."""
    import matplotlib as mpl

    fig = figure(5.2 * len(results), 4.4)
    axes = fig.subplots(1, len(results), squeeze=False)[0]
    for ax, res in zip(axes, results):
        xs = [p.x for p in res.points]
        norm = mpl.colors.LogNorm(min(xs), max(xs))
        cmap = mpl.colormaps["viridis"]
        for p in res.points:
            steps = p.runs[0].steps
            curves = np.array([r.accuracy for r in p.runs if r.steps == steps])
            special = p is res.best or math.isclose(p.x, res.rule_x)
            label = f"{p.x:g}σ" + (" (best)" if p is res.best else "") + (" (ξ*)" if math.isclose(p.x, res.rule_x) else "")
            ax.plot(steps, np.nanmean(curves, axis=0), color=cmap(norm(p.x)), lw=2.4 if special else 1.1,
                    ls="-" if special else "--", label=label)
        ax.axhline(res.target, color="k", ls=":", lw=1, label=f"target {res.target:.2f}")
        ax.set_title(f"{res.task} ({TEXT[res.role]})")
        ax.set_xlabel("server step")
        ax.set_ylabel("test accuracy (mean over seeds)")
        ax.set_xlim(0, res.head["steps"])
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, title="ξ/σ", title_fontsize=7.5, loc="best")
    h = results[0].head
    title(fig, "ξ study", f"MA-light's accuracy curves per ξ at ε = {h['epsilon_target']:g} (σ = {h['sigma']:.3g})")
    return [save(fig, stem.with_suffix(f".{ext}")) for ext in ("pdf", "png")]


def write_report(out: str | Path) -> list[Path]:
    """``summary.csv``, ``report.md`` and the figures ``xi_utility``, ``xi_curves`` and ``xi_rule``
    (PDF and PNG) in ``out``, from ``out/results.csv`` alone."""
    out = Path(out)
    runs = read_results(out / "results.csv")
    tasks = list(dict.fromkeys(r["task"] for r in sorted(runs, key=lambda r: r["role"] != "study") if r["stage"] == "xi"))
    results = [task_result(runs, t) for t in tasks]
    figs = (styled(plot_utility)(results, runs, out / "xi_utility") + styled(plot_curves)(results, out / "xi_curves")
            + styled(plot_rule)(results, out / "xi_rule"))
    summary = write_csv(summary_rows(results, runs), out / "summary.csv")
    report = out / "report.md"
    report.write_text("\n".join(report_lines(results, runs, [f.name for f in figs if f.suffix == ".png"])) + "\n", encoding="utf-8")
    return [report, summary, *figs]
