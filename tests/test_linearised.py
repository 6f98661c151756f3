"""The linearised local step (docs/baselines.md §5.1): the closed form against the primal-dual
seed's eq. 4, each gradient oracle against a loop written out with the quadratic task's
A_k, b_k, and FedPD with linearised steps reaching the pooled least-squares solution."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from asyncfl.compute.linearised import linearised_step, linearised_train
from asyncfl.compute.training import LocalJob, batch_schedule, sgd_train
from asyncfl.config import scenario as sc
from asyncfl.errors import ScenarioError
from asyncfl.compose import run_blocking


def _scenario(**client):
    return sc.validate({
        "population": {"clients": 4}, "latency": {"dist": "constant", "value": 1.0},
        "task": {"name": "quadratic", "problem": "random", "dim": 3, "samples_per_client": 10},
        "client": {"solver": "linearised", "lr": 0.01, "local_steps": 7, "batch_size": 4, "mu": 1.0, **client},
        "server": {"protocol": "sync", "cohort": 4, "algorithm": "fedpd"}, "run": {"steps": 1}})


def test_the_step_is_the_seeds_eq_4_written_with_the_prox_centre():
    """eq. 4: s/(s+γ) x + γ/(s+γ) c − sγ/(s+γ)(g + λ), with the centre c − sλ and μ = 1/s."""
    rng = np.random.default_rng(0)
    x, g, c, lam = (torch.tensor(rng.normal(size=5)) for _ in range(4))
    s, gamma = 0.7, 0.2
    want = s / (s + gamma) * x + gamma / (s + gamma) * c - s * gamma / (s + gamma) * (g + lam)
    torch.testing.assert_close(linearised_step(x, g, c - s * lam, 1 / s, gamma), want, rtol=0, atol=1e-15)
    # it minimises ⟨g, θ⟩ + (μ/2)‖θ − centre‖² + ‖θ − x‖²/(2γ): the gradient there is 0
    theta = linearised_step(x, g, c, 2.0, gamma)
    torch.testing.assert_close(g + 2.0 * (theta - c) + (theta - x) / gamma, torch.zeros(5, dtype=torch.float64),
                               rtol=0, atol=1e-13)
    # μ = 0: a plain gradient step x − γg
    torch.testing.assert_close(linearised_step(x, g, c, 0.0, gamma), x - gamma * g, rtol=0, atol=1e-15)


def _task_and_job(scenario, mu: float = 0.5):
    task = run_blocking(scenario).task
    rng = np.random.default_rng(1)
    start, centre = (torch.tensor(rng.normal(size=3)) for _ in range(2))
    return task, LocalJob(2, start, centre, mu, seed=99)


def _grad(A: np.ndarray, b: np.ndarray, theta: np.ndarray, rows) -> np.ndarray:
    """∇ of f_k(θ; B) = n_k · mean_{i∈B} ½(a_iᵀθ − b_i)² (the task's sum reduction)."""
    rows = np.arange(len(b)) if rows is None else np.asarray(rows)
    return len(b) / len(rows) * A[rows].T @ (A[rows] @ theta - b[rows])


@pytest.mark.parametrize("oracle", ["minibatch", "variance-reduced"])
def test_each_oracle_is_the_loop_written_out_with_a_k_and_b_k(oracle):
    scenario = _scenario(oracle=oracle, oracle_refresh=3)
    task, job = _task_and_job(scenario)
    A, b = task.clients[2].x.numpy(), task.clients[2].y.numpy()
    batches = batch_schedule(10, scenario.client, torch.Generator().manual_seed(99))  # the job's index sets
    assert len(batches) == 7 and all(len(idx) == 4 for idx in batches)
    gamma, mu = 0.01, 0.5
    x, centre, prev, v = job.start.numpy(), job.centre.numpy(), None, None
    for r, idx in enumerate(batches):
        if oracle == "minibatch":
            v = _grad(A, b, x, idx)
        elif r % 3 == 0:  # r = 0, 3, 6: the full local gradient
            v = _grad(A, b, x, None)
        else:
            v = v + _grad(A, b, x, idx) - _grad(A, b, prev, idx)
        prev, x = x, (x + gamma * mu * centre - gamma * v) / (1 + gamma * mu)
    np.testing.assert_allclose(linearised_train(task, scenario.client, job).numpy(), x, rtol=1e-12, atol=1e-12)


def test_the_minibatch_oracle_without_a_proximal_term_is_the_sgd_solver():
    scenario = _scenario()
    task, job = _task_and_job(scenario, mu=0.0)
    torch.testing.assert_close(linearised_train(task, scenario.client, job), sgd_train(task, scenario.client, job),
                               rtol=0, atol=1e-14)


@pytest.mark.slow
def test_fedpd_with_linearised_variance_reduced_steps_reaches_the_pooled_solution():
    """p = 0: FedPD's fixed point is θ* = argmin Σ_k f_k (lstsq here). At a fixed point the warm
    start already solves the local problem, the oracle's full gradient at r = 0 is exact and its
    corrections vanish, so the inexact inner solves leave no bias; after T = 150 rounds the
    distance is 6.6e-6 (measured), from |θ*| ≈ 1.8 at θ_1 = 0."""
    raw = {"population": {"clients": 4}, "latency": {"dist": "constant", "value": 1.0},
           "task": {"name": "quadratic", "problem": "random", "dim": 3, "samples_per_client": 10},
           "client": {"solver": "linearised", "oracle": "variance-reduced", "oracle_refresh": 5, "batch_size": 5,
                      "lr": 0.02, "local_steps": 40, "mu": 1.0},
           "server": {"protocol": "sync", "cohort": 4, "algorithm": "fedpd"}, "run": {"steps": 150, "eval_every": 150}}
    sim = run_blocking(sc.validate(raw))
    A = np.vstack([c.x.numpy() for c in sim.task.clients])
    b = np.concatenate([c.y.numpy() for c in sim.task.clients])
    pooled = np.linalg.lstsq(A, b, rcond=None)[0]
    np.testing.assert_allclose(sim.theta.numpy(), pooled, rtol=0, atol=2e-5)


def test_the_solvers_keys_are_its_own():
    with pytest.raises(ScenarioError) as err:
        sc.validate({"client": {"local_steps": 1, "oracle": "variance-reduced"}})
    assert "client.oracle: unknown key" in str(err.value) and "'linearised'" in str(err.value)
    with pytest.raises(ScenarioError) as err:
        _scenario(oracle="spider")
    assert "client.oracle = 'spider'" in str(err.value)
