"""The privacy–utility study of private momentum approximation (DESIGN.md §5, issue 4 item 6).

With private aggregation the server sees one noisy sum per step,
``Σ_k y_k + N(0, σ² S² I)`` with ``y_k = w(τ_k)·clip(Δ_k, S_Δ) ⊕ γ·onehot_L(τ_k)`` and
``S = √(S_Δ² + γ²)`` (DESIGN §5). At a fixed privacy budget (ε, δ) the noise multiplier σ is
fixed too (calibrated once, for q = C/N over the run's T server steps); what remains free is
how the sensitivity is split between the model update and the staleness counts, i.e. ``γ`` —
or equivalently the count-noise level ``ξ = σS/γ`` (``γ = σ S_Δ / √(ξ² − σ²)``, ``ξ > σ``).
Per coordinate, after dividing by the buffer size ``C``:

* update noise on ``r_t``:            ``σS/C = σ S_Δ ξ / (C √(ξ² − σ²))``  → ``σ S_Δ / C`` as ξ → ∞,
  and → ∞ as ξ ↓ σ;
* count noise on a row of ``Ŵ``:      ``ξ / C``  (before the ``(τ+1)^(−p)`` factor).

A row of ``W`` holds fractions ``C_{t,s}/C`` that sum to at most 1, so once ``ξ/C`` approaches
1 the server's estimate ``Ŵ`` is mostly noise and momentum approximation — which fits
``A Ŵ ≈ M`` — can no longer remove the implicit momentum bias of the *exact* ``W``: its bias
``‖A W − M‖_F / ‖M‖_F`` (DESIGN §4, with ``A`` computed on ``Ŵ``) rises towards, and past,
naive momentum's (``A = M``, which does not depend on ``Ŵ`` at all). At the other end
(ξ close to σ) the counts are precise but the update noise explodes.

:func:`run_sweep` runs one scenario for every requested ξ (or γ), rule and seed, with σ
calibrated once and reused, and returns one :class:`SweepRow` per run; :func:`write_outputs`
writes ``sweep.csv``, ``sweep.md`` and ``sweep.png``. The CLI is ``asyncfl privacy``
(:mod:`asyncfl.cli.privacy`); run it as::

    asyncfl privacy scenarios/private_synthetic.toml --xi 1.2 2 4 10 25 60 120 200 \\
        --rules ma-light ma-full momentum --out analysis/results/privacy_sweep --overwrite
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from asyncfl.config import scenario as scenario_mod
from asyncfl.errors import AsyncFLError, NumericalFault
from asyncfl.privacy import accounting, mechanism

RULES: tuple[str, ...] = ("ma-light", "ma-full", "momentum")
#: bias.json key of each rule's own coefficients (DESIGN §4: naive momentum is ``A = M``)
BIAS_KEY: dict[str, str] = {"ma-light": "ma_light", "ma-full": "ma_full", "momentum": "momentum"}
COLUMNS: tuple[str, ...] = (
    "xi", "xi_over_C", "gamma", "sigma", "epsilon_target", "epsilon_spent", "delta", "rule", "seed",
    "status", "steps", "final_accuracy", "final_loss", "bias_exact", "bias_noisy", "bias_momentum",
    "update_noise_std", "count_noise_std", "run_dir",
)


class SweepError(AsyncFLError):
    """Bad sweep input (exit code 2 from the CLI); the message names the option or field."""


# ----------------------------------------------------------------------------------------------
# analytic noise levels (DESIGN §5)
def update_noise_std(sigma: float, clip: float, xi: float, C: int) -> float:
    """Std of the noise on each coordinate of ``r_t``: ``σ S_Δ ξ / (C √(ξ² − σ²))`` (= ``σS/C``)."""
    return mechanism.update_noise_std(sigma, clip, xi, C)


def count_noise_std(xi: float, C: int) -> float:
    """Std of the noise on each entry ``ĉ_τ / C`` of a row of ``Ŵ``: ``ξ / C``."""
    return mechanism.count_noise_std(xi, C)


# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Budget:
    """The sweep's fixed privacy parameters: ``sigma`` σ (calibrated once to
    ``epsilon_target`` at ``delta``, or given), ``q = C/N``, ``steps`` T, ``clip`` S_Δ, ``C``."""

    sigma: float
    epsilon_target: float | None
    delta: float
    accountant: str
    q: float
    steps: int
    clip: float
    C: int

    def describe(self) -> str:
        how = ("given (privacy.noise_multiplier)" if self.epsilon_target is None else
               f"calibrated to ε = {self.epsilon_target:g}, δ = {self.delta:g} over {self.steps} steps "
               f"at q = C/N = {self.q:.4g} ({self.accountant})")
        return f"σ = {self.sigma:.6g} {how}"


@dataclass(frozen=True)
class SweepPoint:
    """One value of the split: ``xi`` ξ and ``gamma`` γ (one given, the other derived)."""

    xi: float
    gamma: float
    given: str  # "xi" or "gamma"


@dataclass
class SweepRow:
    """One run of the sweep (one line of ``sweep.csv``; columns in :data:`COLUMNS`)."""

    xi: float
    xi_over_C: float
    gamma: float
    sigma: float
    epsilon_target: float | None
    epsilon_spent: float
    delta: float
    rule: str
    seed: int
    status: str
    steps: int
    final_accuracy: float
    final_loss: float
    bias_exact: float
    bias_noisy: float
    bias_momentum: float
    update_noise_std: float
    count_noise_std: float
    run_dir: str

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


# ----------------------------------------------------------------------------------------------
def check_scenario(scenario: scenario_mod.Scenario) -> None:
    """The sweep needs a private FedBuff scenario (the staleness payload only exists there)."""
    if not scenario.privacy.enabled:
        raise SweepError(
            f"scenario {scenario.name!r} has no [privacy] section with enabled = true: the sweep varies "
            "ξ (or γ) at the scenario's fixed (ε, δ); add [privacy] with enabled, clip, epsilon, delta "
            "(see scenarios/private_synthetic.toml)"
        )
    if scenario.server.protocol != "fedbuff":
        raise SweepError(f"server.protocol = {scenario.server.protocol!r}: the sweep needs 'fedbuff' (there is no staleness to estimate in sync rounds)")


def resolve_budget(scenario: scenario_mod.Scenario) -> Budget:
    """σ for the scenario's privacy budget, computed **once** for the whole sweep.

    ``σ = calibrate_sigma(ε, δ, q = C/N, T)`` (:mod:`asyncfl.privacy.accounting`, DESIGN §5), or
    ``privacy.noise_multiplier`` when the scenario gives σ instead of ε. ξ and γ do not enter:
    they only split the sensitivity ``S`` between update and counts."""
    check_scenario(scenario)
    p, server = scenario.privacy, scenario.server
    C, N, T = int(server.buffer), scenario.population.clients, scenario.run.steps
    q = C / N
    if p.noise_multiplier is not None:
        sigma = float(p.noise_multiplier)
    else:
        sigma = accounting.calibrate_sigma(float(p.epsilon), float(p.delta), q, T, p.accountant)
    return Budget(sigma=sigma, epsilon_target=None if p.epsilon is None else float(p.epsilon),
                  delta=float(p.delta), accountant=p.accountant, q=q, steps=T, clip=float(p.clip), C=C)


def sweep_points(budget: Budget, xis: Sequence[float] = (), gammas: Sequence[float] = ()) -> list[SweepPoint]:
    """The points of the sweep, sorted by ξ (duplicates dropped).

    ``--xi`` values must be finite and exceed σ (the count noise ``ξ = σS/γ > σ`` for every
    γ > 0); ``γ = σ S_Δ / √(ξ² − σ²)``. ``--gamma`` values must be finite and positive;
    ``ξ = σ √(S_Δ² + γ²) / γ``. Every bad value is reported in one :class:`SweepError` naming
    the option and σ — none is silently skipped."""
    if not xis and not gammas:
        raise SweepError("give the sweep's points with --xi (count-noise levels ξ > σ) and/or --gamma (payload scales γ > 0)")
    problems: list[str] = []
    bad_xi = [x for x in xis if not (math.isfinite(x) and x > budget.sigma)]
    if bad_xi:
        problems.append(
            f"--xi {' '.join(f'{x:g}' for x in bad_xi)}: every ξ must be finite and exceed the noise multiplier "
            f"{budget.describe()} (the count noise ξ = σS/γ is above σ for every γ); "
            f"the smallest useful ξ is a little above {budget.sigma:.4g}"
        )
    bad_gamma = [g for g in gammas if not (math.isfinite(g) and g > 0)]
    if bad_gamma:
        problems.append(f"--gamma {' '.join(f'{g:g}' for g in bad_gamma)}: every γ must be finite and positive")
    if problems:
        raise SweepError("\n".join(problems))
    points = [SweepPoint(float(x), mechanism.gamma_from_xi(budget.sigma, budget.clip, float(x)), "xi") for x in xis]
    points += [SweepPoint(mechanism.xi_from_gamma(budget.sigma, budget.clip, float(g)), float(g), "gamma") for g in gammas]
    unique: dict[float, SweepPoint] = {}
    for point in sorted(points, key=lambda pt: pt.xi):
        unique.setdefault(round(point.xi, 12), point)
    return list(unique.values())


def point_scenario(base: scenario_mod.Scenario, budget: Budget, point: SweepPoint, rule: str, seed: int) -> scenario_mod.Scenario:
    """``base`` with ``privacy.noise_multiplier = σ`` (the calibrated value, so every point uses
    the same σ and no point re-calibrates), ``privacy.xi`` or ``privacy.gamma`` as given,
    ``server.rule = rule`` and ``seed``; re-validated."""
    raw = base.to_dict()
    privacy = raw["privacy"]
    for key in ("epsilon", "noise_multiplier", "xi", "gamma"):
        privacy.pop(key, None)
    privacy["noise_multiplier"] = budget.sigma
    privacy[point.given] = point.xi if point.given == "xi" else point.gamma
    raw["server"]["rule"] = rule
    raw["seed"] = int(seed)
    raw["name"] = f"{base.name}-xi{point.xi:.4g}-{rule}-s{seed}"
    return scenario_mod.validate(raw)


def _read_json(path: Path) -> dict[str, Any]:
    import json

    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _finite(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def run_point(
    scenario: scenario_mod.Scenario,
    budget: Budget,
    point: SweepPoint,
    run_dir: Path,
    task: Any = None,
    on_event: Callable[[Any], None] | None = None,
) -> SweepRow:
    """Run one point into ``run_dir`` and read back its row: final test accuracy and loss
    (``summary.json``), ε spent (the accountant's, for σ), the rule's bias on the exact ``W``
    and on the noisy ``Ŵ`` (``bias.json``; DESIGN §4), and the analytic noise levels.

    A run that diverges (:class:`NumericalFault`) is kept with ``status = 'diverged'`` — a sweep
    point where privacy noise broke training is a result, not an error."""
    from asyncfl.sim.engine import Simulation
    from asyncfl.run.runner import run_to_dir

    status = "completed"
    sim = Simulation(scenario, task) if task is not None else None
    try:
        asyncio.run(run_to_dir(scenario, run_dir, overwrite=True, on_event=on_event, simulation=sim))
    except NumericalFault:
        status = "diverged"
    summary = _read_json(run_dir / "summary.json")
    bias = _read_json(run_dir / "bias.json")
    rule = scenario.server.rule
    key = BIAS_KEY[rule]
    final = summary.get("final", {}) or {}
    priv = summary.get("privacy", {}) or {}
    return SweepRow(
        xi=point.xi, xi_over_C=point.xi / budget.C, gamma=point.gamma, sigma=_finite(priv.get("sigma", budget.sigma)),
        epsilon_target=budget.epsilon_target, epsilon_spent=_finite(priv.get("epsilon_spent")), delta=budget.delta,
        rule=rule, seed=scenario.seed, status=summary.get("status", status) if status == "completed" else status,
        steps=int(summary.get("steps", 0) or 0),
        final_accuracy=_finite(final.get("accuracy")), final_loss=_finite(final.get("loss")),
        bias_exact=_finite(bias.get(key)), bias_noisy=_finite((bias.get("noisy_w") or {}).get(key)),
        bias_momentum=_finite(bias.get("momentum")),
        update_noise_std=update_noise_std(budget.sigma, budget.clip, point.xi, budget.C),
        count_noise_std=count_noise_std(point.xi, budget.C),
        run_dir=str(run_dir),
    )


class SweepCallbacks:
    """Progress hooks of :func:`run_sweep` (all optional; the CLI drives a rich bar with them)."""

    def run_started(self, index: int, total: int, point: SweepPoint, rule: str, seed: int, steps: int) -> None: ...

    def step(self, event: Any) -> None: ...

    def run_finished(self, row: SweepRow) -> None: ...


def run_sweep(
    scenario: scenario_mod.Scenario,
    out: str | Path,
    xis: Sequence[float] = (),
    gammas: Sequence[float] = (),
    rules: Sequence[str] = RULES,
    seeds: Sequence[int] | None = None,
    callbacks: SweepCallbacks | None = None,
    budget: Budget | None = None,
) -> tuple[Budget, list[SweepRow]]:
    """Run every (seed, ξ, rule) of the sweep into ``out/runs/…`` and write the outputs into
    ``out`` (``sweep.csv`` is rewritten after every run, so an interrupted sweep keeps what it
    finished). σ is resolved once (:func:`resolve_budget`); the task is built once per seed and
    shared by that seed's runs (it is a pure function of the task section, N and the seed)."""
    from asyncfl.tasks import build_task

    budget = budget or resolve_budget(scenario)
    bad_rules = [r for r in rules if r not in BIAS_KEY]
    if bad_rules or not rules:
        raise SweepError(f"--rules {' '.join(bad_rules)}: each rule must be one of {', '.join(RULES)}")
    points = sweep_points(budget, xis, gammas)
    seeds = list(seeds) if seeds else [scenario.seed]
    cb = callbacks or SweepCallbacks()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[SweepRow] = []
    total = len(points) * len(rules) * len(seeds)
    index = 0
    try:
        for seed in seeds:
            task = build_task(scenario.task, scenario.population.clients, int(seed))
            for point in points:
                for rule in rules:
                    sc = point_scenario(scenario, budget, point, rule, int(seed))
                    cb.run_started(index, total, point, rule, int(seed), sc.run.steps)
                    run_dir = out / "runs" / f"xi{point.xi:.4g}-{rule}-s{seed}"
                    row = run_point(sc, budget, point, run_dir, task=task, on_event=cb.step)
                    row.run_dir = str(run_dir.relative_to(out))
                    rows.append(row)
                    write_csv(rows, out / "sweep.csv")
                    cb.run_finished(row)
                    index += 1
    finally:
        if rows:
            write_csv(rows, out / "sweep.csv")
    write_outputs(rows, budget, out, scenario)
    return budget, rows


# ----------------------------------------------------------------------------------------------
# outputs
def write_csv(rows: Iterable[SweepRow], path: Path) -> Path:
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(COLUMNS))
        writer.writeheader()
        for row in rows:
            d = row.as_dict()
            writer.writerow({k: ("" if d[k] is None else (f"{d[k]:.6g}" if isinstance(d[k], float) else d[k])) for k in COLUMNS})
    return path


