"""The command table of the ``asyncfl`` command line (:data:`asyncfl.cli.commands.COMMANDS`):
names mapped to ``"package.module:attribute"`` targets imported on first use, so building the
parser, ``--help`` and argument errors import no command's implementation (docs/architecture.md
§3, "Package layout").

Components (tasks, rules, …) are not here: they are declared and found through
:mod:`asyncfl.components`, the one path for plug-ins. The import-graph test
(``tests/test_architecture.py``) reads every target as an edge of the graph.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from typing import Any, Generic, Iterator, Mapping, TypeVar, Union

T = TypeVar("T")


@dataclass(frozen=True)
class Entry:
    """One registered plug-in: its name, where it lives, a one-line summary and (tagged
    sections only) the config class of its scenario section."""

    name: str
    target: str  # "package.module:attribute"
    summary: str = ""
    config: type | None = None

    @property
    def module(self) -> str:
        return self.target.partition(":")[0]

    @property
    def attribute(self) -> str:
        return self.target.partition(":")[2]


Spec = Union[str, tuple[str, str], tuple[str, str, type]]


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class CommandTable(Generic[T]):
    """Names of one kind of entry (``kind``: ``"command"``) and their targets.

    ``field`` is the scenario key that names one (``"server.rule"``). Each entry is
    ``"module:attribute"``, ``("module:attribute", "summary")`` or, for a variant of a tagged
    section, ``("module:attribute", "summary", ConfigClass)``."""

    def __init__(self, kind: str, field: str, entries: Mapping[str, Spec]) -> None:
        self.kind, self.field = kind, field
        self._entries: dict[str, Entry] = {}
        for name, spec in entries.items():
            if isinstance(spec, str):
                spec = (spec,)
            if not 1 <= len(spec) <= 3:
                raise ValueError(f"{kind} {name!r}: expected 'module:attribute', optionally with a summary and a config class")
            target = spec[0]
            summary = spec[1] if len(spec) > 1 else ""
            config = spec[2] if len(spec) > 2 else None
            if not isinstance(target, str) or ":" not in target:
                raise ValueError(f"{kind} {name!r}: target {target!r} must be 'module:attribute'")
            self._entries[name] = Entry(name, target, summary, config)
        self._loaded: dict[str, T] = {}

    @property
    def names(self) -> tuple[str, ...]:
        """Every registered name, in registration order."""
        return tuple(self._entries)

    def entries(self) -> Iterator[Entry]:
        return iter(self._entries.values())

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._entries

    def unknown(self, name: object) -> str:
        """The message for a name that is not registered: the field, the value, a close match
        and every allowed name."""
        close = difflib.get_close_matches(str(name), self.names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "."
        return f"{self.field} = {_short(name)}: unknown {self.kind}{hint} Allowed: {', '.join(self.names)}"

    def config(self, name: str) -> type:
        """The config class of the section variant ``name`` (tagged sections only)."""
        if name not in self:
            raise KeyError(self.unknown(name))
        config = self._entries[name].config
        if config is None:
            raise LookupError(f"{self.kind} {name!r} has no config class (only variants of a tagged section have one)")
        return config

    def __repr__(self) -> str:
        return f"CommandTable({self.kind!r}, {self.field!r}, names={self.names!r})"

    def load(self, name: str) -> T:
        """The implementation registered under ``name`` (imported once)."""
        if name not in self:
            raise KeyError(self.unknown(name))
        if name not in self._loaded:
            entry = self._entries[name]
            obj: Any = importlib.import_module(entry.module)
            for part in entry.attribute.split("."):
                obj = getattr(obj, part)
            self._loaded[name] = obj
        return self._loaded[name]
