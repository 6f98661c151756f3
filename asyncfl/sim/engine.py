"""The simulator: simpy decides *when*, an executor decides *where*, the algorithm decides
*what* (DESIGN.md §2–3).

Every dispatched client waits its sampled latency on the virtual clock (one simpy timeout,
see :class:`Arrival`) and then uploads. Its training job was submitted to the executor at dispatch and is awaited
only when the buffer flushes, so a run is an asyncio coroutine: :meth:`Simulation.events` is an
async iterator of :class:`StepEvent` (what progress bars and notebooks consume) and
:meth:`Simulation.run` drives it to the end (:func:`run_blocking` for scripts).

Protocols (DESIGN §3):

* **FedBuff** — ``K`` clients in flight; each arrival is buffered (or dropped when its
  staleness ``τ = t − s`` exceeds ``max_staleness``) and immediately replaced by a client that
  receives the current model; after ``C`` accepted arrivals the server steps. FedAsync is
  ``C = 1``.
* **Sync** — each round samples a cohort, waits for its first ``C`` arrivals (``C`` = cohort
  unless over-selected) and steps; the round lasts until the ``C``-th arrival, so sync and
  async runs share one virtual time axis. Stragglers past ``C`` are cancelled ("late").

Availability (``[population] availability``): offline clients are never dispatched; when no
client can be dispatched the protocol waits on the virtual clock until one comes online
(``Fleet.next_online``) and then restores ``K`` (FedBuff) or starts the round (sync). A client
that goes offline before its upload arrives drops it ("offline", counted in
``updates_dropped_offline``), and FedBuff dispatches a replacement at once.
"""

from __future__ import annotations

import asyncio
import math
import time
from dataclasses import dataclass, field
from typing import Any, AsyncIterator, Callable, NamedTuple

import numpy as np
import simpy
import torch

from asyncfl import rng as rngmod
from asyncfl.server.aggregation import Aggregator, ClientUpdate, ExactAggregator
from asyncfl.server.algorithms import Algorithm, PseudoGradient, StepInfo
from asyncfl.errors import NumericalFault, RunInterrupted, SimulationStalled, TraceError
from asyncfl.sim.clock import Arrival
from asyncfl.compute.executors import Executor, make_executor
from asyncfl.clients.fleet import Fleet, build_fleet
from asyncfl.sim.protocols import FedBuffProtocol, SyncProtocol
from asyncfl.server.rules import make_rule
from asyncfl.config.scenario import Scenario
from asyncfl.tensor_checks import all_finite, finite_rows
from asyncfl.tasks.base import Task
from asyncfl.compute.training import LocalJob

MAX_REJECTED_PER_STEP = 1000  # uploads rejected in a row (no step between) before the run stops
UPDATE_FIELDS = ("client", "version", "step", "dispatch_time", "arrival_time", "staleness", "accepted", "reason", "dispatch")


class UpdateRow(NamedTuple):
    """One row of ``updates.csv``: an upload that arrived (or a cancelled straggler)."""

    client: int
    version: int
    step: int
    dispatch_time: float
    arrival_time: float
    staleness: int
    accepted: bool
    reason: str  # "" when accepted; "stale", "late" (cancelled: arrival_time = when), "non-finite", "norm",
    # "offline" (the client went offline while training: arrival_time = when)
    dispatch: int  # the dispatch's sequence number (1, 2, …): trace replay restores this order


@dataclass(slots=True)
class InFlight:
    """A dispatched client: what it trains on, when it will arrive, and its job's future."""

    seq: int
    client: int
    version: int
    dispatch_time: float
    arrival_time: float
    job: LocalJob
    future: "asyncio.Future[torch.Tensor]"
    process: Any = None  # its Arrival on the clock (``interrupt()`` cancels it)
    offline_time: float = math.inf  # the client goes offline then, if before arrival_time

    @property
    def goes_offline(self) -> bool:
        return self.offline_time < self.arrival_time

    @property
    def end_time(self) -> float:
        """When its life on the clock ends: the upload, or going offline first."""
        return self.offline_time if self.goes_offline else self.arrival_time


@dataclass
class StepEvent:
    """Emitted after every server step; ``metrics`` is set on evaluation steps."""

    step: int
    total_steps: int
    time: float
    wall_time: float
    accepted: int
    dropped: int
    rejected: int
    metrics: dict[str, float] | None = None


class Sink:
    """Receives the run's records; the default keeps them in memory (``asyncfl.run.rundir``
    writes files)."""

    def __init__(self) -> None:
        self.updates: list[UpdateRow] = []
        self.metrics: list[dict[str, float]] = []

    def on_update(self, row: UpdateRow) -> None:
        self.updates.append(row)

    def on_metrics(self, row: dict[str, float]) -> None:
        self.metrics.append(row)


