"""Scenario files: TOML → validated, typed, immutable configuration (docs/architecture.md §2).

A scenario is the whole description of a run. Every key has a type, a range and a default; a
section with a ``dist`` / ``name`` tag selects one registered variant (latency models, tasks),
and each variant accepts only its own keys. Every key that names a plug-in takes its allowed
values from that kind's registry (:mod:`asyncfl.config.registries`; docs/architecture.md), so
the scenario accepts exactly the names that exist. The tagged sections' variants live in
:mod:`asyncfl.config.latency` and :mod:`asyncfl.config.tasks` and are re-exported here.
Every problem is reported as ``section.key = value: what is allowed`` through
:class:`ScenarioError`, never a traceback.

``--set section.key=value`` overrides are applied to the raw TOML table before validation, so
they are checked exactly like keys in the file.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping

import tomli_w
from pydantic import Field, ValidationError

from asyncfl.config.base import MAX_INT, NonNegFloat, NonNegInt, PosFloat, PosInt, Probability, Section
from asyncfl.config.latency import (
    ConstantLatency, ExponentialLatency, FedScaleLatency, HalfNormalLatency, LatencyConfig,
    LogNormalLatency, ParetoLatency, TraceLatency, UniformLatency,
)
from asyncfl.config.registries import (
    ACCOUNTANTS, ALGORITHMS, COUNT_MODES, EXECUTORS, LATENCIES, PROTOCOLS, RULES, SAMPLINGS, TASKS,
)
from asyncfl.config.tasks import DigitsTask, GaussianMLPTask, MNIST1DTask, QuadraticTask, SyntheticTask, TaskConfig
from asyncfl.errors import ScenarioError
from asyncfl.registry import Registry

__all__ = [
    # sections and their value types (re-exported: code imports them from here)
    "Section", "MAX_INT", "PosInt", "NonNegInt", "PosFloat", "NonNegFloat", "Probability",
    "PopulationConfig", "ClientConfig", "ServerConfig", "RunConfig", "PrivacyConfig",
    "ConstantLatency", "ExponentialLatency", "HalfNormalLatency", "LogNormalLatency", "UniformLatency",
    "ParetoLatency", "TraceLatency", "FedScaleLatency", "LatencyConfig",
    "QuadraticTask", "SyntheticTask", "DigitsTask", "GaussianMLPTask", "MNIST1DTask", "TaskConfig",
    "LATENCIES", "TASKS", "SECTIONS", "TAGGED", "Scenario",
    # reading and validating
    "validate", "load", "parse_override", "assign", "describe_errors", "resolve_path", "PACKAGE_PREFIX", "FILE_KEYS",
]


# ---------------------------------------------------------------------------------------------
# [population]
class PopulationConfig(Section):
    """``clients`` (N); per-client speed multiplier ~ LogNormal(0, ``speed_sigma``), times
    ``slow_factor`` for ``round(slow_fraction × N)`` uniformly chosen clients (a bimodal fleet);
    availability of clients over virtual time (``always`` | ``diurnal`` | ``trace``)."""

    clients: Annotated[int, Field(ge=1, le=10**8)] = 100
    speed_sigma: Annotated[float, Field(ge=0, le=10)] = 0.0
    slow_fraction: Probability = 0.0
    slow_factor: Annotated[float, Field(ge=1, le=1e6)] = 1.0
    availability: Literal["always", "diurnal", "trace"] = "always"
    # diurnal: each client is online for a fraction `online_fraction` of every `period`,
    # starting at a client-specific phase drawn uniformly in [0, period): online at time x iff
    # (x − phase) mod period < online_fraction × period.
    period: PosFloat = 24.0
    online_fraction: Annotated[float, Field(gt=0, le=1)] = 0.5
    availability_file: str | None = None  # FedScale-format availability trace (availability = "trace")
    # milliseconds of the availability trace per unit of virtual time; default: the FedScale
    # latency's time_unit_ms, else 1000 (one unit = one second)
    availability_time_unit_ms: PosFloat | None = None


# ---------------------------------------------------------------------------------------------
# [client]
class ClientConfig(Section):
    """Local solver. Local work is ``local_steps`` gradient steps or ``epochs`` passes (one of
    them); ``batch_size`` absent = full batch; ``mu`` adds (μ/2)‖θ − centre‖² (FedProx etc.)."""

    solver: Literal["sgd", "exact"] = "sgd"
    lr: PosFloat = 0.05
    batch_size: PosInt | None = None
    local_steps: PosInt | None = None
    epochs: PosInt | None = None
    mu: NonNegFloat = 0.0


# ---------------------------------------------------------------------------------------------
# [server]
class ServerConfig(Section):
    """Protocol, buffer and server rule (docs/protocol.md §7, docs/server-rules.md, §6).

    ``concurrency`` K and ``buffer`` C for FedBuff (C = 1 is FedAsync); ``cohort`` clients per
    round for ``sync`` (``buffer`` ≤ cohort accepts the first C arrivals of an over-selected
    cohort; default: the whole cohort). ``max_staleness`` absent = unbounded. ``protocol``,
    ``rule`` and ``algorithm`` are names in the PROTOCOLS, RULES (docs/server-rules.md) and
    ALGORITHMS (docs/baselines.md) registries.
    """

    protocol: Literal[PROTOCOLS.names] = "fedbuff"
    concurrency: PosInt | None = None
    buffer: PosInt | None = None
    cohort: PosInt | None = None
    staleness_exponent: Annotated[float, Field(ge=0, le=100)] = 0.0
    max_staleness: NonNegInt | None = None
    rule: Literal[RULES.names] = "sgd"
    lr: PosFloat = 1.0
    beta: Annotated[float, Field(ge=0, lt=1)] = 0.9
    adam_beta2: Annotated[float, Field(ge=0, lt=1)] = 0.999
    adam_eps: PosFloat = 1e-8
    # momentum approximation (docs/server-rules.md)
    ma_target: Literal["momentum", "nesterov"] = "momentum"
    ma_ridge: NonNegFloat = 1e-3
    ma_window: PosInt | None = None
    # synchronous algorithms (docs/baselines.md)
    algorithm: Literal[ALGORITHMS.names] = "fedavg"
    alpha: Annotated[float, Field(gt=0, lt=2)] = 1.0
    regularizer: Literal["none", "l1", "l2"] = "none"
    reg: NonNegFloat = 0.0
    skip_probability: Annotated[float, Field(ge=0, lt=1)] = 0.0


# ---------------------------------------------------------------------------------------------
# [run]
class RunConfig(Section):
    """Length, evaluation, placement of compute, checkpoints and numerical guards."""

    steps: Annotated[int, Field(ge=1, le=10**9)] = 100
    eval_every: PosInt = 10
    # also evaluate the training objective over every client's data (one forward pass over the
    # whole population's samples per evaluation); off: metrics.csv leaves train_loss empty
    train_loss: bool = True
    executor: Literal[EXECUTORS.names] = "inline"
    workers: Annotated[int, Field(ge=1, le=4096)] = 1
    batched: bool = False  # train clients of one model version together (torch.func.vmap)
    ray_address: str | None = None
    # torch intra-op threads. Client models are small: one thread per job is fastest, and
    # parallelism across clients comes from the executor. 0 = leave torch's default.
    torch_threads: Annotated[int, Field(ge=0, le=4096)] = 1
    checkpoint_every: NonNegInt = 0  # 0 = no periodic checkpoints
    max_update_norm: PosFloat | None = None
    divergence_loss: PosFloat = 1e8  # a loss above this (or NaN) stops the run


# ---------------------------------------------------------------------------------------------
# [privacy]
class PrivacyConfig(Section):
    """Private aggregation (docs/privacy.md). Give ``epsilon`` (σ is calibrated) or
    ``noise_multiplier`` (σ directly, ε is reported); give ``xi`` (> σ) or ``gamma``.
    ``sampling``, ``accountant`` and ``counts`` are names in the SAMPLINGS, ACCOUNTANTS and
    COUNT_MODES registries (docs/privacy.md).

    ``sampling`` is what the reported ε rests on: ``"poisson"`` (default; every step accounted as
    Poisson subsampling at ``q = M/N``: an approximation, FedBuff does not Poisson-sample, §5) or
    ``"participation-cap"`` (the engine lets no client contribute to more than
    ``max_participations`` = k server steps, and ε is that of k Gaussian releases without
    amplification: a guarantee for any dispatch order, §6). ``noise_cohort`` = M ≥ C (default C)
    simulates the noise of a deployment whose buffer sums M uploads: the noise is scaled by C/M
    and the accounting is the deployment's (§7)."""

    enabled: bool = False
    clip: PosFloat = 1.0
    epsilon: PosFloat | None = None
    delta: Annotated[float, Field(gt=0, lt=1)] = 1e-6
    noise_multiplier: PosFloat | None = None
    xi: PosFloat | None = None
    gamma: PosFloat | None = None
    sampling: Literal[SAMPLINGS.names] = "poisson"
    max_participations: PosInt | None = None  # k; required with sampling = "participation-cap"
    noise_cohort: PosInt | None = None  # M ≥ server.buffer; None: M = C
    accountant: Literal[ACCOUNTANTS.names] = "pld"
    counts: Literal[COUNT_MODES.names] = "project"


