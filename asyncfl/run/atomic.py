"""Writing a file atomically (docs/run-directory.md §1): through a temporary file in the same
directory, fsync, then a rename over the target, so a reader sees the old file or the new one,
never half of one. Below :mod:`asyncfl.run.rundir` (which re-exports it) so that the trackers, which
components name, write their files without importing the run directory's machinery."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Callable

from asyncfl.errors import RunDirError


class WriteError(RunDirError):
    """A file of the run directory could not be written (a full disk, a quota, permissions)."""


def write_error(path: Path, exc: OSError) -> WriteError:
    """A failed write as one message with the system's reason (``No space left on device``)."""
    return WriteError(f"cannot write {path}: {exc.strerror or exc.__class__.__name__}")


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Write through a temporary file in the same directory, fsync, then rename over ``path``.
    A failure (a full disk, a quota) leaves ``path`` as it was and raises :func:`write_error`'s
    RunDirError."""
    path = Path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    except OSError as exc:
        raise write_error(path, exc) from None
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
    except OSError as exc:
        raise write_error(path, exc) from None
    finally:
        if tmp_path.exists():
            tmp_path.unlink()
