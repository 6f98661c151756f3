"""Running the privacy–utility sweep (docs/privacy.md, "What a run reports"): one run per
(seed, ξ, rule) with σ resolved once, run through the parallel runner (docs/architecture.md §9),
each run's row read back from its run directory (docs/run-directory.md)."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Any, Callable, Sequence

from asyncfl.config import scenario as scenario_mod
from asyncfl.config.files import MAX_JSON_BYTES, read_text_limited
import tomli_w

from asyncfl.run import outdir
from asyncfl.run.parallel import Backend, InProcess, Progress, RunJob, RunOutcome, run_jobs
from asyncfl.errors import RunDirError
from asyncfl.results import Run
from asyncfl.run.rundir import atomic_write
from analysis.privacy_sweep.outputs import write_outputs
from analysis.privacy_sweep.plan import (count_noise_std, point_scenario, resolve_budget, run_name, sweep_points,
                                                update_noise_std)
from analysis.privacy_sweep.spec import BIAS_KEY, RULES, Budget, SweepError, SweepPoint, SweepRow


def _summary(run: Run) -> dict[str, Any]:
    """The run's ``summary.json``; ``{}`` when it is missing or damaged (the row says so by its status)."""
    try:
        return run.summary
    except (OSError, RunDirError):
        return {}


def _bias(run: Run) -> dict[str, Any]:
    """The run's ``bias.json``; ``{}`` when it has none or it is damaged."""
    try:
        return run.bias or {}
    except (OSError, RunDirError):
        return {}


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
    run = Run(run_dir)
    summary, bias = _summary(run), _bias(run)
    rule = scenario.server.rule
    key = BIAS_KEY[rule]
    final = summary.get("final", {}) or {}
    priv = summary.get("privacy", {}) or {}
    return SweepRow(
        xi=point.xi, xi_over_C=point.xi / budget.C, gamma=point.gamma, sigma=_finite(priv.get("sigma", budget.sigma)),
        epsilon_target=budget.epsilon_target, epsilon_spent=_finite(priv.get("epsilon_spent")), delta=budget.delta,
        sampling=budget.sampling, claim=budget.claim, sampling_rate=budget.q, max_participations=budget.max_participations,
        noise_cohort=budget.M,
        rule=rule, seed=scenario.seed, status=status,
        steps=int(summary.get("steps", 0) or 0),
        participations_max=_finite(priv.get("participations_max")), participations_mean=_finite(priv.get("participations_mean")),
        clients_at_cap=None if priv.get("clients_at_cap") is None else _finite(priv.get("clients_at_cap")),
        final_accuracy=_finite(final.get("accuracy")), final_loss=_finite(final.get("loss")),
        bias_exact=_finite(bias.get(key)), bias_noisy=_finite((bias.get("noisy_w") or {}).get(key)),
        bias_momentum=_finite(bias.get("momentum")),
        update_noise_std=update_noise_std(budget.sigma, budget.clip, point.xi, budget.M),
        count_noise_std=count_noise_std(point.xi, budget.M),
        run_dir=str(run_dir), initial_accuracy=_initial_accuracy(run),
    )


def _initial_accuracy(run: Run) -> float:
    """The untrained model's test accuracy: ``metrics.csv``'s step-0 row (NaN without one)."""
    try:
        rows = run.evaluations()
    except (OSError, RunDirError):
        return math.nan
    return _finite(rows[0].get("accuracy")) if rows and rows[0].get("step") == 0 else math.nan


RECORD = "privacy_sweep.toml"
#: how the sweep is run (recorded in the folders it makes, named in its messages)
COMMAND = "python -m analysis.privacy_sweep"
#: the sweep's output folder (docs/run-directory.md §13): what it writes, and its record file
KIND = outdir.register(outdir.Kind("privacy", COMMAND, (RECORD, "sweep.csv", "sweep.md", "sweep.png", "sweep.pdf", "sweep.svg"), {},
                                   RECORD, article="an asyncfl privacy sweep folder"))


