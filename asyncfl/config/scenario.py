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

import dataclasses
import difflib
import math
import re
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import tomli_w
import pydantic
from pydantic import ValidationError

from asyncfl.config.base import Section
from asyncfl.config.files import MAX_SCENARIO_BYTES, _fmt, absolute_file, read_text_limited
from asyncfl.config.latency import LatencyConfig
from asyncfl.components import allow
from asyncfl.components.core import KINDS, Component, Kind
from asyncfl.components.registry import REGISTRY, UnknownComponent
from asyncfl.config.sections import ClientConfig, PopulationConfig, PrivacyConfig, RunConfig, ServerConfig
from asyncfl.config.server import MAX_LINKS
from asyncfl.config.tasks import TaskConfig
from asyncfl.config.batching import batched_problems
from asyncfl.errors import ScenarioError

__all__ = [
    # sections and their value types (re-exported: code imports them from here)
    "Section", "MAX_INT", "PosInt", "NonNegInt", "PosFloat", "NonNegFloat", "Probability",
    "PopulationConfig", "ClientConfig", "ServerConfig", "RunConfig", "PrivacyConfig",
    "ConstantLatency", "ExponentialLatency", "HalfNormalLatency", "LogNormalLatency", "UniformLatency",
    "ParetoLatency", "TraceLatency", "FedScaleLatency", "LatencyConfig",
    "QuadraticTask", "SyntheticTask", "DigitsTask", "GaussianMLPTask", "MNIST1DTask", "TaskConfig",
    "LATENCIES", "TASKS", "SECTIONS", "TAGGED", "Scenario",
    # reading and validating
    "validate", "load", "apply_changes", "apply_values", "composed", "SELECTORS", "parse_override", "assign", "describe_errors", "resolve_path", "PACKAGE_PREFIX", "file_keys",
    "MAX_LOCAL_STEPS", "MAX_UPLOADS", "name_problem", "unowned_key", "package_name_problem", "one_upload_per_client",
]


SECTIONS: dict[str, type[Section]] = {
    "population": PopulationConfig,
    "client": ClientConfig,
    "server": ServerConfig,
    "run": RunConfig,
    "privacy": PrivacyConfig,
}
"""The base of every section whose keys components join (the tagged sections are in TAGGED)."""

TAGGED: dict[str, Kind] = {kind.section: kind for kind in KINDS.values() if kind.whole_section}
"""Sections that one component owns whole, selected by a tag key (``[task] name``, ``[latency] dist``)."""

SELECTORS: dict[str, tuple[Kind, ...]] = {
    section: tuple(k for k in KINDS.values() if k.section == section and not k.whole_section and not k.many)
    for section in SECTIONS
}
"""Per base section, the kinds of component it names one of (``[server]``: protocol, algorithm, rule)."""

LISTS: tuple[Kind, ...] = tuple(k for k in KINDS.values() if k.many)
"""The list-valued kinds (``run.trackers``): their components' keys sit in tables of their own."""

TOP_LEVEL = ("name", "seed")
ORDER = ("population", "latency", "task", "client", "server", "run", "privacy")


@dataclass(frozen=True)
class Scenario:
    """A validated scenario. Derived values (``buffer``, ``concurrency``) are resolved. Each
    section holds its base keys and the keys of the components it names; :meth:`component` and
    :meth:`config_of` give a component and its own config (docs/extending.md §2)."""

    name: str
    seed: int
    population: PopulationConfig
    latency: LatencyConfig
    task: TaskConfig
    client: ClientConfig
    server: ServerConfig
    run: RunConfig
    privacy: PrivacyConfig

    def component(self, kind: str) -> Component:
        """The component of ``kind`` this scenario names (``sc.component("rule")``); a composite
        (the rule ``chain``) linked to the components its section lists (``server.chain``). A
        list-valued kind's are :meth:`listed`."""
        info = KINDS[kind]
        if info.many:
            raise ValueError(f"{info.field} names a list of {info.label}s: ask scenario.listed({kind!r})")
        section = getattr(self, info.section)
        found = REGISTRY.get(kind, getattr(section, info.key))
        key = found.traits.links
        return found if key is None else found.linked(tuple(REGISTRY.get(kind, n) for n in getattr(section, key)))

    def config_of(self, kind: str) -> Any:
        """The own config of the component of ``kind`` (None when it has no keys)."""
        info = KINDS[kind]
        return self.component(kind).own_config(getattr(self, info.section))

    def components(self) -> dict[str, Component]:
        """The component this scenario names of every kind that names one, by kind: the parts of
        the run (list-valued kinds, the trackers, are :meth:`listed`)."""
        return {kind: self.component(kind) for kind, info in KINDS.items() if not info.many}

    def listed(self, kind: str) -> tuple[Component, ...]:
        """The components of a list-valued kind this scenario names, in order
        (``sc.listed("tracker")``: ``run.trackers``); each one's own config is
        ``component.own_config(section)`` (from its table ``run.tracker.NAME``)."""
        info = KINDS[kind]
        if not info.many:
            return (self.component(kind),)
        return tuple(REGISTRY.get(kind, name) for name in getattr(getattr(self, info.section), info.key) or ())

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "seed": self.seed}
        for section in ORDER:
            out[section] = getattr(self, section).model_dump(exclude_none=True)
        return out

    def to_toml(self) -> str:
        return tomli_w.dumps(self.to_dict())

    def replace(self, **overrides: Any) -> "Scenario":
        """A copy with dotted-key overrides (``{"server.rule": "momentum"}``), re-validated.
        Naming another component drops the old one's keys, as ``--set`` does."""
        raw = self.to_dict()
        apply_values(raw, list(overrides.items()))
        return validate(raw)


