"""Replay a recorded run (issue 9 item 1; ``[latency] dist = "trace"``).

The trace is a run's ``updates.csv`` (or the run directory holding it). Each row is one
dispatch that finished: its ``dispatch`` number (the n-th client sent a model), ``client``,
``dispatch_time`` and ``arrival_time``. A replay hands the simulation, at its n-th dispatch,
the recorded n-th client with the recorded latency ``arrival_time − dispatch_time``, so the
staleness pattern — and, for the same protocol, ``K`` and ``C``, the matrix ``W`` — is the
recording's whatever the server rule. With the same rule too, the replay rewrites the same
``updates.csv`` row for row (job seeds are drawn in dispatch order, so the models match too).

Details, all documented behaviour:

* **When**: the n-th dispatch happens at ``max(now, recorded dispatch_time)``: a recording's
  waits for an online client are replayed; with matching protocol, K and C, ``now`` is always
  the recorded time. When it is exactly that time, the recorded ``arrival_time`` is used as is
  (no float round-off from ``dispatch + latency``).
* **Cancelled stragglers** (reason ``late``: ``arrival_time`` is the cancellation time, the true
  latency is unknown) are replayed as never arriving; the replayed round cancels them again.
* **Offline drops** (reason ``offline``) are replayed as a drop at the recorded time.
* **Unknown dispatches**: dispatches still in flight when the recorded run ended have no row.
  A replay dispatch with no row (a gap in the numbering, or past the last recorded dispatch)
  goes to an idle client (the lowest-numbered one not dispatched again later in the trace) and
  never arrives — exactly what the recording saw before its end.
* **Running out** is an error, never a silent fallback: a scenario needing more uploads than
  the trace holds (``run.steps × server.buffer`` for FedBuff, ``run.steps`` for sync) is
  refused when the fleet is built, and a
  replay that still stalls because every client in flight is an unknown dispatch stops with a
  :class:`~asyncfl.errors.TraceError` naming the file and the step reached.

Traces without a ``dispatch`` column (hand-made, or from another tool) are numbered by
``(dispatch_time, row order)``; they cannot mark the unknown dispatches, so they replay exactly
only when nothing was in flight at the recording's end.
"""

from __future__ import annotations

import csv
import io
import math
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import numpy as np

from asyncfl.components.contracts import BuildContext
from asyncfl.config.files import open_limited, resolve_path
from asyncfl.config.latency import TraceLatency
from asyncfl.errors import ParticipationCapReached, TraceError
from asyncfl.clients.fleet import Fleet

REQUIRED_COLUMNS = ("client", "version", "step", "dispatch_time", "arrival_time", "staleness", "accepted", "reason")
#: the largest trace read (about 10⁷ recorded dispatches)
MAX_TRACE_BYTES = 1 << 30


class ReplayState(NamedTuple):
    """A replayed trace's position (docs/architecture.md §5): the next recorded dispatch, the
    ones handed out but not yet scheduled (``-1``: an unknown dispatch), the clients of unknown
    dispatches in flight, and who is training."""

    busy: np.ndarray
    next_seq: int
    queued: tuple[int, ...]
    unknown_in_flight: int


@dataclass(frozen=True)
class Dispatch:
    """One recorded dispatch. ``kind``: ``arrive`` (an upload arrived, accepted or not),
    ``late`` (cancelled straggler: never arrives in the replay) or ``offline`` (dropped at
    ``arrival_time``)."""

    seq: int
    client: int
    version: int
    dispatch_time: float
    arrival_time: float
    kind: str


@dataclass(frozen=True)
class Trace:
    path: Path
    dispatches: dict[int, Dispatch]
    last_seq: int
    uploads: int  # rows of kind "arrive"
    recorded_steps: int  # the last server step with an accepted update
    max_client: int

    def later_clients(self, seq: int) -> set[int]:
        return {d.client for s, d in self.dispatches.items() if s > seq}


def trace_path(file: str | Path) -> Path:
    """``file`` itself, or ``file/updates.csv`` when ``file`` is a run directory."""
    path = resolve_path(str(file))
    return path / "updates.csv" if path.is_dir() else path


