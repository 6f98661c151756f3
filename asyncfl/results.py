"""Results as data: a run directory or a sweep directory read back as Python objects with pandas
tables (docs/run-directory.md §10).

``asyncfl.load_run(DIR)`` returns a :class:`Run`: the validated ``scenario``, the ``summary``,
``metrics`` and ``updates`` as :class:`pandas.DataFrame` with the dtypes of
:data:`METRIC_DTYPES` / :data:`UPDATE_DTYPES`, ``counts()`` (``by_staleness``, dense), ``staleness`` (its non-zero entries), ``W()`` (the
exact weight matrix), ``bias`` (``bias.json``) and ``privacy`` (the summary's privacy section).
Every file is read on first use, so a :class:`Run` of a sweep costs nothing until it is looked at.

``asyncfl.load_sweep(DIR)`` returns a :class:`Sweep` for the output directory of anything that
runs many scenarios on the experiment engine, recognised by its layout: a sweep (``results.csv``,
``summary.csv``, ``sweep.toml``, ``runs/``), a study (``results.csv``, ``tuning.csv``, ``runs/``)
or a privacy sweep (``sweep.csv``, ``runs/``): ``results`` (one row per run), the runs lazily
(``sweep.run(i)``, ``sweep.runs``) through the table's ``run_dir`` column.

pandas is imported when a table is first built, never by ``import asyncfl``.
"""

from __future__ import annotations

import csv
import math
import tomllib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from asyncfl.config import scenario as scenario_mod
from asyncfl.config.files import (MAX_JSON_BYTES, MAX_SCENARIO_BYTES, MAX_TABLE_BYTES, open_limited, open_text_limited,
                                  read_json_limited, read_text_limited)
from asyncfl.config.memory import machine_memory
from asyncfl.errors import RunDirError, ScenarioError
from asyncfl.records import METRIC_FIELDS, REASONS, UPDATE_FIELDS
from asyncfl.run.counts_file import read_counts
from asyncfl.server.aggregation import weight_matrix
from asyncfl.staleness_counts import StalenessCounts

#: ``model.pt`` is read whatever its size (it is the model's): only its being a regular file is checked
UNBOUNDED = 1 << 62

if TYPE_CHECKING:  # annotations only: pandas is imported on first use
    import pandas as pd

__all__ = ["METRIC_DTYPES", "UPDATE_DTYPES", "Run", "Sweep", "load_run", "load_sweep", "is_run_dir"]

#: dtypes of the ``metrics.csv`` columns (an empty field is NaN: accuracy of a regression, …)
METRIC_DTYPES: dict[str, str] = {
    "step": "int64", "time": "float64", "wall_time": "float64", "loss": "float64", "accuracy": "float64",
    "train_loss": "float64", "staleness_mean": "float64", "staleness_max": "float64", "gap": "float64",
}
#: dtypes of the ``updates.csv`` columns; ``reason`` is a category of ``""``, :data:`REASONS` and the
#: drop reasons a protocol declares (``ProtocolTraits.drops``)
UPDATE_DTYPES: dict[str, str] = {
    "client": "int64", "version": "int64", "step": "int64", "dispatch_time": "float64", "arrival_time": "float64",
    "staleness": "int64", "accepted": "bool", "reason": "category", "dispatch": "int64",
}
assert set(METRIC_DTYPES) == set(METRIC_FIELDS) and set(UPDATE_DTYPES) == set(UPDATE_FIELDS)


def _pandas() -> Any:
    try:
        import pandas
    except ImportError:  # pragma: no cover - a dependency of asyncfl
        raise RunDirError("reading results as tables needs pandas (pip install pandas)") from None
    return pandas


def _read_json(path: Path) -> Any:
    """A JSON file of a run directory: a regular file (a pipe or a device is refused before it is
    opened for reading, so nothing blocks) of at most :data:`MAX_JSON_BYTES`."""
    if not _present(path):
        raise RunDirError(f"{path}: missing")
    return read_json_limited(path, MAX_JSON_BYTES, RunDirError)


