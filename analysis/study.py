"""The momentum-approximation study (issue 8; DESIGN.md §3–5; seed paper 003).

A *study spec* (TOML, validated like a scenario: unknown keys and bad values are errors that
name the field) lists tasks, methods, concurrencies ``K = m·C``, seeds, DP off/on and a server
learning-rate grid per method. :func:`run_study` then

1. **tunes** the server learning rate of every (task, DP, K, method) on its grid — one seed
   (``tuning.seed``), ``tuning.steps`` server steps — and keeps the value with the highest
   *mean test accuracy over the run's evaluations* (the area under the accuracy curve: it
   rewards reaching a good accuracy early and staying there; a diverged run scores −∞). Every
   method gets the same grid size and the same tuning budget, so none is handicapped;
2. **runs** every (task, DP, K, method, seed) with its tuned learning rate for ``steps`` steps;
3. writes ``results.csv`` (one row per run), ``tuning.csv`` (every tuning run's score) and
   ``report.md`` with its figures (:mod:`analysis.study_report`).

Every run writes an ordinary run directory under ``DIR/runs/`` (its ``scenario.toml`` reruns it
with ``asyncfl run``). The study is resumable: a run whose ``summary.json`` says ``completed``
(or ``diverged``, which is deterministic) is not run again. When ``tuning.steps == steps`` and
the tuning seed is one of ``seeds``, the winning tuning run *is* that seed's main run.

Methods (the rule's server learning rate is the one tuned):

=====================  ==============================================================
``fedbuff-sgd``        FedBuff, ``server.rule = "sgd"``
``fedbuff-momentum``   FedBuff, naive server momentum (heavy ball, β)
``fedbuff-nesterov``   FedBuff, naive Nesterov (β)
``fedbuff-ma-full``    FedBuff, MA-full approximating ``ma_target`` (default momentum)
``fedbuff-ma-light``   FedBuff, MA-light approximating ``ma_target``
``sync-momentum``      synchronous FedAvg with server momentum, cohort = C (no staleness;
                       does not depend on K, so it runs once per task/DP/seed and its row
                       carries ``K = C``)
=====================  ==============================================================

The ``bias`` column is the implicit momentum bias ``‖AW − M‖_F/‖M‖_F`` of the run's own rule,
read from its ``bias.json`` (computed on the exact W): ``none`` (W against I) for SGD — its
target is M = I; ``momentum`` (A = M) for momentum; for Nesterov the run sets
``server.ma_target = "nesterov"`` (which only the MA rules and the analysis read), so its
``momentum`` entry is naive Nesterov's bias against the Nesterov M; ``ma_full`` / ``ma_light``
for the MA rules (against ``ma_target``'s M). Sync runs have W = I exactly and use A = M, so
their bias is 0.
"""

from __future__ import annotations

import json
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from asyncfl.config import scenario as scenario_mod
from asyncfl.errors import AsyncFLError, NumericalFault, ScenarioError

MethodName = Literal[
    "fedbuff-sgd", "fedbuff-momentum", "fedbuff-nesterov", "fedbuff-ma-full", "fedbuff-ma-light", "sync-momentum",
]
ALL_METHODS: tuple[str, ...] = (
    "fedbuff-sgd", "fedbuff-momentum", "fedbuff-nesterov", "fedbuff-ma-full", "fedbuff-ma-light", "sync-momentum",
)
METHOD_LABELS = {
    "fedbuff-sgd": "FedBuff + SGD", "fedbuff-momentum": "FedBuff + momentum", "fedbuff-nesterov": "FedBuff + Nesterov",
    "fedbuff-ma-full": "FedBuff + MA-full", "fedbuff-ma-light": "FedBuff + MA-light", "sync-momentum": "sync FedAvg + momentum",
}
# bias.json key holding the bias of each method's own rule (see the module docstring)
BIAS_KEY = {
    "fedbuff-sgd": "none", "fedbuff-momentum": "momentum", "fedbuff-nesterov": "momentum",
    "fedbuff-ma-full": "ma_full", "fedbuff-ma-light": "ma_light", "sync-momentum": None,
}
DONE_STATUSES = ("completed", "diverged")
RESULT_FIELDS = (
    "task", "method", "K", "seed", "dp", "lr", "steps_to_target", "time_to_target", "final_accuracy", "bias",
    "target_accuracy", "final_loss", "steps", "status", "run_dir",
)
TUNING_FIELDS = ("task", "dp", "K", "method", "lr", "score", "final_accuracy", "status", "chosen", "run_dir")


