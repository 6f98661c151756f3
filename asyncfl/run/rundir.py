"""The run directory: what a run leaves behind (docs/architecture.md §2; issue "Foundation" item 5).

* ``scenario.toml`` — the resolved scenario (every default written out);
* ``metrics.csv`` — one row per evaluation (``METRIC_FIELDS``);
* ``updates.csv`` — one row per upload that arrived (``UPDATE_FIELDS``);
* ``counts.npz`` — ``by_staleness[t-1, τ]`` (T×L integers), and with privacy
  ``private_by_staleness`` (the raw noisy estimates ĉ_τ), and ``coefficients`` (MA weights);
* ``privacy.csv`` — private runs: ε spent after every evaluation step (``PRIVACY_FIELDS``);
* ``summary.json`` — status, final metrics, wall time, counters;
* ``model.pt`` — the final model's ``state_dict``;
* ``checkpoint.pt`` — the last checkpoint (``[run] checkpoint_every``, SIGINT, divergence;
  ``asyncfl.run.checkpoint``), from which ``asyncfl resume`` continues.

CSV rows are flushed as they are written and whole files are replaced atomically (write to a
temporary file, then rename), so a run killed at any moment leaves files that parse.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from asyncfl.errors import RunDirError
from asyncfl.records import METRIC_FIELDS, UPDATE_FIELDS, UpdateRow

FORMAT_VERSION = 1
#: privacy.csv (docs/run-directory.md §6): one row per evaluation step of a private run
PRIVACY_FIELDS = ("step", "participations_max", "compositions", "epsilon", "delta")


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file in the same directory, fsync, then rename over ``path``."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    os.close(fd)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would make run files private to their writer
    tmp_path = Path(tmp)
    try:
        write(tmp_path)
        with open(tmp_path, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


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


def prepare(out: str | Path, overwrite: bool = False) -> Path:
    """Create the run directory; refuse a non-empty one unless ``overwrite``."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        raise RunDirError(f"--out {path}: exists and is not a directory")
    if path.is_dir() and any(path.iterdir()):
        if not overwrite:
            raise RunDirError(f"--out {path}: directory is not empty; choose another or pass --overwrite")
        for child in path.iterdir():
            if child.is_file() or child.is_symlink():
                child.unlink()
    path.mkdir(parents=True, exist_ok=True)
    return path


class CsvLog:
    """An append-only CSV file whose every row is flushed when written. It keeps the number of
    data rows and a running SHA-256 of every byte in the file, which a checkpoint records so
    that a resume can tell whether the rows it keeps are the ones the run wrote.

    ``append=True`` continues a file whose first ``rows`` data rows (and header) are ``prefix``
    (the bytes already checked by the resume)."""

    def __init__(self, path: Path, fields: tuple[str, ...], append: bool = False, rows: int = 0, prefix: bytes = b"") -> None:
        self.fh = open(path, "ab" if append else "wb")
        self._line = io.StringIO()
        self._csv = csv.writer(self._line, lineterminator="\n")
        self.fields = fields
        self.digest = hashlib.sha256(prefix if append else b"")
        self.rows = rows if append else 0  # data rows in the file (checkpoints record it)
        if not append:
            self._write_line(fields)

    def _write_line(self, values: Any) -> None:
        self._line.seek(0)
        self._line.truncate()
        self._csv.writerow(values)
        data = self._line.getvalue().encode("utf-8")
        self.fh.write(data)
        self.fh.flush()
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
                 prefixes: dict[str, bytes] | None = None) -> None:
        self.path = Path(path)
        rows, prefixes = rows or {}, prefixes or {}
        self.metrics: list[dict[str, float]] = []
        self.updates_log = CsvLog(self.path / "updates.csv", UPDATE_FIELDS, append, rows.get("updates.csv", 0), prefixes.get("updates.csv", b""))
        self.metrics_log = CsvLog(self.path / "metrics.csv", METRIC_FIELDS, append, rows.get("metrics.csv", 0), prefixes.get("metrics.csv", b""))

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
        self.metrics_log.write([_fmt(row.get(f, math.nan)) for f in METRIC_FIELDS])

    def write_scenario(self, toml_text: str) -> None:
        atomic_write(self.path / "scenario.toml", lambda p: p.write_text(toml_text, encoding="utf-8"))

    def write_counts(self, arrays: dict[str, np.ndarray]) -> None:
        def write(p: Path) -> None:
            with open(p, "wb") as fh:
                np.savez_compressed(fh, **arrays)

        atomic_write(self.path / "counts.npz", write)

    def write_privacy(self, rows: list[dict[str, Any]]) -> None:
        """``privacy.csv``, rewritten whole (atomically): it is derived from the run's state."""
        def write(p: Path) -> None:
            with open(p, "w", newline="", encoding="utf-8") as fh:
                out = csv.writer(fh, lineterminator="\n")
                out.writerow(PRIVACY_FIELDS)
                for row in rows:
                    out.writerow([_fmt(row[f]) for f in PRIVACY_FIELDS])

        atomic_write(self.path / "privacy.csv", write)

    def write_summary(self, summary: dict[str, Any]) -> None:
        write_json(self.path / "summary.json", {"format_version": FORMAT_VERSION, **summary})

    def write_model(self, state_dict: dict[str, torch.Tensor]) -> None:
        atomic_write(self.path / "model.pt", lambda p: torch.save(state_dict, p))

    def close(self) -> None:
        self.updates_log.close()
        self.metrics_log.close()


def csv_prefix(path: Path, fields: tuple[str, ...], rows: int) -> bytes:
    """``path``'s header and first ``rows`` data rows (the part a checkpoint saw), as bytes.
    Raises RunDirError for a missing file, another header, or fewer complete rows."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise RunDirError(f"{path}: missing; the run directory is incomplete") from None
    lines = data.split(b"\n")
    header = ",".join(fields).encode()
    if lines[0] != header:
        raise RunDirError(f"{path}: the header is not {header.decode()!r}; not a run directory of this asyncfl version")
    complete = len(lines) - 2  # data rows ending in a newline (the part after the last one is cut)
    if rows < 0 or complete < rows:
        raise RunDirError(f"{path}: {max(complete, 0)} complete rows, but the checkpoint was taken after {rows}; the run directory is damaged")
    return data[: sum(len(line) + 1 for line in lines[: rows + 1])]


def truncate(path: Path, size: int) -> None:
    if path.stat().st_size != size:
        with open(path, "r+b") as fh:
            fh.truncate(size)
            fh.flush()
            os.fsync(fh.fileno())


def read_csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))
