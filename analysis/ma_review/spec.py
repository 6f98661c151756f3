"""The review study's spec (docs/ma-review.md §2): which cells run, how they are tuned, and the target.

A *cell* is a (task, privacy label, K, method); the spec lists them as blocks (``[[cells]]``:
methods × K multiples × privacy labels, optionally some tasks), so a study can run the core
methods at every K and the comparators at fewer, or an ablation at one K. A block either is tuned
(its own server-lr grid, on the held-out ``tuning_seeds``) or takes, with ``lr_from``, the
learning rate chosen for the same task, K and method under another privacy label (an ablation
that changes only the count post-processing keeps the tuned step).

Tasks, DP settings and grids are :mod:`analysis.ma_review.entries`; this schema adds the
evaluation/tuning seed split, the target rule and the cells. Validation names every bad field
(:class:`StudyError`, one line per problem); the scenarios the cells imply are validated next, by
:class:`analysis.ma_review.scenarios.Scenarios`.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationError

from asyncfl.config import scenario as scenario_mod
from asyncfl.config.files import MAX_SCENARIO_BYTES, read_text_limited
from asyncfl.errors import AsyncFLError
from analysis.ma_review.entries import NODP, LrGrid, PosInt, PrivacyEntry, TaskEntry, _Section
from analysis.ma_review.methods import MethodName

class StudyError(AsyncFLError, ValueError):
    """An invalid study spec: one line per problem, each naming the field."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = list(problems)
        head = f"invalid study spec {source}" if source else "invalid study spec"
        super().__init__(head + ":\n" + "\n".join(f"  - {p}" for p in self.problems))


Seed = Annotated[int, Field(ge=0, lt=2**63)]
#: the most seeds a study runs, evaluation and tuning together (the study engine's limit)
MAX_SEEDS = 100


class TargetEntry(_Section):
    """The target accuracy of each task, fixed before any evaluation run: ``fraction`` × the mean
    final accuracy of ``reference`` (tuned on the tuning seeds for its final accuracy), over the
    tuning seeds, rounded down to ``1/round_to`` (docs/ma-review.md §2); or, with ``value``, a
    target fixed in the spec itself (a pre-registered plan fixes it before any run: no reference
    is run and ``reference``/``fraction`` are not used)."""

    value: Annotated[float, Field(gt=0, lt=1)] | None = None
    reference: MethodName = "sync-momentum"
    fraction: Annotated[float, Field(gt=0, le=1)] = 0.8
    round_to: Annotated[int, Field(ge=1, le=1000)] = 100


class ReviewTuning(_Section):
    """Server-lr tuning on the held-out seeds: the coarse grid of ``lr_grid``, then ``refine``
    rounds of adding the neighbours ``best/factor`` and ``best·factor`` of the current best
    (:func:`asyncfl.studies.tuning.refine`); the score is the restricted mean steps to the
    target over the tuning seeds (``score = "rmst"``, smaller is better) or the mean final
    accuracy (``score = "final"``, larger is better: a design whose primary metric is the final
    accuracy is tuned on it). ``stop_at_target`` (``score = "rmst"`` only) stops each tuning run
    at the first evaluation reaching its task's target (docs/studies.md §2.1): its score, the
    crossing, is read from evaluations the stopped run holds exactly, so the chosen rates are
    those of the runs to ``T``; the reference's runs that fix the target are never stopped."""

    score: Literal["rmst", "final"] = "rmst"
    refine: Annotated[int, Field(ge=0, le=5)] = 1
    factor: Annotated[float, Field(gt=1, le=10)] = 2.0
    stop_at_target: bool = False


#: what an evaluation run gives the report (docs/ma-review.md §3): everything, or its crossings alone
Reads = Literal["everything", "crossings"]


class ReviewEvaluation(_Section):
    """What the evaluation runs are read for. ``reads = "crossings"`` declares that the study
    reads nothing from them but the times to the target (the crossings, docs/studies.md §2);
    only then may ``stop_at_target`` stop each evaluation run at the first evaluation reaching
    the target (docs/studies.md §2.1). A stopped run's final accuracy, ε spent and bias of all
    ``T`` steps are not measured: the tables leave them blank and the report prints "not
    measured"."""

    reads: Reads = "everything"
    stop_at_target: bool = False


