"""Who owns an output folder: one rule for every command that writes one (docs/run-directory.md §13).

* A command writes only inside a folder of its own kind: ``asyncfl sweep`` into a sweep folder,
  a script built on the library into the kind it registers (:func:`register`),
  ``asyncfl run`` into a run directory (:mod:`asyncfl.run.rundir`), ``asyncfl bias`` into the run
  directory it reads. A folder that a command made records what produced it in
  ``.asyncfl-owner.json`` (:data:`MARKER`): the kind, the command line, the SHA-256 of the
  command's spec (:func:`digest`) and the run directories it made under ``runs/``.
* :func:`claim` takes a folder for a command: a new or empty folder is made its own; a folder of
  its own kind with the same spec digest is resumed; anything else is refused with one message
  naming the folder and what it holds (another kind, another spec, files asyncfl did not write,
  a run directory, a folder inside another command's folder) — unless ``--overwrite``, which
  removes only the files of that kind (:class:`Kind`) and the run directories the marker lists,
  and refuses, removing nothing, while the folder holds anything else. While the command runs it
  holds the folder's lock (:class:`~asyncfl.run.rundir.RunLock`), so a second command on the same
  folder is refused naming the holder's pid.
* :func:`check_file` guards a single output file (``plot --out``, ``compare --out / --csv``): it
  never lands inside a run directory or another command's folder (a run's inputs and results),
  never on one of the command's input files, and an existing file is replaced only with
  ``--overwrite``.

A folder that an asyncfl of before this rule wrote has no marker; it is recognised by its
kind's record file (:attr:`Kind.legacy`) and adopted, with the runs found under ``runs/``.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from asyncfl.config.files import read_limited
from asyncfl.errors import RunDirError, UsageError
from asyncfl.run.rundir import LOCK_NAME, RunLock, atomic_write, foreign_files

MARKER = ".asyncfl-owner.json"
MARKER_VERSION = 1


@dataclass(frozen=True)
class Kind:
    """One kind of output folder: ``command`` (the CLI command that makes it), the top-level
    ``files`` it writes (glob patterns), the ``folders`` it fills with files matching
    ``folder_files`` (``runs`` holds run directories and is handled apart), and ``legacy``: a
    file that identifies a folder of this kind written before markers existed."""

    name: str
    command: str
    files: tuple[str, ...]
    folders: dict[str, tuple[str, ...]]
    legacy: str
    hint: str = ""  # another way out, said when a different spec is refused
    article: str = ""  # how messages name such a folder ("an asyncfl sweep folder")

    def owns_file(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.files)


#: the kinds of folder :func:`claim` knows: ``asyncfl sweep``'s, and those scripts registered
KINDS: dict[str, Kind] = {
    "sweep": Kind("sweep", "asyncfl sweep", ("sweep.toml", "results.csv", "summary.csv"), {}, "sweep.toml",
                  ", pass --extend to add points to it", "an asyncfl sweep folder"),
}


def register(kind: Kind) -> Kind:
    """Add a kind of output folder (a script built on the library: its command, files and
    record file); registering the same kind again is a no-op, another kind under a taken name an
    error."""
    if kind.name in ("run", "damaged") or KINDS.get(kind.name, kind) != kind:
        raise ValueError(f"output folder kind {kind.name!r} is already taken")
    KINDS[kind.name] = kind
    return kind


def digest(spec: Any) -> str:
    """SHA-256 of a command's spec (any JSON-able value, keys sorted): two commands with the same
    digest produce the same runs."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()


def is_run_dir(path: Path) -> bool:
    """A run directory (``scenario.toml`` with ``summary.json`` or ``metrics.csv``)."""
    return (path / "scenario.toml").is_file() and ((path / "summary.json").is_file() or (path / "metrics.csv").is_file())


#: the largest ownership record read (a study of thousands of runs lists each in a few hundred kB)
MAX_MARKER_BYTES = 16 << 20