@dataclass
class Counters:
    accepted: int = 0
    dropped_stale: int = 0
    cancelled_late: int = 0
    rejected_nonfinite: int = 0
    rejected_norm: int = 0
    dropped_offline: int = 0
    dispatched: int = 0

    @property
    def rejected(self) -> int:
        return self.rejected_nonfinite + self.rejected_norm


@dataclass
class Records:
    """Per-step records kept for the run directory and the analyses."""

    by_staleness: list[np.ndarray] = field(default_factory=list)
    private_by_staleness: list[np.ndarray] = field(default_factory=list)
    coefficients: list[np.ndarray] = field(default_factory=list)
    step_times: list[float] = field(default_factory=list)


def default_algorithm(scenario: Scenario, task: Task, aggregator: Aggregator | None = None) -> Algorithm:
    server = scenario.server
    if server.algorithm not in ("fedavg", "fedprox"):
        from asyncfl.server.splitting import make_algorithm  # splitting / primal-dual (DESIGN §6)

        return make_algorithm(scenario, task)
    if aggregator is None:
        aggregator = ExactAggregator(server.staleness_exponent, num_staleness(scenario))
    return PseudoGradient(aggregator, make_rule(server), server.lr, scenario.client.mu)


def num_staleness(scenario: Scenario) -> int | None:
    """``L = max_staleness + 1`` (None when unbounded; sync runs have only τ = 0)."""
    if scenario.server.protocol == "sync":
        return 1
    ms = scenario.server.max_staleness
    return None if ms is None else ms + 1


def make_private_aggregator(scenario: Scenario) -> tuple[Any, Aggregator]:
    """``(PrivacySetup, PrivateAggregator)`` of a ``[privacy]`` run (σ calibrated here)."""
    from asyncfl.privacy import build_privacy

    server = scenario.server
    return build_privacy(
        scenario.privacy, server.buffer, scenario.population.clients, scenario.run.steps,
        server.max_staleness if server.protocol == "fedbuff" else 0, server.staleness_exponent,
    )


