"""``asyncfl sweep``: run a grid of scenario keys × seeds and tabulate it (docs/architecture.md §9).

The sweep directory::

    sweep.toml    the command: scenario file (and its SHA-256), --set overrides, grid, seeds
    results.csv   one row per run: the varied keys, seed, status, message, final metrics,
                  virtual and wall time, the run's own bias and every rule's, ε spent, run_dir
    summary.csv   one row per grid point: runs, completed, and for each metric the mean and the
                  half-width of its 95 % confidence interval over the completed seeds
    runs/NAME/    each run's directory, exactly what `asyncfl run` writes for that point

Rerunning the same command resumes: finished runs are kept, interrupted ones resumed from their
checkpoints (or restarted in place when they had none). A different command on the same
directory is refused, unless ``extend`` is asked and the new grid holds every point of the old
one (then the new points are added).
"""

from __future__ import annotations

import csv
import hashlib
import io
import math
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable

import tomli_w

from asyncfl.config.files import MAX_SCENARIO_BYTES, read_limited, read_text_limited
from asyncfl.config.stop import FINISHED_STATUSES
from asyncfl.errors import AsyncFLError, RunDirError, UsageError
from asyncfl.records import task_metrics
from asyncfl.figures.metrics import plot_metrics
from asyncfl.run import outdir
from asyncfl.run.bias_report import own_bias
from asyncfl.run.parallel import Backend, Progress, RunJob, RunOutcome, run_jobs
from asyncfl.results import Run
from asyncfl.run.rundir import atomic_write
from asyncfl.figures.ci import mean_ci
from asyncfl.studies.sweep.grid import Grid

SPEC_NAME = "sweep.toml"
SPEC_VERSION = 1
#: bias.json key of the bias each server rule is measured by (its own A)
METRICS = ("loss", "accuracy", "train_loss", "virtual_time", "wall_time", "bias", "epsilon")
#: the key of a results row listing the task's own metrics it holds (not a column)
OWN = "_task_metrics"
FIXED = ("name", "seed", "status", "message", "steps", "loss", "accuracy", "train_loss", "virtual_time",
         "wall_time", "updates_per_second", "bias", "bias_none", "bias_momentum", "bias_ma_full", "bias_ma_light",
         "epsilon", "run_dir")


# ---------------------------------------------------------------------------------------------
# sweep.toml
def spec_dict(grid: Grid) -> dict[str, Any]:
    path = grid.scenario_file.resolve()
    return {
        "version": SPEC_VERSION,
        "scenario": str(path),
        "scenario_sha256": hashlib.sha256(read_limited(path, MAX_SCENARIO_BYTES, UsageError)).hexdigest(),
        "set": list(grid.overrides),
        "seeds": list(grid.seeds),
        "grid": [{"key": a.key, "values": list(a.values)} for a in grid.axes],
    }


def read_spec(out: Path) -> dict[str, Any] | None:
    """The ``sweep.toml`` of the sweep in ``out`` (None when there is none); a record that does
    not parse or lacks the fields of a sweep is a UsageError naming it."""
    path = out / SPEC_NAME
    if not path.exists() and not path.is_symlink():
        return None
    try:  # a regular file, bounded: a FIFO in its place is refused, never waited on
        spec = tomllib.loads(read_text_limited(path, MAX_SCENARIO_BYTES, UsageError))
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise UsageError(f"{path}: not a sweep record ({exc.__class__.__name__}); choose another --out") from None
    grid, seeds = spec.get("grid", []), spec.get("seeds", [])
    if not (isinstance(grid, list) and all(isinstance(a, dict) and isinstance(a.get("key"), str) and isinstance(a.get("values"), list)
                                           for a in grid) and isinstance(seeds, list)):
        raise UsageError(f"{path}: not a sweep record (its grid or seeds are damaged); choose another --out")
    return spec


def in_recorded_order(grid: Grid, old: dict[str, Any] | None) -> Grid:
    """``grid`` with its axes in the order of the sweep recorded in ``old`` when both vary the
    same keys: a point's name (its run directory) follows the axis order, so the same axes given
    in another order name the same runs, not new ones."""
    if old is None:
        return grid
    order = [a["key"] for a in old.get("grid", [])]
    keys = [a.key for a in grid.axes]
    if sorted(order) != sorted(keys) or order == keys:
        return grid
    by_key = {a.key: a for a in grid.axes}
    return replace(grid, axes=tuple(by_key[k] for k in order))