def read_marker(path: Path) -> dict[str, Any] | None:
    """The marker of folder ``path`` (None without one); a damaged one is a RunDirError, and so
    is one whose ``runs`` names anything but a folder under the folder's own ``runs/``
    (:func:`run_entry_problem`): the record is data, never an order to remove what it names."""
    marker = Path(path) / MARKER
    if not marker.exists() and not marker.is_symlink():
        return None
    try:
        data = json.loads(read_limited(marker, MAX_MARKER_BYTES, RunDirError).decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise RunDirError(f"{marker}: not an asyncfl ownership record ({exc.__class__.__name__}); the folder is damaged: "
                          "choose another --out") from None
    if not isinstance(data, dict) or not isinstance(data.get("kind"), str) or not isinstance(data.get("runs", []), list):
        raise RunDirError(f"{marker}: not an asyncfl ownership record; the folder is damaged: choose another --out")
    for entry in data.get("runs", []):
        problem = run_entry_problem(Path(path), entry)
        if problem:
            raise RunDirError(f"{marker}: lists {_short(entry)} among the runs it made, {problem}; an ownership record may "
                              "name only run directories under the folder's own runs/ (relative paths, no '..', no symbolic "
                              "links); nothing was removed: choose another --out")
    return data


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def run_entry_problem(folder: Path, entry: Any) -> str | None:
    """Why ``entry`` of an ownership record's ``runs`` is not a run directory this folder's
    command can have made (None when it is): it must be a relative POSIX path ``runs/…`` of
    plain names (no ``..``, ``.``, empty part, backslash or control character), and no part of
    it inside ``folder`` may be a symbolic link (which could lead outside)."""
    if not isinstance(entry, str):
        return "which is not a path"
    if not entry or entry.startswith("/") or "\\" in entry or any(ord(c) < 32 or ord(c) == 127 for c in entry):
        return "which is not a relative path"
    parts = entry.split("/")
    if any(part in ("", ".", "..") for part in parts):
        return "a path with an empty, '.' or '..' part (it could lead outside the folder)"
    if parts[0] != "runs" or len(parts) < 2:
        return "which is not under runs/ (a command removes only the run directories it made there)"
    step = Path(folder)
    for part in parts:
        step = step / part
        if step.is_symlink():
            return f"and {step} is a symbolic link (it could lead outside the folder)"
    return None


def kind_of(path: Path) -> str | None:
    """What made folder ``path``: a kind of :data:`KINDS` (its marker, else its legacy record
    file), ``"run"`` for a run directory, None otherwise."""
    path = Path(path)
    if not path.is_dir():
        return None
    try:
        marker = read_marker(path)
    except RunDirError:
        return "damaged"
    if marker is not None:
        return str(marker["kind"])
    if is_run_dir(path):
        return "run"
    for kind in KINDS.values():
        if (path / kind.legacy).is_file():
            return kind.name
    return None


def _article(kind: str) -> str:
    known = KINDS.get(kind)
    if known is not None and known.article:
        return known.article
    return {"run": "a run directory", "damaged": "a folder with a damaged ownership record"}.get(kind, f"an asyncfl {kind} folder")


def owner_above(path: Path) -> tuple[Path, str] | None:
    """The nearest folder above ``path`` that a command owns (a run directory or a folder with a
    marker or a legacy record), with its kind; None when there is none."""
    path = Path(path).resolve()
    for parent in path.parents:
        kind = kind_of(parent)
        if kind is not None:
            return parent, kind
    return None


def _refuse_inside(path: Path) -> None:
    above = owner_above(path)
    if above is not None:
        folder, kind = above
        raise UsageError(f"{path}: inside {folder}, {_article(kind)}; asyncfl writes nothing into another command's "
                         "folder (its inputs and results): choose a path outside it")


def _listed(names: Iterable[str]) -> str:
    names = sorted(names)
    return ", ".join(repr(n) for n in names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")


@dataclass
class OutDir:
    """A claimed output folder: ``path``, its ``kind``, the ``marker`` written, and its lock."""

    path: Path
    kind: Kind
    marker: dict[str, Any]
    lock: RunLock
    previous: dict[str, Any] | None = None  # the marker found (None for a new folder)

    def add_runs(self, rel_dirs: Iterable[str | Path]) -> None:
        """Record run directories (relative to the folder) as made by this command, before they
        are written: ``--overwrite`` removes only these."""
        runs = list(self.marker.get("runs", []))
        known = set(runs)
        for rel in rel_dirs:
            rel = Path(rel).as_posix()
            problem = run_entry_problem(self.path, rel)
            if problem:  # a name from a spec (a task called '..') must not place a run outside runs/
                raise UsageError(f"--out {self.path}: {self.kind.command} would write the run directory {_short(rel)}, "
                                 f"{problem}; rename what names it (a task, a rule) to plain letters, digits, '_', '-', '.'")
            if rel not in known:
                runs.append(rel)
                known.add(rel)
        self.marker["runs"] = runs
        self._write()

    def check_runs(self, rel_dirs: Iterable[str | Path]) -> None:
        """Refuse run directories this command would write that exist under the folder but are
        not its own (another command's run placed there)."""
        mine = set(self.marker.get("runs", []))
        foreign = [Path(rel).as_posix() for rel in rel_dirs
                   if Path(rel).as_posix() not in mine and (self.path / rel).exists()]
        if foreign:
            raise UsageError(f"--out {self.path}: {_listed(foreign)} exist(s) but {self.kind.command} did not make them "
                             "here; move them away or choose another --out")

    def _write(self) -> None:
        data = json.dumps(self.marker, indent=2, sort_keys=True) + "\n"
        atomic_write(self.path / MARKER, lambda p: p.write_text(data, encoding="utf-8"))

    def release(self) -> None:
        self.lock.release()

    def __enter__(self) -> "OutDir":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _own_runs(path: Path, marker: dict[str, Any] | None) -> list[str]:
    """The run directories the folder's command made: the marker's list, or for a legacy folder
    every run directory under ``runs/``."""
    if marker is not None:
        return [str(r) for r in marker.get("runs", [])]
    root = path / "runs"
    if not root.is_dir():
        return []
    return sorted(p.relative_to(path).as_posix() for p in root.iterdir() if p.is_dir() and is_run_dir(p))


def foreign_entries(path: Path, kind: Kind, marker: dict[str, Any] | None) -> list[str]:
    """Everything in ``path`` that ``kind``'s command did not make (relative names)."""
    runs = set(_own_runs(path, marker))
    foreign: list[str] = []
    # the folders between runs/ and a run directory (a study's runs/TASK/PRIVACY/…)
    between = {"/".join(rel.split("/")[:i]) for rel in runs for i in range(2, rel.count("/") + 1)}
    for child in path.iterdir():
        name = child.name
        if name in (MARKER, LOCK_NAME):
            continue
        if name == "runs" and child.is_dir() and not child.is_symlink():
            foreign += _foreign_runs(child, "runs", runs, between)
        elif name in kind.folders and child.is_dir() and not child.is_symlink():
            foreign += [f"{name}/{c.name}" for c in child.iterdir()
                        if not (c.is_file() and any(fnmatch.fnmatchcase(c.name, p) for p in kind.folders[name]))]
        elif not (kind.owns_file(name) and child.is_file()):
            foreign.append(name)
    return foreign


def _foreign_runs(folder: Path, rel: str, runs: set[str], between: set[str]) -> list[str]:
    """What ``folder`` (``rel`` in the output folder: ``runs`` or a folder between it and a run
    directory) holds besides the command's run directories and the folders leading to them."""
    foreign: list[str] = []
    for child in folder.iterdir():
        sub = f"{rel}/{child.name}"
        if not child.is_dir() or child.is_symlink():
            foreign.append(sub)
        elif sub in runs:
            foreign += [f"{sub}/{n}" for n in foreign_files(child)]
        elif sub in between:
            foreign += _foreign_runs(child, sub, runs, between)
        else:
            foreign.append(sub)
    return foreign


def _remove_own(path: Path, kind: Kind, marker: dict[str, Any] | None) -> None:
    """Remove what ``kind``'s command made in ``path`` (after :func:`foreign_entries` found
    nothing else): its run directories, the folders left empty between them and ``runs/``,
    its folders of files and its files. Nothing reached through a symbolic link is removed."""
    root = path.resolve()
    for rel in _own_runs(path, marker):
        run = path / rel
        if run_entry_problem(path, rel) is not None:  # read_marker refused such a record: never reached
            continue
        if run.is_dir() and root in run.resolve().parents:
            shutil.rmtree(run)
        parent = run.parent  # the folders between runs/ and the run, when now empty
        while parent != path and parent.is_dir() and not parent.is_symlink() and not any(parent.iterdir()):
            parent.rmdir()
            parent = parent.parent
    for name in kind.folders:
        folder = path / name
        if folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder)
    for child in path.iterdir():
        if child.is_file() and (kind.owns_file(child.name) or child.name == MARKER):
            child.unlink()


def claim(out: str | Path, kind: str, command: str, spec_digest: str, overwrite: bool = False,
          accept: Callable[[dict[str, Any] | None], bool] | None = None) -> OutDir:
    """Take folder ``out`` for a command of ``kind`` whose spec has ``spec_digest`` (see the
    module docstring). ``accept(previous marker)`` may allow a different spec of the same kind
    (``asyncfl sweep --extend``); the caller releases the lock (:meth:`OutDir.release`)."""
    path = Path(out)
    k = KINDS[kind]
    if path.exists() and not path.is_dir():
        raise UsageError(f"--out {path}: exists and is not a directory")
    _refuse_inside(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"--out {path}: cannot create the directory ({exc.strerror})") from None
    lock = RunLock.acquire(path, what=f"another {k.command}")
    try:
        previous, same = _check(path, k, spec_digest, overwrite, accept)
        if previous is not None and not same:  # --overwrite (checked): only its own files go
            _remove_own(path, k, None if previous.get("adopted") else previous)
            previous = None
        runs = [] if previous is None else _own_runs(path, None if previous.get("adopted") else previous)
        marker = {"version": MARKER_VERSION, "kind": kind, "command": command, "spec_sha256": spec_digest, "runs": runs}
        owned = OutDir(path, k, marker, lock, previous)
        owned._write()
        return owned
    except BaseException:
        lock.release()
        raise


def _check(path: Path, k: Kind, spec_digest: str, overwrite: bool,
           accept: Callable[[dict[str, Any] | None], bool] | None) -> tuple[dict[str, Any] | None, bool]:
    """The folder's previous marker (``{"adopted": …}`` for a legacy folder of this kind; None
    for an empty folder) and whether it holds the same spec (else ``--overwrite`` was given and
    nothing foreign is there); raises UsageError for everything the rule refuses."""
    entries = [c for c in path.iterdir() if c.name != LOCK_NAME]
    if not entries:
        return None, True
    marker = read_marker(path)
    if marker is None:
        if is_run_dir(path):
            raise UsageError(f"--out {path}: is a run directory; {k.command} writes only into its own folder: choose another --out")
        found = kind_of(path)
        if found is None:
            raise UsageError(f"--out {path}: not empty and not a folder {k.command} made (it holds {_listed(c.name for c in entries)}); "
                             "choose another --out")
        if found != k.name:
            raise UsageError(f"--out {path}: is {_article(found)}, not one {k.command} writes; choose another --out")
        marker = {"kind": k.name, "adopted": True, "spec_sha256": None}
    elif marker["kind"] != k.name:
        raise UsageError(f"--out {path}: is {_article(str(marker['kind']))} (made by {marker.get('command', '?')!s}), "
                         f"not one {k.command} writes; choose another --out")
    same = marker.get("spec_sha256") == spec_digest or (accept is not None and accept(marker))
    if same:
        return marker, True
    foreign = foreign_entries(path, k, None if marker.get("adopted") else marker)
    if not overwrite:
        made_by = marker.get("command") or f"an earlier {k.command}"
        raise UsageError(f"--out {path}: holds the results of another {k.command} (made by: {made_by}); rerun that command "
                         f"to resume it, choose another --out{k.hint}, or pass --overwrite to replace its files")
    if foreign:
        raise UsageError(f"--out {path}: --overwrite removes only the files {k.command} made, and this folder also holds "
                         f"{_listed(foreign)}; nothing was removed: choose another --out")
    return marker, False


def check_run_out(out: str | Path) -> Path:
    """``asyncfl run --out``: a run directory (new, empty, or a run's), never another command's
    folder nor a folder inside a run directory or another command's folder."""
    path = Path(out)
    _refuse_inside(path)
    kind = kind_of(path)
    if kind not in (None, "run"):
        raise UsageError(f"--out {path}: is {_article(kind)}; asyncfl run writes only into a run directory: choose another --out")
    return path


def check_run_dir(run_dir: str | Path) -> Path:
    """A command that writes into an existing run directory (``asyncfl bias``): it must be one,
    and no run or resume may be writing it."""
    path = Path(run_dir)
    if not path.is_dir():
        raise RunDirError(f"{path}: no such run directory")
    if not is_run_dir(path):
        raise RunDirError(f"{path}: not a run directory (it needs scenario.toml and summary.json or metrics.csv)")
    RunLock.check(path)
    return path


def check_file(out: str | Path, overwrite: bool = False, inputs: Iterable[str | Path] = (), option: str = "--out") -> Path:
    """Guard one output file (see the module docstring); returns it."""
    path = Path(out)
    if path.is_dir():
        raise UsageError(f"{option} {path}: is a directory; give a file path")
    resolved = path.resolve()
    for item in inputs:
        item = Path(item).resolve()
        if resolved == item or item in resolved.parents:
            raise UsageError(f"{option} {path}: is inside the input {item}; choose a path outside every run directory")
    _refuse_inside(path)
    if (path.exists() or path.is_symlink()) and not overwrite:
        raise UsageError(f"{option} {path}: exists; pass --overwrite to replace it, or choose another path")
    return path
