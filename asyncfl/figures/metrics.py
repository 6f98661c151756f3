"""Learning curves of one or more run directories: ``metrics.png`` (docs/run-directory.md §11).

Each run's ``metrics.csv`` is drawn against server steps and against virtual time (the axis on
which synchronous and asynchronous runs are comparable), one row of panels per metric: test
loss, test accuracy when the task is a classification, the optimality gap ``F − F*`` when it is
known (quadratic tasks). ``asyncfl run`` draws it for every run it drives; ``asyncfl plot`` and
``asyncfl compare`` (:mod:`asyncfl.cli.plot`, :mod:`asyncfl.cli.compare`) overlay several runs,
``compare`` one chosen metric.
"""

from __future__ import annotations

import csv
import io
import math
import tomllib
from pathlib import Path
from typing import Sequence

from asyncfl.config.files import MAX_SCENARIO_BYTES, open_limited, read_text_limited
from asyncfl.errors import RunDirError
from asyncfl.records import task_metrics
from asyncfl.figures.style import LOG_METRICS, METRIC_LABELS, STEP_LABEL, TIME_LABEL, figure, integer_ticks, save, styled, title

#: the metrics a figure may draw (columns of metrics.csv)
PLOTTABLE = ("loss", "accuracy", "gap", "train_loss", "staleness_mean", "staleness_max")
REQUIRED = ("step", "time", "loss", "accuracy")  # every asyncfl metrics.csv has these
MAX_METRICS_BYTES = 256 << 20  # about 2·10⁶ evaluations


