"""Who is dispatched, how long a job takes, and when clients are online (DESIGN.md §2–3;
STYLE: FLSim timing).

A client's job latency is its speed multiplier times a draw from the scenario's latency
distribution (registered by the name used in ``[latency] dist``). Speed multipliers are drawn
once per client from the ``speed`` stream: ``LogNormal(0, speed_sigma)``, and with
``slow_fraction > 0`` a uniformly chosen set of ``round(slow_fraction × N)`` clients is slowed
by the factor ``slow_factor`` (a bimodal fleet). FedScale device profiles give each client a
fixed latency instead (``asyncfl.clients.fedscale``); a recorded trace replaces selection and latency
altogether (``asyncfl.clients.replay``).

Availability (``asyncfl.clients.availability``): an offline client is never dispatched; a client that
goes offline before its upload arrives drops it. The fleet answers the engine's questions:
:meth:`Fleet.choose`, :meth:`Fleet.schedule` (arrival and offline time of a dispatch),
:meth:`Fleet.next_online` (when to retry when nobody can be dispatched).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from asyncfl.config import scenario as sc
from asyncfl.clients.availability import Schedule, diurnal

LatencySampler = Callable[[np.random.Generator], float]

LATENCY_SAMPLERS: dict[type, Callable[[Any], LatencySampler]] = {
    sc.ConstantLatency: lambda c: (lambda rng: c.value),
    sc.ExponentialLatency: lambda c: (lambda rng: float(rng.exponential(c.mean))),
    sc.HalfNormalLatency: lambda c: (lambda rng: abs(float(rng.normal(0.0, c.scale)))),
    sc.LogNormalLatency: lambda c: (lambda rng: c.median * float(np.exp(c.sigma * rng.standard_normal()))),
    sc.UniformLatency: lambda c: (lambda rng: float(rng.uniform(c.low, c.high))),
    # Pareto (type I): scale × (1 + Lomax(shape)) ≥ scale; infinite mean when shape ≤ 1.
    sc.ParetoLatency: lambda c: (lambda rng: c.scale * (1.0 + float(rng.pareto(c.shape)))),
}


def draw_speeds(pop: sc.PopulationConfig, rng: np.random.Generator) -> np.ndarray:
    """``speed_k = exp(σ z_k)`` (``σ = speed_sigma``), times ``slow_factor`` for the
    ``round(slow_fraction × N)`` clients of a uniform random permutation's head."""
    n = pop.clients
    speeds = np.exp(pop.speed_sigma * rng.standard_normal(n)) if pop.speed_sigma > 0 else np.ones(n)
    slow = int(round(pop.slow_fraction * n))
    if slow > 0:
        speeds[rng.permutation(n)[:slow]] *= pop.slow_factor
    return speeds


class Fleet:
    """The client population: speeds, latency draws, availability and idle-client selection.

    ``busy[k]`` is True while client ``k`` trains. Selection is uniform over idle, online
    clients and consumes the ``selection`` stream only. ``job_latency`` (optional) replaces
    ``speed × draw`` by a per-client latency (FedScale); ``availability`` None = always online.
    """

    def __init__(
        self,
        scenario: sc.Scenario,
        streams: dict[str, np.random.Generator],
        *,
        job_latency: np.ndarray | None = None,
        availability: Schedule | None = None,
    ) -> None:
        pop = scenario.population
        self.size = pop.clients
        self.speeds = draw_speeds(pop, streams["speed"])
        self.job_latency = job_latency
        if job_latency is None:
            factory = LATENCY_SAMPLERS.get(type(scenario.latency))
            if factory is None:
                raise NotImplementedError(f"latency.dist = {scenario.latency.dist!r} is not supported by this Fleet")
            self._draw = factory(scenario.latency)
        self.availability = availability
        self.busy = np.zeros(pop.clients, dtype=bool)

    def latency(self, client: int, now: float, rng: np.random.Generator) -> float:
        """``speed_k × draw`` (virtual time units), or the client's fixed latency."""
        if self.job_latency is not None:
            return float(self.job_latency[client])
        return float(self.speeds[client]) * self._draw(rng)

    def schedule(self, client: int, now: float, rng: np.random.Generator) -> tuple[float, float]:
        """``(arrival_time, offline_time)`` of a job dispatched to ``client`` at ``now``: the
        upload arrives at ``now + latency`` unless the client goes offline strictly before,
        at ``offline_time`` (``inf``: it stays online)."""
        arrival = now + self.latency(client, now, rng)
        return arrival, self.offline_time(client, now)

    # -- availability ---------------------------------------------------------------------------
    def available(self, client: int, now: float) -> bool:
        return self.availability is None or self.availability.online(client, now)

    def offline_time(self, client: int, now: float) -> float:
        return math.inf if self.availability is None else self.availability.offline_time(client, now)

    def next_online(self, now: float) -> float:
        """Earliest time after ``now`` at which an idle client comes online (``inf``: never)."""
        if self.availability is None:
            return math.inf
        idle = np.flatnonzero(~self.busy)
        return min((self.availability.next_online(int(k), now) for k in idle), default=math.inf)

    def explain_stall(self, now: float, steps_done: int, total_steps: int) -> str | None:
        """Why nothing can happen any more (None: no explanation)."""
        if self.availability is not None:
            return f"no client comes online after virtual time {now:g} (the availability schedule has ended)"
        return None

    # -- selection ------------------------------------------------------------------------------
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
        """Idle, available clients. A subclass that overrides :meth:`available` is asked per
        client; the built-in availability models answer for all clients at once."""
        idle = ~self.busy
        if self.availability is not None:
            idle &= self.availability.online_mask(now)
        found = np.flatnonzero(idle)
        if type(self).available is not Fleet.available:
            found = np.array([k for k in found if self.available(int(k), now)], dtype=np.int64)
        return found


def build_fleet(scenario: sc.Scenario, streams: dict[str, np.random.Generator], task: Any = None) -> Fleet:
    """The fleet a scenario describes: a replayed trace, FedScale devices, or distributions;
    with the population's availability model."""
    if isinstance(scenario.latency, sc.TraceLatency):
        from asyncfl.clients.replay import ReplayFleet

        return ReplayFleet(scenario, streams)
    job_latency = None
    if isinstance(scenario.latency, sc.FedScaleLatency):
        if task is None:
            raise ValueError("latency.dist = 'fedscale' needs the task (sample counts and model size)")
        from asyncfl.clients import fedscale

        job_latency = fedscale.task_latencies(scenario, task)
    return Fleet(scenario, streams, job_latency=job_latency, availability=build_availability(scenario, streams))


def build_availability(scenario: sc.Scenario, streams: dict[str, np.random.Generator]) -> Schedule | None:
    pop = scenario.population
    if pop.availability == "always":
        return None
    if pop.availability == "diurnal":
        return diurnal(pop.clients, pop.period, pop.online_fraction, streams["availability"])
    from asyncfl.clients import fedscale

    assert pop.availability_file is not None
    trace = fedscale.load_availability(pop.availability_file)
    return trace.schedule(pop.clients, availability_seconds_per_unit(scenario))


def availability_seconds_per_unit(scenario: sc.Scenario) -> float:
    """Seconds of an availability trace per unit of virtual time: ``availability_time_unit_ms``,
    else the FedScale latency's ``time_unit_ms``, else 1 s."""
    pop = scenario.population
    if pop.availability_time_unit_ms is not None:
        return pop.availability_time_unit_ms / 1000.0
    if isinstance(scenario.latency, sc.FedScaleLatency):
        return scenario.latency.time_unit_ms / 1000.0
    return 1.0
