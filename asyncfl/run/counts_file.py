"""``counts.npz``: the per-step arrays of a run, written and read back at any size a run can
write (docs/run-directory.md §5).

The file is a deflated zip of one ``NAME.npy`` per array, as ``numpy.savez_compressed`` writes it.
:func:`write_npz` writes the same npy bytes but streams each :class:`RowStream` a block of rows at
a time, so neither the dense staleness counts nor the stacked per-step rows (privacy's noisy
counts, MA-full's ``a_t``) are ever held whole. :func:`counts_members` chooses the staleness
counts' layout: dense ``by_staleness`` up to :data:`~asyncfl.staleness_counts.DENSE_LIMIT_BYTES`,
sparse entries above. :func:`read_counts` takes both layouts, a dense one read into its
non-zero entries a block at a time, and bounds what it reads by what the file says it holds
relative to its own size (deflate's largest expansion, the npy headers against their members).
"""

from __future__ import annotations

import math
import os
import zipfile
from pathlib import Path
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np

from asyncfl.config.files import open_limited
from asyncfl.config.memory import machine_memory
from asyncfl.errors import RunDirError
from asyncfl.staleness_counts import SPARSE_KEYS, StalenessCounts


class RowStream(NamedTuple):
    """A 2-d array of ``counts.npz`` written a block of whole rows at a time (never held whole):
    its ``shape`` and ``dtype``, and ``blocks()``, the consecutive row blocks."""

    shape: tuple[int, int]
    dtype: Any
    blocks: Callable[[], Iterator[np.ndarray]]


def counts_members(counts: StalenessCounts) -> dict[str, "np.ndarray | RowStream"]:
    """The staleness counts as ``counts.npz`` holds them (docs/run-directory.md §5): the dense
    ``by_staleness`` (``T × L`` int64, streamed) when it takes at most
    :data:`~asyncfl.staleness_counts.DENSE_LIMIT_BYTES`, else the sparse
    ``by_staleness_entries`` and ``by_staleness_shape``."""
    if counts.dense_fits():
        return {"by_staleness": RowStream(counts.shape, np.int64, counts.blocks)}
    return dict(counts.sparse_arrays())


def padded_rows(rows: list[np.ndarray], dtype: Any, max_bytes: int = 4 << 20) -> RowStream:
    """Per-step rows of unequal length (MA-full's ``a_t`` has ``t`` entries) as a zero-padded
    ``len(rows) × longest`` array (``0 × 1`` without rows), streamed ``max_bytes`` at a time."""
    width = max((len(r) for r in rows), default=1)
    per_block = max(1, max_bytes // (np.dtype(dtype).itemsize * width))

    def blocks() -> Iterator[np.ndarray]:
        for start in range(0, len(rows), per_block):
            part = rows[start: start + per_block]
            out = np.zeros((len(part), width), dtype=dtype)
            for i, r in enumerate(part):
                out[i, : len(r)] = r
            yield out

    return RowStream((len(rows), width), dtype, blocks)


def write_npz(path: Path, arrays: dict[str, "np.ndarray | RowStream"]) -> None:
    """What ``np.savez_compressed(path, **arrays)`` writes — a deflated zip of one ``NAME.npy``
    per array, the same member bytes — with each :class:`RowStream` written block by block."""
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
        for name, value in arrays.items():
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                if not isinstance(value, RowStream):
                    np.lib.format.write_array(member, np.asanyarray(value), allow_pickle=False)
                    continue
                dtype = np.dtype(value.dtype)
                header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False,
                          "shape": tuple(int(n) for n in value.shape)}
                np.lib.format.write_array_header_1_0(member, header)
                for block in value.blocks():
                    member.write(memoryview(np.ascontiguousarray(block, dtype=dtype)).cast("B"))  # no copy


#: the most a deflated member can expand (deflate codes a 258-byte match in at least 2 bits:
#: 1032 : 1); a member claiming more is damaged or hostile (a zip bomb's shape)
MAX_DEFLATE_RATIO = 1032
#: what a member of a few bytes may claim beyond that ratio (the npy header, deflate's framing)
MEMBER_SLACK_BYTES = 1 << 10
#: the dense staleness counts are read this many bytes at a time
READ_BLOCK_BYTES = 4 << 20


def read_counts(path: Path) -> tuple[StalenessCounts, dict[str, np.ndarray]]:
    """A ``counts.npz``: its staleness counts (either layout, docs/run-directory.md §5) and every
    other array by name. Every problem is a RunDirError naming the file.

    The bound read follows what the file claims relative to its own size: no member may claim
    more bytes uncompressed than deflate can expand its compressed bytes to
    (:data:`MAX_DEFLATE_RATIO`), checked from the archive's directory before anything is
    decompressed, and each array must be exactly as large as its npy header says. A dense
    ``by_staleness`` is then read a few megabytes at a time into its non-zero entries (its size
    in memory follows the uploads, whatever its shape); the other arrays, held whole, must fit
    in the machine's memory."""
    with open_limited(path, 1 << 62, RunDirError) as fh:  # bounded below by the members' claims
        size = os.fstat(fh.fileno()).st_size
        try:
            with zipfile.ZipFile(fh) as archive:
                infos = archive.infolist()
                _check_claims(path, size, infos)
                names = {info.filename.removesuffix(".npy"): info for info in infos}
                arrays: dict[str, np.ndarray] = {}
                dense = names.pop("by_staleness", None)
                for name, info in names.items():
                    with archive.open(info) as member:
                        arrays[name] = _read_member(path, name, member, info)
                if dense is not None:
                    with archive.open(dense) as member:
                        counts = _read_dense_counts(path, member, dense)
                else:
                    counts = _sparse_counts(path, arrays)
                for key in SPARSE_KEYS:
                    arrays.pop(key, None)
                return counts, arrays
        except (OSError, EOFError, KeyError, zipfile.BadZipFile, zipfile.LargeZipFile) as exc:
            raise RunDirError(f"{path}: cannot be read as a numpy archive ({exc.__class__.__name__})") from None