def read_csv(path: str | Path) -> list[dict[str, Any]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def aggregate(rows: Sequence[SweepRow]) -> list[dict[str, Any]]:
    """Mean (and std over seeds) of accuracy, loss and bias per (ξ, rule), sorted by ξ."""
    groups: dict[tuple[float, str], list[SweepRow]] = {}
    for row in rows:
        groups.setdefault((row.xi, row.rule), []).append(row)
    out = []
    for (xi, rule), group in sorted(groups.items()):
        def stat(name: str) -> tuple[float, float]:
            vals = np.array([getattr(r, name) for r in group if r.status == "completed"], dtype=float)
            vals = vals[np.isfinite(vals)]
            if vals.size == 0:
                return math.nan, math.nan
            return float(vals.mean()), float(vals.std(ddof=1)) if vals.size > 1 else 0.0
        first = group[0]
        out.append({
            "xi": xi, "rule": rule, "gamma": first.gamma, "xi_over_C": first.xi_over_C, "sigma": first.sigma,
            "epsilon_spent": first.epsilon_spent, "n": len(group), "diverged": sum(r.status != "completed" for r in group),
            "accuracy": stat("final_accuracy"), "loss": stat("final_loss"), "bias_exact": stat("bias_exact"),
            "bias_noisy": stat("bias_noisy"), "bias_momentum": stat("bias_momentum"),
            "update_noise_std": first.update_noise_std, "count_noise_std": first.count_noise_std,
        })
    return out


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
        if any(np.isfinite(acc)):
            best = int(np.nanargmax(acc))
            lines.append(f"{rule}: best final accuracy {acc[best]:.4f} at ξ = {xs[best]:.4g} (ξ/C = {xs[best] / budget.C:.3g})")
        if rule != "momentum":
            cross = crossing_xi(xs, [a["bias_exact"][0] for a in sub], [ref[x] for x in xs])
            lines.append(
                f"{rule}: bias on the exact W reaches naive momentum's at "
                + (f"ξ ≈ {cross:.3g} (ξ/C ≈ {cross / budget.C:.3g})" if cross is not None else "no ξ in the sweep")
            )
    return lines


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
        f"{budget.describe()}; S_Δ = {budget.clip:g}, C = {budget.C}, T = {budget.steps}. "
        "Update noise std per coordinate `σ S_Δ ξ / (C √(ξ² − σ²))`, count noise std `ξ / C` (DESIGN.md §5). "
        "Bias = `‖A W − M‖_F / ‖M‖_F` with `A` computed on the server's noisy `Ŵ`, measured on the exact `W` "
        "and on `Ŵ` (DESIGN.md §4); naive momentum (`A = M`) does not depend on `Ŵ`.",
        "",
        "| ξ | ξ/C | γ | σ | ε spent | δ | rule | seed | status | final accuracy | final loss | bias (exact W) | bias (noisy Ŵ) | update noise std | count noise std |",
        "|---:|---:|---:|---:|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.xi:.4g} | {r.xi_over_C:.3g} | {r.gamma:.4g} | {r.sigma:.4g} | {r.epsilon_spent:.4g} | {r.delta:g} | {r.rule} | "
            f"{r.seed} | {r.status} | {_fmt(r.final_accuracy)} | {_fmt(r.final_loss)} | {_fmt(r.bias_exact)} | "
            f"{_fmt(r.bias_noisy)} | {r.update_noise_std:.4g} | {r.count_noise_std:.4g} |"
        )
    agg = aggregate(rows)
    if any(a["n"] > 1 for a in agg):
        lines += ["", "Mean ± std over seeds:", "",
                  "| ξ | ξ/C | rule | runs | final accuracy | bias (exact W) | bias (noisy Ŵ) |", "|---:|---:|---|---:|---:|---:|---:|"]
        for a in agg:
            lines.append(
                f"| {a['xi']:.4g} | {a['xi_over_C']:.3g} | {a['rule']} | {a['n']} | {a['accuracy'][0]:.4f} ± {a['accuracy'][1]:.4f} | "
                f"{a['bias_exact'][0]:.4f} ± {a['bias_exact'][1]:.4f} | {a['bias_noisy'][0]:.4f} ± {a['bias_noisy'][1]:.4f} |"
            )
    found = findings(rows, budget)
    if found:
        lines += ["", "Findings (computed from the table):", ""] + [f"* {line}" for line in found]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


