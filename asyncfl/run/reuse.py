"""Whether a run directory already on disk may stand for a job (docs/architecture.md §9).

``asyncfl sweep`` (rerun or ``--extend``) and every study built on the experiment engine keep
the run directories they made and read a finished run back instead of running it again. A run is
kept only when it is the run the command would make now: its ``scenario.toml`` — the *fully
resolved* scenario, every default written out — equals the job's, and the asyncfl that wrote it
(``summary.json``'s ``asyncfl_version``) is this one. The spec's text alone is never the test: a
default changed between two versions of asyncfl (``client.local_steps`` 1 → 3) changes no spec,
but it changes the resolved scenario, and the run is made again.

:func:`stale_reason` says why a directory's run is not the job's (None when it is), naming the
differing keys with their old and new values, so the command can say what it reran.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from asyncfl.version import __version__
from asyncfl.config.files import MAX_SCENARIO_BYTES, read_text_limited
from asyncfl.config.scenario import Scenario
from asyncfl.errors import RunDirError

#: at most this many differing keys are named in a reason
NAMED_KEYS = 4


def _flat(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(_flat(value, f"{dotted}."))
        else:
            out[dotted] = value
    return out


def differing_keys(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``"KEY: OLD → NEW"`` for every dotted key whose value differs (``absent`` where a side
    lacks it), in sorted order."""
    a, b = _flat(old), _flat(new)
    missing = object()
    out = []
    for key in sorted(set(a) | set(b)):
        x, y = a.get(key, missing), b.get(key, missing)
        if x != y or type(x) is not type(y):
            out.append(f"{key}: {'absent' if x is missing else repr(x)} → {'absent' if y is missing else repr(y)}")
    return out


def stale_reason(run_dir: Path, scenario: Scenario, summary: dict[str, Any] | None = None) -> str | None:
    """Why the run in ``run_dir`` is not a run of ``scenario`` by this asyncfl (None when it is):
    another resolved scenario (the differing keys named), a scenario that cannot be read, or
    another ``asyncfl_version`` in ``summary`` (a run written before asyncfl recorded its
    version is judged by its scenario alone)."""
    path = Path(run_dir) / "scenario.toml"
    try:
        old = tomllib.loads(read_text_limited(path, MAX_SCENARIO_BYTES, RunDirError))
    except (RunDirError, tomllib.TOMLDecodeError, RecursionError):
        return "its scenario.toml cannot be read back"
    changed = differing_keys(old, tomllib.loads(scenario.to_toml()))
    if changed:
        more = f" and {len(changed) - NAMED_KEYS} more" if len(changed) > NAMED_KEYS else ""
        return f"made with another resolved scenario ({'; '.join(changed[:NAMED_KEYS])}{more})"
    version = (summary or {}).get("asyncfl_version")
    if version is not None and version != __version__:
        return f"made by asyncfl {version}, this is asyncfl {__version__}"
    return None
