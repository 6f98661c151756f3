"""The code that defines a component, as a per-file digest (docs/run-directory.md §1.1).

A run directory records, for every plug-in component, the SHA-256 of each file of the code that
defines it (:func:`code_record`), so that ``asyncfl resume`` notices code edited without a new
version number — the normal case with ``pip install -e`` — and names the files that changed
(:func:`changed_files`). Which files:

* a component of a regular installed distribution: every file its ``RECORD`` lists, hashed here
  from the installed copy (not trusted from ``RECORD``), less byte-code (``__pycache__``,
  ``.pyc``), the ``.dist-info`` folder and files outside the installation (scripts);
* a component of an editable install, or of a module of no distribution (a
  ``"module:attribute"`` name, ``asyncfl.register`` from your own module): the source files
  (``.py`` and extension modules) of the module's top-level package, or the single module file;
* asyncfl's own built-ins: none; asyncfl's version identifies them.

Keys are paths relative to the installation or the package's parent folder, ``/``-separated.
Nothing is imported: a module that is not loaded yet is located by its top-level name only.
Torch-free.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from asyncfl.version import __version__
from asyncfl.components.core import Origin

#: at most this many files are hashed for one component (a larger package is recorded as such)
MAX_FILES = 5000
SOURCE_SUFFIXES = (".py", ".pyi", ".so", ".pyd")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _digest(path: Path) -> str:
    try:
        return sha256_file(path) if path.is_file() else "missing"
    except OSError:
        return "unreadable"


def _editable(dist: importlib.metadata.Distribution) -> bool:
    try:
        info = json.loads(dist.read_text("direct_url.json") or "{}")
    except ValueError:
        return False
    return bool(isinstance(info, dict) and isinstance(info.get("dir_info"), dict) and info["dir_info"].get("editable"))


def _installed_files(dist: importlib.metadata.Distribution) -> dict[str, str]:
    out: dict[str, str] = {}
    for file in dist.files or ():
        parts = file.parts
        if not parts or parts[0] == ".." or "__pycache__" in parts or file.suffix == ".pyc" \
                or any(p.endswith(".dist-info") for p in parts):
            continue
        out["/".join(parts)] = _digest(Path(str(dist.locate_file(file))))
        if len(out) > MAX_FILES:
            break
    return out


def _module_location(top: str) -> tuple[list[Path], Path | None]:
    """The folders of package ``top`` (several for a namespace package) or its single file."""
    module = sys.modules.get(top)
    if module is not None:
        folders = [Path(p) for p in getattr(module, "__path__", []) or []]
        file = getattr(module, "__file__", None)
        return folders, (None if folders or not file else Path(file))
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: located, not imported
    except (ImportError, ValueError):
        return [], None
    if spec is None:
        return [], None
    folders = [Path(p) for p in spec.submodule_search_locations or []]
    return folders, (None if folders or not spec.origin or not spec.has_location else Path(spec.origin))


def _source_files(module: str) -> dict[str, str] | None:
    top = module.partition(".")[0]
    folders, file = _module_location(top)
    if file is not None:
        return {file.name: _digest(file)}
    if not folders:
        return None
    out: dict[str, str] = {}
    for folder in folders:
        for root, dirs, names in os.walk(folder):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__" and not d.startswith("."))
            for name in sorted(names):
                if name.endswith(SOURCE_SUFFIXES):
                    path = Path(root) / name
                    out[f"{top}/{path.relative_to(folder).as_posix()}"] = _digest(path)
                    if len(out) > MAX_FILES:
                        return out
    return out


def code_record(origin: Origin | None) -> dict[str, Any]:
    """What identifies the code of a component of ``origin``: ``basis`` (``"asyncfl"``:
    built in, with asyncfl's ``version``; ``"installed"``: a distribution's installed files;
    ``"source"``: a package's source files; ``"none"``: nothing to hash, with ``why``) and
    ``files`` (relative path → SHA-256)."""
    if origin is None:
        return {"basis": "none", "why": "no origin"}
    if origin.source == "builtin":
        return {"basis": "asyncfl", "version": __version__}
    if origin.package is not None:
        try:
            dist = importlib.metadata.distribution(origin.package)
        except importlib.metadata.PackageNotFoundError:
            dist = None
        if dist is not None and not _editable(dist):
            return {"basis": "installed", "files": _installed_files(dist)}
    if origin.module == "__main__" or origin.module.startswith("__main__."):
        return {"basis": "none", "why": "declared in the main script or an interactive session"}
    files = _source_files(origin.module)
    if files is None:
        return {"basis": "none", "why": f"the source of module {origin.module} cannot be located"}
    return {"basis": "source", "files": files}


def changed_files(was: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """The files whose digest differs between two :func:`code_record` results, each with what
    happened (``changed``, ``added``, ``removed``); ``[]`` when the code is the same or either
    record has no files to compare (built-ins; nothing hashed)."""
    before, after = was.get("files"), now.get("files")
    if not isinstance(before, dict) or not isinstance(after, dict):
        if was.get("basis") != now.get("basis") and "files" in was:
            return [f"(the code was {was.get('basis')}, now it is {now.get('basis')})"]
        return []
    out = [f"{p} (changed)" for p in sorted(before) if p in after and before[p] != after[p]]
    out += [f"{p} (removed)" for p in sorted(before) if p not in after]
    out += [f"{p} (added)" for p in sorted(after) if p not in before]
    return out
