"""Running the review study (docs/ma-review.md §2; the tuning rule: docs/studies.md §7): fix each task's target from the reference on
the held-out tuning seeds, tune every cell's server learning rate on the reported metric, run the
evaluation seeds, and write the tables the report is computed from.

1. **Target.** The reference method (sync FedAvg + momentum) is tuned on the tuning seeds for its
   mean final accuracy (coarse grid, then ``tuning.refine`` rounds of
   :func:`asyncfl.studies.tuning.refine`); the task's target is ``fraction`` × that mean,
   rounded down to ``1/round_to``. No evaluation seed has run at this point.
2. **Tuning.** Every tuned cell runs its coarse grid on the tuning seeds; each run's score is its
   crossing of the target restricted to the horizon, ``min(T̂, h)`` (an unreached run counts at
   ``h``), so a rate's mean score is the restricted mean steps to target of its seeds — the
   report's metric (:func:`asyncfl.studies.survival.restricted_mean`). The best rate
   (:func:`asyncfl.studies.tuning.choose`; a diverged run has no score and is never chosen) is
   refined by ``×factor`` ``tuning.refine`` times; a grid whose every rate diverged goes on below
   its smallest rate instead. Where no rate reaches the target on any tuning
   seed (every mean is ``h``), the one with the highest mean final accuracy is chosen instead.
3. **Evaluation.** Every cell runs every evaluation seed at its chosen rate (``lr_from`` cells at
   the rate chosen for their source label), cell by cell in the spec's block order; the cells of
   a block with ``evaluate = false`` are tuned only.

With ``tuning.stop_at_target`` (stage 2) and ``evaluation.stop_at_target`` (stage 3) those runs
stop at the first evaluation reaching their task's target (docs/studies.md §2.1): their
crossings, hence every tuning score and choice, are those of the runs to ``T``; their whole-run
values are blank in the tables (``stopped_at_target = 1``). Stage 1 never stops: the target is
read from the reference's final accuracy.

Each stage goes through the parallel runner as one batch (tuning rounds are barriers), and the
study is resumable (:mod:`analysis.ma_review.runs`): a finished run is read back, never rerun.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

from asyncfl.errors import UsageError
from asyncfl.run import outdir
from asyncfl.run.parallel import Backend, InProcess
from asyncfl.studies.tuning import choose, refine
from analysis.ma_review.design import CellKey, ReviewStudy
from analysis.ma_review.entries import NODP
from analysis.ma_review.measures import (crossing_of, iterate_noise, noise_gain, own_coefficients, privacy_of, read_metrics,
                                         read_state, run_amplification, run_bias)
from analysis.ma_review.runs import ProgressHook, run_points
from analysis.ma_review.scenarios import Point
from analysis.ma_review.report import write_report  # the report reads only the tables above
from analysis.ma_review.tables import CURVE_FIELDS, RESULT_FIELDS, TUNING_FIELDS, write_csv

COMMAND = "python -m analysis.ma_review"
KIND = outdir.register(outdir.Kind("ma-review", COMMAND, ("results.csv", "tuning.csv", "curves.csv", "report.md", "confirm.json", "*.png",
                                                       "*.pdf"),
                                   {}, "tuning.csv", article="an asyncfl review-study folder"))

Source = tuple[str, str, int, str]  # (task, privacy, K, method): one tuned learning rate


class Runner:
    """Runs points in batches and remembers each one's status and curve, and which runs stopped
    at their target before their horizon (``at_target``: their crossing is measured, their
    whole-run values are not; docs/studies.md §2.1)."""

    def __init__(self, study: ReviewStudy, out: Path, backend: Backend, progress: ProgressHook | None,
                 owned: outdir.OutDir | None, collect: bool = False) -> None:
        self.study, self.out, self.backend, self.progress, self.owned = study, out, backend, progress, owned
        self.collect = collect  # read back the finished runs only: a point not run yet is "missing"
        self.status: dict[Point, str] = {}
        self.messages: dict[Point, str] = {}
        self.at_target: set[Point] = set()
        self._curves: dict[Point, list[dict[str, float]]] = {}

    def run(self, points: list[Point], stop_at: Callable[[Point], float] | None = None) -> None:
        """Run the points not run yet; with ``stop_at`` each of them stops at the first evaluation
        reaching ``stop_at(point)`` (a point already run keeps the run it has)."""
        todo = [p for p in dict.fromkeys(points) if p not in self.status]
        if self.collect:
            for p in todo:
                status, stopped = read_state(self.out / p.rel_dir(), p.steps)
                self.status[p] = status or "missing"
                if stopped:
                    self.at_target.add(p)
            return
        if todo:
            stops = {p: stop_at(p) for p in todo} if stop_at is not None else None
            self.status.update(run_points(self.study, todo, self.out, self.backend, self.progress, self.owned, self.messages,
                                          stops, self.at_target))

    def crossed(self, point: Point) -> bool:
        """Whether the run's crossing is measured: it completed, or stopped at its target."""
        return self.status.get(point) == "completed" or point in self.at_target

    def curve(self, point: Point) -> list[dict[str, float]]:
        if point not in self._curves:
            self._curves[point] = read_metrics(self.out / point.rel_dir())
        return self._curves[point]

    def final(self, point: Point) -> float:
        curve = self.curve(point)
        return float(curve[-1]["accuracy"]) if curve and self.status.get(point) == "completed" else math.nan

    def restricted(self, point: Point, target: float) -> float:
        """``min(T̂, h)`` of a tuning run; NaN for a run that did not complete (no score). A run
        stopped at its target holds every evaluation up to its crossing: the same score."""
        if not self.crossed(point):
            return math.nan
        return min(crossing_of(self.curve(point), target, point.steps)["point"], float(point.steps))


