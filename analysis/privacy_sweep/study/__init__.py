"""The ξ study (docs/privacy.md, "Choosing ξ"): the privacy–utility trade-off of the count-noise
level ξ (equivalently γ = σ S_Δ / √(ξ² − σ²)) on a task with headroom, under the study method
of docs/studies.md, and the check of the rule of :mod:`analysis.privacy_sweep.xi_rule` on a
second task.

Per task, at the spec's fixed (ε, δ, M, T) — σ calibrated once (:func:`resolve_budget`):

1. **The rule's ξ\\*** from public configuration alone (:func:`rule_xi`), before any run.
2. **Tuning** MA-light's server learning rate under DP at ξ\\*, on the tuning seeds (held out from
   every evaluation seed), by the final test accuracy: a starting grid refined by ``lr_refine``
   around its best (at most ``lr_rounds`` rounds; :func:`asyncfl.studies.tuning.refine`).
3. **The ξ grid** on the evaluation seeds: ``ξ*·2^k`` for ``k`` in ``xi_span`` (points below
   ``xi_floor·σ`` replaced by it: :func:`coarse_grid`) and ``xi_extra``, then refined by
   ``xi_refine`` around the best mean final accuracy (a ξ with a run that did not complete is
   never that centre; at most ``xi_rounds`` rounds, each adding
   the best's two neighbours at that factor and, at an edge, one grid step beyond) — ξ is
   resolved to that factor at the optimum once both neighbours were tried.
4. **The reference** (study task, if ``reference``): naive momentum, which ignores the counts, at
   ``reference_xi_over_sigma`` (update noise at its floor; γ ≈ 0), tuned the same way.

Every run's curve goes into ``results.csv`` (one row per evaluation: :data:`COLUMNS`), from
which :mod:`analysis.privacy_sweep.study_report` computes every number of the report. Rerunning
the same command resumes: finished runs are read back and the same decisions are taken again.

Run it from the repository root::

    python -m analysis.privacy_sweep.study run analysis/privacy_sweep/xi_study.toml --out runs/xi28 --workers 1
    python -m analysis.privacy_sweep.study report runs/xi28
"""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from asyncfl.config import scenario as scenario_mod
from asyncfl.privacy.mechanism import gamma_from_xi
from asyncfl.results import Run
from asyncfl.run import outdir
from asyncfl.run.parallel import Backend, Progress, RunJob, RunOutcome, run_jobs
from asyncfl.studies.tuning import choose, refine
from analysis.privacy_sweep.plan import resolve_budget
from analysis.privacy_sweep.run import read_row
from analysis.privacy_sweep.spec import Budget, SweepPoint
from analysis.privacy_sweep.study_report import write_report
from analysis.privacy_sweep.study_spec import TaskEntry, XiStudySpec
from analysis.privacy_sweep.xi_rule import CountModel, RuleChoice, counts_mode, rule_xi

COMMAND = "python -m analysis.privacy_sweep.study"
RECORD = "xi_study.json"
KIND = outdir.register(outdir.Kind("xi-study", COMMAND, (RECORD, "results.csv", "summary.csv", "report.md", "*.png", "*.pdf"),
                                   {}, RECORD, article="an asyncfl ξ-study folder"))
#: the MA rule studied and the reference that ignores the counts (``server.rule`` names)
STUDIED, REFERENCE = "ma-light", "momentum"
COLUMNS: tuple[str, ...] = (
    "task", "role", "stage", "rule", "lr", "xi_over_sigma", "rule_xi_over_sigma", "xi", "gamma", "sigma", "epsilon_target",
    "epsilon_spent", "delta", "sampling", "claim", "clients", "buffer", "K", "noise_cohort", "staleness_bins",
    "staleness_exponent", "steps", "counts", "seed", "status", "final_accuracy", "final_loss", "bias_exact", "bias_noisy",
    "bias_momentum", "update_noise_std", "count_noise_std", "participations_max", "step", "accuracy", "loss", "wall_time",
    "run_dir",
)


def sig4(x: float) -> float:
    """``x`` to 4 significant digits: the ξ/σ of a point (its name and its value agree)."""
    return float(f"{x:.4g}")


