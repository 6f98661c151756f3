"""The task contract: data per client, a model architecture, and a loss (docs/tasks.md).

The server and the simulator see a model as one flat parameter vector ``theta``; a task knows
how to turn it back into the named parameters of its ``torch.nn.Module`` so that local training
can call ``torch.func.functional_call(task.model, task.unflatten(theta), x)``.

Local objective of client ``k`` on a mini-batch ``B`` (``ℓ`` = ``loss_fn`` per sample):

* ``reduction = "mean"``: ``f_k(θ; B) = (1/|B|) Σ_{i∈B} ℓ_i(θ)``  (neural tasks);
* ``reduction = "sum"``:  ``f_k(θ; B) = (n_k/|B|) Σ_{i∈B} ℓ_i(θ)`` so that the full batch gives
  exactly ``f_k(θ) = ½‖A_k θ − b_k‖²`` for the quadratic task (docs/baselines.md).

An optional ridge term ``(l2/2)‖θ‖²`` (``Task.l2``, e.g. the synthetic task's ``l2`` key) is part
of every client objective: ``batch_objective`` and ``train_loss`` include it, ``evaluate``
reports the data loss only.

Modes and buffers (docs/tasks.md §1). Training runs the model in train mode, evaluation
(``evaluate``, ``train_loss``) in eval mode, so dropout is off and a model scores the same twice.
Only parameters are part of ``θ``: a buffer that a forward pass would update — the running
statistics of BatchNorm — would be shared state outside ``θ``, updated by whichever client ran
last and never aggregated, so a model holding one is refused (:class:`~asyncfl.errors.ScenarioError`
naming the module: use GroupNorm, LayerNorm, or BatchNorm with ``track_running_stats=False``,
which normalises with the batch's own statistics in both modes). Other buffers are constants.

A task's own metrics: a subclass whose ``evaluate`` returns more than ``loss`` (and ``accuracy``)
lists the extra names in ``metric_names``; each becomes a column of ``metrics.csv`` and a
TensorBoard scalar ``eval/NAME``.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field
from typing import Callable, Iterator, Literal, TypeVar

import numpy as np
import torch

from asyncfl.errors import ScenarioError
from asyncfl.tasks.forward_rows import forward_rows, largest_activation, pieces

EVAL_CHUNK = 8192  # rows per forward pass in evaluate / train_loss (see Task._sums)

T = TypeVar("T")
#: ``f_k(θ; B)`` as a function of the client ``k`` and the mini-batch ``(x, y)`` (:meth:`Task.with_parameters`)
BatchObjective = Callable[[int, torch.Tensor, torch.Tensor], torch.Tensor]


class _Running(torch.nn.Module):
    """A module holding ``model`` whose forward is ``run(model)``: ``torch.func.functional_call``
    on it keeps the model's parameters replaced for the whole of ``run`` (:meth:`Task.with_parameters`)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, run: Callable[[torch.nn.Module], T]) -> T:
        return run(self.model)


def refuse_running_statistics(task: str, model: torch.nn.Module) -> None:
    """Refuse a model with a buffer that a forward pass updates (BatchNorm's running statistics):
    it would be state outside ``θ``, shared by every client and never aggregated (module docstring)."""
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.modules.batchnorm._NormBase) and module.track_running_stats:
            raise ScenarioError([
                f"task {task!r}: its model's {name or 'root'} ({type(module).__name__}) keeps running statistics, which "
                "are not parameters: asyncfl trains and aggregates parameters only (docs/tasks.md §1). Use GroupNorm or "
                "LayerNorm, or BatchNorm with track_running_stats=False (batch statistics in training and evaluation)"
            ])


def _sum64(entries: torch.Tensor) -> torch.Tensor:
    """``Σ entries`` accumulated in float64; on mps, which has no float64, on the CPU."""
    return (entries.cpu() if entries.device.type == "mps" else entries).sum(dtype=torch.float64)


@dataclass(frozen=True)
class ClientData:
    """Features ``x`` (first axis = samples) and targets ``y`` of one client or of a test set."""

    x: torch.Tensor
    y: torch.Tensor

    def __len__(self) -> int:
        return int(self.x.shape[0])