def series(run_dir: Path) -> dict[str, list[float]]:
    """The columns of ``run_dir/metrics.csv`` as floats: an empty field, or a column the file
    does not have (``gap`` of a non-quadratic run, an older file), is NaN. A value that is not a
    number, a short row, a file without the required columns, or one that is not UTF-8 CSV is a
    RunDirError naming the file, the row (the file's line number) and the column, never quoting
    the file (read within :data:`MAX_METRICS_BYTES`)."""
    path = run_dir / "metrics.csv"
    if not path.exists():  # anything else (a device, a pipe) is refused by open_limited
        raise RunDirError(f"{run_dir}: no metrics.csv (not a run directory?)")
    keys: tuple[str, ...] = ("step", "time", *PLOTTABLE)
    out: dict[str, list[float]] = {key: [] for key in keys}
    try:
        with io.TextIOWrapper(open_limited(path, MAX_METRICS_BYTES, RunDirError), encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [key for key in REQUIRED if key not in header]
            if missing:
                raise RunDirError(f"{path}: no column {', '.join(missing)} in its header (not an asyncfl metrics.csv)")
            own = task_metrics(k for k in header[:64] if isinstance(k, str) and k.isidentifier())
            keys = (*keys, *own)  # the task's own metrics (macro_f1, …)
            out.update({key: [] for key in own})
            present = [key for key in keys if key in header]
            for line, row in enumerate(reader, start=2):
                for key in keys:
                    if key not in present:
                        out[key].append(math.nan)
                        continue
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


def run_name(run_dir: Path) -> str:
    """The scenario's name (``scenario.toml``), else the folder's."""
    try:
        text = read_text_limited(run_dir / "scenario.toml", MAX_SCENARIO_BYTES, RunDirError)  # a regular file, bounded
        return str(tomllib.loads(text).get("name") or run_dir.name)
    except (RunDirError, tomllib.TOMLDecodeError, RecursionError):
        return run_dir.name


def _has(data: list[dict[str, list[float]]], key: str) -> bool:
    return any(not all(math.isnan(v) for v in d.get(key, [])) for d in data)


@styled
def plot_metrics(run_dirs: Sequence[str | Path], path: str | Path, labels: Sequence[str] | None = None,
                 metrics: Sequence[str] | None = None, fmt: str | None = None) -> Path:
    """``metrics`` (default: loss, and accuracy / gap where the runs have them) against steps and
    virtual time, one line per run; the title is the scenario's name (or the names compared).
    Returns the written path (its suffix set by ``fmt``, docs/run-directory.md §11)."""
    runs = [Path(r) for r in run_dirs]
    if labels and len(labels) != len(runs):
        raise RunDirError(f"--label given {len(labels)} time(s) for {len(runs)} run(s): give one label per run, in order")
    data = [series(r) for r in runs]
    names = [run_name(r) for r in runs]
    labels = list(labels) if labels else (names if len(set(names)) == len(names) else [r.name for r in runs])
    shown = [text.replace("$", r"\$") for text in labels]  # verbatim: a $ is not read as mathtext
    if metrics is None:  # and the task's own metrics, where the runs have them
        own = dict.fromkeys(m for d in data for m in d if m not in ("step", "time", *PLOTTABLE))
        metrics = ["loss"] + [m for m in ("accuracy", "gap", *own) if _has(data, m)]
    fig = figure(10, 3.3 * len(metrics) + 0.6)
    axes = fig.subplots(len(metrics), 2, squeeze=False, sharex="col")
    marker = "o" if max(len(d["step"]) for d in data) <= 25 else None  # sparse evaluations: show where they are
    handles: dict[int, object] = {}
    for k, (d, label) in enumerate(zip(data, shown)):
        for i, metric in enumerate(metrics):
            if all(math.isnan(v) for v in d.get(metric, [math.nan])):
                continue  # e.g. the accuracy of a regression run
            ys = plottable(d[metric])
            for j, x in enumerate(("step", "time")):
                (line,) = axes[i][j].plot(d[x], ys, label=label, lw=1.4, marker=marker, ms=3)
                handles.setdefault(k, line)
    for i, metric in enumerate(metrics):
        for j, xlabel in enumerate((STEP_LABEL, TIME_LABEL)):
            ax = axes[i][j]
            ax.set_ylabel(METRIC_LABELS.get(metric, metric))
            if metric in LOG_METRICS and _positive(data, metric):
                ax.set_yscale("log")
            if metric == "accuracy":
                ax.yaxis.set_major_formatter(_percent())
            if i == len(metrics) - 1:
                ax.set_xlabel(xlabel)
        integer_ticks(axes[i][0].xaxis)
    if len(runs) > 1 or labels != names:  # handles given explicitly: matplotlib drops a label starting with "_"
        axes[0][1].legend([handles[k] for k in sorted(handles)], [shown[k] for k in sorted(handles)], loc="best")
    what = "learning curves" if len(metrics) > 1 else METRIC_LABELS.get(metrics[0], metrics[0])
    unique = list(dict.fromkeys(names))
    joined = " vs ".join(unique)
    title(fig, unique[0] if len(unique) == 1 else joined if len(joined) <= 80 else f"{len(unique)} runs", what)
    return save(fig, path, fmt)


#: the largest magnitude a curve shows: a diverged run's loss (10²⁸⁸ has been seen) is left out of
#: the figure — its ticks would overflow a float — and stays in metrics.csv
PLOT_LIMIT = 1e100


def plottable(values: list[float]) -> list[float]:
    """``values`` with every non-finite one and every one beyond ±:data:`PLOT_LIMIT` as NaN (a gap)."""
    return [v if math.isfinite(v) and abs(v) <= PLOT_LIMIT else math.nan for v in values]


def _positive(data: list[dict[str, list[float]]], key: str) -> bool:
    """Worth a log scale: positive values spanning more than a factor 20 (a narrower span reads
    better on a linear axis than with a log axis's sparse 2×10⁰ labels)."""
    values = [v for d in data for v in plottable(d[key]) if math.isfinite(v)]
    return bool(values) and min(values) > 0 and max(values) / min(values) > 20


def _percent():
    from matplotlib.ticker import PercentFormatter

    return PercentFormatter(xmax=1.0, decimals=0)