def is_run_dir(path: str | Path) -> bool:
    """A directory that holds a run (``scenario.toml`` and ``metrics.csv`` or ``summary.json``)."""
    path = Path(path)
    return (path / "scenario.toml").is_file() and ((path / "metrics.csv").is_file() or (path / "summary.json").is_file())


def _typed(frame: "pd.DataFrame", dtypes: dict[str, str], path: Path) -> "pd.DataFrame":
    """Cast the known columns of ``frame`` to ``dtypes`` (columns a newer asyncfl added and an
    older run lacks are simply absent; unknown columns are kept as read)."""
    pd = _pandas()
    out = {}
    for col in frame.columns:
        kind = dtypes.get(col)
        values = frame[col]
        try:
            if kind == "bool":
                text = values.astype(str).str.lower()
                if not text.isin(["true", "false"]).all():
                    raise ValueError("expected true/false")
                out[col] = text.eq("true")
            elif kind == "category":
                text = values.fillna("").astype(str)  # a protocol's own drop reasons come after the engine's
                own = sorted(set(text) - {"", *REASONS})
                out[col] = pd.Categorical(text, categories=["", *REASONS, *own])
            elif kind == "int64":
                out[col] = pd.to_numeric(values, errors="raise").astype("int64")
            elif kind == "float64":
                out[col] = pd.to_numeric(values.replace("", math.nan), errors="raise").astype("float64")
            else:
                out[col] = values
        except (ValueError, TypeError) as exc:
            raise RunDirError(f"{path}: column {col!r} does not hold {kind} values ({exc})") from None
    return pd.DataFrame(out, columns=list(frame.columns))


def _present(path: Path) -> bool:
    """Whether ``path`` names anything (a pipe or a device too: the readers refuse those by name)."""
    return path.exists() or path.is_symlink()


def _read_table(path: Path, dtypes: dict[str, str]) -> "pd.DataFrame":
    if not _present(path):
        raise RunDirError(f"{path}: missing")
    frame = _read_csv(path, dtype=str, keep_default_na=False)
    missing = [c for c in dtypes if c not in frame.columns and c in ("step",)]
    if missing:
        raise RunDirError(f"{path}: no column {', '.join(missing)}; not a table of a run directory")
    return _typed(frame, dtypes, path)


def _read_csv(path: Path, **kw: Any) -> "pd.DataFrame":
    """``pandas.read_csv`` of a results file; an empty, binary, non-UTF-8 or malformed file is a
    RunDirError naming it."""
    pd = _pandas()
    try:
        with open_text_limited(path, MAX_TABLE_BYTES, RunDirError) as fh:  # a regular file, bounded
            return pd.read_csv(fh, **kw)
    except (OSError, ValueError, pd.errors.ParserError) as exc:  # EmptyDataError, UnicodeDecodeError are ValueErrors
        raise RunDirError(f"{path}: cannot be read as a CSV table ({exc.__class__.__name__}: {exc})") from None


