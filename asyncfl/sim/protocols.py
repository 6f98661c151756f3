"""Server protocols on the simpy clock (docs/protocol.md §8): who is dispatched when, what an
arrival does, and when the server steps.

A protocol drives the simulation only through :class:`Host`, a narrow interface the engine
implements (``asyncfl.sim.engine.Simulation``): read the clock and the model version, pick
idle clients, dispatch one, drop or cancel an upload, ask for a server step, wait until someone
comes online. It never touches the engine's fields, the fleet or the counters. What a protocol
holds — FedBuff's buffer, sync's open round, a pending wake-up — is its own declared state
(:mod:`asyncfl.sim.state`), which a checkpoint stores and :meth:`restore` puts back; the
protocol also says which dispatched clients it still refers to (:meth:`referred`, and, asked of a
stored state, :meth:`referred_seqs` / :meth:`undecided_seqs` / :meth:`state_problems`, which
checkpoint validation uses on the built protocol).

* :class:`FedBuffProtocol` — ``K`` in flight, buffer ``C``, staleness drops, a replacement on
  every arrival (FedAsync is ``C = 1``);
* :class:`SyncProtocol` — a cohort per round, the first ``C`` arrivals, stragglers cancelled;
* :class:`Waiter` — waits on the clock until a client comes online (availability).

Both are components (:mod:`asyncfl.components.builtin`) of the one builder shape: a protocol
class is built as ``Protocol(cfg, ctx)`` from its own keys (``concurrency``, ``cohort``) and the
context's ``buffer`` and ``max_staleness``, before the engine exists; the engine then
:meth:`attach`-es itself as the protocol's :class:`Host`. The product's contract is
:class:`asyncfl.components.contracts.ServerProtocol`.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from asyncfl.components.contracts import BuildContext
from asyncfl.sim.state import FedBuffState, SyncState, WaiterState

if TYPE_CHECKING:
    import numpy as np


class Record(Protocol):
    """What a protocol reads of a dispatched client (``asyncfl.sim.engine.InFlight``): its
    dispatch number, client, the model version it trained from, when it was dispatched and when
    its upload arrives."""

    seq: int
    client: int
    version: int
    dispatch_time: float
    arrival_time: float


class Host(Protocol):
    """What a protocol may ask of the simulation that runs it (docs/protocol.md §8)."""

    @property
    def now(self) -> float:
        """The virtual time."""

    @property
    def version(self) -> int:
        """The server's model version ``t`` (the step in progress)."""

    @property
    def finished(self) -> bool:
        """The run has taken its last step: nothing more is dispatched."""

    def in_flight_count(self) -> int:
        """How many dispatched clients have not uploaded yet."""

    def is_in_flight(self, rec: Record) -> bool: ...

    def pick(self) -> int | None:
        """An idle, online, eligible client, uniformly (the ``selection`` stream), or None."""

    def pick_many(self, n: int) -> np.ndarray:
        """Up to ``n`` distinct idle, online, eligible clients (the ``selection`` stream)."""

    def dispatch(self, client: int) -> Any:
        """Send the current model to ``client``; its upload (or going offline) comes back to
        :meth:`on_arrival` (:meth:`on_offline`)."""

    def drop(self, rec: Any, staleness: int, reason: str) -> None:
        """An arrived upload the protocol does not use, for a reason it declares
        (``ProtocolTraits.drops``: FedBuff's ``"stale"``): recorded and counted."""

    def cancel(self, rec: Any) -> None:
        """A client still in flight whose upload is no longer wanted (a straggler, ``"late"``):
        taken off the clock, its job cancelled, recorded and counted."""

    def flush(self, entries: list[tuple[Any, int]], then: Callable[[], None]) -> None:
        """Ask for a server step on ``entries`` (upload, staleness) before the next event;
        ``then`` runs right after it, at the same virtual time."""

    def next_online(self) -> float:
        """When some client that is offline now comes online (inf: never)."""

    def at(self, when: float, callback: Callable[[], None]) -> None:
        """Call ``callback`` at virtual time ``when``."""


class Waiter:
    """Waits on the virtual clock until a client comes online (``Host.next_online``), then
    calls ``retry``. At most one wait is pending; none when nothing will ever come online (the
    run then stalls and the fleet explains why). Its state (``pending``, ``when``) is data, and a
    checkpoint restores the pending wake-up."""

    def __init__(self, host: Host, retry: Callable[[], None]) -> None:
        self.host = host
        self.retry = retry
        self.pending = False
        self.when = math.inf

    def wait(self) -> None:
        if self.pending:
            return
        when = self.host.next_online()
        if math.isinf(when):
            return
        self.pending, self.when = True, when
        self.host.at(when, self._wake)

    def _wake(self) -> None:
        self.pending = False
        if not self.host.finished:
            self.retry()

    def state(self) -> WaiterState:
        return WaiterState(self.pending, self.when)

    def restore(self, state: WaiterState) -> None:
        """Reschedules a pending wake-up on the (new) clock."""
        self.pending, self.when = state.pending, state.when
        if self.pending:
            self.host.at(self.when, self._wake)


