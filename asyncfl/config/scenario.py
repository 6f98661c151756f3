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
import os
import re
import reprlib
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Callable, Literal, Mapping

import tomli_w
from pydantic import Field, ValidationError

from asyncfl.config.base import MAX_INT, NonNegFloat, NonNegInt, PosFloat, PosInt, Probability, Section
from asyncfl.config.files import MAX_SCENARIO_BYTES, read_text_limited
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
    "validate", "load", "apply_changes", "parse_override", "assign", "describe_errors", "resolve_path", "PACKAGE_PREFIX", "FILE_KEYS",
    "MAX_LOCAL_STEPS", "MAX_UPLOADS", "name_problem", "package_name_problem",
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
    batch_size: Annotated[int, Field(ge=1, le=10**7)] | None = None
    # bounded by what a job can finish (and, with run.steps, by MAX_LOCAL_STEPS in a run)
    local_steps: Annotated[int, Field(ge=1, le=10**6)] | None = None
    epochs: Annotated[int, Field(ge=1, le=10**4)] | None = None
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
    # counts of clients: at most population.clients (checked), whose bound is 10^8
    concurrency: Annotated[int, Field(ge=1, le=10**8)] | None = None
    buffer: Annotated[int, Field(ge=1, le=10**8)] | None = None
    cohort: Annotated[int, Field(ge=1, le=10**8)] | None = None
    staleness_exponent: Annotated[float, Field(ge=0, le=100)] = 0.0
    # the per-step staleness records have max_staleness + 1 columns (counted in the memory estimate)
    max_staleness: Annotated[int, Field(ge=0, le=10**9)] | None = None
    rule: Literal[RULES.names] = "sgd"
    lr: PosFloat = 1.0
    beta: Annotated[float, Field(ge=0, lt=1)] = 0.9
    adam_beta2: Annotated[float, Field(ge=0, lt=1)] = 0.999
    adam_eps: PosFloat = 1e-8
    # momentum approximation (docs/server-rules.md)
    ma_target: Literal["momentum", "nesterov"] = "momentum"
    ma_ridge: NonNegFloat = 1e-3
    ma_window: Annotated[int, Field(ge=1, le=10**9)] | None = None
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
    eval_every: Annotated[int, Field(ge=1, le=10**9)] = 10
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
    checkpoint_every: Annotated[int, Field(ge=0, le=10**9)] = 0  # 0 = no periodic checkpoints
    max_update_norm: PosFloat | None = None
    # divergence guards (docs/architecture.md §8): an evaluated test loss that is NaN/Inf, above
    # divergence_loss, or above divergence_factor × the loss of the initial model stops the run
    divergence_loss: PosFloat = 1e8
    divergence_factor: Annotated[float, Field(gt=1, le=1e12)] = 1e5
    # also log the evaluations to RUN_DIR/tensorboard (optional package: asyncfl[tensorboard])
    tensorboard: bool = False


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


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlevel = 3


def _fmt(value: Any) -> str:
    """``repr(value)`` for a message, at most 60 characters; long strings and deep or long
    containers are elided without being formatted whole."""
    text = _SHORT.repr(value)
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
    problem = name_problem(name)
    if problem:
        errors.append(f"name = {_fmt(name)}: {problem}")
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


_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def name_problem(name: Any) -> str | None:
    """Why ``name`` cannot name a scenario, or None: a non-empty string of at most 200
    characters without control characters (a newline or an escape would forge or garble the
    lines that print it). Anything else — spaces, brackets, slashes — is kept and printed
    verbatim; the default run directory made from it stays inside ``runs/``
    (:func:`asyncfl.run.rundir.default_run_dir`)."""
    if not isinstance(name, str) or not name or len(name) > 200:
        return "must be a non-empty string of at most 200 characters"
    if _CONTROL.search(name):
        return "must not contain control characters (newlines, tabs, NUL, escapes)"
    return None


#: local gradient steps a whole run may ask for: run.steps × uploads per step × steps per job
#: (about twelve days at 10⁵ small steps per second; more cannot finish)
MAX_LOCAL_STEPS = 10**11
#: uploads a whole run may ask for: run.steps × uploads per step (the engine handles ~10⁵ a second)
MAX_UPLOADS = 10**10


