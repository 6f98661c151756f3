"""FedDR's regularisers (docs/baselines.md §4): every prox against a numerical minimisation by
scipy, the gradient mapping against its definition, the diagnostics and the inexactness schedule
of a run."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
import scipy.optimize
import torch

from asyncfl.config import scenario as sc
from asyncfl.errors import ScenarioError
from asyncfl.server.prox import Regularizer, gradient_mapping
from asyncfl.server.splitting import Schedule, full_gradient
from asyncfl.compose import build_simulation, run_blocking

V = np.array([1.7, -0.2, 0.05, -2.4, 0.9])
H_STEP = 0.6

REGULARIZERS = [
    Regularizer("l1", 0.5),
    Regularizer("l2", 0.8),
    Regularizer("box", low=-0.5, high=1.0),
    Regularizer("ball", radius=1.5),
    Regularizer("elastic-net", reg=0.3, reg_l2=0.7),
    Regularizer("group-lasso", reg=0.9, group_size=2),  # groups {0,1}, {2,3}, {4}
]


def _numerical_prox(g: Regularizer, v: np.ndarray, h: float) -> np.ndarray:
    """argmin_x g(x) + ‖x − v‖²/(2h) by scipy: bounds for the box, a constraint for the ball,
    and for the non-smooth penalties the smooth split x = p − n, p, n ≥ 0 (‖x‖₁ = Σ(p + n))
    or Powell on the group norms, each polished to 1e-10."""
    d = v.size
    if g.kind == "box":
        res = scipy.optimize.minimize(lambda x: np.sum((x - v) ** 2) / (2 * h), v * 0, method="L-BFGS-B",
                                      bounds=[(g.low, g.high)] * d, options={"ftol": 1e-15, "gtol": 1e-12})
        return res.x
    if g.kind == "ball":
        cons = {"type": "ineq", "fun": lambda x: g.radius**2 - x @ x}
        res = scipy.optimize.minimize(lambda x: np.sum((x - v) ** 2) / (2 * h), np.zeros(d), method="SLSQP",
                                      constraints=[cons], options={"ftol": 1e-15, "maxiter": 500})
        return res.x
    if g.kind in ("l1", "l2", "elastic-net"):
        l1, l2 = {"l1": (g.reg, 0.0), "l2": (0.0, g.reg)}.get(g.kind, (g.reg, g.reg_l2))

        def f(z):
            x = z[:d] - z[d:]
            return l1 * z.sum() + 0.5 * l2 * x @ x + np.sum((x - v) ** 2) / (2 * h)

        res = scipy.optimize.minimize(f, np.ones(2 * d), method="L-BFGS-B", bounds=[(0, None)] * (2 * d),
                                      options={"ftol": 1e-15, "gtol": 1e-12})
        return res.x[:d] - res.x[d:]
    def f(x):
        groups = [x[i:i + g.group_size] for i in range(0, d, g.group_size)]
        return g.reg * sum(np.linalg.norm(gr) for gr in groups) + np.sum((x - v) ** 2) / (2 * h)

    res = scipy.optimize.minimize(f, v.copy(), method="Powell", options={"xtol": 1e-12, "ftol": 1e-15, "maxiter": 100000})
    return res.x


@pytest.mark.parametrize("g", REGULARIZERS, ids=lambda g: g.kind)
def test_each_prox_is_the_numerical_minimiser(g):
    ours = g.prox(torch.tensor(V), H_STEP).numpy()
    ref = _numerical_prox(g, V, H_STEP)
    np.testing.assert_allclose(ours, ref, rtol=0, atol=1e-5)
    objective = lambda x: g.value(torch.tensor(x)) + np.sum((x - V) ** 2) / (2 * H_STEP)  # noqa: E731
    assert objective(ours) <= objective(ref) + 1e-10


def test_the_closed_forms_in_numbers():
    v = torch.tensor(V)
    # group lasso: ‖(1.7, −0.2)‖ = 1.7117, factor 1 − 0.54/1.7117 = 0.68453; group (0.05, −2.4) keeps
    # 1 − 0.54/2.40052; group (0.9) shrinks to 0.36
    out = REGULARIZERS[5].prox(v, H_STEP).numpy()
    np.testing.assert_allclose(out[:2], V[:2] * (1 - 0.54 / np.hypot(1.7, 0.2)), rtol=1e-14)
    assert out[4] == pytest.approx(0.36, abs=1e-15)
    # ball: ‖v‖ = 3.1528 > 1.5, so v is scaled onto the sphere
    assert float(torch.linalg.vector_norm(REGULARIZERS[3].prox(v, H_STEP))) == pytest.approx(1.5, rel=1e-14)
    # elastic net = soft threshold at h·l1 = 0.18, then / (1 + h·l2) = 1.42
    assert REGULARIZERS[4].prox(v, H_STEP).numpy()[0] == pytest.approx((1.7 - 0.18) / 1.42, rel=1e-14)
    assert REGULARIZERS[4].prox(v, H_STEP).numpy()[2] == 0.0


def test_gradient_mapping_is_the_gradient_without_g_and_zero_at_a_stationary_point():
    grad = torch.tensor([0.3, -1.2, 0.0])
    theta = torch.tensor([0.5, 0.1, -0.4])
    np.testing.assert_allclose(gradient_mapping(theta, grad, Regularizer("none"), 0.7).numpy(), grad.numpy(), rtol=1e-15)
    # box [−1, 1] at θ = (1, 0, −1) with ∇f = (−2, 0, 3): pushing outwards, θ − β∇f is clipped back to θ
    box = Regularizer("box", low=-1.0, high=1.0)
    theta = torch.tensor([1.0, 0.0, -1.0])
    assert float(torch.linalg.vector_norm(gradient_mapping(theta, torch.tensor([-2.0, 0.0, 3.0]), box, 0.5))) == 0.0
    # l1 (κ = 1) at θ = 0 with |∇f| ≤ κ: 0 ∈ ∇f + ∂g, so G = 0; with |∇f| = 1.5 > κ it is 0.5 per coordinate
    l1 = Regularizer("l1", 1.0)
    zero = torch.zeros(2, dtype=torch.float64)
    assert float(gradient_mapping(zero, torch.tensor([0.4, -1.0], dtype=torch.float64), l1, 0.3).abs().max()) == 0.0
    np.testing.assert_allclose(gradient_mapping(zero, torch.tensor([1.5, -1.5], dtype=torch.float64), l1, 0.3).numpy(),
                               [0.5, -0.5], rtol=1e-14)


def _feddr(**server):
    return {"population": {"clients": 4}, "latency": {"dist": "constant", "value": 1.0},
            "task": {"name": "quadratic", "problem": "random", "dim": 4, "samples_per_client": 10},
            "client": {"local_steps": 2, "lr": 0.01, "mu": 1.0},
            "server": {"protocol": "sync", "cohort": 4, "algorithm": "feddr", "feddr_diagnostics": True, **server},
            "run": {"steps": 9, "eval_every": 3}}


def test_feddr_records_the_gradient_mapping_and_prox_residuals_at_every_evaluation():
    sim = run_blocking(sc.validate(_feddr(regularizer="l1", reg=0.05)))
    rows = sim.algorithm.summary(sim.algo_state)["baseline"]["diagnostics"]["rows"]
    assert [r[0] for r in rows] == [3, 6, 9]
    # ‖G_β(θ̄)‖ recomputed here from the final model: ∇f by finite differences of the task's objective
    theta = sim.theta.double()

    def F(x):
        t = torch.tensor(x)
        return float(sum(sim.task.batch_objective(t, k, c.x, c.y) for k, c in enumerate(sim.task.clients))) / 4

    eye = np.eye(4) * 1e-6
    grad = np.array([(F(theta.numpy() + e) - F(theta.numpy() - e)) / 2e-6 for e in eye])
    np.testing.assert_allclose(full_gradient(sim.task, theta).numpy(), grad, rtol=1e-6, atol=1e-7)
    beta = 4 * 1.0 / 5  # Ns/(N+1), s = 1/μ
    mapping = (theta.numpy() - np.sign(theta.numpy() - beta * grad) * np.maximum(np.abs(theta.numpy() - beta * grad) - beta * 0.05, 0)) / beta
    assert rows[-1][1] == pytest.approx(np.linalg.norm(mapping), rel=1e-5)
    assert all(r[2] > 0 and r[3] >= r[2] for r in rows)  # two SGD steps do not solve the prox exactly


def test_the_residual_is_zero_for_exact_solves_and_falls_with_more_local_steps():
    raw = _feddr()
    raw["client"] = {"solver": "exact", "mu": 1.0}
    sim = run_blocking(sc.validate(raw))
    rows = sim.algorithm.summary(sim.algo_state)["baseline"]["diagnostics"]["rows"]
    assert max(r[3] for r in rows) < 1e-12
    means = []
    for steps in (1, 20):
        raw = _feddr()
        raw["client"]["local_steps"] = steps
        sim = run_blocking(sc.validate(raw))
        means.append(sim.algorithm.summary(sim.algo_state)["baseline"]["diagnostics"]["rows"][-1][2])
    assert means[1] < means[0] / 5


@pytest.mark.parametrize("schedule,growth,want", [
    ("fixed", 0.0, [None] * 6),
    ("linear", 1.5, [2, 3, 5, 6, 8, 9]),  # 2 + ⌊1.5(t−1)⌋
    ("geometric", 2.0, [2, 4, 8, 16, 20, 20]),  # ⌈2·2^(t−1)⌉ capped at 20
])
def test_the_inexactness_schedule_sets_each_rounds_local_steps(schedule, growth, want):
    assert [Schedule(schedule, 2, growth, 20).local_steps(t) for t in range(1, 7)] == want


def test_a_scheduled_run_dispatches_jobs_with_the_scheduled_steps():
    raw = _feddr(feddr_schedule="linear", feddr_growth=1.0, feddr_diagnostics=False)
    sim = build_simulation(sc.validate(raw))
    seen = []
    original = sim.executor.submit

    def submit(job):
        seen.append((sim.version, job.local_steps))
        return original(job)

    sim.executor.submit = submit
    asyncio.run(sim.run())
    assert seen and all(steps == 2 + (version - 1) for version, steps in seen)
    with pytest.raises(ScenarioError) as err:
        sc.validate(_feddr(feddr_schedule="geometric", feddr_growth=0.5))
    assert "feddr_growth = 0.5" in str(err.value) and "growth ≥ 1" in str(err.value)
    exact = _feddr(feddr_schedule="linear", feddr_growth=1.0)
    exact["client"] = {"solver": "exact", "mu": 1.0}
    with pytest.raises(ScenarioError) as err:  # the schedule sets local steps: the exact solver takes none
        sc.validate(exact)
    assert "server.feddr_schedule = 'linear'" in str(err.value) and "client.local_steps" in str(err.value)


def test_a_jobs_own_local_steps_replace_the_client_sections_in_every_sgd_path():
    """A job with ``local_steps = 5`` trains exactly as the section with ``local_steps = 5`` would,
    one by one and batched (the schedule's steps reach the solver, not only the job)."""
    from asyncfl.compute.training import LocalJob, sgd_train, sgd_train_batched

    scenario = sc.validate(_feddr())
    task = run_blocking(scenario.replace(**{"run.steps": 1})).task
    theta = task.initial_theta.detach().clone()
    two, five = scenario.client, scenario.client.model_copy(update={"local_steps": 5})
    jobs = [LocalJob(k, theta, theta, 1.0, 10 + k, local_steps=5) for k in range(3)]
    want = [sgd_train(task, five, LocalJob(k, theta, theta, 1.0, 10 + k)) for k in range(3)]
    assert not torch.equal(want[0], sgd_train(task, two, LocalJob(0, theta, theta, 1.0, 10)))
    for got, w in zip([sgd_train(task, two, j) for j in jobs], want):
        assert torch.equal(got, w)
    for got, w in zip(sgd_train_batched(task, two, jobs), want):
        torch.testing.assert_close(got, w, rtol=0, atol=1e-12)


def test_feddr_diagnostics_are_off_by_default_and_then_cost_nothing():
    raw = _feddr()
    del raw["server"]["feddr_diagnostics"]
    sim = run_blocking(sc.validate(raw))
    assert sim.algorithm.diagnostics is None and sim.algo_state.diagnostics == ()
    assert "diagnostics" not in sim.algorithm.summary(sim.algo_state)["baseline"]
