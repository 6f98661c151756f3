"""The fleet a scenario describes (docs/protocol.md §4–6): its latency model — drawn per job,
fixed per client from device profiles, or a replayed trace (:class:`~asyncfl.components.traits.LatencyTraits`) —
and its availability model."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from asyncfl.clients.availability import Schedule
from asyncfl.clients.fleet import Fleet, draw_speeds
from asyncfl.clients.latency import LatencySampler, sampler
from asyncfl.clients.profiles import ClientProfiles, sample_counts
from asyncfl.config import scenario as sc
from asyncfl.config.files import absolute_file


def build_fleet(scenario: sc.Scenario, streams: dict[str, np.random.Generator], task: Any = None) -> Fleet:
    """The latency component's fleet: a replaying fleet (mode ``replay``: the builder is the fleet
    class), a :class:`Fleet` with a fixed job latency per client (``profiles``: the builder maps
    the scenario and the task to them), one drawing ``speed × draw`` per job (``draw``), or one
    asking the model for each job given the client's static profile (``client``); with the
    population's availability, built from the clients' profiles when it sees its clients. The
    profiles' speeds are the fleet's own (drawn once from the ``speed`` stream)."""
    latency = scenario.component("latency")
    mode = latency.traits.mode
    if mode == "replay":
        return latency.builder()(scenario, streams)
    profiles = None
    if mode == "client" or scenario.component("availability").traits.sees_clients:
        profiles = ClientProfiles(draw_speeds(scenario.population, streams["speed"]), sample_counts(task))
    availability = build_availability(scenario, streams, profiles)
    speeds = None if profiles is None else profiles.speeds
    if mode == "profiles":
        if task is None:
            raise ValueError(f"latency.dist = {scenario.latency.dist!r} needs the task (sample counts and model size)")
        return Fleet(scenario, streams, job_latency=latency.builder()(scenario, task), availability=availability, speeds=speeds)
    if mode == "client":
        assert profiles is not None
        return Fleet(scenario, streams, client_draw=sampler(latency.builder(), scenario.latency), profiles=profiles,
                     availability=availability)
    return Fleet(scenario, streams, draw=latency_sampler(scenario), availability=availability, speeds=speeds)


def latency_sampler(scenario: sc.Scenario) -> LatencySampler:
    """The scenario's latency model bound to its ``[latency]`` section."""
    return sampler(scenario.component("latency").builder(), scenario.latency)


def build_availability(scenario: sc.Scenario, streams: dict[str, np.random.Generator],
                       profiles: ClientProfiles | None = None) -> Schedule | None:
    """The availability component's schedule (None: always online), drawn from the
    ``availability`` stream; a model that sees its clients gets their ``profiles``, the others
    their number."""
    component = scenario.component("availability")
    clients = profiles if component.traits.sees_clients else scenario.population.clients
    return component.builder()(
        scenario.config_of("availability"), clients, streams["availability"], availability_seconds_per_unit(scenario))


def availability_seconds_per_unit(scenario: sc.Scenario) -> float:
    """Seconds of an availability trace per unit of virtual time: ``availability_time_unit_ms``,
    else the latency model's ``time_unit_ms`` (FedScale profiles), else 1 s."""
    own = getattr(scenario.population, "availability_time_unit_ms", None)
    if own is not None:
        return own / 1000.0
    unit = getattr(scenario.latency, "time_unit_ms", None)
    return 1.0 if unit is None else unit / 1000.0


def replay_scenario(scenario: sc.Scenario, file: str | Path, **overrides: object) -> sc.Scenario:
    """``scenario`` with its latency replaced by a replay of ``file`` (speed models and
    availability reset, as the trace holds them), plus dotted-key ``overrides``
    (``{"server.rule": "sgd"}``; naming another component drops the old one's keys, as ``--set``
    does)."""
    raw = scenario.to_dict()
    raw["latency"] = {"dist": "trace", "file": absolute_file(str(file))}
    pop = raw["population"]
    for key in ("speed_sigma", "slow_fraction", "slow_factor"):
        pop.pop(key, None)
    sc.apply_values(raw, [("population.availability", sc.KINDS["availability"].default)])
    sc.apply_values(raw, list(overrides.items()))
    return sc.validate(raw)
