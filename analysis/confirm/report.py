"""``report.md`` of the confirmatory study, from the design folders' CSVs alone (docs/confirm.md §3).

For every claim of the plan: its Holm family (every primary comparison the plan names for it,
run or not), each comparison's paired t-test and effect with an interval at level ``1 − α/m``
and that interval's coverage measured by simulation (:mod:`analysis.confirm.coverage`), the
paired bootstrap beside it, the Holm-adjusted p-value and the verdict by the plan's rules; a
claim decided by tuning widths (claim 3) gets its width table from the designs' ``tuning.csv``
(:mod:`analysis.confirm.widths`, docs/confirm.md §3.2); then the secondary (exploratory) comparisons; then the tuning each design chose and the privacy
each DP cell spent. A design whose folder was started under another version of its section of the
plan (``confirm.json``) is reported, but every row of it is marked exploratory. A run stopped at
its target (``stopped_at_target = 1``, docs/studies.md §2.1) counts with its crossing; a final
accuracy or ε of a cell holding one is "not measured" (a planned ``final_accuracy`` comparison on
it enters its family with ``p = 1``, as one not run).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from scipy import optimize

from asyncfl.privacy.per_client import gdp_delta, gdp_epsilon
from asyncfl.studies.multiplicity import holm
from asyncfl.studies.survival import paired_rmst_ratio
from analysis.confirm.coverage import REPLICATES, Coverage, accuracy_coverage, time_coverage
from analysis.confirm.intervals import accuracy_t, log_time_t
from analysis.confirm.plan import Design, LoadedPlan, PlannedComparison, PlannedWidth
from analysis.confirm.record import read_record
from analysis.confirm.widths import Width, beta_settings, lr_settings, tuned_variant, width, width_verdict
from analysis.ma_review.tables import crossing_measured, read_csv, stopped_early

Rows = list[dict[str, Any]]

#: the paper's ranges (plan.toml, "Verdicts")
PAPER_SPEED = (1.15, 4.0)
PAPER_UTILITY = (0.03, 0.20)
#: the deployment the accountant describes (plan.toml: noise cohort M = 1000, buffer C = 100, δ = 1e-6):
#: each of its clients contributes M/C times as often as in the simulation
DEPLOYMENT_FACTOR = 1000 / 100
DELTA = 1e-6
#: a base whose mean final accuracy is below this has no relative gain (chance 0.1 + 0.1, plan.toml)
NEAR_CHANCE = 0.2


class Outcome(NamedTuple):
    """One planned comparison, computed: ``effect`` (speed-up or mean difference) with its t
    interval, the bootstrap interval beside it, the raw two-sided p, how many seeds paired, how
    many of them the base and the rule reached the target on (time metric), the base's mean, and
    the t interval's measured coverage (``None`` when not run)."""

    comparison: PlannedComparison
    design: str
    status: str           # "confirmatory", "exploratory" or "not run"
    n: int
    effect: float
    low: float
    high: float
    boot_low: float
    boot_high: float
    p: float
    base_reached: int
    rule_reached: int
    base_mean: float
    rule_mean: float
    coverage: Coverage | None = None
    measured: bool = True  # False: a final-accuracy comparison on runs stopped at their target
    base_task: str = ""  # the base's task when the plan tunes it over variants (``base_tasks``)


def _eval_rows(folder: Path) -> Rows:
    path = folder / "results.csv"
    return [r for r in read_csv(path) if r["status"] != "missing"] if path.is_file() else []


def _tuning_rows(folder: Path) -> Rows:
    path = folder / "tuning.csv"
    return read_csv(path) if path.is_file() else []


def _cell(rows: Rows, c: PlannedComparison, method: str, task: str | None = None) -> dict[int, dict[str, Any]]:
    key = (task or c.task, c.privacy, c.K, method)
    return {r["seed"]: r for r in rows if (r["task"], r["privacy"], r["K"], r["method"]) == key}


def _restricted(r: dict[str, Any]) -> tuple[float, bool]:
    reached = bool(r["reached"]) and crossing_measured(r)
    h = float(r["horizon"])
    return (min(float(r["cross_point"]), h) if reached else h), reached