def _tune(runner: Runner, sources: dict[Source, CellKey], grids: dict[Source, list[float]], seeds: list[int],
          score: Callable[[Source, Point], float], smaller: bool, rounds: int, factor: float,
          fallback: Callable[[Source, Point], float] | None = None, horizon: float | None = None,
          stop_at: Callable[[Point], float] | None = None) -> dict[Source, Any]:
    """Tune every source on ``grids`` (extended in place by the refinement rounds); returns each
    source's :class:`~asyncfl.studies.tuning.Choice` (``lr`` ``None`` when every run failed).
    ``stop_at``: the target each new run stops at (:meth:`Runner.run`). The fallback reads final
    accuracies only where every run's score is the horizon: none reached the target before step
    ``T``, so none was stopped early."""
    steps = runner.study.spec.steps

    def points(src: Source, lrs: list[float]) -> list[Point]:
        return [sources[src].point(seed, lr, steps) for lr in lrs for seed in seeds]

    def chosen(src: Source) -> Any:
        scores = {lr: [score(src, sources[src].point(seed, lr, steps)) for seed in seeds] for lr in grids[src]}
        try:
            pick = choose(scores, smaller_is_better=smaller)
        except ValueError:  # every rate failed
            return None
        if fallback is not None and horizon is not None and pick.score >= horizon:
            alt = {lr: [fallback(src, sources[src].point(seed, lr, steps)) for seed in seeds] for lr in grids[src]}
            try:
                return choose(alt, smaller_is_better=False)._replace(score=pick.score)
            except ValueError:
                return pick
        return pick

    runner.run([p for src in sources for p in points(src, grids[src])], stop_at)
    for _ in range(rounds):
        extra: dict[Source, list[float]] = {}
        for src in sources:
            pick = chosen(src)
            # every rate failed (diverged): the grid is too high, so it goes on below its smallest rate
            new = refine(grids[src], pick.lr if pick is not None else min(grids[src]), factor)
            if pick is None:
                new = [lr for lr in new if lr < min(grids[src])]
            if new:
                extra[src] = [float(f"{lr:.6g}") for lr in new]
        if not extra:
            break
        runner.run([p for src, lrs in extra.items() for p in points(src, lrs)], stop_at)
        for src, lrs in extra.items():
            grids[src] = sorted(grids[src] + lrs)
    return {src: chosen(src) for src in sources}


def run_review(study: ReviewStudy, out: str | Path, progress: ProgressHook | None = None, backend: Backend | None = None,
               overwrite: bool = False, extend: bool = False, collect: bool = False,
               on_claimed: Callable[[Path], None] | None = None) -> dict[str, Any]:
    """Target, tuning, evaluation, then ``results.csv``, ``tuning.csv``, ``curves.csv`` and the
    report (module docstring) into ``out``, claimed first (``extend``: a folder of another
    version of the spec is taken over, its finished runs reused). ``collect``: run nothing, write
    the tables from the runs finished so far (a run not there yet is a ``missing`` row).
    ``on_claimed(out)`` runs once the folder is claimed, before any run (the confirmatory study
    records its plan's digest there: ``confirm.json``)."""
    out = Path(out)
    if collect and outdir.kind_of(out) != KIND.name:
        raise UsageError(f"--out {out}: holds no {COMMAND} folder to collect (--collect reads the runs of a study "
                         "started without it); nothing was written")
    accept = (lambda marker: True) if extend or collect else None
    owned = outdir.claim(out, KIND.name, COMMAND, study.digest(), overwrite=overwrite, accept=accept)
    try:
        if on_claimed is not None:
            on_claimed(out)
        return _run(study, out, Runner(study, out, backend or InProcess(), progress, owned, collect))
    finally:
        owned.release()


