"""asyncfl: a discrete-event simulator of asynchronous federated learning.

``import asyncfl`` is light (no torch, no pandas): the results readers below are imported on
first call, through :data:`API` (docs/run-directory.md §10).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from asyncfl.registry import Registry

__version__ = "0.1.0"
__all__ = ["__version__", "load_run", "load_sweep"]

#: the package's top-level functions, imported on first use (names → implementation)
API: Registry = Registry("function", "asyncfl", {
    "load_run": ("asyncfl.results:load_run", "a run directory as data (scenario, summary, metrics, updates, W, bias)"),
    "load_sweep": ("asyncfl.results:load_sweep", "a sweep, study or privacy-sweep directory as data (results table, runs)"),
})


def load_run(path: str | Path) -> Any:
    """The run directory ``path`` as a :class:`asyncfl.results.Run`: ``scenario``, ``summary``,
    ``metrics`` and ``updates`` (pandas), ``counts()``, ``W()``, ``bias``, ``privacy``
    (docs/run-directory.md §10)."""
    return API.load("load_run")(path)


def load_sweep(path: str | Path) -> Any:
    """The output directory of ``asyncfl sweep``, ``asyncfl study`` or ``asyncfl privacy`` as a
    :class:`asyncfl.results.Sweep`: ``results`` (pandas) and each run lazily
    (docs/run-directory.md §10)."""
    return API.load("load_sweep")(path)
