"""Reading input files safely (docs/architecture.md §8): only regular files, and never more than a
bounded number of bytes.

Every file asyncfl reads on a user's word — a scenario, a study spec, a trace to replay, a
FedScale pickle, the files of a run directory given to ``resume``, ``bias`` or ``plot`` — goes
through :func:`read_limited` (whole files parsed in memory) or :func:`open_limited` (files
streamed row by row). Both open the file without blocking (a FIFO would otherwise wait for a
writer forever), refuse anything that is not a regular file (``/dev/zero``, a pipe, a directory:
reading them never ends or means nothing), and refuse a file larger than the caller's limit
*before* reading it; :func:`read_limited` also stops at the limit if the file grows meanwhile.

Errors are raised through the caller's ``fail(message)`` factory, so each kind of input keeps its
own error type (a scenario's :class:`~asyncfl.errors.ScenarioError`, a trace's
:class:`~asyncfl.errors.TraceError`, …). Messages say what is wrong with the file and never
quote its content. Torch-free.
"""

from __future__ import annotations

import io
import json
import os
import re
import reprlib
import stat
from pathlib import Path
from typing import Any, BinaryIO, Callable, TextIO

from asyncfl.errors import ScenarioError

#: the largest scenario file or study spec read (a scenario is a few kB)
MAX_SCENARIO_BYTES = 1 << 20
#: the largest ``summary.json`` read
MAX_JSON_BYTES = 16 << 20
#: the largest CSV table of a run, sweep or study directory read (``metrics.csv``, ``results.csv``)
MAX_TABLE_BYTES = 1 << 30

Fail = Callable[[str], Exception]


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def open_limited(path: str | Path, limit: int, fail: Fail) -> BinaryIO:
    """``path`` opened for reading in binary mode, after checking that it is a regular file of at
    most ``limit`` bytes. Raises ``fail(message)``, the message naming the path and the problem."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise fail(f"{path}: no such file") from None
    except OSError as exc:
        raise fail(f"{path}: cannot be opened ({exc.strerror or exc.__class__.__name__})") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise fail(f"{path}: is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise fail(f"{path}: not a regular file (a device, a pipe or a socket cannot be read as input)")
        if info.st_size > limit:
            raise fail(f"{path}: {_size(info.st_size)}, larger than the {_size(limit)} read at most for this file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_limited(path: str | Path, limit: int, fail: Fail) -> bytes:
    """The bytes of the regular file ``path`` (:func:`open_limited`), at most ``limit`` of them:
    a file that grows past the limit while it is read is refused too."""
    with open_limited(path, limit, fail) as fh:
        size = os.fstat(fh.fileno()).st_size
        parts, total = [fh.read(size)], size  # one read of the size stat reported, then what was appended
        while total <= limit:
            more = fh.read(min(1 << 20, limit + 1 - total))
            if not more:
                break
            parts.append(more)
            total += len(more)
    if total > limit:
        raise fail(f"{path}: larger than the {_size(limit)} read at most for this file")
    return parts[0] if len(parts) == 1 else b"".join(parts)


def read_text_limited(path: str | Path, limit: int, fail: Fail) -> str:
    """:func:`read_limited` decoded as UTF-8 (a file that is not UTF-8 text is refused)."""
    data = read_limited(path, limit, fail)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise fail(f"{path}: not UTF-8 text (save it as UTF-8)") from None


def open_text_limited(path: str | Path, limit: int, fail: Fail) -> TextIO:
    """:func:`open_limited` as UTF-8 text with newlines left as they are (what :mod:`csv`
    needs); a byte that is not UTF-8 raises ``UnicodeDecodeError`` while reading."""
    return io.TextIOWrapper(open_limited(path, limit, fail), encoding="utf-8", newline="")


def read_json_limited(path: str | Path, limit: int, fail: Fail) -> Any:
    """The JSON value of the regular file ``path`` (:func:`read_limited`); a file that is not
    UTF-8 JSON raises ``fail`` naming it (and the kind of error, never its content)."""
    data = read_limited(path, limit, fail)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise fail(f"{path}: not valid JSON ({exc.__class__.__name__})") from None


# -- files named in a scenario ------------------------------------------------------------------
_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 60
_SHORT.maxlevel = 3


def _fmt(value: Any) -> str:
    """``repr(value)`` for a message, at most 60 characters; long strings and deep or long
    containers are elided without being formatted whole."""
    text = _SHORT.repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


PACKAGE_PREFIX = "asyncfl:"


PACKAGE_DATA = Path(__file__).resolve().parents[1] / "data"
_PACKAGE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


def package_name_problem(text: str) -> str | None:
    """Why ``asyncfl:NAME`` does not name a file shipped in ``asyncfl/data/`` (None when it does,
    or when ``text`` is an ordinary path). NAME is one file name — letters, digits, ``.``, ``_``,
    ``-``, not starting with a dot — so it cannot leave the folder (``asyncfl:../x`` is refused)."""
    if not text.startswith(PACKAGE_PREFIX):
        return None
    name = text[len(PACKAGE_PREFIX):]
    if not _PACKAGE_NAME.fullmatch(name) or ".." in name:
        return (f"{PACKAGE_PREFIX}NAME must name a file shipped in asyncfl/data/ (one file name: letters, digits, '.', '_', '-'); "
                f"shipped: {', '.join(sorted(p.name for p in PACKAGE_DATA.iterdir() if p.is_file())) or 'none'}")
    return None


def resolve_path(text: str) -> Path:
    """A file named in a scenario: ``asyncfl:NAME`` is the package's ``asyncfl/data/NAME``
    (the shipped samples; a NAME that would leave that folder is a :class:`ScenarioError`);
    anything else is a path (relative paths: see :func:`load`)."""
    if text.startswith(PACKAGE_PREFIX):
        problem = package_name_problem(text)
        if problem:
            raise ScenarioError([f"{text!r}: {problem}"])
        return PACKAGE_DATA / text[len(PACKAGE_PREFIX):]
    return Path(text).expanduser()


def absolute_file(text: str, base: Path | None = None) -> str:
    """``text`` as it is saved in a resolved scenario: ``asyncfl:NAME`` as is, a path made
    absolute (relative to ``base``, default the working directory) and normalised, so the run
    directory's ``scenario.toml`` names the same file wherever it is read from."""
    if text.startswith(PACKAGE_PREFIX) or not text:
        return text
    path = Path(text).expanduser()
    return os.path.normpath(path if path.is_absolute() else (base or Path.cwd()).absolute() / path)
