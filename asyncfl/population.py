"""Who is dispatched and how long a job takes (DESIGN.md §2–3; STYLE: FLSim timing).

A client's job latency is its speed multiplier (drawn once, ``LogNormal(0, speed_sigma)``)
times a draw from the scenario's latency distribution. Latency distributions are registered by
the name used in ``[latency] dist``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from asyncfl import scenario as sc

LatencySampler = Callable[[np.random.Generator], float]

LATENCY_SAMPLERS: dict[type, Callable[[object], LatencySampler]] = {
    sc.ConstantLatency: lambda c: (lambda rng: c.value),
    sc.ExponentialLatency: lambda c: (lambda rng: float(rng.exponential(c.mean))),
    sc.HalfNormalLatency: lambda c: (lambda rng: abs(float(rng.normal(0.0, c.scale)))),
    sc.LogNormalLatency: lambda c: (lambda rng: c.median * float(np.exp(c.sigma * rng.standard_normal()))),
    sc.UniformLatency: lambda c: (lambda rng: float(rng.uniform(c.low, c.high))),
}


class Fleet:
    """The client population: speeds, latency draws, availability and idle-client selection.

    ``busy[k]`` is True while client ``k`` trains. Selection is uniform over idle, available
    clients and consumes the ``selection`` stream only.
    """

    def __init__(self, scenario: sc.Scenario, streams: dict[str, np.random.Generator]) -> None:
        pop = scenario.population
        self.size = pop.clients
        self.speeds = (
            np.exp(pop.speed_sigma * streams["speed"].standard_normal(pop.clients))
            if pop.speed_sigma > 0
            else np.ones(pop.clients)
        )
        factory = LATENCY_SAMPLERS.get(type(scenario.latency))
        if factory is None:
            raise NotImplementedError(f"latency.dist = {scenario.latency.dist!r} is not supported by this Fleet")
        self._draw = factory(scenario.latency)
        self.busy = np.zeros(pop.clients, dtype=bool)

    def latency(self, client: int, now: float, rng: np.random.Generator) -> float:
        """``speed_k × draw`` (virtual time units)."""
        return float(self.speeds[client]) * self._draw(rng)

    def available(self, client: int, now: float) -> bool:
        return True

    def choose(self, now: float, rng: np.random.Generator) -> int | None:
        """One idle, available client chosen uniformly, or None if there is none."""
        for _ in range(32):  # rejection sampling: O(1) when few clients are busy
            k = int(rng.integers(self.size))
            if not self.busy[k] and self.available(k, now):
                return k
        candidates = self.candidates(now)
        return int(rng.choice(candidates)) if candidates.size else None

    def choose_many(self, count: int, now: float, rng: np.random.Generator) -> np.ndarray:
        """``count`` distinct idle, available clients (fewer if not enough), uniformly."""
        candidates = self.candidates(now)
        if candidates.size <= count:
            return candidates
        return np.sort(rng.choice(candidates, size=count, replace=False))

    def candidates(self, now: float) -> np.ndarray:
        idle = np.flatnonzero(~self.busy)
        return np.array([k for k in idle if self.available(int(k), now)], dtype=np.int64) if self._gated() else idle

    def _gated(self) -> bool:
        return type(self).available is not Fleet.available
