"""The confirmatory study's pre-registered plan (``analysis/confirm/plan.toml``): its claims, its
designs and each design's planned comparisons, read and validated, and the digests that tie a
design's results to the plan they were run under (docs/confirm.md §2).

* ``plan_digest``: SHA-256 of the plan file and of every spec file it names — what the report
  prints;
* ``design_digest``: SHA-256 of the plan's shared settings (name, α, bootstrap, claims), the
  design's own section and its spec file — recorded in a design's folder when its first run
  starts. A later revision that adds or changes *another* design leaves it unchanged, so only a
  change to this design (or to what every design shares) makes its results exploratory.
"""

from __future__ import annotations

import hashlib
import json
import tomllib
from pathlib import Path
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from asyncfl.errors import UsageError

#: the plan of the confirmatory study, beside this module
PLAN = Path(__file__).with_name("plan.toml")

Metric = Literal["log_time", "final_accuracy"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PlannedComparison(_Strict):
    """One paired comparison of ``rule`` against ``base`` in one cell (task, privacy label, K)."""

    claim: str
    task: str
    privacy: str
    K: Annotated[int, Field(ge=1)]
    rule: str
    base: str
    metric: Metric

    #: the base tuned over these tasks too (variants of one task, e.g. ``server.beta`` in their
    #: overrides): its runs are those of the task whose chosen rate scored best on the tuning seeds
    #: (docs/confirm.md §2), fixed before any evaluation seed is read
    base_tasks: list[str] | None = None

    def label(self) -> str:
        return f"{self.rule} vs {self.base}, {self.task}, {self.privacy}, K = {self.K}, {self.metric}"


class PlannedWidth(_Strict):
    """One tuning-width comparison (claim 3, the width rule of plan.toml's design 5): ``rule``'s
    width against ``base``'s in one cell, read from the tuning runs alone. ``over = "lr"``: over
    the learning rates of ``task``'s grid, in log₂ η; ``over = "beta"``: over ``beta_tasks``
    (each task carrying one β, the method at its chosen rate there), in log₂ 1/(1 − β)."""

    claim: str
    over: Literal["lr", "beta"]
    privacy: str
    K: Annotated[int, Field(ge=1)]
    rule: str
    base: str
    task: str | None = None
    beta_tasks: dict[str, Annotated[float, Field(gt=0, lt=1)]] | None = None

    def label(self) -> str:
        where = self.task if self.over == "lr" else "β over " + ", ".join(f"{b:g}" for b in sorted((self.beta_tasks or {}).values()))
        return f"{self.rule} vs {self.base}, {where}, {self.privacy}, K = {self.K}"


class Claim(_Strict):
    id: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-]{1,20}$")]
    statement: str


class Design(_Strict):
    """A design: its spec file (a review-study spec, ``analysis/ma_review.toml``'s format; ``""``
    while it is planned in the comments only), its cost in core-minutes, its primary comparisons
    (confirmatory, in their claims' Holm families) and secondary ones (reported, exploratory)."""

    id: Annotated[str, Field(pattern=r"^d[0-9]{1,2}$")]
    title: str
    spec: str = ""
    cost: Annotated[float, Field(ge=0)]
    comparisons: list[PlannedComparison] = []
    secondary: list[PlannedComparison] = []
    widths: list[PlannedWidth] | None = None


class Plan(_Strict):
    name: str
    revision: Annotated[int, Field(ge=1)]
    alpha: Annotated[float, Field(gt=0, lt=0.5)]
    bootstrap_resamples: Annotated[int, Field(ge=100, le=1_000_000)]
    bootstrap_seed: Annotated[int, Field(ge=0)]
    claims: Annotated[list[Claim], Field(min_length=1)]
    designs: Annotated[list[Design], Field(min_length=1)]

    def design(self, design_id: str) -> Design:
        for d in self.designs:
            if d.id == design_id:
                return d
        raise UsageError(f"design {design_id!r}: not in the plan (its designs: {', '.join(d.id for d in self.designs)})")

    def widths(self, claim: str) -> list[tuple[Design, PlannedWidth]]:
        """Every tuning-width comparison of ``claim``, in plan order (no p-value: no Holm family)."""
        return [(d, w) for d in self.designs for w in d.widths or [] if w.claim == claim]

    def family(self, claim: str) -> list[tuple[Design, PlannedComparison]]:
        """Every primary comparison of ``claim``, in plan order: the claim's Holm family."""
        return [(d, c) for d in self.designs for c in d.comparisons if c.claim == claim]


class LoadedPlan:
    """A validated plan with the folder its spec paths are relative to."""

    def __init__(self, plan: Plan, path: Path) -> None:
        self.plan, self.path = plan, path

    def spec_path(self, design: Design) -> Path | None:
        return (self.path.parent / design.spec) if design.spec else None

    def plan_digest(self) -> str:
        h = hashlib.sha256(self.path.read_bytes())
        for d in self.plan.designs:
            if (spec := self.spec_path(d)) is not None:
                h.update(d.spec.encode())
                h.update(spec.read_bytes())
        return h.hexdigest()

    def design_digest(self, design_id: str) -> str:
        d = self.plan.design(design_id)
        shared = self.plan.model_dump(exclude={"designs", "revision"})
        # fields left at None are not in it: a field added to the plan's format keeps every older design's digest
        h = hashlib.sha256(json.dumps({"shared": shared, "design": d.model_dump(exclude_none=True)}, sort_keys=True).encode())
        if (spec := self.spec_path(d)) is not None:
            h.update(spec.read_bytes())
        return h.hexdigest()


def load_plan(path: str | Path = PLAN) -> LoadedPlan:
    """Read and validate the plan (a :class:`UsageError` naming every bad field)."""
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: not a readable TOML plan ({exc})") from None
    try:
        plan = Plan.model_validate(raw)
    except ValidationError as exc:
        lines = [f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors()]
        raise UsageError(f"{path}: " + "; ".join(lines)) from None
    problems = []
    claims = {c.id for c in plan.claims}
    if len(claims) != len(plan.claims):
        problems.append("claims: ids must be unique")
    ids = [d.id for d in plan.designs]
    if len(set(ids)) != len(ids):
        problems.append("designs: ids must be unique")
    loaded = LoadedPlan(plan, path)
    for d in plan.designs:
        for c in [*d.comparisons, *d.secondary, *(d.widths or [])]:
            if c.claim not in claims:
                problems.append(f"designs ({d.id}).comparisons: claim {c.claim!r} is not one of {', '.join(sorted(claims))}")
        for w in d.widths or []:
            if (w.task is None) == (w.beta_tasks is None) or (w.over == "lr") != (w.task is not None):
                problems.append(f"designs ({d.id}).widths ({w.label()}): over = 'lr' takes task, over = 'beta' takes "
                                "beta_tasks (one of the two)")
            elif w.beta_tasks is not None and len(w.beta_tasks) < 2:
                problems.append(f"designs ({d.id}).widths ({w.label()}).beta_tasks: at least two β")
        spec = loaded.spec_path(d)
        if spec is not None and not spec.is_file():
            problems.append(f"designs ({d.id}).spec: {d.spec!r} is not a file beside the plan")
    if problems:
        raise UsageError(f"{path}: " + "; ".join(problems))
    return loaded
