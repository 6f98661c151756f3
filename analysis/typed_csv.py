"""Reading a study's CSV table back, typed (docs/ma-review.md, the commands; docs/privacy.md, the ξ study).

A report is regenerated from the tables a study wrote (``results.csv``, ``tuning.csv``, …), which
travel between people and get edited by hand. :func:`read_typed` reads one as data: a regular
file within :data:`~asyncfl.config.files.MAX_TABLE_BYTES` (a pipe or a device is refused before
it is read, :func:`asyncfl.config.files.open_limited`), UTF-8, every row as long as the header,
each cell converted by the table's own ``value(column, text)``. Every problem is one
:class:`~asyncfl.errors.UsageError` (exit 2) naming the file, the line, the column and what the
column holds — never a traceback, never the cell's text beyond a short quote.
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any, Callable, Iterable

from asyncfl.config.files import MAX_TABLE_BYTES, _fmt, open_text_limited
from asyncfl.errors import UsageError

__all__ = ["read_typed"]


def read_typed(path: str | Path, value: Callable[[str, str], Any], required: Iterable[str] = (),
               kinds: Callable[[str], str] = lambda column: "a number") -> list[dict[str, Any]]:
    """The rows of the CSV table ``path`` as dicts, each cell ``value(column, text)``.

    ``required`` columns must be in the header; ``kinds(column)`` says what a column holds (for
    the message when ``value`` raises ``ValueError`` or ``TypeError`` on a cell)."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise UsageError(f"{path}: missing; the report is made from this table")
    rows: list[dict[str, Any]] = []
    line = 1
    try:
        with open_text_limited(path, MAX_TABLE_BYTES, UsageError) as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in required if c not in header]
            if missing:
                raise UsageError(f"{path}: no column {', '.join(missing)} in its header; not a table this study writes")
            for row in reader:
                line = reader.line_num
                if None in row:
                    raise UsageError(f"{path}, line {line}: more cells than the header's {len(header)} columns")
                typed = {}
                for column, text in row.items():
                    if text is None:
                        raise UsageError(f"{path}, line {line}: column {column} is missing (the row is short)")
                    try:
                        typed[column] = value(column, text)
                    except (ValueError, TypeError, OverflowError):
                        raise UsageError(f"{path}, line {line}: column {column} is {_fmt(text)}, not {kinds(column)}") from None
                rows.append(typed)
    except UnicodeDecodeError as exc:
        raise UsageError(f"{path}: not UTF-8 text (byte {exc.start} after line {line}); the study writes UTF-8: "
                         "save it as UTF-8") from None
    except csv.Error as exc:
        raise UsageError(f"{path}, line {line}: not a CSV table ({exc})") from None
    return rows