SECTIONS: dict[str, type[Section]] = {
    "population": PopulationConfig,
    "client": ClientConfig,
    "server": ServerConfig,
    "run": RunConfig,
    "privacy": PrivacyConfig,
}
TAGGED: dict[str, tuple[Registry, str]] = {
    # section: (registry of its variants — its field is "section.tag" —, default tag)
    "latency": (LATENCIES, "exponential"),
    "task": (TASKS, "synthetic"),
}
TOP_LEVEL = ("name", "seed")


@dataclass(frozen=True)
class Scenario:
    """A validated scenario. Derived values (``buffer``, ``concurrency``) are resolved."""

    name: str
    seed: int
    population: PopulationConfig
    latency: LatencyConfig
    task: TaskConfig
    client: ClientConfig
    server: ServerConfig
    run: RunConfig
    privacy: PrivacyConfig

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "seed": self.seed}
        for section in ("population", "latency", "task", "client", "server", "run", "privacy"):
            out[section] = getattr(self, section).model_dump(exclude_none=True)
        return out

    def to_toml(self) -> str:
        return tomli_w.dumps(self.to_dict())

    def replace(self, **overrides: Any) -> "Scenario":
        """A copy with dotted-key overrides (``{"server.rule": "momentum"}``), re-validated."""
        raw = self.to_dict()
        for key, value in overrides.items():
            assign(raw, key, value)
        return validate(raw)