def _check_claims(path: Path, size: int, infos: list[zipfile.ZipInfo]) -> None:
    """The archive's directory against the file's own size and the machine's memory."""
    compressed = sum(info.compress_size for info in infos)
    expanded = sum(info.file_size for info in infos)
    if compressed > size:
        raise RunDirError(f"{path}: its directory claims {compressed} compressed bytes in a file of {size}; the file is damaged")
    for info in infos:
        most = info.compress_size if info.compress_type == zipfile.ZIP_STORED else MAX_DEFLATE_RATIO * info.compress_size + MEMBER_SLACK_BYTES
        if info.file_size > most:
            raise RunDirError(
                f"{path}: its arrays claim {expanded} bytes uncompressed from {compressed} compressed, more than "
                f"deflate expands to ({MAX_DEFLATE_RATIO}:1); the file is damaged")
    held = sum(info.file_size for info in infos if info.filename != "by_staleness.npy")
    memory = machine_memory()
    if memory is not None and held > memory:
        raise RunDirError(f"{path}: its arrays take {held} bytes uncompressed, more than this machine's memory ({memory})")


def _npy_header(path: Path, name: str, member: Any, info: zipfile.ZipInfo) -> tuple[tuple[int, ...], np.dtype]:
    """The shape and dtype of one npy member, checked against the member's size (a header
    claiming more or less than the member holds is refused before anything is allocated)."""
    try:
        version = np.lib.format.read_magic(member)
        read_header = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}.get(version)
        if read_header is None:
            raise ValueError(f"npy version {version}")
        shape, fortran, dtype = read_header(member)
    except ValueError as exc:
        raise RunDirError(f"{path}: {name} is not a numpy array ({exc})") from None
    if any(not isinstance(n, int) or n < 0 for n in shape):
        raise RunDirError(f"{path}: {name}'s header says shape {shape}; an array's dimensions are non-negative integers")
    if dtype.hasobject or dtype.itemsize == 0:
        raise RunDirError(f"{path}: {name} holds {dtype}, not numbers")
    if fortran and sum(n > 1 for n in shape) > 1:
        raise RunDirError(f"{path}: {name} is stored in Fortran order, which asyncfl never writes")
    if member.tell() + math.prod(shape) * dtype.itemsize != info.file_size:
        raise RunDirError(f"{path}: {name}'s header says shape {shape} of {dtype}, which is not what the file holds")
    return tuple(shape), dtype


def _read_member(path: Path, name: str, member: Any, info: zipfile.ZipInfo) -> np.ndarray:
    shape, dtype = _npy_header(path, name, member, info)
    data = member.read(math.prod(shape) * dtype.itemsize)
    return np.frombuffer(data, dtype=dtype).reshape(shape).copy()


def _read_dense_counts(path: Path, member: Any, info: zipfile.ZipInfo) -> StalenessCounts:
    """A dense ``by_staleness`` read :data:`READ_BLOCK_BYTES` at a time into its entries."""
    shape, dtype = _npy_header(path, "by_staleness", member, info)
    if len(shape) != 2 or dtype.kind not in "iu":
        raise RunDirError(f"{path}: by_staleness must be a 2-d array of non-negative integers (steps × staleness)")
    T, L = shape
    per_block = max(1, READ_BLOCK_BYTES // max(1, L * dtype.itemsize))

    def blocks() -> Iterator[np.ndarray]:
        for start in range(0, T, per_block):
            rows = min(per_block, T - start)
            yield np.frombuffer(member.read(rows * L * dtype.itemsize), dtype=dtype).reshape(rows, L)

    try:
        return StalenessCounts.from_blocks((T, L), blocks())
    except ValueError as exc:
        raise RunDirError(f"{path}: {exc}") from None


def _sparse_counts(path: Path, arrays: dict[str, np.ndarray]) -> StalenessCounts:
    """The sparse layout's ``by_staleness_entries`` and ``by_staleness_shape``, checked."""
    entries, shape = (arrays.get(key) for key in SPARSE_KEYS)
    if entries is None or shape is None:
        raise RunDirError(f"{path}: has no by_staleness array (dense, or sparse as {' and '.join(SPARSE_KEYS)})")
    if shape.shape != (2,) or shape.dtype.kind not in "iu" or entries.ndim != 2 or entries.shape[1:] != (3,) or entries.dtype.kind not in "iu":
        raise RunDirError(f"{path}: by_staleness_entries must be n × 3 integers (step, staleness, count) and by_staleness_shape two integers")
    try:
        return StalenessCounts.from_entries(entries.astype(np.int64), (int(shape[0]), int(shape[1])))
    except ValueError as exc:
        raise RunDirError(f"{path}: by_staleness_entries: {exc}") from None
