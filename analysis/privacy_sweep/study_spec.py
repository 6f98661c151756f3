"""The ξ study's spec (docs/privacy.md, "Choosing ξ"): one privacy budget, a study task and a
check task, the seeds, the grids; read from TOML and validated, one line per problem naming the
field. Torch-free.

A spec file::

    name = "xi28"
    buffer = 100              # C
    k_multiple = 5            # K = k_multiple · C
    steps = 200               # T (σ is calibrated for these releases)
    eval_every = 5
    epsilon = 2.0
    delta = 1e-6
    noise_cohort = 1000       # M
    xi_span = [-2, 2]         # the coarse grid: ξ = ξ* · 2^k, k = -2 … 2 (ξ* the rule's choice)
    xi_floor = 1.2            # coarse points below this ξ/σ are replaced by it (ξ must exceed σ)
    xi_extra = [4.0]          # ξ/σ tried besides (e.g. another study's choice)
    xi_refine = 1.41421356    # then ξ_best / f and ξ_best · f
    lr_refine = 2.0           # the learning-rate grid is refined by this factor around its best
    xi_rounds = 1             # at most this many refinement rounds of the ξ grid (each: ≤ 3 new ξ)
    lr_rounds = 2             # … and of the learning-rate grid
    tuning_seeds = [1000]     # held out from every task's evaluation seeds
    reference = true          # also naive momentum at the floor ξ (tuned the same way), last
    reference_xi_over_sigma = 1000
    [defaults]                # dotted scenario keys shared by every run
    "population.clients" = 10000
    [[tasks]]
    name = "mnist1d"
    role = "study"            # or "check": the task the rule is checked on
    eval_seeds = [0, 1, 2, 3, 4]
    lr_grid = [0.15, 0.3, 0.6]
    [tasks.overrides]
    "task.name" = "mnist1d"
"""

from __future__ import annotations

import math
import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from asyncfl.config.files import MAX_SCENARIO_BYTES, read_text_limited
from asyncfl.errors import AsyncFLError

PosFloat = Annotated[float, Field(gt=0, allow_inf_nan=False)]
Seed = Annotated[int, Field(ge=0, le=2**31 - 1)]