@dataclass(frozen=True)
class QuadraticForm:
    """``f_k(θ) = ½‖A_k θ − b_k‖²`` for every client, in float64, for exact local solves."""

    A: tuple[torch.Tensor, ...]
    b: tuple[torch.Tensor, ...]

    def hessian(self, k: int) -> torch.Tensor:
        return self.A[k].T @ self.A[k]

    def linear(self, k: int) -> torch.Tensor:
        return self.A[k].T @ self.b[k]

    def prox(self, k: int, center: torch.Tensor, mu: float) -> torch.Tensor:
        """``prox_{f_k,μ}(c) = argmin_θ f_k(θ) + (μ/2)‖θ − c‖² = (H_k + μI)⁻¹ (g_k + μ c)``.

        With ``μ = 0`` this is the client's own least-squares minimiser (``H_k`` must then be
        invertible, or the minimum-norm solution is returned).
        """
        H = self.hessian(k)
        g = self.linear(k)
        d = H.shape[0]
        if mu == 0.0:
            return torch.linalg.lstsq(H, g.unsqueeze(-1)).solution.squeeze(-1)
        return torch.linalg.solve(H + mu * torch.eye(d, dtype=H.dtype, device=H.device), g + mu * center)

    def pooled_solution(self) -> torch.Tensor:
        """``θ* = (Σ_k H_k)⁻¹ Σ_k g_k`` (docs/baselines.md)."""
        H = sum(self.hessian(k) for k in range(len(self.A)))
        g = sum(self.linear(k) for k in range(len(self.A)))
        return torch.linalg.solve(H, g)

    def objective(self, theta: torch.Tensor) -> float:
        """``F(θ) = (1/N) Σ_k f_k(θ)``, the federated objective of docs/baselines.md §4 (g = 0)."""
        theta = theta.to(torch.float64)
        return float(sum(0.5 * torch.sum((A @ theta - b) ** 2) for A, b in zip(self.A, self.b)) / len(self.A))

    def optimality_gap(self, theta: torch.Tensor) -> float:
        """``F(θ) − F*`` with ``F*`` = ``F(θ*)`` at the pooled optimum (docs/tasks.md §2).

        ``F`` is quadratic with Hessian ``H̄ = (1/N) Σ_k H_k`` and minimiser ``θ*``, so the gap is
        computed as ``½ (θ − θ*)ᵀ H̄ (θ − θ*)`` — exact, ≥ 0, and free of the cancellation of
        subtracting two nearly equal objective values."""
        cache = self.__dict__.get("_gap_cache")
        if cache is None:
            H = sum(self.hessian(k) for k in range(len(self.A))) / len(self.A)
            cache = (H, self.pooled_solution())
            object.__setattr__(self, "_gap_cache", cache)
        H, opt = cache
        e = theta.to(torch.float64) - opt
        return float(0.5 * e @ (H @ e))


