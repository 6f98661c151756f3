"""Reading a data set's files: size limits, gzip, and errors that name the file (docs/tasks.md §13).

Every failure is a :class:`~asyncfl.errors.ScenarioError` whose message starts with the file's
path, so the CLI reports it as one line and exits 2. Torch-free.
"""

from __future__ import annotations

import zlib
from pathlib import Path

from asyncfl.config.files import read_limited
from asyncfl.errors import ScenarioError

#: the largest single data file read (LEAF FEMNIST's JSON files are ~0.3 GB, EMNIST byclass's
#: training images 0.55 GB unzipped)
MAX_FILE_BYTES = 4 << 30
GZIP_MAGIC = b"\x1f\x8b"


def refuse(path: Path | str, problem: str) -> ScenarioError:
    """The error for a data file: ``<path>: <problem>``."""
    return ScenarioError([f"{path}: {problem}"])


def read_file(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``path`` (a regular file of at most ``limit`` bytes), gunzipped when they
    start with the gzip magic ``1f 8b``; the unzipped size is bounded by ``limit`` too."""
    raw = read_limited(path, limit, lambda message: ScenarioError([message]))
    if raw[:2] != GZIP_MAGIC:
        return raw
    inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # the gzip container
    try:
        data = inflater.decompress(raw, limit + 1)
    except zlib.error as exc:
        raise refuse(path, f"not a valid gzip file ({exc})") from None
    if len(data) > limit:
        raise refuse(path, f"unzips to more than {limit} bytes")
    if not inflater.eof:
        raise refuse(path, "truncated gzip file (the compressed stream ends early)")
    return data