COLOURS = {"ma-light": "tab:blue", "ma-full": "tab:orange", "momentum": "tab:gray"}


def plot(rows: Sequence[SweepRow], budget: Budget, path: Path, title: str | None = None) -> Path:
    """``sweep.png``: three panels against ξ (log x; top axis ξ/C):

    1. final test accuracy per rule (mean over seeds, bars = std);
    2. bias ``‖AW − M‖_F/‖M‖_F`` on the exact W (solid) and on the noisy Ŵ (dashed) for each
       rule — naive momentum's is flat, MA's rises once ``Ŵ`` is mostly noise;
    3. the analytic noise std: update ``σ S_Δ ξ / (C √(ξ² − σ²))`` with its floor ``σ S_Δ / C``,
       and counts ``ξ / C`` with the level 1 (the largest total of a row of W).

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
    upd = np.array([update_noise_std(budget.sigma, budget.clip, x, budget.C) for x in grid])
    ax_noise.plot(grid, upd, color="tab:green", label="update noise σ S_Δ ξ / (C √(ξ² − σ²))")
    ax_noise.axhline(budget.sigma * budget.clip / budget.C, color="tab:green", ls=":", lw=1, label="its floor σ S_Δ / C")
    ax_noise.plot(grid, grid / budget.C, color="tab:red", label="count noise ξ / C")
    ax_noise.axhline(1.0, color="tab:red", ls=":", lw=1, label="1 = largest row total of W")
    ax_noise.set_yscale("log")
    ax_noise.set_ylabel("noise std per coordinate")
    ax_noise.set_xlabel(f"ξ (count-noise level; σ = {budget.sigma:.3g}, C = {budget.C})")
    ax_noise.legend(fontsize=8)
    ax_noise.grid(alpha=0.3, which="both")
    for ax in (ax_acc, ax_bias, ax_noise):
        ax.set_xscale("log")
        ax.axvline(budget.C, color="k", ls=":", lw=0.8)  # ξ/C = 1
    top = ax_acc.secondary_xaxis("top", functions=(lambda x: x / budget.C, lambda r: r * budget.C))
    top.set_xlabel("ξ / C")
    eps = f"ε = {budget.epsilon_target:g}, " if budget.epsilon_target is not None else ""
    fig.suptitle(title or f"Private MA at fixed {eps}δ = {budget.delta:g} (σ = {budget.sigma:.3g}, S_Δ = {budget.clip:g})")
    fig.savefig(path, dpi=110)
    return path


def write_outputs(rows: Sequence[SweepRow], budget: Budget, out: str | Path, scenario: scenario_mod.Scenario | None = None) -> dict[str, Path]:
    """``sweep.csv``, ``sweep.md`` and ``sweep.png`` in ``out``."""
    out = Path(out)
    return {
        "csv": write_csv(rows, out / "sweep.csv"),
        "md": write_markdown(rows, budget, out / "sweep.md", scenario),
        "png": plot(rows, budget, out / "sweep.png"),
    }


if __name__ == "__main__":  # pragma: no cover - `python -m analysis.privacy_sweep` = `asyncfl privacy`
    import sys

    from asyncfl.cli.main import main

    sys.exit(main(["privacy", *sys.argv[1:]]))