class Cell(_Section):
    """A block of cells: every method × K multiple × privacy label (× task, default all).

    ``lr_grid``: the block's own coarse grids, per method, in place of the spec's ``[lr_grid]``
    for the cells it tunes (a sensitivity design centres each block's grid on its own setting:
    another K, or another ``server.beta`` carried by a task's overrides). ``evaluate = false``:
    its cells are tuned on the tuning seeds and never run on the evaluation seeds (a design that
    reads only the tuning runs, e.g. a width rule over the rates; docs/ma-review.md §2)."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,39}$")]
    methods: Annotated[list[MethodName], Field(min_length=1)]
    k_multiples: Annotated[list[PosInt], Field(min_length=1, max_length=20)] = [1]
    privacy: Annotated[list[str], Field(min_length=1)] = [NODP]
    tasks: Annotated[list[str], Field(min_length=1)] | None = None
    lr_from: str | None = None
    lr_grid: LrGrid | None = None
    evaluate: bool = True

    def grid(self, method: str, default: LrGrid) -> list[float] | None:
        """The coarse grid the block tunes ``method`` on: its own, else the spec's."""
        own = self.lr_grid.of(method) if self.lr_grid is not None else None
        return own if own is not None else default.of(method)


class ReviewSpec(_Section):
    """The whole review study (see the module docstring and ``analysis/ma_review.toml``)."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,79}$")]
    buffer: PosInt
    steps: PosInt
    eval_every: PosInt = 2
    seeds: Annotated[list[Seed], Field(min_length=1, max_length=100)]
    tuning_seeds: Annotated[list[Seed], Field(min_length=1, max_length=20)]
    ma_target: Literal["momentum", "nesterov"] = "momentum"
    target: TargetEntry = TargetEntry()
    tuning: ReviewTuning = ReviewTuning()
    evaluation: ReviewEvaluation = ReviewEvaluation()
    lr_grid: LrGrid = LrGrid()
    defaults: dict[str, Any] = {}
    tasks: Annotated[list[TaskEntry], Field(min_length=1, max_length=20)]
    privacy: Annotated[list[PrivacyEntry], Field(max_length=40)] = []
    cells: Annotated[list[Cell], Field(min_length=1, max_length=100)]

    def stops(self) -> bool:
        """Whether any run of the study is stopped at its target (tuning or evaluation)."""
        return self.tuning.stop_at_target or self.evaluation.stop_at_target

    def methods(self) -> list[str]:
        """Every method a cell names, in the cells' order."""
        return list(dict.fromkeys(m for c in self.cells for m in c.methods))

    def digest_table(self) -> dict[str, Any]:
        """What the study's digest (:meth:`analysis.ma_review.design.ReviewStudy.digest`) is
        computed from: everything the runs follow from, laid out as the first study engine laid
        it out (``analysis/ma_study``, removed after commit b6a6716: its spec's keys, with the
        defaults of those the review never sets), so a folder started before the engine moved
        keeps its digest and resumes (tests/test_ma_review_spec.py pins it). The target stops
        (``tuning.stop_at_target``, ``evaluation.stop_at_target``) change the runs, so a spec that
        sets one has another digest; a spec that sets neither adds no key (its digest is as
        before). ``evaluation.reads`` changes no run and is not in it."""
        dumped = self.model_dump(mode="json", by_alias=True, include={"lr_grid", "defaults", "tasks"})
        labels = {label for c in self.cells for label in c.privacy}
        dp = ([False] if NODP in labels else []) + ([True] if labels - {NODP} or not labels else [])
        return {
            "name": self.name, "buffer": self.buffer, "k_multiples": sorted({k for c in self.cells for k in c.k_multiples}),
            "seeds": sorted(set(self.seeds) | set(self.tuning_seeds)), "dp": dp or [False], "dp_seeds": None,
            "steps": self.steps, "eval_every": self.eval_every, "methods": self.methods(), "ma_target": self.ma_target,
            "secondary_target_fraction": None, **dumped,
            # keys added after the first engine enter only when given (so older folders keep their digest)
            "privacy": [p.model_dump(mode="json", by_alias=True, exclude={"noise_multiplier"} if p.noise_multiplier is None else None)
                        for p in self.privacy or [PrivacyEntry()]],
            "tuning": {"steps": None, "seed": 0, "dp": "tune", "widen": 0}, "pooled_steps": 0,
            **({"stop_at_target": {"tuning": self.tuning.stop_at_target, "evaluation": self.evaluation.stop_at_target}}
               if self.stops() else {}),
            **({"block_lr_grids": {c.name: c.lr_grid.model_dump(mode="json", by_alias=True, exclude_none=True)
                                   for c in self.cells if c.lr_grid is not None}}
               if any(c.lr_grid is not None for c in self.cells) else {}),
        }


