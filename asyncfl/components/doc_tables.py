"""The docs' tables of components, made from the registry so that they cannot drift
(docs/architecture.md §4, docs/extending.md §2).

``python -m asyncfl.components.doc_tables`` (from a source tree) rewrites each table between its
marker comments, ``<!-- generated: NAME … -->`` and ``<!-- end generated: NAME -->``;
``--check`` rewrites nothing and exits 1 naming each table that differs (tests/test_docs.py runs
it). What a table says comes from the declarations: the kinds and their keys and builders from
:data:`asyncfl.components.core.KINDS`, the traits from each kind's traits class, the names from
the registered built-ins (origin ``builtin``), in the order ``components/builtin.py`` declares
them. Only where each kind is documented is written here.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Callable

from asyncfl.components.core import KINDS, Kind
from asyncfl.components.registry import REGISTRY
from asyncfl.components.traits import Traits

#: where each kind is documented (links relative to docs/)
WHERE: dict[str, str] = {
    "task": "[tasks](tasks.md)",
    "latency": "[protocol](protocol.md) §4",
    "availability": "[protocol](protocol.md) §5",
    "protocol": "[protocol](protocol.md)",
    "algorithm": "[baselines](baselines.md), [async-optimisers](async-optimisers.md)",
    "rule": "[server rules](server-rules.md), [async-optimisers](async-optimisers.md)",
    "solver": "[tasks](tasks.md) §8",
    "hook": "[extending](extending.md) §7",
    "executor": "[architecture](architecture.md) §2",
    "sampling": "[privacy](privacy.md) §5–6",
    "accountant": "[privacy](privacy.md) §4",
    "counts": "[privacy](privacy.md) §3",
    "noise": "[privacy](privacy.md) §12",
    "tracker": "[run directory](run-directory.md) §15, [extending](extending.md) §9",
}

BASE_TRAITS = tuple(f.name for f in dataclasses.fields(Traits))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _key(kind: Kind) -> str:
    if kind.many:
        return f"`{kind.field}` (a list; keys in `{kind.section}.{kind.keys_table}.NAME`)"
    return f"`{kind.field}`" + (f" (whole `[{kind.section}]`)" if kind.whole_section else "")


def builtin_names(kind: str) -> list[str]:
    """The names of asyncfl's own components of ``kind``, in declaration order."""
    return [c.name for c in REGISTRY.components(kind) if c.origin is not None and c.origin.source == "builtin"]


def own_traits(kind: Kind) -> list[str]:
    """The traits of ``kind`` beyond those every kind has (:class:`Traits`)."""
    return [f.name for f in dataclasses.fields(kind.traits) if f.name not in BASE_TRAITS]


def builtin_table() -> str:
    """docs/architecture.md §4: every kind, its key, asyncfl's own components, where documented."""
    rows = ["| kind | scenario key | built-in names | documented in |", "|---|---|---|---|"]
    for kind in KINDS.values():
        names = ", ".join(f"`{n}`" for n in builtin_names(kind.name))
        rows.append(f"| `{kind.name}` | {_key(kind)} | {names} | {WHERE.get(kind.name, '—')} |")
    return "\n".join(rows)


def kinds_table() -> str:
    """docs/extending.md §2: every kind, its key, what its builder gets and returns, its traits."""
    base = ", ".join(f"`{t}`" for t in BASE_TRAITS)
    rows = [f"| kind | scenario key | the builder | traits (besides {base}) |", "|---|---|---|---|"]
    for kind in KINDS.values():
        traits = ", ".join(f"`{t}`" for t in own_traits(kind)) or "—"
        rows.append(f"| `{kind.name}` | {_key(kind)} | {_cell(kind.builds) or '—'} | {traits} |")
    return "\n".join(rows)


#: the generated tables, by file (relative to the repository) and name
TABLES: dict[str, dict[str, Callable[[], str]]] = {
    "docs/architecture.md": {"builtin-components": builtin_table},
    "docs/extending.md": {"component-kinds": kinds_table},
}

COMMAND = "python -m asyncfl.components.doc_tables"


def begin(name: str) -> str:
    return f"<!-- generated: {name} (from the registry: {COMMAND}) -->"


def end(name: str) -> str:
    return f"<!-- end generated: {name} -->"


def rendered(text: str, name: str, table: str, where: str = "") -> str:
    """``text`` with the lines between the markers of ``name`` replaced by ``table``; a file
    without both markers, in order, is a ValueError naming them."""
    head, sep, rest = text.partition(begin(name) + "\n")
    body, sep2, tail = rest.partition(end(name))
    if not sep or not sep2:
        raise ValueError(f"{where}: no '{begin(name)}' … '{end(name)}' markers")
    return f"{head}{begin(name)}\n{table}\n{end(name)}{tail}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description="rewrite the docs' tables of components from the registry")
    parser.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 if a table differs")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[2], help="the repository")
    args = parser.parse_args(argv)
    stale = []
    for relative, tables in TABLES.items():
        path = args.root / relative
        if not path.is_file():
            print(f"{path}: no such file (run from a source tree, or give --root)", file=sys.stderr)
            return 2
        text = new = path.read_text(encoding="utf-8")
        for name, make in tables.items():
            new = rendered(new, name, make(), str(path))
        if new != text:
            stale.append(str(relative))
            if not args.check:
                path.write_text(new, encoding="utf-8")
    for relative in stale:
        print(f"{relative}: {'differs from the registry' if args.check else 'rewritten'}", file=sys.stderr)
    return 1 if stale and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