def extends(old: dict[str, Any], new: dict[str, Any], out: Path) -> bool:
    """Whether ``new`` may be added to the sweep recorded as ``old`` (``--extend``): the same
    scenario, overrides and keys, each with all its old values, and all old seeds. A UsageError
    says what does not fit."""
    for key in ("version", "scenario", "scenario_sha256", "set"):
        if old.get(key) != new.get(key):
            raise UsageError(f"--extend: the sweep in {out} has another {key}; only the grid and seeds can grow")
    old_axes = {a["key"]: a["values"] for a in old.get("grid", [])}
    new_axes = {a["key"]: a["values"] for a in new["grid"]}
    lost = [k for k in old_axes if k not in new_axes or any(v not in new_axes[k] for v in old_axes[k])]
    if lost or any(s not in new["seeds"] for s in old.get("seeds", [])) or set(new_axes) != set(old_axes):
        raise UsageError(f"--extend: the new grid must hold every point of the sweep in {out} "
                         f"(the same keys, each with all its old values, and all old seeds)")
    return True


# ---------------------------------------------------------------------------------------------
# tables
def result_row(outcome: RunOutcome, values: dict[str, Any], seed: int, sweep_dir: Path) -> dict[str, Any]:
    """One ``results.csv`` row from a run's outcome and its files: the point's values, status,
    final metrics, biases, the run's ``epsilon`` and its busiest client's ``epsilon_client_max``."""
    s = outcome.summary
    final = s.get("final", {}) if isinstance(s.get("final"), dict) else {}
    bias = _bias(outcome.out)
    privacy = s.get("privacy", {}) if isinstance(s.get("privacy"), dict) else {}
    return {
        **{k: v for k, v in values.items()}, "name": outcome.name, "seed": seed, "status": outcome.status,
        "message": outcome.message or str(s.get("error", "")), "steps": s.get("steps"),
        "loss": final.get("loss"), "accuracy": final.get("accuracy"), "train_loss": final.get("train_loss"),
        "virtual_time": s.get("virtual_time"), "wall_time": s.get("wall_time"), "updates_per_second": s.get("updates_per_second"),
        **{m: final.get(m) for m in task_metrics(final)}, OWN: tuple(task_metrics(final)),  # the task's own (macro_f1, …)
        "bias": _own_bias(outcome.out, bias),
        **{f"bias_{k}": bias.get(k, math.nan) for k in ("none", "momentum", "ma_full", "ma_light")},
        "epsilon": privacy.get("epsilon_spent", math.nan),
        # the busiest client's realised ε, its contributions composed without amplification (docs/privacy.md §11)
        "epsilon_client_max": privacy.get("epsilon_client_max", math.nan),
        "run_dir": str(outcome.out.relative_to(sweep_dir)),
    }