def _run(study: ReviewStudy, out: Path, runner: Runner) -> dict[str, Any]:
    spec = study.review
    steps = spec.steps
    seeds = list(spec.tuning_seeds)
    cells = study.cells()
    tuned = {c.source: c for c in cells if c.tuned}
    grids: dict[Source, list[float]] = {src: list(c.lr_grid) for src, c in tuned.items()}

    # 1. the target of each task: fixed by the spec, or from the reference on the tuning seeds
    fixed = spec.target.value
    ref = {} if fixed is not None else {src: c for src, c in tuned.items() if src[1] == NODP and src[3] == spec.target.reference}
    ref_choice = _tune(runner, ref, grids, seeds, lambda src, p: runner.final(p), False, spec.tuning.refine, spec.tuning.factor)
    stage1 = {src: list(grids[src]) for src in ref}  # the rates the target was read from
    targets: dict[str, float] = {} if fixed is None else {t.name: fixed for t in spec.tasks}
    for src, pick in ref_choice.items():
        mean_final = pick.score if pick is not None else math.nan
        if not math.isfinite(mean_final):
            raise UsageError(_no_target(runner, ref[src], grids[src], seeds, src))
        targets[src[0]] = math.floor(spec.target.fraction * mean_final * spec.target.round_to) / spec.target.round_to

    # 2. tune every cell on the restricted steps to its task's target (with tuning.stop_at_target each
    # run not run yet stops at that target: the reference's runs of stage 1 are kept whole)
    def at_target(point: Point) -> float:
        return targets[point.task]

    if spec.tuning.score == "final":
        choices = _tune(runner, tuned, grids, seeds, lambda src, p: runner.final(p), False, spec.tuning.refine, spec.tuning.factor)
    else:
        choices = _tune(runner, tuned, grids, seeds, lambda src, p: runner.restricted(p, targets[src[0]]), True,
                        spec.tuning.refine, spec.tuning.factor, fallback=lambda src, p: runner.final(p), horizon=float(steps),
                        stop_at=at_target if spec.tuning.stop_at_target else None)
    lr_of = {src: (pick.lr if pick is not None else min(grids[src])) for src, pick in choices.items()}

    # 3. evaluation
    # cell by cell in the spec's block order, all seeds of a cell together: a study stopped early
    # (--collect) has its first blocks complete, so list the blocks by priority
    evals = [(c, c.point(seed, lr_of[c.source], steps)) for c in cells if c.evaluate for seed in spec.seeds]
    runner.run([p for _, p in evals], at_target if spec.evaluation.stop_at_target else None)

    tuning_rows = _tuning_rows(runner, tuned, grids, seeds, choices, stage1, targets)
    rows, curve_rows = _result_rows(runner, evals, targets, lr_of)
    write_csv(out / "results.csv", RESULT_FIELDS, rows)
    write_csv(out / "tuning.csv", TUNING_FIELDS, tuning_rows)
    write_csv(out / "curves.csv", CURVE_FIELDS, curve_rows)
    write_report(out)
    return {"results": rows, "tuning": tuning_rows, "targets": targets, "lr": lr_of, "statuses": runner.status,
            "messages": runner.messages, "at_target": set(runner.at_target)}


def _no_target(runner: Runner, cell: CellKey, lrs: list[float], seeds: list[int], src: Source) -> str:
    """Why task ``src[0]`` has no target: its reference has no completed tuning run (the target is
    the mean final accuracy of the reference's best rate, docs/ma-review.md §2)."""
    statuses = [runner.status.get(cell.point(seed, lr, runner.study.spec.steps), "missing") for lr in lrs for seed in seeds]
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in sorted(set(statuses)))
    if runner.collect:
        return (f"--collect: task {src[0]!r} has no target yet: the reference {src[3]!r} has no completed tuning run "
                f"({counts}); run the study without --collect first. Nothing was written but the folder's record")
    return (f"target: task {src[0]!r} has no target: none of the reference {src[3]!r}'s tuning runs completed ({counts}); "
            f"give lr_grid.{src[3]} rates at which it trains (see tuning runs under {runner.out / 'runs'})")


