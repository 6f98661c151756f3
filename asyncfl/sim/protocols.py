"""Server protocols on the simpy clock (docs/protocol.md): who is dispatched when, what an arrival
does, and when the buffer is flushed. The simulation (a :class:`Host`) owns the shared state;
a protocol decides with it and keeps only its own (round, pending wake-up) as declared data.

* :class:`FedBuffProtocol` — ``K`` in flight, buffer ``C``, staleness drops, a replacement on
  every arrival (FedAsync is ``C = 1``);
* :class:`SyncProtocol` — a cohort per round, the first ``C`` arrivals, stragglers cancelled;
* :class:`Waiter` — waits on the clock until a client comes online (availability).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence

from asyncfl.sim.clock import timeout_at
from asyncfl.sim.state import FedBuffState, SyncState, WaiterState

if TYPE_CHECKING:
    import numpy as np
    import simpy

    from asyncfl.clients.fleet import Fleet
    from asyncfl.config.scenario import Scenario
    from asyncfl.sim.state import Counters


class Record(Protocol):
    """What a protocol reads of a dispatched client (``asyncfl.sim.engine.InFlight``)."""

    seq: int
    client: int
    version: int
    arrival: Any
    future: Any


class Host(Protocol):
    """What a protocol needs from the simulation that runs it."""

    scenario: Scenario
    env: simpy.Environment
    fleet: Fleet
    streams: dict[str, np.random.Generator]
    in_flight: dict[int, Any]
    buffer: list[tuple[Any, int]]
    counters: Counters
    version: int
    finished: bool

    def dispatch(self, client: int) -> Any: ...

    def record(self, rec: Any, step: int, staleness: int, accepted: bool, reason: str = "", arrival_time: float | None = None) -> None: ...

    def request_flush(self, entries: list[tuple[Any, int]], then: Callable[[], None]) -> None: ...


class Waiter:
    """Waits on the virtual clock until a client comes online (``Fleet.next_online``), then
    calls ``retry``. At most one wait is pending; none when nothing will ever come online (the
    run then stalls and the fleet explains why). Its state (``pending``, ``when``) is data, and a
    checkpoint restores the pending wake-up."""

    def __init__(self, sim: Host, retry: Callable[[], None]) -> None:
        self.sim = sim
        self.retry = retry
        self.pending = False
        self.when = math.inf

    def wait(self) -> None:
        if self.pending:
            return
        when = self.sim.fleet.next_online(self.sim.env.now)
        if math.isinf(when):
            return
        self.pending, self.when = True, when
        self._schedule()

    def _schedule(self) -> None:
        timeout_at(self.sim.env, self.when).callbacks.append(self._wake)

    def _wake(self, _event: Any) -> None:
        self.pending = False
        if not self.sim.finished:
            self.retry()

    def state(self) -> WaiterState:
        return WaiterState(self.pending, self.when)

    def restore(self, state: WaiterState) -> None:
        """Reschedules a pending wake-up on the (new) clock."""
        self.pending, self.when = state.pending, state.when
        if self.pending:
            self._schedule()


class FedBuffProtocol:
    """Concurrency ``K``, buffer ``C``, staleness drops, replacement on every arrival."""

    def __init__(self, sim: Host) -> None:
        self.sim = sim
        self.max_staleness = sim.scenario.server.max_staleness
        self.waiter = Waiter(sim, self.dispatch_one)

    def start(self) -> None:
        self.dispatch_one()

    def state(self) -> FedBuffState:
        return FedBuffState(self.waiter.state())

    def restore(self, state: FedBuffState, records: Mapping[int, Any]) -> None:
        self.waiter.restore(state.waiter)

    def referred(self) -> Sequence[Any]:
        """Clients this protocol refers to beyond the in-flight and buffered ones: none."""
        return ()

    def dispatch_one(self) -> None:
        """Dispatch until ``K`` clients are in flight (one, after an arrival); when no client
        is idle and online, wait until one comes online."""
        sim = self.sim
        while len(sim.in_flight) < sim.scenario.server.concurrency:
            client = sim.fleet.choose(sim.env.now, sim.streams["selection"])
            if client is None:
                self.waiter.wait()
                return
            sim.dispatch(client)

    def on_offline(self, rec: Record) -> None:
        self.dispatch_one()

    def on_arrival(self, rec: Record) -> None:
        sim = self.sim
        tau = sim.version - rec.version
        if self.max_staleness is not None and tau > self.max_staleness:
            sim.counters.dropped_stale += 1
            sim.record(rec, sim.version, tau, False, "stale")
        else:
            sim.buffer.append((rec, tau))
            if len(sim.buffer) >= sim.scenario.server.buffer:
                sim.request_flush(list(sim.buffer), then=self.dispatch_one)
                return
        self.dispatch_one()

    def consumed(self, entries: list, accepted: list) -> None:
        """Rejected uploads leave the buffer; accepted ones stay until a step uses them."""
        keep = {rec.seq for rec, _, _ in accepted}
        self.sim.buffer = [(rec, tau) for rec, tau in self.sim.buffer if rec.seq in keep]

    def ready(self, accepted: list) -> bool:
        if len(accepted) >= self.sim.scenario.server.buffer:
            self.sim.buffer = []
            return True
        return False


class SyncProtocol:
    """Rounds: sample a cohort, wait for its first ``C`` arrivals, step, repeat."""

    def __init__(self, sim: Host) -> None:
        self.sim = sim
        self.round: list[Any] = []  # dispatched this round
        self.arrived: list[Any] = []
        self.need = 0
        self.waiter = Waiter(sim, self.start_round)

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

    def start_round(self) -> None:
        sim = self.sim
        server = sim.scenario.server
        cohort = sim.fleet.choose_many(server.cohort, sim.env.now, sim.streams["selection"])
        self.arrived = []
        self.need = min(server.buffer, int(cohort.size))
        self.round = [sim.dispatch(int(k)) for k in cohort]
        if not self.round:  # nobody online: the round starts when someone comes online
            self.waiter.wait()

    def on_arrival(self, rec: Record) -> None:
        self.arrived.append(rec)
        self._maybe_close()

    def on_offline(self, rec: Record) -> None:
        """A cohort member went offline: the round needs at most the arrivals still possible;
        when the whole cohort is gone, a new round starts."""
        sim = self.sim
        still = sum(r.seq in sim.in_flight for r in self.round)
        self.need = min(self.need, len(self.arrived) + still)
        if self.need == 0:
            self.start_round()
        else:
            self._maybe_close()

    def _maybe_close(self) -> None:
        sim = self.sim
        if len(self.arrived) < self.need:
            return
        for straggler in self.round:  # the round is closed: stragglers are cancelled
            if straggler.seq in sim.in_flight:
                sim.in_flight.pop(straggler.seq)
                sim.fleet.busy[straggler.client] = False
                straggler.arrival.interrupt()
                straggler.future.cancel()
                sim.counters.cancelled_late += 1
                sim.record(straggler, sim.version, 0, False, "late", arrival_time=sim.env.now)
        sim.request_flush([(r, 0) for r in self.arrived], then=self.start_round)

    def consumed(self, entries: list, accepted: list) -> None:
        pass

    def ready(self, accepted: list) -> bool:
        return len(accepted) > 0
