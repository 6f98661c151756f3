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
"""

from __future__ import annotations

import math

from typing import Any

import numpy as np


class Schedule:
    """Online windows of every client. ``starts[k]``/``ends[k]``: sorted, disjoint windows;
    ``period``: one repeat period for all clients, a list with one per client (None: the
    client's windows do not repeat), or None."""

    def __init__(self, starts: list[np.ndarray], ends: list[np.ndarray], period: float | list[float | None] | None) -> None:
        self.periods = list(period) if isinstance(period, list) else [period] * len(starts)
        self.starts: list[np.ndarray] = []
        self.ends: list[np.ndarray] = []
        self.always = np.zeros(len(starts), dtype=bool)
        for k, (a, b) in enumerate(zip(starts, ends)):
            a, b = _merge(np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64))
            self.starts.append(a)
            self.ends.append(b)
            p = self.periods[k]
            if p is not None and a.size and float((b - a).sum()) >= p:
                self.always[k] = True  # the windows cover a whole period
        self.size = len(self.starts)

    # -- the three questions the fleet asks -------------------------------------------------
    def online(self, k: int, x: float) -> bool:
        """Is client ``k`` online at time ``x``?"""
        return self.always[k] or self._window_end(k, x) is not None

    def offline_time(self, k: int, x: float) -> float:
        """First time ``≥ x`` at which client ``k`` is offline (``x`` itself when it is offline
        at ``x``; ``inf`` when it never goes offline)."""
        if self.always[k]:
            return math.inf
        t = x
        for _ in range(self.starts[k].size + 3):  # each hop moves to the end of another window
            end = self._window_end(k, t)
            if end is None:
                return t
            t = end
        return math.inf

    def next_online(self, k: int, x: float) -> float:
        """The first window start strictly after ``x`` (``inf`` if there is none)."""
        a = self.starts[k]
        if self.always[k] or a.size == 0:
            return math.inf
        best = math.inf
        for shift in self._shifts(k, x, extra=2):
            s = a + shift
            i = int(np.searchsorted(s, x, side="right"))
            if i < s.size:
                best = min(best, float(s[i]))
        return best

    def online_mask(self, x: float) -> np.ndarray:
        return np.fromiter((self.online(k, x) for k in range(self.size)), dtype=bool, count=self.size)

    # ---------------------------------------------------------------------------------------
    def _shifts(self, k: int, x: float, extra: int = 1) -> list[float]:
        period = self.periods[k]
        if period is None:
            return [0.0]
        j = math.floor(x / period)
        return [(j + d) * period for d in range(-1, 1 + extra)]

    def _window_end(self, k: int, x: float) -> float | None:
        """End of the window containing ``x``, or None."""
        a, b = self.starts[k], self.ends[k]
        if a.size == 0:
            return None
        for shift in self._shifts(k, x):
            s = a + shift
            i = int(np.searchsorted(s, x, side="right")) - 1
            if i >= 0:
                e = float(b[i] + shift)
                if x < e:
                    return e
        return None


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


def diurnal(clients: int, period: float, online_fraction: float, rng: np.random.Generator) -> Schedule:
    """Client ``k`` online on ``[φ_k + jP, φ_k + jP + f·P)``, ``φ_k ~ U[0, P)`` from ``rng``."""
    phases = rng.uniform(0.0, period, size=clients)
    starts = [np.array([p]) for p in phases]
    ends = [np.array([p + online_fraction * period]) for p in phases]
    schedule = Schedule(starts, ends, period)
    if online_fraction >= 1.0:
        schedule.always[:] = True  # no round-off gap between consecutive periods
    return schedule


# -- the availability components' builders (asyncfl.components.builtin) ---------------------------
def always(cfg: None, clients: int, rng: np.random.Generator, seconds_per_unit: float) -> None:
    """Every client always online: no schedule."""
    return None


def build_diurnal(cfg: Any, clients: int, rng: np.random.Generator, seconds_per_unit: float) -> Schedule:
    """:func:`diurnal` with the config's ``period`` and ``online_fraction``."""
    return diurnal(clients, cfg.period, cfg.online_fraction, rng)
