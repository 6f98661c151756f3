"""The sweep's tables (docs/privacy.md, "What a run reports"): ``sweep.csv``, the means over
seeds per (ξ, rule), where MA's bias crosses naive momentum's, and ``sweep.md``."""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any, Iterable, Sequence

import numpy as np

from asyncfl.config import scenario as scenario_mod
from asyncfl.figures.ci import mean_ci
from analysis.privacy_sweep.spec import COLUMNS, RULES, Budget, SweepRow
from analysis.typed_csv import read_typed


def write_csv(rows: Iterable[SweepRow], path: Path) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(COLUMNS))
        writer.writeheader()
        for row in rows:
            d = row.as_dict()
            writer.writerow({k: ("" if d[k] is None else (f"{d[k]:.6g}" if isinstance(d[k], float) else d[k])) for k in COLUMNS})
    return path


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a CSV table as text (a regular UTF-8 file, bounded: :func:`analysis.typed_csv.read_typed`)."""
    return read_typed(path, lambda key, text: text)


def aggregate(rows: Sequence[SweepRow]) -> list[dict[str, Any]]:
    """Mean and 95 % CI half-width over seeds (Student t, :func:`asyncfl.figures.ci.mean_ci`; NaN
    for one seed) of accuracy, loss and bias per (ξ, rule), sorted by ξ."""
    groups: dict[tuple[float, str], list[SweepRow]] = {}
    for row in rows:
        groups.setdefault((row.xi, row.rule), []).append(row)
    out = []
    for (xi, rule), group in sorted(groups.items()):
        def stat(name: str) -> tuple[float, float]:
            ci = mean_ci(getattr(r, name) for r in group if r.status == "completed")
            return ci.mean, ci.half
        first = group[0]
        out.append({
            "xi": xi, "rule": rule, "gamma": first.gamma, "xi_over_C": first.xi_over_C, "sigma": first.sigma,
            "epsilon_spent": first.epsilon_spent, "n": len(group), "diverged": sum(r.status != "completed" for r in group),
            "accuracy": stat("final_accuracy"), "loss": stat("final_loss"), "bias_exact": stat("bias_exact"),
            "bias_noisy": stat("bias_noisy"), "bias_momentum": stat("bias_momentum"),
            "update_noise_std": first.update_noise_std, "count_noise_std": first.count_noise_std,
            "initial_accuracy": mean_ci(r.initial_accuracy for r in group).mean,
        })
    return out


#: a rule learned at a ξ when its mean final accuracy is more than this above the untrained model's
LEARNED_MARGIN = 0.05


def _pm(stat: tuple[float, float]) -> str:
    mean, half = stat
    return f"{mean:.4f} ± {half:.4f}" if math.isfinite(half) else f"{mean:.4f} ± —"


def crossing_xi(xis: Sequence[float], bias_ma: Sequence[float], bias_momentum: Sequence[float]) -> float | None:
    """The smallest ξ at which MA's bias on the exact W reaches naive momentum's (linear in
    log ξ between sweep points); ``None`` if it never does in the sweep."""
    xs, diff = np.log(np.asarray(xis, float)), np.asarray(bias_ma, float) - np.asarray(bias_momentum, float)
    for i in range(len(xs)):
        if np.isfinite(diff[i]) and diff[i] >= 0:
            if i == 0 or not np.isfinite(diff[i - 1]):
                return float(np.exp(xs[i]))
            frac = -diff[i - 1] / (diff[i] - diff[i - 1])
            return float(np.exp(xs[i - 1] + frac * (xs[i] - xs[i - 1])))
    return None


def findings(rows: Sequence[SweepRow], budget: Budget) -> list[str]:
    """Where MA's bias on the exact W crosses naive momentum's, and where utility peaks, per rule."""
    agg = aggregate(rows)
    lines = []
    rules = [r for r in RULES if any(a["rule"] == r for a in agg)]
    ref = {a["xi"]: a["bias_momentum"][0] for a in agg}
    for rule in rules:
        sub = [a for a in agg if a["rule"] == rule]
        xs = [a["xi"] for a in sub]
        acc = [a["accuracy"][0] for a in sub]
        initial = [a["initial_accuracy"] for a in sub]
        learned = [i for i in range(len(sub)) if np.isfinite(acc[i]) and not acc[i] <= initial[i] + LEARNED_MARGIN]
        if learned:
            best = max(learned, key=lambda i: acc[i])
            lines.append(f"{rule}: best final accuracy {acc[best]:.4f} at ξ = {xs[best]:.4g} (ξ/C = {xs[best] / budget.C:.3g})")
        elif any(np.isfinite(acc)):
            top = int(np.nanargmax(acc))
            lines.append(f"{rule}: did not learn at any ξ (best final accuracy {acc[top]:.4f}, the untrained model's "
                         f"{_fmt(initial[top])}; learning means more than {LEARNED_MARGIN:g} above it), so no ξ is best")
        else:
            lines.append(f"{rule}: no run completed, so no ξ is best")
        if rule != "momentum":
            cross = crossing_xi(xs, [a["bias_exact"][0] for a in sub], [ref[x] for x in xs])
            lines.append(
                f"{rule}: bias on the exact W reaches naive momentum's at "
                + (f"ξ ≈ {cross:.3g} (ξ/C ≈ {cross / budget.C:.3g})" if cross is not None else "no ξ in the sweep")
            )
    return lines


def _why(message: str) -> str:
    """``: MESSAGE`` after a status (a table cell: no ``|``), empty without one."""
    return (": " + message.replace("|", "/")) if message else ""


def _fmt(x: Any, spec: str = ".4g") -> str:
    if x is None:
        return "–"
    if isinstance(x, float):
        return "nan" if not math.isfinite(x) and x != x else format(x, spec)
    return str(x)


def write_markdown(rows: Sequence[SweepRow], budget: Budget, path: Path, scenario: scenario_mod.Scenario | None = None) -> Path:
    """``sweep.md``: the setting, one table row per run, the per-(ξ, rule) means over seeds (if
    several) and the findings of :func:`findings`."""
    name = scenario.name if scenario is not None else "scenario"
    lines = [
        f"# Privacy–utility sweep: {name}",
        "",
        f"{budget.describe()}; S_Δ = {budget.clip:g}, C = {budget.C}, noise cohort M = {budget.M}, T = {budget.steps}. "
        f"The reported ε is {'an approximation' if budget.claim == 'approximation' else 'a guarantee'} "
        f"(privacy.sampling = {budget.sampling!r}, docs/privacy.md §5–6). "
        "Update noise std per coordinate `σ S_Δ ξ / (M √(ξ² − σ²))`, count noise std `ξ / M` (docs/privacy.md §2, §7). "
        "Bias = `‖A W − M‖_F / ‖M‖_F` with `A` computed on the server's noisy `Ŵ`, measured on the exact `W` "
        "and on `Ŵ` (docs/server-rules.md); naive momentum (`A = M`) does not depend on `Ŵ`.",
        "",
        "| ξ | ξ/C | γ | σ | ε spent | δ | sampling | rule | seed | status | participations (max / mean) | final accuracy | final loss | bias (exact W) | bias (noisy Ŵ) | update noise std | count noise std |",
        "|---:|---:|---:|---:|---:|---:|---|---|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.xi:.4g} | {r.xi_over_C:.3g} | {r.gamma:.4g} | {r.sigma:.4g} | {r.epsilon_spent:.4g} | {r.delta:g} | "
            f"{r.sampling} ({r.claim}) | {r.rule} | {r.seed} | {r.status}{_why(r.message)} | {_fmt(r.participations_max, '.0f')} / "
            f"{_fmt(r.participations_mean, '.3g')} | {_fmt(r.final_accuracy)} | {_fmt(r.final_loss)} | {_fmt(r.bias_exact)} | "
            f"{_fmt(r.bias_noisy)} | {r.update_noise_std:.4g} | {r.count_noise_std:.4g} |"
        )
    agg = aggregate(rows)
    if any(a["n"] > 1 for a in agg):
        lines += ["", "Mean ± 95 % confidence half-width over seeds (Student t; — for one seed):", "",
                  "| ξ | ξ/C | rule | runs | final accuracy | bias (exact W) | bias (noisy Ŵ) |", "|---:|---:|---|---:|---:|---:|---:|"]
        for a in agg:
            lines.append(
                f"| {a['xi']:.4g} | {a['xi_over_C']:.3g} | {a['rule']} | {a['n']} | {_pm(a['accuracy'])} | "
                f"{_pm(a['bias_exact'])} | {_pm(a['bias_noisy'])} |"
            )
    found = findings(rows, budget)
    if found:
        lines += ["", "Findings (computed from the table):", ""] + [f"* {line}" for line in found]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path
