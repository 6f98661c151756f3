"""Local training: the client's solver (docs/baselines.md "inexact local solver").

A job minimises ``f_k(θ) + (μ/2)‖θ − centre‖²`` starting from ``start``:

* ``sgd``: gradient steps ``θ ← θ − lr ∇[f_k(θ; B) + (μ/2)‖θ − centre‖²]`` on mini-batches
  ``B`` (``batch_size``; absent = full batch), for ``local_steps`` steps or ``epochs`` passes
  over a fresh permutation each pass;
* ``adam``: Adam steps on the same mini-batches (:func:`adam_train`);
* ``exact`` (quadratic tasks): the closed-form ``prox_{f_k,μ}(centre)`` (``μ = 0``: the client's
  own least-squares solution).

Each solver is a component (:mod:`asyncfl.compute.solvers`); the executors run the one
``client.solver`` names (:func:`asyncfl.compose.local_train` runs one job with it).

All randomness comes from the job's own ``seed``, so a job's result does not depend on the
executor that runs it (docs/architecture.md §2 principle 2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, NamedTuple

import torch

from asyncfl.compute.device import batches_on, device_of
from asyncfl.tasks.base import BatchObjective, Task
from asyncfl.tasks.common import cross_entropy

if TYPE_CHECKING:
    from asyncfl.config.sections import ClientConfig


@dataclass(frozen=True, slots=True)
class LocalJob:
    """One local training job. ``start`` is the initial iterate; ``centre`` the prox centre
    (used when ``mu > 0`` or by the exact solver). ``local_steps``, when set, replaces
    ``client.local_steps`` for this job (an algorithm's inexactness schedule, docs/baselines.md
    §4.2); None: the ``[client]`` section decides. A solver whose work is local steps reads the
    section through :func:`job_config`."""

    client: int
    start: torch.Tensor
    centre: torch.Tensor
    mu: float
    seed: int
    local_steps: int | None = field(default=None, kw_only=True)


def job_config(cfg: ClientConfig, job: LocalJob) -> ClientConfig:
    """The ``[client]`` section as ``job`` uses it: its own ``local_steps`` (and no ``epochs``)
    when it has one, else ``cfg`` itself."""
    if job.local_steps is None:
        return cfg
    return cfg.model_copy(update={"local_steps": job.local_steps, "epochs": None})


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


def sgd_train(task: Task, cfg: ClientConfig, job: LocalJob) -> torch.Tensor:
    """Gradient steps on ``f_k + (μ/2)‖θ − centre‖²`` over :func:`batch_schedule`'s mini-batches,
    as ``torch.optim.SGD`` with the config's ``momentum`` (heavy ball, dampening 0, optional
    ``nesterov``) and ``weight_decay`` (``g ← ∇ + wd·θ``); with neither, ``θ ← θ − lr ∇``
    (docs/tasks.md §8)."""
    cfg = job_config(cfg, job)
    data = task.clients[job.client]
    generator = torch.Generator().manual_seed(job.seed)
    k, mu, centre = job.client, job.mu, job.centre
    momentum, nesterov = getattr(cfg, "momentum", 0.0), getattr(cfg, "nesterov", False)
    decay = getattr(cfg, "weight_decay", 0.0)

    def objective(theta: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        value = task.batch_objective(theta, k, x, y)
        if mu > 0:
            value = value + 0.5 * mu * (theta - centre).square().sum()
        return value

    # Plain reverse-mode autograd on a leaf: the same numbers as torch.func.grad (checked bit
    # for bit), at ~60% of its per-step cost on small models (no functorch transform set-up).
    # The step θ ← θ − lr·g is taken in place, as the two operations ``lr·g`` then ``θ − ·`` that
    # ``leaf - lr * grad`` is (the same numbers): two fresh d-vectors a step were 29 % of a step's
    # CPU time on LEAF's 6.6 M-parameter CNN (docs/tasks.md §19).
    if mu == 0 and task.per_parameter:
        return _sgd_per_parameter(task, cfg, job, generator, momentum, nesterov, decay)
    theta = job.start.detach().clone()
    step = torch.empty_like(theta)
    buf: torch.Tensor | None = None
    with torch.enable_grad():
        for idx in batch_schedule(len(data), cfg, generator):
            x, y = (data.x, data.y) if idx is None else (data.x[idx], data.y[idx])
            leaf = theta.requires_grad_()
            (grad,) = torch.autograd.grad(objective(leaf, x, y), leaf)
            if decay:
                grad = grad + decay * leaf.detach()
            if momentum:
                buf = grad.clone() if buf is None else buf * momentum + grad
                grad = grad + momentum * buf if nesterov else buf
            theta = leaf.detach().sub_(torch.mul(grad, cfg.lr, out=step))
    return theta


def _sgd_per_parameter(task: Task, cfg: ClientConfig, job: LocalJob, generator: torch.Generator, momentum: float,
                       nesterov: bool, decay: float) -> torch.Tensor:
    """:func:`sgd_train` for an objective that reads ``θ`` only through the model's parameters
    (``μ = 0``, :attr:`Task.per_parameter`): the same steps, taken parameter by parameter on
    leaves that are views of the job's one ``θ`` buffer, so that autograd hands back each
    parameter's gradient and nobody assembles the ``d``-vector ``∇_θ`` (the backward of the flat
    ``θ``'s ``split`` concatenated it every step: 17 % of a LEAF-CNN step's CPU time). Every
    update is elementwise, so the result has the same bits as the flat path.

    Plain SGD scales each gradient in place (``g ← lr·g``, then ``p ← p − g``: the same two
    operations) when autograd handed back gradients that nothing else holds (:func:`owned`), so
    that a job allocates no model-sized step buffer (26 MB on LEAF's CNN, faulted in afresh per
    job) and a step moves 26 MB less through memory (docs/performance.md, "The LEAF CNN")."""
    data = task.clients[job.client]
    k = job.client
    theta = job.start.detach().clone()  # the job's result; the leaves below are views of it
    leaves = {name: view.detach().requires_grad_() for name, view in task.unflatten(theta).items()}
    params = list(leaves.values())
    steps: list[torch.Tensor] = []  # views of one step buffer, made when first needed
    bufs: list[torch.Tensor | None] = [None] * len(params)
    plain = not decay and not momentum

    def steps_on(objective: BatchObjective) -> None:
        nonlocal steps
        for idx in batch_schedule(len(data), cfg, generator):
            x, y = (data.x, data.y) if idx is None else (data.x[idx], data.y[idx])
            grads = torch.autograd.grad(objective(k, x, y), params)
            with torch.no_grad():
                if plain and owned(grads):
                    for p, g in zip(params, grads):
                        p.sub_(g.mul_(cfg.lr))
                    continue
                if not steps:
                    steps = list(task.unflatten(torch.empty_like(theta)).values())
                for i, (p, g, s) in enumerate(zip(params, grads, steps)):
                    if decay:
                        g = g + decay * p
                    if momentum:
                        buf = bufs[i] = g.clone() if bufs[i] is None else bufs[i] * momentum + g
                        g = g + momentum * buf if nesterov else buf
                    p.sub_(torch.mul(g, cfg.lr, out=s))

    with torch.enable_grad():
        task.with_parameters(leaves, steps_on)  # the model reads the leaves for the whole job
    return theta


def owned(grads: tuple[torch.Tensor, ...]) -> bool:
    """Whether every gradient may be overwritten: each one contiguous (no element shared with
    itself, as an expanded tensor's are) and no two on the same storage (autograd passes one
    incoming gradient on unchanged to both inputs of an addition)."""
    storages = {g.untyped_storage().data_ptr() for g in grads}
    return len(storages) == len(grads) and all(g.is_contiguous() for g in grads)


def adam_train(task: Task, cfg: ClientConfig, job: LocalJob) -> torch.Tensor:
    """Adam steps on ``f_k + (μ/2)‖θ − centre‖²`` over :func:`batch_schedule`'s mini-batches, as
    ``torch.optim.Adam``: ``m ← β₁m + (1−β₁)g``, ``v ← β₂v + (1−β₂)g²``,
    ``θ ← θ − (lr/(1−β₁ᵗ)) m / (√v/√(1−β₂ᵗ) + ε)``, ``g = ∇ + wd·θ`` (docs/tasks.md §8)."""
    cfg = job_config(cfg, job)
    data = task.clients[job.client]
    generator = torch.Generator().manual_seed(job.seed)
    k, mu, centre = job.client, job.mu, job.centre
    b1, b2, eps, decay = cfg.adam_beta1, cfg.adam_beta2, cfg.eps, cfg.weight_decay
    theta = job.start.detach().clone()
    m, v = torch.zeros_like(theta), torch.zeros_like(theta)
    with torch.enable_grad():
        for t, idx in enumerate(batch_schedule(len(data), cfg, generator), start=1):
            x, y = (data.x, data.y) if idx is None else (data.x[idx], data.y[idx])
            leaf = theta.requires_grad_()
            value = task.batch_objective(leaf, k, x, y)
            if mu > 0:
                value = value + 0.5 * mu * (leaf - centre).square().sum()
            (grad,) = torch.autograd.grad(value, leaf)
            theta = leaf.detach()
            if decay:
                grad = grad + decay * theta
            m = b1 * m + (1 - b1) * grad
            v = b2 * v + (1 - b2) * grad * grad
            denom = v.sqrt() / math.sqrt(1 - b2**t) + eps
            theta = theta - (cfg.lr / (1 - b1**t)) * m / denom
    return theta


# ---------------------------------------------------------------------------------------------
# Batched local training (run.batched): many jobs at once, with torch.func.vmap or, for MLP
# classifiers, a fused forward/backward pass written as batched matrix products.
def sgd_train_batched(task: Task, cfg: ClientConfig, jobs: list[LocalJob]) -> list[torch.Tensor]:
    """``[sgd_train(task, cfg, job) for job in jobs]`` for plain SGD, computed group by group (``vmap``, or
    :func:`_train_group_mlp` for MLP classifiers).

    Jobs are grouped by (start tensor, centre tensor, μ, number of steps): within a group every
    client starts from the same model and takes the same number of steps, so the group is one
    stacked ``(G, d)`` parameter tensor updated by a batched gradient per step. Each client's
    mini-batches are exactly ``batch_schedule`` with its own generator (the same random stream
    as :func:`sgd_train`); batches of unequal size (different ``n_k``, the last batch of an
    epoch, full batches) are padded with a real sample and masked out of the mean. The result
    equals per-client training to float round-off (the masked mean sums in another order).
    Under autocast (``run.precision = "bf16"``) MLP classifiers take ``vmap`` too.
    A task that does not batch on its device (:func:`~asyncfl.compute.device.batches_on`: its
    ``batched_training`` trait on the CPU, ``batched_on_accelerator`` on an accelerator) is trained
    job by job (docs/tasks.md §9).
    """
    if not jobs or not batches_on(task, device_of(task)):
        return [sgd_train(task, cfg, job) for job in jobs]
    groups: dict[tuple, list[int]] = {}
    clients = task.clients
    sizes = [len(clients[job.client]) for job in jobs]
    steps_of: dict[int, int] = {}  # by data size, for the jobs that take the section's steps
    for i, job in enumerate(jobs):
        # id() is safe here: the jobs hold their tensors alive for the whole call
        n = sizes[i]
        if job.local_steps is not None:
            steps = local_steps_count(n, job_config(cfg, job))
        elif (steps := steps_of.get(n)) is None:
            steps = steps_of[n] = local_steps_count(n, cfg)
        groups.setdefault((id(job.start), id(job.centre), job.mu, steps), []).append(i)
    out: list[torch.Tensor] = [None] * len(jobs)  # type: ignore[list-item]
    # under autocast (run.precision = "bf16", asyncfl.compute.precision) the fused MLP path, whose
    # products are written by hand into float32 buffers, gives way to vmap and autograd, which
    # autocast covers as it covers job-by-job training
    kind = device_of(task).type
    autocast = torch.amp.is_autocast_available(kind) and torch.is_autocast_enabled(kind)
    layers = None if autocast else mlp_layers(task)
    for members in groups.values():
        if len(members) == 1:  # nothing to batch: the plain loop is cheaper than the set-up
            out[members[0]] = sgd_train(task, cfg, jobs[members[0]])
            continue
        group = [jobs[i] for i in members]
        group_cfg = job_config(cfg, group[0])  # the group's jobs take one number of steps
        batches = _group_batches(task, group_cfg, group, [sizes[i] for i in members])
        thetas = (_train_group(task, group_cfg, group, batches) if layers is None
                  else _train_group_mlp(task, group_cfg, group, batches, layers))
        for i, theta in zip(members, thetas.unbind(0)):
            out[i] = theta
    return out


class GroupBatches(NamedTuple):
    """Every local step's mini-batch of every job of a group, padded to the widest batch; step
    major, so that one step's batches ``x[t]`` are one contiguous block."""

    x: torch.Tensor  # (steps, G, width, ...) inputs
    y: torch.Tensor  # (steps, G, width, ...) targets
    mask: torch.Tensor  # (steps, G, width): 1 for a real sample, 0 for padding
    scale: torch.Tensor  # (G,) objective_scale of each job's client


