"""Reading a data set's files: size limits, gzip, and errors that name the file (docs/tasks.md §13).

Every failure is a :class:`~asyncfl.errors.ScenarioError` whose message starts with the file's
path, so the CLI reports it as one line and exits 2. Torch-free.

Memory is bounded by what the user can see on disk. A plain file is read only if it is a regular
file of at most the caller's ``limit`` bytes (checked before reading). A gzipped file (it starts
with the magic ``1f 8b``) is inflated as a stream, a chunk at a time, and refused as soon as its
unzipped bytes pass its *budget*: the smaller of ``limit`` and :data:`MAX_GZIP_RATIO` times its
compressed size (at least :data:`MIN_GZIP_BUDGET`). Real data sets unzip to 4–30× their size
(MNIST's IDX files ≈ 5×, a FEMNIST JSON of mostly white pixels ≈ 27×); a file that would unzip
further — a "zip bomb" — is refused before it is inflated whole, naming the command that unzips it
by hand (after which its size is in plain view). Readers whose format declares its size (IDX's
header) read the header first and check the declared size against the budget before inflating
the body (:meth:`DataStream.read_exact`).
"""

from __future__ import annotations

import os
import zlib
from pathlib import Path
from types import TracebackType

from asyncfl.config.files import open_limited
from asyncfl.errors import ScenarioError

#: the largest single data file read (LEAF FEMNIST's JSON files are ~0.3 GB, EMNIST byclass's
#: training images 0.55 GB unzipped)
MAX_FILE_BYTES = 4 << 30
GZIP_MAGIC = b"\x1f\x8b"
#: a gzipped data file may unzip to at most this many times its compressed size
MAX_GZIP_RATIO = 100
#: … or to this many bytes, whichever is larger (tiny files)
MIN_GZIP_BUDGET = 1 << 20
_CHUNK = 1 << 16  # compressed bytes fed to the inflater at a time


def refuse(path: Path | str, problem: str) -> ScenarioError:
    """The error for a data file: ``<path>: <problem>``."""
    return ScenarioError([f"{path}: {problem}"])


def _fail(message: str) -> ScenarioError:
    return ScenarioError([message])


class DataStream:
    """The bytes of a data file, inflated while they are read when the file is gzipped; never
    more than :attr:`budget` bytes (module doc). Use as a context manager."""

    def __init__(self, path: Path, limit: int = MAX_FILE_BYTES) -> None:
        self.path, self.limit = path, limit
        self._fh = open_limited(path, limit, _fail)
        try:
            self.size = os.fstat(self._fh.fileno()).st_size
            self.gzipped = self._fh.read(2) == GZIP_MAGIC
            self._fh.seek(0)
        except BaseException:
            self._fh.close()
            raise
        #: the most bytes this stream yields (for a plain file: its size)
        self.budget = min(limit, max(MAX_GZIP_RATIO * self.size, MIN_GZIP_BUDGET)) if self.gzipped else self.size
        self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS) if self.gzipped else None
        self._pending = b""  # compressed input not yet inflated
        self._out = bytearray()  # inflated bytes not yet returned
        self.delivered = 0  # bytes returned so far
        self._done = False
        self._file_done = False  # the compressed file is read to its end

    def __enter__(self) -> "DataStream":
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._fh.close()

    def too_large(self) -> ScenarioError:
        """The refusal of a file that (unzipped) holds more than the budget."""
        if self.gzipped and self.budget < self.limit:
            return refuse(self.path, f"unzips to more than {self.budget} bytes, {MAX_GZIP_RATIO}× its compressed size "
                                     f"({self.size} bytes), the most asyncfl inflates from a gzipped file; if it is "
                                     f"genuine, unzip it by hand (gunzip -k '{self.path.name}') and read the plain file")
        return refuse(self.path, f"{'unzips to ' if self.gzipped else ''}more than the {self.limit} bytes read at most "
                                 "for this file")

    def _inflate_more(self, want: int) -> None:
        """Inflate until ``want`` bytes wait in the buffer or the stream ends (gzip only)."""
        assert self._inflater is not None
        while len(self._out) < want and not self._done:
            if self._inflater.eof:
                rest = self._inflater.unused_data
                if not rest and not self._file_done:
                    rest = self._fh.read(_CHUNK)
                    self._file_done = not rest
                if not rest:
                    self._done = True
                    break
                if rest[:2] != GZIP_MAGIC:
                    raise refuse(self.path, "not a valid gzip file (bytes follow the end of the compressed stream)")
                self._inflater = zlib.decompressobj(16 + zlib.MAX_WBITS)  # the next member of a multi-member file
                self._pending = rest
            if not self._pending and not self._file_done:
                self._pending = self._fh.read(_CHUNK)
                self._file_done = not self._pending
            room = self.budget + 1 - self.delivered - len(self._out)  # one byte past the budget shows an excess
            try:  # an empty input still flushes output zlib holds back
                chunk = self._inflater.decompress(self._pending, max(1, min(room, want - len(self._out))))
            except zlib.error as exc:
                raise refuse(self.path, f"not a valid gzip file ({exc})") from None
            self._pending = self._inflater.unconsumed_tail
            if not chunk and not self._pending and self._file_done and not self._inflater.eof:
                raise refuse(self.path, "truncated gzip file (the compressed stream ends early)")
            self._out += chunk
            if self.delivered + len(self._out) > self.budget:
                raise self.too_large()

    def read(self, n: int) -> bytes:
        """Up to ``n`` bytes (fewer only at the end of the data)."""
        if not self.gzipped:
            data = self._fh.read(n)
            self.delivered += len(data)
            if self.delivered > self.budget:  # the file grew while it was read
                raise self.too_large()
            return data
        self._inflate_more(n)
        data = bytes(self._out[:n])
        del self._out[:n]
        self.delivered += len(data)
        return data

    def read_exact(self, n: int, what: str) -> bytes:
        """Exactly ``n`` bytes of ``what``; a stream whose budget cannot hold them is refused
        before anything is inflated, and one that ends early is refused naming both sizes."""
        if self.delivered + n > self.budget:
            raise refuse(self.path, f"{what} needs {n} bytes but the file {'unzips to' if self.gzipped else 'holds'} at "
                                    f"most {self.budget - self.delivered} more"
                                    + (f" (the most asyncfl inflates: {MAX_GZIP_RATIO}× the compressed size)"
                                       if self.gzipped and self.budget < self.limit else ""))
        parts, got = [], 0
        while got < n:
            data = self.read(min(n - got, 1 << 24))
            if not data:
                raise refuse(self.path, f"{what} needs {n} bytes but the {'unzipped ' if self.gzipped else ''}file "
                                        f"holds only {got}")
            parts.append(data)
            got += len(data)
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def at_end(self) -> bool:
        """Whether no byte is left (reads at most one more)."""
        if not self.gzipped:
            return self._fh.read(1) == b""
        self._inflate_more(1)
        return not self._out

    def read_all(self) -> bytes:
        """Every remaining byte (at most the budget; more is refused)."""
        parts = []
        while True:
            data = self.read(min(1 << 20, max(self.budget - self.delivered, 0) + 1))  # no larger buffer than needed
            if not data:
                break
            parts.append(data)
        return b"".join(parts)


def read_file(path: Path, limit: int = MAX_FILE_BYTES) -> bytes:
    """The bytes of ``path`` (a regular file of at most ``limit`` bytes), gunzipped when they
    start with the gzip magic ``1f 8b``, within the budget of :class:`DataStream`."""
    with DataStream(path, limit) as stream:
        return stream.read_all()