# ----------------------------------------------------------------------------------------------
# scenarios
def base_raw(spec: XiStudySpec, task: TaskEntry) -> dict[str, Any]:
    """The task's scenario before the point's rule, learning rate, ξ and seed: the spec's
    defaults, the task's overrides, and the study's shape (FedBuff, C, K, T, evaluations, DP at
    (ε, δ, M))."""
    raw: dict[str, Any] = {"name": f"{spec.name}-{task.name}", "seed": 0}
    fixed = {
        "server.protocol": "fedbuff", "server.buffer": spec.buffer, "server.concurrency": spec.K, "server.rule": STUDIED,
        "run.steps": spec.steps, "run.eval_every": spec.eval_every, "privacy.enabled": True,
        "privacy.epsilon": spec.epsilon, "privacy.delta": spec.delta, "privacy.gamma": 1.0,  # γ: replaced per point
    }
    if spec.noise_cohort is not None:
        fixed["privacy.noise_cohort"] = spec.noise_cohort
    for key, value in {**spec.defaults, **task.overrides, **fixed}.items():
        scenario_mod.assign(raw, key, value)
    scenario_mod.drop_unowned(raw)  # a default the rule does not own (MA-full's ridge) goes
    return raw


def budget_of(spec: XiStudySpec, task: TaskEntry) -> Budget:
    """σ for the spec's (ε, δ) and the task's releases, calibrated once (:func:`resolve_budget`)."""
    return resolve_budget(scenario_mod.validate(base_raw(spec, task)))


def point_scenario(spec: XiStudySpec, task: TaskEntry, budget: Budget, rule: str, lr: float, x: float,
                   seed: int) -> scenario_mod.Scenario:
    """One run: ``rule`` at server learning rate ``lr``, ``ξ = x·σ`` with the calibrated σ
    (``privacy.noise_multiplier``: no point re-calibrates), the counts post-processing of
    docs/privacy.md §3 for that ξ/M, and ``seed``."""
    raw = base_raw(spec, task)
    privacy = raw["privacy"]
    for key in ("epsilon", "gamma", "xi", "noise_multiplier"):
        privacy.pop(key, None)
    xi = x * budget.sigma
    privacy.update(noise_multiplier=budget.sigma, xi=xi, counts=counts_mode(xi, budget.M))
    scenario_mod.apply_values(raw, [("server.rule", rule), ("server.lr", lr)])
    raw["seed"] = int(seed)
    raw["name"] = f"{spec.name}-{task.name}-{rule}-lr{lr:g}-x{x:g}-s{seed}"
    scenario_mod.drop_unowned(raw)
    return scenario_mod.validate(raw)


def run_rel(task: TaskEntry, rule: str, lr: float, x: float, seed: int) -> Path:
    """``runs/<task>/<rule>/lr<lr>/x<ξ/σ>-s<seed>``."""
    return Path("runs") / task.name / rule / f"lr{lr:g}" / f"x{x:g}-s{seed}"


def coarse_grid(rule_x: float, span: tuple[int, int], floor: float, extra: Sequence[float] = ()) -> list[float]:
    """The first ξ/σ grid: ``ξ*/σ · 2^k`` for ``k = span[0] … span[1]`` at or above ``floor``; if
    some fell below it, ``floor`` itself unless a kept point is within ×√2 of it; plus ``extra``;
    4 significant digits, ascending, each once."""
    powers = [sig4(rule_x * 2.0 ** k) for k in range(span[0], span[1] + 1)]
    kept = {x for x in powers if x >= floor}
    if len(kept) < len(powers) and not any(x < floor * math.sqrt(2.0) for x in kept):
        kept.add(sig4(floor))
    return sorted(kept | {sig4(x) for x in extra})


def count_model(spec: XiStudySpec, task: TaskEntry, budget: Budget) -> CountModel:
    """FedBuff's staleness rows at the spec's K, with the scenario's L and staleness exponent."""
    sc = scenario_mod.validate(base_raw(spec, task))
    return CountModel.fedbuff(budget.C, budget.M, spec.K, int(sc.server.max_staleness) + 1, float(sc.server.staleness_exponent))