def group_indices(sizes: list[int], seeds: list[int], cfg: ClientConfig) -> tuple[torch.Tensor, torch.Tensor]:
    """The mini-batches of jobs whose clients hold ``sizes[g]`` samples, each drawn from its own
    ``torch.Generator`` seeded with ``seeds[g]``: ``index[g, s, :lengths[g, s]]`` are the samples of
    job ``g``'s local step ``s``, padded with sample 0 to a common width. All jobs must take the
    same number of steps (:func:`local_steps_count`). This is :func:`batch_schedule` (the
    per-client form: a list of index tensors, cheaper for one job) laid out for a group;
    ``tests/test_perf.py`` checks the two row for row.

    * ``batch_size`` absent or ``≥ n``: every step is the full batch ``0 … n−1``; no draws.
    * ``epochs``: one ``randperm(n)`` per epoch, cut into chunks of ``batch_size`` (the last one
      short when ``batch_size`` does not divide ``n``).
    * ``local_steps``: consecutive chunks of ``batch_size`` of the concatenated permutations, one
      ``randperm(n)`` per pass over the data (a pass's remainder starts the next batch).

    The common case of equal data sizes is laid out with a handful of tensor ops for the group."""
    steps, b = local_steps_count(sizes[0], cfg), cfg.batch_size
    sampled = [b is not None and b < n for n in sizes]
    # a full-batch job has n ≤ batch_size, so the width is batch_size as soon as one job samples
    width = b if any(sampled) else max(sizes)
    generator, streams = torch.Generator(), []
    for n, seed, sampling in zip(sizes, seeds, sampled):
        if sampling:
            generator.manual_seed(seed)
            draws = cfg.epochs if cfg.epochs is not None else math.ceil(steps * b / n)
            perms = [torch.randperm(n, generator=generator) for _ in range(draws)]
            streams.append(perms[0] if draws == 1 else torch.cat(perms))
    if all(sampled) and len(set(sizes)) == 1:  # the common case, laid out for the whole group
        n = sizes[0]
        return _layout(torch.stack(streams), n, steps, b, cfg), _lengths(n, steps, b, cfg).expand(len(sizes), -1)
    index = torch.zeros(len(sizes), steps, width, dtype=torch.long)
    lengths = torch.empty(len(sizes), steps, dtype=torch.long)
    stream = iter(streams)
    for g, (n, sampling) in enumerate(zip(sizes, sampled)):
        if sampling:
            index[g, :, :b] = _layout(next(stream)[None], n, steps, b, cfg)[0]
            lengths[g] = _lengths(n, steps, b, cfg)
        else:  # full batches, no randomness drawn
            index[g, :, :n] = torch.arange(n)
            lengths[g] = n
    return index, lengths