def compute(rows: Rows, c: PlannedComparison, design: str, status: str, level: float, resamples: int, seed: int,
            replicates: int = REPLICATES, tuning: Rows | None = None) -> Outcome:
    """The comparison ``c`` on the rows of its design (module docstring; metrics: plan.toml); the
    t interval's coverage measured on ``replicates`` simulated studies seeded by ``seed``. A base
    tuned over variants (``c.base_tasks``) is the variant its design's tuning rows chose
    (:func:`analysis.confirm.widths.tuned_variant`); ``base_task`` names it."""
    nan = math.nan
    base_task = c.task
    if c.base_tasks:
        base_task = tuned_variant(tuning or [], c.base_tasks, c.privacy, c.K, c.base) or ""
        if not base_task:
            return Outcome(c, design, "not run", 0, nan, nan, nan, nan, nan, 1.0, 0, 0, nan, nan)
    base, rule = _cell(rows, c, c.base, base_task), _cell(rows, c, c.rule)
    seeds = sorted(set(base) & set(rule))
    if not seeds:
        return Outcome(c, design, "not run", 0, nan, nan, nan, nan, nan, 1.0, 0, 0, nan, nan)
    tag = base_task if c.base_tasks else ""
    b = [base[s] for s in seeds]
    u = [rule[s] for s in seeds]
    rng = np.random.default_rng(seed)
    if c.metric == "final_accuracy" and any(stopped_early(r) for r in b + u):
        return Outcome(c, design, status, len(seeds), nan, nan, nan, nan, nan, 1.0, 0, 0, nan, nan, measured=False,
                       base_task=tag)
    if c.metric == "final_accuracy":
        fb = np.array([r["final_accuracy"] if r["status"] == "completed" else nan for r in b], dtype=np.float64)
        fu = np.array([r["final_accuracy"] if r["status"] == "completed" else nan for r in u], dtype=np.float64)
        d = fu - fb
        test = accuracy_t(fb, fu, level)
        ok = d[np.isfinite(d)]
        lo, hi = _bootstrap_mean(ok, level, resamples, rng)
        return Outcome(c, design, status, test.n, test.mean, test.low, test.high, lo, hi, _p(test.p, ok), 0, 0,
                       float(np.nanmean(fb)), float(np.nanmean(fu)), accuracy_coverage(fb, fu, level, replicates, seed),
                       base_task=tag)
    bt, bd = map(np.array, zip(*(_restricted(r) for r in b)))
    rt, rd = map(np.array, zip(*(_restricted(r) for r in u)))
    d = np.log(bt) - np.log(rt)
    test = log_time_t(bt, rt, level)
    h = float(b[0]["horizon"])
    boot = paired_rmst_ratio(bt, bd.astype(bool), rt, rd.astype(bool), h, resamples=resamples, seed=seed, confidence=level)
    return Outcome(c, design, status, test.n, math.exp(test.mean), _exp(test.low), _exp(test.high), boot.low, boot.high,
                   _p(test.p, d), int(bd.sum()), int(rd.sum()), float(np.mean(bt)), float(np.mean(rt)),
                   time_coverage(bt, bd.astype(bool), rt, rd.astype(bool), h, level, replicates, seed), base_task=tag)


def _p(p: float, d: np.ndarray) -> float:
    """The test's p; where every difference is the same (no variance) there is nothing to test: 1
    if they are all 0 (e.g. both sides censored at the horizon on every seed), else NaN."""
    if math.isfinite(p):
        return p
    return 1.0 if d.size and np.all(d == 0) else math.nan


def _exp(x: float) -> float:
    return math.exp(x) if math.isfinite(x) else math.nan


def _bootstrap_mean(d: np.ndarray, level: float, resamples: int, rng: np.random.Generator) -> tuple[float, float]:
    """Percentile interval of the mean of ``d`` over ``resamples`` resamplings of the seeds."""
    if d.size < 2 or np.all(d == d[0]):
        return math.nan, math.nan
    idx = rng.integers(0, d.size, size=(resamples, d.size))
    means = d[idx].mean(axis=1)
    a = (1 - level) / 2
    return float(np.quantile(means, a)), float(np.quantile(means, 1 - a))


