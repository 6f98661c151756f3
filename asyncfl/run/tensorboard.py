"""Optional TensorBoard logging of a run (``run.tensorboard = true``; docs/run-directory.md §1, §3).

A run with it on writes TensorBoard event files into ``RUN_DIR/tensorboard/`` as it goes, so it
can be watched live (``tensorboard --logdir runs/``), with the step as TensorBoard's step:

* at every evaluation, the metrics row's scalars ``eval/loss``, ``eval/accuracy``,
  ``eval/train_loss``, ``eval/gap`` (those that are not NaN), ``staleness/mean`` and
  ``staleness/max``, the virtual time ``time/virtual``, the cumulative counters
  ``updates/accepted``, ``updates/dropped`` and ``updates/rejected``, and the histogram
  ``staleness/accepted`` of the staleness of the updates accepted since the previous evaluation
  (from the per-step counts).

The writer is machinery, not state: a checkpoint holds nothing of it. A resumed run first
rewrites the event files the interrupted process left, keeping only the events of steps up to
the checkpoint's (:func:`drop_after`), then opens a new event file: every evaluation appears
once, whatever reads the files (TensorBoard's ``purge_step`` alone hides the doubled events
from TensorBoard's own loader only, not from other readers of the files). The run itself stays
bit for bit the same. The
optional package is ``tensorboard`` (``pip install 'asyncfl[tensorboard]'``); without it a run
with ``run.tensorboard = true`` is refused before anything is written.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from asyncfl.errors import ScenarioError
from asyncfl.run.atomic import atomic_write
from asyncfl.records import StepEvent
from asyncfl.run.tracker_base import Start, Tracker

DIRNAME = "tensorboard"
SCALARS = {"loss": "eval/loss", "accuracy": "eval/accuracy", "train_loss": "eval/train_loss", "gap": "eval/gap",
           "staleness_mean": "staleness/mean", "staleness_max": "staleness/max"}


def _writer_class() -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        raise ScenarioError(["run.tensorboard = true: needs the optional package tensorboard "
                             "(pip install 'asyncfl[tensorboard]'), which is not installed"]) from None
    return SummaryWriter


def check_available() -> None:
    """Raise the one-line :class:`ScenarioError` when the optional package is missing."""
    _writer_class()


class TensorBoardLog:
    """Writes a run's evaluations to ``run_dir/tensorboard`` (see the module docstring)."""

    def __init__(self, run_dir: Path, start_step: int = 0) -> None:
        cls = _writer_class()
        if start_step > 0:
            drop_after(Path(run_dir) / DIRNAME, start_step)
        self.writer = cls(log_dir=str(Path(run_dir) / DIRNAME), purge_step=start_step + 1 if start_step > 0 else None)
        self._since = start_step  # per-step counts already summarised

    def on_event(self, sim: Any, event: StepEvent) -> None:
        if event.metrics is None:
            return
        step, w = event.step, self.writer
        for key, tag in {**SCALARS, **{name: f"eval/{name}" for name in sim.task.metric_names}}.items():
            value = event.metrics.get(key, math.nan)
            if value is not None and math.isfinite(value):
                w.add_scalar(tag, float(value), step)
        w.add_scalar("time/virtual", float(event.time), step)
        w.add_scalar("updates/accepted", event.accepted, step)
        w.add_scalar("updates/dropped", event.dropped, step)
        w.add_scalar("updates/rejected", event.rejected, step)
        if step > self._since:
            counts = sim.records.by_staleness.histogram(self._since, step, sim.settings.staleness_columns or 1)
            width = len(counts)
            taus = np.repeat(np.arange(width), counts)
            if taus.size:
                w.add_histogram("staleness/accepted", taus, step, bins=np.arange(width + 1) - 0.5)
        self._since = step
        w.flush()

    def close(self) -> None:
        self.writer.close()


def drop_after(folder: Path, step: int) -> None:
    """Rewrite every event file in ``folder`` without the events of steps after ``step`` (those
    a killed run logged after its last checkpoint; a resume logs them again). An event file is a
    sequence of TFRecords (length, its CRC, the ``Event`` protobuf, its CRC); the records kept are
    copied byte for byte. A file that cannot be parsed is left as it is."""
    from tensorboard.compat.proto import event_pb2

    if not folder.is_dir():
        return
    for path in sorted(folder.glob("events.out.tfevents.*")):
        if not path.is_file() or path.is_symlink():
            continue
        data = path.read_bytes()
        kept, pos, changed = [], 0, False
        try:
            while pos < len(data):
                length = int.from_bytes(data[pos:pos + 8], "little")
                end = pos + 12 + length + 4
                if length < 0 or end > len(data):
                    raise ValueError("a truncated record")
                event = event_pb2.Event.FromString(data[pos + 12:pos + 12 + length])
                if event.step > step and (event.HasField("summary") or event.HasField("session_log")):
                    changed = True
                else:
                    kept.append(data[pos:end])
                pos = end
        except Exception:  # noqa: BLE001 - not ours to judge: a damaged file is left as it is
            continue
        if changed:
            atomic_write(path, lambda p, body=b"".join(kept): p.write_bytes(body))


class TensorBoardTracker(Tracker):
    """The tracker ``tensorboard`` (``run.trackers = ["tensorboard"]``, or ``run.tensorboard =
    true``): :class:`TensorBoardLog` as a tracker (asyncfl.run.tracking); it rewrites its own
    event files on resume (``TrackerTraits.rewrites_on_resume``)."""

    def __init__(self, cfg: Any = None, ctx: Any = None) -> None:
        super().__init__(cfg, ctx)
        check_available()
        self.board: TensorBoardLog | None = None

    def start(self, start: Start) -> None:
        self.board = TensorBoardLog(start.run_dir, start.start_step)

    def on_event(self, sim: Any, event: StepEvent) -> None:
        assert self.board is not None
        self.board.on_event(sim, event)

    def finish(self, status: str) -> None:
        if self.board is not None:
            self.board.close()

