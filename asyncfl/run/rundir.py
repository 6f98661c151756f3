"""The run directory: what a run leaves behind (docs/architecture.md §2; issue "Foundation" item 5).

* ``scenario.toml`` — the resolved scenario (every default written out);
* ``metrics.csv`` — one row per evaluation (``METRIC_FIELDS``);
* ``updates.csv`` — one row per upload that arrived (``UPDATE_FIELDS``);
* ``counts.npz`` — ``by_staleness[t-1, τ]`` (T×L integers, or its non-zero entries when that
  is over 1 GiB), and with privacy ``private_by_staleness`` (the raw noisy estimates ĉ_τ), and
  ``coefficients`` (MA weights); written and read by :mod:`asyncfl.run.counts_file`;
* ``privacy.csv`` — private runs: ε spent after every evaluation step (``PRIVACY_FIELDS``);
* ``privacy_clients.csv`` — private runs: each client's participations and realised ε
  (``PRIVACY_CLIENT_FIELDS``, docs/privacy.md §11);
* ``summary.json`` — status, final metrics, wall time, counters, the ``asyncfl_version`` that made it;
* ``model.pt`` — the final model's ``state_dict``;
* ``checkpoint.pt`` — the last checkpoint (``[run] checkpoint_every``, SIGINT, divergence;
  ``asyncfl.run.checkpoint``), from which ``asyncfl resume`` continues.

CSV rows are flushed as they are written and whole files are replaced atomically (write to a
temporary file, then rename), so a run killed at any moment leaves files that parse. A write
that fails (a full disk, a quota) is a :class:`~asyncfl.errors.RunDirError` carrying the
system's message; the file it was replacing is untouched.

While a run or a resume writes a directory it holds :class:`RunLock` (``.asyncfl.lock``, an
advisory ``flock`` the operating system releases when the process dies, SIGKILL included), so
a second ``run`` or ``resume`` of the same directory is refused naming the holder's pid instead
of interleaving rows. ``--overwrite`` removes only the files a run directory holds
(:data:`RUN_FILES`) and refuses a directory holding anything else (docs/run-directory.md §1).
"""

from __future__ import annotations

import csv
import errno
import fcntl
import hashlib
import io
import json
import math
import os
import re
import shutil
import time
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch

from asyncfl.version import __version__
from asyncfl.config.files import MAX_JSON_BYTES, open_limited, read_limited
from asyncfl.errors import RunDirError
from asyncfl.records import METRIC_FIELDS, UPDATE_FIELDS, UpdateRow
from asyncfl.run.atomic import WriteError, atomic_write, write_error  # noqa: F401 - part of this module's API
from asyncfl.run.counts_file import RowStream, counts_members, write_npz
from asyncfl.staleness_counts import StalenessCounts

FORMAT_VERSION = 1
LOCK_NAME = ".asyncfl.lock"
#: every file a run directory can hold (written by run/resume, ``asyncfl bias``, ``asyncfl plot``
#: and ``analysis.staleness``); with the lock and the temporaries of interrupted atomic writes,
#: the only files ``--overwrite`` removes
RUN_FILES = (
    "scenario.toml", "updates.csv", "metrics.csv", "counts.npz", "summary.json", "model.pt", "bias.json",
    "checkpoint.pt", "metrics.png", "bias_heatmaps.png", "staleness.png", "privacy.csv", "components.json",
    "privacy_clients.csv", "trackers.json",
)
_TEMPORARY = re.compile(r"\.(" + "|".join(re.escape(n) for n in RUN_FILES) + r")\.[A-Za-z0-9_]+")


def default_run_dir(name: str, prefix: str = "") -> Path:
    """``runs/PREFIXNAME-TIMESTAMP``, the directory of a run given no ``--out``. The scenario's
    name is free text: every ``/``, ``\\`` and control character becomes ``_`` and a leading
    dot is escaped, so the directory is always one new folder inside ``runs/`` (a name such as
    ``../../x`` cannot place it elsewhere)."""
    component = re.sub(r"[/\\\x00-\x1f\x7f]", "_", f"{prefix}{name}")
    if component.startswith("."):
        component = "_" + component[1:]
    return Path("runs") / f"{component}-{time.strftime('%Y%m%d-%H%M%S')}"