@dataclass
class Run:
    """One run directory (docs/run-directory.md), its files read on first use."""

    path: Path

    def __post_init__(self) -> None:
        self.path = Path(self.path)

    def __repr__(self) -> str:
        summary = self.summary
        return (f"Run({str(self.path)!r}, name={summary.get('name')!r}, status={summary.get('status')!r}, "
                f"steps={summary.get('steps')})")

    # -- the files ----------------------------------------------------------------------------
    @cached_property
    def scenario(self) -> scenario_mod.Scenario:
        """The run's ``scenario.toml``, validated (:func:`asyncfl.config.scenario.load`)."""
        try:
            return scenario_mod.load(self.path / "scenario.toml", run_dir=True)
        except ScenarioError as exc:
            raise RunDirError(f"{self.path}: its scenario.toml is not valid:\n" + "\n".join(f"  - {p}" for p in exc.problems)) from None

    @cached_property
    def summary(self) -> dict[str, Any]:
        """``summary.json`` (docs/run-directory.md §6); ``null`` numbers are None. Anything but a
        JSON object (a list, a number) is a RunDirError."""
        data = _read_json(self.path / "summary.json")
        if not isinstance(data, dict):
            raise RunDirError(f"{self.path / 'summary.json'}: not a JSON object; the run directory is damaged")
        for key in ("final", "privacy"):
            if data.get(key) is not None and not isinstance(data[key], dict):
                raise RunDirError(f"{self.path / 'summary.json'}: {key!r} is not a JSON object; the run directory is damaged")
        return data

    @cached_property
    def metrics(self) -> "pd.DataFrame":
        """``metrics.csv``, one row per evaluation, columns typed by :data:`METRIC_DTYPES`; a task's
        own metrics (``Task.metric_names``) are further float columns."""
        frame = _read_table(self.path / "metrics.csv", METRIC_DTYPES)
        pd = _pandas()
        for col in frame.columns:
            if col not in METRIC_DTYPES:
                try:
                    frame[col] = pd.to_numeric(frame[col].replace("", math.nan), errors="raise").astype("float64")
                except (ValueError, TypeError) as exc:
                    raise RunDirError(f"{self.path / 'metrics.csv'}: column {col!r} is not numeric ({exc})") from None
        return frame

    def evaluations(self) -> list[dict[str, float]]:
        """``metrics.csv`` without pandas: one dict per evaluation, every field parsed by
        ``float`` (an empty field is NaN); ``[]`` while the run has written none. A file that
        cannot be read, or a field that is not a number, is a RunDirError naming it."""
        path = self.path / "metrics.csv"
        if not _present(path):
            return []
        try:
            with open_text_limited(path, MAX_TABLE_BYTES, RunDirError) as fh:
                return [{k: (float(v) if v not in ("", None) else math.nan) for k, v in row.items()} for row in csv.DictReader(fh)]
        except OSError as exc:
            raise RunDirError(f"{path}: cannot be read ({exc.__class__.__name__})") from None
        except (ValueError, TypeError) as exc:  # a UnicodeDecodeError is a ValueError
            raise RunDirError(f"{path}: not a metrics.csv of numbers ({exc.__class__.__name__})") from None

    @cached_property
    def updates(self) -> "pd.DataFrame":
        """``updates.csv``, one row per upload whose fate is known, typed by :data:`UPDATE_DTYPES`."""
        return _read_table(self.path / "updates.csv", UPDATE_DTYPES)

    @cached_property
    def _counts_file(self) -> "tuple[StalenessCounts, dict[str, np.ndarray]]":
        path = self.path / "counts.npz"
        if not _present(path):
            raise RunDirError(f"{path}: missing")
        return read_counts(path)

    @property
    def staleness(self) -> StalenessCounts:
        """The staleness counts ``C_{t,τ}`` as their non-zero entries, whichever layout
        ``counts.npz`` holds (docs/run-directory.md §5)."""
        return self._counts_file[0]

    @property
    def arrays(self) -> dict[str, np.ndarray]:
        """The other arrays of ``counts.npz``: ``step_time``, and ``private_by_staleness`` and
        ``coefficients`` where the run has them (docs/run-directory.md §5)."""
        return self._counts_file[1]

    def counts(self, width: int | None = None) -> np.ndarray:
        """``by_staleness`` (T×L int64): ``counts()[t-1, τ]`` accepted uploads of staleness τ in step t,
        the same array whichever layout the file holds; ``width`` keeps the first columns only
        (``min(L, T)`` hold every staleness that can occur: ``τ ≤ t − 1``)."""
        counts = self.staleness
        rows, columns = counts.steps, counts.width if width is None else max(0, int(width))
        _check_fits(self.path / "counts.npz", rows * columns * 8, f"by_staleness of {rows} × {columns} int64",
                    "read .staleness (its non-zero entries) instead")
        try:
            return counts.dense(width=width)
        except MemoryError:
            raise RunDirError(f"{self.path / 'counts.npz'}: by_staleness of {rows} × {columns} does not fit in memory; "
                              "read .staleness (its non-zero entries) instead") from None

    def W(self) -> np.ndarray:
        """The exact weight matrix ``W[t-1, s-1] = (t−s+1)^(−p) C_{t,s} / C`` (docs/protocol.md §7),
        with the run's ``p`` and ``C``; ``I`` for a synchronous run."""
        server, counts = self.scenario.server, self.staleness
        steps = counts.steps
        _check_fits(self.path / "counts.npz", steps * steps * 8, f"a {steps} × {steps} weight matrix",
                    "read .staleness (its non-zero entries) instead")
        try:
            return weight_matrix(self.counts(min(counts.width, max(counts.steps, 1))), server.staleness_exponent, int(server.buffer))
        except (ValueError, IndexError, TypeError) as exc:
            raise RunDirError(f"{self.path / 'counts.npz'}: its counts do not give a weight matrix ({exc})") from None
        except MemoryError:
            raise RunDirError(f"{self.path / 'counts.npz'}: a {steps} × {steps} weight matrix does not fit in memory") from None

    @cached_property
    def bias(self) -> dict[str, Any] | None:
        """``bias.json`` (docs/server-rules.md §8); None where the run has none (synchronous runs)."""
        path = self.path / "bias.json"
        if not path.is_file():
            return None
        data = _read_json(path)
        if not isinstance(data, dict):
            raise RunDirError(f"{path}: not a JSON object; the run directory is damaged")
        return data

    @property
    def privacy(self) -> dict[str, Any] | None:
        """The summary's ``privacy`` section (σ, γ, ξ, ε spent, δ, accountant), None without privacy."""
        return self.summary.get("privacy")

    @property
    def name(self) -> str:
        return str(self.summary.get("name") or self.scenario.name)

    @property
    def status(self) -> str | None:
        status = self.summary.get("status")
        return None if status is None else str(status)

    @property
    def final(self) -> dict[str, Any]:
        """The last metrics row of the summary (without ``wall_time``)."""
        return dict(self.summary.get("final") or {})

    def model(self) -> dict[str, Any]:
        """``model.pt``: the final model's named parameters (``torch.load(weights_only=True)``)."""
        import pickle

        import torch  # heavy and optional for reading tables: imported here only

        path = self.path / "model.pt"
        if not _present(path):
            raise RunDirError(f"{path}: missing")
        try:
            with open_limited(path, UNBOUNDED, RunDirError) as fh:  # a regular file: a pipe never blocks
                model = torch.load(fh, weights_only=True)
        except (OSError, RuntimeError, ValueError, EOFError, pickle.UnpicklingError, AttributeError, KeyError, TypeError) as exc:
            raise RunDirError(f"{path}: cannot be read as a model ({exc.__class__.__name__})") from None
        if not isinstance(model, dict):
            raise RunDirError(f"{path}: not a state_dict (a dict of tensors)")
        return model


