"""Components: every plug-in of asyncfl declared in one place (docs/extending.md §1–3).

A :class:`Component` is what a plug-in *is*: its kind (a task, a server rule, …), its name, its
own config class (the scenario keys it owns), the traits the rest of the code asks about
(:mod:`asyncfl.components.traits`), the state types it checkpoints, and its builder. Built-ins and
a user's plug-ins are registered through the same path, :func:`asyncfl.components.registry.register`, and found three ways:

* from Python: ``asyncfl.register(Component(...))`` (or several at once);
* from an installed package, through the entry-point group :data:`ENTRY_POINT_GROUP`
  (``asyncfl.plugins``): the entry point names a :class:`Component`, a sequence of them, or a
  function returning them. asyncfl's own built-ins are such an entry point
  (``asyncfl.components.builtin:COMPONENTS``);
* from a scenario, by naming ``"package.module:attribute"`` where the scenario names a
  component (``server.rule = "mylab.rules:CLIPPED"``), for a module the user allowed
  (:mod:`asyncfl.components.allow`): the module is imported and the attribute, which must be a
  :class:`Component` of that kind (never called), is registered under that name.

Each component remembers where it came from (:class:`Origin`: built-in, an installed package and
its version, or a module), which the run directory records with a digest of its code
(docs/run-directory.md §1.1) and ``asyncfl resume`` checks.

Builders, config classes and traits are declared torch-free for the built-ins: a builder may be
given as a ``"module:attribute"`` string and is imported on first use, so validating a scenario
or printing ``--help`` imports no implementation.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field, replace
from typing import Any

import pydantic

from asyncfl.components import contracts as ct
from asyncfl.components import traits as tr
from asyncfl.config.base import Section

@dataclass(frozen=True)
class Kind:
    """One kind of plug-in and the scenario key that selects it.

    ``section.key`` names the component (``server.rule``), ``default`` when the key is absent.
    ``keys_table`` makes the kind *list-valued*: ``section.key`` is a list of names (``run.trackers
    = ["mlflow", "wandb"]``, none when absent), and each named component's own keys sit in its
    own table ``section.keys_table.NAME`` (``[run.tracker.mlflow]``), not in the section, so two
    named components never share a key. ``whole_section``: the component's config class is the whole section (a tagged section:
    ``[task]``, ``[latency]``); otherwise its keys join the section's own keys (the rule's
    ``beta`` sits in ``[server]``). Every builder has one shape, ``build(cfg, ctx) -> product``
    (:mod:`asyncfl.components.contracts`): ``product`` is the public protocol of what it returns
    and ``context`` names the context it is given (:class:`~asyncfl.components.contracts.BuildContext`
    or the kind's extension of it)."""

    name: str
    label: str
    section: str
    key: str
    default: Any
    traits: type[tr.Traits]
    whole_section: bool = False
    product: type = object
    context: str = "BuildContext"
    keys_table: str | None = None

    @property
    def field(self) -> str:
        return f"{self.section}.{self.key}"

    @property
    def many(self) -> bool:
        """A list-valued kind (``keys_table``): a scenario names any number of its components."""
        return self.keys_table is not None

    @property
    def builds(self) -> str:
        """The contract, as docs and error messages write it."""
        return f"build(cfg, ctx: {self.context}) -> {self.product.__name__}"


KINDS: dict[str, Kind] = {k.name: k for k in (
    Kind("task", "task", "task", "name", "synthetic", tr.TaskTraits, True, ct.Task),
    Kind("latency", "latency model", "latency", "dist", "exponential", tr.LatencyTraits, True, ct.LatencyModel,
         "FleetContext"),
    Kind("availability", "availability model", "population", "availability", "always", tr.AvailabilityTraits, False,
         ct.AvailabilityModel, "FleetContext"),
    Kind("protocol", "protocol", "server", "protocol", "fedbuff", tr.ProtocolTraits, False, ct.ServerProtocol),
    Kind("algorithm", "server algorithm", "server", "algorithm", "fedavg", tr.AlgorithmTraits, False, ct.Algorithm,
         "AlgorithmContext"),
    Kind("rule", "server rule", "server", "rule", "sgd", tr.RuleTraits, False, ct.ServerRule),
    Kind("solver", "local solver", "client", "solver", "sgd", tr.SolverTraits, False, ct.LocalSolver),
    Kind("hook", "update hook", "client", "update_hook", "none", tr.PlainTraits, False, ct.UpdateHook),
    Kind("executor", "executor", "run", "executor", "inline", tr.ExecutorTraits, False, ct.Executor,
         "ExecutorContext"),
    Kind("sampling", "sampling assumption", "privacy", "sampling", "poisson", tr.SamplingTraits, False,
         ct.SamplingAssumption),
    Kind("accountant", "privacy accountant", "privacy", "accountant", "pld", tr.PlainTraits, False, ct.Accountant),
    Kind("counts", "count post-processing", "privacy", "counts", "project", tr.CountsTraits, False,
         ct.CountsPostprocessor),
    Kind("noise", "noise mechanism", "privacy", "noise", "iid", tr.NoiseTraits, False, ct.NoiseMechanism,
         "NoiseContext"),
    Kind("tracker", "tracker", "run", "trackers", (), tr.TrackerTraits, False, ct.Tracker, keys_table="tracker"),
)}
"""Every kind of component, by name (docs/extending.md §2 lists what each builder gets)."""


@dataclass(frozen=True)
class Origin:
    """Where a component came from: ``"builtin"`` (asyncfl itself), ``"package"`` (an installed
    distribution, with its version) or ``"module"`` (a module of no installed distribution).
    ``module`` is the module that declares it."""

    source: str
    module: str
    package: str | None = None
    version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in (("source", self.source), ("module", self.module), ("package", self.package),
                                  ("version", self.version)) if v is not None}

    def describe(self) -> str:
        if self.source == "builtin":
            return "built into asyncfl"
        if self.package is not None:
            return f"package {self.package} {self.version or ''} ({self.module})".replace("  ", " ")
        return f"module {self.module}"


