"""The ``deadline`` protocol: FedBuff with a training deadline (docs/protocol.md §8).

``K`` (``server.concurrency``) clients train at a time and the server steps every ``C``
(``server.buffer``) accepted uploads, as FedBuff does; an upload whose job took longer than
``server.deadline`` units of virtual time (arrival − dispatch) is dropped with the reason it
declares, ``"deadline"`` (its own counter ``updates_dropped_deadline`` and ``updates.csv``
reason), and a replacement is dispatched at once. Uploads are never stale-dropped.

Written against the public contract only (:class:`asyncfl.ServerProtocol`): built as
``DeadlineProtocol(cfg, ctx)`` before the engine exists, then :meth:`attach`-ed to the engine it
drives. Its state is a value (:class:`DeadlineState`), which checkpoints store and
:meth:`restore` puts back; :meth:`ready` only answers, :meth:`stepped` empties the buffer.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, NamedTuple, Sequence


class DeadlineState(NamedTuple):
    """The buffered uploads ``(seq, staleness)`` and a pending wake-up (when nobody was online)."""

    buffer: tuple[tuple[int, int], ...]
    waiting: bool
    when: float


class DeadlineProtocol:
    def __init__(self, cfg: Any, ctx: Any) -> None:
        self.concurrency, self.deadline, self.size = cfg.concurrency, cfg.deadline, ctx.buffer
        self.buffer: list[tuple[Any, int]] = []
        self.waiting, self.when = False, math.inf

    def attach(self, host: Any) -> None:
        self.host = host

    # -- the run --------------------------------------------------------------------------------
    def start(self) -> None:
        self.fill()

    def fill(self) -> None:
        """Dispatch until K clients train; when nobody is idle and online, wait for someone."""
        for _ in range(self.concurrency - self.host.in_flight_count()):
            client = self.host.pick()
            if client is None:
                self.wait()
                return
            self.host.dispatch(client)

    def wait(self) -> None:
        when = self.host.next_online()
        if not self.waiting and not math.isinf(when):
            self.waiting, self.when = True, when
            self.host.at(when, self.wake)

    def wake(self) -> None:
        self.waiting = False
        if not self.host.finished:
            self.fill()

    def on_offline(self, rec: Any) -> None:
        self.fill()

    def on_arrival(self, rec: Any) -> None:
        tau = self.host.version - rec.version
        if rec.arrival_time - rec.dispatch_time > self.deadline:
            self.host.drop(rec, tau, "deadline")
        else:
            self.buffer.append((rec, tau))
            if len(self.buffer) >= self.size:
                self.host.flush(list(self.buffer), then=self.fill)
                return
        self.fill()

    def consumed(self, entries: list, accepted: list) -> None:
        keep = {rec.seq for rec, _, _ in accepted}
        self.buffer = [(rec, tau) for rec, tau in self.buffer if rec.seq in keep]

    def ready(self, accepted: list) -> bool:
        return len(accepted) >= self.size

    def stepped(self) -> None:
        self.buffer = []

    # -- declared state -------------------------------------------------------------------------
    def state(self) -> DeadlineState:
        return DeadlineState(tuple((rec.seq, tau) for rec, tau in self.buffer), self.waiting, self.when)

    def restore(self, state: DeadlineState, records: Mapping[int, Any]) -> None:
        self.buffer = [(records[seq], tau) for seq, tau in state.buffer]
        self.waiting, self.when = state.waiting, state.when
        if self.waiting:
            self.host.at(self.when, self.wake)

    def referred(self) -> Sequence[Any]:
        return [rec for rec, _ in self.buffer]

    def referred_seqs(self, state: DeadlineState) -> set[int]:
        return {seq for seq, _ in state.buffer}

    def undecided_seqs(self, state: DeadlineState) -> set[int]:
        return {seq for seq, _ in state.buffer}

    def state_problems(self, state: DeadlineState) -> list[str]:
        if len(state.buffer) >= self.size:
            return [f"state.protocol.buffer: {len(state.buffer)} uploads, but a step takes server.buffer = {self.size}"]
        return []


def resolve(scenario: Any) -> dict[str, Any]:
    """The derived defaults (``ProtocolTraits.resolve``): K = min(N, 10), C = min(K, 10)."""
    server = scenario.server
    k = server.concurrency if server.concurrency is not None else min(scenario.population.clients, 10)
    return {"concurrency": k, "buffer": server.buffer if server.buffer is not None else min(k, 10)}