def _check_fits(path: Path, nbytes: int, what: str, instead: str) -> None:
    """A RunDirError naming ``path`` when ``what`` (``nbytes``) would not fit in this machine's
    memory: a file claiming 2³⁵ steps is refused before anything is allocated."""
    memory = machine_memory()
    if memory is not None and nbytes > memory:
        raise RunDirError(f"{path}: {what} takes {nbytes} bytes, more than this machine's memory ({memory}); {instead}")


def load_run(path: str | Path) -> Run:
    """The run in directory ``path`` (docs/run-directory.md §10). A directory that is not a run
    is a :class:`~asyncfl.errors.RunDirError` naming what is missing."""
    path = Path(path)
    if not path.is_dir():
        raise RunDirError(f"{path}: no such run directory")
    if not is_run_dir(path):
        raise RunDirError(f"{path}: not a run directory (it needs scenario.toml and metrics.csv or summary.json)")
    return Run(path)


# ---------------------------------------------------------------------------------------------
#: (kind, results table, other files) of the layouts :func:`load_sweep` reads, in order of preference
LAYOUTS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("sweep", "results.csv", ("sweep.toml",)),   # asyncfl sweep
    ("study", "results.csv", ("tuning.csv",)),   # a study: results and its tuning runs
    ("privacy", "sweep.csv", ()),                # a privacy sweep
    ("sweep", "results.csv", ()),                # a results table alone
)
RUN_DIR_COLUMNS = ("run_dir", "run", "dir", "path")


