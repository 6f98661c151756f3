"""What a tracker is (docs/run-directory.md §15): a base class implementing the tracker
contract (:class:`asyncfl.components.contracts.Tracker`) with no-ops, and what a tracker is told
when a run starts. A tracker is a component of kind ``tracker`` (docs/extending.md §2); the ones
that ship are :mod:`asyncfl.run.tensorboard` and :mod:`asyncfl.run.external_trackers`, and
:mod:`asyncfl.run.tracking` drives them. Torch-free."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from asyncfl.records import StepEvent


@dataclass
class Start:
    """What a tracker is told when a run starts: its directory and name, the scenario as flat
    parameters and as a table, the run id to continue (a resume) and the sweep's parent."""

    run_dir: Path
    name: str
    params: dict[str, Any]
    scenario: dict[str, Any]
    resume_id: str | None = None
    parent: dict[str, Any] | None = None
    start_step: int = 0


class Tracker:
    """A tracker that logs nothing: subclass it and override what yours logs. The class is its
    component's builder, ``Tracker(cfg, ctx)``: ``cfg`` is the tracker's own keys (an instance of
    its component's config class, from ``run.tracker.NAME``; None without keys), kept as
    ``self.keys``; ``ctx`` the :class:`~asyncfl.components.contracts.BuildContext` (docs/extending.md §9)."""

    def __init__(self, cfg: Any = None, ctx: Any = None) -> None:
        self.keys = cfg

    def start(self, start: Start) -> str | None:
        """Open (or, with ``start.resume_id``, reopen) the tracker's run; return its id."""
        return None

    def log(self, step: int, values: dict[str, float]) -> None:
        """Log ``values`` at server step ``step``."""

    def on_event(self, sim: Any, event: StepEvent) -> None:
        """Every evaluation event, for trackers that log more than ``values`` (TensorBoard's histograms)."""

    def last_step(self) -> int | None:
        """The last step the store holds for this run (None: unknown)."""
        return None

    def artefact(self, path: Path) -> None:
        """Attach the file ``path`` to the run."""

    def finish(self, status: str) -> None:
        """Close the run; ``status`` is the run's (``completed``, ``stopped``, ``diverged``, …)."""

    # a sweep's parent run (trackers without nesting ignore it)
    def open_parent(self, name: str, params: dict[str, Any]) -> dict[str, Any] | None:
        return None

    def close_parent(self, parent: dict[str, Any]) -> None:
        pass
