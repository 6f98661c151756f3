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


def _arrive(arrival: "Arrival") -> None:
    """What simpy's ``step()`` calls when an :class:`Arrival` comes off the queue."""
    if not arrival.cancelled:
        arrival.on_arrival(arrival.arg)


#: every Arrival's callbacks: one shared tuple (simpy's ``step()`` calls each with the event)
_ARRIVE = (_arrive,)


class Arrival:
    """A dispatched client's end of life on the simpy clock: dispatch → wait → upload (or drop).

    Performance: the arrival is its own entry in simpy's queue, ``(end, NORMAL, eid, self)``,
    exactly the entry :func:`timeout_at` makes for a ``Timeout`` — not a simpy process per
    client (a generator, an ``Initialize`` event and a resume each: about half of the engine's
    time with zero-cost training), and not a ``Timeout`` with a callback either (an event, its
    ``__dict__``, a callbacks list and a bound method: four more objects for the garbage
    collector per dispatch, docs/architecture.md §2). simpy's ``step()`` needs of a queued
    event only ``callbacks`` (each called with the event, then set to None) and ``_ok``
    (True: a triggered, successful event). The event order is unchanged: the entry is pushed
    at dispatch, in dispatch order, with the next eid, so ties fire in creation order. It fires
    at exactly ``end`` (a resumed run restarts the wait from the checkpoint's clock and must
    see the same times). An infinite ``end`` (a replayed straggler that never arrives)
    schedules nothing. ``interrupt()`` cancels it. At ``end`` it calls ``on_arrival(arg)``.
    """

    __slots__ = ("cancelled", "on_arrival", "arg", "callbacks")
    _ok = True

    def __init__(self, env: simpy.Environment, end: float, on_arrival: Callable[[Any], None], arg: Any = None) -> None:
        self.cancelled = False
        self.on_arrival, self.arg = on_arrival, arg
        self.callbacks: tuple | None = _ARRIVE
        if not math.isinf(end):
            if end < env._now:  # env.now without its property call
                raise ValueError(f"an arrival at {end!r} lies before now = {env.now!r}")
            heapq.heappush(env._queue, (end, simpy.events.NORMAL, next(env._eid), self))

    def interrupt(self) -> None:
        self.cancelled = True