class FedBuffProtocol:
    """Concurrency ``K``, buffer ``C``, staleness drops, replacement on every arrival. The
    buffer of accepted-so-far uploads is the protocol's own (``FedBuffState.buffer``)."""

    def __init__(self, cfg: Any, ctx: BuildContext) -> None:
        self.concurrency, self.size, self.max_staleness = cfg.concurrency, ctx.buffer, ctx.max_staleness
        self.buffer: list[tuple[Any, int]] = []  # (upload, staleness) waiting for the next step

    def attach(self, host: Host) -> None:
        """The simulation this protocol drives."""
        self.host = host
        self.waiter = Waiter(host, self.dispatch_one)

    def start(self) -> None:
        self.dispatch_one()

    def state(self) -> FedBuffState:
        return FedBuffState(self.waiter.state(), tuple((rec.seq, tau) for rec, tau in self.buffer))

    def restore(self, state: FedBuffState, records: Mapping[int, Any]) -> None:
        self.buffer = [(records[seq], tau) for seq, tau in state.buffer]
        self.waiter.restore(state.waiter)

    def referred(self) -> Sequence[Any]:
        """The buffered uploads (no longer in flight, not yet used by a step)."""
        return [rec for rec, _ in self.buffer]

    def referred_seqs(self, state: FedBuffState) -> set[int]:
        return {seq for seq, _ in state.buffer}

    def undecided_seqs(self, state: FedBuffState) -> set[int]:
        """Arrived uploads whose fate a step has not decided yet: the buffered ones."""
        return {seq for seq, _ in state.buffer}

    def state_problems(self, state: FedBuffState) -> list[str]:
        """What a checkpointed state must satisfy: a step takes the buffer as soon as it holds C."""
        if len(state.buffer) >= self.size:
            return [f"state.protocol.buffer: {len(state.buffer)} uploads, but a step takes server.buffer = {self.size}"]
        return []

    def dispatch_one(self) -> None:
        """Dispatch until ``K`` clients are in flight (one, after an arrival); when no client
        is idle and online, wait until one comes online."""
        host = self.host
        pick, dispatch = host.pick, host.dispatch
        for _ in range(self.concurrency - host.in_flight_count()):  # each dispatch puts one more in flight
            client = pick()
            if client is None:
                self.waiter.wait()
                return
            dispatch(client)

    def on_offline(self, rec: Record) -> None:
        self.dispatch_one()

    def on_arrival(self, rec: Record) -> None:
        tau = self.host.version - rec.version
        if self.max_staleness is not None and tau > self.max_staleness:
            self.host.drop(rec, tau, "stale")
        else:
            self.buffer.append((rec, tau))
            if len(self.buffer) >= self.size:
                self.host.flush(list(self.buffer), then=self.dispatch_one)
                return
        self.dispatch_one()

    def consumed(self, entries: list, accepted: list) -> None:
        """Rejected uploads leave the buffer; accepted ones stay until a step uses them."""
        keep = {rec.seq for rec, _, _ in accepted}
        self.buffer = [(rec, tau) for rec, tau in self.buffer if rec.seq in keep]

    def ready(self, accepted: list) -> bool:
        """A step is due when C uploads are accepted (a question only: :meth:`stepped` empties
        the buffer)."""
        return len(accepted) >= self.size

    def stepped(self) -> None:
        """The step took the buffer."""
        self.buffer = []


class SyncProtocol:
    """Rounds: sample a cohort, wait for its first ``C`` arrivals, step, repeat."""

    def __init__(self, cfg: Any, ctx: BuildContext) -> None:
        self.cohort, self.size = cfg.cohort, ctx.buffer
        self.round: list[Any] = []  # dispatched this round
        self.arrived: list[Any] = []
        self.need = 0

    def attach(self, host: Host) -> None:
        """The simulation this protocol drives."""
        self.host = host
        self.waiter = Waiter(host, self.start_round)

    def start(self) -> None:
        self.start_round()

    def state(self) -> SyncState:
        return SyncState(tuple(r.seq for r in self.round), tuple(r.seq for r in self.arrived), self.need, self.waiter.state())

    def restore(self, state: SyncState, records: Mapping[int, Any]) -> None:
        self.round = [records[seq] for seq in state.round]
        self.arrived = [records[seq] for seq in state.arrived]
        self.need = state.need
        self.waiter.restore(state.waiter)

    def referred(self) -> Sequence[Any]:
        """The open round's cohort (arrived members are no longer in flight)."""
        return self.round

    def referred_seqs(self, state: SyncState) -> set[int]:
        return set(state.round) | set(state.arrived)

    def undecided_seqs(self, state: SyncState) -> set[int]:
        """Arrived uploads of the open round, not yet used by a step."""
        return set(state.arrived)

    def state_problems(self, state: SyncState) -> list[str]:
        return []

    def start_round(self) -> None:
        host = self.host
        cohort = host.pick_many(self.cohort)
        self.arrived = []
        self.need = min(self.size, int(cohort.size))
        self.round = [host.dispatch(int(k)) for k in cohort]
        if not self.round:  # nobody online: the round starts when someone comes online
            self.waiter.wait()

    def on_arrival(self, rec: Record) -> None:
        self.arrived.append(rec)
        self._maybe_close()

    def on_offline(self, rec: Record) -> None:
        """A cohort member went offline: the round needs at most the arrivals still possible;
        when the whole cohort is gone, a new round starts."""
        still = sum(self.host.is_in_flight(r) for r in self.round)
        self.need = min(self.need, len(self.arrived) + still)
        if self.need == 0:
            self.start_round()
        else:
            self._maybe_close()

    def _maybe_close(self) -> None:
        if len(self.arrived) < self.need:
            return
        for straggler in self.round:  # the round is closed: stragglers are cancelled
            if self.host.is_in_flight(straggler):
                self.host.cancel(straggler)
        self.host.flush([(r, 0) for r in self.arrived], then=self.start_round)

    def consumed(self, entries: list, accepted: list) -> None:
        pass

    def ready(self, accepted: list) -> bool:
        return len(accepted) > 0

    def stepped(self) -> None:
        pass

