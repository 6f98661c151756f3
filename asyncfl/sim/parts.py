"""The finished parts a simulation runs (docs/architecture.md §2): built once, at the edge, by
the composition root :func:`asyncfl.compose.compose`, and handed to
:class:`~asyncfl.sim.engine.Simulation`, which never sees a scenario.

A :class:`Parts` holds objects (the task, the fleet, the algorithm over its aggregator, the
protocol, the update hook, the executor or how to make one, the private mechanism's setup, the
random streams) and :class:`RunSettings`, the few numbers and names the engine itself reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable

import numpy as np

from asyncfl.config.batching import BatchedChoice

if TYPE_CHECKING:
    from asyncfl.clients.fleet import Fleet
    from asyncfl.components.contracts import ServerProtocol, UpdateHook
    from asyncfl.compute.executors import Executor
    from asyncfl.privacy import PrivacySetup, PrivateAggregator
    from asyncfl.server.algorithms import Algorithm
    from asyncfl.tasks.base import Task


@dataclass(frozen=True)
class RunSettings:
    """What the engine reads besides its parts: the run's name and what ran (the summary's
    ``protocol``, ``algorithm``, ``rule`` — None when the algorithm uses no rule — ``task``), the
    ``[run]`` numbers it obeys (``steps``, ``eval_every``, ``max_update_norm``, ``train_loss``,
    ``torch_threads``, the divergence guard, the training path ``batched`` and why), the number
    of clients ``N``, the buffer ``C`` and whether uploads may be stale and the drop reasons the
    protocol declares (its traits), and the staleness columns ``L`` of the records (None:
    unbounded)."""

    name: str
    protocol: str
    algorithm: str
    rule: str | None
    task: str
    clients: int
    buffer: int
    stale: bool
    drops: tuple[str, ...]
    staleness_columns: int | None
    steps: int
    eval_every: int
    max_update_norm: float | None = None
    train_loss: bool = False
    torch_threads: int | None = None
    divergence_loss: float = float("inf")
    divergence_factor: float = float("inf")
    batched: BatchedChoice = BatchedChoice(False, "run.batched = false")
    device: str = "cpu"  # run.device resolved (the task's device)
    precision: str = "fp32"  # run.precision


@dataclass(frozen=True)
class ParticipationRule:
    """The participation ledger the engine keeps (docs/privacy.md §6): at most ``cap``
    contributions per client (None: no cap, only one undecided upload per client), ``separation``
    steps apart; with random allocation, only for a step the ``allotment`` gives it
    (:class:`asyncfl.privacy.allotment.Allotment`, docs/privacy.md §13)."""

    cap: int | None = None
    separation: int = 1
    allotment: Any = None


@dataclass
class Parts:
    """Everything a run is made of, built (:func:`asyncfl.compose.compose`). ``executor``: a built
    executor, or None to build one with ``make_executor`` on first use (workers start only when
    the run does)."""

    task: Task
    fleet: Fleet
    algorithm: Algorithm
    protocol: ServerProtocol
    hook: UpdateHook
    settings: RunSettings
    streams: dict[str, np.random.Generator]
    make_executor: Callable[[], Executor]
    executor: Executor | None = None
    privacy_setup: PrivacySetup | None = None
    private_aggregator: PrivateAggregator | None = None
    participation: ParticipationRule | None = None
