"""When clients are online (issue 9 item 3; ``[population] availability``).

A client is online during half-open windows ``[start, end)`` of virtual time. A schedule is
either absolute (the windows as listed, offline after the last one) or periodic with a
per-client period ``P_k`` (window ``[a, b)`` recurs as ``[a + jP_k, b + jP_k)`` for every
integer ``j``).

* ``diurnal``: client ``k`` is online for a fraction ``f`` (``online_fraction``) of every
  ``period`` ``P``, from a phase ``φ_k ~ U[0, P)`` drawn once from the ``availability`` stream:
  online at time ``x`` iff ``(x − φ_k) mod P < f·P`` (``f = 1``: always online).
* ``trace``: FedScale availability (``asyncfl.clients.fedscale``): windows ``[active_i, inactive_i)``
  in seconds, scaled to virtual time; with ``finish_time`` the trace repeats with that period,
  as in FedScale's simulator.

All window boundaries are computed by one expression (``start + j·P``), so the time returned by
:meth:`Schedule.next_online` is online and the time returned by :meth:`Schedule.offline_time`
is offline when tested with :meth:`Schedule.online` — no float round-off between the two.

Nothing here is a Python object per client (docs/architecture.md §10): a diurnal schedule is three
arrays (:class:`Diurnal`), a trace one profile per trace client and an index a client.
"""

from __future__ import annotations

import math

from typing import Any

import numpy as np