# ----------------------------------------------------------------------------------------------
# stages
class Study:
    """Runs the stages of the module docstring into ``out`` and collects the rows."""

    def __init__(self, spec: XiStudySpec, out: Path, backend: Backend,
                 on_outcome: Callable[[RunOutcome, Progress], None] | None = None, reference: bool | None = None) -> None:
        self.spec, self.out, self.backend, self.on_outcome = spec, out, backend, on_outcome
        self.reference = spec.reference if reference is None else reference
        self.rows: list[dict[str, Any]] = []
        self.owned: outdir.OutDir | None = None

    def run(self, task: TaskEntry, stage: str, budget: Budget, rule: str, lr: float, xs: Iterable[float],
            seeds: Sequence[int], rule_x: float) -> dict[float, list[float]]:
        """Run (or read back) every ``x`` × seed; returns each x's final accuracies (NaN: not completed)."""
        plan = [(x, s, point_scenario(self.spec, task, budget, rule, lr, x, s), run_rel(task, rule, lr, x, s))
                for x in xs for s in seeds]
        rels = [str(rel) for *_, rel in plan]
        assert self.owned is not None
        self.owned.add_runs([Path(r) for r in rels])
        outcomes = run_jobs([RunJob(rel, sc, self.out / rel) for (_, _, sc, rel), rel in zip(plan, rels)], self.backend,
                            self.on_outcome)
        finals: dict[float, list[float]] = {}
        for (x, s, sc, rel), outcome in zip(plan, outcomes):
            finals.setdefault(x, []).append(self._rows(task, stage, budget, rule, lr, x, rule_x, sc, rel, outcome.status))
        return finals

    def _rows(self, task: TaskEntry, stage: str, budget: Budget, rule: str, lr: float, x: float, rule_x: float,
              sc: scenario_mod.Scenario, rel: Path, status: str) -> float:
        xi = x * budget.sigma
        r = read_row(sc, budget, SweepPoint(xi, gamma_from_xi(budget.sigma, budget.clip, xi), "xi"), self.out / rel, status)
        head = {
            "task": task.name, "role": task.role, "stage": stage, "rule": rule, "lr": lr, "xi_over_sigma": x,
            "rule_xi_over_sigma": rule_x, "xi": xi, "gamma": r.gamma, "sigma": budget.sigma,
            "epsilon_target": budget.epsilon_target, "epsilon_spent": r.epsilon_spent, "delta": budget.delta,
            "sampling": budget.sampling, "claim": budget.claim, "clients": sc.population.clients, "buffer": budget.C,
            "K": sc.server.concurrency, "noise_cohort": budget.M, "staleness_bins": int(sc.server.max_staleness) + 1,
            "staleness_exponent": float(sc.server.staleness_exponent), "steps": sc.run.steps, "counts": sc.privacy.counts,
            "seed": sc.seed, "status": r.status, "final_accuracy": r.final_accuracy, "final_loss": r.final_loss,
            "bias_exact": r.bias_exact, "bias_noisy": r.bias_noisy, "bias_momentum": r.bias_momentum,
            "update_noise_std": r.update_noise_std, "count_noise_std": r.count_noise_std,
            "participations_max": r.participations_max, "run_dir": str(rel),
        }
        evals = Run(self.out / rel).evaluations()
        for e in evals or [{"step": math.nan, "accuracy": math.nan, "loss": math.nan, "wall_time": math.nan}]:
            self.rows.append({**head, "step": e.get("step"), "accuracy": e.get("accuracy"), "loss": e.get("loss"),
                              "wall_time": e.get("wall_time")})
        return r.final_accuracy if r.status == "completed" else math.nan

    def tune(self, task: TaskEntry, budget: Budget, rule: str, x: float, rule_x: float) -> float:
        """The learning rate of ``rule`` at ``ξ = x·σ``, chosen on the tuning seeds by final
        accuracy, the grid refined by ``lr_refine`` around its best (module docstring)."""
        grid = list(task.lr_grid)
        scores: dict[float, list[float]] = {}
        for round_ in range(self.spec.lr_rounds + 1):
            todo = [lr for lr in grid if lr not in scores]
            for lr in todo:
                scores.update({lr: self.run(task, f"tune-{rule}", budget, rule, lr, [x], self.spec.tuning_seeds, rule_x)[x]})
            best = choose(scores, smaller_is_better=False)
            new = [sig4(v) for v in refine(grid, best.lr, self.spec.lr_refine)]
            if not new or round_ == self.spec.lr_rounds:
                break
            grid = sorted(set(grid) | set(new))
        return best.lr

    def xi_grid(self, task: TaskEntry, budget: Budget, lr: float, rule_x: float) -> None:
        """Stage 3: the coarse grid around ξ\\*, then its refinement around the best."""
        grid = coarse_grid(rule_x, self.spec.xi_span, self.spec.xi_floor, self.spec.xi_extra)
        finals: dict[float, list[float]] = {}
        for round_ in range(self.spec.xi_rounds + 1):
            todo = [x for x in grid if x not in finals]
            finals.update(self.run(task, "xi", budget, STUDIED, lr, todo, task.eval_seeds, rule_x))
            best = choose(finals, smaller_is_better=False)
            new = [sig4(v) for v in refine(grid, best.lr, self.spec.xi_refine) if v > self.spec.xi_floor * 0.999]
            new = [v for v in new if v not in finals]
            if not new or round_ == self.spec.xi_rounds:
                break
            grid = sorted(set(grid) | set(new))

    def all(self, tasks: Sequence[TaskEntry]) -> list[dict[str, Any]]:
        for task in tasks:
            budget = budget_of(self.spec, task)
            choice: RuleChoice = rule_xi(budget.sigma, count_model(self.spec, task, budget))
            rule_x = sig4(choice.xi_over_sigma)
            print(f"{task.name}: σ = {budget.sigma:.4g}, rule ξ* = {rule_x:g}σ = {rule_x * budget.sigma:.4g} "
                  f"(ξ*/M = {rule_x * budget.sigma / budget.M:.3g})", flush=True)
            lr = self.tune(task, budget, STUDIED, rule_x, rule_x)
            print(f"{task.name}: {STUDIED} server lr {lr:g}", flush=True)
            self.xi_grid(task, budget, lr, rule_x)
        if self.reference:
            task = self.spec.ordered_tasks()[0]
            budget = budget_of(self.spec, task)
            rule_x = sig4(rule_xi(budget.sigma, count_model(self.spec, task, budget)).xi_over_sigma)
            x = sig4(self.spec.reference_xi_over_sigma)
            lr = self.tune(task, budget, REFERENCE, x, rule_x)
            print(f"{task.name}: reference {REFERENCE} server lr {lr:g}", flush=True)
            self.run(task, "reference", budget, REFERENCE, lr, [x], task.eval_seeds, rule_x)
        return self.rows


