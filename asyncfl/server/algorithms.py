"""What a dispatched client trains and what the server does with the uploads (docs/architecture.md §2, docs/baselines.md).

An :class:`Algorithm` has three pure-ish parts around the simulator's clock:

* ``make_job(client, theta, seed, state)`` — the local job of a client given model ``theta``;
* ``client_message(job, local, state)`` — what the client uploads (checked for NaN/Inf and the
  norm bound by the simulator before it is accepted); an algorithm may also offer
  ``client_messages(jobs, locals, state)``, the same for many uploads at once (a list, or one
  tensor whose rows are the messages);
* ``server_update(theta, step, updates, state, rng)`` — the new model from the accepted
  uploads of one step.

:class:`PseudoGradient` is FedAvg/FedBuff/FedAsync/FedProx: the upload is
``Δ_k = θ_s − θ_k^local``, the aggregator forms ``r_t`` and the row of ``W`` (privately or not)
and the server rule moves ``θ_{t+1} = θ_t − η m_t``. The splitting and primal-dual baselines
(``asyncfl.server.splitting``) implement the same three methods with their own client state.
"""

from __future__ import annotations

import itertools
import operator
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol, Sequence

import numpy as np
import torch

from asyncfl.compute.training import LocalJob
from asyncfl.server.aggregation import Aggregator, ClientUpdate, stack_rows
from asyncfl.server.rules import ServerRule, apply

if TYPE_CHECKING:
    from asyncfl.tasks.base import Task


class StepInfo(NamedTuple):
    """What a server step reports for the run's records."""

    coefficients: np.ndarray | None = None  # the rule's history weights (MA), if any
    private_counts: np.ndarray | None = None  # raw noisy staleness counts ĉ_τ, with privacy


class ServerStreams(NamedTuple):
    """The random streams a server step may draw from: ``noise`` (the aggregator's privacy
    noise) and ``algorithm`` (the algorithm's own coins, e.g. FedPD's skip)."""

    noise: np.random.Generator
    algorithm: np.random.Generator


class Algorithm(Protocol):
    """What a dispatched client trains and what the server does with the uploads
    (docs/architecture.md §2). Implementations subclass it explicitly, so that the optional
    capabilities below come with their default implementation."""

    def init(self, theta: torch.Tensor) -> Any:
        """The algorithm's state at the start: declared data (NamedTuples of tensors), which a
        checkpoint stores as it is."""
        ...

    def make_job(self, client: int, theta: torch.Tensor, seed: int, state: Any) -> LocalJob:
        """The local job of ``client``, which receives model ``theta``."""
        ...

    def client_message(self, job: LocalJob, local: torch.Tensor, state: Any) -> torch.Tensor:
        """What the client uploads after training to ``local`` (a pure function of the job and
        the local model, so that a retried or relocated job cannot apply twice)."""
        ...

    def server_update(
        self, theta: torch.Tensor, step: int, updates: Sequence[ClientUpdate], state: Any, streams: ServerStreams
    ) -> tuple[torch.Tensor, Any, StepInfo]:
        """The new model and state from the accepted uploads of one step."""
        ...

    # -- optional capabilities, with their defaults --------------------------------------------
    def client_messages(self, jobs: Sequence[LocalJob], locals_: Sequence[torch.Tensor],
                        state: Any) -> torch.Tensor | list[torch.Tensor]:
        """:meth:`client_message` for many uploads at once: a list, or one tensor whose rows are
        the messages. Default: one call per upload."""
        return [self.client_message(job, local, state) for job, local in zip(jobs, locals_)]

    def summary(self, state: Any) -> dict[str, Any]:
        """Sections the algorithm adds to ``summary.json``. Default: none."""
        return {}


class PseudoGradientState(NamedTuple):
    rule: Any


class PseudoGradient(Algorithm):
    """Clients return ``Δ_k = θ_s − θ_k^local`` after minimising ``f_k + (μ/2)‖θ − θ_s‖²``
    (μ = 0: FedAvg; μ > 0: FedProx); the server applies its rule to the aggregate."""

    def __init__(self, aggregator: Aggregator, rule: ServerRule, lr: float, mu: float) -> None:
        self.aggregator, self.rule, self.lr, self.mu = aggregator, rule, lr, mu

    def init(self, theta: torch.Tensor) -> PseudoGradientState:
        return PseudoGradientState(self.rule.init(theta))

    def make_job(self, client: int, theta: torch.Tensor, seed: int, state: PseudoGradientState) -> LocalJob:
        return LocalJob(client=client, start=theta, centre=theta, mu=self.mu, seed=seed)

    def client_message(self, job: LocalJob, local: torch.Tensor, state: PseudoGradientState) -> torch.Tensor:
        return job.start - local

    def client_messages(self, jobs: Sequence[LocalJob], locals_: Sequence[torch.Tensor],
                        state: PseudoGradientState) -> torch.Tensor | list[torch.Tensor]:
        """``[client_message(j, l) for …]`` as one subtraction of stacked tensors: a ``(n, d)``
        tensor whose rows are the messages (the per-upload op overhead was ~4 µs an update with
        the batched executor, and the simulator screens the block without stacking it again).
        When every job started from the same model (one flush of FedBuff: most often one or
        two versions) that model is broadcast over the rows instead of stacked ``n`` times —
        the same elementwise differences."""
        if len(jobs) < 2 or any([l.shape != j.start.shape for j, l in zip(jobs, locals_)]):
            return super().client_messages(jobs, locals_, state)
        start = jobs[0].start
        if start.dim() == 1 and all(map(operator.is_, [j.start for j in jobs], itertools.repeat(start))):
            return start - stack_rows(locals_)
        return torch.stack([j.start for j in jobs]) - torch.stack(list(locals_))

    def server_update(
        self,
        theta: torch.Tensor,
        step: int,
        updates: Sequence[ClientUpdate],
        state: PseudoGradientState,
        streams: ServerStreams,
    ) -> tuple[torch.Tensor, PseudoGradientState, StepInfo]:
        aggregate = self.aggregator.aggregate(step, updates, streams.noise)
        out = self.rule.direction(aggregate, state.rule)
        info = StepInfo(coefficients=out.coefficients, private_counts=aggregate.raw_counts)
        return apply(theta, out.direction, self.lr, self.rule), PseudoGradientState(out.state), info


class AlgorithmContext(NamedTuple):
    """What an algorithm's builder gets besides its own config (docs/extending.md §2): the number
    of clients, the proximal ``μ`` of their local problem (``client.mu``), the server learning
    rate (``server.lr``), the aggregator of the accepted uploads (exact or private) and the
    server rule (``server.rule``); for algorithms that need them, the task (its gradients, for
    diagnostics), the clients' ``client.local_steps`` (a schedule's base) and when the run
    evaluates (``run.eval_every``, ``run.steps``). The last four have defaults, so a context made
    without them (a test, a user's own composition) still builds every algorithm that does not ask."""

    num_clients: int
    mu: float
    lr: float
    aggregator: Aggregator
    rule: ServerRule
    task: "Task | None" = None
    local_steps: int | None = None
    eval_every: int = 0
    steps: int = 0


def build_pseudo_gradient(cfg: None, ctx: AlgorithmContext) -> PseudoGradient:
    """FedAvg (``client.mu`` = 0) or FedProx (``mu > 0``): the rule on the aggregator's aggregate,
    server learning rate ``server.lr`` (docs/baselines.md §1)."""
    return PseudoGradient(ctx.aggregator, ctx.rule, ctx.lr, ctx.mu)