def is_run_file(name: str) -> bool:
    """Whether a file called ``name`` is one a run directory holds (:data:`RUN_FILES`, the lock,
    or the temporary ``.NAME.XXXXXXXX`` of an atomic write)."""
    return name in RUN_FILES or name == LOCK_NAME or _TEMPORARY.fullmatch(name) is not None


def is_temporary(name: str) -> bool:
    """Whether ``name`` is the temporary of an atomic write (left behind by a killed run)."""
    return _TEMPORARY.fullmatch(name) is not None


#: privacy.csv (docs/run-directory.md §6): one row per evaluation step of a private run
PRIVACY_FIELDS = ("step", "participations_max", "compositions", "epsilon", "epsilon_client_max", "delta")
#: privacy_clients.csv (docs/privacy.md §11): one row per client of a private run
PRIVACY_CLIENT_FIELDS = ("client", "participations", "epsilon", "mu")


def write_bytes(path: Path, data: bytes) -> None:
    """:func:`atomic_write` of ``data``."""
    atomic_write(path, lambda p: p.write_bytes(data))


def torch_bytes(obj: Any) -> bytes:
    """``torch.save(obj)`` into memory: written to disk with plain file writes, a full disk is an
    ``OSError`` carrying the system's message (torch's own writer reports it as a RuntimeError)."""
    buffer = io.BytesIO()
    torch.save(obj, buffer)
    return buffer.getvalue()


def write_json(path: Path, data: Any) -> None:
    atomic_write(path, lambda p: p.write_text(json.dumps(_jsonable(data), indent=2, allow_nan=False) + "\n"))


def _jsonable(value: Any) -> Any:
    """JSON has no NaN: non-finite floats become null."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, (np.floating, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.ndarray):
        return _jsonable(value.tolist())
    return value


class RunLock:
    """The lock of a run directory, held while a run or a resume writes it.

    ``flock(LOCK_EX | LOCK_NB)`` on ``DIR/.asyncfl.lock``, which then holds the holder's pid. The
    operating system releases it when the process ends however it ends, so a killed run's
    directory can be resumed at once. :meth:`release` removes the file while still holding the
    lock; a process that opened it meanwhile finds, once it gets the lock, that the path no longer
    names the file it locked, and starts again (so two processes never both hold a lock)."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self._fd = path, fd

    @classmethod
    def acquire(cls, directory: str | Path, what: str = "a run or resume") -> "RunLock":
        """Take the lock of ``directory`` (which must exist); a RunDirError naming the holder's
        pid (and ``what`` it is) when another process holds it."""
        path = Path(directory) / LOCK_NAME
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0), 0o644)
            except OSError as exc:
                raise RunDirError(f"{directory}: cannot take the run directory's lock {path.name} ({exc.strerror})") from None
            try:
                _flock_soon(fd)
            except OSError as exc:
                holder = _read_pid(fd)
                os.close(fd)
                if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                    raise RunDirError(f"{directory}: cannot take the run directory's lock ({exc.strerror})") from None
                raise _in_use(directory, holder, what) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(path, follow_symlinks=False).st_ino
            except FileNotFoundError:
                same = False
            if not same:  # released and removed between our open and our lock: try again
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return cls(path, fd)

    @staticmethod
    def check(directory: str | Path) -> None:
        """Raise the "in use" RunDirError if another process holds ``directory``'s lock; changes
        nothing (no lock file is created, a stale one is left as it is)."""
        path = Path(directory) / LOCK_NAME
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NOFOLLOW", 0))
        except OSError:
            return  # no lock file: nobody holds it (acquire reports other problems)
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)  # held for an instant: acquire() retries past it
        except OSError:
            raise _in_use(directory, _read_pid(fd)) from None
        finally:
            os.close(fd)

    def release(self) -> None:
        if self._fd < 0:
            return
        try:
            self.path.unlink(missing_ok=True)
        finally:
            os.close(self._fd)
            self._fd = -1

    def __enter__(self) -> "RunLock":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.release()