def _bias(out: Path) -> dict[str, float]:
    """The overall biases of ``bias.json`` (``none``, ``momentum``, ``ma_full``, ``ma_light``)."""
    try:
        raw = Run(out).bias or {}
    except (OSError, RunDirError):
        return {}
    return {k: float(v) for k, v in raw.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def _own_bias(out: Path, bias: dict[str, float]) -> float:
    """The bias of the run's own rule (:func:`asyncfl.run.bias_report.own_bias`), NaN when its
    scenario cannot be read."""
    try:
        scenario = Run(out).scenario
    except (AsyncFLError, OSError):
        return math.nan
    return own_bias(scenario, bias)


def own_metrics(rows: list[dict[str, Any]]) -> list[str]:
    """The task's own metrics the rows hold (``results.csv`` columns after ``accuracy``), in order."""
    return list(dict.fromkeys(m for r in rows for m in r.get(OWN, ())))


def summary_rows(rows: list[dict[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    """Per grid point (the varied keys, seeds pooled): runs, completed, and each metric's — the
    task's own too — mean and 95 % CI half-width over the completed runs."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    own = [m for m in own_metrics(rows) if m not in keys]
    for row in rows:
        groups.setdefault(tuple(repr(row[k]) for k in keys), []).append(row)
    out = []
    for members in groups.values():
        done = [r for r in members if r["status"] in FINISHED_STATUSES]
        summary = {k: members[0][k] for k in keys}
        summary.update(runs=len(members), completed=len(done),
                       not_completed="; ".join(f"seed {r['seed']} {r['status']}: {_short(r['message'])}"
                                               for r in members if r["status"] not in FINISHED_STATUSES))
        for metric in (*METRICS, *own):
            ci = mean_ci(_num(r.get(metric)) for r in done)
            summary[f"{metric}_mean"], summary[f"{metric}_ci95"] = ci.mean, ci.half
        out.append(summary)
    return out


def _short(message: Any, limit: int = 120) -> str:
    text = " ".join(str(message or "no message").split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _num(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def write_table(path: Path, rows: list[dict[str, Any]], fields: list[str]) -> None:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n", extrasaction="ignore")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: _cell(row.get(k)) for k in fields})
    atomic_write(path, lambda p: p.write_text(buf.getvalue(), encoding="utf-8"))


def _cell(value: Any) -> Any:
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else value


def plot_run(out: Path) -> None:
    """``metrics.png`` of a finished run, the figure ``asyncfl run`` draws (skipped when it is
    already newer than the run's ``summary.json``)."""
    figure, summary = out / "metrics.png", out / "summary.json"
    if figure.is_file() and summary.is_file() and figure.stat().st_mtime_ns >= summary.stat().st_mtime_ns:
        return
    plot_metrics([out], figure)


# ---------------------------------------------------------------------------------------------
@dataclass
class SweepResult:
    rows: list[dict[str, Any]]
    summary: list[dict[str, Any]]
    outcomes: list[RunOutcome]


def run_sweep(grid: Grid, out: Path, backend: Backend, extend: bool = False,
              on_outcome: Callable[[RunOutcome, Progress], None] | None = None,
              on_start: Callable[[int, int], None] | None = None, overwrite: bool = False,
              command: str = "asyncfl sweep") -> SweepResult:
    """Validate every point, claim ``out`` (:func:`asyncfl.run.outdir.claim`: a sweep folder of
    this spec, or ``extend`` of one, held locked while the sweep runs), record the command, run
    what is not done, write the tables."""
    out = Path(out)
    old = read_spec(out) if out.is_dir() else None
    grid = in_recorded_order(grid, old)
    scenarios = grid.scenarios()  # every point validated before anything is written
    new = spec_dict(grid)

    def accept(marker: dict[str, Any] | None) -> bool:
        if old is None:
            return False
        return old == new or (extend and extends(old, new, out))

    owned = outdir.claim(out, "sweep", command, outdir.digest(new), overwrite=overwrite, accept=accept)
    try:
        rels = [Path("runs") / name for name, _, _ in scenarios]
        owned.check_runs(rels)
        owned.add_runs(rels)
        atomic_write(out / SPEC_NAME, lambda p: p.write_text(tomli_w.dumps(new), encoding="utf-8"))
        jobs = [RunJob(name, scenario, out / "runs" / name, after=plot_run) for name, _, scenario in scenarios]
        if on_start is not None:
            on_start(len(jobs), backend.slots)
        outcomes = run_jobs(jobs, backend, on_outcome)
        return _tables(grid, scenarios, outcomes, out)
    finally:
        owned.release()


def _tables(grid: Grid, scenarios: list, outcomes: list[RunOutcome], out: Path) -> SweepResult:
    keys = [a.key for a in grid.axes]
    rows = [result_row(o, dict(point.values), point.seed, out) for o, (_, point, _) in zip(outcomes, scenarios)]
    own = [m for m in own_metrics(rows) if m not in keys]
    at = FIXED.index("accuracy") + 1
    write_table(out / "results.csv", rows, [*keys, *FIXED[:at], *own, *FIXED[at:]])
    summary = summary_rows(rows, keys)
    write_table(out / "summary.csv", summary, [*keys, "runs", "completed",
                                              *(f"{m}_{s}" for m in (*METRICS, *own) for s in ("mean", "ci95")), "not_completed"])
    return SweepResult(rows, summary, outcomes)