def load_trace(file: str | Path) -> Trace:
    """Read and check a recorded ``updates.csv``; every problem is a :class:`TraceError`."""
    path = trace_path(file)
    where = f"trace {path}"
    if not path.exists():
        raise TraceError(f"{where}: no such file (give a run's updates.csv or its run directory)")
    # Messages never quote the file: a trace pointed at a foreign file (a symlink to a secret)
    # must not print its lines.
    try:
        with io.TextIOWrapper(open_limited(path, MAX_TRACE_BYTES, lambda m: TraceError(f"trace {m}")),
                              encoding="utf-8", newline="") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in REQUIRED_COLUMNS if c not in header]
            if missing:
                raise TraceError(f"{where}: the first line is not the header of an asyncfl updates.csv (missing "
                                 f"column(s) {', '.join(missing)}; it must have {', '.join(REQUIRED_COLUMNS)}, dispatch)")
            rows = list(reader)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise TraceError(f"{where}: not a CSV file of UTF-8 text ({exc.__class__.__name__})") from None
    except OSError as exc:
        raise TraceError(f"{where}: cannot be read ({exc.strerror or exc.__class__.__name__})") from None
    if not rows:
        raise TraceError(f"{where}: has no rows")
    has_seq = "dispatch" in header
    parsed = []
    for i, row in enumerate(rows):
        line = i + 2
        column = ""
        try:
            column = "client"
            client = int(row["client"])
            column = "version"
            version = int(row["version"])
            column = "step"
            step = int(row["step"])
            column = "dispatch_time"
            t0 = float(row["dispatch_time"])
            column = "arrival_time"
            t1 = float(row["arrival_time"])
            column = "dispatch"
            seq = int(row["dispatch"]) if has_seq else 0
            column = "accepted"
            accepted = {"true": True, "false": False}[row["accepted"].strip().lower()]
        except (KeyError, TypeError, ValueError, AttributeError):
            allowed = {"accepted": "true or false", "dispatch_time": "a number", "arrival_time": "a number"}.get(column, "an integer")
            raise TraceError(f"{where}, line {line}: column {column} must be {allowed} (or the row has too few fields)") from None
        if client < 0 or version < 1 or (has_seq and seq < 1):
            raise TraceError(f"{where}, line {line}: client must be ≥ 0, version and dispatch ≥ 1")
        if not (math.isfinite(t0) and math.isfinite(t1)) or t0 < 0:
            raise TraceError(f"{where}, line {line}: times must be finite and non-negative")
        if t1 < t0:
            raise TraceError(f"{where}, line {line}: negative latency (arrival_time {t1!r} < dispatch_time {t0!r})")
        reason = (row["reason"] or "").strip()
        kind = "late" if reason == "late" else "offline" if reason == "offline" else "arrive"
        parsed.append((seq, client, version, t0, t1, kind, step if accepted else 0))
    if not has_seq:  # number dispatches by time, ties in row order
        order = sorted(range(len(parsed)), key=lambda i: (parsed[i][3], i))
        parsed = [(n + 1, *parsed[i][1:]) for n, i in enumerate(order)]
    dispatches: dict[int, Dispatch] = {}
    for seq, client, version, t0, t1, kind, _ in parsed:
        if seq in dispatches:
            raise TraceError(f"{where}: dispatch {seq} appears twice")
        dispatches[seq] = Dispatch(seq, client, version, t0, t1, kind)
    return Trace(
        path=path, dispatches=dispatches, last_seq=max(dispatches),
        uploads=sum(d.kind == "arrive" for d in dispatches.values()),
        recorded_steps=max(p[6] for p in parsed), max_client=max(p[1] for p in parsed),
    )


