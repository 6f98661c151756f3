"""The simulator: simpy decides *when*, an executor decides *where*, the algorithm decides
*what* (docs/architecture.md §2, docs/protocol.md).

Every dispatched client waits its sampled latency on the virtual clock (one entry on simpy's queue,
see :class:`Arrival`) and then uploads. Its training job was submitted to the executor at dispatch and is awaited
only when the buffer flushes, so a run is an asyncio coroutine: :meth:`Simulation.events` is an
async iterator of :class:`StepEvent` (what progress bars and notebooks consume) and
:meth:`Simulation.run` drives it to the end (:func:`asyncfl.compose.run_blocking` for scripts).

Protocols (docs/protocol.md):

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

Private runs (docs/privacy.md §6): only clients without an undecided upload and below the
participation cap are dispatched (:class:`~asyncfl.clients.participation.Participation`, reserved
in :meth:`Simulation.dispatch`, settled in :meth:`Simulation.record`), so no step holds two uploads
of one client and no client contributes to more than ``privacy.max_participations`` steps; a
capped run that runs out of such clients stops with :class:`ParticipationCapReached`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import time
from dataclasses import dataclass
from typing import Any, AsyncIterator, Callable

import numpy as np
import simpy
import torch

from asyncfl import privacy
from asyncfl import rng as rngmod
from asyncfl.clients.participation import Participation
from asyncfl.privacy.dispatch import stall_reason
from asyncfl.compute.device import device_of, to_device
from asyncfl.compute.executors import Executor
from asyncfl.compute.training import LocalJob
from asyncfl.errors import (
    CheckpointError, NumericalFault, ParticipationCapReached, RunInterrupted, SimulationStalled, TraceError,
)
from asyncfl.records import MemorySink, Sink, StepEvent, UpdateRow
from asyncfl.staleness_counts import StalenessCounts
from asyncfl.server.aggregation import ClientUpdate
from asyncfl.server.algorithms import ServerStreams, StepInfo
from asyncfl.sim import collector
from asyncfl.sim.clock import Arrival, timeout_at
from asyncfl.sim.parts import Parts
from asyncfl.sim.state import ClientState, Counters, Records, SimState
from asyncfl.tensor_checks import all_finite, finite_rows

MAX_REJECTED_PER_STEP = 1000  # uploads rejected in a row (no step between) before the run stops


@dataclass(slots=True)
class InFlight:
    """A dispatched client: what it trains on, when it will arrive, and its job's future
    (``arrival``: its end of job on the clock; ``interrupt()`` cancels it)."""

    seq: int
    client: int
    version: int
    dispatch_time: float
    arrival_time: float
    job: LocalJob
    future: "asyncio.Future[torch.Tensor]"
    arrival: Arrival | None = None
    offline_time: float = math.inf  # the client goes offline then, if before arrival_time

    @property
    def goes_offline(self) -> bool:
        return self.offline_time < self.arrival_time

    @property
    def end_time(self) -> float:
        """When its life on the clock ends: the upload, or going offline first."""
        return self.offline_time if self.goes_offline else self.arrival_time

    def state(self, result: torch.Tensor | None = None) -> ClientState:
        """Its declared state; the job's result is kept if the job had already finished
        (``result``: the stored one of a restored client whose future is not yet remade)."""
        fut = self.future
        if fut is not None and fut.done() and not fut.cancelled() and fut.exception() is None:
            result = fut.result().detach()
        return ClientState(self.seq, self.client, self.version, self.dispatch_time, self.arrival_time,
                           self.offline_time, self.job, result)


class Simulation:
    """One run, of finished parts (:class:`~asyncfl.sim.parts.Parts`, built by
    :func:`asyncfl.compose.compose`; the engine never sees a scenario). Create it, then
    ``async for event in sim.events()`` or ``await sim.run()``."""

    def __init__(self, parts: Parts, *, sink: Sink | None = None) -> None:
        if not isinstance(parts, Parts):
            raise TypeError(f"Simulation takes the parts of a run (asyncfl.compose.compose(scenario)), "
                            f"not {type(parts).__name__}")
        self.parts = parts
        self.settings = settings = parts.settings
        self.task = parts.task
        self.sink: Sink = sink if sink is not None else MemorySink()
        self._executor = parts.executor
        self.privacy_setup = parts.privacy_setup
        self._private_aggregator = parts.private_aggregator
        self.algorithm = parts.algorithm
        self.streams = parts.streams
        self._server_streams = ServerStreams(noise=self.streams["noise"], algorithm=self.streams["algorithm"])
        self.fleet = parts.fleet
        # private runs: one upload per client per step, and the participation cap (docs/privacy.md §6);
        # stale protocols running an algorithm with client memory: one upload per client
        # (AlgorithmTraits.one_upload_per_client, docs/async-optimisers.md §5)
        rule = parts.participation
        self.participation = (
            None if rule is None else Participation(settings.clients, rule.cap, rule.separation, lambda: self.version,
                                                    allotment=rule.allotment)
        )
        self.fleet.participation = self.participation
        self._hook = parts.hook  # what clients do to uploads
        self.env = simpy.Environment()
        self.protocol = parts.protocol  # drives this engine through Host
        self.protocol.attach(self)

        # --- state: what Simulation.state() declares (SimState) --------------------------------
        self.theta = self.task.initial_theta.detach().clone()
        self.version = 1  # θ_t held by the server; the step in progress is t
        self.algo_state = self.algorithm.init(self.theta)
        self.in_flight: dict[int, InFlight] = {}
        self.counters = Counters()
        self.records = Records(StalenessCounts(settings.staleness_columns or 1))
        self._seq = 0
        self._eval_staleness: list[int] = []
        self.last_metrics: dict[str, float] = {}
        self._rejected_since_step = 0  # uploads rejected since the last server step (_guard_rejections)
        # --- machinery: not state -----------------------------------------------------------
        self._pending_flush: tuple[list[tuple[InFlight, int]], Callable[[], None]] | None = None
        self._started = False
        self._wall_start = 0.0
        self.finished = False
        # Polled between simpy events (the state is then complete data: no flush in progress);
        # returning True stops the run with RunInterrupted so that the caller can checkpoint.
        self.should_stop: Callable[[], bool] | None = None
        # restore(): the restored clients and their stored results, restarted by _restart()
        self._restored: dict[int, torch.Tensor | None] | None = None
        self._restored_records: dict[int, InFlight] = {}
        # the test loss of θ_1 (the divergence guard's reference): configuration, since θ_1 is
        # the task's initial model; taken from the step-0 evaluation, recomputed after a restore
        self._initial_loss: float | None = None

    # ------------------------------------------------------------------------------------------
    @property
    def steps_done(self) -> int:
        return self.version - 1

    @property
    def total_steps(self) -> int:
        return self.settings.steps

    @property
    def wall_time(self) -> float:
        return time.perf_counter() - self._wall_start

    def start_wall_clock(self) -> None:
        """Count this session's wall time from now (a resume that only finalizes a run)."""
        self._wall_start = time.perf_counter()

    def dispatch(self, client: int) -> InFlight:
        """Send the current model to ``client`` and put its arrival on the clock."""
        now = self.env._now  # env.now without its property call (once per dispatch)
        if self.participation is not None:
            self.participation.reserve(client)
        fleet, streams = self.fleet, self.streams
        fleet.busy[client] = True
        seed = rngmod.job_seed(streams["jobs"])
        arrival, offline = fleet.schedule(client, now, streams["latency"])
        job = self.algorithm.make_job(client, self.theta, seed, self.algo_state)
        self._seq = seq = self._seq + 1
        executor = self._executor if self._executor is not None else self.executor  # built on first use
        rec = InFlight(seq, client, self.version, now, arrival, job, executor.submit(job), None, offline)
        self.in_flight[seq] = rec
        self.counters.dispatched += 1
        rec.arrival = Arrival(self.env, offline if offline < arrival else arrival, self._client_life, rec)  # launch()
        return rec

    def launch(self, rec: InFlight) -> None:
        """Put a dispatched (or restored) client's end of job on the clock."""
        rec.arrival = Arrival(self.env, rec.end_time, self._client_life, rec)

    def _client_life(self, rec: InFlight) -> None:
        """The end of a client's job: its upload at ``arrival_time``, or the drop of its update
        when it goes offline first (not called for a cancelled straggler)."""
        goes_offline = rec.offline_time < rec.arrival_time
        end = rec.offline_time if goes_offline else rec.arrival_time
        self.in_flight.pop(rec.seq, None)
        self.fleet.busy[rec.client] = False
        if self.finished:
            return
        if goes_offline:
            self.counters.dropped_offline += 1
            self.record(rec, self.version, self.version - rec.version, False, "offline", arrival_time=end)
            self.protocol.on_offline(rec)
        elif self.participation is not None and not self.participation.admits(rec.client, rec.version, self.version):
            # random allocation: its allotted step was taken before it arrived (docs/privacy.md §13)
            self.counters.dropped_unallotted += 1
            self.record(rec, self.version, self.version - rec.version, False, "unallotted", arrival_time=end)
            self.protocol.on_offline(rec)
        else:
            self.protocol.on_arrival(rec)

    # -- what a protocol may ask (asyncfl.sim.protocols.Host; docs/protocol.md §8) ---------------
    @property
    def now(self) -> float:
        return self.env.now

    def in_flight_count(self) -> int:
        return len(self.in_flight)

    def is_in_flight(self, rec: InFlight) -> bool:
        return rec.seq in self.in_flight

    def pick(self) -> int | None:
        return self.fleet.choose(self.env._now, self.streams["selection"])  # env.now, without the property call

    def pick_many(self, n: int) -> np.ndarray:
        return self.fleet.choose_many(n, self.env.now, self.streams["selection"])

    def drop(self, rec: InFlight, staleness: int, reason: str) -> None:
        """An arrived upload the protocol does not use: counted under ``reason``, one the protocol
        declares (``ProtocolTraits.drops``), and recorded with it."""
        counters = self.counters
        if reason not in self.settings.drops:
            raise ValueError(f"server.protocol = {self.settings.protocol!r} dropped an upload for {reason!r}, a reason "
                             f"it does not declare (ProtocolTraits.drops = {self.settings.drops!r})")
        if reason == "stale":
            counters.dropped_stale += 1
        else:
            counts = dict(counters.dropped_declared)
            counts[reason] = counts.get(reason, 0) + 1
            counters.dropped_declared = tuple(sorted(counts.items()))
        self.record(rec, self.version, staleness, False, reason)

    def cancel(self, rec: InFlight) -> None:
        """A straggler: off the clock, its job cancelled, counted and recorded as ``late``."""
        self.in_flight.pop(rec.seq)
        self.fleet.busy[rec.client] = False
        rec.arrival.interrupt()
        rec.future.cancel()
        self.counters.cancelled_late += 1
        self.record(rec, self.version, 0, False, "late", arrival_time=self.env.now)

    def flush(self, entries: list[tuple[InFlight, int]], then: Callable[[], None]) -> None:
        """Aggregate ``entries`` before the next event; ``then`` runs right after, at the same
        virtual time (e.g. the replacement dispatch sees the new model)."""
        self._pending_flush = (entries, then)

    def next_online(self) -> float:
        return self.fleet.next_online(self.env.now)

    def at(self, when: float, callback: Callable[[], None]) -> None:
        timeout_at(self.env, when).callbacks.append(lambda _event: callback())

    def record(self, rec: InFlight, step: int, staleness: int, accepted: bool, reason: str = "", arrival_time: float | None = None) -> None:
        """The fate of a dispatch (one ``updates.csv`` row); in a private run it also settles the
        client's participation: spent if accepted, released otherwise (docs/privacy.md §6)."""
        if self.participation is not None:
            self.participation.settle(rec.client, accepted, step)
        t_arr = rec.arrival_time if arrival_time is None else arrival_time
        self.sink.on_update(UpdateRow(rec.client, rec.version, step, rec.dispatch_time, t_arr, staleness, accepted, reason, rec.seq))

    # -- declared state (docs/architecture.md §5) ------------------------------------------------
    def state(self) -> SimState:
        """The simulation's complete state as data. Only between events: no buffer flush may be
        in progress (after a server step, or wherever ``should_stop`` stopped the run)."""
        if self._pending_flush is not None:
            raise CheckpointError("a checkpoint can only be taken between events (a buffer flush is in progress)")
        stored = self._restored or {}  # a restored simulation that has not started yet
        referred: dict[int, InFlight] = dict(self.in_flight)
        referred.update((rec.seq, rec) for rec in self.protocol.referred())
        return SimState(
            now=float(self.env.now), version=self.version, theta=self.theta, algorithm=self.algo_state,
            clients=tuple(referred[seq].state(stored.get(seq)) for seq in sorted(referred)),
            in_flight=tuple(self.in_flight), protocol=self.protocol.state(), fleet=self.fleet.state(),
            counters=dataclasses.replace(self.counters), records=self.records.snapshot(), next_seq=self._seq,
            eval_staleness=tuple(self._eval_staleness), last_metrics=dict(self.last_metrics),
            rejected_since_step=self._rejected_since_step, streams=rngmod.streams_state(self.streams),
            participation=None if self.participation is None else self.participation.state(),
            noise=None if self._private_aggregator is None else self._private_aggregator.noise_state(),
        )

    def restore(self, state: SimState) -> None:
        """Put ``state`` into this freshly built, not yet started simulation (built from the same
        scenario; ``asyncfl.run.checkpoint.validate`` has checked that the state fits it). The
        clients' clock events and jobs are restarted when the run starts (:meth:`_restart`). The
        state's tensors (a checkpoint holds CPU tensors) are put on the run's device first."""
        if self._started:
            raise CheckpointError("restore() needs a simulation that has not started")
        state = to_device(state, device_of(self.task))
        records = {c.seq: InFlight(c.seq, c.client, c.version, c.dispatch_time, c.arrival_time, c.job,
                                   future=None, offline_time=c.offline_time)  # type: ignore[arg-type]
                   for c in state.clients}
        self.env = simpy.Environment(initial_time=state.now)
        self.version, self.theta, self.algo_state = state.version, state.theta, state.algorithm
        self.in_flight = {seq: records[seq] for seq in state.in_flight}
        self.protocol.restore(state.protocol, records)
        self.fleet.restore(state.fleet)
        if self.participation is not None and state.participation is not None:
            self.participation.restore(state.participation)
        if self._private_aggregator is not None and state.noise is not None:
            self._private_aggregator.restore_noise(state.noise)
        self.counters = dataclasses.replace(state.counters)
        self.records = state.records.snapshot()
        self._seq = state.next_seq
        self._eval_staleness = list(state.eval_staleness)
        self.last_metrics = dict(state.last_metrics)
        self._rejected_since_step = state.rejected_since_step
        rngmod.restore_streams(self.streams, state.streams)
        self._restored = {c.seq: c.result for c in state.clients}
        self._restored_records = records

    def _restart(self) -> None:
        """(In the event loop, when a restored run starts.) Resubmit the job of every restored
        client whose result was not stored (a job is a pure function of its inputs and seed) and
        put the in-flight ones back on the clock. Their arrivals are rescheduled in dispatch
        order at their absolute times, which is the order of the original event queue (ties at
        one time fire in creation order, and creation followed dispatch)."""
        results, records = self._restored or {}, self._restored_records
        self._restored, self._restored_records = None, {}
        loop = asyncio.get_running_loop()
        for seq in sorted(records):
            rec, result = records[seq], results[seq]
            if result is not None:
                rec.future = loop.create_future()
                rec.future.set_result(result)
            else:
                rec.future = self.executor.submit(rec.job)
        for rec in sorted(self.in_flight.values(), key=lambda r: r.seq):
            self.launch(rec)

    # ------------------------------------------------------------------------------------------
    @property
    def executor(self) -> Executor:
        if self._executor is None:
            self._executor = self.parts.make_executor()
        return self._executor

    def _start(self) -> None:
        self._started = True
        self._wall_start = time.perf_counter()
        if self.settings.torch_threads:
            torch.set_num_threads(self.settings.torch_threads)
        if self._restored is not None:  # resumed from a checkpoint: its clients are already chosen
            self._restart()
            return
        self._evaluate()
        self.protocol.start()

    async def events(self) -> AsyncIterator[StepEvent]:
        """Run the simulation, yielding one :class:`StepEvent` per server step."""
        if not self._started:
            self._start()
        try:
            env = self.env  # fixed once started (restore() replaces it before the start only)
            queue, step = env._queue, env.step  # env.peek() is queue[0][0], inf when empty
            while self.steps_done < self.total_steps:
                with collector.relaxed():  # between two steps only: never held across a yield
                    while self._pending_flush is None:
                        if self.should_stop is not None and self.should_stop():
                            raise RunInterrupted(self.steps_done, self.env.now)
                        if not queue or queue[0][0] == math.inf:
                            if self.participation is not None and self.participation.exhausted():
                                raise ParticipationCapReached(self._cap_exhausted())
                            reason = self.fleet.explain_stall(self.env.now, self.steps_done, self.total_steps)
                            if reason is not None:
                                raise TraceError(reason)
                            raise SimulationStalled(
                                f"the simulation stalled at virtual time {self.env.now:g} with "
                                f"{self.steps_done} of {self.total_steps} steps done: no client can be dispatched"
                            )
                        step()
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
        jobs = [rec.job for rec, _ in entries]
        messages = self._hook.apply(jobs, self.algorithm.client_messages(jobs, locals_, self.algo_state))
        for (rec, tau), message, reason in zip(entries, messages, screen(messages, self.settings.max_update_norm)):
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
        self.protocol.stepped()
        self._rejected_since_step = 0

        updates = [ClientUpdate(rec.client, rec.version, tau, msg) for rec, tau, msg in accepted]
        theta, self.algo_state, info = self.algorithm.server_update(
            self.theta, step, updates, self.algo_state, self._server_streams
        )
        self.theta = theta
        self._record_step(step, accepted, info)
        self.version += 1
        metrics = None
        if self.steps_done % self.settings.eval_every == 0 or self.steps_done == self.total_steps:
            metrics = self._evaluate()
        if self.steps_done < self.total_steps:
            then()
        event = StepEvent(
            step=self.steps_done, total_steps=self.total_steps, time=self.env.now, wall_time=self.wall_time,
            accepted=self.counters.accepted,
            dropped=(self.counters.dropped_by_protocol + self.counters.cancelled_late + self.counters.dropped_offline
                     + self.counters.dropped_unallotted),
            rejected=self.counters.rejected, metrics=metrics,
        )
        if metrics is not None:
            self._guard_divergence(metrics)
        return event

    def _record_step(self, step: int, accepted: list[tuple[InFlight, int, torch.Tensor]], info: StepInfo) -> None:
        taus = np.array([tau for _, tau, _ in accepted], dtype=np.int64)
        self.records.by_staleness.add(taus)
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
            "train_loss": self.task.train_loss(self.theta) if self.settings.train_loss else math.nan,
            "staleness_mean": float(np.mean(self._eval_staleness)) if self._eval_staleness else math.nan,
            "staleness_max": float(np.max(self._eval_staleness)) if self._eval_staleness else math.nan,
            "gap": self.task.optimality_gap(self.theta),  # F − F* (quadratic tasks), else NaN
            **{name: float(metrics.get(name, math.nan)) for name in self.task.metric_names},  # the task's own
        }
        self._eval_staleness = []
        self.last_metrics = row
        if self.steps_done == 0:
            self._initial_loss = row["loss"]
        self.sink.on_metrics(row)
        return row

    @property
    def initial_loss(self) -> float:
        """Test loss of the initial model ``θ_1`` (the step-0 metrics row)."""
        if self._initial_loss is None:
            self._initial_loss = float(self.task.evaluate(self.task.initial_theta)["loss"])
        return self._initial_loss

    def _cap_exhausted(self) -> str:
        """Why a capped run cannot take its next step (docs/privacy.md §6): every client has
        reached the cap, waits for the open step, or contributed fewer than b steps ago."""
        assert self.participation is not None
        ledger, settings = self.participation, self.settings
        if self.privacy_setup is not None:  # random allocation, a per-client budget (docs/privacy.md §13–14)
            why = stall_reason(ledger, self.privacy_setup, self.version, self.total_steps, settings.buffer, self.env.now)
            if why is not None:
                return why
        k, b, n, C, T = ledger.cap, ledger.separation, settings.clients, settings.buffer, self.total_steps
        at_cap = ledger.spent >= (k if k is not None else np.iinfo(np.int64).max)
        waiting = ledger.pending & ~at_cap
        resting = ~at_cap & ~ledger.pending & (ledger.spent > 0) & (self.version - ledger.last_step < b)
        rest = (f", {int(np.count_nonzero(resting))} contributed to one of the last privacy.min_separation = {b} - 1 "
                "steps" if b > 1 else "")
        return (
            f"privacy.max_participations = {k}: the participation cap ran out at server step {self.version} of "
            f"run.steps = {T} (virtual time {self.env.now:g}): of population.clients = {n}, {int(np.count_nonzero(at_cap))} "
            f"have contributed to {k} steps{rest} and the other {int(np.count_nonzero(waiting))} have an upload waiting for "
            f"this step, which needs server.buffer = {C} distinct clients; no client can be dispatched. k·N ≥ T·C "
            f"({(k or 0) * n} ≥ {T * C}) is necessary but not sufficient (a step needs C different clients with "
            "participations left, and dropped uploads are dispatched again); raise privacy.max_participations or "
            "population.clients, or lower run.steps" + (" or privacy.min_separation" if b > 1 else "")
        )

    def _guard_rejections(self) -> None:
        """A run whose every upload is rejected would never end: stop it with the step."""
        if self._rejected_since_step >= MAX_REJECTED_PER_STEP:
            self.finished = True
            c = self.counters
            raise NumericalFault(
                f"no progress at server step {self.version} (virtual time {self.env.now:g}): the last "
                f"{self._rejected_since_step} uploads were all rejected (so far non-finite: {c.rejected_nonfinite}, "
                f"norm above run.max_update_norm = {self.settings.max_update_norm}: {c.rejected_norm})"
            )

    def _guard_divergence(self, metrics: dict[str, float]) -> None:
        """Stop the run (:class:`NumericalFault`) when the evaluated test loss ``ℓ_t`` is NaN/±Inf,
        above the absolute bound ``run.divergence_loss``, or above ``run.divergence_factor × ℓ_0``
        with ``ℓ_0 > 0`` the initial model's test loss (the run's own scale: a loss that grew from
        2.6 to 3.7·10⁷ stays under any absolute bound fit for every task). The message says which
        bound fired (docs/architecture.md §8)."""
        loss, run = metrics["loss"], self.settings
        if not math.isfinite(loss):
            why = f"test loss = {loss:g} is not finite"
        elif loss > run.divergence_loss:
            why = f"test loss = {loss:g} is above run.divergence_loss = {run.divergence_loss:g}"
        elif self.initial_loss > 0 and loss > run.divergence_factor * self.initial_loss:
            why = (f"test loss = {loss:g} is above run.divergence_factor = {run.divergence_factor:g} × the initial "
                   f"model's test loss {self.initial_loss:g}")
        else:
            return
        self.finished = True
        raise NumericalFault(f"the model diverged at server step {self.steps_done} (virtual time {self.env.now:g}): {why}")

    # ------------------------------------------------------------------------------------------
    def by_staleness(self) -> np.ndarray:
        """``by_staleness[t-1, τ]`` (T×L integers, docs/protocol.md), dense: tests and small runs;
        the run directory writes ``self.records.by_staleness`` without densifying it."""
        return self.records.by_staleness.dense()

    def private_by_staleness(self) -> np.ndarray | None:
        return _stack(self.records.private_by_staleness, np.float64) if self.records.private_by_staleness else None

    def coefficients(self) -> np.ndarray | None:
        return _stack(self.records.coefficients, np.float64) if self.records.coefficients else None

    def summary(self) -> dict[str, Any]:
        c = self.counters
        wall = self.wall_time
        settings = self.settings
        return {
            "name": settings.name,
            "status": "completed" if self.steps_done >= self.total_steps else "incomplete",
            # what ran (docs/run-directory.md §6); FedSplit, FedDR and FedPD use no server rule
            "protocol": settings.protocol,
            "algorithm": settings.algorithm,
            "rule": settings.rule,
            "task": settings.task,
            # the training path that ran (run.batched; "auto" resolved, docs/guide.md §"Batched training")
            "batched": settings.batched.batched,
            "batched_why": settings.batched.why,
            # where and in what arithmetic it computed (run.device resolved, run.precision; docs/guide.md §7)
            "device": settings.device,
            "precision": settings.precision,
            "private": self.privacy_setup is not None,
            "steps": self.steps_done,
            "virtual_time": self.env.now,
            "wall_time": wall,
            "updates_accepted": c.accepted,
            "updates_dropped_stale": c.dropped_stale,
            **{f"updates_dropped_{reason}": dict(c.dropped_declared).get(reason, 0)
               for reason in settings.drops if reason != "stale"},
            "updates_cancelled_late": c.cancelled_late,
            "updates_rejected_nonfinite": c.rejected_nonfinite,
            "updates_rejected_norm": c.rejected_norm,
            "updates_dropped_offline": c.dropped_offline,
            # random allocation only: uploads that arrived after their allotted step (docs/privacy.md §13)
            **({"updates_dropped_unallotted": c.dropped_unallotted}
               if self.participation is not None and self.participation.allotment is not None else {}),
            "clients_dispatched": c.dispatched,
            "updates_per_second": c.accepted / wall if wall > 0 else math.nan,
            "final": {k: v for k, v in self.last_metrics.items() if k not in ("wall_time",)},
            **({"privacy": self.privacy_summary()} if self.privacy_setup is not None else {}),
            **self.algorithm.summary(self.algo_state),
        }

    def privacy_summary(self) -> dict[str, Any]:
        """The ``privacy`` section of the summary (:func:`asyncfl.privacy.summary`,
        docs/privacy.md §10): the configuration's σ, γ, ξ, ε, δ, sampling assumption and noise
        cohort, and the participations per client so far."""
        assert self.privacy_setup is not None and self.participation is not None
        return privacy.summary(self.privacy_setup, self.participation.spent, self.participation.last_step)

    def privacy_curve(self) -> list[dict[str, Any]]:
        """``privacy.csv``: ε spent after every evaluation step taken so far — step 0 and every
        ``run.eval_every`` steps — and after the last step taken (the run's last step, or where it
        stopped) (:func:`asyncfl.privacy.epsilon_curve`)."""
        assert self.privacy_setup is not None and self.participation is not None
        every, done = self.settings.eval_every, self.steps_done
        steps = sorted({0, *range(every, done + 1, every), done})
        return privacy.epsilon_curve(self.privacy_setup, [(t, self.participation.most_by(t)) for t in steps])


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