class StudyError(AsyncFLError, ValueError):
    """An invalid study spec: one line per problem, each naming the field."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = list(problems)
        head = f"invalid study spec {source}" if source else "invalid study spec"
        super().__init__(head + ":\n" + "\n".join(f"  - {p}" for p in self.problems))


# ---------------------------------------------------------------------------------------------
# The spec
class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False, populate_by_name=True)


PosInt = Annotated[int, Field(ge=1, le=10**9)]
LrList = Annotated[list[Annotated[float, Field(gt=0, le=1e6)]], Field(min_length=1, max_length=20)]


class TaskEntry(_Section):
    """One task: a base scenario file (relative to the spec, else to the working directory)
    and/or dotted overrides (``"task.name" = "digits"``), and the target test accuracy."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,60}$")]
    scenario: str | None = None
    overrides: dict[str, Any] = {}
    target_accuracy: Annotated[float, Field(gt=0, le=1)]


class PrivacyEntry(_Section):
    """DP settings of the ``dp = true`` runs (DESIGN §5): (ε, δ), clip S_Δ, and ξ or γ."""

    epsilon: Annotated[float, Field(gt=0, le=1e4)] = 2.0
    delta: Annotated[float, Field(gt=0, lt=1)] = 1e-6
    clip: Annotated[float, Field(gt=0, le=1e6)] | None = None  # None: the task scenario's privacy.clip
    xi: Annotated[float, Field(gt=0, le=1e6)] | None = None
    gamma: Annotated[float, Field(gt=0, le=1e6)] | None = None
    accountant: Literal["pld", "rdp"] = "pld"
    counts: Literal["raw", "clamp", "project"] = "project"


class TuningEntry(_Section):
    """Learning-rate tuning budget: one seed, ``steps`` server steps (default: the study's).
    ``dp = "reuse-nodp"`` gives every DP run the learning rate tuned without DP for the same
    task/K/method (saves the DP tuning runs; needs ``false`` in the study's ``dp``)."""

    steps: PosInt | None = None
    seed: Annotated[int, Field(ge=0, lt=2**63)] = 0
    dp: Literal["tune", "reuse-nodp"] = "tune"


class LrGrid(_Section):
    """Server learning-rate grid per method (values tried in tuning)."""

    fedbuff_sgd: LrList | None = Field(None, alias="fedbuff-sgd")
    fedbuff_momentum: LrList | None = Field(None, alias="fedbuff-momentum")
    fedbuff_nesterov: LrList | None = Field(None, alias="fedbuff-nesterov")
    fedbuff_ma_full: LrList | None = Field(None, alias="fedbuff-ma-full")
    fedbuff_ma_light: LrList | None = Field(None, alias="fedbuff-ma-light")
    sync_momentum: LrList | None = Field(None, alias="sync-momentum")

    def of(self, method: str) -> list[float] | None:
        return getattr(self, method.replace("-", "_"))


