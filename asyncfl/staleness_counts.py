"""The per-step staleness counts ``C_{t,·}``, kept as what happened (docs/run-directory.md §5).

``by_staleness[t-1, τ]`` is the number of uploads of staleness ``τ`` accepted by server step
``t``. As a dense array that is ``T × L`` integers with ``L = max_staleness + 1``: 1.6 GB for
2000 steps at ``max_staleness = 100000``, although a step that accepts ``C`` uploads has at most
``C`` non-zero entries and no staleness can exceed ``T − 1`` (``τ = t − s`` with ``s ≥ 1``).
:class:`StalenessCounts` keeps only the non-zero entries, as rows ``(t, τ, count)`` sorted by
``(t, τ)``, so its size follows the uploads accepted, not the configured bound.

The dense array is still what the counts mean, and what ``counts.npz`` holds whenever it is no
larger than :data:`DENSE_LIMIT_BYTES` (every run whose file could be read before the sparse
form existed): :meth:`StalenessCounts.dense` rebuilds it exactly, ``T × L`` with ``L`` the
record's ``columns`` — ``max_staleness + 1`` when bounded, else (unbounded, or 1 for a protocol
whose uploads are never stale) grown to the largest staleness seen ``+ 1`` — and ``0 × 1``
before the first step.

Depends on numpy only; the engine appends one step at a time (:meth:`StalenessCounts.add`), the
writer and reader of ``counts.npz`` (``asyncfl.run.counts_file``) choose and read its layout.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Iterator

import numpy as np

#: ``by_staleness`` is written dense (``T × L`` int64) when it takes at most this many bytes, the
#: bound up to which the dense file could be read back before; above it, sparse (docs/run-directory.md §5)
DENSE_LIMIT_BYTES = 1 << 30
#: bytes of one entry ``(t, τ, count)``
ENTRY_BYTES = 3 * 8
#: the sparse layout's arrays in ``counts.npz``
SPARSE_KEYS = ("by_staleness_entries", "by_staleness_shape")


def _empty() -> np.ndarray:
    return np.zeros((0, 3), dtype=np.int64)


@dataclass(slots=True)
class StalenessCounts:
    """``C_{t,τ}`` of every step taken, as its non-zero entries. Mutable (the engine appends a
    step at a time); a simulation's state holds a :meth:`snapshot`.

    ``entries[:used]`` are the rows ``(t, τ, C_{t,τ})``, ``1 ≤ t ≤ steps``, ``C > 0``, sorted by
    ``(t, τ)``; the array's further rows are spare capacity (its length doubles as it fills)."""

    columns: int = 1  # the dense layout's width L: max_staleness + 1, or the largest τ seen + 1 (at least 1)
    steps: int = 0  # T: server steps recorded
    entries: np.ndarray = field(default_factory=_empty)
    used: int = 0

    # -- building ---------------------------------------------------------------------------
    def add(self, taus: np.ndarray) -> None:
        """Record one server step that accepted uploads of staleness ``taus`` (non-negative
        integers, any order): ``C_{t,τ} = #{k : taus[k] = τ}`` for the next ``t``; ``columns``
        grows to the largest ``τ + 1`` (it never does when ``max_staleness`` bounds ``τ``)."""
        self.steps += 1
        taus = np.asarray(taus, dtype=np.int64)
        if taus.size == 0:
            return
        per_tau = np.bincount(taus)  # O(max τ) ≤ O(t): never the configured bound
        seen = np.flatnonzero(per_tau)
        end = self.used + len(seen)
        if end > len(self.entries):
            grown = np.zeros((max(end, 2 * len(self.entries), 64), 3), dtype=np.int64)
            grown[: self.used] = self.entries[: self.used]
            self.entries = grown
        block = self.entries[self.used:end]
        block[:, 0] = self.steps
        block[:, 1] = seen
        block[:, 2] = per_tau[seen]
        self.used = end
        self.columns = max(self.columns, int(seen[-1]) + 1)

    def snapshot(self) -> "StalenessCounts":
        """A copy holding exactly the used entries (what a checkpoint stores)."""
        return StalenessCounts(self.columns, self.steps, self.entries[: self.used].copy(), self.used)

    @classmethod
    def from_entries(cls, entries: np.ndarray, shape: tuple[int, int]) -> "StalenessCounts":
        """The counts of a ``shape = (T, L)`` record from its entries ``(t, τ, count)``;
        ValueError (saying what is wrong) unless :meth:`problem` finds nothing."""
        T, L = (int(v) for v in shape)
        counts = cls(L, T, np.ascontiguousarray(entries, dtype=np.int64).reshape(-1, 3), len(entries))
        problem = counts.problem()
        if problem:
            raise ValueError(problem)
        return counts

    @classmethod
    def from_dense(cls, by_staleness: np.ndarray) -> "StalenessCounts":
        """The counts of a dense ``T × L`` array of non-negative integers (ValueError otherwise)."""
        array = np.asarray(by_staleness)
        if array.ndim != 2 or array.dtype.kind not in "iu":
            raise ValueError(f"by_staleness must be a 2-d integer array (steps × staleness), not {array.ndim}-d {array.dtype}")
        return cls.from_blocks(array.shape, [array])

    @classmethod
    def from_blocks(cls, shape: tuple[int, int], blocks: Iterable[np.ndarray]) -> "StalenessCounts":
        """The counts of a dense ``shape = (T, L)`` array given as consecutive blocks of whole
        rows (a file read a few megabytes at a time): memory follows the non-zero entries."""
        T, L = (int(v) for v in shape)
        if T < 0 or L < 1:
            raise ValueError(f"by_staleness has shape ({T}, {L}): it needs at least one staleness column")
        parts, row = [], 0
        for block in blocks:
            block = np.asarray(block).reshape(-1, L)
            if block.dtype.kind not in "iu" or (block.size and (block.min() < 0 or block.max() > np.iinfo(np.int64).max)):
                raise ValueError("by_staleness must hold non-negative integers (accepted uploads)")
            block = block.astype(np.int64, copy=False)  # uint64 stacked with int64 would become float64
            t, tau = np.nonzero(block)
            parts.append(np.stack([t + row + 1, tau, block[t, tau]], axis=1).astype(np.int64))
            row += len(block)
        if row != T:
            raise ValueError(f"by_staleness holds {row} rows, not the {T} its shape says")
        entries = np.concatenate(parts) if parts else _empty()
        return cls(L, T, entries, len(entries))

    # -- reading ----------------------------------------------------------------------------
    @property
    def used_entries(self) -> np.ndarray:
        """The ``(t, τ, count)`` rows (a view, not a copy)."""
        return self.entries[: self.used]

    @property
    def width(self) -> int:
        """``L`` of the dense layout: ``columns``; 1 before the first step."""
        return self.columns if self.steps else 1

    @property
    def shape(self) -> tuple[int, int]:
        """``(T, L)`` of the dense layout."""
        return (self.steps, self.width)

    @property
    def nbytes(self) -> int:
        """Bytes the entries take in memory, spare capacity included."""
        return int(self.entries.nbytes)

    def total(self) -> int:
        """``Σ_{t,τ} C_{t,τ}``: every upload accepted."""
        return int(self.used_entries[:, 2].sum())

    def _rows(self, start: int, stop: int) -> np.ndarray:
        """The entries of steps ``start+1 … stop`` (entries are sorted by step)."""
        t = self.used_entries[:, 0]
        return self.used_entries[np.searchsorted(t, start, side="right"): np.searchsorted(t, stop, side="right")]

    def dense(self, start: int = 0, stop: int | None = None, width: int | None = None) -> np.ndarray:
        """``by_staleness[start:stop, :width]`` (int64): steps ``start+1 … stop`` (default all),
        ``width`` columns (default :attr:`width`; entries of larger staleness are left out)."""
        stop = self.steps if stop is None else min(stop, self.steps)
        start = min(max(start, 0), stop)
        width = self.width if width is None else width
        out = np.zeros((stop - start, width), dtype=np.int64)
        rows = self._rows(start, stop)
        rows = rows[rows[:, 1] < width]
        out[rows[:, 0] - start - 1, rows[:, 1]] = rows[:, 2]
        return out

    def blocks(self, max_bytes: int = 4 << 20) -> Iterator[np.ndarray]:
        """:meth:`dense` in consecutive blocks of whole rows of at most ``max_bytes`` (at least one
        row): the dense layout written without ever holding it whole."""
        width = self.width
        step = max(1, max_bytes // (8 * width))
        for start in range(0, self.steps, step):
            yield self.dense(start, start + step, width)

    def histogram(self, start: int, stop: int, least: int = 1) -> np.ndarray:
        """``Σ_{t = start+1}^{stop} C_{t,·}``, of length ``max(least, largest τ among them + 1)``."""
        rows = self._rows(start, stop)
        width = max(least, int(rows[:, 1].max()) + 1 if len(rows) else 0)
        return np.bincount(rows[:, 1], weights=rows[:, 2], minlength=width).astype(np.int64)

    def dense_fits(self) -> bool:
        """Whether the dense layout takes at most :data:`DENSE_LIMIT_BYTES` (the file keeps it)."""
        T, L = self.shape
        return T * L * 8 <= DENSE_LIMIT_BYTES

    def sparse_arrays(self) -> dict[str, np.ndarray]:
        """The sparse layout: ``by_staleness_entries`` (n × 3 int64 ``(t, τ, count)``, sorted) and
        ``by_staleness_shape`` (``[T, L]``, the dense array's shape)."""
        return {"by_staleness_entries": self.used_entries.copy(),
                "by_staleness_shape": np.array(self.shape, dtype=np.int64)}

    def problem(self) -> str | None:
        """What makes these counts inconsistent (None when nothing does): entries that are not
        ``(t, τ, count)`` integer rows with ``1 ≤ t ≤ T``, ``0 ≤ τ < L``, ``count ≥ 1``, strictly
        increasing in ``(t, τ)``; ``T < 0`` or ``L < 1``."""
        e = self.entries
        if self.steps < 0 or self.columns < 1:
            return f"shape ({self.steps}, {self.columns}): needs T ≥ 0 steps and L ≥ 1 staleness columns"
        if e.ndim != 2 or e.shape[1] != 3 or e.dtype != np.int64 or not 0 <= self.used <= len(e):
            return f"the entries must be rows (t, τ, count) of int64, not an array of shape {e.shape} and type {e.dtype}"
        t, tau, c = self.used_entries.T
        if len(t) and (t.min() < 1 or t.max() > self.steps):
            return f"an entry names step {int(t.min()) if t.min() < 1 else int(t.max())}, outside 1 … {self.steps}"
        if len(t) and (tau.min() < 0 or tau.max() >= self.columns):
            return f"an entry has staleness outside 0 … {self.columns - 1}"
        if len(t) and c.min() < 1:
            return "an entry counts fewer than one upload (only non-zero counts are stored)"
        if len(t) > 1 and not np.all((np.diff(t) > 0) | ((np.diff(t) == 0) & (np.diff(tau) > 0))):
            return "the entries are not sorted by (step, staleness) without repeats"
        return None