@dataclass(frozen=True)
class Component:
    """A plug-in, declared in one place (docs/extending.md §1).

    ``kind``: a key of :data:`KINDS`; ``name``: what a scenario writes; ``build``: the builder
    ``build(cfg, ctx)`` (or ``"module:attribute"``, imported on first use; its contract:
    ``KINDS[kind].builds``), whose signature registration checks;
    ``config``: a :class:`asyncfl.config.base.Section` subclass holding the keys it owns (None: no
    keys); ``traits``: an instance of ``KINDS[kind].traits`` (default: all defaults);
    ``state``: the state types it checkpoints (NamedTuples, or ``"module:attribute"``);
    ``summary``: one line for listings. ``links``: for a composite (``traits.links``, e.g. the
    rule ``chain``) as a scenario names it, the components it links, in order (:meth:`linked`);
    empty as registered."""

    kind: str
    name: str
    build: Any
    config: type | None = None
    traits: tr.Traits | None = None
    state: tuple[Any, ...] = ()
    summary: str = ""
    origin: Origin | None = field(default=None, compare=False)
    links: tuple["Component", ...] = ()

    def __post_init__(self) -> None:
        kind = KINDS.get(self.kind)
        if kind is None:
            raise ValueError(f"component {self.name!r}: unknown kind {self.kind!r}; kinds: {', '.join(KINDS)}")
        if not isinstance(self.name, str) or not self.name or any(c.isspace() for c in self.name):
            raise ValueError(f"{kind.label} {self.name!r}: a name is a non-empty string without spaces")
        if self.traits is None:
            object.__setattr__(self, "traits", kind.traits())
        elif not isinstance(self.traits, kind.traits):
            raise ValueError(f"{kind.label} {self.name!r}: traits must be a {kind.traits.__name__}")
        if kind.many and self.traits.links is not None:
            raise ValueError(f"{kind.label} {self.name!r}: a {kind.label} is one of a list ({kind.field}) and cannot link others")
        if kind.whole_section and self.config is None:
            raise ValueError(f"{kind.label} {self.name!r}: a {kind.label} owns its whole [{kind.section}] section: give its config class")
        if self.config is not None:
            _check_config(self, kind)
        if self.traits.links is not None:
            _check_composite(self, kind)

    @property
    def kind_info(self) -> Kind:
        return KINDS[self.kind]

    @property
    def keys(self) -> tuple[str, ...]:
        """The scenario keys this component owns (its config class's fields, less the tag)."""
        if self.config is None:
            return ()
        return tuple(k for k in self.config.model_fields if k != self.kind_info.key)

    def builder(self) -> Any:
        """The builder, imported on first use when given as ``"module:attribute"`` (its signature
        checked then; a callable's is checked at registration, :meth:`check_builder`)."""
        if not isinstance(self.build, str):
            return self.build
        builder = _resolve(self.build)
        self.check_builder(builder)
        return builder

    def make(self, cfg: Any, ctx: Any) -> Any:
        """The product: ``build(cfg, ctx)``."""
        return self.builder()(cfg, ctx)

    def check_builder(self, builder: Any = None) -> None:
        """Refuse a builder that cannot be called as ``build(cfg, ctx)``, naming the kind's
        contract (pluggy's check of a hook implementation against its spec)."""
        problem = ct.signature_problem(self.build if builder is None else builder)
        if problem is not None:
            info = self.kind_info
            raise TypeError(f"{info.label} {self.name!r}: {problem}; a {info.label}'s builder is "
                            f"{info.builds} (docs/extending.md §2)")

    def state_types(self) -> tuple[type, ...]:
        return tuple(_resolve(t) if isinstance(t, str) else t for t in self.state)

    def own_config(self, section: Any) -> Any:
        """This component's config, taken from the scenario section that holds its keys (a
        list-valued kind's component: from its own table in it, ``run.tracker.mlflow``). A
        linked composite's config holds its own keys and every link's, and names the links
        (``cfg.links``), so its builder builds each link from ``link.own_config(cfg)``."""
        if self.config is None:
            return None
        table = self.kind_info.keys_table
        if table is not None:  # a list-valued kind: its own table, section.keys_table.NAME
            return self.config.model_validate((getattr(section, table, None) or {}).get(self.name, {}))
        if type(section) is self.config:  # a whole section (task, latency); a composed one only derives from it
            return section
        cls = _linked_config(self.config, self.links) if self.links else self.config
        return cls.model_validate({k: getattr(section, k) for k in cls.model_fields})

    def linked(self, links: tuple["Component", ...]) -> "Component":
        """This composite with its links (registered components of its kind, in order): its
        traits derived from theirs by ``traits.combine`` (docs/server-rules.md §10), its config
        holding their keys (:meth:`own_config`)."""
        traits = self.traits
        if traits.combine is not None:
            traits = replace(traits.combine(tuple(links)), links=traits.links, combine=traits.combine)
        return replace(self, traits=traits, links=tuple(links))


