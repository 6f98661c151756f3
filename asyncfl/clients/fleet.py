"""Who is dispatched, how long a job takes, and when clients are online (docs/architecture.md §2, docs/protocol.md;
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
from typing import Callable, NamedTuple

import numpy as np

from asyncfl.clients.availability import Schedule
from asyncfl.clients.latency import LatencySampler
from asyncfl.clients.participation import Participation
from asyncfl.clients.profiles import ClientProfile, ClientProfiles
from asyncfl.config.sections import PopulationConfig


def draw_speeds(pop: PopulationConfig, rng: np.random.Generator) -> np.ndarray:
    """``speed_k = exp(σ z_k)`` (``σ = speed_sigma``), times ``slow_factor`` for the
    ``round(slow_fraction × N)`` clients of a uniform random permutation's head. Eight bytes a
    client (docs/architecture.md §10): the same float64 operations as ``exp(σ · z)``, done in place."""
    n = pop.clients
    if pop.speed_sigma > 0:
        speeds = rng.standard_normal(n)  # computed in place: one array of N float64, no temporaries
        speeds *= pop.speed_sigma
        np.exp(speeds, out=speeds)
    else:
        speeds = np.ones(n)
    slow = int(round(pop.slow_fraction * n))
    if slow > 0:
        speeds[rng.permutation(n)[:slow]] *= pop.slow_factor
    return speeds


class FleetState(NamedTuple):
    """The fleet's state as data (docs/architecture.md §5): which clients are training."""

    busy: np.ndarray


class Fleet:
    """The client population: speeds, latency draws, availability and idle-client selection.

    ``busy[k]`` is True while client ``k`` trains. Selection is uniform over idle, online
    clients and consumes the ``selection`` stream only. A job's latency is ``speed_k ×
    draw(rng)`` with ``draw`` the scenario's latency model bound to its config
    (the latency component's product, mode ``draw``), or the client's fixed ``job_latency[k]``
    (FedScale); give one of them. ``availability`` None = always online.

    ``participation`` (private runs; set by the simulation) further restricts selection to the
    clients it calls eligible: none with an undecided upload, none at its participation cap
    (:mod:`asyncfl.clients.participation`, docs/privacy.md §6). Its state is the simulation's.
    """

    participation: Participation | None = None

    def __init__(
        self,
        population: PopulationConfig,
        streams: dict[str, np.random.Generator],
        *,
        draw: LatencySampler | None = None,
        job_latency: np.ndarray | None = None,
        availability: Schedule | None = None,
        client_draw: Callable[[np.random.Generator, ClientProfile], float] | None = None,
        profiles: ClientProfiles | None = None,
        speeds: np.ndarray | None = None,
    ) -> None:
        if sum(x is not None for x in (draw, job_latency, client_draw)) != 1:
            raise ValueError("Fleet needs exactly one of draw (a latency model), job_latency (fixed latencies) "
                             "and client_draw (a model that sees its client)")
        pop = population
        self.size = pop.clients
        # the speeds drawn once from the speed stream (given: already drawn for the clients' profiles)
        self.speeds = profiles.speeds if profiles is not None else speeds if speeds is not None else draw_speeds(pop, streams["speed"])
        self.job_latency = job_latency
        if draw is not None:
            self._draw = draw
        if client_draw is not None:
            assert profiles is not None
            self._client_draw, self.profiles = client_draw, profiles
            self.latency = self._client_latency  # type: ignore[method-assign]
        self.availability = availability
        self.busy = np.zeros(pop.clients, dtype=bool)

    def state(self) -> FleetState:
        """The fleet's state: who is training. Speeds and availability are configuration,
        rebuilt from the scenario and its seed."""
        return FleetState(self.busy.copy())

    def restore(self, state: FleetState) -> None:
        self.busy = state.busy.copy()

    def latency(self, client: int, now: float, rng: np.random.Generator) -> float:
        """``speed_k × draw`` (virtual time units), or the client's fixed latency."""
        if self.job_latency is not None:
            return float(self.job_latency[client])
        return float(self.speeds[client]) * self._draw(rng)

    def _client_latency(self, client: int, now: float, rng: np.random.Generator) -> float:
        """A model that sees its client: ``draw(cfg, rng, profile_k)``, the job's latency itself."""
        return float(self._client_draw(rng, self.profiles[client]))

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
        times = self.availability.next_online_all(now)[self._idle()]  # every client at once, no Python loop
        return float(times.min()) if times.size else math.inf

    def explain_stall(self, now: float, steps_done: int, total_steps: int) -> str | None:
        """Why nothing can happen any more (None: no explanation)."""
        if self.availability is not None:
            return f"no client comes online after virtual time {now:g} (the availability schedule has ended)"
        return None

    # -- selection ------------------------------------------------------------------------------
    def _idle(self) -> np.ndarray:
        """Clients that may be dispatched if online: not training, and eligible under the
        participation rules of a private run."""
        idle = ~self.busy
        if self.participation is not None:
            idle &= self.participation.eligible_mask()
        return idle

    def choose(self, now: float, rng: np.random.Generator) -> int | None:
        """One idle, eligible, available client chosen uniformly, or None if there is none."""
        ledger, busy, size = self.participation, self.busy, self.size
        # everyone is always online unless an availability model or a subclass says otherwise
        online = None if self.availability is None and type(self).available is Fleet.available else self.available
        for _ in range(32):  # rejection sampling: O(1) when few clients are busy
            k = int(rng.integers(size))
            if not busy[k] and (ledger is None or ledger.eligible(k)) and (online is None or online(k, now)):
                return k
        candidates = self.candidates(now)
        return int(rng.choice(candidates)) if candidates.size else None

    def choose_many(self, count: int, now: float, rng: np.random.Generator) -> np.ndarray:
        """``count`` distinct idle, eligible, available clients (fewer if not enough), uniformly."""
        candidates = self.candidates(now)
        if candidates.size <= count:
            return candidates
        return np.sort(rng.choice(candidates, size=count, replace=False))

    def candidates(self, now: float) -> np.ndarray:
        """Idle, eligible, available clients. A subclass that overrides :meth:`available` is asked
        per client; the built-in availability models answer for all clients at once."""
        idle = self._idle()
        if self.availability is not None:
            idle &= self.availability.online_mask(now)
        found = np.flatnonzero(idle)
        if type(self).available is not Fleet.available:
            found = np.array([k for k in found if self.available(int(k), now)], dtype=np.int64)
        return found