class Simulation:
    """One run of a scenario. Create it, then ``async for event in sim.events()`` or
    ``await sim.run()``."""

    def __init__(
        self,
        scenario: Scenario,
        task: Task | None = None,
        *,
        sink: Sink | None = None,
        executor: Executor | None = None,
        algorithm: Algorithm | None = None,
        fleet_factory: Callable[[Scenario, dict[str, np.random.Generator]], Fleet] | None = None,
    ) -> None:
        self.scenario = scenario
        self._task_from_scenario = task is None  # remote executors may rebuild it from the scenario
        if task is None:
            from asyncfl.tasks import build_task

            task = build_task(scenario.task, scenario.population.clients, scenario.seed)
        self.task = task
        self.sink = sink if sink is not None else Sink()
        self._executor = executor
        self.privacy_setup, aggregator = (
            make_private_aggregator(scenario) if scenario.privacy.enabled else (None, None)
        )
        self.algorithm = algorithm if algorithm is not None else default_algorithm(scenario, self.task, aggregator)
        self.streams = rngmod.make_streams(scenario.seed)
        self.fleet = fleet_factory(scenario, self.streams) if fleet_factory else make_fleet(scenario, self.streams, self.task)
        self.env = simpy.Environment()
        server = scenario.server
        self.protocol = FedBuffProtocol(self) if server.protocol == "fedbuff" else SyncProtocol(self)

        # --- state (data) -------------------------------------------------------------------
        self.theta = self.task.initial_theta.detach().clone()
        self.version = 1  # θ_t held by the server; the step in progress is t
        self.algo_state = self.algorithm.init(self.theta)
        self.in_flight: dict[int, InFlight] = {}
        self.buffer: list[tuple[InFlight, int]] = []  # (arrival, staleness)
        self.counters = Counters()
        self.records = Records()
        self._seq = 0
        self._pending_flush: tuple[list[tuple[InFlight, int]], Callable[[], None]] | None = None
        self._eval_staleness: list[int] = []
        self._started = False
        self._wall_start = 0.0
        self.finished = False
        self.last_metrics: dict[str, float] = {}
        # --- checkpoint / resume (asyncfl.run.checkpoint) ----------------------------------------
        # Polled between simpy events (the state is then complete data: no flush in progress);
        # returning True stops the run with RunInterrupted so that the caller can checkpoint.
        self.should_stop: Callable[[], bool] | None = None
        self._rejected_since_step = 0  # uploads rejected since the last server step (_guard_rejections)
        self._restored: Any = None  # set by checkpoint.load_state: restart in-flight clients instead of start()

    # ------------------------------------------------------------------------------------------
    @property
    def steps_done(self) -> int:
        return self.version - 1

    @property
    def total_steps(self) -> int:
        return self.scenario.run.steps

    @property
    def wall_time(self) -> float:
        return time.perf_counter() - self._wall_start

    def dispatch(self, client: int) -> InFlight:
        """Send the current model to ``client`` and put its arrival on the clock."""
        now = self.env.now
        self.fleet.busy[client] = True
        seed = rngmod.job_seed(self.streams["jobs"])
        arrival, offline = self.fleet.schedule(client, now, self.streams["latency"])
        job = self.algorithm.make_job(client, self.theta, seed, self.algo_state)
        self._seq += 1
        rec = InFlight(
            seq=self._seq, client=client, version=self.version, dispatch_time=now,
            arrival_time=arrival, job=job, future=self.executor.submit(job), offline_time=offline,
        )
        self.in_flight[rec.seq] = rec
        self.counters.dispatched += 1
        self.launch(rec)
        return rec

    def launch(self, rec: InFlight) -> None:
        """Put a dispatched (or restored) client's end of job on the clock."""
        rec.process = Arrival(self.env, rec.end_time, self._client_life, rec)

    def _client_life(self, rec: InFlight) -> None:
        """The end of a client's job: its upload at ``arrival_time``, or the drop of its update
        when it goes offline first (not called for a cancelled straggler)."""
        goes_offline, end = rec.goes_offline, rec.end_time
        self.in_flight.pop(rec.seq, None)
        self.fleet.busy[rec.client] = False
        if self.finished:
            return
        if goes_offline:
            self.counters.dropped_offline += 1
            self.record(rec, self.version, self.version - rec.version, False, "offline", arrival_time=end)
            self.protocol.on_offline(rec)
        else:
            self.protocol.on_arrival(rec)

    def request_flush(self, entries: list[tuple[InFlight, int]], then: Callable[[], None]) -> None:
        """Ask the driver to aggregate ``entries`` before the next event; ``then`` runs right
        after, at the same virtual time (e.g. the replacement dispatch sees the new model)."""
        self._pending_flush = (entries, then)

    def record(self, rec: InFlight, step: int, staleness: int, accepted: bool, reason: str = "", arrival_time: float | None = None) -> None:
        t_arr = rec.arrival_time if arrival_time is None else arrival_time
        self.sink.on_update(UpdateRow(rec.client, rec.version, step, rec.dispatch_time, t_arr, staleness, accepted, reason, rec.seq))

    # ------------------------------------------------------------------------------------------
    @property
    def executor(self) -> Executor:
        if self._executor is None:
            scenario = self.scenario if self._task_from_scenario else None
            self._executor = make_executor(self.task, self.scenario.client, self.scenario.run, scenario)
        return self._executor

    def _start(self) -> None:
        self._started = True
        self._wall_start = time.perf_counter()
        if self.scenario.run.torch_threads:
            torch.set_num_threads(self.scenario.run.torch_threads)
        if self._restored is not None:  # resumed from a checkpoint: its clients are already chosen
            from asyncfl.run.checkpoint import restart

            restart(self)
            return
        self._evaluate()
        self.protocol.start()

    async def events(self) -> AsyncIterator[StepEvent]:
        """Run the simulation, yielding one :class:`StepEvent` per server step."""
        if not self._started:
            self._start()
        try:
            while self.steps_done < self.total_steps:
                while self._pending_flush is None:
                    if self.should_stop is not None and self.should_stop():
                        raise RunInterrupted(self.steps_done, self.env.now)
                    if self.env.peek() == math.inf:
                        reason = self.fleet.explain_stall(self.env.now, self.steps_done, self.total_steps)
                        if reason is not None:
                            raise TraceError(reason)
                        raise SimulationStalled(
                            f"the simulation stalled at virtual time {self.env.now:g} with "
                            f"{self.steps_done} of {self.total_steps} steps done: no client can be dispatched"
                        )
                    self.env.step()
                event = await self._flush()
                if event is not None:
                    yield event
        finally:
            if self.steps_done >= self.total_steps:
                self.finished = True
                await self._drain()

    async def run(self) -> dict[str, Any]:
        async for _ in self.events():
            pass
        return self.summary()

    async def aclose(self) -> None:
        """Cancel the jobs still running and close the executor (a stopped run)."""
        await self._drain()

    async def _drain(self) -> None:
        for rec in self.in_flight.values():
            rec.future.cancel()
        if self._executor is not None:
            await self._executor.aclose()

    # ------------------------------------------------------------------------------------------
    async def _flush(self) -> StepEvent | None:
        assert self._pending_flush is not None
        entries, then = self._pending_flush
        # One by one rather than asyncio.gather: awaiting a finished future does not suspend, and
        # only the future being awaited carries a callback, so a batch resolved at once wakes the
        # flush once instead of scheduling a callback per upload (gather's cost with cheap jobs).
        locals_ = [await rec.future for rec, _ in entries]
        step = self.version
        accepted: list[tuple[InFlight, int, torch.Tensor]] = []
        batch = getattr(self.algorithm, "client_messages", None)  # optional batched form
        jobs = [rec.job for rec, _ in entries]
        messages = (batch(jobs, locals_, self.algo_state) if batch is not None else
                    [self.algorithm.client_message(job, local, self.algo_state) for job, local in zip(jobs, locals_)])
        for (rec, tau), message, reason in zip(entries, messages, screen(messages, self.scenario.run.max_update_norm)):
            if reason:
                self.counters.rejected_nonfinite += reason == "non-finite"
                self.counters.rejected_norm += reason == "norm"
                self.record(rec, step, tau, False, reason)
            else:
                accepted.append((rec, tau, message))
        self.protocol.consumed(entries, accepted)
        self._pending_flush = None
        self._rejected_since_step += len(entries) - len(accepted)
        if not self.protocol.ready(accepted):
            then()
            self._guard_rejections()
            return None
        self._rejected_since_step = 0

        updates = [ClientUpdate(rec.client, rec.version, tau, msg) for rec, tau, msg in accepted]
        theta, self.algo_state, info = self.algorithm.server_update(
            self.theta, step, updates, self.algo_state, self.streams["noise"]
        )
        self.theta = theta
        self._record_step(step, accepted, info)
        self.version += 1
        metrics = None
        if self.steps_done % self.scenario.run.eval_every == 0 or self.steps_done == self.total_steps:
            metrics = self._evaluate()
        if self.steps_done < self.total_steps:
            then()
        event = StepEvent(
            step=self.steps_done, total_steps=self.total_steps, time=self.env.now, wall_time=self.wall_time,
            accepted=self.counters.accepted,
            dropped=self.counters.dropped_stale + self.counters.cancelled_late + self.counters.dropped_offline,
            rejected=self.counters.rejected, metrics=metrics,
        )
        if metrics is not None:
            self._guard_divergence(metrics)
        return event

    def _record_step(self, step: int, accepted: list[tuple[InFlight, int, torch.Tensor]], info: StepInfo) -> None:
        taus = np.array([tau for _, tau, _ in accepted], dtype=np.int64)
        length = num_staleness(self.scenario) or int(taus.max(initial=0)) + 1
        self.records.by_staleness.append(np.bincount(taus, minlength=length))
        if info.private_counts is not None:
            self.records.private_by_staleness.append(np.asarray(info.private_counts, dtype=np.float64))
        if info.coefficients is not None:
            self.records.coefficients.append(np.asarray(info.coefficients, dtype=np.float64))
        self.records.step_times.append(self.env.now)
        self.counters.accepted += len(accepted)
        self._eval_staleness.extend(taus.tolist())
        for rec, tau, _ in accepted:
            self.record(rec, step, tau, True)

    def _evaluate(self) -> dict[str, float]:
        metrics = self.task.evaluate(self.theta)
        row: dict[str, float] = {
            "step": self.steps_done,
            "time": self.env.now,
            "wall_time": self.wall_time,
            "loss": metrics["loss"],
            "accuracy": metrics.get("accuracy", math.nan),
            "train_loss": self.task.train_loss(self.theta) if self.scenario.run.train_loss else math.nan,
            "staleness_mean": float(np.mean(self._eval_staleness)) if self._eval_staleness else math.nan,
            "staleness_max": float(np.max(self._eval_staleness)) if self._eval_staleness else math.nan,
        }
        self._eval_staleness = []
        self.last_metrics = row
        self.sink.on_metrics(row)
        return row

    def _guard_rejections(self) -> None:
        """A run whose every upload is rejected would never end: stop it with the step."""
        if self._rejected_since_step >= MAX_REJECTED_PER_STEP:
            self.finished = True
            c = self.counters
            raise NumericalFault(
                f"no progress at server step {self.version} (virtual time {self.env.now:g}): the last "
                f"{self._rejected_since_step} uploads were all rejected (so far non-finite: {c.rejected_nonfinite}, "
                f"norm above run.max_update_norm = {self.scenario.run.max_update_norm}: {c.rejected_norm})"
            )

    def _guard_divergence(self, metrics: dict[str, float]) -> None:
        loss = metrics["loss"]
        if not math.isfinite(loss) or loss > self.scenario.run.divergence_loss:
            self.finished = True
            raise NumericalFault(
                f"the model diverged at server step {self.steps_done} (virtual time {self.env.now:g}): "
                f"test loss = {loss:g} (bound run.divergence_loss = {self.scenario.run.divergence_loss:g})"
            )

    # ------------------------------------------------------------------------------------------
    def by_staleness(self) -> np.ndarray:
        """``by_staleness[t-1, τ]`` (T×L integers, DESIGN §3)."""
        return _stack(self.records.by_staleness, np.int64)

    def private_by_staleness(self) -> np.ndarray | None:
        return _stack(self.records.private_by_staleness, np.float64) if self.records.private_by_staleness else None

    def coefficients(self) -> np.ndarray | None:
        return _stack(self.records.coefficients, np.float64) if self.records.coefficients else None

    def summary(self) -> dict[str, Any]:
        c = self.counters
        wall = self.wall_time
        return {
            "name": self.scenario.name,
            "status": "completed" if self.steps_done >= self.total_steps else "incomplete",
            "steps": self.steps_done,
            "virtual_time": self.env.now,
            "wall_time": wall,
            "updates_accepted": c.accepted,
            "updates_dropped_stale": c.dropped_stale,
            "updates_cancelled_late": c.cancelled_late,
            "updates_rejected_nonfinite": c.rejected_nonfinite,
            "updates_rejected_norm": c.rejected_norm,
            "updates_dropped_offline": c.dropped_offline,
            "clients_dispatched": c.dispatched,
            "updates_per_second": c.accepted / wall if wall > 0 else math.nan,
            "final": {k: v for k, v in self.last_metrics.items() if k not in ("wall_time",)},
            **({"privacy": self.privacy_summary()} if self.privacy_setup is not None else {}),
            **(self.algorithm.summary(self.algo_state) if hasattr(self.algorithm, "summary") else {}),
        }

    def privacy_summary(self) -> dict[str, Any]:
        """``sigma``, ``gamma``, ``xi``, ``epsilon_spent`` (for the σ used), ``delta``,
        ``accountant`` (DESIGN §5); computed once."""
        if not hasattr(self, "_privacy_summary"):
            from asyncfl.privacy import summary

            self._privacy_summary = summary(self.privacy_setup)
        return self._privacy_summary