class ReplayFleet(Fleet):
    """A :class:`Fleet` whose choices and latencies come from a recorded :class:`Trace`.

    Selection and latency streams are not used. ``choose``/``choose_many`` queue the recorded
    dispatches they hand out; :meth:`schedule` (called by the dispatch right after) consumes them.
    """

    def __init__(self, cfg: TraceLatency, ctx: BuildContext, trace: Trace | None = None) -> None:
        """The latency component ``trace`` (mode ``replay``): ``build(cfg, ctx)`` with the
        ``[latency]`` section (its ``file``) and the context's clients, steps, buffer and
        whether uploads may be stale."""
        assert isinstance(cfg, TraceLatency)
        self.trace = trace if trace is not None else load_trace(cfg.file)
        n, where = ctx.clients, f"trace {self.trace.path}"
        if self.trace.max_client >= n:
            raise TraceError(f"{where}: names client {self.trace.max_client}, but population.clients = {n}")
        # FedBuff steps consume exactly C uploads; a sync round at least one (fewer than C
        # when fewer clients were online)
        per_step = ctx.buffer if ctx.stale else 1
        need = ctx.steps * per_step
        if self.trace.uploads < need:
            what = "run.steps × server.buffer" if per_step > 1 else "run.steps"
            raise TraceError(
                f"{where}: too short: it holds {self.trace.uploads} uploads (recorded {self.trace.recorded_steps} steps), "
                f"but {what} = {need} are needed"
            )
        self.size = n
        self.speeds = np.ones(n)
        self.busy = np.zeros(n, dtype=bool)
        self.availability = None
        self.next_seq = 1
        self._queued: deque[Dispatch | None] = deque()  # None: an unknown dispatch
        self._unknown_in_flight = 0

    # The trace is configuration (re-read from the scenario's file); the state is the replay's
    # position.
    def state(self) -> ReplayState:
        queued = tuple(-1 if d is None else d.seq for d in self._queued)
        return ReplayState(self.busy.copy(), self.next_seq, queued, self._unknown_in_flight)

    def restore(self, state: ReplayState) -> None:  # type: ignore[override]
        self.busy = state.busy.copy()
        self.next_seq = state.next_seq
        self._queued = deque(None if seq < 0 else self.trace.dispatches[seq] for seq in state.queued)
        self._unknown_in_flight = state.unknown_in_flight

    # -- who ------------------------------------------------------------------------------------
    def choose(self, now: float, rng: np.random.Generator) -> int | None:
        picked = self._take(1, now)
        return int(picked[0]) if picked.size else None

    def choose_many(self, count: int, now: float, rng: np.random.Generator) -> np.ndarray:
        return self._take(count, now)

    def _take(self, count: int, now: float) -> np.ndarray:
        """Up to ``count`` recorded dispatches of one recorded round (same dispatch time and
        version) that are due at ``now``, or a run of unknown dispatches."""
        clients: list[int] = []
        taken: set[int] = set()
        group: tuple | None = None
        while len(clients) < count:
            entry = self.trace.dispatches.get(self.next_seq)
            key = ("unknown",) if entry is None else (entry.dispatch_time, entry.version)
            if group is not None and key != group:
                break
            if entry is None:
                k = self._placeholder(taken)
                if k is None:
                    break
            elif entry.dispatch_time > now:
                break  # the recording waited for this dispatch: so does the replay
            else:
                k = entry.client
                self._check_eligible(entry)
            group = key
            self._queued.append(entry)
            clients.append(k)
            taken.add(k)
            self.next_seq += 1
        return np.array(clients, dtype=np.int64)

    def _check_eligible(self, entry: Dispatch) -> None:
        """A private run cannot follow a recorded dispatch of a client that still has an upload
        waiting for the open step, that has reached its participation cap, or that contributed fewer
        than ``privacy.min_separation`` steps ago (docs/privacy.md §6)."""
        ledger = self.participation
        if ledger is None or ledger.eligible(entry.client):
            return
        where = f"trace {self.trace.path}, dispatch {entry.seq}"
        if ledger.pending[entry.client]:
            raise TraceError(
                f"{where}: sends client {entry.client} again while its previous upload waits for the open step; a private "
                "run takes at most one upload per client per step (docs/privacy.md §6), so it can replay only a trace "
                "recorded by a private run with the same protocol, concurrency and buffer"
            )
        if not ledger.rested(entry.client):
            raise ParticipationCapReached(
                f"{where}: sends client {entry.client}, which contributed to server step {int(ledger.last_step[entry.client])}, "
                f"fewer than privacy.min_separation = {ledger.separation} steps ago; a run with a min separation can "
                "replay only a trace that respects it (one recorded by a run with the same schema, protocol, "
                "concurrency and buffer)")
        raise ParticipationCapReached(
            f"{where}: sends client {entry.client}, which has contributed to privacy.max_participations = {ledger.cap} "
            "server steps already; a capped run can replay only a trace that respects its cap (one recorded by a run "
            "with the same cap, protocol, concurrency and buffer)"
        )

    def _placeholder(self, taken: set[int]) -> int | None:
        idle = [k for k in np.flatnonzero(self._idle()).tolist() if k not in taken]
        if not idle:
            return None
        later = self.trace.later_clients(self.next_seq) if self.next_seq <= self.trace.last_seq else set()
        fresh = [k for k in idle if k not in later]
        return (fresh or idle)[0]

    # -- how long --------------------------------------------------------------------------------
    def schedule(self, client: int, now: float, rng: np.random.Generator) -> tuple[float, float]:
        entry = self._queued.popleft() if self._queued else None
        if entry is None:
            self._unknown_in_flight += 1
            return math.inf, math.inf
        assert entry.client == client, "dispatch order differs from the replayed choice"
        if entry.kind == "late":
            return math.inf, math.inf
        end = entry.arrival_time if now == entry.dispatch_time else now + (entry.arrival_time - entry.dispatch_time)
        return (math.inf, end) if entry.kind == "offline" else (end, math.inf)

    def latency(self, client: int, now: float, rng: np.random.Generator) -> float:
        raise TypeError("a replayed fleet has no latency distribution; use schedule()")

    def next_online(self, now: float) -> float:
        entry = self.trace.dispatches.get(self.next_seq)
        return entry.dispatch_time if entry is not None and entry.dispatch_time > now else math.inf

    def explain_stall(self, now: float, steps_done: int, total_steps: int) -> str | None:
        return (
            f"trace {self.trace.path} ran out: the replay reached step {steps_done} of {total_steps} at virtual time {now:g}, "
            f"and every client still in flight is a dispatch the recording does not have (it holds "
            f"{self.trace.last_seq} dispatches and {self.trace.recorded_steps} steps); "
            f"use run.steps ≤ {self.trace.recorded_steps} with the recording's protocol, K and C, or a longer trace"
        )