def verdict(o: Outcome, p_holm: float, alpha: float) -> str:
    """The plan's verdict words for one comparison (plan.toml, "Verdicts")."""
    if o.status == "not run":
        return "not tested"
    if not o.measured:
        return "not measured (runs stopped at their target)"
    if not math.isfinite(o.effect) or not math.isfinite(p_holm):
        return "not estimable"
    significant = p_holm <= alpha
    if o.comparison.metric == "log_time":
        if significant and o.effect > 1:
            bound = o.base_reached < o.n / 2
            if PAPER_SPEED[0] <= o.effect <= PAPER_SPEED[1]:
                return "reproduced (a lower bound: the base mostly unreached)" if bound else "reproduced"
            return "holds, outside the paper's range" + (" (a lower bound)" if bound else "")
        if significant and o.effect < 1:
            return "reversed"
        return "not resolved"
    if significant and o.effect > 0:
        if o.base_mean < NEAR_CHANCE:
            return "holds (relative gain not estimable: the base is near chance)"
        rel = o.effect / o.base_mean
        return "reproduced" if PAPER_UTILITY[0] <= rel <= PAPER_UTILITY[1] else "holds, outside the paper's range"
    if significant and o.effect < 0:
        return "reversed"
    return "not resolved"


def _interval(low: float, high: float, fmt: str) -> str:
    if not (math.isfinite(low) and math.isfinite(high)) or low == high:
        return "not estimable"
    return f"[{low:{fmt}}, {high:{fmt}}]"


def _effect_text(o: Outcome) -> str:
    if o.status == "not run":
        return "—"
    if not o.measured:
        return "not measured"
    if o.comparison.metric == "log_time":
        bound = "≥ " if o.base_reached < o.n / 2 and o.effect > 1 else ""
        return f"{bound}{o.effect:.2f}× {_interval(o.low, o.high, '.2f')}"
    rel = f", {o.effect / o.base_mean:+.1%} of the base" if o.base_mean >= NEAR_CHANCE else ", relative: not estimable"
    return f"{o.effect:+.3f} {_interval(o.low, o.high, '+.3f')}{rel}"


def _row(o: Outcome, p_holm: float, alpha: float) -> str:
    c = o.comparison
    reached = f"{o.base_reached}/{o.n} · {o.rule_reached}/{o.n}" if c.metric == "log_time" and o.n else "—"
    boot = _interval(o.boot_low, o.boot_high, ".2f" if c.metric == "log_time" else "+.3f") if o.n and o.measured else "—"
    p = f"{o.p:.3g}" if math.isfinite(o.p) and o.n and o.measured else "—"
    ph = f"{p_holm:.3g}" if o.n else "1 (not run)"
    base = f"{c.base} (tuned over {', '.join(c.base_tasks)}: {o.base_task or 'none chosen yet'})" if c.base_tasks else c.base
    return (f"| {o.design} | {c.rule} vs {base} | {c.task}, {c.privacy}, K = {c.K} | {c.metric} | {o.n} | {reached} | "
            f"{_effect_text(o)} | {_coverage_text(o)} | {boot} | {p} | {ph} | {verdict(o, p_holm, alpha)} | {o.status} |")


def _coverage_text(o: Outcome) -> str:
    """The measured coverage of the interval printed in the effect column; "—" where no interval is printed."""
    if o.coverage is None or not (math.isfinite(o.low) and math.isfinite(o.high)) or o.low == o.high:
        return "—"
    return o.coverage.text()


HEADER = ("| design | comparison | cell | metric | seeds | reached (base · rule) | effect [simultaneous interval] | "
          "coverage (measured) | bootstrap | p | Holm p | verdict | status |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|")

