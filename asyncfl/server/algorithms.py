"""What a dispatched client trains and what the server does with the uploads (DESIGN.md §3–6).

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

from typing import Any, NamedTuple, Protocol, Sequence

import numpy as np
import torch

from asyncfl.server.aggregation import Aggregator, ClientUpdate
from asyncfl.server.rules import ServerRule, apply
from asyncfl.compute.training import LocalJob


class StepInfo(NamedTuple):
    """What a server step reports for the run's records."""

    coefficients: np.ndarray | None = None  # the rule's history weights (MA), if any
    private_counts: np.ndarray | None = None  # raw noisy staleness counts ĉ_τ, with privacy


class Algorithm(Protocol):
    def init(self, theta: torch.Tensor) -> Any: ...

    def make_job(self, client: int, theta: torch.Tensor, seed: int, state: Any) -> LocalJob: ...

    def client_message(self, job: LocalJob, local: torch.Tensor, state: Any) -> torch.Tensor: ...

    def server_update(
        self, theta: torch.Tensor, step: int, updates: Sequence[ClientUpdate], state: Any, rng: np.random.Generator
    ) -> tuple[torch.Tensor, Any, StepInfo]: ...


class PseudoGradientState(NamedTuple):
    rule: Any


class PseudoGradient:
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
        the batched executor, and the simulator screens the block without stacking it again)."""
        if len(jobs) < 2 or any(l.shape != j.start.shape for j, l in zip(jobs, locals_)):
            return [self.client_message(j, l, state) for j, l in zip(jobs, locals_)]
        return torch.stack([j.start for j in jobs]) - torch.stack(list(locals_))

    def server_update(
        self,
        theta: torch.Tensor,
        step: int,
        updates: Sequence[ClientUpdate],
        state: PseudoGradientState,
        rng: np.random.Generator,
    ) -> tuple[torch.Tensor, PseudoGradientState, StepInfo]:
        aggregate = self.aggregator.aggregate(step, updates, rng)
        out = self.rule.direction(aggregate, state.rule)
        info = StepInfo(
            coefficients=out.coefficients,
            private_counts=getattr(self.aggregator, "last_raw_counts", None),
        )
        return apply(theta, out.direction, self.lr), PseudoGradientState(out.state), info
