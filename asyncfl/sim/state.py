"""The simulation's state as declared data (docs/architecture.md §5).

Everything a resumed run needs is one :class:`SimState` tree of the NamedTuples below (plus the
algorithm's own state, itself a tree of NamedTuples, dicts and tensors declared next to each
algorithm and rule). Each component builds its part (``Simulation.state()``, ``Fleet.state()``,
``protocol.state()``) and is rebuilt from it (``restore``); ``asyncfl.run.checkpoint``
serialises the tree field by field. Nothing else of a component is state: configuration
(speeds, availability schedules, the trace being replayed) is rebuilt from the scenario and its
seed, and machinery (futures, clock events, executors) is restarted.

Counts are part of the state (``Counters``, ``csv_rows`` in the checkpoint), so a checkpoint
can be checked against the scenario and the run directory before anything is touched
(``asyncfl.run.checkpoint.validate``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

from asyncfl.staleness_counts import StalenessCounts

if TYPE_CHECKING:
    import torch

    from asyncfl.clients.fleet import FleetState
    from asyncfl.clients.participation import ParticipationState
    from asyncfl.privacy.factorization import NoiseState
    from asyncfl.clients.replay import ReplayState
    from asyncfl.compute.training import LocalJob


@dataclass(slots=True)
class Counters:
    """What happened to the uploads so far. Every ``updates.csv`` row is counted exactly once:
    ``rows = accepted + dropped_stale + cancelled_late + rejected_nonfinite + rejected_norm +
    dropped_offline + dropped_unallotted + Σ dropped_declared``; ``dropped_unallotted``: uploads of a
    random-allocation run that arrived after their allotted step was taken (docs/privacy.md §13);
    ``dropped_declared``: ``(reason, count)`` of each drop
    reason the protocol declares besides ``"stale"`` (``ProtocolTraits.drops``), a value replaced
    on each such drop. Mutable (incremented on the hot path); ``SimState`` holds a copy."""

    accepted: int = 0
    dropped_stale: int = 0
    cancelled_late: int = 0
    rejected_nonfinite: int = 0
    rejected_norm: int = 0
    dropped_offline: int = 0
    dispatched: int = 0
    dropped_unallotted: int = 0
    dropped_declared: tuple[tuple[str, int], ...] = ()

    @property
    def dropped_by_protocol(self) -> int:
        """Uploads the protocol dropped, for any reason it declares (``"stale"`` included)."""
        return self.dropped_stale + sum(n for _, n in self.dropped_declared)

    @property
    def rejected(self) -> int:
        return self.rejected_nonfinite + self.rejected_norm

    @property
    def rows(self) -> int:
        """``updates.csv`` rows these counts account for."""
        return (self.accepted + self.dropped_by_protocol + self.cancelled_late + self.rejected_nonfinite
                + self.rejected_norm + self.dropped_offline + self.dropped_unallotted)


@dataclass(slots=True)
class Records:
    """Per-step records of the run (``counts.npz``): one entry per server step taken. Appended
    to as the run goes; ``SimState`` holds a copy (:meth:`snapshot`). The staleness counts keep
    only their non-zero entries (:class:`~asyncfl.staleness_counts.StalenessCounts`: their size
    follows the uploads accepted, not ``max_staleness``)."""

    by_staleness: StalenessCounts = field(default_factory=StalenessCounts)  # C_{t,τ}, sparse
    private_by_staleness: list[np.ndarray] = field(default_factory=list)  # raw noisy ĉ_τ, private runs
    coefficients: list[np.ndarray] = field(default_factory=list)  # a_t or (u_t, v_t), MA rules
    step_times: list[float] = field(default_factory=list)  # virtual time of each step

    def snapshot(self) -> "Records":
        return Records(self.by_staleness.snapshot(), list(self.private_by_staleness), list(self.coefficients), list(self.step_times))


class ClientState(NamedTuple):
    """A dispatched client the simulation still refers to (in flight, buffered, or arrived in
    the open sync round): when it was sent, what it trains, and its result if already known."""

    seq: int  # dispatch number
    client: int
    version: int  # s
    dispatch_time: float
    arrival_time: float
    offline_time: float  # inf: stays online until it uploads
    job: LocalJob
    result: torch.Tensor | None  # the trained model, if the job had finished (else resubmitted)


class WaiterState(NamedTuple):
    """A pending wake-up: the protocol waits on the clock until ``when`` (someone comes online)."""

    pending: bool = False
    when: float = float("inf")


class FedBuffState(NamedTuple):
    """A pending wake-up and the buffer: ``(seq, staleness)`` of the uploads waiting for the next step."""

    waiter: WaiterState = WaiterState()
    buffer: tuple[tuple[int, int], ...] = ()


class SyncState(NamedTuple):
    """The open round: dispatched cohort (seqs), arrivals so far (seqs), arrivals needed."""

    round: tuple[int, ...] = ()
    arrived: tuple[int, ...] = ()
    need: int = 0
    waiter: WaiterState = WaiterState()


class SimState(NamedTuple):
    """The whole simulation at a point between two events (no buffer flush in progress)."""

    now: float  # the virtual clock
    version: int  # θ_version is the server's model; the step in progress is t = version
    theta: torch.Tensor
    algorithm: Any  # the algorithm's state (PseudoGradientState, BaselineState, …)
    clients: tuple[ClientState, ...]  # every dispatched client still referred to, by seq
    in_flight: tuple[int, ...]  # seqs of the clients whose upload has not arrived
    protocol: Any  # the protocol's own state (FedBuffState: its buffer; SyncState: the open round)
    fleet: FleetState | ReplayState
    counters: Counters
    records: Records
    next_seq: int  # dispatches so far
    eval_staleness: tuple[int, ...]  # staleness of the accepted uploads since the last evaluation
    last_metrics: dict[str, float]
    rejected_since_step: int
    streams: dict[str, Any]  # numpy bit-generator states by stream name
    participation: ParticipationState | None  # private runs: participations per client, undecided uploads
    noise: NoiseState | None = None  # private runs: the correlated noise's buffers (docs/privacy.md §12)