class StudySpec(_Section):
    """The whole study (see the module docstring and ``analysis/study_small.toml``)."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]{1,80}$")]
    buffer: PosInt  # C
    k_multiples: Annotated[list[PosInt], Field(min_length=1, max_length=20)]  # K = m·C
    seeds: Annotated[list[Annotated[int, Field(ge=0, lt=2**63)]], Field(min_length=1, max_length=100)]
    dp: Annotated[list[bool], Field(min_length=1, max_length=2)] = [False]
    dp_seeds: Annotated[list[Annotated[int, Field(ge=0, lt=2**63)]], Field(min_length=1, max_length=100)] | None = None
    steps: PosInt
    eval_every: PosInt = 5
    methods: Annotated[list[MethodName], Field(min_length=1)] = list(ALL_METHODS)
    ma_target: Literal["momentum", "nesterov"] = "momentum"
    # the report adds a speed-up table at this fraction of every task's target (read from the
    # same runs' curves; results.csv keeps the main target)
    secondary_target_fraction: Annotated[float, Field(gt=0, lt=1)] | None = None
    lr_grid: LrGrid
    defaults: dict[str, Any] = {}
    tasks: Annotated[list[TaskEntry], Field(min_length=1, max_length=50)]
    privacy: PrivacyEntry = PrivacyEntry()
    tuning: TuningEntry = TuningEntry()

    def seeds_of(self, dp: bool) -> list[int]:
        """The seeds of the DP (``dp_seeds``, default ``seeds``) or no-DP runs."""
        return list(self.dp_seeds) if dp and self.dp_seeds is not None else list(self.seeds)

    @property
    def tuning_steps(self) -> int:
        return self.tuning.steps if self.tuning.steps is not None else self.steps


_MODEL_AT = {"": StudySpec, "tasks": TaskEntry, "privacy": PrivacyEntry, "tuning": TuningEntry, "lr_grid": LrGrid}


def _loc_text(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _allowed(cls: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in cls.model_fields.items()]


def _spec_errors(exc: ValidationError) -> list[str]:
    def allowed_keys(loc: tuple) -> list[str]:
        parents = [p for p in loc[:-1] if isinstance(p, str)]
        return _allowed(_MODEL_AT.get(parents[-1] if parents else "", StudySpec))

    return scenario_mod.describe_errors(exc, _loc_text, allowed_keys)


def _flatten(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"server": {"lr": 1}}`` and ``{"server.lr": 1}`` both become ``{"server.lr": 1}``."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        if isinstance(value, dict):
            out.update(_flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Point:
    """One run of the study."""

    task: str
    method: str
    K: int
    seed: int
    dp: bool
    lr: float
    steps: int

    @property
    def dp_label(self) -> str:
        return "dp" if self.dp else "nodp"

    def rel_dir(self) -> Path:
        return Path("runs") / self.task / self.dp_label / f"K{self.K}" / self.method / f"lr{self.lr:g}" / f"T{self.steps}-s{self.seed}"


class Study:
    """A validated spec plus what it needs to build every run's scenario."""

    def __init__(self, spec: StudySpec, base_dir: Path, source: str | None = None) -> None:
        self.spec = spec
        self.base_dir = base_dir
        self.source = source
        self._sigma: dict[str, float] = {}
        self.tasks = {t.name: t for t in spec.tasks}
        problems: list[str] = []
        if len(self.tasks) != len(spec.tasks):
            problems.append("tasks: task names must be unique")
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
        for i, task in enumerate(spec.tasks):
            for method in spec.methods:
                for K in self.concurrencies(method):
                    for dp in spec.dp:
                        point = Point(task.name, method, K, spec.seeds[0], dp, self.spec.lr_grid.of(method)[0], spec.steps)
                        try:
                            self.scenario(point)
                        except ScenarioError as exc:
                            where = f"tasks[{i}] ({task.name}), {method}, K={K}, dp={dp}"
                            problems.extend(f"{where}: {p}" for p in exc.problems)
        if problems:
            raise StudyError(sorted(set(problems), key=problems.index), source)

    # -- scenarios ------------------------------------------------------------------------------
    def _base_raw(self, task: TaskEntry) -> dict[str, Any]:
        raw: dict[str, Any] = {}
        if task.scenario is not None:
            path = Path(task.scenario)
            if not path.is_absolute() and (self.base_dir / path).is_file():
                path = self.base_dir / path
            raw = scenario_mod.load(path).to_dict()
        return raw

    def concurrencies(self, method: str) -> list[int]:
        C = self.spec.buffer
        return [C] if method == "sync-momentum" else [m * C for m in self.spec.k_multiples]

    def method_overrides(self, method: str) -> dict[str, Any]:
        C = self.spec.buffer
        if method == "sync-momentum":
            return {"server.protocol": "sync", "server.rule": "momentum", "server.concurrency": None, "server.cohort": C}
        rule = {"fedbuff-sgd": "sgd", "fedbuff-momentum": "momentum", "fedbuff-nesterov": "nesterov",
                "fedbuff-ma-full": "ma-full", "fedbuff-ma-light": "ma-light"}[method]
        target = "nesterov" if method == "fedbuff-nesterov" else self.spec.ma_target
        return {"server.protocol": "fedbuff", "server.rule": rule, "server.ma_target": target, "server.cohort": None}

    def privacy_overrides(self, point: Point, clients: int) -> dict[str, Any]:
        if not point.dp:
            return {"privacy.enabled": False}
        p = self.spec.privacy
        out: dict[str, Any] = {
            "privacy.enabled": True, "privacy.delta": p.delta, "privacy.accountant": p.accountant,
            "privacy.counts": p.counts, "privacy.xi": p.xi, "privacy.gamma": p.gamma,
            "privacy.epsilon": p.epsilon, "privacy.noise_multiplier": None,
        }
        if p.clip is not None:
            out["privacy.clip"] = p.clip
        if point.steps != self.spec.steps:
            # A shorter tuning run must see the noise of the full run: σ calibrated for the
            # study's ``steps`` (the accountant composes over the run's own steps otherwise).
            out["privacy.epsilon"] = None
            out["privacy.noise_multiplier"] = self.sigma(point.task, clients)
        return out

    def sigma(self, task: str, clients: int) -> float:
        if task not in self._sigma:
            from asyncfl.privacy import calibrate_sigma

            p = self.spec.privacy
            self._sigma[task] = float(calibrate_sigma(p.epsilon, p.delta, self.spec.buffer / clients, self.spec.steps, p.accountant))
        return self._sigma[task]

    def scenario(self, point: Point) -> scenario_mod.Scenario:
        task = self.tasks[point.task]
        raw = json.loads(json.dumps(self._bases[point.task]))  # deep copy
        overrides = {**_flatten(self.spec.defaults), **_flatten(task.overrides)}
        for key, value in overrides.items():
            scenario_mod._assign(raw, key, value)
        run_over = {
            "name": f"{self.spec.name}-{point.task}-{point.method}-K{point.K}-{point.dp_label}-s{point.seed}",
            "seed": point.seed, "run.steps": point.steps, "run.eval_every": self.spec.eval_every,
            "server.buffer": self.spec.buffer, "server.concurrency": point.K, "server.lr": point.lr,
            **self.method_overrides(point.method),
        }
        for key, value in run_over.items():
            scenario_mod._assign(raw, key, value)
        clients = raw.get("population", {}).get("clients", scenario_mod.PopulationConfig().clients)
        for key, value in self.privacy_overrides(point, clients).items():
            scenario_mod._assign(raw, key, value)
        return scenario_mod.validate(_drop_none(raw))