def _tuning_rows(runner: Runner, tuned: dict[Source, CellKey], grids: dict[Source, list[float]], seeds: list[int],
                 choices: dict[Source, Any], stage1: dict[Source, list[float]], targets: dict[str, float]) -> list[dict[str, Any]]:
    steps = runner.study.spec.steps
    rows = []
    for src, cell in tuned.items():
        pick = choices[src]
        for lr in grids[src]:
            for seed in seeds:
                p = cell.point(seed, lr, steps)
                c = crossing_of(runner.curve(p), targets[src[0]], steps) if runner.crossed(p) else None
                rows.append({
                    "task": src[0], "privacy": src[1], "K": src[2], "method": src[3], "lr": lr, "seed": seed,
                    "target_accuracy": targets[src[0]], "horizon": steps,
                    "cross_point": c["point"] if c else math.nan, "reached": int(bool(c and c["reached"])),
                    "final_accuracy": runner.final(p), "status": runner.status.get(p, ""),
                    "chosen": int(pick is not None and math.isclose(lr, pick.lr)),
                    "edge": int(pick is not None and math.isclose(lr, pick.lr) and pick.edge),
                    "reference": int(lr in stage1.get(src, [])), "run_dir": str(p.rel_dir()),
                    "stopped_at_target": int(p in runner.at_target),
                })
    return rows


def _result_rows(runner: Runner, evals: list[tuple[CellKey, Point]], targets: dict[str, float],
                 lr_of: dict[Source, float]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    study, out = runner.study, runner.out
    rows, curves = [], []
    for cell, p in evals:
        run_dir = out / p.rel_dir()
        status = runner.status.get(p, "")
        stopped = p in runner.at_target  # its crossings are measured, its whole-run values are not (blank)
        crossed = runner.crossed(p)
        metrics = runner.curve(p) if status in ("completed", "diverged") or stopped else []
        target = targets[p.task]
        done = status == "completed"
        step = crossing_of(metrics, target, p.steps) if crossed else {"low": float(p.steps), "high": math.inf,
                                                                        "point": float(p.steps), "reached": False}
        vtime = crossing_of(metrics, target, p.steps, axis="time") if crossed else {"low": math.nan, "high": math.nan,
                                                                                    "point": math.nan, "reached": False}
        priv = privacy_of(run_dir)
        if stopped:  # the ε spent by its stop, not by step T: not measured (σ and ξ are calibrated for T steps)
            priv.update(epsilon_spent=math.nan, epsilon_client_max=math.nan, epsilon_client_p50=math.nan)
        sc = study.scenario(p)
        A = own_coefficients(run_dir, p.method) if done else None
        gain = noise_gain(A, p.lr) if A is not None else math.nan
        iid = sc.privacy.noise == "iid"
        rows.append({
            "task": p.task, "block": cell.block, "method": p.method, "K": p.K, "seed": p.seed, "privacy": p.privacy,
            "dp": int(p.dp), "lr": p.lr, "lr_from": cell.lr_from or "", "target_accuracy": target, "horizon": p.steps,
            "reached": int(step["reached"]), "cross_low": step["low"], "cross_high": step["high"], "cross_point": step["point"],
            "time_low": vtime["low"], "time_high": vtime["high"], "time_point": vtime["point"],
            "time_end": metrics[-1]["time"] if metrics and not stopped else math.nan,
            "final_accuracy": metrics[-1]["accuracy"] if done and metrics else math.nan,
            "best_accuracy": max((r["accuracy"] for r in metrics), default=math.nan) if done else math.nan,
            "final_loss": metrics[-1]["loss"] if done and metrics else math.nan,
            "bias": run_bias(run_dir, p.method) if done else math.nan,
            "amplification": run_amplification(run_dir, p.method) if done else math.nan,
            "noise_gain": gain,
            "iterate_noise": iterate_noise(gain, priv, sc.privacy.clip, study.spec.buffer, iid) if p.dp else math.nan,
            "epsilon": priv["epsilon_spent"], "epsilon_client_max": priv["epsilon_client_max"],
            "epsilon_client_p50": priv["epsilon_client_p50"], "sigma": priv["sigma"], "xi": priv["xi"],
            "counts": sc.privacy.counts if p.dp else "", "noise": sc.privacy.noise if p.dp else "",
            "sampling": sc.privacy.sampling if p.dp else "",
            "status": status, "run_dir": str(p.rel_dir()), "message": runner.messages.get(p, ""),
            "stopped_at_target": int(stopped),
        })
        for r in metrics:
            curves.append({"task": p.task, "privacy": p.privacy, "K": p.K, "method": p.method, "seed": p.seed,
                           "step": r["step"], "time": r["time"], "accuracy": r.get("accuracy", math.nan),
                           "loss": r.get("loss", math.nan)})
    return rows, curves
