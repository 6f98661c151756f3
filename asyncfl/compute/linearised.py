"""The linearised local step and its gradient oracles (docs/baselines.md §5.1).

The local problem of a job is ``min_θ f_k(θ) + (μ/2)‖θ − centre‖²`` (for FedPD, ``centre =
c_k − sλ_k`` with ``s = 1/μ``: the local augmented Lagrangian up to a constant). Linearising
``f_k`` at the inner iterate ``x_r`` with the gradient estimate ``v_r`` and adding the proximal
term ``‖θ − x_r‖²/(2γ)`` (``γ`` = ``client.lr``) gives a quadratic with the closed-form minimiser

    x_{r+1} = (x_r + γμ·centre − γ v_r) / (1 + γμ),

which is the primal-dual seed's eq. 4 written with ``centre``: with ``s = 1/μ`` it is
``s/(s+γ) x_r + γ/(s+γ) c_k − sγ/(s+γ)(v_r + λ_k)``. With ``μ = 0`` it is a gradient step.

The oracle ``v_r`` (``client.oracle``): ``minibatch`` — ``∇f_k(x_r; B_r)`` on the step's
mini-batch from :func:`asyncfl.compute.training.batch_schedule`; ``variance-reduced`` — the
recursive (SARAH-type) estimate ``v_r = v_{r−1} + ∇f_k(x_r; B_r) − ∇f_k(x_{r−1}; B_r)``, with
``v_r = ∇f_k(x_r)`` on the whole local data at ``r = 0`` and every ``oracle_refresh`` steps.
"""

from __future__ import annotations

from typing import Any

import torch

from asyncfl.compute.training import LocalJob, batch_schedule, job_config
from asyncfl.tasks.base import Task


def linearised_step(x: torch.Tensor, v: torch.Tensor, centre: torch.Tensor, mu: float, gamma: float) -> torch.Tensor:
    """``argmin_θ ⟨v, θ⟩ + (μ/2)‖θ − centre‖² + ‖θ − x‖²/(2γ) = (x + γμ·centre − γv)/(1 + γμ)``."""
    return (x + gamma * mu * centre - gamma * v) / (1.0 + gamma * mu)


def linearised_train(task: Task, cfg: Any, job: LocalJob) -> torch.Tensor:
    """The job's local model after ``len(batch_schedule)`` linearised steps (module docstring)."""
    cfg = job_config(cfg, job)
    data = task.clients[job.client]
    k = job.client
    generator = torch.Generator().manual_seed(job.seed)

    def grad(theta: torch.Tensor, idx: torch.Tensor | None) -> torch.Tensor:
        x, y = (data.x, data.y) if idx is None else (data.x[idx], data.y[idx])
        leaf = theta.detach().clone().requires_grad_()
        with torch.enable_grad():
            (g,) = torch.autograd.grad(task.batch_objective(leaf, k, x, y), leaf)
        return g

    reduced = getattr(cfg, "oracle", "minibatch") == "variance-reduced"
    refresh = getattr(cfg, "oracle_refresh", 10)
    theta, previous, v = job.start.detach().clone(), None, None
    for r, idx in enumerate(batch_schedule(len(data), cfg, generator)):
        if not reduced:
            v = grad(theta, idx)
        elif r % refresh == 0:
            v = grad(theta, None)
        else:
            v = v + grad(theta, idx) - grad(previous, idx)
        previous, theta = theta, linearised_step(theta, v, job.centre, job.mu, cfg.lr)
    return theta
