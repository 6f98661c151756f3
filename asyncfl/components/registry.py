"""The registry of components: one per process, built-ins and plug-ins loaded through the same
path (docs/extending.md §3).

:data:`REGISTRY` holds every registered :class:`~asyncfl.components.core.Component` by kind and
name. On first use it loads the entry-point group :data:`ENTRY_POINT_GROUP`, asyncfl's own
built-ins included (``asyncfl.components.builtin:COMPONENTS``, imported directly when asyncfl
runs from a source tree that is not installed); :func:`register` adds components from Python, and
a ``"package.module:attribute"`` name in a scenario imports and registers one on first use. Each
kind is also seen as a live table (:class:`KindTable`: ``RULES``, ``TASKS``, … in
:mod:`asyncfl.config.registries`).
"""

from __future__ import annotations

import difflib
import importlib.metadata
import threading
from dataclasses import replace
from types import ModuleType
from typing import Any, Iterable, Iterator

from asyncfl.components.core import KINDS, Component, Origin, _resolve
from asyncfl.registry import Registry as NameTable

#: the entry-point group an installed package uses to offer components
ENTRY_POINT_GROUP = "asyncfl.plugins"


class UnknownComponent(LookupError):
    """A name that no registered component of its kind has (the message lists the names)."""


class Registry:
    """Every registered component, by kind and name. One instance, :data:`REGISTRY`; built-ins
    and plug-ins are loaded on first use (:meth:`load_plugins`)."""

    def __init__(self) -> None:
        self._by_kind: dict[str, dict[str, Component]] = {k: {} for k in KINDS}
        self._loaded = False
        self._loading = threading.RLock()
        self.generation = 0  # counts changes, for caches of what is registered
        self.plugin_errors: list[str] = []

    # -- registration --------------------------------------------------------------------------
    def register(self, component: Component, *, origin: Origin | None = None, replace_existing: bool = False) -> Component:
        """Register ``component``; its origin is worked out from its builder's module unless
        given. A name already registered for that kind by another component is an error unless
        ``replace_existing``. A builder given as a callable must fit the kind's contract
        ``build(cfg, ctx)`` (refused here, naming it); one given as ``"module:attribute"`` is
        checked when first imported."""
        if not isinstance(component, Component):
            raise TypeError(f"register() takes Component objects, not {type(component).__name__}")
        if not isinstance(component.build, str):
            component.check_builder()
        if origin is None:
            origin = component.origin or origin_of_module(_declaring_module(component))
        component = replace(component, origin=origin)
        table = self._by_kind[component.kind]
        old = table.get(component.name)
        if old is not None and old != component and not replace_existing:
            raise ValueError(f"{component.kind_info.label} {component.name!r} is already registered "
                             f"({old.origin.describe() if old.origin else 'unknown origin'}); pass replace_existing=True to replace it")
        table[component.name] = component
        self.generation += 1
        return component

    def unregister(self, kind: str, name: str) -> None:
        if self._by_kind[kind].pop(name, None) is not None:
            self.generation += 1

    def register_object(self, obj: Any, origin: Origin | None = None) -> list[Component]:
        """Register what an entry point or a ``"module:attr"`` names: a component, a sequence of
        them, a module holding ``COMPONENTS``, or a function returning any of these."""
        if isinstance(obj, ModuleType):
            obj = getattr(obj, "COMPONENTS", None)
            if obj is None:
                raise ValueError("a plug-in module must define COMPONENTS (a sequence of asyncfl.Component)")
        if callable(obj) and not isinstance(obj, Component):
            obj = obj()
        items = [obj] if isinstance(obj, Component) else list(obj)
        return [self.register(c, origin=origin) for c in items]

    # -- discovery -------------------------------------------------------------------------------
    def load_plugins(self) -> None:
        """Register the built-ins and every installed plug-in (entry-point group
        ``asyncfl.plugins``), once. A plug-in that fails to load is remembered in
        :attr:`plugin_errors` (named when one of its names is asked for), not raised."""
        if self._loaded:
            return
        with self._loading:
            if self._loaded:
                return
            self._loaded = True
            points = list(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP))
            own = [ep for ep in points if ep.dist is not None and ep.dist.name == "asyncfl"]
            if not own:  # not installed (a source tree on sys.path): the same declarations, directly
                self.register_object(_resolve("asyncfl.components.builtin:COMPONENTS"),
                                     origin=Origin("builtin", "asyncfl.components.builtin"))
            for ep in own + [ep for ep in points if ep not in own]:
                is_own = ep in own
                try:
                    obj = ep.load()
                    origin = (Origin("builtin", ep.module) if is_own else
                              Origin("package", ep.module, ep.dist.name if ep.dist else None,
                                     ep.dist.version if ep.dist else None))
                    self.register_object(obj, origin=origin)
                except Exception as exc:  # a broken plug-in must not break asyncfl
                    if is_own:
                        raise
                    dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist else "?"
                    self.plugin_errors.append(f"plug-in {ep.name!r} of {dist} ({ep.value}) failed to load: "
                                              f"{type(exc).__name__}: {exc}")

    # -- lookup ----------------------------------------------------------------------------------
    def names(self, kind: str) -> tuple[str, ...]:
        self.load_plugins()
        return tuple(self._by_kind[kind])

    def components(self, kind: str) -> Iterator[Component]:
        self.load_plugins()
        return iter(list(self._by_kind[kind].values()))

    def find(self, kind: str, name: Any) -> Component | None:
        """The component ``name`` of ``kind``, or None. A ``"module:attribute"`` name is imported
        and registered under that name on first use (an import error is raised)."""
        self.load_plugins()
        if not isinstance(name, str):
            return None
        found = self._by_kind[kind].get(name)
        if found is None and ":" in name and not name.startswith("asyncfl:"):
            found = self._import(kind, name)
        return found

    def get(self, kind: str, name: Any) -> Component:
        found = self.find(kind, name)
        if found is None:
            raise UnknownComponent(self.unknown(kind, name))
        return found

    def unknown(self, kind: str, name: Any) -> str:
        """The message for a name of ``kind`` that is not registered: the field, the value, a
        close match, every allowed name, and plug-ins that failed to load."""
        info, names = KINDS[kind], self.names(kind)
        close = difflib.get_close_matches(str(name), names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        text = repr(name) if len(repr(name)) <= 60 else repr(name)[:57] + "..."
        broken = f" ({'; '.join(self.plugin_errors)})" if self.plugin_errors else ""
        return (f"{info.field} = {text}: unknown {info.label} (a registered name, or 'package.module:attribute' "
                f"naming an asyncfl.Component){broken}{hint} Allowed: {', '.join(names)}")

    def _import(self, kind: str, name: str) -> Component:
        module, _, attribute = name.partition(":")
        try:
            obj = _resolve(name)
        except (ImportError, AttributeError, ValueError) as exc:
            raise UnknownComponent(f"{KINDS[kind].field} = {name!r}: cannot import {attribute!r} from "
                                   f"{module!r} ({type(exc).__name__}: {exc})") from None
        if callable(obj) and not isinstance(obj, Component):
            obj = obj()
        if not isinstance(obj, Component) or obj.kind != kind:
            raise UnknownComponent(f"{KINDS[kind].field} = {name!r}: names {type(obj).__name__}, not an "
                                   f"asyncfl.Component of kind {kind!r}")
        return self.register(replace(obj, name=name), origin=origin_of_module(module))


def _declaring_module(component: Component) -> str:
    build = component.build
    if isinstance(build, str):
        return build.partition(":")[0]
    return getattr(build, "__module__", None) or "__main__"


_DISTRIBUTIONS: dict[str, list[str]] | None = None


def origin_of_module(module: str) -> Origin:
    """The origin of a component declared in ``module``: built-in for asyncfl's own modules,
    else the installed distribution that provides the module's top-level package (with its
    version), else the module alone."""
    global _DISTRIBUTIONS
    top = module.partition(".")[0]
    if top == "asyncfl":
        return Origin("builtin", module)
    if _DISTRIBUTIONS is None:
        _DISTRIBUTIONS = dict(importlib.metadata.packages_distributions())
    dists = _DISTRIBUTIONS.get(top) or []
    if dists:
        try:
            return Origin("package", module, dists[0], importlib.metadata.version(dists[0]))
        except importlib.metadata.PackageNotFoundError:
            pass
    return Origin("module", module)


REGISTRY = Registry()
"""The one registry of this process."""


def register(*components: Component | Iterable[Component], replace_existing: bool = False) -> list[Component]:
    """Register components from Python (docs/extending.md §3): each argument is a
    :class:`Component` or an iterable of them. Returns them as registered (with their origin).
    Registered components work everywhere a built-in does: scenarios, ``asyncfl`` commands run in
    this process, sweeps, resume."""
    REGISTRY.load_plugins()
    out = []
    for item in components:
        for c in ([item] if isinstance(item, Component) else list(item)):
            out.append(REGISTRY.register(c, replace_existing=replace_existing))
    return out


def unregister(kind: str, name: str) -> None:
    """Remove a component registered from Python (tests; a notebook redefining one)."""
    REGISTRY.unregister(kind, name)


def component(kind: str, name: Any) -> Component:
    """The registered component ``name`` of ``kind`` (:class:`UnknownComponent` otherwise)."""
    return REGISTRY.get(kind, name)


# -- the view of one kind, for code that asks by kind ---------------------------------------------
class KindTable(NameTable):
    """The components of one kind, asked like a table: ``name in RULES``, ``RULES.names``,
    ``RULES.get(name)``, ``RULES.load(name)`` (the builder), ``RULES.make(name, cfg, ctx)`` (its
    product), ``RULES.config(name)``. A live view:
    a component registered later is in it."""

    def __init__(self, kind: str) -> None:  # noqa: super().__init__ not called: no fixed entries
        self.kind = kind
        self.info = KINDS[kind]

    @property
    def field(self) -> str:
        return self.info.field

    @property
    def names(self) -> tuple[str, ...]:
        return REGISTRY.names(self.kind)

    def __contains__(self, name: object) -> bool:
        try:
            return REGISTRY.find(self.kind, name) is not None
        except UnknownComponent:
            return False

    def __iter__(self) -> Iterator[Component]:
        return REGISTRY.components(self.kind)

    def entries(self) -> Iterator[Component]:
        return REGISTRY.components(self.kind)

    def get(self, name: Any) -> Component:
        return REGISTRY.get(self.kind, name)

    def find(self, name: Any) -> Component | None:
        return REGISTRY.find(self.kind, name)

    def unknown(self, name: Any) -> str:
        return REGISTRY.unknown(self.kind, name)

    def load(self, name: Any) -> Any:
        """The builder ``build(cfg, ctx)`` of ``name``."""
        return self.get(name).builder()

    def make(self, name: Any, cfg: Any = None, ctx: Any = None) -> Any:
        """The product of ``name``: its builder called with ``(cfg, ctx)`` (a kind whose
        products need neither, such as an accountant, is made with None for both)."""
        return self.get(name).make(cfg, ctx)

    def config(self, name: Any) -> type:
        cls = self.get(name).config
        if cls is None:
            raise LookupError(f"{self.info.label} {name!r} has no config class")
        return cls

    def traits(self, name: Any) -> Any:
        return self.get(name).traits

    def __repr__(self) -> str:
        return f"KindTable({self.kind!r})"


def table(kind: str) -> KindTable:
    return KindTable(kind)
