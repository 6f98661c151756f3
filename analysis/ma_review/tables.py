"""The review's three tables (docs/ma-review.md §4): their columns, and writing/reading them.

* ``results.csv`` — one row per evaluation run: the crossing interval of the target and its
  interpolated point (``reached = 0``: right-censored at ``horizon``), the same on the virtual
  time axis, final accuracy, the rule's bias and amplification, the noise reaching the iterate,
  and for private runs the mechanism's ε beside each client's (max, median); ``stopped_at_target
  = 1`` marks a run that stopped at its target before ``horizon`` (``evaluation.stop_at_target``,
  docs/studies.md §2.1): its crossings are measured, its whole-run columns (final and best
  accuracy, final loss, ``time_end``, bias, amplification, noise, ε) are blank — not measured;
* ``tuning.csv`` — one row per tuning run (held-out seeds): its learning rate, crossing, final
  accuracy, whether its rate was chosen, ``reference = 1`` on the reference's runs the target
  was fixed from (before any other cell was tuned), and ``stopped_at_target`` as above
  (``tuning.stop_at_target``);
* ``curves.csv`` — every evaluation of every evaluation run (the figures' data).

Every number of the report is computed from these files alone (:mod:`analysis.ma_review.report`).
"""

from __future__ import annotations

import csv
import math
from pathlib import Path
from typing import Any

from analysis.typed_csv import read_typed

__all__ = ["CURVE_FIELDS", "RESULT_FIELDS", "TUNING_FIELDS", "crossing_measured", "read_csv", "stopped_early", "write_csv"]

RESULT_FIELDS = (
    "task", "block", "method", "K", "seed", "privacy", "dp", "lr", "lr_from", "target_accuracy", "horizon",
    "reached", "cross_low", "cross_high", "cross_point", "time_low", "time_high", "time_point", "time_end",
    "final_accuracy", "best_accuracy", "final_loss", "bias", "amplification", "noise_gain", "iterate_noise",
    "epsilon", "epsilon_client_max", "epsilon_client_p50", "sigma", "xi", "counts", "noise", "sampling",
    "status", "run_dir", "message", "stopped_at_target",
)
TUNING_FIELDS = ("task", "privacy", "K", "method", "lr", "seed", "target_accuracy", "horizon", "cross_point", "reached",
                 "final_accuracy", "status", "chosen", "edge", "reference", "run_dir", "stopped_at_target")
CURVE_FIELDS = ("task", "privacy", "K", "method", "seed", "step", "time", "accuracy", "loss")

_INTS = {"K", "seed", "dp", "horizon", "reached", "chosen", "edge", "reference", "stopped_at_target"}
_STRS = {"task", "block", "method", "privacy", "lr_from", "counts", "noise", "sampling", "status", "run_dir", "message"}


def stopped_early(row: dict[str, Any]) -> bool:
    """Whether the row's run stopped at its target before its horizon (``stopped_at_target =
    1``; a table written before the column existed has none: no run of it was stopped)."""
    return row.get("stopped_at_target") == 1


def crossing_measured(row: dict[str, Any]) -> bool:
    """Whether the row's crossing is measured: its run completed, or stopped at its target
    (docs/studies.md §2.1); any other run counts as not reaching the target."""
    return row["status"] == "completed" or stopped_early(row)


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return "" if not math.isfinite(value) else f"{value:.6g}"
    return str(value)


def write_csv(path: Path, fields: tuple[str, ...], rows: list[dict[str, Any]]) -> None:
    """``rows`` as a table of ``fields`` (a missing key: a blank cell); floats to 6 significant
    digits, NaN and ±inf blank (read back as NaN by :func:`read_csv`)."""
    with open(path, "w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(fields)
        for row in rows:
            writer.writerow([_cell(row.get(f, "")) for f in fields])


def _value(key: str, text: str) -> Any:
    if key in _STRS:
        return text
    if text == "":
        return math.nan
    if key in _INTS:
        number = float(text)
        if not number.is_integer():
            raise ValueError(f"{key} must be an integer")
        return int(number)
    return float(text)


def _kind(key: str) -> str:
    return "an integer" if key in _INTS else "a number (or blank)"


def read_csv(path: Path) -> list[dict[str, Any]]:
    """A table written by :func:`write_csv`, typed back (blank cells: NaN); a cell that is not of
    its column's kind, or a file that is not a UTF-8 table, is a UsageError naming it
    (:func:`analysis.typed_csv.read_typed`)."""
    return read_typed(path, _value, ("task",), _kind)
