"""The ``clipped-sgd`` local solver: ``θ ← θ − lr · clip(∇f_k(θ; B), grad_clip)`` over the same
mini-batches as asyncfl's SGD (docs/extending.md §4)."""

import torch

from asyncfl import LocalJob, LocalSolver, Task, batch_schedule, returns


class ClippedSGD(LocalSolver):
    def train(self, task: Task, cfg, job: LocalJob) -> torch.Tensor:
        data = task.clients[job.client]
        generator = torch.Generator().manual_seed(job.seed)
        theta = job.start.detach().clone()
        for idx in batch_schedule(len(data), cfg, generator):
            x, y = (data.x, data.y) if idx is None else (data.x[idx], data.y[idx])
            leaf = theta.requires_grad_()
            value = task.batch_objective(leaf, job.client, x, y)
            if job.mu > 0:
                value = value + 0.5 * job.mu * (leaf - job.centre).square().sum()
            (grad,) = torch.autograd.grad(value, leaf)
            norm = float(torch.linalg.vector_norm(grad))
            if norm > cfg.grad_clip:
                grad = grad * (cfg.grad_clip / norm)
            theta = (leaf - cfg.lr * grad).detach()
        return theta


SOLVER = ClippedSGD()
build = returns(SOLVER)  # the component's builder, build(cfg, ctx) -> SOLVER