#: the report's sentence on the coverage column (docs/confirm.md §3.1)
COVERAGE_NOTE = (f"Coverage (measured): beside each interval, the share of {REPLICATES} replicate studies, simulated from a model "
                 f"fitted to that comparison's own seeds, whose interval — computed by the report's own procedure — contains the "
                 f"model's true value (a parametric simulation, not a guarantee; Monte Carlo SE ≤ 0.01). `log_time`: per arm a "
                 f"log-normal crossing time fitted with the unreached seeds right-censored at the horizon, the arms correlated "
                 f"as their log times over the seeds both reached (0 where fewer than 3 did), the estimand the expected "
                 f"restricted log-time difference; `final_accuracy`: a bivariate normal with the seeds' means, SDs and "
                 f"correlation (the t interval is exact there, so this checks the simulation only). ⚠ marks a coverage more "
                 f"than 2 Monte Carlo SEs below the nominal level, with each arm's unreached share: under heavy censoring the "
                 f"interval covers less than its label says. The bootstrap intervals are not measured (B × 10 000 resamples "
                 f"per comparison is too slow for the report). docs/confirm.md §3.1.")


def design_status(root: Path, loaded: LoadedPlan, design: Design) -> str:
    """``confirmatory`` when the design's folder was started under its digest now, ``exploratory``
    when under another, ``not run`` without a folder or a record."""
    record = read_record(root / design.id) if (root / design.id).is_dir() else None
    if record is None:
        return "not run"
    same = record["design_digest"] == loaded.design_digest(design.id) and not record.get("exploratory")
    return "confirmatory" if same else "exploratory"


def build_report(root: Path, loaded: LoadedPlan) -> tuple[str, dict[str, list[tuple[Outcome, float]]]]:
    """The report's text and, per claim, each outcome with its Holm-adjusted p."""
    plan = loaded.plan
    status = {d.id: design_status(root, loaded, d) for d in plan.designs}
    rows = {d.id: _eval_rows(root / d.id) for d in plan.designs}
    lines = [f"# Confirmatory study: report", "",
             f"Plan `analysis/confirm/plan.toml`, revision {plan.revision}, digest `{loaded.plan_digest()}`. "
             f"α = {plan.alpha}; Holm within each claim over the plan's whole family (a comparison not run enters with p = 1); "
             f"intervals at 1 − α/m (simultaneous). Generated from the design folders' CSVs alone "
             f"(`python -m analysis.confirm report DIR`).", "", COVERAGE_NOTE, "",
             "| design | title | cost (core-min) | status | evaluation runs |", "|---|---|---|---|---|"]
    for d in plan.designs:
        lines.append(f"| {d.id} | {d.title} | {d.cost:g} | {status[d.id]} | {len(rows[d.id])} |")
    tuning = {d.id: _tuning_rows(root / d.id) for d in plan.designs}
    out: dict[str, list[tuple[Outcome, float]]] = {}
    for claim in plan.claims:
        family = plan.family(claim.id)
        lines += ["", f"## Claim {claim.id}: {claim.statement}", ""]
        widths = width_outcomes(root, loaded, claim.id, status, tuning)
        if widths:
            lines += width_lines(widths)
        if not family:
            if not widths:
                lines.append("No primary comparison planned: **not tested** by this study.")
            continue
        m = len(family)
        level = 1 - plan.alpha / m
        outcomes = [compute(rows[d.id], c, d.id, status[d.id], level, plan.bootstrap_resamples, plan.bootstrap_seed,
                            tuning=tuning[d.id])
                    for d, c in family]
        # an exploratory design's rows are reported but are not tests of the plan: p = 1 in the family
        adjusted = holm([o.p if o.status == "confirmatory" else 1.0 for o in outcomes])
        out[claim.id] = list(zip(outcomes, adjusted))
        lines += [f"Family: {m} planned comparison(s); intervals at {level:.4g}.", "", HEADER]
        lines += [_row(o, ph, plan.alpha) for o, ph in zip(outcomes, adjusted)]
        lines += ["", f"**Verdict:** {claim_verdict(out[claim.id], plan.alpha)}"]
    secondary = [(d, c) for d in plan.designs for c in d.secondary]
    if secondary:
        lines += ["", "## Secondary comparisons (exploratory: no multiplicity adjustment, 95 % intervals)", "", HEADER]
        for d, c in secondary:
            st = status[d.id]
            o = compute(rows[d.id], c, d.id, "exploratory" if st != "not run" else st, 0.95, plan.bootstrap_resamples,
                        plan.bootstrap_seed, tuning=tuning[d.id])
            lines.append(_row(o, o.p if math.isfinite(o.p) else 1.0, plan.alpha))
    lines += ["", "## Cells", "", "| design | cell | method | lr | seeds | reached | mean final accuracy | ε (max over seeds) | "
              "busiest client's ε (max): simulated · deployment (k × M/C) |", "|---|---|---|---|---|---|---|---|---|"]
    for d in plan.designs:
        by: dict[tuple, Rows] = {}
        for r in rows[d.id]:
            by.setdefault((r["task"], r["privacy"], r["K"], r["method"]), []).append(r)
        for (task, priv, K, method), rs in sorted(by.items()):
            fin = _finite(r["final_accuracy"] for r in rs if r["status"] == "completed")
            eps, busiest = _finite(r["epsilon"] for r in rs), _finite(r["epsilon_client_max"] for r in rs)
            reached = sum(int(r["reached"]) for r in rs)
            if any(stopped_early(r) for r in rs):  # runs stopped at their target: no whole-run value
                eps_text = "not measured" if any(r["dp"] == 1 for r in rs) else "—"
                lines.append(f"| {d.id} | {task}, {priv}, K = {K} | {method} | {rs[0]['lr']:g} | {len(rs)} | {reached}/{len(rs)} | "
                             f"not measured | {eps_text} | {eps_text} |")
                continue
            lines.append(f"| {d.id} | {task}, {priv}, K = {K} | {method} | {rs[0]['lr']:g} | {len(rs)} | {reached}/{len(rs)} | "
                         f"{_num(np.mean(fin) if fin else math.nan, '.4f')} | {_num(max(eps, default=math.nan), '.3g')} | "
                         f"{_num(max(busiest, default=math.nan), '.3g')} · "
                         f"{_num(deployment_epsilon(max(busiest, default=math.nan)), '.3g')} |")
    lines += ["", "Busiest client's ε: the largest per-client ε over clients and seeds, first for the simulated "
              "population's participation counts, then for the deployment the accountant's ε describes — M = 1000 "
              "contributions per step where the simulation aggregates C = 100, so each client takes part M/C = 10 "
              "times as often (its count × 10, composed without amplification; docs/confirm.md §4).", ""]
    return "\n".join(lines) + "\n", out


