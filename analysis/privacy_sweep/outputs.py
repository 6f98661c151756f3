"""All of the sweep's files at once: ``sweep.csv``, ``sweep.md`` and ``sweep.png``
(docs/privacy.md, "What a run reports")."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from asyncfl.config import scenario as scenario_mod
from analysis.privacy_sweep.figures import plot
from analysis.privacy_sweep.spec import Budget, SweepRow
from analysis.privacy_sweep.tables import write_csv, write_markdown


def write_outputs(rows: Sequence[SweepRow], budget: Budget, out: str | Path, scenario: scenario_mod.Scenario | None = None,
                  fmt: str = "png") -> dict[str, Path]:
    """``sweep.csv``, ``sweep.md`` and the figure ``sweep.FORMAT`` in ``out``."""
    out = Path(out)
    return {
        "csv": write_csv(rows, out / "sweep.csv"),
        "md": write_markdown(rows, budget, out / "sweep.md", scenario),
        "png": plot(rows, budget, out / f"sweep.{fmt}", fmt=fmt, name=scenario.name if scenario is not None else ""),
    }