def screen(messages: torch.Tensor | list[torch.Tensor], max_norm: float | None) -> list[str]:
    """Why each client message is rejected: ``"non-finite"`` (a NaN or ±Inf entry), ``"norm"``
    (``‖m‖₂ > max_norm``) or ``""`` (accepted). ``messages`` is a list or one tensor whose rows
    are the messages; messages of one shape are checked in one batched op (per-upload checks
    used to cost more than the rest of an arrival)."""
    if len(messages) == 0:
        return []
    if isinstance(messages, torch.Tensor) or all(m.shape == messages[0].shape for m in messages):
        block = (messages if isinstance(messages, torch.Tensor) else torch.stack(messages)).reshape(len(messages), -1)
        finite = finite_rows(block).tolist()
        norms = torch.linalg.vector_norm(block, dim=1).tolist() if max_norm is not None else None
    else:
        finite = [all_finite(m) for m in messages]
        norms = [float(torch.linalg.vector_norm(m)) for m in messages] if max_norm is not None else None
    return ["non-finite" if not ok else "norm" if norms is not None and norms[i] > max_norm else ""
            for i, ok in enumerate(finite)]


def _stack(rows: list[np.ndarray], dtype: Any) -> np.ndarray:
    if not rows:
        return np.zeros((0, 1), dtype=dtype)
    width = max(len(r) for r in rows)
    out = np.zeros((len(rows), width), dtype=dtype)
    for i, r in enumerate(rows):
        out[i, : len(r)] = r
    return out


def make_fleet(scenario: Scenario, streams: dict[str, np.random.Generator], task: Task | None = None) -> Fleet:
    """The scenario's fleet (distributions, FedScale profiles or a replayed trace; availability)."""
    return build_fleet(scenario, streams, task)


def run_blocking(scenario: Scenario, **kwargs: Any) -> Simulation:
    """Run a scenario to the end from synchronous code; returns the finished simulation."""
    sim = Simulation(scenario, **kwargs)
    asyncio.run(sim.run())
    return sim
