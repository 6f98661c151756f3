"""Local training: the client's solver (DESIGN.md §6 "inexact local solver").

A job minimises ``f_k(θ) + (μ/2)‖θ − centre‖²`` starting from ``start``:

* ``sgd``: gradient steps ``θ ← θ − lr ∇[f_k(θ; B) + (μ/2)‖θ − centre‖²]`` on mini-batches
  ``B`` (``batch_size``; absent = full batch), for ``local_steps`` steps or ``epochs`` passes
  over a fresh permutation each pass;
* ``exact`` (quadratic tasks): the closed-form ``prox_{f_k,μ}(centre)`` (``μ = 0``: the client's
  own least-squares solution).

All randomness comes from the job's own ``seed``, so a job's result does not depend on the
executor that runs it (DESIGN §2 principle 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from asyncfl.scenario import ClientConfig
from asyncfl.tasks.base import Task


@dataclass(frozen=True)
class LocalJob:
    """One local training job. ``start`` is the initial iterate; ``centre`` the prox centre
    (used when ``mu > 0`` or by the exact solver)."""

    client: int
    start: torch.Tensor
    centre: torch.Tensor
    mu: float
    seed: int


def batch_schedule(n: int, cfg: ClientConfig, generator: torch.Generator) -> list[torch.Tensor | None]:
    """Index sets of the local steps. ``None`` stands for the full batch."""
    size = cfg.batch_size if cfg.batch_size is not None and cfg.batch_size < n else None
    if cfg.epochs is not None:
        if size is None:
            return [None] * cfg.epochs
        batches = []
        for _ in range(cfg.epochs):
            batches.extend(torch.randperm(n, generator=generator).split(size))
        return batches
    steps = cfg.local_steps or 1
    if size is None:
        return [None] * steps
    batches, perm = [], torch.empty(0, dtype=torch.long)
    while len(batches) < steps:
        if perm.numel() < size:  # new pass over the data (the remainder starts the next one)
            perm = torch.cat([perm, torch.randperm(n, generator=generator)])
        batches.append(perm[:size])
        perm = perm[size:]
    return batches


def local_steps_count(n: int, cfg: ClientConfig) -> int:
    """Number of gradient steps a job takes (used by batched training to pad)."""
    if cfg.epochs is not None:
        size = cfg.batch_size if cfg.batch_size is not None and cfg.batch_size < n else n
        return cfg.epochs * math.ceil(n / size)
    return cfg.local_steps or 1


def local_train(task: Task, cfg: ClientConfig, job: LocalJob) -> torch.Tensor:
    """Run one job and return the client's final local model ``θ_k^local``."""
    if cfg.solver == "exact":
        if task.quadratic is None:
            raise ValueError("client.solver = 'exact' needs a quadratic task")
        return task.quadratic.prox(job.client, job.centre, job.mu).to(task.dtype)
    data = task.clients[job.client]
    generator = torch.Generator().manual_seed(job.seed)
    k, mu, centre = job.client, job.mu, job.centre

    def objective(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        value = task.batch_objective(theta, k, x, y)
        if mu > 0:
            value = value + 0.5 * mu * (theta - centre).square().sum()
        return value

    # Plain reverse-mode autograd on a leaf: the same numbers as torch.func.grad (checked bit
    # for bit), at ~60% of its per-step cost on small models (no functorch transform set-up).
    theta = job.start.detach().clone()
    with torch.enable_grad():
        for idx in batch_schedule(len(data), cfg, generator):
            x, y = (data.x, data.y) if idx is None else (data.x[idx], data.y[idx])
            leaf = theta.requires_grad_()
            (grad,) = torch.autograd.grad(objective(leaf, x, y), leaf)
            theta = (leaf - cfg.lr * grad).detach()
    return theta


# ---------------------------------------------------------------------------------------------
# Batched local training (run.batched): many jobs at once with torch.func.vmap.
def train_batched(task: Task, cfg: ClientConfig, jobs: list[LocalJob]) -> list[torch.Tensor]:
    """``[local_train(task, cfg, job) for job in jobs]``, computed group by group with ``vmap``.

    Jobs are grouped by (start tensor, centre tensor, μ, number of steps): within a group every
    client starts from the same model and takes the same number of steps, so the group is one
    stacked ``(G, d)`` parameter tensor updated by a vmapped gradient per step. Each client's
    mini-batches are exactly ``batch_schedule`` with its own generator (the same random stream
    as :func:`local_train`); batches of unequal size (different ``n_k``, the last batch of an
    epoch, full batches) are padded with a real sample and masked out of the mean. The result
    equals per-client training to float round-off (the masked mean sums in another order).
    """
    if cfg.solver == "exact" or not jobs:
        return [local_train(task, cfg, job) for job in jobs]
    schedules = [batch_schedule(len(task.clients[j.client]), cfg, torch.Generator().manual_seed(j.seed)) for j in jobs]
    groups: dict[tuple, list[int]] = {}
    for i, (job, sched) in enumerate(zip(jobs, schedules)):
        # id() is safe here: the jobs hold their tensors alive for the whole call
        groups.setdefault((id(job.start), id(job.centre), job.mu, len(sched)), []).append(i)
    out: list[torch.Tensor] = [None] * len(jobs)  # type: ignore[list-item]
    for members in groups.values():
        if len(members) == 1:  # nothing to batch: the plain loop is cheaper than vmap set-up
            out[members[0]] = local_train(task, cfg, jobs[members[0]])
            continue
        train = _train_group_mlp if mlp_layers(task) is not None else _train_group
        thetas = train(task, cfg, [jobs[i] for i in members], [schedules[i] for i in members])
        for i, theta in zip(members, thetas.unbind(0)):
            out[i] = theta
    return out


def _group_batches(task: Task, jobs: list[LocalJob], schedules: list[list]):
    """Every step's batch of every client, padded to the largest batch: ``X (G, steps, width, ...)``,
    ``Y``, the ``mask`` of real samples and each client's objective ``scale``."""
    datas = [task.clients[j.client] for j in jobs]
    G, steps = len(jobs), len(schedules[0])
    # index of every sample of every step, padded to the largest batch, and its mask
    full = [torch.arange(len(d)) for d in datas]
    sets = [[full[g] if idx is None else idx for idx in sched] for g, sched in enumerate(schedules)]
    flat = [ix for s in sets for ix in s]  # (G · steps) index sets, client-major
    lengths = torch.tensor([int(ix.numel()) for ix in flat])
    index = torch.nn.utils.rnn.pad_sequence(flat, batch_first=True).view(G, steps, -1)  # pads with sample 0
    width = index.shape[-1]
    mask = (torch.arange(width) < lengths[:, None]).to(task.dtype).view(G, steps, width)
    # gather every step's batch of every client in one indexing op on the pooled data:
    # (G, steps, width, ...)
    pooled = task.pooled_training_data()
    rows = index + task.client_offsets()[torch.tensor([j.client for j in jobs])][:, None, None]
    X, Y = pooled.x[rows], pooled.y[rows]
    scale = torch.tensor([task.objective_scale(j.client) for j in jobs], dtype=task.dtype)
    return X, Y, mask, scale


def _train_group(task: Task, cfg: ClientConfig, jobs: list[LocalJob], schedules: list[list]) -> torch.Tensor:
    """Train ``G`` jobs sharing start, centre, μ and step count; returns ``(G, d)``."""
    G, steps = len(jobs), len(schedules[0])
    X, Y, mask, scale = _group_batches(task, jobs, schedules)
    mu, centre = jobs[0].mu, jobs[0].centre

    def objective(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor, m: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
        # = task.batch_objective on the unpadded batch: s · mean(ℓ) + (l2/2)‖θ‖² [+ prox term]
        value = s * (task.loss_fn(task.outputs(theta, x), y) * m).sum() / m.sum()
        value = value + task.regularizer(theta)
        if mu > 0:
            value = value + 0.5 * mu * (theta - centre).square().sum()
        return value

    # Clients' objectives are independent, so the gradient of their sum w.r.t. the stacked
    # (G, d) parameters is every client's own gradient: one autograd backward through the
    # vmapped forward (measured ~25% faster than vmap(grad(objective)) on small MLPs).
    batched = torch.func.vmap(objective)
    theta = jobs[0].start.detach().expand(G, -1).clone()
    with torch.enable_grad():
        for t in range(steps):
            leaf = theta.requires_grad_()
            (g,) = torch.autograd.grad(batched(leaf, X[:, t], Y[:, t], mask[:, t], scale).sum(), leaf)
            theta = (leaf - cfg.lr * g).detach()
    return theta


# ---------------------------------------------------------------------------------------------
# Fused path for MLP classifiers: Linear (− ReLU − Linear)* with per-sample cross entropy.
def mlp_layers(task: Task) -> list[tuple[str, str]] | None:
    """``[(weight name, bias name), …]`` when the task's model is a chain of ``nn.Linear`` layers
    (with bias) separated by ``nn.ReLU`` and its loss is the per-sample cross entropy; else None."""
    from asyncfl.tasks.common import cross_entropy

    model = task.model
    modules = [model] if isinstance(model, torch.nn.Linear) else list(model.children()) if isinstance(model, torch.nn.Sequential) else None
    if not modules or task.loss_fn is not cross_entropy or task.reduction != "mean":
        return None
    layers, prefix = [], "" if isinstance(model, torch.nn.Linear) else None
    for i, module in enumerate(modules):
        expect_linear = i % 2 == 0
        if expect_linear and isinstance(module, torch.nn.Linear) and module.bias is not None:
            name = "" if prefix == "" else f"{i}."
            layers.append((f"{name}weight", f"{name}bias"))
        elif not expect_linear and isinstance(module, torch.nn.ReLU):
            continue
        else:
            return None
    return layers if len(modules) % 2 == 1 else None


def _train_group_mlp(task: Task, cfg: ClientConfig, jobs: list[LocalJob], schedules: list[list]) -> torch.Tensor:
    """:func:`_train_group` for MLP classifiers, with the forward and backward pass written out
    as batched matrix products (no autograd, no vmap: the per-op overhead of those dominated
    these small models). Per step and client ``g`` with batch mask ``m``:

    ``z_l = a_{l−1} W_lᵀ + b_l``, ``a_l = relu(z_l)``; ``∂f/∂z_L = s_g m (softmax(z_L) − onehot(y)) / Σm``;
    ``∂W_l = ∂z_lᵀ a_{l−1}``, ``∂b_l = Σ ∂z_l``, ``∂a_{l−1} = ∂z_l W_l``, ``∂z_{l−1} = ∂a_{l−1} ⊙ [z_{l−1} > 0]``;
    plus ``l2 θ`` and ``μ (θ − centre)``. Equal to autograd on the same objective up to float
    round-off (``tests/test_perf.py`` compares both against per-client training).
    """
    layers = mlp_layers(task)
    assert layers is not None
    G, steps = len(jobs), len(schedules[0])
    X, Y, mask, scale = _group_batches(task, jobs, schedules)
    weight = scale[:, None, None] * mask / mask.sum(dim=2, keepdim=True)  # (G, steps, width)
    classes = dict(task.model.named_parameters())[layers[-1][0]].shape[0]
    onehot = torch.nn.functional.one_hot(Y, num_classes=classes).to(task.dtype)
    mu, centre, l2 = jobs[0].mu, jobs[0].centre, task.l2
    theta = jobs[0].start.detach().expand(G, -1).clone()
    grad = torch.empty_like(theta)
    grad_views = task.unflatten(grad)
    for t in range(steps):
        params = task.unflatten(theta)
        acts, pre = [X[:, t].reshape(G, X.shape[2], -1)], []
        for i, (w_name, b_name) in enumerate(layers):
            z = torch.baddbmm(params[b_name].unsqueeze(1), acts[-1], params[w_name].transpose(1, 2))
            pre.append(z)
            acts.append(torch.relu(z) if i < len(layers) - 1 else z)
        dz = (torch.softmax(pre[-1], dim=-1) - onehot[:, t]) * weight[:, t, :, None]
        for i in range(len(layers) - 1, -1, -1):
            w_name, b_name = layers[i]
            torch.bmm(dz.transpose(1, 2), acts[i], out=grad_views[w_name])
            torch.sum(dz, dim=1, out=grad_views[b_name])
            if i:
                dz = torch.bmm(dz, params[w_name]) * (pre[i - 1] > 0)
        if l2:
            grad.add_(theta, alpha=l2)
        if mu > 0:
            grad.add_(theta - centre, alpha=mu)
        theta = theta - cfg.lr * grad
    return theta