def _work_problems(sc: Scenario, per_step: int) -> list[str]:
    """The run's total work, bounded by what can finish (:data:`MAX_UPLOADS`,
    :data:`MAX_LOCAL_STEPS`). A job's local steps: ``local_steps``, or ``epochs × ⌈n/B⌉`` with
    ``n`` the task's mean samples per client and ``B`` the batch (full batch: 1 step per epoch)."""
    steps, client = sc.run.steps, sc.client
    uploads = steps * per_step
    if uploads > MAX_UPLOADS:
        return [f"run.steps = {steps} with {per_step} uploads per step: {uploads:.3g} uploads, more than the "
                f"{MAX_UPLOADS:.0e} a run can finish; lower run.steps or server.buffer"]
    if client.solver == "exact":
        return []
    if client.local_steps is not None:
        per_job, what = client.local_steps, f"client.local_steps = {client.local_steps}"
    else:
        n = sc.task.mean_samples_per_client(sc.population.clients)
        batches = 1 if client.batch_size is None else max(1, math.ceil(n / client.batch_size))
        per_job, what = (client.epochs or 1) * batches, f"client.epochs = {client.epochs} ({batches} batches each)"
    total = uploads * per_job
    if total > MAX_LOCAL_STEPS:
        return [f"{what} with run.steps = {steps} and {per_step} uploads per step: {total:.3g} local gradient "
                f"steps, more than the {MAX_LOCAL_STEPS:.0e} a run can finish; lower them"]
    return []


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
        if server.algorithm not in ("fedavg", "fedprox"):
            errors.append(f"server.algorithm = {server.algorithm!r}: only the sync protocol runs {server.algorithm}; FedBuff uses 'fedavg' (or 'fedprox') with a server rule")
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
    if server.algorithm == "fedavg" and client.mu > 0:
        # FedAvg has no proximal term: a positive μ would silently run FedProx (docs/baselines.md §1)
        errors.append(
            f"client.mu = {client.mu}: server.algorithm = 'fedavg' has no proximal term (FedBuff runs the fedavg "
            "algorithm too); use server.algorithm = 'fedprox' for the proximal term (μ/2)‖θ − θ_s‖², or client.mu = 0"
        )
    if not errors:
        per_step = server_updates["buffer"] if server.protocol == "fedbuff" else server_updates["cohort"]
        errors.extend(_work_problems(sc, per_step))

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
    population, latency = sc.population, sc.latency
    if isinstance(latency, TraceLatency | FedScaleLatency):
        latency = latency.model_copy(update={"file": absolute_file(latency.file)})
    if population.availability_file is not None:
        population = population.model_copy(update={"availability_file": absolute_file(population.availability_file)})
    return Scenario(
        name=sc.name, seed=sc.seed, population=population, latency=latency, task=sc.task,
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
        problem = package_name_problem(lat.file)
        path = None if problem else resolve_path(lat.file)
        if problem:
            errors.append(f"latency.file = {_fmt(lat.file)}: {problem}")
        elif not (path.is_file() or (isinstance(lat, TraceLatency) and (path / "updates.csv").is_file())):
            what = "an updates.csv or a run directory holding one" if isinstance(lat, TraceLatency) else "a FedScale device pickle"
            errors.append(f"latency.file = {lat.file!r}: {_file_problem(path)} (must be {what})")
    if isinstance(lat, TraceLatency) and pop.availability != "always":
        errors.append(f"population.availability = {pop.availability!r}: must be 'always' with latency.dist = 'trace' (the recording already holds its availability: waits and offline drops are replayed)")
    if pop.availability == "trace":
        if pop.availability_file is None:
            errors.append("population.availability_file: required with population.availability = 'trace' (a FedScale availability pickle)")
        elif package_name_problem(pop.availability_file):
            errors.append(f"population.availability_file = {_fmt(pop.availability_file)}: {package_name_problem(pop.availability_file)}")
        elif not resolve_path(pop.availability_file).is_file():
            errors.append(f"population.availability_file = {pop.availability_file!r}: "
                          f"{_file_problem(resolve_path(pop.availability_file))} (must be a FedScale availability pickle)")
    elif pop.availability_file is not None:
        errors.append(f"population.availability_file = {pop.availability_file!r}: only used with population.availability = 'trace' (it is {pop.availability!r})")
    return errors


PACKAGE_PREFIX = "asyncfl:"


def _file_problem(path: Path) -> str:
    """Why ``path`` (which is not a regular file) cannot be read as an input file."""
    if not path.exists():
        return "no such file"
    return "is a directory" if path.is_dir() else "not a regular file (a device or a pipe cannot be read as input)"


PACKAGE_DATA = Path(__file__).resolve().parents[1] / "data"
_PACKAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def package_name_problem(text: str) -> str | None:
    """Why ``asyncfl:NAME`` does not name a file shipped in ``asyncfl/data/`` (None when it does,
    or when ``text`` is an ordinary path). NAME is one file name — letters, digits, ``.``, ``_``,
    ``-``, not starting with a dot — so it cannot leave the folder (``asyncfl:../x`` is refused)."""
    if not text.startswith(PACKAGE_PREFIX):
        return None
    name = text[len(PACKAGE_PREFIX):]
    if not _PACKAGE_NAME.fullmatch(name) or ".." in name:
        return (f"{PACKAGE_PREFIX}NAME must name a file shipped in asyncfl/data/ (one file name: letters, digits, '.', '_', '-'); "
                f"shipped: {', '.join(sorted(p.name for p in PACKAGE_DATA.iterdir() if p.is_file())) or 'none'}")
    return None


def resolve_path(text: str) -> Path:
    """A file named in a scenario: ``asyncfl:NAME`` is the package's ``asyncfl/data/NAME``
    (the shipped samples; a NAME that would leave that folder is a :class:`ScenarioError`);
    anything else is a path (relative paths: see :func:`load`)."""
    if text.startswith(PACKAGE_PREFIX):
        problem = package_name_problem(text)
        if problem:
            raise ScenarioError([f"{text!r}: {problem}"])
        return PACKAGE_DATA / text[len(PACKAGE_PREFIX):]
    return Path(text).expanduser()


def absolute_file(text: str, base: Path | None = None) -> str:
    """``text`` as it is saved in a resolved scenario: ``asyncfl:NAME`` as is, a path made
    absolute (relative to ``base``, default the working directory) and normalised, so the run
    directory's ``scenario.toml`` names the same file wherever it is read from."""
    if text.startswith(PACKAGE_PREFIX) or not text:
        return text
    path = Path(text).expanduser()
    return os.path.normpath(path if path.is_absolute() else (base or Path.cwd()).absolute() / path)


FILE_KEYS = (("latency", "file"), ("population", "availability_file"), ("task", "path"))


def _anchor_paths(raw: dict[str, Any], base: Path) -> None:
    """Relative file paths written in a scenario file are relative to that file's directory
    (made absolute here, so the resolved scenario names the same files from anywhere)."""
    for section, key in FILE_KEYS:
        table = raw.get(section)
        if isinstance(table, dict) and isinstance(table.get(key), str):
            table[key] = absolute_file(table[key], base)


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
    except RecursionError:
        raise ScenarioError([f"--set {key}: the value is nested too deeply"]) from None
    except tomllib.TOMLDecodeError:
        value = value_text.strip()
    if isinstance(value, float) and not math.isfinite(value):
        pass  # kept: validation reports it with the field name
    return key, value


def assign(raw: dict[str, Any], dotted: str, value: Any) -> None:
    """Set ``raw[a][b][c] = value`` for ``dotted = "a.b.c"`` in a raw scenario table, creating
    the tables on the way; a path through a key that is not a table is a ScenarioError.

    A table value is *merged* into the table already there, key by key (``server = {lr = 1}``
    sets ``server.lr`` and keeps the other ``[server]`` keys), except that a table naming another
    variant of a tagged section (``latency = {dist = "constant", value = 2}`` over an exponential
    latency) replaces it: the old variant's keys do not apply to the new one."""
    parts = dotted.split(".")
    node = raw
    for part in parts[:-1]:
        child = node.get(part)
        if child is None:
            child = node[part] = {}
        if not isinstance(child, dict):
            raise ScenarioError([f"--set {dotted}: {part} is not a table"])
        node = child
    key, old = parts[-1], node.get(parts[-1])
    if isinstance(value, dict) and isinstance(old, dict) and not _switches_variant(dotted, old, value):
        for sub, sub_value in value.items():
            assign(old, str(sub), sub_value)
    else:
        node[key] = value


def _switches_variant(dotted: str, old: dict[str, Any], new: dict[str, Any]) -> bool:
    if dotted not in TAGGED:
        return False
    registry, default = TAGGED[dotted]
    tag = registry.field.partition(".")[2]
    return tag in new and new[tag] != old.get(tag, default)


def _tag_of(section: str, table: Any) -> Any:
    """The variant a raw tagged section selects (its tag key, else the section's default)."""
    registry, default = TAGGED[section]
    return table.get(registry.field.partition(".")[2], default) if isinstance(table, Mapping) else default


def apply_changes(raw: dict[str, Any], overrides: list[str] | tuple[str, ...] = (),
                  unset: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Apply ``--unset KEY`` removals, then ``--set KEY=VALUE`` overrides, to a raw scenario
    table read from a file; returns the notes to show the user (docs/scenario.md §2).

    When the changes switch a tagged section to another variant (``latency.dist``,
    ``task.name``), the file's keys that only the old variant has are dropped — a lognormal
    ``latency.sigma`` means nothing to an exponential latency — and one note names them. Keys
    given with ``--set`` are never dropped (validation then names the ones the new variant
    refuses). Unsetting a key the file does not hold, or both setting and unsetting one, is a
    :class:`ScenarioError`."""
    parsed = [parse_override(item) for item in overrides]
    set_keys = {key for key, _ in parsed}
    errors = []
    for key in unset:
        if key in set_keys:
            errors.append(f"--unset {key}: also given with --set; give one of them")
        elif not _has(raw, key):
            errors.append(f"--unset {key}: the scenario file has no such key")
    if errors:
        raise ScenarioError(errors)
    before = {section: _tag_of(section, raw.get(section, {})) for section in TAGGED}
    for key in unset:
        parts = key.split(".")
        node = raw
        for part in parts[:-1]:
            node = node[part]
        del node[parts[-1]]
    after = dict(before)
    for section, (registry, default) in TAGGED.items():
        if registry.field in unset:
            after[section] = default
    after.update((key.partition(".")[0], value) for key, value in parsed
                 if any(key == registry.field for registry, _ in TAGGED.values()))
    notes = []
    for section, (registry, _) in TAGGED.items():
        old, new, table = before[section], after[section], raw.get(section)
        if old == new or old not in registry or new not in registry or not isinstance(table, dict):
            continue
        old_only = set(registry.config(old).model_fields) - set(registry.config(new).model_fields)
        dropped = sorted(k for k in table if k in old_only and f"{section}.{k}" not in set_keys)
        for k in dropped:
            del table[k]
        if dropped:
            notes.append(f"note: {registry.field} {old!r} → {new!r}: dropped the file's "
                         f"{', '.join(f'{section}.{k}' for k in dropped)} ({old} only)")
    for key, value in parsed:
        assign(raw, key, value)
    return notes


def _has(raw: Mapping[str, Any], dotted: str) -> bool:
    node: Any = raw
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def load(path: str | Path, overrides: list[str] | tuple[str, ...] = (), unset: list[str] | tuple[str, ...] = (),
         notes: list[str] | None = None) -> Scenario:
    """Read, change (:func:`apply_changes`: ``--unset``, then ``--set``) and validate a scenario
    file; the notes of the changes are appended to ``notes`` when given. Relative trace paths in
    the file (``latency.file``, ``population.availability_file``) are taken relative to the
    file's directory; in ``--set`` overrides, relative to the working directory."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise ScenarioError([f"{path}: no such scenario file"])
    text = read_text_limited(path, MAX_SCENARIO_BYTES, lambda message: ScenarioError([f"scenario file {message}"]))
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError([f"{path}: not valid TOML ({exc})"]) from None
    except RecursionError:  # the parser recurses once per nesting level
        raise ScenarioError([f"{path}: not valid TOML (arrays or tables nested too deeply)"]) from None
    _anchor_paths(raw, path.parent)  # before the overrides: --set paths are relative to the cwd
    try:
        found = apply_changes(raw, overrides, unset)
    except ScenarioError as exc:
        raise ScenarioError(exc.problems, source=str(path)) from None
    if notes is not None:
        notes.extend(found)
    try:
        return validate(raw)
    except ScenarioError as exc:
        raise ScenarioError(exc.problems, source=str(path)) from None
