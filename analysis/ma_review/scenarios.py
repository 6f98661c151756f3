"""From a study point to its scenario (docs/ma-review.md §2; docs/architecture.md, "Studies and
sweeps"): a :class:`Point` is one run (task, method, K, seed, privacy label, server lr, steps),
and :class:`Scenarios` builds its scenario from the spec: the task's base scenario, the spec's
``[defaults]``, the task's overrides, the run's own keys, the method's
(:func:`analysis.ma_review.methods.method_overrides`) and the DP setting's.

:class:`Scenarios` validates the scenario of *every* combination the study runs when it is built,
so a bad task, method or concurrency is an error naming the task, method, K and field (exit 2
from the CLI), never a failure half-way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncfl.components.registry import REGISTRY
from asyncfl.config import scenario as scenario_mod
from asyncfl.config.memory import check_memory
from asyncfl.errors import ScenarioError
from asyncfl.privacy.aggregator import build_privacy, resolve_sigma, run_shape
from analysis.ma_review.entries import NODP, PrivacyEntry, TaskEntry
from analysis.ma_review.methods import method_overrides
from analysis.ma_review.spec import ReviewSpec, StudyError

#: a (task, method, K, privacy label) the study runs
Combination = tuple[str, str, int, str]


@dataclass(frozen=True)
class Point:
    """One run of the study."""

    task: str
    method: str
    K: int
    seed: int
    privacy: str  # NODP, or the name of a [[privacy]] setting
    lr: float
    steps: int

    @property
    def dp(self) -> bool:
        return self.privacy != NODP

    def rel_dir(self) -> Path:
        return Path("runs") / self.task / self.privacy / f"K{self.K}" / self.method / f"lr{self.lr:g}" / f"T{self.steps}-s{self.seed}"


def flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"server": {"lr": 1}}`` and ``{"server.lr": 1}`` both become ``{"server.lr": 1}``."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _drop_none(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: _drop_none(v) if isinstance(v, dict) else v for k, v in raw.items() if v is not None}


class Scenarios:
    """The scenario of every point of a study whose spec is ``spec`` and which runs
    ``combinations``; built only once all of them validate."""

    def __init__(self, spec: ReviewSpec, combinations: list[Combination], base_dir: Path, source: str | None = None) -> None:
        self.spec = spec
        self.base_dir = base_dir
        self.tasks = {t.name: t for t in spec.tasks}
        self.privacy = {p.name: p for p in spec.privacy}
        self._sigma: dict[tuple[str, str, str], float] = {}
        #: each task's base scenario as a table (``{}`` without a scenario file)
        self.bases: dict[str, dict[str, Any]] = {}
        problems: list[str] = []
        for i, entry in enumerate(spec.tasks):
            try:
                self.bases[entry.name] = self._base_raw(entry)
            except ScenarioError as exc:
                problems.extend(f"tasks[{i}] ({entry.name}).scenario: {p}" for p in exc.problems)
        if problems:
            raise StudyError(problems, source)
        # every scenario of the study must validate before anything runs
        index = {t.name: i for i, t in enumerate(spec.tasks)}
        seed = min(set(spec.seeds) | set(spec.tuning_seeds))
        for task, method, K, label in combinations:
            # at the grid's first rate (the rate changes no key that is validated)
            point = Point(task, method, K, seed, label, (spec.lr_grid.of(method) or [1.0])[0], spec.steps)
            try:
                sc = self.scenario(point)
                check_memory(sc)  # and that it fits this machine
                if sc.privacy.enabled:  # σ, ξ > σ, the cap: what the run checks when it starts
                    build_privacy(sc.privacy, int(sc.server.buffer), sc.population.clients, sc.run.steps,
                                  sc.server.max_staleness, sc.server.staleness_exponent,
                                  sc.server.protocol)
            except ScenarioError as exc:
                where = f"tasks[{index[task]}] ({task}), {method}, K={K}, privacy={label}"
                problems.extend(f"{where}: {p}" for p in exc.problems)
        if problems:
            raise StudyError(sorted(set(problems), key=problems.index), source)

    def _base_raw(self, task: TaskEntry) -> dict[str, Any]:
        raw: dict[str, Any] = {}
        if task.scenario is not None:
            path = Path(task.scenario)
            if not path.is_absolute() and (self.base_dir / path).is_file():
                path = self.base_dir / path
            raw = scenario_mod.load(path).to_dict()
        return raw

    def privacy_overrides(self, point: Point, clients: int) -> dict[str, Any]:
        """The ``[privacy]`` keys of a point: its DP setting's, with ξ = ``xi_over_sigma`` · σ
        where the setting gives ξ that way (σ: :meth:`sigma`)."""
        if not point.dp:
            return {"privacy.enabled": False}
        p = self.privacy[point.privacy]
        out: dict[str, Any] = {
            "privacy.enabled": True, "privacy.delta": p.delta, "privacy.accountant": p.accountant,
            "privacy.counts": p.counts, "privacy.xi": p.xi, "privacy.gamma": p.gamma,
            "privacy.epsilon": p.epsilon, "privacy.noise_multiplier": None, "privacy.sampling": p.sampling,
            "privacy.noise_cohort": p.noise_cohort,
        }
        if p.max_participations is not None:  # a key of the participation cap (refused under Poisson)
            out["privacy.max_participations"] = p.max_participations
        if p.min_separation is not None:
            out["privacy.min_separation"] = p.min_separation
        out["privacy.noise"] = p.noise
        if p.noise_bands is not None:  # a key of the banded mechanism
            out["privacy.noise_bands"] = p.noise_bands
        if p.clip is not None:
            out["privacy.clip"] = p.clip
        if p.noise_multiplier is not None:  # σ given: no calibration (0: clip only)
            out["privacy.epsilon"], out["privacy.noise_multiplier"] = None, p.noise_multiplier
        if p.xi_over_sigma is not None:
            out["privacy.xi"] = p.xi_over_sigma * self.sigma(point, clients)
        return out

    def sigma(self, point: Point, clients: int) -> float:
        """σ of the point's DP setting for a run of the spec's ``steps``, by the runner's own
        calibration (:func:`~asyncfl.privacy.aggregator.resolve_sigma`: the sampling assumption,
        the noise cohort, the participation cap)."""
        protocol = "sync" if point.method == "sync-momentum" else "fedbuff"
        key = (point.task, point.privacy, protocol)
        if self.privacy[point.privacy].noise_multiplier is not None:
            return float(self.privacy[point.privacy].noise_multiplier)
        if key not in self._sigma:
            p: PrivacyEntry = self.privacy[point.privacy]
            # the [privacy] section with the sampling assumption's own keys (the cap's k)
            section = scenario_mod.composed("privacy", (REGISTRY.get("sampling", p.sampling), REGISTRY.get("noise", p.noise)))
            own = {key: value for key, value in (("max_participations", p.max_participations),
                                                 ("min_separation", p.min_separation), ("noise_bands", p.noise_bands))
                   if value is not None}
            cfg = section(enabled=True, epsilon=p.epsilon, delta=p.delta, accountant=p.accountant,
                          sampling=p.sampling, noise_cohort=p.noise_cohort, noise=p.noise, **own)
            shape = run_shape(cfg, protocol, clients, self.spec.buffer, self.spec.steps)
            self._sigma[key] = float(resolve_sigma(cfg, shape)[0])
        return self._sigma[key]

    def scenario(self, point: Point) -> scenario_mod.Scenario:
        """The validated scenario of ``point`` (a :class:`~asyncfl.errors.ScenarioError` naming the field)."""
        task = self.tasks[point.task]
        raw = json.loads(json.dumps(self.bases[point.task]))  # deep copy
        overrides = {**flatten(self.spec.defaults), **flatten(task.overrides)}
        for key, value in overrides.items():
            scenario_mod.assign(raw, key, value)
        run_over = {
            "name": f"{self.spec.name}-{point.task}-{point.method}-K{point.K}-{point.privacy}-s{point.seed}",
            "seed": point.seed, "run.steps": point.steps, "run.eval_every": self.spec.eval_every,
            "server.buffer": self.spec.buffer, "server.concurrency": point.K, "server.lr": point.lr,
            **method_overrides(point.method, self.spec.buffer, self.spec.ma_target),
        }
        for key, value in run_over.items():
            scenario_mod.assign(raw, key, value)
        clients = raw.get("population", {}).get("clients", scenario_mod.PopulationConfig().clients)
        for key, value in self.privacy_overrides(point, clients).items():
            scenario_mod.assign(raw, key, value)
        raw = _drop_none(raw)
        scenario_mod.drop_unowned(raw)  # a spec's key applies to the points whose components own it (β: not to SGD)
        return scenario_mod.validate(raw)