def _flock_soon(fd: int, tries: int = 5, pause: float = 0.02) -> None:
    """``flock(LOCK_EX | LOCK_NB)``, tried a few times over ~0.1 s: a :meth:`RunLock.check` by
    another process holds a shared lock for an instant, a run holds it for its whole life."""
    for attempt in range(tries):
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES) or attempt == tries - 1:
                raise
            time.sleep(pause)


def _in_use(directory: str | Path, holder: int | None, what: str = "a run or resume") -> RunDirError:
    who = f"process {holder}" if holder else "another process"
    return RunDirError(f"{directory}: in use by {who} ({what} is writing it); wait until it ends or stop it, then try again")


def _read_pid(fd: int) -> int | None:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def check_out(out: str | Path, overwrite: bool = False) -> Path:
    """What :func:`prepare` refuses, checked without creating or changing anything (a run checks
    this before it builds its simulation, which can take a while)."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise RunDirError(f"--out {path}: exists and is not a directory")
    if path.is_dir() and any(path.iterdir()):
        if not overwrite:
            RunLock.check(path)  # in use: says by whom
            raise RunDirError(f"--out {path}: directory is not empty; choose another or pass --overwrite")
        _refuse_foreign(path)
    return path


def prepare(out: str | Path, overwrite: bool = False) -> tuple[Path, RunLock]:
    """Create the run directory and take its lock (:class:`RunLock`; the caller releases it).

    A non-empty directory is refused unless ``overwrite``; with ``overwrite`` it may hold only
    the files of a run directory (:func:`is_run_file`), which are then removed under the lock. A
    directory holding anything else — another file, a folder — is refused, touching nothing."""
    path = check_out(out, overwrite)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RunDirError(f"--out {path}: cannot create the directory ({exc.strerror})") from None
    lock = RunLock.acquire(path)
    try:
        if overwrite:
            _refuse_foreign(path)  # again, under the lock
            for child in path.iterdir():
                if child.name == TENSORBOARD_DIR and child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child)
                elif child.name != LOCK_NAME:
                    child.unlink()
    except BaseException:
        lock.release()
        raise
    return path, lock


#: the folder of TensorBoard event files of a run with ``run.tensorboard = true`` (its own)
TENSORBOARD_DIR = "tensorboard"


def foreign_files(path: Path) -> list[str]:
    """What run directory ``path`` holds besides a run's files (:func:`is_run_file`) and its
    ``tensorboard/`` folder of event files, as names relative to it."""
    out = []
    for child in path.iterdir():
        if child.name == TENSORBOARD_DIR and child.is_dir() and not child.is_symlink():
            out += [f"{TENSORBOARD_DIR}/{c.name}" for c in child.iterdir()
                    if not (c.is_file() and c.name.startswith("events.out.tfevents."))]
        elif not (is_run_file(child.name) and (child.is_file() or child.is_symlink())) or child.is_dir():
            out.append(child.name)
    return sorted(out)


def _refuse_foreign(path: Path) -> None:
    foreign = foreign_files(path)
    if foreign:
        listed = ", ".join(repr(n) for n in foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise RunDirError(
            f"--out {path}: --overwrite removes only the files of a run directory, and this directory also holds "
            f"{listed}; nothing was removed: choose another directory"
        )


class CsvLog:
    """An append-only CSV file whose every row is flushed when written. It keeps the number of
    data rows and a running SHA-256 of every byte in the file, which a checkpoint records so
    that a resume can tell whether the rows it keeps are the ones the run wrote.

    ``append=True`` continues a file whose first ``rows`` data rows (and header) are ``prefix``
    (the bytes already checked by the resume)."""

    def __init__(self, path: Path, fields: tuple[str, ...], append: bool = False, rows: int = 0,
                 prefix: "hashlib._Hash | None" = None) -> None:
        self.path = path
        try:
            self.fh = open(path, "ab" if append else "wb", buffering=0)
        except OSError as exc:
            raise write_error(path, exc) from None
        self._line = io.StringIO()
        self._csv = csv.writer(self._line, lineterminator="\n")
        self.fields = fields
        self.digest = prefix.copy() if append and prefix is not None else hashlib.sha256()
        self.rows = rows if append else 0  # data rows in the file (checkpoints record it)
        if not append:
            self._write_line(fields)

    def _write_line(self, values: Any) -> None:
        self._line.seek(0)
        self._line.truncate()
        self._csv.writerow(values)
        data = self._line.getvalue().encode("utf-8")
        try:  # unbuffered: a failed write is reported now, and nothing stays behind to retry at close
            view = memoryview(data)
            while view:
                view = view[self.fh.write(view):]
        except OSError as exc:
            raise write_error(self.path, exc) from None
        self.digest.update(data)

    def write(self, values: list[Any]) -> None:
        self._write_line(values)
        self.rows += 1

    def sha256(self) -> str:
        return self.digest.hexdigest()

    def close(self) -> None:
        self.fh.close()


def _fmt(value: Any) -> Any:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return value


class RunWriter:
    """A :class:`~asyncfl.records.Sink` that writes the run directory as the run goes.

    ``append=True`` continues a resumed directory whose CSV files hold ``rows[name]`` data rows,
    ``prefixes[name]`` being exactly those bytes (already cut and checked by the resume)."""

    def __init__(self, path: Path, append: bool = False, rows: dict[str, int] | None = None,
                 prefixes: "dict[str, CsvPrefix] | None" = None, metric_fields: tuple[str, ...] = METRIC_FIELDS) -> None:
        self.path = Path(path)
        self.metric_fields = metric_fields  # METRIC_FIELDS and the task's own metrics (Task.metric_names)
        rows, prefixes = rows or {}, prefixes or {}
        self.metrics: list[dict[str, float]] = []
        self.checkpoint_step: int | None = None  # the step of the last checkpoint written (or resumed from)
        digest = lambda name: prefixes[name].digest if name in prefixes else None  # noqa: E731
        self.updates_log = CsvLog(self.path / "updates.csv", UPDATE_FIELDS, append, rows.get("updates.csv", 0), digest("updates.csv"))
        self.metrics_log = CsvLog(self.path / "metrics.csv", metric_fields, append, rows.get("metrics.csv", 0), digest("metrics.csv"))

    def rows(self) -> dict[str, int]:
        """Data rows written so far per CSV file (what a checkpoint must truncate back to)."""
        return {"updates.csv": self.updates_log.rows, "metrics.csv": self.metrics_log.rows}

    def digests(self) -> dict[str, str]:
        """SHA-256 of each CSV file's bytes so far (header and rows)."""
        return {"updates.csv": self.updates_log.sha256(), "metrics.csv": self.metrics_log.sha256()}

    def on_update(self, row: UpdateRow) -> None:
        self.updates_log.write([_fmt(v) for v in row])

    def on_metrics(self, row: dict[str, float]) -> None:
        self.metrics.append(row)
        self.metrics_log.write([_fmt(row.get(f, math.nan)) for f in self.metric_fields])

    def write_scenario(self, toml_text: str) -> None:
        atomic_write(self.path / "scenario.toml", lambda p: p.write_text(toml_text, encoding="utf-8"))

    def write_counts(self, counts: StalenessCounts, arrays: dict[str, "np.ndarray | RowStream"]) -> None:
        """``counts.npz`` (docs/run-directory.md §5): the staleness counts in the layout
        :func:`counts_members` chooses, then ``arrays`` (each streamed a block of rows at a time)."""
        atomic_write(self.path / "counts.npz", lambda p: write_npz(p, {**counts_members(counts), **arrays}))

    def write_privacy(self, rows: list[dict[str, Any]]) -> None:
        """``privacy.csv``, rewritten whole (atomically): it is derived from the run's state."""
        self._write_table("privacy.csv", PRIVACY_FIELDS, rows)

    def write_privacy_clients(self, rows: list[dict[str, Any]]) -> None:
        """``privacy_clients.csv``, rewritten whole (atomically): derived from the run's ledger."""
        self._write_table("privacy_clients.csv", PRIVACY_CLIENT_FIELDS, rows)

    def _write_table(self, name: str, fields: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
        def write(p: Path) -> None:
            with open(p, "w", newline="", encoding="utf-8") as fh:
                out = csv.writer(fh, lineterminator="\n")
                out.writerow(fields)
                for row in rows:
                    out.writerow([_fmt(row[f]) for f in fields])

        atomic_write(self.path / name, write)

    def write_summary(self, summary: dict[str, Any]) -> None:
        # asyncfl_version: which asyncfl made the run (a sweep or study reuses a run only of its own version)
        write_json(self.path / "summary.json", {"format_version": FORMAT_VERSION, "asyncfl_version": __version__, **summary})

    def write_model(self, state_dict: dict[str, torch.Tensor]) -> None:
        write_bytes(self.path / "model.pt", torch_bytes(state_dict))

    def close(self) -> None:
        self.updates_log.close()
        self.metrics_log.close()


class CsvPrefix:
    """The part of a CSV file a checkpoint saw: its header and first ``rows`` data rows, as a
    byte length and a running SHA-256 (:func:`csv_prefix`)."""

    def __init__(self, size: int, digest: "hashlib._Hash") -> None:
        self.size, self.digest = size, digest

    def sha256(self) -> str:
        return self.digest.hexdigest()


def csv_prefix(path: Path, fields: tuple[str, ...], rows: int, chunk: int = 1 << 20) -> CsvPrefix:
    """``path``'s header and first ``rows`` data rows (the part a checkpoint saw), read in chunks
    (the file is never held whole in memory) and hashed. Raises RunDirError for a missing file or
    one that is not a regular file, another header, or fewer complete rows."""
    if rows < 0:
        raise RunDirError(f"{path}: the checkpoint counts {rows} rows; the run directory is damaged")
    if not path.exists() and not path.is_symlink():
        raise RunDirError(f"{path}: missing; the run directory is incomplete")
    header = ",".join(fields).encode() + b"\n"
    with open_limited(path, 1 << 62, RunDirError) as fh:
        first = fh.read(len(header))
        if first != header:
            raise RunDirError(f"{path}: the header is not {header.decode().strip()!r}; not a run directory of this asyncfl version")
        digest, size, complete = hashlib.sha256(first), len(first), 0  # complete: data rows ending in a newline
        while complete < rows:
            block = fh.read(chunk)
            if not block:
                raise RunDirError(f"{path}: {complete} complete rows, but the checkpoint was taken after {rows}; the run directory is damaged")
            newlines = block.count(b"\n")
            if complete + newlines < rows:
                digest.update(block)
                size, complete = size + len(block), complete + newlines
                continue
            end = -1
            for _ in range(rows - complete):
                end = block.index(b"\n", end + 1)
            digest.update(block[: end + 1])
            size, complete = size + end + 1, rows
    return CsvPrefix(size, digest)


def truncate(path: Path, size: int) -> None:
    if path.stat().st_size != size:
        with open(path, "r+b") as fh:
            fh.truncate(size)
            fh.flush()
            os.fsync(fh.fileno())


MAX_CSV_BYTES = 1 << 30


def read_csv(path: Path) -> list[dict[str, str]]:
    """The rows of a CSV file of a run directory (a regular file of at most :data:`MAX_CSV_BYTES`;
    RunDirError otherwise)."""
    with io.TextIOWrapper(open_limited(path, MAX_CSV_BYTES, RunDirError), newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def csv_columns(path: Path, names: tuple[str, ...]) -> Iterator[tuple[int, list[str | None]]]:
    """``(line number, [the row's value of each of names, None where absent])`` for every row of
    a CSV file of a run directory, streamed (the checks of :func:`read_csv`): a column read from
    ``updates.csv`` without holding its rows as dictionaries."""
    with io.TextIOWrapper(open_limited(path, MAX_CSV_BYTES, RunDirError), newline="", encoding="utf-8") as fh:
        reader = csv.reader(fh)
        header = next(reader, [])
        where = [header.index(n) if n in header else None for n in names]
        for line, row in enumerate(reader, start=2):
            yield line, [row[i] if i is not None and i < len(row) else None for i in where]


def read_json(path: Path) -> Any:
    """A JSON file of a run directory (``summary.json``, ``bias.json``), read within
    :data:`~asyncfl.config.files.MAX_JSON_BYTES`; a RunDirError when it cannot be read or parsed."""
    try:
        return json.loads(read_limited(path, MAX_JSON_BYTES, RunDirError).decode("utf-8"))
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise RunDirError(f"{path}: not valid JSON ({exc.__class__.__name__}); the run directory is damaged") from None
