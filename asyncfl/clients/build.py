"""The fleet a scenario describes (docs/protocol.md §4–6): distributions, FedScale device
profiles or a replayed trace, with the population's availability model."""

from __future__ import annotations

from typing import Any

import numpy as np

from asyncfl.clients import fedscale
from asyncfl.clients.availability import Schedule, diurnal
from asyncfl.clients.fleet import Fleet
from asyncfl.clients.latency import LatencySampler, sampler
from asyncfl.clients.replay import ReplayFleet
from asyncfl.config import scenario as sc
from asyncfl.config.registries import LATENCIES


def build_fleet(scenario: sc.Scenario, streams: dict[str, np.random.Generator], task: Any = None) -> Fleet:
    """A :class:`ReplayFleet` for ``latency.dist = "trace"``; otherwise a :class:`Fleet` whose
    latencies are FedScale device profiles (``"fedscale"``, which needs the task's sample counts
    and model size) or ``speed × draw``, with the population's availability."""
    if isinstance(scenario.latency, sc.TraceLatency):
        return ReplayFleet(scenario, streams)
    availability = build_availability(scenario, streams)
    if isinstance(scenario.latency, sc.FedScaleLatency):
        if task is None:
            raise ValueError("latency.dist = 'fedscale' needs the task (sample counts and model size)")
        return Fleet(scenario, streams, job_latency=fedscale.task_latencies(scenario, task), availability=availability)
    return Fleet(scenario, streams, draw=latency_sampler(scenario), availability=availability)


def latency_sampler(scenario: sc.Scenario) -> LatencySampler:
    """The scenario's latency model (``latency.dist`` in
    :data:`~asyncfl.config.registries.LATENCIES`) bound to its ``[latency]`` section."""
    return sampler(LATENCIES.load(scenario.latency.dist), scenario.latency)


def build_availability(scenario: sc.Scenario, streams: dict[str, np.random.Generator]) -> Schedule | None:
    """``None`` (always online), the diurnal schedule (phases from the ``availability``
    stream), or a FedScale availability trace."""
    pop = scenario.population
    if pop.availability == "always":
        return None
    if pop.availability == "diurnal":
        return diurnal(pop.clients, pop.period, pop.online_fraction, streams["availability"])
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