def _drop_none(raw: dict[str, Any]) -> dict[str, Any]:
    return {k: _drop_none(v) if isinstance(v, dict) else v for k, v in raw.items() if v is not None}


def load_spec(path: str | Path) -> Study:
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise StudyError([f"{path}: no such study spec"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise StudyError([f"{path}: cannot be read ({exc})"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise StudyError([f"{path}: not valid TOML ({exc})"]) from None
    return study_from_raw(raw, path.parent, str(path))


def study_from_raw(raw: dict[str, Any], base_dir: Path = Path("."), source: str | None = None) -> Study:
    try:
        spec = StudySpec.model_validate(raw)
    except ValidationError as exc:
        raise StudyError(_spec_errors(exc), source) from None
    return Study(spec, base_dir, source)


# ---------------------------------------------------------------------------------------------
# Reading run directories
def read_status(run_dir: Path) -> str | None:
    try:
        return json.loads((run_dir / "summary.json").read_text()).get("status")
    except (OSError, ValueError):
        return None


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    from asyncfl.run.rundir import read_csv

    path = run_dir / "metrics.csv"
    if not path.is_file():
        return []
    rows = []
    for row in read_csv(path):
        rows.append({k: (float(v) if v not in ("", None) else math.nan) for k, v in row.items()})
    return rows


def first_reach(metrics: list[dict[str, float]], target: float) -> tuple[float, float]:
    """(step, virtual time) of the first evaluation with accuracy ≥ target; NaN if never."""
    for row in metrics:
        if row.get("accuracy", math.nan) >= target:
            return row["step"], row["time"]
    return math.nan, math.nan


def tuning_score(metrics: list[dict[str, float]], status: str | None) -> float:
    """Mean test accuracy over the evaluations after step 0; −∞ for a diverged run."""
    if status != "completed":
        return -math.inf
    acc = [r["accuracy"] for r in metrics if r["step"] > 0 and math.isfinite(r.get("accuracy", math.nan))]
    return sum(acc) / len(acc) if acc else -math.inf


def run_bias(run_dir: Path, method: str) -> float:
    key = BIAS_KEY[method]
    if key is None:
        return 0.0  # sync: W = I and A = M
    try:
        return float(json.loads((run_dir / "bias.json").read_text())[key])
    except (OSError, ValueError, KeyError, TypeError):
        return math.nan


# ---------------------------------------------------------------------------------------------
# Running
ProgressHook = Callable[[Point, str], None]


def execute(study: Study, point: Point, out: Path) -> str:
    """Run ``point`` into its directory unless already done; returns its status."""
    from asyncfl.run.runner import run_to_dir_blocking

    run_dir = out / point.rel_dir()
    status = read_status(run_dir)
    if status in DONE_STATUSES:
        return status
    try:
        run_to_dir_blocking(study.scenario(point), run_dir, overwrite=True)
    except NumericalFault:
        pass  # the run directory records the divergence (summary status "diverged")
    return read_status(run_dir) or "missing"


def plan_tuning(study: Study) -> list[tuple[tuple[str, bool, int, str], list[Point]]]:
    spec = study.spec
    groups = []
    for task in spec.tasks:
        for dp in sorted(spec.dp):  # no-DP first: tuning.dp = "reuse-nodp" reads its choices
            for method in spec.methods:
                for K in study.concurrencies(method):
                    grid = spec.lr_grid.of(method) or []
                    if dp and spec.tuning.dp == "reuse-nodp":
                        grid = []  # takes the no-DP choice (run_study)
                    points = [Point(task.name, method, K, spec.tuning.seed, dp, lr, spec.tuning_steps) for lr in grid]
                    groups.append(((task.name, dp, K, method), points))
    return groups


def run_study(study: Study, out: str | Path, progress: ProgressHook | None = None,
              total_hook: Callable[[int], None] | None = None) -> dict[str, Any]:
    """Tune, run and report (see the module docstring). Returns the rows written."""
    from analysis import study_report

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    spec = study.spec
    groups = plan_tuning(study)
    n_tune = sum(len(points) if len(points) > 1 else 0 for _, points in groups)
    n_main = sum(len(spec.seeds_of(key[1])) for key, _ in groups)
    if total_hook is not None:
        total_hook(n_tune + n_main)

    def run(point: Point) -> str:
        status = execute(study, point, out)
        if progress is not None:
            progress(point, status)
        return status

    tuning_rows, chosen = [], {}
    for key, points in groups:
        if not points:
            chosen[key] = chosen[(key[0], False, key[2], key[3])]
            continue
        best, best_score = points[0], -math.inf
        scored = []
        for point in points if len(points) > 1 else []:
            status = run(point)
            metrics = read_metrics(out / point.rel_dir())
            score = tuning_score(metrics, status)
            scored.append((point, score, metrics, status))
            if score > best_score:
                best, best_score = point, score
        chosen[key] = best.lr
        for point, score, metrics, status in scored:
            tuning_rows.append({
                "task": point.task, "dp": int(point.dp), "K": point.K, "method": point.method, "lr": point.lr,
                "score": score, "final_accuracy": metrics[-1]["accuracy"] if metrics else math.nan,
                "status": status, "chosen": int(point.lr == best.lr), "run_dir": str(point.rel_dir()),
            })

    rows = []
    for key, points in groups:
        task, dp, K, method = key
        target = study.tasks[task].target_accuracy
        for seed in spec.seeds_of(dp):
            point = Point(task, method, K, seed, dp, chosen[key], spec.steps)
            status = run(point)
            run_dir = out / point.rel_dir()
            metrics = read_metrics(run_dir)
            step, vtime = first_reach(metrics, target) if status == "completed" else (math.nan, math.nan)
            rows.append({
                "task": task, "method": method, "K": K, "seed": seed, "dp": int(dp), "lr": chosen[key],
                "steps_to_target": step, "time_to_target": vtime,
                "final_accuracy": metrics[-1]["accuracy"] if metrics else math.nan,
                "bias": run_bias(run_dir, method), "target_accuracy": target,
                "final_loss": metrics[-1]["loss"] if metrics else math.nan, "steps": spec.steps,
                "status": status, "run_dir": str(point.rel_dir()),
            })
    write_csv(out / "results.csv", RESULT_FIELDS, rows)
    write_csv(out / "tuning.csv", TUNING_FIELDS, tuning_rows)
    write_scenarios(study, chosen, out / "scenarios")
    study_report.write_report(study, out, rows, tuning_rows)
    return {"results": rows, "tuning": tuning_rows, "chosen": chosen}


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "" if not math.isfinite(value) else f"{value:.6g}"
    return str(value)


def write_csv(path: Path, fields: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
    import csv

    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(fields)
        for row in rows:
            writer.writerow([_cell(row.get(f, "")) for f in fields])


def write_scenarios(study: Study, chosen: dict[tuple[str, bool, int, str], float], folder: Path) -> list[Path]:
    """One scenario file per task × K (FedBuff + momentum at its tuned lr), with a header
    listing the ``--set`` lines that turn it into every other method of the study."""
    spec = study.spec
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    base_method = "fedbuff-momentum" if "fedbuff-momentum" in spec.methods else next(m for m in spec.methods if m != "sync-momentum")
    dp = False if False in spec.dp else True
    for task in spec.tasks:
        for m in spec.k_multiples:
            K = m * spec.buffer
            point = Point(task.name, base_method, K, spec.seeds[0], dp, chosen[(task.name, dp, K, base_method)], spec.steps)
            sc = study.scenario(point)
            lines = [f"# Study {spec.name}: task {task.name}, K = {m}C = {K}, C = {spec.buffer}, "
                     f"{'with' if dp else 'without'} DP, target accuracy {task.target_accuracy}.",
                     f"# Generated by `asyncfl study`; this file is {METHOD_LABELS[base_method]} at its tuned server lr.",
                     "# Other methods of the study (tuned server lr), e.g. `asyncfl run THIS.toml --set ...`:"]
            for method in spec.methods:
                if method == "sync-momentum":
                    lines.append(f"#   {METHOD_LABELS[method]:24s} see study_{task.name}_sync.toml")
                    continue
                lr = chosen[(task.name, dp, K, method)]
                over = {**study.method_overrides(method), "server.lr": lr}
                sets = " ".join(f"--set {k}={_toml_value(v)}" for k, v in over.items() if v is not None and k != "server.protocol")
                lines.append(f"#   {METHOD_LABELS[method]:24s} {sets}")
            if True in spec.dp:
                lines.append(f"# DP: --set privacy.enabled=true --set privacy.epsilon={spec.privacy.epsilon} (δ, ξ/γ, clip as in the spec)")
            path = folder / f"study_{task.name}_K{m}C.toml"
            path.write_text("\n".join(lines) + "\n" + sc.to_toml(), encoding="utf-8")
            written.append(path)
        if "sync-momentum" in spec.methods:
            C = spec.buffer
            point = Point(task.name, "sync-momentum", C, spec.seeds[0], dp, chosen[(task.name, dp, C, "sync-momentum")], spec.steps)
            head = (f"# Study {spec.name}: task {task.name}, {METHOD_LABELS['sync-momentum']}, cohort C = {C}, "
                    f"{'with' if dp else 'without'} DP, tuned server lr; generated by `asyncfl study`.\n")
            path = folder / f"study_{task.name}_sync.toml"
            path.write_text(head + study.scenario(point).to_toml(), encoding="utf-8")
            written.append(path)
    return written


def _toml_value(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    return f"{value:g}" if isinstance(value, float) else str(value)