@dataclass
class Task:
    """A federated learning problem: per-client data, an architecture and a per-sample loss."""

    name: str
    model: torch.nn.Module
    clients: list[ClientData]
    test: ClientData
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (outputs, y) -> per-sample
    classification: bool
    reduction: Literal["mean", "sum"] = "mean"
    quadratic: QuadraticForm | None = None
    initial_theta: torch.Tensor = field(default=None)  # type: ignore[assignment]
    l2: float = 0.0  # ridge coefficient: every client objective gets + (l2/2)‖θ‖²
    metric_names: tuple[str, ...] = ()  # what evaluate() returns besides loss and accuracy
    #: False: ``train_batched`` trains this task's jobs one by one (its model is slower batched,
    #: or has no batching rule: docs/tasks.md §9); the results are the same either way
    batched_training: bool = True
    #: the same on an accelerator (run.device, :func:`asyncfl.compute.device.batches_on`): False only
    #: for a model that ``vmap`` cannot batch (torch's fused LSTM has no batching rule); docs/tasks.md §9
    batched_on_accelerator: bool = True

    def __post_init__(self) -> None:
        refuse_running_statistics(self.name, self.model)
        names, shapes = [], []
        for name, p in self.model.named_parameters():
            names.append(name)
            shapes.append(tuple(p.shape))
        self._names = names
        self._shapes = shapes
        self._sizes = [int(np.prod(s)) if s else 1 for s in shapes]
        if self.initial_theta is None:
            self.initial_theta = self.flatten(dict(self.model.named_parameters())).detach().clone()

    # -- parameter layout ------------------------------------------------------------------
    @property
    def num_clients(self) -> int:
        return len(self.clients)

    @property
    def dim(self) -> int:
        return sum(self._sizes)

    @property
    def dtype(self) -> torch.dtype:
        return self.initial_theta.dtype

    def flatten(self, params: dict[str, torch.Tensor]) -> torch.Tensor:
        return torch.cat([params[n].reshape(-1) for n in self._names])

    def unflatten(self, theta: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named parameter views of ``theta`` (works on a leading batch axis too: ``theta[..., d]``).

        One ``split`` rather than a slice per parameter: autograd's backward of a slice writes the
        slice's gradient into a zero-filled tensor of the whole ``θ`` (one fill and one copy of
        ``d`` numbers per parameter tensor, per step), that of a split concatenates the parts
        once. The gradients are the same numbers; on LEAF's 6.6 M-parameter CNN the fills and
        copies were 56 % of a batched step's CPU time."""
        lead = theta.shape[:-1]
        parts = theta.split(self._sizes, dim=-1)
        return {name: part.reshape(*lead, *shape) for name, part, shape in zip(self._names, parts, self._shapes)}

    # -- objective -------------------------------------------------------------------------
    def objective_scale(self, k: int) -> float:
        """Factor turning the batch mean of per-sample losses into ``f_k`` (see module doc)."""
        return float(len(self.clients[k])) if self.reduction == "sum" else 1.0

    def outputs(self, theta: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(self.model, self.unflatten(theta), (x,))

    @contextlib.contextmanager
    def evaluating(self) -> Iterator[None]:
        """The model in eval mode for the duration (dropout off), then back in the mode it was."""
        was = self.model.training
        self.model.train(False)
        try:
            yield
        finally:
            self.model.train(was)

    def regularizer(self, theta: torch.Tensor) -> torch.Tensor | float:
        """``(l2/2)‖θ‖²`` (0 when ``l2 = 0``); sums over the last axis only."""
        if self.l2 == 0.0:
            return 0.0
        return 0.5 * self.l2 * (theta * theta).sum(dim=-1)

    def batch_objective(self, theta: torch.Tensor, k: int, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """``f_k(θ; B)`` as in the module doc, plus ``(l2/2)‖θ‖²``."""
        data = self.objective_scale(k) * self.loss_fn(self.outputs(theta, x), y).mean()
        return data + self.regularizer(theta)

    @property
    def per_parameter(self) -> bool:
        """Whether the objective reads ``θ`` only through the model's named parameters: no ridge
        term (``l2 = 0``) and this class's own :meth:`outputs` and :meth:`batch_objective`. Then
        its gradient can be taken parameter by parameter (:meth:`with_parameters`), with no
        ``d``-vector assembled per step (docs/performance.md, "The LEAF CNN")."""
        cls = type(self)
        return self.l2 == 0.0 and cls.outputs is Task.outputs and cls.batch_objective is Task.batch_objective

    def with_parameters(self, params: dict[str, torch.Tensor], run: Callable[[BatchObjective], T]) -> T:
        """``run(objective)``, where ``objective(k, x, y)`` is ``f_k(θ; B)`` of a task with
        :attr:`per_parameter` computed from the named parameters ``params`` (views of ``θ``, which
        ``run`` may update in place between calls): the same numbers as :meth:`batch_objective`,
        and the same gradient for each parameter as the matching part of ``∇_θ``.

        The model computes from ``params`` for the whole of ``run``: one
        ``torch.func.functional_call`` swaps them in and out around it (on a module whose forward
        is ``run``), not one per mini-batch, which on the quadratic task's ``Linear`` model cost a
        tenth of local training's CPU (docs/performance.md, "Start-up"). Each forward pass is the model's
        own, as before, so the numbers are the same bits."""
        def objective_of(model: torch.nn.Module) -> T:
            return run(lambda k, x, y: self.objective_scale(k) * self.loss_fn(model(x), y).mean())

        return torch.func.functional_call(_Running(self.model), {f"model.{n}": p for n, p in params.items()}, (objective_of,))

    @torch.no_grad()
    def evaluate(self, theta: torch.Tensor, data: ClientData | None = None) -> dict[str, float]:
        """Mean per-sample loss (and accuracy for classification) on ``data`` (default: test set)."""
        data = self.test if data is None else data
        with self.evaluating():
            loss, terms, correct = self._sums(theta, data)
        metrics = {"loss": loss / terms if terms else math.nan}
        if self.classification:
            metrics["accuracy"] = correct / max(len(data), 1)
        return metrics

    @torch.no_grad()
    def train_loss(self, theta: torch.Tensor) -> float:
        """Training objective: mean per-sample loss over the pooled training data of all clients,
        plus the regulariser ``(l2/2)‖θ‖²`` (0 unless ``l2 > 0``)."""
        pooled = self.pooled_training_data()
        if len(pooled) == 0:
            return float(self.regularizer(theta))
        with self.evaluating():
            loss, terms, _ = self._sums(theta, pooled)
        return loss / terms + float(self.regularizer(theta))

    def _sums(self, theta: torch.Tensor, data: ClientData) -> tuple[float, int, float]:
        """``(Σ loss entries, number of loss entries, Σ correct predictions)`` over ``data``,
        summed in float64, in chunks of ``EVAL_CHUNK`` rows: fresh multi-MB activations per call
        cost page faults that took longer than the arithmetic (train loss on 50k samples: 16 ms
        in one pass, 9 ms chunked). Within a chunk the forward pass runs on pieces of
        :meth:`_forward_rows` rows (:mod:`asyncfl.tasks.forward_rows`: the same numbers, without
        a model's large activations mapped and faulted in afresh every pass)."""
        loss, terms, correct = 0.0, 0, 0.0
        rows = self._forward_rows(theta, data.x)
        for start in range(0, len(data), EVAL_CHUNK):
            x, y = data.x[start : start + EVAL_CHUNK], data.y[start : start + EVAL_CHUNK]
            parts = pieces(len(x), rows)
            out = (self.outputs(theta, x) if len(parts) == 1
                   else torch.cat([self.outputs(theta, x[a:b]) for a, b in parts]))
            entries = self.loss_fn(out, y)
            loss, terms = loss + float(_sum64(entries)), terms + entries.numel()
            if self.classification:
                correct += float((out.argmax(dim=-1) == y).sum())
        return loss, terms, correct

    def _forward_rows(self, theta: torch.Tensor, x: torch.Tensor) -> int:
        """Rows per evaluation forward pass (:func:`asyncfl.tasks.forward_rows.forward_rows`),
        from the largest activation of a one-row probe of ``x``, found once per task. A model with
        batch normalisation computes each row from the whole batch's statistics, so its rows are
        not independent: it keeps one pass per chunk, as before."""
        rows = self.__dict__.get("_rows")
        if rows is None:
            if len(x) == 0:
                return EVAL_CHUNK
            if any(isinstance(m, torch.nn.modules.batchnorm._BatchNorm) for m in self.model.modules()):
                rows = self.__dict__["_rows"] = EVAL_CHUNK
                return rows
            per_row = largest_activation(lambda probe: self.outputs(theta, probe), self.model, x[:1])
            rows = self.__dict__["_rows"] = forward_rows(per_row, EVAL_CHUNK)
        return rows

    def optimality_gap(self, theta: torch.Tensor) -> float:
        """``F(θ) − F*`` for tasks whose optimum is known in closed form (the quadratic task,
        :meth:`QuadraticForm.optimality_gap`); NaN otherwise (docs/run-directory.md §3)."""
        return self.quadratic.optimality_gap(theta) if self.quadratic is not None else math.nan

    def pooled_training_data(self) -> ClientData:
        """All clients' training data concatenated in client order (built once, on first use);
        client ``k``'s samples are rows ``client_offsets()[k] :`` of it."""
        pooled = self.__dict__.get("_pooled")
        if pooled is None:
            parts = self.clients or [ClientData(self.test.x[:0], self.test.y[:0])]  # no clients: empty
            pooled = self.__dict__["_pooled"] = ClientData(torch.cat([d.x for d in parts]), torch.cat([d.y for d in parts]))
        return pooled

    def client_offsets(self) -> torch.Tensor:
        """Row of each client's first sample in :meth:`pooled_training_data`."""
        offsets = self.__dict__.get("_offsets")
        if offsets is None:
            sizes = torch.tensor([len(d) for d in self.clients])
            offsets = self.__dict__["_offsets"] = torch.cumsum(sizes, 0) - sizes
        return offsets
