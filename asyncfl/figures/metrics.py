"""Learning curves of one or more run directories: ``metrics.png`` (docs/run-directory.md).

Each run's ``metrics.csv`` is drawn against server steps and against virtual time (the axis on
which sync and asynchronous runs are comparable): test loss, and test accuracy when the task is
a classification. ``asyncfl run`` draws it for every run it drives; ``asyncfl plot``
(:mod:`asyncfl.cli.plot`) overlays several runs.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Sequence

from asyncfl.errors import RunDirError
from asyncfl.run.rundir import read_csv


def _series(run_dir: Path) -> dict[str, list[float]]:
    path = run_dir / "metrics.csv"
    if not path.is_file():
        raise RunDirError(f"{run_dir}: no metrics.csv (not a run directory?)")
    rows = read_csv(path)
    out: dict[str, list[float]] = {}
    for key in ("step", "time", "loss", "accuracy"):
        out[key] = [float(r[key]) if r.get(key) not in (None, "") else math.nan for r in rows]
    return out


def plot_metrics(run_dirs: Sequence[str | Path], path: str | Path, labels: Sequence[str] | None = None) -> Path:
    """Loss (and accuracy) against steps and virtual time for every run, one line per run."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    runs = [Path(r) for r in run_dirs]
    data = [_series(r) for r in runs]
    labels = list(labels) if labels else [r.name for r in runs]
    has_accuracy = any(not all(math.isnan(v) for v in d["accuracy"]) for d in data)
    rows = 2 if has_accuracy else 1
    fig = Figure(figsize=(11, 3.6 * rows))
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 2, squeeze=False)
    for d, label in zip(data, labels):
        for col, x in enumerate(("step", "time")):
            axes[0][col].plot(d[x], d["loss"], label=label)
            if has_accuracy:
                axes[1][col].plot(d[x], d["accuracy"], label=label)
    for col, xlabel in enumerate(("server step", "virtual time")):
        axes[0][col].set_ylabel("test loss")
        axes[0][col].set_yscale("log")
        axes[-1][col].set_xlabel(xlabel)
        if has_accuracy:
            axes[1][col].set_ylabel("test accuracy")
        for row in range(rows):
            axes[row][col].grid(alpha=0.3)
    axes[0][0].legend(fontsize="small")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    return path

