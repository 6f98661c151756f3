"""The registry of components: one per process, built-ins and plug-ins loaded through the same
path (docs/extending.md §3).

:data:`REGISTRY` holds every registered :class:`~asyncfl.components.core.Component` by kind and
name. On first use it loads the entry-point group :data:`ENTRY_POINT_GROUP`, asyncfl's own
built-ins included (``asyncfl.components.builtin:COMPONENTS``, imported directly when asyncfl
runs from a source tree that is not installed); :func:`register` adds components from Python.

A name from data (a scenario, a ``--set`` override, a run directory) finds only what is
registered. A ``"package.module:attribute"`` name imports its module only when the user allowed
that module (:mod:`asyncfl.components.allow`), and never inside :func:`~asyncfl.components.allow.reading`;
the attribute must *be* a :class:`Component` of the kind asked for (or a list or tuple holding
exactly one of that kind): it is never called. Entry points of installed packages are trusted,
like pytest's; one that fails to load — an exception or ``SystemExit`` on import — is reported
as a failed plug-in, and a name two installed plug-ins both register is refused naming both.
Each kind is also seen as a live table (:class:`KindTable`: ``RULES``, ``TASKS``, … in
:mod:`asyncfl.config.registries`).
"""

from __future__ import annotations

import difflib
import importlib.metadata
import threading
from dataclasses import replace
from types import ModuleType
from typing import Any, Iterable, Iterator

from asyncfl.components import allow
from asyncfl.components.core import KINDS, Component, Origin, _resolve
from asyncfl.errors import AsyncFLError
from asyncfl.registry import Registry as NameTable

#: the entry-point group an installed package uses to offer components
ENTRY_POINT_GROUP = "asyncfl.plugins"


class UnknownComponent(AsyncFLError, LookupError):
    """A name that no registered component of its kind has (the message lists the names), or a
    ``"module:attribute"`` name that may not be imported or does not name a component."""