@dataclass
class Sweep:
    """A directory of many runs with its results table (docs/run-directory.md §10)."""

    path: Path
    kind: str
    table: str
    _runs: dict[int, Run] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        return f"Sweep({str(self.path)!r}, kind={self.kind!r}, runs={len(self)})"

    @cached_property
    def results(self) -> "pd.DataFrame":
        """The results table: one row per run (``results.csv`` or ``sweep.csv``), as pandas reads it."""
        return _read_csv(self.path / self.table)

    @cached_property
    def summary(self) -> "pd.DataFrame | None":
        """``summary.csv`` of ``asyncfl sweep`` (aggregates over seeds), None where absent."""
        path = self.path / "summary.csv"
        return _read_csv(path) if _present(path) else None

    @cached_property
    def tuning(self) -> "pd.DataFrame | None":
        """``tuning.csv`` of a study, None where absent."""
        path = self.path / "tuning.csv"
        return _read_csv(path) if _present(path) else None

    @cached_property
    def spec(self) -> dict[str, Any] | None:
        """``sweep.toml`` of ``asyncfl sweep`` (the sweep's definition), None where absent."""
        path = self.path / "sweep.toml"
        if not _present(path):
            return None
        try:
            return tomllib.loads(read_text_limited(path, MAX_SCENARIO_BYTES, RunDirError))
        except (tomllib.TOMLDecodeError, RecursionError) as exc:
            raise RunDirError(f"{path}: not valid TOML ({exc.__class__.__name__})") from None

    @cached_property
    def run_dirs(self) -> list[Path]:
        """The run directory of each row of :attr:`results`, in row order: its ``run_dir`` column
        (relative to the sweep), else every run directory under ``runs/`` in sorted order."""
        column = next((c for c in RUN_DIR_COLUMNS if c in self.results.columns), None)
        if column is not None:
            dirs = [self.path / str(value) for value in self.results[column]]
            root = self.path.resolve()
            outside = [d for d in dirs if root not in d.resolve().parents]
            if outside:
                raise RunDirError(f"{self.path / self.table}: its {column} column names {outside[0]}, outside the sweep directory")
            return dirs
        root = self.path / "runs"
        return sorted(p.parent for p in root.rglob("scenario.toml") if is_run_dir(p.parent)) if root.is_dir() else []

    def __len__(self) -> int:
        return len(self.run_dirs)

    def run(self, i: int) -> Run:
        """The run of row ``i`` (read on first use, then kept)."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"{self.path}: row {i} of {len(self)}")
        i %= len(self)
        if i not in self._runs:
            self._runs[i] = load_run(self.run_dirs[i])
        return self._runs[i]

    @property
    def runs(self) -> Sequence[Run]:
        """Every run, loaded lazily as it is indexed or iterated."""
        return _LazyRuns(self)

    def __iter__(self) -> Iterator[Run]:
        return iter(self.runs)


class _LazyRuns(Sequence[Run]):
    def __init__(self, sweep: Sweep) -> None:
        self._sweep = sweep

    def __len__(self) -> int:
        return len(self._sweep)

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self._sweep.run(j) for j in range(*i.indices(len(self)))]
        return self._sweep.run(i)


def load_sweep(path: str | Path) -> Sweep:
    """The sweep, study or privacy sweep in directory ``path`` (docs/run-directory.md §10)."""
    path = Path(path)
    if not path.is_dir():
        raise RunDirError(f"{path}: no such sweep directory")
    for kind, table, others in LAYOUTS:
        if (path / table).is_file() and all((path / o).is_file() for o in others):
            return Sweep(path, kind, table)
    raise RunDirError(f"{path}: not a sweep directory (no results.csv of a sweep or study, "
                      "nor sweep.csv of a privacy sweep)")
