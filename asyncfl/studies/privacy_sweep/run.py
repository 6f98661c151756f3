"""Running the privacy–utility sweep (docs/privacy.md, "What a run reports"): one run per
(seed, ξ, rule) with σ resolved once, each run's row read back from its run directory
(docs/run-directory.md), the outputs rewritten as the sweep goes."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any, Callable, Sequence

from asyncfl.config import scenario as scenario_mod
from asyncfl.errors import NumericalFault
from asyncfl.run import runner
from asyncfl.sim.engine import Simulation
from asyncfl.studies.privacy_sweep.outputs import write_outputs
from asyncfl.studies.privacy_sweep.plan import count_noise_std, point_scenario, resolve_budget, sweep_points, update_noise_std
from asyncfl.studies.privacy_sweep.spec import BIAS_KEY, RULES, Budget, SweepError, SweepPoint, SweepRow
from asyncfl.studies.privacy_sweep.tables import write_csv
from asyncfl.tasks import build_task


def _read_json(path: Path) -> dict[str, Any]:
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
    (``summary.json``), ε spent (the accountant's, for σ), the sampling assumption and the
    participations per client (``summary.json``'s ``privacy``; docs/privacy.md §10), the rule's
    bias on the exact ``W`` and on the noisy ``Ŵ`` (``bias.json``; docs/server-rules.md), and the
    analytic noise levels.

    A run that diverges (:class:`NumericalFault`) is kept with ``status = 'diverged'`` — a sweep
    point where privacy noise broke training is a result, not an error."""
    status = "completed"
    sim = Simulation(scenario, task) if task is not None else None
    try:
        asyncio.run(runner.run_to_dir(scenario, run_dir, overwrite=True, on_event=on_event, simulation=sim))
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
        sampling=budget.sampling, claim=budget.claim, sampling_rate=budget.q, max_participations=budget.max_participations,
        noise_cohort=budget.M,
        rule=rule, seed=scenario.seed, status=summary.get("status", status) if status == "completed" else status,
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