class Registry:
    """Every registered component, by kind and name. One instance, :data:`REGISTRY`; built-ins
    and plug-ins are loaded on first use (:meth:`load_plugins`)."""

    def __init__(self) -> None:
        self._by_kind: dict[str, dict[str, Component]] = {k: {} for k in KINDS}
        self._loaded = False
        self._loading = threading.RLock()
        self.generation = 0  # counts changes, for caches of what is registered
        self.plugin_errors: list[str] = []
        # (kind, name) registered by two installed plug-ins: refused where asked for, naming both
        self.conflicts: dict[tuple[str, str], list[Origin]] = {}

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
                dist = f"{ep.dist.name} {ep.dist.version}" if ep.dist else "?"
                try:
                    obj = ep.load()
                    origin = (Origin("builtin", ep.module) if is_own else
                              Origin("package", ep.module, ep.dist.name if ep.dist else None,
                                     ep.dist.version if ep.dist else None))
                    if is_own:
                        self.register_object(obj, origin=origin)
                    else:
                        self._register_plugin(obj, origin)
                except KeyboardInterrupt:
                    raise
                except BaseException as exc:  # a broken plug-in (SystemExit on import included) must not stop asyncfl
                    if is_own:
                        raise
                    self.plugin_errors.append(f"plug-in {ep.name!r} of {dist} ({ep.value}) failed to load: "
                                              f"{type(exc).__name__}: {exc}")

    def _register_plugin(self, obj: Any, origin: Origin) -> None:
        """Register an installed plug-in's components one by one. A name already taken by another
        installed plug-in makes a conflict (the name is refused wherever it is asked for, naming
        both packages); one taken by a built-in is that plug-in's error (the built-in stays)."""
        if isinstance(obj, ModuleType):
            obj = getattr(obj, "COMPONENTS", None)
            if obj is None:
                raise ValueError("a plug-in module must define COMPONENTS (a sequence of asyncfl.Component)")
        if callable(obj) and not isinstance(obj, Component):
            obj = obj()  # an installed entry point is trusted (docs/extending.md §3)
        for c in [obj] if isinstance(obj, Component) else list(obj):
            if not isinstance(c, Component):
                raise TypeError(f"register() takes Component objects, not {type(c).__name__}")
            key = (c.kind, c.name)
            if key in self.conflicts:
                self.conflicts[key].append(origin)
                continue
            old = self._by_kind[c.kind].get(c.name)
            if old is not None and old.origin is not None and old.origin.source == "package" \
                    and (old != c or old.origin.package != origin.package):
                self.conflicts[key] = [old.origin, origin]
                del self._by_kind[c.kind][c.name]
                self.generation += 1
                continue
            self.register(c, origin=origin)

    # -- lookup ----------------------------------------------------------------------------------
    def names(self, kind: str) -> tuple[str, ...]:
        self.load_plugins()
        return tuple(self._by_kind[kind])

    def components(self, kind: str) -> Iterator[Component]:
        self.load_plugins()
        return iter(list(self._by_kind[kind].values()))

    def find(self, kind: str, name: Any) -> Component | None:
        """The component ``name`` of ``kind``, or None. A ``"module:attribute"`` name that is not
        registered is imported and registered under that name on first use, only if its module is
        allowed and not while reading a run directory (:mod:`asyncfl.components.allow`);
        otherwise, or when it is not a component of ``kind``, :class:`UnknownComponent` says why."""
        self.load_plugins()
        if not isinstance(name, str):
            return None
        if (kind, name) in self.conflicts:
            raise UnknownComponent(self._conflict(kind, name))
        found = self._by_kind[kind].get(name)
        if found is None and ":" in name:
            found = self._import(kind, name)
        return found

    def _conflict(self, kind: str, name: str) -> str:
        both = " and ".join(o.describe() for o in self.conflicts[(kind, name)])
        return (f"{KINDS[kind].field} = {name!r}: registered by more than one installed plug-in, {both}; asyncfl will not "
                f"choose between them: uninstall one, or register the one you mean from Python under another name")

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
                f"naming an asyncfl.Component of a module you allow){broken}{hint} Allowed: {', '.join(names)}")

    def _import(self, kind: str, name: str) -> Component:
        """The component ``"module:attribute"`` names, imported only when allowed (module docstring)."""
        info = KINDS[kind]
        shown = _short(name)
        module, _, attribute = name.partition(":")
        if allow.is_reading():
            raise UnknownComponent(f"{info.field} = {shown}: not registered in this process, and reading a run directory "
                                   "never imports code; register the component (asyncfl.register) or install its package "
                                   "to read what depends on it")
        if allow.module_name_problem(module) or not all(p.isidentifier() for p in attribute.split(".")):
            raise UnknownComponent(f"{info.field} = {shown}: unknown {info.label}; a name with ':' must be "
                                   f"'package.module:attribute'. Allowed names: {', '.join(self.names(kind))}")
        if not allow.is_allowed(module):
            raise UnknownComponent(f"{info.field} = {shown}: {allow.refusal(module)}")
        if info.whole_section:
            raise UnknownComponent(f"{info.field} = {shown}: a {info.label} owns the whole [{info.section}] section and is "
                                   f"named by its own name: register it (asyncfl.register, or an installed package's entry "
                                   f"point) and write {info.field} = its name")
        try:
            obj = allow.load_attribute(module, attribute)
        except ImportError as exc:
            raise UnknownComponent(f"{info.field} = {shown}: {exc}") from None
        found = _component_of(obj, kind, shown)
        try:
            return self.register(replace(found, name=name), origin=origin_of_module(module))
        except (TypeError, ValueError) as exc:  # a builder of another shape, a name taken: said, not raised
            raise UnknownComponent(f"{info.field} = {shown}: {exc}") from None


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _component_of(obj: Any, kind: str, shown: str) -> Component:
    """The :class:`Component` of ``kind`` that ``obj`` is (or the only one of that kind in a list or
    tuple ``obj`` is); nothing of ``obj`` is ever called."""
    info = KINDS[kind]
    candidates = [obj] if isinstance(obj, Component) else [c for c in obj if isinstance(c, Component)] \
        if type(obj) in (list, tuple) else None
    if candidates is None:
        raise UnknownComponent(f"{info.field} = {shown}: names a {type(obj).__name__}, not an asyncfl.Component (nor a "
                               f"list or tuple of them); asyncfl never calls what a name points to")
    of_kind = [c for c in candidates if c.kind == kind]
    if len(of_kind) != 1:
        held = ", ".join(f"{c.kind} {c.name!r}" for c in candidates) or "no component"
        raise UnknownComponent(f"{info.field} = {shown}: must name exactly one {info.label} component; it holds {held}")
    return of_kind[0]


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
