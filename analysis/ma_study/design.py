"""A validated study (docs/architecture.md, "Studies and sweeps"; docs/server-rules.md): the points
it runs and the scenario of each point.

:class:`Study` is built from a :class:`~analysis.ma_study.spec.StudySpec` and validates
*every* scenario the spec implies before anything runs, so a bad task, method or concurrency is
an error naming the task, method, K and field (exit 2 from the CLI), never a failure half-way.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncfl.components.registry import REGISTRY
from asyncfl.config import scenario as scenario_mod
from asyncfl.config.memory import check_memory
from asyncfl.errors import ScenarioError
from asyncfl.privacy.aggregator import build_privacy, resolve_sigma, run_shape
from analysis.ma_study.spec import NODP, PrivacyEntry, StudyError, StudySpec, TaskEntry, parse_spec, read_spec_file


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


class Study:
    """A validated spec plus what it needs to build every run's scenario."""

    def __init__(self, spec: StudySpec, base_dir: Path, source: str | None = None) -> None:
        self.spec = spec
        self.base_dir = base_dir
        self.source = source
        self._sigma: dict[tuple[str, str, str], float] = {}
        self.tasks = {t.name: t for t in spec.tasks}
        self.privacy = {p.name: p for p in spec.privacy}
        problems: list[str] = []
        if len(self.tasks) != len(spec.tasks):
            problems.append("tasks: task names must be unique")
        if len(self.privacy) != len(spec.privacy) or NODP in self.privacy:
            problems.append(f"privacy: the names of the settings must be unique and not {NODP!r}")
        for i, p in enumerate(spec.privacy):
            for t in p.tasks or []:
                if t not in self.tasks:
                    problems.append(f"privacy[{i}].tasks: {t!r} is not a task of the study ({', '.join(self.tasks)})")
            if sum(x is not None for x in (p.xi, p.gamma, p.xi_over_sigma)) > 1:
                problems.append(f"privacy[{i}] ({p.name}): give at most one of xi, gamma, xi_over_sigma")
            if p.sampling == "participation-cap" and p.max_participations is None:
                problems.append(f"privacy[{i}] ({p.name}).max_participations: required with sampling = 'participation-cap'")
        for field, values in (("seeds", spec.seeds), ("dp_seeds", spec.dp_seeds or []), ("k_multiples", spec.k_multiples),
                              ("methods", spec.methods), ("dp", spec.dp),
                              *((f"lr_grid.{m}", spec.lr_grid.of(m) or []) for m in spec.methods)):
            twice = sorted({repr(v) for v in values if list(values).count(v) > 1})
            if twice:
                problems.append(f"{field}: {', '.join(twice)} given twice; each value at most once (a repeated one is "
                                "the same run, counted as two)")
        for method in spec.methods:
            if self.spec.lr_grid.of(method) is None:
                problems.append(f"lr_grid.{method}: required for every method in methods (a list of server learning rates)")
        if spec.tuning.dp == "reuse-nodp" and True in spec.dp and False not in spec.dp:
            problems.append("tuning.dp = 'reuse-nodp': needs false in dp (the runs whose learning rates are reused)")
        if problems:
            raise StudyError(problems, source)
        self._bases: dict[str, dict[str, Any]] = {}
        for i, task in enumerate(spec.tasks):
            try:
                self._bases[task.name] = self._base_raw(task)
            except ScenarioError as exc:
                problems.extend(f"tasks[{i}] ({task.name}).scenario: {p}" for p in exc.problems)
        if problems:
            raise StudyError(problems, source)
        # every scenario of the study must validate before anything runs
        index = {t.name: i for i, t in enumerate(spec.tasks)}
        for task, method, K, label in self.combinations():
            point = Point(task, method, K, spec.seeds[0], label, self.spec.lr_grid.of(method)[0], spec.steps)
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

    def combinations(self) -> list[tuple[str, str, int, str]]:
        """Every (task, method, K, privacy label) the study runs: all of them here; a study that
        runs a subset (:mod:`analysis.ma_review`) validates only its own."""
        return [(task.name, method, K, label) for task in self.spec.tasks for method in self.spec.methods
                for K in self.concurrencies(method) for label in self.settings_of(task.name)]

    def digest(self) -> str:
        """SHA-256 of everything the study's runs follow from: the validated spec and each
        task's base scenario (an edited spec or scenario file gives another digest)."""
        return hashlib.sha256(json.dumps({"spec": self.spec.model_dump(mode="json", by_alias=True), "bases": self._bases},
                                         sort_keys=True, default=str).encode()).hexdigest()

    # -- scenarios ------------------------------------------------------------------------------
    def _base_raw(self, task: TaskEntry) -> dict[str, Any]:
        raw: dict[str, Any] = {}
        if task.scenario is not None:
            path = Path(task.scenario)
            if not path.is_absolute() and (self.base_dir / path).is_file():
                path = self.base_dir / path
            raw = scenario_mod.load(path).to_dict()
        return raw

    def settings_of(self, task: str) -> list[str]:
        """The privacy labels the task runs under: NODP (when ``dp`` holds false), then every DP
        setting that applies to it (when ``dp`` holds true)."""
        labels = [NODP] if False in self.spec.dp else []
        if True in self.spec.dp:
            labels += [p.name for p in self.spec.privacy if p.tasks is None or task in p.tasks]
        return labels

    @property
    def settings(self) -> list[str]:
        """Every privacy label of the study, in spec order."""
        return list(dict.fromkeys(label for t in self.spec.tasks for label in self.settings_of(t.name)))

    def seeds_of(self, label: str) -> list[int]:
        return self.spec.seeds_of(label != NODP)

    def concurrencies(self, method: str) -> list[int]:
        C = self.spec.buffer
        return [C] if method == "sync-momentum" else [m * C for m in self.spec.k_multiples]

    def method_overrides(self, method: str) -> dict[str, Any]:
        C = self.spec.buffer
        if method == "sync-momentum":
            return {"server.protocol": "sync", "server.rule": "momentum", "server.concurrency": None, "server.cohort": C}
        rule = {"fedbuff-sgd": "sgd", "fedbuff-momentum": "momentum", "fedbuff-nesterov": "nesterov",
                "fedbuff-ma-full": "ma-full", "fedbuff-ma-light": "ma-light", "fedbuff-fadas": "fadas",
                "fedbuff-ca2fl": "sgd", "fedbuff-sgd-delay": "sgd-delay"}[method]
        target = "nesterov" if method == "fedbuff-nesterov" else self.spec.ma_target
        out = {"server.protocol": "fedbuff", "server.rule": rule, "server.ma_target": target, "server.cohort": None}
        if method == "fedbuff-ca2fl":  # CA2FL calibrates with unweighted updates: p = 0 (docs/async-optimisers.md §4)
            out.update({"server.algorithm": "ca2fl", "server.staleness_exponent": 0.0})
        return out

    def privacy_overrides(self, point: Point, clients: int) -> dict[str, Any]:
        """The ``[privacy]`` keys of a point. σ is that of the *full* run (the study's ``steps``):
        a shorter tuning run is given it as ``noise_multiplier``, so it sees the full run's noise."""
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
        if p.xi_over_sigma is not None or point.steps != self.spec.steps:
            sigma = self.sigma(point, clients)
            if p.xi_over_sigma is not None:
                out["privacy.xi"] = p.xi_over_sigma * sigma
            if point.steps != self.spec.steps:
                out["privacy.epsilon"] = None
                out["privacy.noise_multiplier"] = sigma
        return out

    def sigma(self, point: Point, clients: int) -> float:
        """σ of the point's DP setting for the study's full run, by the runner's own calibration
        (:func:`~asyncfl.privacy.aggregator.resolve_sigma`: the sampling assumption, the noise
        cohort, the participation cap)."""
        protocol = "sync" if point.method == "sync-momentum" else "fedbuff"
        key = (point.task, point.privacy, protocol)
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
        task = self.tasks[point.task]
        raw = json.loads(json.dumps(self._bases[point.task]))  # deep copy
        overrides = {**flatten(self.spec.defaults), **flatten(task.overrides)}
        for key, value in overrides.items():
            scenario_mod.assign(raw, key, value)
        run_over = {
            "name": f"{self.spec.name}-{point.task}-{point.method}-K{point.K}-{point.privacy}-s{point.seed}",
            "seed": point.seed, "run.steps": point.steps, "run.eval_every": self.spec.eval_every,
            "server.buffer": self.spec.buffer, "server.concurrency": point.K, "server.lr": point.lr,
            **self.method_overrides(point.method),
        }
        for key, value in run_over.items():
            scenario_mod.assign(raw, key, value)
        clients = raw.get("population", {}).get("clients", scenario_mod.PopulationConfig().clients)
        for key, value in self.privacy_overrides(point, clients).items():
            scenario_mod.assign(raw, key, value)
        raw = _drop_none(raw)
        scenario_mod.drop_unowned(raw)  # a spec's key applies to the points whose components own it (β: not to SGD)
        return scenario_mod.validate(raw)

    def first_point(self, task: str) -> Point:
        """The task's first point (first method, its first K and lr, first seed, no DP): the
        scenario the report describes the task with."""
        spec = self.spec
        method = spec.methods[0]
        label = self.settings_of(task)[0]
        return Point(task, method, self.concurrencies(method)[0], self.seeds_of(label)[0], label, spec.lr_grid.of(method)[0], spec.steps)


def load_spec(path: str | Path) -> Study:
    """Read, validate and expand a spec file (relative task scenarios: see :class:`TaskEntry`)."""
    path = Path(path)
    return study_from_raw(read_spec_file(path), path.parent, str(path))


def study_from_raw(raw: dict[str, Any], base_dir: Path = Path("."), source: str | None = None) -> Study:
    return Study(parse_spec(raw, source), base_dir, source)
