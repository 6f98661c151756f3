"""The review study's cells and points (docs/ma-review.md §2).

:class:`ReviewStudy` is a validated review spec expanded into its cells, with the scenario of
every point (:class:`analysis.ma_review.scenarios.Scenarios`: those of the cells only, so a method
that cannot run under DP, CA2FL, is never asked to), validated in full before anything runs, and
the digest its study folder is claimed under."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncfl import allow_modules
from asyncfl.config import scenario as scenario_mod
from asyncfl.studies.stopping import target_stop

from analysis.ma_review.scenarios import Point, Scenarios
from analysis.ma_review.spec import ReviewSpec, StudyError, parse_review, read_spec_file


@dataclass(frozen=True)
class CellKey:
    """One cell: its block's name, and the task, privacy label, K and method it runs."""

    block: str
    task: str
    privacy: str
    K: int
    method: str
    lr_from: str | None = None
    lr_grid: tuple[float, ...] = ()  # the coarse grid it is tuned on (empty: it takes ``lr_from``'s rate)
    evaluate: bool = True  # run on the evaluation seeds (False: tuned only)

    @property
    def tuned(self) -> bool:
        return self.lr_from is None

    @property
    def source(self) -> tuple[str, str, int, str]:
        """The (task, privacy, K, method) whose tuned learning rate the cell uses."""
        return (self.task, self.lr_from or self.privacy, self.K, self.method)

    def point(self, seed: int, lr: float, steps: int) -> Point:
        return Point(self.task, self.method, self.K, seed, self.privacy, lr, steps)


class ReviewStudy:
    """A validated review spec: its cells (:meth:`cells`), every point's scenario
    (:meth:`scenario`) and the digest of everything its runs follow from (:meth:`digest`)."""

    def __init__(self, review: ReviewSpec, base_dir: Path, source: str | None = None) -> None:
        self.review, self._source = review, source
        self._cells = self._expand(review)
        problems = []
        tuned = {c.source for c in self._cells if c.tuned}
        for c in self._cells:
            if not c.tuned and c.source not in tuned:
                problems.append(f"cells ({c.block}).lr_from: {c.lr_from!r} has no tuned cell for task {c.task}, "
                                f"K = {c.K}, {c.method} to take the learning rate from")
        if problems:
            raise StudyError(sorted(set(problems)), source)
        self.scenarios = Scenarios(review, [(c.task, c.method, c.K, c.privacy) for c in self._cells], base_dir, source)
        if review.stops():  # the study sets run.stop itself: a stop of the spec's would be replaced without a word
            seed = min(set(review.seeds) | set(review.tuning_seeds))
            for task in dict.fromkeys(c.task for c in self._cells):
                cell = next(c for c in self._cells if c.task == task)
                lr = (cell.lr_grid or (1.0,))[0]
                if self.scenario(cell.point(seed, lr, review.steps)).run.stop is not None:
                    problems.append(f"tasks ({task}): run.stop is set by its scenario, [defaults] or overrides; with "
                                    "tuning.stop_at_target or evaluation.stop_at_target the study sets each run's stop "
                                    "(its target): remove the spec's own")
            if problems:
                raise StudyError(problems, source)

    @property
    def spec(self) -> ReviewSpec:
        """The review spec (as :attr:`review`): its ``steps``, ``buffer`` and ``lr_grid`` are the runs'."""
        return self.review

    def _expand(self, review: ReviewSpec) -> list[CellKey]:
        C = review.buffer
        out: list[CellKey] = []
        for block in review.cells:
            for task in block.tasks or [t.name for t in review.tasks]:
                for label in block.privacy:
                    for method in block.methods:
                        ks = [C] if method == "sync-momentum" else [m * C for m in block.k_multiples]
                        grid = tuple(sorted(block.grid(method, review.lr_grid) or [])) if block.lr_from is None else ()
                        out.extend(CellKey(block.name, task, label, K, method, block.lr_from, grid, block.evaluate)
                                   for K in ks)
        # one cell per (task, privacy, K, method): a later block naming it again adds nothing, so it
        # may not ask for it otherwise (another grid, or tuned-only against evaluated)
        seen: dict[tuple[str, str, int, str], CellKey] = {}
        problems = []
        for cell in out:
            first = seen.setdefault((cell.task, cell.privacy, cell.K, cell.method), cell)
            if (first.lr_from, first.lr_grid, first.evaluate) != (cell.lr_from, cell.lr_grid, cell.evaluate):
                problems.append(f"cells ({cell.block}): names {cell.method} at task {cell.task}, {cell.privacy}, K = {cell.K}, "
                                f"already a cell of block {first.block!r} with another lr_from, lr_grid or evaluate")
        if problems:
            raise StudyError(sorted(set(problems)), self._source)
        return list(seen.values())

    def cells(self) -> list[CellKey]:
        return list(self._cells)

    def scenario(self, point: Point, stop_at: float | None = None) -> scenario_mod.Scenario:
        """The point's scenario; with ``stop_at`` (a target accuracy) it stops at the first
        evaluation reaching it (``run.stop``, :func:`asyncfl.studies.stopping.target_stop`;
        docs/studies.md §2.1). Without, nothing is added: the scenario is the one the spec
        always built."""
        scenario = self.scenarios.scenario(point)
        return scenario if stop_at is None else scenario.replace(**{"run.stop": target_stop([stop_at])})

    def digest(self) -> str:
        """SHA-256 of everything the study's runs follow from: the spec
        (:meth:`~analysis.ma_review.spec.ReviewSpec.digest_table`) and each task's base scenario
        (an edited spec or scenario file gives another digest)."""
        return hashlib.sha256(json.dumps({"spec": self.review.digest_table(), "bases": self.scenarios.bases},
                                         sort_keys=True, default=str).encode()).hexdigest()


#: the review's own module a spec may name a component of (its oracle counts, ``oracle.py``)
OWN_MODULE = "analysis.ma_review.oracle"


def load_review(path: str | Path) -> ReviewStudy:
    """Read, validate and expand a review spec file. The review's own oracle counts are the
    study's code, not the spec's: their module (:data:`OWN_MODULE`, and no other) is allowed to
    be imported by name (docs/extending.md §3), here and in the runs' worker processes."""
    allow_modules(OWN_MODULE)
    path = Path(path)
    return review_from_raw(read_spec_file(path), path.parent, str(path))


def review_from_raw(raw: dict[str, Any], base_dir: Path = Path("."), source: str | None = None) -> ReviewStudy:
    return ReviewStudy(parse_review(raw, source), base_dir, source)