def _layout(streams: torch.Tensor, n: int, steps: int, b: int, cfg: ClientConfig) -> torch.Tensor:
    """``(G, steps, b)`` batches from ``(G, draws · n)`` permutation streams of jobs holding ``n``
    samples each (see :func:`group_indices`): per epoch, chunks of ``b`` with a short last one
    (padded with 0); with ``local_steps``, consecutive chunks of the stream."""
    G = streams.shape[0]
    if cfg.epochs is None:
        return streams[:, : steps * b].reshape(G, steps, b)
    per_epoch = math.ceil(n / b)
    padded = torch.nn.functional.pad(streams.view(G, cfg.epochs, n), (0, per_epoch * b - n))
    return padded.view(G, steps, b)


def _lengths(n: int, steps: int, b: int, cfg: ClientConfig) -> torch.Tensor:
    """Real samples in each of the ``steps`` batches of a sampling job holding ``n`` samples."""
    if cfg.epochs is None:
        return torch.full((steps,), b, dtype=torch.long)
    per_epoch = math.ceil(n / b)
    return torch.tensor(([b] * (per_epoch - 1) + [n - (per_epoch - 1) * b]) * cfg.epochs)


def _group_batches(task: Task, cfg: ClientConfig, jobs: list[LocalJob], sizes: list[int] | None = None) -> GroupBatches:
    """Gather every step's batch of every job in one indexing op on the pooled training data
    (``sizes``: the jobs' clients' sample counts, when the caller has them). The indices are drawn
    on the CPU (the jobs' own generators) and the batches gathered on the data's device."""
    if sizes is None:
        sizes = [len(task.clients[j.client]) for j in jobs]
    index, lengths = group_indices(sizes, [j.seed for j in jobs], cfg)
    index, lengths = index.transpose(0, 1), lengths.transpose(0, 1)  # step major
    pooled = task.pooled_training_data()
    device = pooled.x.device
    mask = (torch.arange(index.shape[-1]) < lengths[..., None]).to(device=device, dtype=task.dtype)
    rows = (index + task.client_offsets()[torch.tensor([j.client for j in jobs])][None, :, None]).reshape(-1).to(device)
    scale = torch.tensor([task.objective_scale(j.client) for j in jobs], dtype=task.dtype, device=device)
    x = pooled.x.index_select(0, rows).view(*index.shape, *pooled.x.shape[1:])  # ~4x faster than x[rows]
    y = pooled.y.index_select(0, rows).view(*index.shape, *pooled.y.shape[1:])
    return GroupBatches(x, y, mask, scale)


