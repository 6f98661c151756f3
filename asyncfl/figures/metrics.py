"""Learning curves of one or more run directories: ``metrics.png`` (docs/run-directory.md).

Each run's ``metrics.csv`` is drawn against server steps and against virtual time (the axis on
which sync and asynchronous runs are comparable): test loss, and test accuracy when the task is
a classification. ``asyncfl run`` draws it for every run it drives; ``asyncfl plot``
(:mod:`asyncfl.cli.plot`) overlays several runs.
"""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Sequence

from asyncfl.config.files import open_limited
from asyncfl.errors import RunDirError


COLUMNS = ("step", "time", "loss", "accuracy")
MAX_METRICS_BYTES = 256 << 20  # about 2·10⁶ evaluations


def _series(run_dir: Path) -> dict[str, list[float]]:
    """The plotted columns of ``run_dir/metrics.csv`` as floats (an empty field is NaN). A value
    that is not a number, a missing column or a file that is not a metrics CSV is a RunDirError
    naming the file, the row (the file's line number) and the column, never quoting the file."""
    path = run_dir / "metrics.csv"
    if not path.exists():
        raise RunDirError(f"{run_dir}: no metrics.csv (not a run directory?)")
    out: dict[str, list[float]] = {key: [] for key in COLUMNS}
    try:
        with io.TextIOWrapper(open_limited(path, MAX_METRICS_BYTES, RunDirError), encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            missing = [key for key in COLUMNS if key not in (reader.fieldnames or [])]
            if missing:
                raise RunDirError(f"{path}: no column {', '.join(missing)} in its header (not an asyncfl metrics.csv)")
            for line, row in enumerate(reader, start=2):
                for key in COLUMNS:
                    text = row.get(key)
                    if text is None:
                        raise RunDirError(f"{path}, row {line}: column {key} is missing (the row is short)")
                    try:
                        out[key].append(float(text) if text.strip() else math.nan)
                    except ValueError:
                        raise RunDirError(f"{path}, row {line}: column {key} is not a number") from None
    except (UnicodeDecodeError, csv.Error) as exc:
        raise RunDirError(f"{path}: not a CSV file of UTF-8 text ({exc.__class__.__name__})") from None
    return out


def plot_metrics(run_dirs: Sequence[str | Path], path: str | Path, labels: Sequence[str] | None = None) -> Path:
    """Loss (and accuracy) against steps and virtual time for every run, one line per run,
    labelled by ``labels`` (one per run) or the run directories' names, verbatim (a ``$`` is not
    read as mathtext)."""
    runs = [Path(r) for r in run_dirs]
    if labels and len(labels) != len(runs):
        raise RunDirError(f"--label given {len(labels)} time(s) for {len(runs)} run(s): give one label per run, in order")
    data = [_series(r) for r in runs]
    labels = [text.replace("$", r"\$") for text in (list(labels) if labels else [r.name for r in runs])]

    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    has_accuracy = any(not all(math.isnan(v) for v in d["accuracy"]) for d in data)
    rows = 2 if has_accuracy else 1
    fig = Figure(figsize=(11, 3.6 * rows))
    FigureCanvasAgg(fig)
    axes = fig.subplots(rows, 2, squeeze=False)
    handles = []
    for d, label in zip(data, labels):
        for col, x in enumerate(("step", "time")):
            (line,) = axes[0][col].plot(d[x], d["loss"], label=label)
            if col == 0:
                handles.append(line)
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
    # handles and labels given explicitly: matplotlib would drop a label starting with "_"
    axes[0][0].legend(handles, labels, fontsize="small")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path, dpi=100)
    return path