_MODEL_AT: dict[str, type[BaseModel]] = {"": ReviewSpec, "tasks": TaskEntry, "privacy": PrivacyEntry, "tuning": ReviewTuning, "lr_grid": LrGrid,
             "target": TargetEntry, "cells": Cell, "evaluation": ReviewEvaluation}


def _loc_text(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _allowed(cls: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in cls.model_fields.items()]


def read_spec_file(path: str | Path) -> dict[str, Any]:
    """The raw table of a spec file (a :class:`StudyError` if it cannot be read as TOML)."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise StudyError([f"{path}: no such study spec"])
    text = read_text_limited(path, MAX_SCENARIO_BYTES, lambda message: StudyError([f"study spec {message}"]))
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise StudyError([f"{path}: not valid TOML (arrays or tables nested too deeply)"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise StudyError([f"{path}: not valid TOML ({exc})"]) from None


def parse_review(raw: dict[str, Any], source: str | None = None) -> ReviewSpec:
    """Validate a raw spec table (a :class:`StudyError` naming every bad field)."""
    try:
        spec = ReviewSpec.model_validate(raw)
    except ValidationError as exc:
        def allowed_keys(loc: tuple) -> list[str]:
            parents = [p for p in loc[:-1] if isinstance(p, str)]
            return _allowed(_MODEL_AT.get(parents[-1] if parents else "", ReviewSpec))

        raise StudyError(scenario_mod.describe_errors(exc, _loc_text, allowed_keys), source) from None
    problems = []
    tasks = {t.name for t in spec.tasks}
    labels = {NODP} | {p.name for p in spec.privacy}
    for field in ("seeds", "tuning_seeds"):
        values = getattr(spec, field)
        if twice := sorted({v for v in values if values.count(v) > 1}):
            problems.append(f"{field}: {', '.join(map(str, twice))} given twice; each seed at most once "
                            "(a repeated seed is the same run counted twice)")
    if len(set(spec.seeds) | set(spec.tuning_seeds)) > MAX_SEEDS:
        problems.append(f"seeds, tuning_seeds: {len(set(spec.seeds) | set(spec.tuning_seeds))} seeds together; "
                        f"at most {MAX_SEEDS} evaluation and tuning seeds in all")
    for i, cell in enumerate(spec.cells):
        for field in ("methods", "k_multiples", "privacy", "tasks"):
            values = getattr(cell, field) or []
            if twice := sorted({repr(v) for v in values if values.count(v) > 1}):
                problems.append(f"cells[{i}] ({cell.name}).{field}: {', '.join(twice)} given twice; each at most once")
    if overlap := sorted(set(spec.seeds) & set(spec.tuning_seeds)):
        problems.append(f"tuning_seeds: {overlap} are also evaluation seeds; tuning seeds must be held out")
    for i, cell in enumerate(spec.cells):
        for label in cell.privacy:
            if label not in labels:
                problems.append(f"cells[{i}] ({cell.name}).privacy: {label!r} is not {NODP!r} or a [[privacy]] name "
                                f"({', '.join(sorted(labels))})")
        for t in cell.tasks or []:
            if t not in tasks:
                problems.append(f"cells[{i}] ({cell.name}).tasks: {t!r} is not a task of the study ({', '.join(sorted(tasks))})")
        if cell.lr_from is not None and cell.lr_from not in labels:
            problems.append(f"cells[{i}] ({cell.name}).lr_from: {cell.lr_from!r} is not a privacy label ({', '.join(sorted(labels))})")
        if cell.lr_from is None:
            for m in cell.methods:
                if cell.grid(m, spec.lr_grid) is None:
                    problems.append(f"lr_grid.{m}: required (cells[{i}] ({cell.name}) tunes it; or give the block's own "
                                    f"cells[{i}].lr_grid.{m})")
        elif cell.lr_grid is not None:
            problems.append(f"cells[{i}] ({cell.name}).lr_grid: a block with lr_from tunes nothing (its rates come from "
                            f"{cell.lr_from!r}); remove one of the two")
    if spec.target.value is None and spec.target.reference not in [m for c in spec.cells if NODP in c.privacy and c.lr_from is None for m in c.methods]:
        problems.append(f"target.reference: {spec.target.reference!r} must be a tuned method of a cell without DP "
                        "(the target is its final accuracy on the tuning seeds)")
    if len({c.name for c in spec.cells}) != len(spec.cells):
        problems.append("cells: names must be unique")
    problems += _stop_problems(spec)
    problems += _setting_problems(spec)
    if problems:
        raise StudyError(problems, source)
    return spec


def _stop_problems(spec: ReviewSpec) -> list[str]:
    """A target stop only where what is read from the stopped runs is their crossing
    (docs/studies.md §2.1): tuning by restricted steps to the target, an evaluation declared to
    read crossings alone."""
    problems = []
    if spec.tuning.stop_at_target and spec.tuning.score != "rmst":
        problems.append(f"tuning.stop_at_target: needs tuning.score = 'rmst'; with score = {spec.tuning.score!r} a tuning "
                        "run is scored by its final accuracy, which a run stopped at its target does not measure (it ends "
                        "at its crossing, not at step T)")
    if spec.evaluation.stop_at_target and spec.evaluation.reads != "crossings":
        problems.append(f"evaluation.stop_at_target: needs evaluation.reads = 'crossings' (got {spec.evaluation.reads!r}); "
                        "a run stopped at its target has no final accuracy, no ε spent over its T steps and no bias of all "
                        "T steps, which the evaluation reads unless the spec declares it reads the crossings alone")
    return problems


def _setting_problems(spec: ReviewSpec) -> list[str]:
    """What the tasks, DP settings and grids must satisfy together: unique names, a setting's
    tasks among the study's, at most one way of giving ξ, the participation cap's k, and no
    learning rate twice in a grid (the same run, counted as two)."""
    problems = []
    tasks = [t.name for t in spec.tasks]
    names = [p.name for p in spec.privacy]
    if len(set(tasks)) != len(tasks):
        problems.append("tasks: task names must be unique")
    if len(set(names)) != len(names) or NODP in names:
        problems.append(f"privacy: the names of the settings must be unique and not {NODP!r}")
    for i, p in enumerate(spec.privacy):
        for t in p.tasks or []:
            if t not in tasks:
                problems.append(f"privacy[{i}].tasks: {t!r} is not a task of the study ({', '.join(dict.fromkeys(tasks))})")
        if sum(x is not None for x in (p.xi, p.gamma, p.xi_over_sigma)) > 1:
            problems.append(f"privacy[{i}] ({p.name}): give at most one of xi, gamma, xi_over_sigma")
        if p.noise_multiplier is not None and "epsilon" in p.model_fields_set:
            problems.append(f"privacy[{i}] ({p.name}): give epsilon (σ calibrated to it) or noise_multiplier (σ itself), not both")
        if p.noise_multiplier == 0 and p.gamma is None:
            problems.append(f"privacy[{i}] ({p.name}).gamma: required with noise_multiplier = 0 (clip only: the counts carry "
                            "no noise, so ξ is 0 and cannot be given)")
        if p.sampling == "participation-cap" and p.max_participations is None:
            problems.append(f"privacy[{i}] ({p.name}).max_participations: required with sampling = 'participation-cap'")
    grids = [("", spec.lr_grid)] + [(f"cells[{i}].", c.lr_grid) for i, c in enumerate(spec.cells) if c.lr_grid is not None]
    for where, grid in grids:
        for method in spec.methods():
            values = grid.of(method) or []
            if twice := sorted({repr(v) for v in values if values.count(v) > 1}):
                problems.append(f"{where}lr_grid.{method}: {', '.join(twice)} given twice; each value at most once (a repeated "
                                "one is the same run, counted as two)")
    return problems