def _train_group(task: Task, cfg: ClientConfig, jobs: list[LocalJob], batches: GroupBatches) -> torch.Tensor:
    """Train ``G`` jobs sharing start, centre, μ and step count; returns ``(G, d)``."""
    steps, G = batches.mask.shape[:2]
    X, Y, mask, scale = batches
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
    step = torch.empty_like(theta)
    with torch.enable_grad():
        for t in range(steps):
            leaf = theta.requires_grad_()
            (g,) = torch.autograd.grad(batched(leaf, X[t], Y[t], mask[t], scale).sum(), leaf)
            theta = leaf.detach().sub_(torch.mul(g, cfg.lr, out=step))  # in place, as sgd_train
    return theta


# ---------------------------------------------------------------------------------------------
# Fused path for MLP classifiers: Linear (− ReLU − Linear)* with per-sample cross entropy.
def mlp_layers(task: Task) -> list[tuple[str, str]] | None:
    """``[(weight name, bias name), …]`` when the task's model is a chain of ``nn.Linear`` layers
    (with bias) separated by ``nn.ReLU`` and its loss is the per-sample cross entropy; else None."""
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


def _train_group_mlp(task: Task, cfg: ClientConfig, jobs: list[LocalJob], batches: GroupBatches,
                     layers: list[tuple[str, str]]) -> torch.Tensor:
    """:func:`_train_group` for MLP classifiers, with the forward and backward pass written out
    as batched matrix products (no autograd, no vmap: the per-op overhead of those dominated
    these small models). Per step and client ``g`` with batch mask ``m``:

    ``z_l = a_{l−1} W_lᵀ + b_l``, ``a_l = relu(z_l)``; ``∂f/∂z_L = s_g m (softmax(z_L) − onehot(y)) / Σm``;
    ``∂W_l = ∂z_lᵀ a_{l−1}``, ``∂b_l = Σ ∂z_l``, ``∂a_{l−1} = ∂z_l W_l``, ``∂z_{l−1} = ∂a_{l−1} ⊙ [z_{l−1} > 0]``;
    plus ``l2 θ`` and ``μ (θ − centre)``. Equal to autograd on the same objective up to float
    round-off (``tests/test_perf.py`` compares both against per-client training).

    During the steps the ``G`` models live in one layer-major buffer (all clients' ``W_1``, then
    all ``W_2``, …, then the biases): every parameter is a contiguous ``(G, …)`` view, as
    ``bmm`` needs to run as one batched product (a strided view into the client-major
    ``(G, d)`` layout sends it to a per-client loop), and a step updates the whole buffer with
    one op. The result is written back to the ``(G, d)`` layout at the end. Softmax is written
    out as ``exp(z − max) / Σ``: torch's kernel is ~4× slower on rows of 10 classes.
    """
    X, Y, mask, scale = batches
    steps, G, width = mask.shape
    weight = (scale[:, None] * mask / mask.sum(dim=2, keepdim=True)).unsqueeze(-1)  # (steps, G, width, 1)
    start = task.unflatten(jobs[0].start.detach())  # in the flat layout's order
    names = [w for w, _ in layers] + [b for _, b in layers]  # W_1..W_L, b_1..b_L
    sizes = [G * start[n].numel() for n in names]
    theta, grad = (torch.empty(sum(sizes), dtype=task.dtype, device=X.device) for _ in range(2))
    params = [v.view(G, *start[n].shape) for n, v in zip(names, theta.split(sizes))]
    grads = [v.view(G, *start[n].shape) for n, v in zip(names, grad.split(sizes))]
    for n, p in zip(names, params):
        p.copy_(start[n].expand_as(p))
    L = len(layers)
    Ws, gWs, gbs = params[:L], grads[:L], grads[L:]
    WTs, bs = [W.transpose(1, 2) for W in Ws], [b.unsqueeze(1) for b in params[L:]]  # views, updated in place
    mu, l2 = jobs[0].mu, task.l2
    if mu > 0:
        centre, centre_buffer = task.unflatten(jobs[0].centre.detach()), torch.empty_like(theta)
        for n, c in zip(names, centre_buffer.split(sizes)):
            c.view(G, *centre[n].shape).copy_(centre[n].expand(G, *centre[n].shape))
    minus_onehot_w = torch.nn.functional.one_hot(Y, num_classes=Ws[-1].shape[1]).to(task.dtype).mul_(-weight)
    X = X.reshape(steps, G, width, -1)
    for t in range(steps):
        acts, pre = [X[t]], []
        for i in range(L):
            z = torch.baddbmm(bs[i], acts[-1], WTs[i])
            pre.append(z)
            acts.append(torch.relu(z) if i < L - 1 else z)
        e = (pre[-1] - pre[-1].amax(-1, keepdim=True)).exp_()
        dz = torch.addcmul(minus_onehot_w[t], e, weight[t] / e.sum(-1, keepdim=True))
        for i in range(L - 1, -1, -1):
            torch.bmm(dz.transpose(1, 2), acts[i], out=gWs[i])
            torch.sum(dz, dim=1, out=gbs[i])
            if i:
                dz = torch.ops.aten.threshold_backward(torch.bmm(dz, Ws[i]), pre[i - 1], 0)
        if l2:
            grad.add_(theta, alpha=l2)
        if mu > 0:
            grad.add_(theta - centre_buffer, alpha=mu)
        theta.add_(grad, alpha=-cfg.lr)
    flat = {n: p.reshape(G, -1) for n, p in zip(names, params)}
    return torch.cat([flat[n] for n in start], dim=1)