class Schedule:
    """Online windows of every client, stored once per *profile* (docs/architecture.md §10):
    profile ``i`` has the sorted, disjoint windows ``starts[i]``/``ends[i]`` and the repeat period
    ``period`` (one for all profiles, a list with one per profile — None: its windows do not
    repeat — or None), and client ``k`` follows profile ``profile_of[k]`` (None: profile ``k``,
    one profile per client). A FedScale trace of ``D`` clients serves ``N`` simulated clients
    with ``D`` profiles and one index a client, not ``N`` copies of its windows."""

    def __init__(self, starts: list[np.ndarray], ends: list[np.ndarray], period: float | list[float | None] | None,
                 profile_of: np.ndarray | None = None) -> None:
        self.periods = list(period) if isinstance(period, list) else [period] * len(starts)
        self.starts: list[np.ndarray] = []
        self.ends: list[np.ndarray] = []
        self.always = np.zeros(len(starts), dtype=bool)  # by profile
        for i, (a, b) in enumerate(zip(starts, ends)):
            a, b = _merge(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
            self.starts.append(a)
            self.ends.append(b)
            p = self.periods[i]
            if p is not None and a.size and float((b - a).sum()) >= p:
                self.always[i] = True  # the windows cover a whole period
        self.profile_of = None if profile_of is None else np.asarray(profile_of)  # any integer dtype (int32: 4 bytes a client)
        self.size = len(self.starts) if self.profile_of is None else self.profile_of.size

    def _profile(self, k: int) -> int:
        return k if self.profile_of is None else int(self.profile_of[k])

    def _by_client(self, by_profile: np.ndarray) -> np.ndarray:
        return by_profile if self.profile_of is None else by_profile[self.profile_of]

    # -- the questions the fleet asks (of one client; of all clients at once) -----------------
    def online(self, k: int, x: float) -> bool:
        """Is client ``k`` online at time ``x``?"""
        i = self._profile(k)
        return bool(self.always[i]) or self._window_end(i, x) is not None

    def offline_time(self, k: int, x: float) -> float:
        """First time ``≥ x`` at which client ``k`` is offline (``x`` itself when it is offline
        at ``x``; ``inf`` when it never goes offline)."""
        i = self._profile(k)
        if self.always[i]:
            return math.inf
        t = x
        for _ in range(self._windows(i)[0].size + 3):  # each hop moves to the end of another window
            end = self._window_end(i, t)
            if end is None:
                return t
            t = end
        return math.inf

    def next_online(self, k: int, x: float) -> float:
        """The first window start strictly after ``x`` (``inf`` if there is none)."""
        return self._next_start(self._profile(k), x)

    def online_mask(self, x: float) -> np.ndarray:
        """:meth:`online` of every client at ``x``, one answer per profile."""
        n = len(self.starts)
        return self._by_client(np.fromiter((bool(self.always[i]) or self._window_end(i, x) is not None for i in range(n)),
                                           dtype=bool, count=n))

    def next_online_all(self, x: float) -> np.ndarray:
        """:meth:`next_online` of every client at ``x``, one answer per profile."""
        n = len(self.starts)
        return self._by_client(np.fromiter((self._next_start(i, x) for i in range(n)), dtype=np.float64, count=n))

    # -- one profile ----------------------------------------------------------------------------
    def _windows(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        return self.starts[i], self.ends[i]

    def _period(self, i: int) -> float | None:
        return self.periods[i]

    def _shifts(self, i: int, x: float, extra: int = 1) -> list[float]:
        """``j·P`` for the periods ``j`` around ``x`` (``[0]`` without a period)."""
        period = self._period(i)
        if period is None:
            return [0.0]
        j = math.floor(x / period)
        return [(j + d) * period for d in range(-1, 1 + extra)]

    def _next_start(self, i: int, x: float) -> float:
        a = self._windows(i)[0]
        if self.always[i] or a.size == 0:
            return math.inf
        best = math.inf
        for shift in self._shifts(i, x, extra=2):
            s = a + shift
            j = int(np.searchsorted(s, x, side="right"))
            if j < s.size:
                best = min(best, float(s[j]))
        return best

    def _window_end(self, i: int, x: float) -> float | None:
        """End of profile ``i``'s window containing ``x``, or None."""
        a, b = self._windows(i)
        if a.size == 0:
            return None
        for shift in self._shifts(i, x):
            s = a + shift
            j = int(np.searchsorted(s, x, side="right")) - 1
            if j >= 0:
                e = float(b[j] + shift)
                if x < e:
                    return e
        return None


class Diurnal(Schedule):
    """One window ``[start_k, end_k)`` a client, repeating with one period ``P`` for all: three
    arrays (17 bytes a client) instead of a profile per client (docs/architecture.md §10). The
    per-client answers are :class:`Schedule`'s own code on views of the arrays; :meth:`online_mask`
    and :meth:`next_online_all` compute the same expressions (``start + j·P``, ``end + j·P``) for
    all clients at once, exact to the bit (the shifts ``j·P`` are the same for every client)."""

    def __init__(self, start: np.ndarray, end: np.ndarray, period: float) -> None:
        self.start = np.asarray(start, dtype=np.float64)
        self.end = np.asarray(end, dtype=np.float64)
        self.period = float(period)
        self.always = (self.end - self.start) >= self.period  # the window covers the whole period
        self.profile_of = None
        self.size = self.start.size

    def _windows(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        if not self.end[i] > self.start[i]:
            return _EMPTY, _EMPTY  # an empty window (f·P below the phase's round-off) is no window
        return self.start[i:i + 1], self.end[i:i + 1]

    def _period(self, i: int) -> float | None:
        return self.period

    def online_mask(self, x: float) -> np.ndarray:
        """``start_k + j·P ≤ x < end_k + j·P`` for some ``j`` around ``x``, or always online."""
        mask = self.always.copy()
        for shift in self._shifts(0, x):
            mask |= (self.start + shift <= x) & (x < self.end + shift)
        return mask

    def next_online_all(self, x: float) -> np.ndarray:
        """The least ``start_k + j·P > x`` over the periods ``j`` around ``x`` (``inf`` for clients
        always online or with an empty window)."""
        best = np.full(self.size, math.inf)
        for shift in self._shifts(0, x, extra=2):
            s = self.start + shift
            np.minimum(best, np.where(s > x, s, math.inf), out=best)
        best[self.always | ~(self.end > self.start)] = math.inf
        return best


_EMPTY = np.zeros(0, dtype=np.float64)


def _merge(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drop empty windows and merge touching or overlapping ones (sorted by start)."""
    keep = b > a
    a, b = a[keep], b[keep]
    order = np.argsort(a, kind="stable")
    a, b = a[order], b[order]
    out_a: list[float] = []
    out_b: list[float] = []
    for s, e in zip(a.tolist(), b.tolist()):
        if out_b and s <= out_b[-1]:
            out_b[-1] = max(out_b[-1], e)
        else:
            out_a.append(s)
            out_b.append(e)
    return np.array(out_a, dtype=np.float64), np.array(out_b, dtype=np.float64)


def diurnal(clients: int, period: float, online_fraction: float, rng: np.random.Generator) -> Diurnal:
    """Client ``k`` online on ``[φ_k + jP, φ_k + jP + f·P)``, ``φ_k ~ U[0, P)`` from ``rng``."""
    phases = rng.uniform(0.0, period, size=clients)
    schedule = Diurnal(phases, phases + online_fraction * period, period)
    if online_fraction >= 1.0:
        schedule.always[:] = True  # no round-off gap between consecutive periods
    return schedule


# -- the availability components' builders (asyncfl.components.builtin) ---------------------------
# each build(cfg, ctx: FleetContext) -> Schedule | None
def always(cfg: None, ctx: Any) -> None:
    """Every client always online: no schedule."""
    return None


def build_diurnal(cfg: Any, ctx: Any) -> Diurnal:
    """:func:`diurnal` with the config's ``period`` and ``online_fraction``, for ``ctx.clients``
    clients, from the ``availability`` stream."""
    return diurnal(ctx.clients, cfg.period, cfg.online_fraction, ctx.stream("availability"))
