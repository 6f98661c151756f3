"""The package's dependencies point one way (docs/architecture.md §3).

Read from the source, not from what happens to be imported. Edges are every ``import``
statement (at module level, in functions, and under ``if TYPE_CHECKING:``, which only type
checkers execute) and every registry target (a ``"asyncfl.module:attribute"`` string, which
:class:`asyncfl.cli.table.CommandTable` and the component registry import on first use). The rules:

* the graph of imports that execute plus registry targets has no cycle: a module a registry
  points to never imports, directly or not, the registry that points to it — registries are
  resolved by the composition root (``asyncfl/compose.py``), never by the implementations;
* the library never imports ``analysis``, and ``analysis`` imports only the library and itself;
* the library imports its own modules at module level only (lazy loading goes through a
  registry);
* packages import only from their own layer or below (:data:`LAYERS`); registry targets are the
  one exception, by design: a registry names the plug-ins above it; and so are the public
  facade's (``asyncfl/__init__.py``) imports under ``if TYPE_CHECKING:``, which only type checkers
  run (at run time the facade imports each name on first use).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TARGET = re.compile(r"^(asyncfl(?:\.\w+)+):[\w.]+$")

#: Packages of asyncfl from the bottom up; a package may import from its own layer or below. An
#: entry may name a module of a package (``config.scenario``): it then sits on its own floor, and
#: the rest of the package on the package's (the longest name that matches decides).
LAYERS: list[set[str]] = [
    {"errors", "version", "registry", "rng", "records", "staleness_counts", "tensor_checks", "lifecycle", "__init__"},
    {"config"},  # the sections and their values, the components' own keys and checks (below the components)
    {"components"},  # Kind, Component, the registry, traits, contracts, the built-ins
    {"config.scenario", "config.registries", "config.memory", "config.batching"},  # the composed scenario (above the components)
    {"datasets"},
    {"tasks", "compute"},
    {"server", "clients", "privacy"},
    {"sim"},
    {"compose"},  # the composition root: builds every part, hands the engine finished objects
    {"run"},
    {"figures", "studies", "results"},
    {"cli", "api", "__main__"},  # python -m asyncfl is the command line
]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules(package: str) -> dict[str, Path]:
    return {module_name(p): p for p in sorted((ROOT / package).rglob("*.py"))}


ALL = {**modules("asyncfl"), **modules("analysis")}


def _resolve(name: str) -> str | None:
    """The module ``name`` refers to (``pkg.attr`` → ``pkg`` when ``attr`` is not a module)."""
    while name and name not in ALL:
        name = name.rpartition(".")[0]
    return name or None


def edges(mod: str, path: Path) -> list[tuple[str, int, bool, str]]:
    """``(imported module, line, at module level, kind)`` for every import and registry target;
    kind is ``"import"``, ``"typing"`` (under ``if TYPE_CHECKING:``) or ``"registry"``."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    top_level = {id(node) for node in tree.body}
    typing_only: set[int] = set()
    for node in tree.body:  # `if TYPE_CHECKING:` / `try:` blocks at module level are module level
        if isinstance(node, (ast.If, ast.Try)):
            top_level.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            typing_only.update(id(n) for n in ast.walk(node))
    is_pkg = path.name == "__init__.py"
    out = []
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = mod.split(".") if is_pkg else mod.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names = [f"{base}.{a.name}" if f"{base}.{a.name}" in ALL else base for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and TARGET.match(node.value):
            names = [TARGET.match(node.value).group(1)]
            out += [(t, node.lineno, True, "registry") for t in map(_resolve, names) if t]
            continue
        else:
            continue
        for name in names:
            target = _resolve(name) if name.split(".")[0] in ("asyncfl", "analysis") else None
            if target and target != mod:
                out.append((target, node.lineno, id(node) in top_level, "typing" if id(node) in typing_only else "import"))
    return out


GRAPH = {mod: edges(mod, path) for mod, path in ALL.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return stack[stack.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return None


def test_the_import_graph_has_no_cycle():
    """Every edge counts, imports under ``if TYPE_CHECKING:`` included: a circle a type checker
    walks is a circle a reader walks."""
    graph = {mod: {t for t, _, _, _ in es} for mod, es in GRAPH.items()}
    assert find_cycle(graph) is None, " → ".join(find_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_the_library_never_imports_analysis():
    bad = [f"{mod}:{line} imports {t}" for mod, es in GRAPH.items() if mod.startswith("asyncfl")
           for t, line, _, _ in es if t.startswith("analysis")]
    assert not bad, bad


def test_the_library_imports_its_own_modules_at_module_level_only():
    bad = [f"{mod}:{line} imports {t} inside a function" for mod, es in GRAPH.items() if mod.startswith(("asyncfl", "analysis"))
           for t, line, top, _ in es if not top and t.startswith("asyncfl")]
    assert not bad, bad


def _layer(mod: str) -> int:
    parts = mod.split(".")[1:] or ["__init__"]
    for n in range(len(parts), 0, -1):  # the longest declared name first (config.scenario before config)
        name = ".".join(parts[:n])
        for i, layer in enumerate(LAYERS):
            if name in layer:
                return i
    raise AssertionError(f"{mod}: package {parts[0]!r} is in no layer of tests/test_architecture.py")


def test_the_split_floors_are_declared_apart():
    """``config/`` holds two floors: the sections below the components, the composed scenario
    above them; each is its own layer (not one layer with the components)."""
    assert _layer("asyncfl.config.sections") < _layer("asyncfl.components.core") < _layer("asyncfl.config.scenario")
    assert _layer("asyncfl.config.checks") == _layer("asyncfl.config.base") < _layer("asyncfl.config.registries")
    assert _layer("asyncfl.compose") > _layer("asyncfl.sim.engine")


@pytest.mark.parametrize("mod", sorted(m for m in GRAPH if m.startswith("asyncfl")))
def test_dependencies_point_down_the_layers(mod):
    mine = _layer(mod)
    up = [f"{mod}:{line} imports {t}" for t, line, _, kind in GRAPH[mod]
          if kind != "registry" and not (mod == "asyncfl" and kind == "typing") and t.startswith("asyncfl") and _layer(t) > mine]
    assert not up, up


def test_the_analysis_scripts_use_only_the_library():
    """``analysis/`` imports the library and its own modules (a study package's parts), nothing else."""
    for mod, es in GRAPH.items():
        if mod.startswith("analysis"):
            assert all(t.split(".")[0] in ("asyncfl", "analysis") for t, _, _, _ in es), (mod, es)


def test_the_edge_reader_sees_registry_targets_and_function_level_imports(tmp_path):
    # the registry module names its targets as strings: they are edges too
    assert ("asyncfl.server.ma", "registry") in {(t, kind) for t, _, _, kind in GRAPH["asyncfl.components.builtin"]}
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from asyncfl import rng\ndef f():\n    from asyncfl.sim import engine\n"
    path = ROOT / "asyncfl" / "_probe_edges.py"
    try:
        path.write_text(source)
        ALL["asyncfl._probe_edges"] = path
        assert sorted(edges("asyncfl._probe_edges", path)) == [("asyncfl.rng", 3, True, "typing"), ("asyncfl.sim.engine", 5, False, "import")]
    finally:
        ALL.pop("asyncfl._probe_edges", None)
        path.unlink()