def _check_config(component: Component, kind: Kind) -> None:
    cls = component.config
    if not (isinstance(cls, type) and issubclass(cls, Section)):
        raise ValueError(f"{kind.label} {component.name!r}: config must be a subclass of asyncfl.config.base.Section")
    if kind.whole_section:
        tag = cls.model_fields.get(kind.key)
        if tag is None or tag.default != component.name:
            raise ValueError(f"{kind.label} {component.name!r}: its config class must have {kind.key} = {component.name!r}")


def _check_composite(component: Component, kind: Kind) -> None:
    key = component.traits.links
    if kind.whole_section:
        raise ValueError(f"{kind.label} {component.name!r}: a {kind.label} owns its whole [{kind.section}] section and cannot link others")
    if component.config is None or key not in component.config.model_fields:
        raise ValueError(f"{kind.label} {component.name!r}: traits.links = {key!r} must name a key of its config class")


_LINKED: dict[tuple[Any, ...], type] = {}


def _linked_config(config: type, links: tuple[Component, ...]) -> type:
    """The config class of a composite linked to ``links``: its own config class merged with each
    link's (made once per combination); the class names the links (``links``, a class attribute,
    not a scenario key)."""
    key = (config, links)
    cls = _LINKED.get(key)
    if cls is None:
        parts = tuple(dict.fromkeys(c for c in (config, *(link.config for link in links)) if c is not None))
        cls = pydantic.create_model(f"{config.__name__}[{', '.join(link.name for link in links)}]",
                                    __base__=tuple(reversed(parts)))
        cls.links = links  # type: ignore[attr-defined]
        _LINKED[key] = cls
    return cls


def _resolve(target: str) -> Any:
    module, _, attribute = target.partition(":")
    if not module or not attribute:
        raise ValueError(f"{target!r}: expected 'package.module:attribute'")
    obj: Any = importlib.import_module(module)
    for part in attribute.split("."):
        obj = getattr(obj, part)
    return obj


