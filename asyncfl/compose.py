"""The composition root (docs/architecture.md §4): :func:`compose` turns a validated scenario
into the finished :class:`~asyncfl.sim.parts.Parts` of a run, in one place.

Every component is built here, and only here, by its builder of the one shape ``build(cfg, ctx)``
(:mod:`asyncfl.components.contracts`) with its own config: the task, the fleet (its latency and
availability models), the server rule and the algorithm over its aggregator (exact, or private
with the mechanism's setup), the protocol, the update hook, the local solver and the executor.
The random streams are made here too, so parts that draw share the run's streams. The device
``run.device`` names is resolved here (:mod:`asyncfl.compute.device`): the task is placed on it,
and the algorithm, the aggregator and the executor compute where the task's tensors are; the
streams stay on the CPU. ``run.precision`` reaches local training the same way, through the
executor's context: its solver is wrapped to train at that precision
(:mod:`asyncfl.compute.precision`), and a precision the task or device cannot take is refused
here. Everything below this module receives objects; nothing below it reads
a whole scenario.

Overrides replace a built part (``compose(sc, task=my_task)``, ``fleet=...``, ``availability=...``
(a schedule, or None), ``algorithm=...``, ``executor=...``): what a test or a user's own
composition injects, through the same path; a :class:`~asyncfl.sim.parts.Parts` may also be
changed before it is handed to the engine.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
from typing import Any, Callable

import numpy as np
import torch

from asyncfl import rng as rngmod
from asyncfl.clients.availability import Schedule
from asyncfl.clients.context import FleetContext
from asyncfl.clients.fleet import Fleet, draw_speeds
from asyncfl.clients.profiles import ClientProfiles, sample_counts
from asyncfl.components.contracts import BuildContext
from asyncfl.compute import device as devices
from asyncfl.config.batching import BatchedChoice, batched_problems, choose_batched
from asyncfl.compute.executors import Executor, ExecutorContext, TaskRecipe
from asyncfl.compute.precision import at_precision, bf16_supported, precision_problems
from asyncfl.compute.solvers import LocalSolver
from asyncfl.compute.training import LocalJob
from asyncfl.config import checks
from asyncfl.config.memory import check_device_memory, check_memory
from asyncfl.config.registries import EXECUTORS, SOLVERS
from asyncfl.config.scenario import ClientConfig, Scenario, one_upload_per_client
from asyncfl.errors import ScenarioError
from asyncfl.server.aggregation import Aggregator, ExactAggregator
from asyncfl.server.algorithms import Algorithm, AlgorithmContext
from asyncfl.server.rules import ServerRule
from asyncfl.records import Sink
from asyncfl import privacy  # cheap: scipy and dp-accounting load where accounting first needs them
from asyncfl.privacy.dispatch import ledger_terms
from asyncfl.sim.engine import Simulation
from asyncfl.sim.parts import ParticipationRule, Parts, RunSettings
from asyncfl.tasks.base import Task

#: the parts :func:`compose` accepts as overrides
OVERRIDES = ("task", "fleet", "availability", "algorithm", "executor")


def compose(scenario: Scenario, **overrides: Any) -> Parts:
    """The parts of a run of ``scenario`` (``overrides``: built parts that replace the scenario's,
    :data:`OVERRIDES`). The memory estimate is checked before the task is built, so a scenario
    that cannot fit is refused before it allocates (docs/architecture.md §8)."""
    unknown = sorted(set(overrides) - set(OVERRIDES))
    if unknown:
        raise TypeError(f"compose(): unknown overrides {unknown}; allowed: {', '.join(OVERRIDES)}")
    device = devices.resolve(scenario.run.device)  # an absent device is refused before anything is built
    devices.refuse_unsupported(device, private=scenario.privacy.enabled)
    devices.prepare(device)
    ctx = context(scenario)
    # a task is a function of its config, clients and seed alone: its builder sees no run stream
    # (ctx.stream derives one from the seed and a name), the same context a worker rebuilds it with
    task_ctx = ctx.with_(streams={})
    task = overrides.get("task")
    task_built = task is None
    if task is None:
        check_memory(scenario)
        check_device_memory(scenario, devices.device_memory(device), str(device))
        task = scenario.component("task").make(scenario.task, task_ctx)
    task = devices.place_task(task, device)
    refuse_precision(scenario, task)
    ctx = ctx.with_(task=task)
    streams = dict(ctx.streams)
    private_setup, aggregator = private_aggregator(scenario, task.dim) if scenario.privacy.enabled else (None, None)
    algorithm = overrides.get("algorithm")
    if algorithm is None:
        algorithm = build_algorithm(scenario, ctx, aggregator)
    fleet = overrides.get("fleet")
    if fleet is None:
        fleet = build_fleet(scenario, ctx, **({"availability": overrides["availability"]} if "availability" in overrides else {}))
    protocol = scenario.component("protocol").make(scenario.config_of("protocol"), ctx)
    hook = scenario.component("hook").make(scenario.config_of("hook"), ctx)
    recipe = TaskRecipe(scenario.component("task").builder(), scenario.task, task_ctx) if task_built else None
    participation = (_private_participation(private_setup, scenario.seed) if private_setup is not None
                     else ParticipationRule() if one_upload_per_client(scenario) else None)
    return Parts(
        task=task, fleet=fleet, algorithm=algorithm, protocol=protocol, hook=hook, settings=settings(scenario, task),
        streams=streams, make_executor=executor_factory(scenario, task, recipe),
        executor=overrides.get("executor"), privacy_setup=private_setup,
        private_aggregator=aggregator if private_setup is not None else None,
        participation=participation,
    )


def _private_participation(setup: privacy.PrivacySetup, seed: int) -> ParticipationRule:
    """The participation ledger of a private run (its cap, separation and allotment)."""
    return ParticipationRule(*ledger_terms(setup, seed))


def build_simulation(scenario: Scenario, *, sink: Sink | None = None, **overrides: Any) -> Simulation:
    """A simulation of ``scenario``: ``Simulation(compose(scenario, **overrides), sink=sink)``."""
    return Simulation(compose(scenario, **overrides), sink=sink)


def run_blocking(scenario: Scenario, **kwargs: Any) -> Simulation:
    """Run ``scenario`` to the end from synchronous code (``kwargs``: :func:`build_simulation`'s);
    returns the finished simulation."""
    sim = build_simulation(scenario, **kwargs)
    asyncio.run(sim.run())
    return sim


def context(scenario: Scenario, streams: dict[str, np.random.Generator] | None = None) -> BuildContext:
    """The common build context of ``scenario``: clients, seed, steps, buffer, the protocol's
    in-flight bound and staleness, and the run's random streams (fresh from the seed unless
    given)."""
    server, protocol = scenario.server, scenario.component("protocol")
    stale = protocol.traits.stale
    return BuildContext(
        clients=scenario.population.clients, seed=scenario.seed, steps=scenario.run.steps, buffer=server.buffer,
        in_flight=getattr(server, protocol.traits.in_flight_key), stale=stale,
        max_staleness=server.max_staleness if stale else 0,
        streams=rngmod.make_streams(scenario.seed) if streams is None else streams,
    )


def settings(scenario: Scenario, task: Task | None = None) -> RunSettings:
    """What the engine reads of the scenario besides its parts (``task``: the built task, placed
    on the run's device; None: on the CPU)."""
    server, run = scenario.server, scenario.run
    return RunSettings(
        name=scenario.name, protocol=server.protocol, algorithm=server.algorithm,
        rule=server.rule if scenario.component("algorithm").traits.uses_rule else None,
        task=scenario.task.name, clients=scenario.population.clients, buffer=server.buffer,
        stale=scenario.component("protocol").traits.stale, drops=scenario.component("protocol").traits.drops,
        staleness_columns=num_staleness(scenario), steps=run.steps, eval_every=run.eval_every,
        max_update_norm=run.max_update_norm, train_loss=run.train_loss, torch_threads=run.torch_threads,
        divergence_loss=run.divergence_loss, divergence_factor=run.divergence_factor,
        batched=batched_choice(scenario, task), device=_device_name(task), precision=run.precision,
    )


def batched_choice(scenario: Scenario, task: Task | None = None) -> BatchedChoice:
    """Batched or job by job for ``scenario`` (``run.batched``; ``"auto"`` resolved from the
    executor's, the solver's and the task's traits, the device ``task`` is placed on and its
    ``batched_on_accelerator``, by :func:`asyncfl.config.batching.choose_batched`; no task: the CPU)."""
    return choose_batched(scenario.run.batched, scenario.component("executor").traits,
                          scenario.component("solver").traits, scenario.component("task").traits,
                          device=_device_name(task),
                          batched_on_accelerator=True if task is None else task.batched_on_accelerator)


def _device_name(task: Task | None) -> str:
    """The resolved device the run computes on: ``task``'s (where compose placed it), or the CPU."""
    return "cpu" if task is None else str(devices.device_of(task))


def refuse_precision(scenario: Scenario, task: Task) -> None:
    """Refuse ``run.precision`` where it makes no sense for ``task`` on its device
    (:func:`asyncfl.compute.precision.precision_problems`): a :class:`ScenarioError`, exit 2."""
    precision = scenario.run.precision
    if precision == "fp32":  # the default asks torch nothing
        return
    device = devices.device_of(task)
    problems = precision_problems(precision, task=scenario.task.name, dtype=task.dtype, device=str(device),
                                  bf16=bf16_supported(device))
    if problems:
        raise ScenarioError(problems)


def num_staleness(scenario: Scenario) -> int | None:
    """``L = max_staleness + 1`` (None when unbounded; 1 for a protocol whose uploads are never
    stale, such as sync)."""
    if not scenario.component("protocol").traits.stale:
        return 1
    ms = scenario.server.max_staleness
    return None if ms is None else ms + 1


# -- the server side -----------------------------------------------------------------------------
def private_aggregator(scenario: Scenario, dim: int | None = None) -> tuple[privacy.PrivacySetup, Aggregator]:
    """``(PrivacySetup, PrivateAggregator)`` of a ``[privacy]`` run (σ calibrated and a correlated
    noise strategy optimised here; ``dim``: the upload's length, sizing the noise buffers)."""
    server = scenario.server
    return privacy.build_privacy(
        scenario.privacy, server.buffer, scenario.population.clients, scenario.run.steps,
        server.max_staleness if scenario.component("protocol").traits.stale else 0, server.staleness_exponent,
        protocol=server.protocol, noise_beta=checks.noise_beta(scenario), dim=dim,
    )


def build_rule(scenario: Scenario, ctx: BuildContext | None = None) -> ServerRule:
    """The rule ``server.rule`` names, built from its own config."""
    return scenario.component("rule").make(scenario.config_of("rule"), context(scenario, {}) if ctx is None else ctx)


def build_algorithm(scenario: Scenario, ctx: BuildContext, aggregator: Aggregator | None = None) -> Algorithm:
    """The algorithm ``server.algorithm`` names over ``aggregator`` (default: exact), built from
    its own config and an :class:`AlgorithmContext` (the clients, ``client.mu``, ``server.lr``,
    the aggregator, the rule, the task, ``client.local_steps``, ``run.eval_every``, ``run.steps``)."""
    if aggregator is None:
        aggregator = ExactAggregator(scenario.server.staleness_exponent, num_staleness(scenario))
    clients = ctx.task.num_clients if ctx.task is not None else ctx.clients
    algo_ctx = AlgorithmContext(clients, scenario.client.mu, scenario.server.lr, aggregator,
                                build_rule(scenario, ctx), ctx.task, scenario.client.local_steps,
                                scenario.run.eval_every, scenario.run.steps)
    return scenario.component("algorithm").make(scenario.config_of("algorithm"), algo_ctx)


# -- the fleet -----------------------------------------------------------------------------------
def fleet_context(scenario: Scenario, ctx: BuildContext) -> FleetContext:
    """The latency and availability components' context."""
    return FleetContext(**{f: getattr(ctx, f) for f in BuildContext.__dataclass_fields__},
                        client=scenario.client, local_work=scenario.component("solver").traits.local_work,
                        seconds_per_unit=availability_seconds_per_unit(scenario))


def build_fleet(scenario: Scenario, ctx: BuildContext, **availability: Schedule | None) -> Fleet:
    """The latency component's fleet: a replaying fleet (mode ``replay``: the product is the
    fleet), a :class:`Fleet` with a fixed job latency per client (``profiles``: from the task), one
    drawing ``speed × draw`` per job (``draw``), or one asking the model for each job given the
    client's static profile (``client``: the product is ``(rng, client) -> latency``); with the
    population's availability (or the ``availability=`` given), whose builder sees the clients'
    profiles (``ctx.profiles``) when it declares ``sees_clients``. The profiles' speeds are the
    fleet's own, drawn once from the ``speed`` stream."""
    latency = scenario.component("latency")
    fctx = fleet_context(scenario, ctx)
    mode = latency.traits.mode
    if mode == "replay":
        return latency.make(scenario.latency, fctx)
    profiles = None
    if mode == "client" or scenario.component("availability").traits.sees_clients:
        profiles = ClientProfiles(draw_speeds(scenario.population, fctx.streams["speed"]), sample_counts(ctx.task))
        fctx = dataclasses.replace(fctx, profiles=profiles)
    availability = availability["availability"] if "availability" in availability else build_availability(scenario, fctx)
    speeds = None if profiles is None else profiles.speeds
    if mode == "profiles":
        return Fleet(scenario.population, fctx.streams, job_latency=latency.make(scenario.latency, fctx),
                     availability=availability, speeds=speeds)
    if mode == "client":
        return Fleet(scenario.population, fctx.streams, client_draw=latency.make(scenario.latency, fctx),
                     profiles=profiles, availability=availability)
    return Fleet(scenario.population, fctx.streams, draw=latency.make(scenario.latency, fctx), availability=availability,
                 speeds=speeds)


def build_availability(scenario: Scenario, ctx: FleetContext) -> Schedule | None:
    """The availability component's schedule (None: always online), drawn from the
    ``availability`` stream; a model that sees its clients finds their profiles in
    ``ctx.profiles``."""
    return scenario.component("availability").make(scenario.config_of("availability"), ctx)


def availability_seconds_per_unit(scenario: Scenario) -> float:
    """Seconds of an availability trace per unit of virtual time: ``availability_time_unit_ms``,
    else the latency model's ``time_unit_ms`` (FedScale profiles), else 1 s."""
    own = getattr(scenario.population, "availability_time_unit_ms", None)
    if own is not None:
        return own / 1000.0
    unit = getattr(scenario.latency, "time_unit_ms", None)
    return 1.0 if unit is None else unit / 1000.0


# -- local training ------------------------------------------------------------------------------
def build_solver(scenario: Scenario) -> LocalSolver:
    """The local solver ``client.solver`` names."""
    return solver_of(scenario.client)


def solver_of(client: ClientConfig) -> LocalSolver:
    """The local solver the ``[client]`` section names (its product needs no context)."""
    return SOLVERS.make(client.solver)


def local_train(task: Task, client: ClientConfig, job: LocalJob) -> torch.Tensor:
    """One job trained by the solver ``client.solver`` names, here (docs/tasks.md §8)."""
    return solver_of(client).train(task, client, job)


def train_batched(task: Task, client: ClientConfig, jobs: list[LocalJob]) -> list[torch.Tensor]:
    """The jobs of one model version trained together by the named solver."""
    return solver_of(client).train_batched(task, client, jobs)


def build_executor(scenario: Scenario, task: Task, recipe: TaskRecipe | None = None) -> Executor:
    """The executor ``run.executor`` names, training with the solver ``client.solver`` names
    (``recipe``: how process and Ray workers rebuild the task instead of receiving its data)."""
    return executor_factory(scenario, task, recipe)()


def executor_factory(scenario: Scenario, task: Task, recipe: TaskRecipe | None = None) -> Callable[[], Executor]:
    """A function that builds the executor :func:`build_executor` describes (the engine calls it
    when the run starts: workers are started only then). The executor's contract is checked
    now."""
    run = scenario.run
    if run.executor not in EXECUTORS:
        raise ScenarioError([EXECUTORS.unknown(run.executor)])
    executor = scenario.component("executor")
    problems = batched_problems(run.batched, run.executor, executor.traits, [e.name for e in EXECUTORS if e.traits.batched],
                                scenario.client.solver, scenario.component("solver").traits)
    if problems:
        raise ScenarioError(problems)
    # the executors read the path the run takes (a bool), never the request
    run = run.model_copy(update={"batched": batched_choice(scenario, task).batched})
    device = _device_name(task)  # where compose placed the task
    ectx = ExecutorContext(task, scenario.client, at_precision(build_solver(scenario), run.precision), run,
                           recipe, device)
    return functools.partial(executor.make, None, ectx)