class WidthOutcome(NamedTuple):
    """One planned width comparison (claim 3), computed from its design's tuning runs."""

    width: PlannedWidth
    design: str
    status: str  # "confirmatory", "exploratory" or "not run"
    seeds: int
    rule: Width
    base: Width
    verdict: str


def width_outcomes(root: Path, loaded: LoadedPlan, claim: str, status: dict[str, str] | None = None,
                   tuning: dict[str, Rows] | None = None) -> list[WidthOutcome]:
    """Every width comparison the plan names for ``claim`` (:mod:`analysis.confirm.widths`)."""
    out = []
    for d, w in loaded.plan.widths(claim):
        st = (status or {}).get(d.id) or design_status(root, loaded, d)
        rows = (tuning or {}).get(d.id)
        rows = _tuning_rows(root / d.id) if rows is None else rows
        if w.over == "lr":
            rule, base = (width(lr_settings(rows, w.task or "", w.privacy, w.K, m)) for m in (w.rule, w.base))
            tasks = [w.task]
        else:
            rule, base = (width(beta_settings(rows, w.beta_tasks or {}, w.privacy, w.K, m)) for m in (w.rule, w.base))
            tasks = list(w.beta_tasks or {})
        seeds = len({r["seed"] for r in rows if r["task"] in tasks and r["K"] == w.K and r["method"] in (w.rule, w.base)})
        verdict_text = width_verdict(rule, base) if st != "not run" else "not tested"
        out.append(WidthOutcome(w, d.id, st, seeds, rule, base, verdict_text))
    return out


