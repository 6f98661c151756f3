"""One look for every figure asyncfl draws (docs/run-directory.md §11): a title from the
scenario's name, labelled axes with units, integer ticks where the values are integers, labelled
colour bars, a constrained layout, and PNG (at :data:`DPI`), PDF or SVG.

Every figure module builds its figure with :func:`figure` and writes it with :func:`save`;
matplotlib is imported here on first use (the Agg canvas, no pyplot state, no display), never
when a figure module is imported.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from asyncfl.errors import AsyncFLError

#: the formats ``--format`` accepts
FORMATS = ("png", "pdf", "svg")
#: raster resolution of PNG figures (dots per inch)
DPI = 200
#: axis labels shared by the figures (units in brackets)
STEP_LABEL = "server step t"
TIME_LABEL = "virtual time [latency units]"
METRIC_LABELS = {
    "loss": "test loss", "accuracy": "test accuracy", "train_loss": "training objective",
    "gap": "optimality gap F − F*", "staleness_mean": "mean staleness [steps]", "staleness_max": "largest staleness [steps]",
}
#: metrics drawn on a log scale (positive, spanning decades)
LOG_METRICS = ("loss", "train_loss", "gap")

RC = {
    "font.size": 10, "axes.titlesize": 10.5, "axes.labelsize": 10, "legend.fontsize": 8.5,
    "xtick.labelsize": 9, "ytick.labelsize": 9, "figure.titlesize": 12, "axes.grid": True,
    "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False, "legend.frameon": False,
    "svg.fonttype": "none", "pdf.fonttype": 42,
}


def check_format(fmt: str) -> str:
    """``fmt`` if it is one of :data:`FORMATS`, else the one-line error ``--format`` gives."""
    if fmt not in FORMATS:
        raise AsyncFLError(f"--format {fmt!r}: must be one of {', '.join(FORMATS)}")
    return fmt


def with_format(path: str | Path, fmt: str | None) -> Path:
    """``path`` with the suffix of ``fmt`` (``fmt=None``: the path's own suffix, which must be a
    known format)."""
    path = Path(path)
    if fmt is None:
        return path if path.suffix.lstrip(".") in FORMATS else path.with_name(path.name + ".png")
    return path.with_suffix("." + check_format(fmt))


def figure(width: float, height: float, **kwargs: Any) -> Any:
    """A matplotlib ``Figure`` on the Agg canvas with the shared style and a constrained layout."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context(RC):
        fig = Figure(figsize=(width, height), layout="constrained", **kwargs)
    FigureCanvasAgg(fig)
    return fig


def styled(fn: Any) -> Any:
    """Decorator: run a drawing function under the shared rc parameters (matplotlib reads them
    when each artist is created)."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import matplotlib

        with matplotlib.rc_context(RC):
            return fn(*args, **kwargs)

    return wrapper


def integer_ticks(axis: Any) -> None:
    """Ticks only at integers (steps, staleness, counts)."""
    from matplotlib.ticker import MaxNLocator

    axis.set_major_locator(MaxNLocator(integer=True))


def colorbar(fig: Any, mappable: Any, ax: Any, label: str, **kwargs: Any) -> Any:
    """A colour bar with its label (what the colour means, with units)."""
    bar = fig.colorbar(mappable, ax=ax, **kwargs)
    bar.set_label(label)
    return bar


def title(fig: Any, name: str, what: str) -> None:
    """The figure title: the scenario's (or study's) name, then what the figure shows."""
    fig.suptitle(f"{name} — {what}" if name else what)


def save(fig: Any, path: str | Path, fmt: str | None = None) -> Path:
    """Write ``fig`` as ``fmt`` (default: from the suffix; see :func:`with_format`); returns the path."""
    out = with_format(path, fmt)
    import matplotlib

    with matplotlib.rc_context(RC):
        fig.savefig(out, dpi=DPI, format=out.suffix.lstrip("."))
    return out