# ---------------------------------------------------------------------------------------------
def _suggest(key: str, allowed: list[str]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    hint = f"; did you mean '{close[0]}'?" if close else "."
    return f"{hint} Allowed: {', '.join(sorted(allowed))}"


def describe_errors(
    exc: ValidationError, where: Callable[[tuple], str], allowed_keys: Callable[[tuple], list[str]],
    owners: Callable[[tuple], str] = lambda loc: "",
) -> list[str]:
    """One ``field = value: what is allowed`` line per pydantic error. ``where(loc)`` names the
    field; ``allowed_keys(loc)`` lists the keys of the table holding an unknown key (for the
    "did you mean" suggestion); ``owners(loc)`` says which other components take an unknown key.
    Shared by scenario files and study specs."""
    out = []
    for err in exc.errors():
        loc = tuple(err["loc"])
        name = where(loc)
        if err["type"] == "extra_forbidden":
            out.append(f"{name}: unknown key{_suggest(str(loc[-1]), allowed_keys(loc))}{owners(loc)}")
        elif err["type"] == "missing":
            out.append(f"{name}: required key is missing")
        else:
            msg = err["msg"].replace("Input should be", "must be").removeprefix("Value error, ")
            out.append(f"{name} = {_fmt(err.get('input'))}: {msg}")
    return out


def _owners(section: str, key: str, named: tuple[Component, ...] = ()) -> str:
    """`` (a key of server.rule = 'adam', 'ma-full')``: the components of the section's kinds that
    own ``key``, for an unknown key (it belongs to a component the scenario does not name); when
    the section names a composite of that kind (``named``), how to link one."""
    kinds = SELECTORS.get(section, ())
    found = [(kind, c.name) for kind in kinds for c in REGISTRY.components(kind.name) if key in c.keys]
    if not found:
        return ""
    by_field: dict[str, list[str]] = {}
    for kind, name in found:
        by_field.setdefault(kind.field, []).append(repr(name))
    links = [f"{section}.{c.traits.links}" for c in named if c.traits.links is not None and c.kind_info.field in by_field]
    either = f": list it in {' or '.join(links)} to link it" if links else ""
    return " (" + "; ".join(f"a key of {field} = {', '.join(names)}" for field, names in by_field.items()) + either + ")"


def _validate_section(cls: type[Section], raw: Any, prefix: str, errors: list[str],
                      named: tuple[Component, ...] = ()) -> Section | None:
    if not isinstance(raw, Mapping):
        errors.append(f"{prefix} = {_fmt(raw)}: must be a table ([{prefix}])")
        return None
    try:
        return cls.model_validate(dict(raw))
    except ValidationError as exc:
        errors.extend(describe_errors(
            exc, lambda loc: ".".join(str(p) for p in (prefix, *loc) if p != ""),
            lambda loc: list(_table_model(cls, loc[:-1]).model_fields), lambda loc: _owners(prefix, str(loc[-1]), named),
        ))
        return None


def _table_model(cls: type[Section], loc: tuple) -> type[Section]:
    """The model of the (nested) table at ``loc`` inside ``cls`` (``run.stop.target``), for the
    keys an unknown key is compared with; ``cls`` itself where ``loc`` leads to no model."""
    model: Any = cls
    for part in loc:
        field = getattr(model, "model_fields", {}).get(part)
        inner = [a for a in getattr(field.annotation, "__args__", (field.annotation,)) if isinstance(a, type) and issubclass(a, Section)] if field else []
        if not inner:
            return cls
        model = inner[0]
    return model


_COMPOSED: dict[tuple, type[Section]] = {}


def composed(section: str, parts: tuple[Component, ...]) -> type[Section]:
    """The model of a base section with the keys of the components it names: the base class and
    each component's config class, merged (a key two of them declare is a ScenarioError)."""
    base = SECTIONS[section]
    seen: dict[str, str] = {f: f"[{section}]" for f in base.model_fields}
    for c in parts:
        for f in c.keys:
            if f in seen:
                raise ScenarioError([f"{section}.{f}: declared by both {seen[f]} and {c.kind_info.field} = {c.name!r}; "
                                     "components named in one section must not share a key"])
            seen[f] = f"{c.kind_info.field} = {c.name!r}"
    return _compose(section, tuple(dict.fromkeys(c.config for c in parts if c.config is not None)))


def _compose(section: str, configs: tuple[type[Section], ...]) -> type[Section]:
    """The base section ``section`` merged with ``configs`` (made once per combination). The
    class is made at run time, so it pickles by its parts (:func:`_rebuild_section`)."""
    base = SECTIONS[section]
    if not configs:
        return base
    cls = _COMPOSED.get((section, configs))
    if cls is None:
        name = f"{base.__name__}[{', '.join(c.__name__ for c in configs)}]"
        cls = pydantic.create_model(name, __base__=(*reversed(configs), base))
        cls.file_keys = tuple(dict.fromkeys(k for c in (base, *configs) for k in c.file_keys))
        cls.__asyncfl_parts__ = (section, configs)  # type: ignore[attr-defined]
        cls.__reduce__ = _reduce_section  # type: ignore[method-assign]
        _COMPOSED[(section, configs)] = cls
    return cls


def _reduce_section(self: Section) -> tuple[Any, tuple[Any, ...]]:
    return _rebuild_section, (*type(self).__asyncfl_parts__, self.model_dump())  # type: ignore[attr-defined]


def _rebuild_section(section: str, configs: tuple[type[Section], ...], values: dict[str, Any]) -> Section:
    return _compose(section, configs).model_validate(values)


def _selected(kind: Kind, raw: Mapping[str, Any], errors: list[str]) -> Component | None:
    """The component a raw section names for ``kind`` (its tag key, else the default)."""
    tag = raw.get(kind.key, kind.default)
    try:
        found = REGISTRY.find(kind.name, tag)
    except UnknownComponent as exc:
        errors.append(str(exc))
        return None
    if found is None:
        errors.append(REGISTRY.unknown(kind.name, tag))
    return found


def _validate_base(section: str, raw: Any, errors: list[str]) -> Section | None:
    if not isinstance(raw, Mapping):
        errors.append(f"{section} = {_fmt(raw)}: must be a table ([{section}])")
        return None
    parts = [_selected(kind, raw, errors) for kind in SELECTORS[section]]
    if any(p is None for p in parts):
        return None
    parts = [_linked(p, raw, parts, errors) for p in parts if p is not None]
    if any(p is None for p in parts):
        return None
    try:
        cls = composed(section, tuple(c for p in parts if p is not None for c in (p, *p.links)))
    except ScenarioError as exc:
        errors.extend(exc.problems)
        return None
    return _validate_section(cls, raw, section, errors, tuple(p for p in parts if p is not None))


def _linked(component: Component, raw: Mapping[str, Any], parts: list[Component | None],
            errors: list[str]) -> Component | None:
    """``component`` linked to the components its raw section lists when it is a composite
    (``traits.links``: ``server.chain = ["clip", "momentum"]``), else itself. Refused, naming the
    field: a value that is not an array of names, an unknown name, a composite as a link (a chain
    of chains is the chain of their links: list those), a name twice, and a key two links (or a
    link and the section) both declare."""
    key = component.traits.links
    if key is None:
        return component
    kind = component.kind_info
    field, names = f"{kind.section}.{key}", raw.get(key)
    usage = f"an array of {kind.label} names applied in order, e.g. [\"clip\", \"momentum\"]"
    if names is None:
        errors.append(f"{field}: required with {kind.field} = {component.name!r} ({usage})")
        return None
    if not isinstance(names, (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
        errors.append(f"{field} = {_fmt(names)}: must be {usage}")
        return None
    if len(names) > MAX_LINKS:
        errors.append(f"{field}: {len(names)} names; at most {MAX_LINKS} links")
        return None
    problems: list[str] = []
    links: list[Component] = []
    allowed = [c.name for c in REGISTRY.components(kind.name) if c.traits.links is None]
    for name in names:
        try:
            found = REGISTRY.find(kind.name, name)
        except UnknownComponent as exc:
            problems.append(f"{field}: {exc}")
            continue
        if found is None:
            problems.append(f"{field}: unknown {kind.label} {name!r}{_suggest(name, allowed)}")
        elif found.traits.links is not None:
            problems.append(f"{field}: {name!r} links others itself; a chain of chains is the chain of their links, "
                            f"so list those here")
        elif list(names).count(name) > 1:
            problems.append(f"{field}: {name!r} is listed {list(names).count(name)} times; each link appears once (its keys "
                            f"sit in [{kind.section}] once)")
        else:
            links.append(found)
    seen = {f: f"[{kind.section}]" for f in SECTIONS[kind.section].model_fields}
    for c in (*(p for p in parts if p is not None), *links):
        label = f"the link {c.name!r} of {field}" if c in links else f"{c.kind_info.field} = {c.name!r}"
        for f in c.keys:
            if f in seen and seen[f] != label:
                problems.append(f"{kind.section}.{f}: declared by both {seen[f]} and {label}; links must not share a "
                                "key with each other or with the section")
            seen.setdefault(f, label)
    if problems:
        errors.extend(dict.fromkeys(problems))
        return None
    return component.linked(tuple(links))


def _validate_tagged(section: str, raw: Any, errors: list[str]) -> Section | None:
    kind = TAGGED[section]
    if not isinstance(raw, Mapping):
        errors.append(f"{section} = {_fmt(raw)}: must be a table ([{section}])")
        return None
    found = _selected(kind, raw, errors)
    if found is None:
        return None
    return _validate_section(found.config, {**raw, kind.key: raw.get(kind.key, kind.default)}, section, errors)


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
    for section in SECTIONS:
        parts[section] = _validate_base(section, raw.get(section, {}), errors)
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
    if not sc.component("solver").traits.local_work:
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


def _resolved(sc: Scenario) -> Scenario:
    """``sc`` with the protocol's derived defaults (``buffer``, ``concurrency``/``cohort``) filled
    in and trace paths made absolute."""
    sc = dataclasses.replace(sc, server=_resolved_server(sc))
    absolute = {}
    for section in ORDER:
        table = getattr(sc, section)
        update = {k: absolute_file(getattr(table, k)) for k in type(table).file_keys if isinstance(getattr(table, k), str)}
        if update:
            absolute[section] = table.model_copy(update=update)
    return dataclasses.replace(sc, **absolute)


def _resolved_server(sc: Scenario) -> Any:
    """``[server]`` with the protocol's derived defaults (``ProtocolTraits.resolve``), its result
    checked: a mapping of ``[server]`` keys, after which ``server.buffer`` and the protocol's
    in-flight key are positive integers. A protocol that leaves one unset is a
    :class:`ScenarioError` naming it (docs/protocol.md §8), not a ``TypeError`` later."""
    protocol = sc.component("protocol")
    traits, label = protocol.traits, f"server.protocol = {protocol.name!r}"
    update = traits.resolve(sc) if traits.resolve is not None else {}
    if not isinstance(update, Mapping):
        raise ScenarioError([f"{label}: its ProtocolTraits.resolve returned {type(update).__name__}, not a mapping of "
                             "[server] keys to their derived values"])
    fields = type(sc.server).model_fields
    unknown = sorted(str(k) for k in update if k not in fields)
    if unknown:
        raise ScenarioError([f"{label}: its ProtocolTraits.resolve sets {', '.join(unknown)}, which [server] does not "
                             f"have (keys: {', '.join(fields)})"])
    server = sc.server.model_copy(update=dict(update))
    problems = []
    for key in dict.fromkeys(("buffer", traits.in_flight_key)):
        value = getattr(server, key, None)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            how = "set it in the scenario, or give the protocol a ProtocolTraits.resolve that derives it"
            problems.append(f"server.{key} = {_fmt(value)}: {label} needs a positive integer ({how})")
    if problems:
        raise ScenarioError(problems)
    return server


def _trait_problems(sc: Scenario, parts: dict[str, Component]) -> list[str]:
    """What the components' traits require of each other (docs/scenario.md §3)."""
    errors: list[str] = []
    client, server, task = sc.client, sc.server, sc.task
    solver, algorithm, protocol = parts["solver"].traits, parts["algorithm"].traits, parts["protocol"]
    if solver.local_work and (client.local_steps is None) == (client.epochs is None):
        errors.append(
            f"client.local_steps = {_fmt(client.local_steps)}, client.epochs = {_fmt(client.epochs)}: "
            "give exactly one of them (the amount of local work)"
        )
    if solver.needs_closed_form and not parts["task"].traits.closed_form_prox:
        closed = [c.name for c in REGISTRY.components("task") if c.traits.closed_form_prox]
        errors.append(f"client.solver = {client.solver!r}: needs a task with a closed-form prox ({', '.join(closed)}); "
                      f"task.name = {task.name!r} has none")
    if algorithm.protocols is not None and protocol.name not in algorithm.protocols:
        runs = [a.name for a in REGISTRY.components("algorithm")
                if a.traits.protocols is None or protocol.name in a.traits.protocols]
        errors.append(f"server.algorithm = {server.algorithm!r}: runs on server.protocol = "
                      f"{' or '.join(repr(p) for p in algorithm.protocols)} only; server.protocol = {protocol.name!r} "
                      f"runs {', '.join(repr(a) for a in runs)}")
    if algorithm.one_upload_per_client and protocol.traits.stale and server.buffer > sc.population.clients:
        errors.append(f"server.buffer = {server.buffer}: must be at most population.clients = {sc.population.clients} "
                      f"with server.algorithm = {server.algorithm!r} (a step takes one upload per client)")
    if algorithm.mu == "positive" and client.mu <= 0:
        errors.append(f"client.mu = {client.mu}: {server.algorithm} needs a positive proximal coefficient μ (= 1/s)")
    if algorithm.mu == "zero" and client.mu > 0:
        # FedAvg has no proximal term: a positive μ would silently run FedProx (docs/baselines.md §1)
        prox = [a.name for a in REGISTRY.components("algorithm") if a.traits.mu == "positive" and a.traits.uses_rule]
        errors.append(
            f"client.mu = {client.mu}: server.algorithm = {server.algorithm!r} has no proximal term; use "
            f"server.algorithm = {' or '.join(repr(a) for a in prox) or 'one with a proximal term'} for the proximal "
            "term (μ/2)‖θ − θ_s‖², or client.mu = 0"
        )
    errors.extend(batched_problems(sc.run.batched, sc.run.executor, parts["executor"].traits,
                                   [e.name for e in REGISTRY.components("executor") if e.traits.batched],
                                   client.solver, solver))
    speeds_from = parts["latency"].traits.speeds_from
    pop = sc.population
    if speeds_from is not None:
        for key in ("speed_sigma", "slow_fraction"):
            value = getattr(pop, key)
            if value > 0:
                errors.append(f"population.{key} = {value}: must be 0 with latency.dist = {sc.latency.dist!r} "
                              f"(speeds come from {speeds_from})")
    if sc.privacy.enabled and not algorithm.private:
        private = [a.name for a in REGISTRY.components("algorithm") if a.traits.private]
        errors.append(
            f"privacy.enabled = true: server.algorithm = {server.algorithm!r} takes its server step from a table of every "
            "client's latest upload, outside the private aggregator, so neither sampling assumption applies (each upload "
            f"would enter every later step, un-noised); private runs use {' or '.join(repr(a) for a in private)}"
        )
    return errors


def one_upload_per_client(sc: Scenario) -> bool:
    """Whether the run dispatches a client only when it has no undecided upload (the participation
    ledger of docs/privacy.md §6): every private run, and runs of an algorithm with
    ``AlgorithmTraits.one_upload_per_client`` on a protocol with stale uploads."""
    return sc.privacy.enabled or (sc.component("algorithm").traits.one_upload_per_client
                                  and sc.component("protocol").traits.stale)


def _privacy_problems(sc: Scenario) -> list[str]:
    """The ``[privacy]`` keys among themselves and against the buffer (docs/privacy.md)."""
    p, buffer = sc.privacy, sc.server.buffer
    errors: list[str] = []
    if not p.enabled:
        return errors
    if (p.epsilon is None) == (p.noise_multiplier is None):
        errors.append("privacy.epsilon, privacy.noise_multiplier: give exactly one (a target ε to calibrate σ, or σ itself)")
    if p.xi is not None and p.gamma is not None:
        errors.append(f"privacy.xi = {p.xi}, privacy.gamma = {p.gamma}: give exactly one of them")
    if p.xi is None and p.gamma is None:
        errors.append("privacy.xi, privacy.gamma: give exactly one (the count-noise level ξ, or the payload scale γ)")
    if p.epsilon is not None and p.epsilon > 1e4:
        errors.append(f"privacy.epsilon = {p.epsilon}: must be at most 1e4")
    if p.noise_multiplier == 0 and p.xi is not None:  # as build_privacy refuses it, before any run starts
        errors.append(f"privacy.xi = {p.xi}: with privacy.noise_multiplier = 0 (clip only) the counts carry no noise; "
                      "give privacy.gamma (the payload scale, e.g. 1.0) instead")
    elif p.noise_multiplier is not None and p.xi is not None and p.xi <= p.noise_multiplier:
        errors.append(f"privacy.xi = {p.xi}: must exceed the noise multiplier σ = {p.noise_multiplier}")
    if p.noise_cohort is not None and p.noise_cohort < buffer:
        errors.append(f"privacy.noise_cohort = {p.noise_cohort}: must be at least server.buffer = {buffer} "
                      "(the simulated deployment's buffer sums M ≥ C uploads)")
    return errors


def _cross_check(sc: Scenario) -> Scenario:
    """Relations between keys of different sections: each named component's own check, and what
    their traits require of each other; resolves derived defaults."""
    sc = _resolved(sc)
    parts = sc.components()
    errors = _trait_problems(sc, parts)
    for component in parts.values():
        if component.traits.check is not None:
            errors.extend(component.traits.check(sc))
    if not errors:
        in_flight_key = parts["protocol"].traits.in_flight_key
        per_step = sc.server.buffer if parts["protocol"].traits.stale else getattr(sc.server, in_flight_key)
        errors.extend(_work_problems(sc, per_step))
    errors.extend(_privacy_problems(sc))
    errors.extend(_list_problems(sc))
    if sc.run.stop is not None and sc.run.stop.epsilon is not None and not sc.privacy.enabled:
        errors.append(f"run.stop.epsilon = {sc.run.stop.epsilon:g}: an ε budget needs privacy.enabled = true")
    if errors:
        raise ScenarioError(list(dict.fromkeys(errors)))
    return sc


def _list_problems(sc: Scenario) -> list[str]:
    """The names of every list-valued kind and their own tables (``run.trackers``,
    ``run.tracker.NAME``), each problem naming the field: a name that is not registered (nor an
    allowed ``"module:attribute"``), a name twice, a table of a component not named, and each
    named component's table (absent: empty) as its config class refuses it (any key, for a
    component without keys); then each named component's own ``check``."""
    out: list[str] = []
    for kind in LISTS:
        section = getattr(sc, kind.section)
        names, found = list(getattr(section, kind.key) or ()), {}
        for name in names:
            try:
                found[name] = REGISTRY.find(kind.name, name)
            except UnknownComponent as exc:
                out.append(str(exc))
                continue
            if found[name] is None:
                out.append(REGISTRY.unknown(kind.name, name))
        twice = [n for n in dict.fromkeys(names) if names.count(n) > 1]
        if twice:
            out.append(f"{kind.field} = {_fmt(names)}: {', '.join(map(repr, twice))} named more than once; each "
                       f"{kind.label} is named once")
        where, tables = f"{kind.section}.{kind.keys_table}", getattr(section, str(kind.keys_table)) or {}
        for name in tables:
            if name not in names:
                out.append(f"{where}.{name}: keys of a {kind.label} {kind.field} does not name ({', '.join(names) or 'none'})")
        for name, component in found.items():
            table = tables.get(name, {})
            if component is None or (component.config is None and not table):
                continue
            if component.config is None:
                out.append(f"{where}.{name}: {kind.label} {name!r} takes no keys")
                continue
            try:
                component.config.model_validate(table)
            except ValidationError as exc:
                fields = list(component.config.model_fields)
                out.extend(describe_errors(exc, lambda loc, n=name: ".".join(str(p) for p in (where, n, *loc)),
                                           lambda loc, f=fields: f))
        for component in found.values():
            if component is not None and component.traits.check is not None:
                out.extend(component.traits.check(sc))
    return out


def file_keys(raw: Mapping[str, Any]) -> list[tuple[str, str]]:
    """``(section, key)`` of every key of a raw scenario that names an input file: the
    ``file_keys`` of the sections' bases and of the components the table names."""
    out = [(section, key) for section, cls in SECTIONS.items() for key in cls.file_keys]
    for kind in KINDS.values():
        try:
            found = REGISTRY.find(kind.name, _tag_of(kind, raw))
        except UnknownComponent:
            found = None
        if found is not None and found.config is not None:
            out.extend((kind.section, key) for key in found.config.file_keys)
    return out


def _anchor_paths(raw: dict[str, Any], base: Path) -> None:
    """Relative file paths written in a scenario file are relative to that file's directory
    (made absolute here, so the resolved scenario names the same files from anywhere)."""
    for section, key in file_keys(raw):
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
    return key, value  # a NaN or ±inf is kept: validation reports it with the field name


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
    kind = TAGGED[dotted]
    return kind.key in new and new[kind.key] != old.get(kind.key, kind.default)


def _tag_of(kind: Kind, raw: Mapping[str, Any]) -> Any:
    """The component a raw scenario names for ``kind`` (its key, else the default)."""
    table = raw.get(kind.section, {})
    return table.get(kind.key, kind.default) if isinstance(table, Mapping) else kind.default


def _find(kind: Kind, name: Any) -> Component | None:
    """The registered component ``name`` of ``kind``, None when there is none or it may not be
    imported (validation then says why, naming the field)."""
    try:
        return REGISTRY.find(kind.name, name)
    except UnknownComponent:
        return None


def _named(kind: Kind, raw: Mapping[str, Any]) -> tuple[Any, Any, set[str]]:
    """What a raw scenario names for ``kind``: the component's name, its links as listed (a
    composite's, else None) and the keys they own."""
    name = _tag_of(kind, raw)
    found = _find(kind, name)
    if found is None:
        return name, None, set()
    keys, table = set(found.keys), raw.get(kind.section)
    links = table.get(found.traits.links) if found.traits.links is not None and isinstance(table, Mapping) else None
    for link in links[:MAX_LINKS] if isinstance(links, (list, tuple)) else ():  # more are refused by validation
        linked = _find(kind, link)
        keys |= set(linked.keys) if linked is not None else set()
    return name, links, keys


def apply_changes(raw: dict[str, Any], overrides: list[str] | tuple[str, ...] = (),
                  unset: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Apply ``--unset KEY`` removals, then ``--set KEY=VALUE`` overrides, to a raw scenario
    table read from a file; returns the notes to show the user (docs/scenario.md §2).
    :func:`apply_values` does the work on parsed values."""
    return apply_values(raw, [parse_override(item) for item in overrides], unset)


def apply_values(raw: dict[str, Any], values: list[tuple[str, Any]],
                 unset: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Apply removals of the dotted keys ``unset``, then the ``(dotted key, value)`` pairs, to a
    raw scenario table; returns the notes to show the user (docs/scenario.md §2).

    When the changes name another component of some kind (``latency.dist``, ``task.name``,
    ``server.rule``, …), the table's keys that only the old component owns are dropped — a
    lognormal ``latency.sigma`` means nothing to an exponential latency, nor momentum's ``beta`` to
    SGD — and one note names them. Keys given in ``values`` are never dropped (validation then
    names the ones the new component refuses). Unsetting a key the table does not hold, or both
    setting and unsetting one, is a :class:`ScenarioError`."""
    set_keys = {key for key, _ in values}
    errors = []
    for key in unset:
        if key in set_keys:
            errors.append(f"--unset {key}: also given with --set; give one of them")
        elif not _has(raw, key):
            errors.append(f"--unset {key}: the scenario file has no such key")
    if errors:
        raise ScenarioError(errors)
    before = {kind.name: _named(kind, raw) for kind in KINDS.values()}
    for key in unset:
        parts = key.split(".")
        node = raw
        for part in parts[:-1]:
            node = node[part]
        del node[parts[-1]]
    view = {section: dict(table) for section, table in raw.items() if isinstance(table, dict)}  # the sections as set
    for key, value in values:
        section, _, rest = key.partition(".")
        if section in view and rest and "." not in rest:
            view[section][rest] = value
    after = {kind.name: _named(kind, view) for kind in KINDS.values()}
    notes = []
    for kind in KINDS.values():
        (old, old_links, old_keys), (new, new_links, new_keys) = before[kind.name], after[kind.name]
        table = raw.get(kind.section)
        if (old, old_links) == (new, new_links) or not isinstance(table, dict):
            continue
        if not old_keys or (not new_keys and _find(kind, new) is None):
            continue
        keep = set() if kind.whole_section else set(SECTIONS[kind.section].model_fields)
        dropped = sorted(k for k in table if k in old_keys - new_keys - keep and f"{kind.section}.{k}" not in set_keys)
        for k in dropped:
            del table[k]
        if dropped:
            what = (f"{kind.field} {old!r} → {new!r}" if old != new else
                    f"{kind.section}.{_find(kind, new).traits.links} {_fmt(list(old_links or ()))} → {_fmt(list(new_links or ()))}")  # type: ignore[union-attr]
            why = f"({old} only)" if old != new else "(keys of links no longer listed)"
            notes.append(f"note: {what}: dropped the file's {', '.join(f'{kind.section}.{k}' for k in dropped)} {why}")
    for key, value in values:
        assign(raw, key, value)
    return notes


def _has(raw: Mapping[str, Any], dotted: str) -> bool:
    node: Any = raw
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True


def drop_unowned(raw: dict[str, Any]) -> list[str]:
    """Remove, from a raw scenario, the keys of components it does not name (``server.adam_eps``
    with ``rule = "sgd"``); returns them as ``section.key``. asyncfl ≤ 0.1 wrote every such key
    into a run directory's ``scenario.toml`` (they had no effect on the run), so a run directory
    is read with ``load(..., run_dir=True)``, which drops them; a user's scenario file keeps them
    and they are refused."""
    dropped = []
    for section, kinds in SELECTORS.items():
        table = raw.get(section)
        if not isinstance(table, dict):
            continue
        named: set[str] = set(SECTIONS[section].model_fields)
        others: set[str] = set()
        for kind in kinds:
            named |= _named(kind, raw)[2]  # a composite's links' keys included
            others |= {k for c in REGISTRY.components(kind.name) for k in c.keys}
        for key in [k for k in table if k in others - named]:
            del table[key]
            dropped.append(f"{section}.{key}")
    return dropped


def unowned_key(raw: Mapping[str, Any], dotted: str) -> str | None:
    """For ``section.key`` held by a raw scenario: the components that own it when none that the
    scenario names does (nor the section itself) — ``server.clip_tau`` with ``rule = "momentum"``
    is a key of ``'clip', 'clipped-momentum'`` — else None (owned here, a tagged section's key,
    or a key nothing owns: validation names those)."""
    section, _, key = dotted.partition(".")
    kinds = SELECTORS.get(section)
    if not kinds or not key or "." in key or key in SECTIONS[section].model_fields:
        return None
    if any(key in _named(kind, raw)[2] for kind in kinds):
        return None
    owners = [repr(c.name) for kind in kinds for c in REGISTRY.components(kind.name) if key in c.keys]
    return ", ".join(owners) or None


def load(path: str | Path, overrides: list[str] | tuple[str, ...] = (), unset: list[str] | tuple[str, ...] = (),
         notes: list[str] | None = None, *, run_dir: bool = False, resume: bool = False) -> Scenario:
    """Read, change (:func:`apply_changes`: ``--unset``, then ``--set``) and validate a scenario
    file; the notes of the changes are appended to ``notes`` when given. Relative trace paths in
    the file (``latency.file``, ``population.availability_file``) are taken relative to the
    file's directory; in ``--set`` overrides, relative to the working directory. ``run_dir``: the
    file is a run directory's ``scenario.toml``, possibly written by asyncfl ≤ 0.1
    (:func:`drop_unowned`), read to look at: its component names are looked up among the
    registered ones and never imported (:func:`asyncfl.components.allow.reading`), unless
    ``resume`` (a resume builds the run again: an allowed module is imported, as for a scenario)."""
    if run_dir and not resume:
        with allow.reading():
            return _load(path, overrides, unset, notes, run_dir=True)
    return _load(path, overrides, unset, notes, run_dir=run_dir)


def _load(path: str | Path, overrides: list[str] | tuple[str, ...], unset: list[str] | tuple[str, ...],
          notes: list[str] | None, *, run_dir: bool) -> Scenario:
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
    if run_dir:
        drop_unowned(raw)
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


def replay_scenario(scenario: Scenario, file: str | Path, **overrides: object) -> Scenario:
    """``scenario`` with its latency replaced by a replay of ``file`` (speed models and
    availability reset, as the trace holds them), plus dotted-key ``overrides``
    (``{"server.rule": "sgd"}``; naming another component drops the old one's keys, as ``--set``
    does)."""
    raw = scenario.to_dict()
    raw["latency"] = {"dist": "trace", "file": absolute_file(str(file))}
    pop = raw["population"]
    for key in ("speed_sigma", "slow_fraction", "slow_factor"):
        pop.pop(key, None)
    apply_values(raw, [("population.availability", KINDS["availability"].default)])
    apply_values(raw, list(overrides.items()))
    return validate(raw)