# ---------------------------------------------------------------------------------------------
def _suggest(key: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else "."
    return f"{hint} Allowed: {', '.join(sorted(allowed))}"


def _fmt(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def describe_errors(
    exc: ValidationError, where: Callable[[tuple], str], allowed_keys: Callable[[tuple], list[str]]
) -> list[str]:
    """One ``field = value: what is allowed`` line per pydantic error. ``where(loc)`` names the
    field; ``allowed_keys(loc)`` lists the keys of the table holding an unknown key (for the
    "did you mean" suggestion). Shared by scenario files and study specs."""
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        name = where(loc)
        if err["type"] == "extra_forbidden":
            out.append(f"{name}: unknown key{_suggest(str(loc[-1]), allowed_keys(loc))}")
        elif err["type"] == "missing":
            out.append(f"{name}: required key is missing")
        else:
            msg = err["msg"].replace("Input should be", "must be")
            out.append(f"{name} = {_fmt(err.get('input'))}: {msg}")
    return out


def _errors_of(exc: ValidationError, prefix: str) -> list[str]:
    return describe_errors(
        exc,
        lambda loc: ".".join(str(p) for p in (prefix, *loc) if p != ""),
        lambda loc: list(exc.title and _fields_of(exc.title) or []),
    )


_ALL_MODELS: dict[str, type[Section]] = {
    cls.__name__: cls
    for cls in [*SECTIONS.values(), *(e.config for reg, _ in TAGGED.values() for e in reg.entries())]
}


def _fields_of(model_name: str) -> list[str]:
    cls = _ALL_MODELS.get(model_name)
    return list(cls.model_fields) if cls else []


def _validate_section(cls: type[Section], raw: Any, prefix: str, errors: list[str]) -> Section | None:
    if not isinstance(raw, Mapping):
        errors.append(f"{prefix} = {_fmt(raw)}: must be a table ([{prefix}])")
        return None
    try:
        return cls.model_validate(dict(raw))
    except ValidationError as exc:
        errors.extend(_errors_of(exc, prefix))
        return None


def _validate_tagged(section: str, raw: Any, errors: list[str]) -> Section | None:
    registry, default = TAGGED[section]
    tag_key = registry.field.partition(".")[2]
    if not isinstance(raw, Mapping):
        errors.append(f"{section} = {_fmt(raw)}: must be a table ([{section}])")
        return None
    tag = raw.get(tag_key, default)
    if tag not in registry:
        errors.append(registry.unknown(tag))
        return None
    return _validate_section(registry.config(tag), {**raw, tag_key: tag}, section, errors)


def validate(raw: Mapping[str, Any]) -> Scenario:
    """Validate a raw scenario table. Raises :class:`ScenarioError` listing every problem."""
    errors: list[str] = []
    known = [*TOP_LEVEL, *SECTIONS, *TAGGED]
    for key in raw:
        if key not in known:
            errors.append(f"{key}: unknown key{_suggest(key, known)}")
    name = raw.get("name", "unnamed")
    if not isinstance(name, str) or not name or len(name) > 200:
        errors.append(f"name = {_fmt(name)}: must be a non-empty string of at most 200 characters")
    seed = raw.get("seed", 0)
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
        errors.append(f"seed = {_fmt(seed)}: must be an integer in [0, 2^63)")
    parts: dict[str, Any] = {}
    for section, cls in SECTIONS.items():
        parts[section] = _validate_section(cls, raw.get(section, {}), section, errors)
    for section in TAGGED:
        parts[section] = _validate_tagged(section, raw.get(section, {}), errors)
    if errors:
        raise ScenarioError(errors)
    scenario = Scenario(name=name, seed=seed, **parts)
    return _cross_check(scenario)


def _cross_check(sc: Scenario) -> Scenario:
    """Relations between keys of different sections; resolves derived defaults."""
    errors: list[str] = []
    n, server, client = sc.population.clients, sc.server, sc.client
    server_updates: dict[str, Any] = {}

    if (client.local_steps is None) == (client.epochs is None):
        if client.solver == "sgd":
            errors.append(
                f"client.local_steps = {_fmt(client.local_steps)}, client.epochs = {_fmt(client.epochs)}: "
                "give exactly one of them (the amount of local work)"
            )
    if client.solver == "exact" and sc.task.name != "quadratic":
        errors.append(f"client.solver = 'exact': only the quadratic task has a closed-form solve (task.name = {sc.task.name!r})")
    if isinstance(sc.task, QuadraticTask) and sc.task.problem == "seed-1d" and n != 2:
        errors.append(f"population.clients = {n}: the seed-1d problem has exactly 2 clients")

    if server.protocol == "fedbuff":
        k = server.concurrency if server.concurrency is not None else min(n, 10)
        c = server.buffer if server.buffer is not None else min(k, 10)
        if k > n:
            errors.append(f"server.concurrency = {k}: must be at most population.clients = {n}")
        if server.cohort is not None:
            errors.append(f"server.cohort = {server.cohort}: only the sync protocol has a cohort (use concurrency and buffer)")
        if server.algorithm != "fedavg":
            errors.append(f"server.algorithm = {server.algorithm!r}: only the sync protocol runs {server.algorithm}; FedBuff uses 'fedavg' with a server rule")
        server_updates.update(concurrency=k, buffer=c)
    else:
        cohort = server.cohort if server.cohort is not None else min(n, 10)
        c = server.buffer if server.buffer is not None else cohort
        if cohort > n:
            errors.append(f"server.cohort = {cohort}: must be at most population.clients = {n}")
        if c > cohort:
            errors.append(f"server.buffer = {c}: must be at most server.cohort = {cohort} (the first C arrivals of a cohort are accepted)")
        if server.concurrency is not None:
            errors.append(f"server.concurrency = {server.concurrency}: only FedBuff has a concurrency (use cohort)")
        server_updates.update(cohort=cohort, buffer=c)
    if server.regularizer != "none" and server.algorithm != "feddr":
        errors.append(f"server.regularizer = {server.regularizer!r}: only FedDR has a server regulariser (server.algorithm = 'feddr')")
    if server.algorithm in ("fedprox", "fedsplit", "feddr", "fedpd") and client.mu <= 0:
        errors.append(f"client.mu = {client.mu}: {server.algorithm} needs a positive proximal coefficient μ (= 1/s)")

    errors.extend(_check_traces(sc))

    p = sc.privacy
    if p.enabled:
        if (p.epsilon is None) == (p.noise_multiplier is None):
            errors.append("privacy.epsilon, privacy.noise_multiplier: give exactly one (a target ε to calibrate σ, or σ itself)")
        if p.xi is not None and p.gamma is not None:
            errors.append(f"privacy.xi = {p.xi}, privacy.gamma = {p.gamma}: give exactly one of them")
        if p.xi is None and p.gamma is None:
            errors.append("privacy.xi, privacy.gamma: give exactly one (the count-noise level ξ, or the payload scale γ)")
        if p.epsilon is not None and p.epsilon > 1e4:
            errors.append(f"privacy.epsilon = {p.epsilon}: must be at most 1e4")
        if p.noise_multiplier is not None and p.xi is not None and p.xi <= p.noise_multiplier:
            errors.append(f"privacy.xi = {p.xi}: must exceed the noise multiplier σ = {p.noise_multiplier}")
        if server.max_staleness is None and server.protocol == "fedbuff":
            errors.append("server.max_staleness: must be set when privacy is enabled (the one-hot staleness payload has length max_staleness + 1)")
        errors.extend(_check_participation(sc, c))

    if errors:
        raise ScenarioError(errors)
    return Scenario(
        name=sc.name, seed=sc.seed, population=sc.population, latency=sc.latency, task=sc.task,
        client=client, server=server.model_copy(update=server_updates), run=sc.run, privacy=sc.privacy,
    )


#: algorithms whose server step reads a table of every client's latest upload, outside the
#: aggregator: the private aggregator never sees their uploads (docs/privacy.md §6)
TABLE_ALGORITHMS = ("fedsplit", "feddr", "fedpd")


def _check_participation(sc: Scenario, buffer: int) -> list[str]:
    """The ``[privacy]`` keys that relate to the population, the buffer and the run's length
    (docs/privacy.md §5–7): the sampling assumption must apply to the algorithm, a cap must be able
    to supply the run, a noise cohort must be at least the buffer (and, under Poisson, its rate
    ``M/N`` at most 1)."""
    errors: list[str] = []
    p, n, steps = sc.privacy, sc.population.clients, sc.run.steps
    if sc.server.algorithm in TABLE_ALGORITHMS:
        errors.append(
            f"privacy.enabled = true: server.algorithm = {sc.server.algorithm!r} takes its server step from a table of every "
            "client's latest upload, outside the private aggregator, so neither sampling assumption applies (each upload "
            "would enter every later step, un-noised); private runs use 'fedavg' or 'fedprox'"
        )
    if p.sampling == "participation-cap":
        k = p.max_participations
        if k is None:
            errors.append("privacy.max_participations: required with privacy.sampling = 'participation-cap' "
                          "(k ≥ 1: no client contributes to more than k server steps)")
        elif k * n < steps * buffer:
            need = -(-steps * buffer // n)
            errors.append(
                f"privacy.max_participations = {k}: the cap cannot supply the run: run.steps × server.buffer = "
                f"{steps} × {buffer} = {steps * buffer} uploads are needed, but population.clients × max_participations = "
                f"{n} × {k} = {n * k}; raise privacy.max_participations to at least {need}, or population.clients, or lower run.steps"
            )
        if sc.run.max_update_norm is not None:
            errors.append(
                f"run.max_update_norm = {sc.run.max_update_norm}: must be unset with privacy.sampling = 'participation-cap' "
                "(a rejection by norm depends on the client's data and changes who contributes to a step, which the "
                "guarantee does not cover; clipping at privacy.clip already bounds every contribution)"
            )
    elif p.max_participations is not None:
        errors.append(f"privacy.max_participations = {p.max_participations}: only used with privacy.sampling = "
                      f"'participation-cap' (it is {p.sampling!r})")
    if p.noise_cohort is not None:
        if p.noise_cohort < buffer:
            errors.append(f"privacy.noise_cohort = {p.noise_cohort}: must be at least server.buffer = {buffer} "
                          "(the simulated deployment's buffer sums M ≥ C uploads)")
        elif p.sampling == "poisson" and p.noise_cohort > n:
            errors.append(f"privacy.noise_cohort = {p.noise_cohort}: must be at most population.clients = {n} under "
                          "privacy.sampling = 'poisson' (its sampling rate is q = M/N ≤ 1)")
    return errors


def _check_traces(sc: Scenario) -> list[str]:
    """Trace files exist; traces and speed/availability models that would contradict them."""
    errors: list[str] = []
    pop, lat = sc.population, sc.latency
    if isinstance(lat, TraceLatency | FedScaleLatency):
        where = "the recorded trace" if isinstance(lat, TraceLatency) else "the FedScale device profiles"
        if pop.speed_sigma > 0:
            errors.append(f"population.speed_sigma = {pop.speed_sigma}: must be 0 with latency.dist = {lat.dist!r} (speeds come from {where})")
        if pop.slow_fraction > 0:
            errors.append(f"population.slow_fraction = {pop.slow_fraction}: must be 0 with latency.dist = {lat.dist!r} (speeds come from {where})")
        path = resolve_path(lat.file)
        ok = path.is_file() or (isinstance(lat, TraceLatency) and (path / "updates.csv").is_file())
        if not ok:
            what = "an updates.csv or a run directory holding one" if isinstance(lat, TraceLatency) else "a FedScale device pickle"
            errors.append(f"latency.file = {lat.file!r}: no such file (must be {what})")
    if isinstance(lat, TraceLatency) and pop.availability != "always":
        errors.append(f"population.availability = {pop.availability!r}: must be 'always' with latency.dist = 'trace' (the recording already holds its availability: waits and offline drops are replayed)")
    if pop.availability == "trace":
        if pop.availability_file is None:
            errors.append("population.availability_file: required with population.availability = 'trace' (a FedScale availability pickle)")
        elif not resolve_path(pop.availability_file).is_file():
            errors.append(f"population.availability_file = {pop.availability_file!r}: no such file (must be a FedScale availability pickle)")
    elif pop.availability_file is not None:
        errors.append(f"population.availability_file = {pop.availability_file!r}: only used with population.availability = 'trace' (it is {pop.availability!r})")
    return errors


PACKAGE_PREFIX = "asyncfl:"


def resolve_path(text: str) -> Path:
    """A file named in a scenario: ``asyncfl:NAME`` is the package's ``asyncfl/data/NAME``
    (the shipped samples); anything else is a path (relative paths: see :func:`load`)."""
    if text.startswith(PACKAGE_PREFIX):
        return Path(__file__).resolve().parents[1] / "data" / text[len(PACKAGE_PREFIX):]
    return Path(text).expanduser()


FILE_KEYS = (("latency", "file"), ("population", "availability_file"))


def _anchor_paths(raw: dict[str, Any], base: Path) -> None:
    """Relative file paths written in a scenario file are relative to that file's directory."""
    for section, key in FILE_KEYS:
        table = raw.get(section)
        if isinstance(table, dict) and isinstance(table.get(key), str):
            value = table[key]
            if value and not value.startswith(PACKAGE_PREFIX) and not Path(value).expanduser().is_absolute():
                table[key] = str(base / value)


# ---------------------------------------------------------------------------------------------
def parse_override(text: str) -> tuple[str, Any]:
    """``section.key=value`` → (key path, value). The value is read as a TOML value when it
    parses as one (``10``, ``0.5``, ``true``, ``"x"``, ``[1, 2]``), else taken as a string."""
    if "=" not in text:
        raise ScenarioError([f"--set {text!r}: expected section.key=value"])
    key, _, value_text = text.partition("=")
    key = key.strip()
    if not key or any(not part for part in key.split(".")):
        raise ScenarioError([f"--set {text!r}: expected section.key=value"])
    try:
        value = tomllib.loads(f"v = {value_text.strip()}")["v"]
    except tomllib.TOMLDecodeError:
        value = value_text.strip()
    if isinstance(value, float) and not math.isfinite(value):
        pass  # kept: validation reports it with the field name
    return key, value


def assign(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``raw[a][b][c] = value`` for ``dotted = "a.b.c"`` in a raw scenario table, creating
    the tables on the way; a path through a key that is not a table is a ScenarioError."""
    parts = dotted.split(".")
    node = raw
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ScenarioError([f"--set {dotted}: {part} is not a table"])
        node = child
    node[parts[-1]] = value


def load(path: str | Path, overrides: list[str] | tuple[str, ...] = ()) -> Scenario:
    """Read, override and validate a scenario file. Relative trace paths in the file
    (``latency.file``, ``population.availability_file``) are taken relative to the file's
    directory; in ``--set`` overrides, relative to the working directory."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ScenarioError([f"{path}: no such scenario file"]) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError([f"{path}: cannot be read ({exc.__class__.__name__}: {exc})"]) from None
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError([f"{path}: not valid TOML ({exc})"]) from None
    _anchor_paths(raw, path.parent)  # before the overrides: --set paths are relative to the cwd
    for item in overrides:
        key, value = parse_override(item)
        assign(raw, key, value)
    try:
        return validate(raw)
    except ScenarioError as exc:
        raise ScenarioError(exc.problems, source=str(path)) from None