def write_results(rows: Sequence[dict[str, Any]], path: Path) -> Path:
    """``results.csv``: :data:`COLUMNS`, floats to 7 significant digits."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(COLUMNS), lineterminator="\n")
        writer.writeheader()
        for row in rows:
            writer.writerow({k: ("" if row[k] is None else (f"{row[k]:.7g}" if isinstance(row[k], float) else row[k]))
                             for k in COLUMNS})
    return path


def run_study(spec: XiStudySpec, out: str | Path, backend: Backend, on_outcome: Callable[[RunOutcome, Progress], None] | None = None,
              reference: bool | None = None, overwrite: bool = False, command: str = COMMAND) -> list[dict[str, Any]]:
    """Claim ``out``, run every stage (resuming what is there), write ``results.csv`` and the
    report (:func:`analysis.privacy_sweep.study_report.write_report`)."""
    out = Path(out)
    record = spec.model_dump(mode="json")
    owned = outdir.claim(out, KIND.name, command, outdir.digest(record), overwrite=overwrite)
    try:
        (out / RECORD).write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        study = Study(spec, out, backend, on_outcome, reference)
        study.owned = owned
        try:
            rows = study.all(spec.ordered_tasks())
        finally:  # what ran is kept even when a later stage is interrupted
            if study.rows:
                write_results(study.rows, out / "results.csv")
        write_report(out)
    finally:
        owned.release()
    return rows