def sweep_record(scenario: scenario_mod.Scenario, xis: Sequence[float], gammas: Sequence[float],
                 rules: Sequence[str], seeds: Sequence[int]) -> dict[str, Any]:
    """What the sweep is (the resolved scenario, ξ or γ, rules, seeds): ``privacy_sweep.toml``."""
    return {"scenario": scenario.to_toml(), "xi": [float(x) for x in xis], "gamma": [float(g) for g in gammas],
            "rules": list(rules), "seeds": [int(x) for x in seeds]}


def _read_record(out: Path) -> dict[str, Any] | None:
    try:
        # a regular file, bounded (a FIFO in its place is refused, never waited on); 16 MiB: it holds the resolved scenario
        return tomllib.loads(read_text_limited(out / RECORD, MAX_JSON_BYTES, RunDirError))
    except (RunDirError, tomllib.TOMLDecodeError, RecursionError):
        return None


def claim_out(out: Path, record: dict[str, Any], overwrite: bool = False, command: str = COMMAND) -> outdir.OutDir:
    """Take ``out`` for the sweep ``record`` (:func:`asyncfl.run.outdir.claim`): rerunning the same
    sweep resumes it; another sweep there is refused, or with ``overwrite`` only its own files
    are removed; any other folder is refused. Records the command."""
    def accept(marker: dict[str, Any] | None) -> bool:  # a sweep of before the ownership record
        return _read_record(out) == record

    owned = outdir.claim(out, KIND.name, command, outdir.digest(record), overwrite=overwrite, accept=accept)
    try:
        atomic_write(out / RECORD, lambda p: p.write_text(tomli_w.dumps(record), encoding="utf-8"))
    except BaseException:
        owned.release()
        raise
    return owned


def check_choices(rules: Sequence[str], seeds: Sequence[int]) -> None:
    """Each rule and seed at most once (a repeated one would be the same run twice)."""
    bad_rules = [r for r in rules if r not in BIAS_KEY]
    if bad_rules or not rules:
        raise SweepError(f"--rules {' '.join(bad_rules)}: each rule must be one of {', '.join(RULES)}")
    if len(set(rules)) != len(rules):
        raise SweepError(f"--rules {' '.join(rules)}: a rule is given twice; give each once")
    if len(set(seeds)) != len(seeds):
        raise SweepError(f"--seeds {' '.join(map(str, seeds))}: a seed is given twice; give each once")


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
    overwrite: bool = False,
    command: str = COMMAND,
) -> tuple[Budget, list[SweepRow]]:
    """Run every (seed, ξ, rule) of the sweep into ``out/runs/…`` through the parallel runner
    (:mod:`asyncfl.run.parallel`; finished runs are read back, interrupted ones resumed) and
    write the outputs into ``out``, which it claims first (:func:`claim_out`). σ is resolved
    once (:func:`resolve_budget`). Each row's ``status`` says how its run ended."""
    budget = budget or resolve_budget(scenario)
    seeds = [int(s) for s in seeds] if seeds else [scenario.seed]
    check_choices(rules, seeds)
    points = sweep_points(budget, xis, gammas)
    out = Path(out)
    plan = [(point, point_scenario(scenario, budget, point, rule, seed), Path("runs") / run_name(point, rule, seed))
            for seed in seeds for point in points for rule in rules]
    owned = claim_out(out, sweep_record(scenario, xis, gammas, rules, seeds), overwrite, command)
    try:
        rels = [rel for _, _, rel in plan]
        owned.check_runs(rels)
        owned.add_runs(rels)
        backend = backend or InProcess()
        if on_start is not None:
            on_start(len(plan), backend.slots)
        outcomes = run_jobs([RunJob(str(rel), sc, out / rel) for _, sc, rel in plan], backend, on_outcome)
        rows = []
        for (point, sc, rel), outcome in zip(plan, outcomes):
            row = read_row(sc, budget, point, out / rel, outcome.status)
            row.run_dir = str(rel)
            row.message = "" if row.status == "completed" else " ".join((outcome.message or str(
                _summary(Run(out / rel)).get("error", ""))).split())
            rows.append(row)
        write_outputs(rows, budget, out, scenario, fmt)
    finally:
        owned.release()
    return budget, rows
