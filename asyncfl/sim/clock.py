"""The virtual clock's two primitives (docs/architecture.md §2 principle 1): an absolute timeout and a
client's end of job on it."""

from __future__ import annotations

import heapq
import math
from typing import Any, Callable

import simpy


def timeout_at(env: simpy.Environment, when: float) -> simpy.Event:
    """A timeout that fires at exactly ``when``. ``env.timeout(when − now)`` fires at
    ``now + (when − now)``, which rounding can move by an ulp — and a resumed run restarts the wait
    from another ``now``, so only an absolute time reproduces the uninterrupted run bit for bit.
    simpy has no public absolute timeout: this is ``Timeout`` with the queue entry's time given
    (simpy's queue holds ``(time, priority, eid, event)``; eids keep ties in creation order;
    tests/test_reliability.py checks the exact times and the order of ties)."""
    now = env.now
    if when < now:
        raise ValueError(f"timeout_at({when!r}) lies before now = {now!r}")
    event = simpy.Event(env)
    event._ok, event._value = True, None  # triggered, as Timeout.__init__ does
    heapq.heappush(env._queue, (when, simpy.events.NORMAL, next(env._eid), event))
    return event


class Arrival:
    """A dispatched client's end of life on the simpy clock: dispatch → wait → upload (or drop).

    Performance: one ``Timeout`` with a callback instead of a simpy process per client (a
    process costs a generator, an ``Initialize`` event and a resume per client, about half of the
    engine's time with zero-cost training). The event order is unchanged: the timeout is
    scheduled at dispatch, in dispatch order, exactly as the process's first ``yield`` did.
    It fires at exactly ``end`` (:func:`timeout_at`: a resumed run restarts the wait from the
    checkpoint's clock and must see the same times). An infinite ``end`` (a replayed straggler
    that never arrives) schedules nothing. ``interrupt()`` cancels it. At ``end`` it calls
    ``on_arrival(arg)``.
    """

    __slots__ = ("cancelled", "on_arrival", "arg")

    def __init__(self, env: simpy.Environment, end: float, on_arrival: Callable[[Any], None], arg: Any = None) -> None:
        self.cancelled = False
        self.on_arrival, self.arg = on_arrival, arg
        if not math.isinf(end):
            timeout_at(env, end).callbacks.append(self._fire)

    def _fire(self, _event: Any) -> None:
        if not self.cancelled:
            self.on_arrival(self.arg)

    def interrupt(self) -> None:
        self.cancelled = True
