"""What a run records, row by row: the schemas of ``updates.csv`` and ``metrics.csv`` and the
events the simulator emits (docs/run-directory.md §2–3).

These are the contract between the simulator (which produces rows), the run directory (which
writes them), trace replay (which reads ``updates.csv`` back) and the analyses; they depend on
nothing else in the package.
"""

from __future__ import annotations

from typing import Iterable, NamedTuple, Protocol

UPDATE_FIELDS = ("client", "version", "step", "dispatch_time", "arrival_time", "staleness", "accepted", "reason", "dispatch")
METRIC_FIELDS = ("step", "time", "wall_time", "loss", "accuracy", "train_loss", "staleness_mean", "staleness_max", "gap")


def task_metrics(columns: "Iterable[str]") -> list[str]:
    """The task's own metrics among ``columns`` (of ``metrics.csv``, or ``summary.json``'s
    ``final``): every column that is not one of :data:`METRIC_FIELDS`, in order."""
    return [c for c in columns if c not in METRIC_FIELDS]

#: Why an upload was not used (``UpdateRow.reason``); ``""`` when it was accepted. A protocol may
#: declare more drop reasons (``ProtocolTraits.drops``, docs/protocol.md §8).
REASONS = ("stale", "late", "non-finite", "norm", "offline")


class UpdateRow(NamedTuple):
    """One row of ``updates.csv``: an upload that arrived (or a cancelled straggler, or the drop
    of a client that went offline while training)."""

    client: int
    version: int  # s: the model version the client trained on
    step: int  # t: the server step the upload belonged to
    dispatch_time: float
    arrival_time: float  # for "late" and "offline": when the cancellation / the drop happened
    staleness: int  # τ = t − s
    accepted: bool
    reason: str  # "" when accepted, else one of REASONS or a reason the protocol declares
    dispatch: int  # the dispatch's sequence number (1, 2, …): trace replay restores this order


class StepEvent(NamedTuple):
    """Emitted after every server step; ``metrics`` is set on evaluation steps."""

    step: int
    total_steps: int
    time: float
    wall_time: float
    accepted: int
    dropped: int
    rejected: int
    metrics: dict[str, float] | None = None


class Sink(Protocol):
    """Receives the run's rows as they are produced (:class:`MemorySink` keeps them;
    ``asyncfl.run.rundir.RunWriter`` writes the files)."""

    def on_update(self, row: UpdateRow) -> None: ...

    def on_metrics(self, row: dict[str, float]) -> None: ...


class MemorySink:
    """The default sink: keeps every row in memory."""

    def __init__(self) -> None:
        self.updates: list[UpdateRow] = []
        self.metrics: list[dict[str, float]] = []

    def on_update(self, row: UpdateRow) -> None:
        self.updates.append(row)

    def on_metrics(self, row: dict[str, float]) -> None:
        self.metrics.append(row)
