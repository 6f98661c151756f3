"""Synchronous splitting and primal-dual baselines: FedSplit, FedDR, FedPD (docs/baselines.md).

FedAvg and FedProx are :class:`~asyncfl.server.algorithms.PseudoGradient`; the three algorithms here
share one mechanism, :class:`PersistentClients`, and differ only in four small pieces of math
(the local problem, the client step, what is uploaded, the server step).

**Client memory.** Every client ``k`` of the population (``K = population.clients``) keeps a few
vectors across rounds — also while it is not sampled — stored as plain data in
:class:`BaselineState` (``clients[name]`` is a ``[K, d]`` tensor), so a checkpoint is just that
data. All clients are initialised alike from ``θ_1``.

**One round** (``SyncProtocol``: the sampled cohort ``S``; its accepted uploads):

1. ``make_job``: the client's local problem ``min f_k + (μ/2)‖θ − centre‖²`` (``μ = 1/s``),
   warm-started at the client's *previous local output* (docs/baselines.md), not at the centre;
2. ``client_message``: the client's math on its trained model; the message is the client's
   **new memory** stacked ``[len(memory), d]`` (a pure function of the job and the local model,
   so an executor or a retry cannot apply it twice);
3. ``server_update``: writes each accepted client's new memory — exactly once per accepted
   upload (a rejected upload leaves the client's memory as it was: its round did not happen);
   then, if this round communicates, the server stores each accepted client's upload in its
   table ``table[k]`` (the latest upload of every client) and steps on the mean of the table
   over **all** K clients.

**Partial participation.** The server averages its table of the latest upload of every client,
not the cohort's uploads: unsampled clients contribute what they last sent. This is FedDR's
``θ̃ = (1/K) Σ_k θ̂_k`` (docs/baselines.md; the FedDR pseudo-code's ``θ̃ ← θ̃ + (1/K) Σ_{k∈S} Δθ̂_k`` is the same number
kept incrementally), and it is what keeps the fixed point correct for FedSplit and FedPD too: at a
fixed point every stored ``z_k`` (resp. ``θ_k + sλ_k``) is consistent with the same ``θ``, and the
mean over all ``K`` is the optimality condition ``Σ_k ∇f_k(θ) = 0``. Averaging only the cohort's
fresh values would move ``θ`` to a cohort-dependent point every round. With a full cohort the
table is the cohort's uploads and each algorithm is exactly its seed pseudo-code.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple, Sequence

import numpy as np
import torch

from asyncfl.compute.training import LocalJob
from asyncfl.server.aggregation import ClientUpdate
from asyncfl.server.algorithms import Algorithm, AlgorithmContext, ServerStreams, StepInfo
from asyncfl.server.prox import Regularizer, gradient_mapping

if TYPE_CHECKING:
    from asyncfl.tasks.base import Task

Memory = dict[str, torch.Tensor]


@dataclass(frozen=True)
class ClientJob(LocalJob):
    """A :class:`LocalJob` that also carries what the client holds when it starts: the model
    the server sent (``received``) and the client's memory at dispatch (``memory``)."""

    received: torch.Tensor
    memory: Memory


class BaselineState(NamedTuple):
    """Algorithm state as data (docs/architecture.md §2): client memory, the server's table and counters.

    ``clients[name]``: ``[K, d]``, row ``k`` = client ``k``'s vector ``name``;
    ``table``: ``[K, d]``, the latest upload the server received from each client;
    ``server``: the server's own vectors (FedDR's ``ω``);
    ``rounds``: server steps taken; ``communications``: rounds in which clients uploaded and the
    server averaged and broadcast (``rounds − communications`` = skipped rounds, FedPD).
    """

    clients: dict[str, torch.Tensor]
    table: torch.Tensor
    server: dict[str, torch.Tensor]
    rounds: int
    communications: int
    diagnostics: tuple = ()  # FedDR: one (step, ‖G_β(θ̄)‖, residual mean, residual max) per evaluation