WIDTH_HEADER = ("| design | comparison | over | seeds | rule's width (qualifying) | base's width (qualifying) | difference | "
                "best final accuracy (rule · base) | verdict | status |\n|---|---|---|---|---|---|---|---|---|---|")


def width_lines(outcomes: list[WidthOutcome]) -> list[str]:
    """The width comparisons' table and the claim's verdict from them (plan.toml, "tuning")."""
    lines = ["Tuning widths (no p-value, no Holm family; plan.toml, design 5's rule): a setting qualifies when its mean "
             "final accuracy is within 5 % (relative) of the cell's best and its restricted mean steps to the target within "
             "1.2× of the best; the width is the span of the qualifying settings in octaves (log₂ η, or log₂ 1/(1 − β)); "
             "\"≥\" marks a width reaching its grid's edge. MA's width must exceed momentum's by more than one octave.", "",
             WIDTH_HEADER]
    for o in outcomes:
        w = o.width
        diff = o.rule.span - o.base.span
        over = "η" if w.over == "lr" else "β"
        lines.append(f"| {o.design} | {w.label()} | {over} | {o.seeds} | {o.rule.text()} | {o.base.text()} | "
                     f"{_num(diff, '+.2f')} | {_num(o.rule.best_accuracy, '.3f')} · {_num(o.base.best_accuracy, '.3f')} | "
                     f"{o.verdict} | {o.status} |")
    run = [o for o in outcomes if o.status != "not run"]
    if not run:
        verdict_text = "**not tested**: none of its planned width comparisons has run"
    else:
        verdict_text = "; ".join(f"{o.verdict} ({o.width.label()}{'' if o.status == 'confirmatory' else ', ' + o.status})"
                                 for o in outcomes)
    return lines + ["", f"**Verdict (tuning widths):** {verdict_text}", ""]


def deployment_epsilon(epsilon_client: float, factor: float = DEPLOYMENT_FACTOR, delta: float = DELTA) -> float:
    """A client's ε in the deployment the accountant describes, from its ε in the simulation
    (docs/confirm.md §4). Its ``k`` contributions compose without amplification to ``μ``-GDP with
    ``μ = √k/σ`` (docs/privacy.md §11); ``μ`` is recovered from ``ε`` by solving ``δ(ε; μ) = δ``,
    the count scaled by ``factor`` multiplies it by ``√factor``, and ``ε`` at ``δ`` is read back."""
    if not (math.isfinite(epsilon_client) and epsilon_client > 0):
        return math.nan
    hi = 1.0
    while gdp_delta(hi, epsilon_client) < delta:
        hi *= 2.0
    mu = optimize.brentq(lambda m: gdp_delta(m, epsilon_client) - delta, 1e-9, hi, xtol=1e-13, rtol=1e-13)
    return gdp_epsilon(mu * math.sqrt(factor), delta)


def _finite(values: Any) -> list[float]:
    return [float(v) for v in values if isinstance(v, (int, float)) and math.isfinite(v)]


def _num(x: float, fmt: str) -> str:
    return f"{x:{fmt}}" if math.isfinite(x) else "—"


def claim_verdict(results: list[tuple[Outcome, float]], alpha: float) -> str:
    """``reproduced at …`` where every comparison is reproduced, else each comparison's verdict
    with its cell (plan.toml, "A claim's verdict")."""
    words = [(verdict(o, ph, alpha), o) for o, ph in results]
    if all(o.status == "not run" for _, o in words):
        return "**not tested**: none of its planned comparisons has run"
    where = lambda o: f"{o.comparison.rule} vs {o.comparison.base} at {o.comparison.task}, {o.comparison.privacy}, K = {o.comparison.K}"
    if all(w.startswith("reproduced") for w, _ in words):
        return "reproduced at " + "; ".join(where(o) for _, o in words)
    return "; ".join(f"{w} ({where(o)}{'' if o.status in ('confirmatory', 'not run') else ', exploratory'})" for w, o in words)


def write_report(root: Path, loaded: LoadedPlan) -> Path:
    """Write ``root/report.md`` (module docstring) and return its path."""
    text, _ = build_report(root, loaded)
    path = root / "report.md"
    path.write_text(text, encoding="utf-8")
    return path