class XiStudyError(AsyncFLError, ValueError):
    """An invalid ξ-study spec (exit code 2): one line per problem, each naming the field."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = list(problems)
        head = f"invalid ξ-study spec {source}" if source else "invalid ξ-study spec"
        super().__init__(head + ":\n" + "\n".join(f"  {p}" for p in self.problems))


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class TaskEntry(_Strict):
    """One task: its ``role`` (``study``: where ξ is studied; ``check``: where the rule is
    checked), evaluation seeds, the starting learning-rate grid and scenario overrides."""

    name: Annotated[str, Field(min_length=1, max_length=40, pattern=r"^[A-Za-z0-9_.-]+$")]
    role: Literal["study", "check"]
    eval_seeds: Annotated[list[Seed], Field(min_length=1)]
    lr_grid: Annotated[list[PosFloat], Field(min_length=1)]
    overrides: dict[str, Any] = Field(default_factory=dict)

    @field_validator("eval_seeds", "lr_grid")
    @classmethod
    def _distinct(cls, v: list[Any]) -> list[Any]:
        if len(set(v)) != len(v):
            twice = sorted({x for x in v if v.count(x) > 1})
            raise ValueError(f"{', '.join(map(repr, twice))} given twice; each value at most once")
        return sorted(v)


class XiStudySpec(_Strict):
    name: Annotated[str, Field(min_length=1, max_length=60, pattern=r"^[A-Za-z0-9_.-]+$")]
    buffer: Annotated[int, Field(ge=1)]
    k_multiple: Annotated[int, Field(ge=1, le=1000)]
    steps: Annotated[int, Field(ge=1, le=100_000)]
    eval_every: Annotated[int, Field(ge=1)]
    epsilon: PosFloat
    delta: Annotated[float, Field(gt=0, lt=1)]
    noise_cohort: Annotated[int, Field(ge=1)] | None = None
    xi_span: tuple[int, int] = (-2, 2)
    xi_floor: Annotated[float, Field(gt=1, allow_inf_nan=False)] = 1.2
    xi_extra: list[Annotated[float, Field(gt=1, allow_inf_nan=False)]] = Field(default_factory=list)
    xi_refine: Annotated[float, Field(gt=1, le=4, allow_inf_nan=False)] = math.sqrt(2.0)
    lr_refine: Annotated[float, Field(gt=1, le=10, allow_inf_nan=False)] = 2.0
    xi_rounds: Annotated[int, Field(ge=0, le=5)] = 1
    lr_rounds: Annotated[int, Field(ge=0, le=5)] = 2
    tuning_seeds: Annotated[list[Seed], Field(min_length=1)]
    reference: bool = True
    reference_xi_over_sigma: Annotated[float, Field(gt=10, allow_inf_nan=False)] = 1000.0
    target_fraction: Annotated[float, Field(gt=0, lt=1)] = 0.9
    defaults: dict[str, Any] = Field(default_factory=dict)
    tasks: Annotated[list[TaskEntry], Field(min_length=1)]

    @field_validator("tuning_seeds", "xi_extra")
    @classmethod
    def _distinct(cls, v: list[Any]) -> list[Any]:
        if len(set(v)) != len(v):
            twice = sorted({x for x in v if v.count(x) > 1})
            raise ValueError(f"{', '.join(map(repr, twice))} given twice; each value at most once "
                             "(a repeated seed is the same run counted twice)")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> "XiStudySpec":
        problems = []
        if self.xi_span[0] > self.xi_span[1]:
            problems.append(f"xi_span = {list(self.xi_span)}: the first exponent must not exceed the second")
        if self.noise_cohort is not None and self.noise_cohort < self.buffer:
            problems.append(f"noise_cohort = {self.noise_cohort}: must be at least buffer = {self.buffer}")
        names = [t.name for t in self.tasks]
        if len(set(names)) != len(names):
            problems.append(f"tasks: names {names} must be distinct")
        if [t.role for t in self.tasks].count("study") != 1:
            problems.append("tasks: exactly one task must have role = \"study\"")
        held = set(self.tuning_seeds)
        for t in self.tasks:
            if held & set(t.eval_seeds):
                problems.append(f"tasks.{t.name}.eval_seeds: {sorted(held & set(t.eval_seeds))} are tuning_seeds too; "
                                "tuning seeds must be held out from evaluation")
        if problems:
            raise ValueError("\n".join(problems))
        return self

    @property
    def K(self) -> int:
        return self.k_multiple * self.buffer

    def ordered_tasks(self) -> list[TaskEntry]:
        """The study task first, then the check tasks in spec order."""
        return sorted(self.tasks, key=lambda t: t.role != "study")


def parse_spec(raw: dict[str, Any], source: str | None = None) -> XiStudySpec:
    """Validate ``raw``; every problem in one :class:`XiStudyError`, each naming its field."""
    try:
        return XiStudySpec.model_validate(raw)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            where = ".".join(str(p) for p in err["loc"])
            if not where:  # the cross-field checks: one line each, naming their own fields
                problems += str(err["msg"]).removeprefix("Value error, ").split("\n")
                continue
            problems.append(f"{where}: {str(err['msg']).removeprefix('Value error, ')}" + (f" (got {err['input']!r})" if "input" in err
                                                          and not isinstance(err["input"], dict) else ""))
        raise XiStudyError(problems, source) from None


def load_spec(path: str | Path) -> XiStudySpec:
    """Read and validate a spec file."""
    path = Path(path)
    # a regular file of at most MAX_SCENARIO_BYTES, UTF-8: /dev/zero, a pipe or a Latin-1 file is refused by name
    text = read_text_limited(path, MAX_SCENARIO_BYTES, lambda message: XiStudyError([message.removeprefix(f"{path}: ")], str(path)))
    try:
        raw = tomllib.loads(text)
    except RecursionError:
        raise XiStudyError(["not valid TOML (arrays or tables nested too deeply)"], str(path)) from None
    except tomllib.TOMLDecodeError as exc:
        raise XiStudyError([f"not valid TOML: {exc}"], str(path)) from None
    return parse_spec(raw, str(path))
