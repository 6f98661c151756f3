"""A sweep's grid: which keys vary over which values, which seeds, and the name and scenario of
every point (docs/architecture.md §9).

``--grid server.rule=momentum,ma-light --grid server.lr=0.1,0.3 --seeds 0-2`` is the cartesian
product rule × lr × seed: 12 points, in the order the grids are given (the last one varies
fastest), seeds innermost. Values are read as TOML (``0.1``, ``true``, ``"text"``), else taken as
strings, exactly like ``--set``. A point is named by its values, ``rule=ma-light__lr=0.3__seed=0``
(a key's last component when that is unambiguous, else its full dotted path), which is also its
run directory under ``runs/``.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from asyncfl.config import scenario as scenario_mod
from asyncfl.config.scenario import Scenario
from asyncfl.errors import ScenarioError, UsageError

MAX_POINTS = 100_000
_SAFE = re.compile(r"[^A-Za-z0-9._+-]")


@dataclass(frozen=True)
class Axis:
    """One varied key and its values, in order."""

    key: str
    values: tuple[Any, ...]


def parse_grid(text: str) -> Axis:
    """``KEY=V1,V2,…`` → :class:`Axis`. Commas inside brackets or quotes do not split."""
    key, sep, rest = text.partition("=")
    key = key.strip()
    if not sep or not key or any(not part for part in key.split(".")) or not rest.strip():
        raise UsageError(f"--grid {text!r}: expected KEY=V1,V2,... (e.g. --grid server.rule=momentum,ma-light)")
    values = tuple(scenario_mod.parse_override(f"{key}={item}")[1] for item in _split(rest))
    names = [_fmt(v) for v in values]
    twice = sorted({n for n in names if names.count(n) > 1})
    if len(set(map(repr, values))) != len(values) or twice:
        raise UsageError(f"--grid {text!r}: a value is given twice ({', '.join(twice) or 'the same text'}; "
                         "values that name the same run, such as 1 and 1.0, count as one)")
    if key in RESERVED:
        raise UsageError(f"--grid {key}: not a key a sweep can vary ({RESERVED[key]})")
    return Axis(key, values)


#: keys ``--grid`` refuses, and why
RESERVED = {"seed": "use --seeds", "name": "each run is named by its grid point; the scenario's name changes no result"}


def _split(text: str) -> list[str]:
    items, depth, quote, cur = [], 0, "", []
    for ch in text:
        if quote:
            quote = "" if ch == quote else quote
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            items.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    items.append("".join(cur).strip())
    if any(not item for item in items):
        raise UsageError(f"--grid value list {text!r}: an empty value")
    return items


def parse_seeds(text: str | list[str] | tuple[str, ...], option: str = "--seeds") -> tuple[int, ...]:
    """``0-4`` (inclusive), ``0,2,5``, ``3``, or a mix (``0-2,7``); a list of such items (``--seeds
    0 1 2`` in ``asyncfl sweep`` and the scripts built on it alike) is read as if joined by commas.
    A seed given twice is refused."""
    if not isinstance(text, str):
        text = ",".join(str(t) for t in text)
    seeds: list[int] = []
    try:
        for part in text.split(","):
            lo, dash, hi = part.strip().partition("-")
            a = int(lo)
            b = int(hi) if dash else a
            if a < 0 or b < a or b - a >= MAX_POINTS or b >= 2**63:
                raise ValueError
            seeds.extend(range(a, b + 1))
            if len(seeds) > MAX_POINTS:
                raise ValueError
    except ValueError:
        raise UsageError(f"{option} {text!r}: expected seeds ≥ 0 like 0-4, 0,2,5, 0 1 2 or 3 (at most {MAX_POINTS})") from None
    if len(set(seeds)) != len(seeds):
        raise UsageError(f"{option} {text!r}: a seed is given twice; give each once")
    return tuple(seeds)


@dataclass(frozen=True)
class Point:
    """One run of the sweep: the value of every varied key, and the seed."""

    values: tuple[tuple[str, Any], ...]
    seed: int

    def overrides(self) -> dict[str, Any]:
        return {**dict(self.values), "seed": self.seed}


def points(axes: tuple[Axis, ...], seeds: tuple[int, ...]) -> list[Point]:
    """The cartesian product, the last axis varying fastest, seeds innermost."""
    count = len(seeds)
    for axis in axes:
        count *= len(axis.values)
    if count > MAX_POINTS:
        raise UsageError(f"the grid has {count} points; at most {MAX_POINTS} are allowed")
    keys = [a.key for a in axes]
    if len(set(keys)) != len(keys) or "seed" in keys:
        raise UsageError("--grid: each key at most once, and not 'seed' (use --seeds)")
    return [Point(tuple(zip(keys, combo)), seed)
            for combo in itertools.product(*(a.values for a in axes)) for seed in seeds]


def labels(keys: list[str]) -> dict[str, str]:
    """The short label of each key: its last component, or the full path where two collide."""
    leaves = [k.rpartition(".")[2] for k in keys]
    return {k: leaf if leaves.count(leaf) == 1 and leaf != "seed" else k for k, leaf in zip(keys, leaves)}


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        short = f"{value:g}"
        return short if float(short) == value else repr(value)  # 0.1234567 and 0.1234568 stay apart
    return str(value)


def point_name(point: Point, short: dict[str, str]) -> str:
    """``rule=ma-light__lr=0.3__seed=0``: filesystem-safe, unique within a sweep (values that
    would collide after sanitising get a short digest of the exact value)."""
    parts = []
    for key, value in point.values:
        text = _fmt(value)
        safe = _SAFE.sub("_", text)[:40]
        if safe != text:
            safe += "-" + hashlib.sha256(repr(value).encode()).hexdigest()[:6]
        parts.append(f"{short[key]}={safe}")
    parts.append(f"seed={point.seed}")
    return "__".join(parts)


def _as_set(key: str, value: Any) -> str:
    """``KEY=VALUE`` with the value written as TOML, as ``--set`` reads it back."""
    return f"{key}={_toml(value)}"


def _toml(value: Any) -> str:
    if isinstance(value, dict):  # an inline table, merged key by key as --set merges it
        return "{" + ", ".join(f"{_toml(str(k))} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    return tomli_w.dumps({"v": value}).partition("=")[2].strip()


def _drop_unowned_axes(raw: dict[str, Any], point: Point) -> list[tuple[str, str]]:
    """Remove from a point's raw scenario each varied key that the components this point names
    do not own but other components do (``--grid server.rule=momentum,clip --grid
    server.clip_tau=0.5,2``: the momentum points have no ``clip_tau``); returns ``(key, its
    owners)`` for each. A key nothing owns stays, for validation to name."""
    out = []
    for key, _ in point.values:
        owners = scenario_mod.unowned_key(raw, key)
        if owners is not None:
            section, _, leaf = key.partition(".")
            del raw[section][leaf]
            out.append((key, owners))
    return out


@dataclass(frozen=True)
class Grid:
    """The base scenario (file and ``--set`` overrides), the axes and the seeds."""

    scenario_file: Path
    overrides: tuple[str, ...]
    axes: tuple[Axis, ...]
    seeds: tuple[int, ...]

    def points(self) -> list[Point]:
        return points(self.axes, self.seeds)

    def names(self) -> list[str]:
        """Every point's name; two points that would share one (a run directory) are refused."""
        short = labels([a.key for a in self.axes])
        names = [point_name(p, short) for p in self.points()]
        if len(set(names)) != len(names):
            twice = sorted({n for n in names if names.count(n) > 1})
            raise UsageError(f"the grid names two points alike ({', '.join(twice[:3])}): give each value once")
        return names

    def scenarios(self, notes: list[str] | None = None) -> list[tuple[str, Point, Scenario]]:
        """Every point's validated scenario: the base scenario changed by the point's values as
        ``--set`` changes it (switching ``latency.dist`` or ``task.name`` drops the old variant's
        keys), less the varied keys that only components the point does not name own
        (:func:`_drop_unowned_axes`); the notes saying so are appended to ``notes``, each once. All points are validated
        before any runs: every problem is reported at once, naming the key and the point."""
        for axis in self.axes:
            if axis.key in RESERVED:
                raise UsageError(f"--grid {axis.key}: not a key a sweep can vary ({RESERVED[axis.key]})")
        base = scenario_mod.load(self.scenario_file, list(self.overrides)).to_dict()
        out, problems = [], []
        dropped: dict[tuple[str, str], list[str]] = {}
        for name, point in zip(self.names(), self.points()):
            try:
                raw = copy.deepcopy(base)
                found = scenario_mod.apply_changes(raw, [_as_set(k, v) for k, v in point.overrides().items()])
                for key, owners in _drop_unowned_axes(raw, point):
                    dropped.setdefault((key, owners), []).append(name)
                if notes is not None:
                    notes.extend(n for n in found if n not in notes)
                out.append((name, point, scenario_mod.validate(raw)))
            except ScenarioError as exc:
                problems.extend(f"{name}: {p}" for p in exc.problems)
                if len(problems) >= 20:
                    break
        for (key, owners), names in dropped.items():
            note = (f"note: {key} is a key of {owners}, which {len(names)} of the {len(out)} points do not name "
                    f"(e.g. {names[0]}): dropped there, so those points run the same scenario whatever its value")
            if notes is not None and note not in notes:
                notes.append(note)
        if problems:
            raise ScenarioError(sorted(set(problems), key=problems.index), source=f"{self.scenario_file} with the sweep's grid")
        return out