class PersistentClients(Algorithm):
    """The shared mechanism (see the module docstring). Subclasses define:

    * ``memory`` — names of the client's persistent vectors, and ``init_memory(θ_1)``;
    * ``local_problem(θ, memory) -> (start, centre)`` — the job ``min f_k + (μ/2)‖·−centre‖²``;
    * ``client_step(job, local) -> memory`` — the client's math after its local solve;
    * ``upload(memory)`` — what the client sends the server;
    * ``server_step(θ, mean_upload, server) -> (θ, server)`` — the server's step on the mean of
      its table over all K clients;
    * optionally ``communicates(rng)`` (default: always) and ``broadcast(θ, clients)``.
    """

    memory: tuple[str, ...] = ()

    def __init__(self, num_clients: int, mu: float) -> None:
        if mu <= 0:
            raise ValueError(f"the proximal coefficient μ = 1/s must be positive, got {mu}")
        self.num_clients, self.mu, self.s = num_clients, float(mu), 1.0 / float(mu)

    def summary(self, state: "BaselineState") -> dict[str, Any]:
        """``summary.json`` section: rounds, communications and skipped rounds."""
        return {"baseline": {"rounds": state.rounds, "communications": state.communications,
                             "skipped": state.rounds - state.communications}}

    # -- per-algorithm math (overridden) ----------------------------------------------------
    def init_memory(self, theta: torch.Tensor) -> Memory:
        return {name: theta.clone() for name in self.memory}

    def init_server(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        return {}

    def local_problem(self, theta: torch.Tensor, memory: Memory) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError

    def client_step(self, job: ClientJob, local: torch.Tensor) -> Memory:
        raise NotImplementedError

    def upload(self, memory: Memory) -> torch.Tensor:
        raise NotImplementedError

    def server_step(
        self, theta: torch.Tensor, mean_upload: torch.Tensor, server: dict[str, torch.Tensor]
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise NotImplementedError

    def communicates(self, rng: np.random.Generator) -> bool:
        return True

    def broadcast(self, theta: torch.Tensor, clients: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return clients

    # -- the Algorithm protocol (shared) ------------------------------------------------------
    def init(self, theta: torch.Tensor) -> BaselineState:
        memory = self.init_memory(theta)
        clients = {name: memory[name].expand(self.num_clients, -1).clone() for name in self.memory}
        table = self.upload(memory).expand(self.num_clients, -1).clone()
        return BaselineState(clients, table, self.init_server(theta), 0, 0)

    def make_job(self, client: int, theta: torch.Tensor, seed: int, state: BaselineState) -> ClientJob:
        memory = {name: rows[client].clone() for name, rows in state.clients.items()}
        start, centre = self.local_problem(theta, memory)
        return ClientJob(client=client, start=start, centre=centre, mu=self.mu, seed=seed,
                         received=theta.clone(), memory=memory)

    def client_message(self, job: LocalJob, local: torch.Tensor, state: BaselineState) -> torch.Tensor:
        assert isinstance(job, ClientJob), "baseline jobs are made by make_job"
        new = self.client_step(job, local)
        return torch.stack([new[name] for name in self.memory])

    def server_update(
        self,
        theta: torch.Tensor,
        step: int,
        updates: Sequence[ClientUpdate],
        state: BaselineState,
        streams: ServerStreams,
    ) -> tuple[torch.Tensor, BaselineState, StepInfo]:
        clients = {name: rows.clone() for name, rows in state.clients.items()}
        senders: list[int] = []
        for update in updates:
            if update.client in senders:
                raise ValueError(f"client {update.client} uploaded twice in step {step}")
            senders.append(update.client)
            for name, row in zip(self.memory, update.message.unbind(0)):
                clients[name][update.client] = row
        table, server = state.table, state.server
        communicate = self.communicates(streams.algorithm)
        if communicate:
            table = table.clone()
            for k in senders:
                table[k] = self.upload({name: clients[name][k] for name in self.memory})
            theta, server = self.server_step(theta, table.mean(dim=0), server)
            clients = self.broadcast(theta, clients)
        new_state = BaselineState(clients, table, server, state.rounds + 1, state.communications + int(communicate),
                                  state.diagnostics + self.diagnose(step, theta, updates))
        return theta, new_state, StepInfo()

    def diagnose(self, step: int, theta: torch.Tensor, updates: Sequence[ClientUpdate]) -> tuple:
        """Diagnostics recorded after server step ``step`` (default: none)."""
        return ()


class FedSplit(PersistentClients):
    """FedSplit (Peaceman–Rachford; docs/baselines.md §3). Client memory ``z_k`` (initialised to
    ``θ_1``) and ``x_k`` (the last local output, the warm start):

    ``x_k = prox_{f_k,μ}(2θ − z_k)``, ``z_k ← z_k + 2(x_k − θ)``, upload ``z_k``;
    server ``θ = (1/K) Σ_k z_k`` over all K clients (the latest ``z_k`` of each).

    ``z_k`` is never reset to ``θ`` (the FedSplit pseudo-code's ``θ_k ← θ`` is the initialisation only).
    """

    memory = ("z", "x")

    def local_problem(self, theta: torch.Tensor, memory: Memory) -> tuple[torch.Tensor, torch.Tensor]:
        return memory["x"], 2 * theta - memory["z"]

    def client_step(self, job: ClientJob, local: torch.Tensor) -> Memory:
        return {"z": job.memory["z"] + 2 * (local - job.received), "x": local}

    def upload(self, memory: Memory) -> torch.Tensor:
        return memory["z"]

    def server_step(self, theta, mean_upload, server):
        return mean_upload, server


def prox_regularizer(kind: str, reg: float, v: torch.Tensor, step: float) -> torch.Tensor:
    """``prox_{step·g}(v) = argmin_x g(x) + ‖x − v‖²/(2·step)`` for the regularisers with one
    parameter ``reg``: ``none``: ``g = 0`` → ``v``; ``l1``: ``g = reg‖x‖₁`` → soft-threshold at
    ``step·reg``; ``l2``: ``g = (reg/2)‖x‖²`` → ``v / (1 + step·reg)``
    (:class:`~asyncfl.server.prox.Regularizer` has every kind)."""
    if kind not in ("none", "l1", "l2"):
        raise ValueError(f"unknown regulariser {kind!r}; known: none, l1, l2")
    return Regularizer(kind, reg).prox(v, step)


def full_gradient(task: Task, theta: torch.Tensor) -> torch.Tensor:
    """``∇f(θ)`` of ``f = (1/N) Σ_k f_k`` on every client's whole data set (autograd)."""
    leaf = theta.detach().clone().requires_grad_()
    with torch.enable_grad():
        total = sum(task.batch_objective(leaf, k, c.x, c.y) for k, c in enumerate(task.clients))
        (grad,) = torch.autograd.grad(total / task.num_clients, leaf)
    return grad.detach()


def local_residual(task: Task, k: int, x: torch.Tensor, centre: torch.Tensor, mu: float) -> float:
    """``‖∇f_k(x) + μ(x − centre)‖₂``: how far ``x`` is from solving the client's prox problem
    ``min f_k + (μ/2)‖· − centre‖²`` (0 exactly at ``prox_{f_k,μ}(centre)``; docs/baselines.md §4.1)."""
    leaf = x.detach().clone().requires_grad_()
    data = task.clients[k]
    with torch.enable_grad():
        (grad,) = torch.autograd.grad(task.batch_objective(leaf, k, data.x, data.y), leaf)
    return float(torch.linalg.vector_norm(grad + mu * (x - centre)))


@dataclass(frozen=True)
class Schedule:
    """FedDR's inexactness schedule (docs/baselines.md §4.2): the local steps of a job dispatched
    in server step ``t``, from ``base`` = ``client.local_steps``: ``fixed`` — ``base``;
    ``linear`` — ``base + ⌊growth·(t−1)⌋``; ``geometric`` — ``⌈base · growth^(t−1)⌉``; both at
    least 1 and capped at ``max_steps``."""

    kind: str
    base: int
    growth: float = 0.0
    max_steps: int = 1000

    def local_steps(self, t: int) -> int | None:
        """The job's ``local_steps`` (None for ``fixed``: the ``[client]`` section decides)."""
        if self.kind == "fixed":
            return None
        if self.kind == "linear":
            n = self.base + math.floor(self.growth * (t - 1))
        elif self.kind == "geometric":
            n = math.ceil(self.base * self.growth ** min(t - 1, 10_000))
        else:
            raise ValueError(f"unknown schedule {self.kind!r}; known: fixed, linear, geometric")
        return int(min(max(n, 1), self.max_steps))


@dataclass(frozen=True)
class Diagnostics:
    """What FedDR's diagnostics need (docs/baselines.md §4.1): the task (for ``∇f`` and ``∇f_k``)
    and when to record (every ``eval_every`` steps and the last step ``steps``)."""

    task: Task
    eval_every: int
    steps: int

    def due(self, step: int) -> bool:
        return step == self.steps or (self.eval_every > 0 and step % self.eval_every == 0)


class FedDR(PersistentClients):
    """FedDR (Douglas–Rachford; docs/baselines.md §4), minimising
    ``F(θ) = (1/K) Σ_k f_k(θ) + g(θ)``. Client memory ``ω_k`` and ``x_k`` (= the seed's ``θ_k``,
    the last local output and warm start); server block ``ω``:

    client: ``ω_k ← ω_k + α(θ̄ − x_k)``, ``x_k = prox_{f_k,μ}(ω_k)``, upload ``θ̂_k = 2x_k − ω_k``;
    server: ``θ̃ = (1/K) Σ_k θ̂_k`` (all K clients, stale ones included),
    ``ω ← ω + α(θ̄ − ω)``, ``θ̄ ← prox_{g,(K+1)/(Ks)}(K/(K+1) θ̃ + 1/(K+1) ω)``, where
    ``prox_{g,μ'}(c) = argmin g(x) + (μ'/2)‖x − c‖²``, i.e. step ``Ks/(K+1)``.

    (The ``(K+1)``-th block ``ω`` carries the zero function; the consensus resolvent with
    ``K·g`` then gives exactly that prox, so the fixed point solves ``0 ∈ Σ_k ∇f_k + K ∂g``.)

    Initialisation: ``ω_k = x_k = ω = θ̄ = θ_1``. Taking ``x_k^{(0)} = θ_1`` as the pseudo-code's
    inexact initial prox (its error bound ``ε_{k,0}``) makes ``θ̂_k^{(0)} = θ_1`` and so
    ``θ̃^{(0)} = θ_1`` is the mean of the stored ``θ̂_k`` from the start; the first round of a
    client then computes ``prox_{f_k,μ}(θ_1)`` (its ``ω_k`` does not move: ``θ̄ − x_k = 0``).
    """

    memory = ("omega", "x")

    def __init__(self, num_clients: int, mu: float, alpha: float, regularizer: str | Regularizer = "none",
                 reg: float = 0.0, *, schedule: Schedule | None = None, diagnostics: Diagnostics | None = None) -> None:
        super().__init__(num_clients, mu)
        if not 0.0 < alpha < 2.0:
            raise ValueError(f"FedDR needs α in (0, 2), got {alpha}")
        self.g = regularizer if isinstance(regularizer, Regularizer) else Regularizer(regularizer, float(reg))
        self.alpha, self.regularizer, self.reg = float(alpha), self.g.kind, self.g.reg
        self.schedule, self.diagnostics = schedule, diagnostics

    @property
    def beta(self) -> float:
        """The server's prox step ``β = Ns/(N + 1)``, also the gradient mapping's (§4.1)."""
        return self.num_clients * self.s / (self.num_clients + 1)

    def make_job(self, client: int, theta: torch.Tensor, seed: int, state: BaselineState) -> ClientJob:
        job = super().make_job(client, theta, seed, state)
        steps = None if self.schedule is None else self.schedule.local_steps(state.rounds + 1)
        return job if steps is None else dataclasses.replace(job, local_steps=steps)

    def diagnose(self, step: int, theta: torch.Tensor, updates: Sequence[ClientUpdate]) -> tuple:
        """At an evaluation step (``step`` a multiple of ``run.eval_every``, or the last):
        ``(step, ‖G_β(θ̄)‖, mean and max of the step's client prox residuals)``."""
        d = self.diagnostics
        if d is None or not d.due(step):
            return ()
        mapping = gradient_mapping(theta, full_gradient(d.task, theta), self.g, self.beta)
        residuals = [local_residual(d.task, u.client, u.message[1], u.message[0], self.mu) for u in updates]
        return ((step, float(torch.linalg.vector_norm(mapping)), float(np.mean(residuals)), float(np.max(residuals))),)

    def summary(self, state: BaselineState) -> dict[str, Any]:
        """The baseline section, with FedDR's diagnostics when recorded (docs/baselines.md §4.1)."""
        out = super().summary(state)
        if state.diagnostics:
            out["baseline"]["diagnostics"] = {
                "columns": ["step", "gradient_mapping", "prox_residual_mean", "prox_residual_max"],
                "rows": [list(row) for row in state.diagnostics],
            }
        return out

    def init_server(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"omega": theta.clone()}

    def local_problem(self, theta: torch.Tensor, memory: Memory) -> tuple[torch.Tensor, torch.Tensor]:
        omega = memory["omega"] + self.alpha * (theta - memory["x"])
        return memory["x"], omega

    def client_step(self, job: ClientJob, local: torch.Tensor) -> Memory:
        return {"omega": job.centre, "x": local}  # the prox centre is the new ω_k

    def upload(self, memory: Memory) -> torch.Tensor:
        return 2 * memory["x"] - memory["omega"]

    def server_step(self, theta, mean_upload, server):
        K = self.num_clients
        omega = server["omega"] + self.alpha * (theta - server["omega"])
        centre = (K * mean_upload + omega) / (K + 1)
        return self.g.prox(centre, self.beta), {"omega": omega}


class FedPD(PersistentClients):
    """FedPD (primal-dual; docs/baselines.md §5), ``s = 1/μ``. Client memory ``λ_k`` (initial 0),
    ``c_k = θ_{k,0}`` (the local problem's anchor, initial ``θ_1``) and ``x_k`` (the last local
    output, the warm start):

    client: ``x_k = argmin f_k(θ) + ⟨λ_k, θ − c_k⟩ + ‖θ − c_k‖²/(2s) = prox_{f_k,μ}(c_k − sλ_k)``,
    ``λ_k ← λ_k + (x_k − c_k)/s``, ``c_k ← x_k + sλ_k`` (new ``λ_k``);
    then with probability ``1 − p`` the round communicates: clients upload ``c_k``, the server
    sets ``θ = (1/K) Σ_k c_k`` (its table over all K) and broadcasts, ``c_k ← θ`` for every
    client; with probability ``p`` (``server.skip_probability``) the round is skipped: no upload,
    ``θ`` unchanged, clients keep their own ``c_k``. The coin is drawn from the run's
    ``algorithm`` stream (``ServerStreams.algorithm``), so it is seeded and independent of the
    privacy noise; ``BaselineState.communications`` counts the rounds that communicated.

    In the simulator a skipped round still takes the cohort's latency on the virtual clock: the
    local work happens, only the exchange is skipped.

    Fixed points: with ``p = 0`` and exact solves FedPD converges to the pooled ``θ*``
    (docs/baselines.md §7). With ``p > 0`` it does not, in general: an exact local solve gives
    ``λ_k = −∇f_k(x_k)`` after every client step, so a skipped round is the proximal-point step
    ``x_k ← prox_{f_k,μ}(x_k)`` on the client's own ``f_k`` (drift towards its own optimum); even
    from ``θ*`` a skip leaves ``c_k = θ* + sλ_k ≠ θ*``. FedPD's accuracy–skipping trade-off
    (Zhang et al., 2021) is this neighbourhood.
    """

    memory = ("lam", "c", "x")

    def __init__(self, num_clients: int, mu: float, skip_probability: float) -> None:
        super().__init__(num_clients, mu)
        if not 0.0 <= skip_probability < 1.0:
            raise ValueError(f"FedPD's skip probability p must be in [0, 1), got {skip_probability}")
        self.p = float(skip_probability)

    def init_memory(self, theta: torch.Tensor) -> Memory:
        return {"lam": torch.zeros_like(theta), "c": theta.clone(), "x": theta.clone()}

    def local_problem(self, theta: torch.Tensor, memory: Memory) -> tuple[torch.Tensor, torch.Tensor]:
        return memory["x"], memory["c"] - self.s * memory["lam"]

    def client_step(self, job: ClientJob, local: torch.Tensor) -> Memory:
        lam = job.memory["lam"] + (local - job.memory["c"]) / self.s
        return {"lam": lam, "c": local + self.s * lam, "x": local}

    def upload(self, memory: Memory) -> torch.Tensor:
        return memory["c"]

    def server_step(self, theta, mean_upload, server):
        return mean_upload, server

    def communicates(self, rng: np.random.Generator) -> bool:
        return bool(rng.random() >= self.p)  # P(skip) = P(U < p) = p

    def broadcast(self, theta: torch.Tensor, clients: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {**clients, "c": theta.expand_as(clients["c"]).clone()}


def build_fedsplit(cfg: None, ctx: AlgorithmContext) -> FedSplit:
    """FedSplit over the task's clients, ``μ = client.mu``. The splitting baselines take their
    server step from their own math on the table of every client's latest upload: the context's
    aggregator and rule are not used (the same holds for FedDR and FedPD)."""
    return FedSplit(ctx.num_clients, ctx.mu)


def build_feddr(cfg: Any, ctx: AlgorithmContext) -> FedDR:
    """FedDR from its own config (:class:`asyncfl.config.server.FedDRConfig`): ``alpha``, the
    regulariser ``regularizer`` with its parameters, ``feddr_schedule`` (from the context's
    ``local_steps``) and ``feddr_diagnostics`` (from the context's task and evaluation steps). On
    either protocol: on FedBuff it is asynchronous FedDR (docs/async-optimisers.md §5)."""
    schedule = (None if cfg.feddr_schedule == "fixed" or ctx.local_steps is None else
                Schedule(cfg.feddr_schedule, ctx.local_steps, cfg.feddr_growth, cfg.feddr_max_local_steps))
    diagnostics = None
    if cfg.feddr_diagnostics:
        if ctx.task is None:
            raise ValueError("FedDR's diagnostics need the task (AlgorithmContext.task)")
        diagnostics = Diagnostics(ctx.task, ctx.eval_every, ctx.steps)
    return FedDR(ctx.num_clients, ctx.mu, cfg.alpha, Regularizer.from_config(cfg), schedule=schedule,
                 diagnostics=diagnostics)


def build_fedpd(cfg: Any, ctx: AlgorithmContext) -> FedPD:
    """FedPD with its ``skip_probability`` (:class:`asyncfl.config.server.FedPDConfig`)."""
    return FedPD(ctx.num_clients, ctx.mu, cfg.skip_probability)
