"""Server protocols on the simpy clock (DESIGN.md §3): who is dispatched when, what an arrival
does, and when the buffer is flushed. The :class:`~asyncfl.sim.engine.Simulation` owns the state;
a protocol decides with it.

* :class:`FedBuffProtocol` — ``K`` in flight, buffer ``C``, staleness drops, a replacement on
  every arrival (FedAsync is ``C = 1``);
* :class:`SyncProtocol` — a cohort per round, the first ``C`` arrivals, stragglers cancelled;
* :class:`Waiter` — waits on the clock until a client comes online (availability).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Callable

from asyncfl.sim.clock import timeout_at

if TYPE_CHECKING:
    from asyncfl.sim.engine import InFlight, Simulation


class Waiter:
    """Waits on the virtual clock until a client comes online (``Fleet.next_online``), then
    calls ``retry``. At most one wait is pending; none when nothing will ever come online (the
    run then stalls and the fleet explains why). Its state (``pending``, ``when``) is data, and a
    checkpoint restores the pending wake-up."""

    def __init__(self, sim: Simulation, retry: Callable[[], None]) -> None:
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

    def state_dict(self) -> dict[str, Any]:
        return {"pending": self.pending, "when": self.when}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pending, self.when = bool(state["pending"]), float(state["when"])
        if self.pending:
            self._schedule()


class FedBuffProtocol:
    """Concurrency ``K``, buffer ``C``, staleness drops, replacement on every arrival."""

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.max_staleness = sim.scenario.server.max_staleness
        self.waiter = Waiter(sim, self.dispatch_one)

    def start(self) -> None:
        self.dispatch_one()

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

    def on_offline(self, rec: InFlight) -> None:
        self.dispatch_one()

    def on_arrival(self, rec: InFlight) -> None:
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

    def __init__(self, sim: Simulation) -> None:
        self.sim = sim
        self.round: list[InFlight] = []  # dispatched this round
        self.arrived: list[InFlight] = []
        self.need = 0
        self.waiter = Waiter(sim, self.start_round)

    def start(self) -> None:
        self.start_round()

    def start_round(self) -> None:
        sim = self.sim
        server = sim.scenario.server
        cohort = sim.fleet.choose_many(server.cohort, sim.env.now, sim.streams["selection"])
        self.arrived = []
        self.need = min(server.buffer, int(cohort.size))
        self.round = [sim.dispatch(int(k)) for k in cohort]
        if not self.round:  # nobody online: the round starts when someone comes online
            self.waiter.wait()

    def on_arrival(self, rec: InFlight) -> None:
        self.arrived.append(rec)
        self._maybe_close()

    def on_offline(self, rec: InFlight) -> None:
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
                straggler.process.interrupt()
                straggler.future.cancel()
                sim.counters.cancelled_late += 1
                sim.record(straggler, sim.version, 0, False, "late", arrival_time=sim.env.now)
        sim.request_flush([(r, 0) for r in self.arrived], then=self.start_round)

    def consumed(self, entries: list, accepted: list) -> None:
        pass

    def ready(self, accepted: list) -> bool:
        return len(accepted) > 0
