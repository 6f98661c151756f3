"""Running the privacy–utility sweep (docs/privacy.md, "What a run reports"): one run per
(seed, ξ, rule) with σ resolved once, run through the parallel runner (docs/architecture.md §9),
each run's row read back from its run directory (docs/run-directory.md)."""

from __future__ import annotations

import math
import shutil
import tomllib
from pathlib import Path
from typing import Any, Callable, Sequence

from asyncfl.config import scenario as scenario_mod
import tomli_w

from asyncfl.run.parallel import Backend, InProcess, Progress, RunJob, RunOutcome, run_jobs
from asyncfl.errors import RunDirError
from asyncfl.run.rundir import atomic_write, read_json
from asyncfl.studies.privacy_sweep.outputs import write_outputs
from asyncfl.studies.privacy_sweep.plan import count_noise_std, point_scenario, resolve_budget, sweep_points, update_noise_std
from asyncfl.studies.privacy_sweep.spec import BIAS_KEY, RULES, Budget, SweepError, SweepPoint, SweepRow
from asyncfl.studies.privacy_sweep.tables import write_csv


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = read_json(path)
    except (OSError, RunDirError):
        return {}
    return data if isinstance(data, dict) else {}


def _finite(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def read_row(scenario: scenario_mod.Scenario, budget: Budget, point: SweepPoint, run_dir: Path, status: str) -> SweepRow:
    """One point's row, read back from its run directory: final test accuracy and loss
    (``summary.json``), ε spent (the accountant's, for σ), the sampling assumption and the
    participations per client (``summary.json``'s ``privacy``; docs/privacy.md §10), the rule's
    bias on the exact ``W`` and on the noisy ``Ŵ`` (``bias.json``; docs/server-rules.md), and the
    analytic noise levels.
    A run that diverged is kept with ``status = 'diverged'``: a sweep point where privacy noise
    broke training is a result, not an error."""
    summary = _read_json(run_dir / "summary.json")
    bias = _read_json(run_dir / "bias.json")
    rule = scenario.server.rule
    key = BIAS_KEY[rule]
    final = summary.get("final", {}) or {}
    priv = summary.get("privacy", {}) or {}
    return SweepRow(
        xi=point.xi, xi_over_C=point.xi / budget.C, gamma=point.gamma, sigma=_finite(priv.get("sigma", budget.sigma)),
        epsilon_target=budget.epsilon_target, epsilon_spent=_finite(priv.get("epsilon_spent")), delta=budget.delta,
        sampling=budget.sampling, claim=budget.claim, sampling_rate=budget.q, max_participations=budget.max_participations,
        noise_cohort=budget.M,
        rule=rule, seed=scenario.seed, status=str(summary.get("status", status)),
        steps=int(summary.get("steps", 0) or 0),
        participations_max=_finite(priv.get("participations_max")), participations_mean=_finite(priv.get("participations_mean")),
        clients_at_cap=None if priv.get("clients_at_cap") is None else _finite(priv.get("clients_at_cap")),
        final_accuracy=_finite(final.get("accuracy")), final_loss=_finite(final.get("loss")),
        bias_exact=_finite(bias.get(key)), bias_noisy=_finite((bias.get("noisy_w") or {}).get(key)),
        bias_momentum=_finite(bias.get("momentum")),
        update_noise_std=update_noise_std(budget.sigma, budget.clip, point.xi, budget.M),
        count_noise_std=count_noise_std(point.xi, budget.M),
        run_dir=str(run_dir),
    )


RECORD = "privacy_sweep.toml"


def record_command(out: Path, scenario: scenario_mod.Scenario, xis: Sequence[float], gammas: Sequence[float],
                   rules: Sequence[str], seeds: Sequence[int], overwrite: bool) -> None:
    """Record what the sweep in ``out`` is (the resolved scenario, ξ or γ, rules, seeds), so
    that rerunning the same command resumes it. Another sweep in ``out`` is refused, or with
    ``overwrite`` its runs are removed first."""
    record = {"scenario": scenario.to_toml(), "xi": [float(x) for x in xis], "gamma": [float(g) for g in gammas],
              "rules": list(rules), "seeds": [int(x) for x in seeds]}
    path = out / RECORD
    if path.is_file():
        try:
            old = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
            old = None
        if old != record:
            if not overwrite:
                raise SweepError(f"--out {out}: holds another privacy sweep ({RECORD}); rerun its command to resume it, "
                                 "choose another --out, or pass --overwrite to replace it")
            shutil.rmtree(out / "runs", ignore_errors=True)
    elif (out / "sweep.csv").exists() and not overwrite:
        raise SweepError(f"--out {out}: already holds a sweep (sweep.csv); pass --overwrite to replace it")
    out.mkdir(parents=True, exist_ok=True)
    atomic_write(path, lambda p: p.write_text(tomli_w.dumps(record), encoding="utf-8"))


def run_sweep(
    scenario: scenario_mod.Scenario,
    out: str | Path,
    xis: Sequence[float] = (),
    gammas: Sequence[float] = (),
    rules: Sequence[str] = RULES,
    seeds: Sequence[int] | None = None,
    backend: Backend | None = None,
    on_outcome: Callable[[RunOutcome, Progress], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
    budget: Budget | None = None,
    fmt: str = "png",
) -> tuple[Budget, list[SweepRow]]:
    """Run every (seed, ξ, rule) of the sweep into ``out/runs/…`` through the parallel runner
    (:mod:`asyncfl.run.parallel`; finished runs are read back, interrupted ones resumed) and
    write the outputs into ``out``. σ is resolved once (:func:`resolve_budget`)."""
    budget = budget or resolve_budget(scenario)
    bad_rules = [r for r in rules if r not in BIAS_KEY]
    if bad_rules or not rules:
        raise SweepError(f"--rules {' '.join(bad_rules)}: each rule must be one of {', '.join(RULES)}")
    points = sweep_points(budget, xis, gammas)
    seeds = list(seeds) if seeds else [scenario.seed]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    plan = [(point, point_scenario(scenario, budget, point, rule, int(seed)), Path("runs") / f"xi{point.xi:.4g}-{rule}-s{seed}")
            for seed in seeds for point in points for rule in rules]
    backend = backend or InProcess()
    if on_start is not None:
        on_start(len(plan), backend.slots)
    outcomes = run_jobs([RunJob(str(rel), sc, out / rel) for _, sc, rel in plan], backend, on_outcome)
    rows = []
    for (point, sc, rel), outcome in zip(plan, outcomes):
        row = read_row(sc, budget, point, out / rel, outcome.status)
        row.run_dir = str(rel)
        rows.append(row)
    write_csv(rows, out / "sweep.csv")
    write_outputs(rows, budget, out, scenario, fmt)
    return budget, rows
