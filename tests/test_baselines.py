"""Synchronous baselines against their closed forms (docs/baselines.md; seeds 000 and 002).

Every expected value is computed here, independently of the simulator, in numpy/scipy from the
clients' data ``(A_k, b_k)`` (``f_k(θ) = ½‖A_kθ − b_k‖²``, ``H_k = A_kᵀA_k``, ``g_k = A_kᵀb_k``).
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest
import scipy.optimize
import torch

from asyncfl.config import scenario as sc
from asyncfl.server.aggregation import ClientUpdate
from asyncfl.server.splitting import BaselineState, FedDR, FedPD, FedSplit, prox_regularizer
from asyncfl.server.algorithms import ServerStreams
from asyncfl.compose import build_simulation, run_blocking
from asyncfl.sim.engine import Simulation
from asyncfl.errors import ScenarioError

# The seed's 1-D example: fit y = m·x; client 1 holds {(0, 2), (1, 2)}, client 2 {(2, 0), (2, 1)}.
SEED_X = [np.array([0.0, 1.0]), np.array([2.0, 2.0])]
SEED_Y = [np.array([2.0, 2.0]), np.array([0.0, 1.0])]
SEED_H = [float(x @ x) for x in SEED_X]  # h_1 = 1, h_2 = 8
SEED_G = [float(x @ y) for x, y in zip(SEED_X, SEED_Y)]  # g_1 = 2, g_2 = 2
FEDAVG_EXACT_1D = 9 / 8  # mean of the clients' own optima 2 and 1/4
POOLED_1D = 4 / 9  # (g_1 + g_2)/(h_1 + h_2)
TOL = 1e-8


def _streams(seed: int) -> ServerStreams:
    """The server's random streams for a direct call of ``server_update``."""
    return ServerStreams(noise=np.random.default_rng(seed), algorithm=np.random.default_rng(seed + 1))


def fedprox_1d(mu: float) -> float:
    """FedProx on the two-client 1-D example: (18 + 4μ)/(16 + 9μ) (docs/baselines.md §8)."""
    return (18 + 4 * mu) / (16 + 9 * mu)


def scenario(algorithm: str, *, problem: str = "seed-1d", clients: int = 2, cohort: int | None = None,
             steps: int = 200, client: dict[str, Any] | None = None, server: dict[str, Any] | None = None,
             task: dict[str, Any] | None = None, seed: int = 5, latency: dict[str, Any] | None = None,
             population: dict[str, Any] | None = None) -> sc.Scenario:
    task_cfg = {"name": "quadratic", "problem": problem, **({"dim": 10, "samples_per_client": 20} if problem == "random" else {})}
    return sc.validate({
        "name": f"baseline-{algorithm}",
        "seed": seed,
        "population": {"clients": clients, **(population or {})},
        "latency": latency or {"dist": "constant", "value": 1.0},
        "task": {**task_cfg, **(task or {})},
        "client": {"solver": "exact", **(client or {})},
        "server": {"protocol": "sync", "cohort": cohort or clients, "algorithm": algorithm, **(server or {})},
        "run": {"steps": steps, "eval_every": 10**6},
    })


def final_theta(s: sc.Scenario) -> np.ndarray:
    return run_blocking(s).theta.detach().double().numpy()


def client_data(sim_or_scenario) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The clients' (A_k, b_k) as numpy arrays (the data is input, not the algorithm)."""
    sim = sim_or_scenario if isinstance(sim_or_scenario, Simulation) else build_simulation(sim_or_scenario)
    return [c.x.numpy().copy() for c in sim.task.clients], [c.y.numpy().copy() for c in sim.task.clients]


def pooled_least_squares(A: list[np.ndarray], b: list[np.ndarray]) -> np.ndarray:
    return np.linalg.lstsq(np.vstack(A), np.concatenate(b), rcond=None)[0]


def step_through(s: sc.Scenario) -> tuple[Simulation, list[dict[str, Any]]]:
    """Run ``s`` and snapshot the model, the algorithm state and the step's senders per step."""
    sim = build_simulation(s)
    snaps: list[dict[str, Any]] = []

    async def go() -> None:
        async for event in sim.events():
            senders = sorted(r.client for r in sim.sink.updates if r.accepted and r.step == event.step)
            snaps.append({"theta": sim.theta.clone(), "state": sim.algo_state, "senders": senders, "time": event.time})

    asyncio.run(go())
    return sim, snaps


# ----------------------------------------------------------------------------------------------
# the two-client 1-D example of docs/baselines.md §8
def test_seed_1d_fedavg_with_exact_local_solves_gives_9_over_8():
    assert FEDAVG_EXACT_1D == pytest.approx(np.mean([g / h for g, h in zip(SEED_G, SEED_H)]), abs=1e-15)
    theta = final_theta(scenario("fedavg", steps=5))
    assert theta[0] == pytest.approx(FEDAVG_EXACT_1D, abs=TOL)


@pytest.mark.parametrize("mu", [0.25, 1.0, 2.0, 10.0])
def test_seed_1d_fedprox_gives_the_seed_formula(mu):
    # the seed's formula agrees with the fixed point m = mean_k (g_k + μm)/(h_k + μ), solved here
    fixed = sum(g / (h + mu) for g, h in zip(SEED_G, SEED_H)) / sum(h / (h + mu) for h in SEED_H)
    assert fedprox_1d(mu) == pytest.approx(fixed, rel=1e-14)
    theta = final_theta(scenario("fedprox", client={"mu": mu}, steps=400))
    assert theta[0] == pytest.approx(fedprox_1d(mu), abs=TOL)


@pytest.mark.parametrize("algorithm,mu,server", [
    ("fedsplit", 2.0, {}),
    ("fedsplit", 5.0, {}),
    ("feddr", 2.0, {"alpha": 0.5}),
    ("feddr", 2.0, {"alpha": 1.0}),
    ("feddr", 5.0, {"alpha": 1.8}),
    ("fedpd", 2.0, {"skip_probability": 0.0}),
    ("fedpd", 0.5, {"skip_probability": 0.0}),
])
def test_seed_1d_splitting_and_primal_dual_reach_the_pooled_4_over_9(algorithm, mu, server):
    assert POOLED_1D == pytest.approx(sum(SEED_G) / sum(SEED_H), rel=1e-15)
    theta = final_theta(scenario(algorithm, client={"mu": mu}, server=server, steps=300))
    assert theta[0] == pytest.approx(POOLED_1D, abs=TOL)


@pytest.mark.parametrize("eta,R", [(0.1, 1), (0.1, 3), (0.05, 10), (0.2, 4)])
def test_seed_1d_fedavg_with_R_local_gd_steps_gives_the_weighted_mean(eta, R):
    w = [1 - (1 - eta * h) ** R for h in SEED_H]
    c = [g / h for g, h in zip(SEED_G, SEED_H)]
    expected = sum(wk * ck for wk, ck in zip(w, c)) / sum(w)
    theta = final_theta(scenario("fedavg", client={"solver": "sgd", "lr": eta, "local_steps": R}, steps=60))
    assert theta[0] == pytest.approx(expected, abs=TOL)
    if R == 1:  # one local step is gradient descent on Σ f_k
        assert expected == pytest.approx(POOLED_1D, rel=1e-14)


# ----------------------------------------------------------------------------------------------
# random least squares, d = 10, K = 5
K_RANDOM = 5


def random_ls(algorithm: str, **kwargs: Any) -> sc.Scenario:
    return scenario(algorithm, problem="random", clients=K_RANDOM, **kwargs)


def test_random_ls_fedgd_converges_to_its_matrix_closed_form():
    s, e = 0.01, 5
    sim = run_blocking(random_ls("fedavg", client={"solver": "sgd", "lr": s, "local_steps": e}, steps=60))
    A, b = client_data(sim)
    d = A[0].shape[1]
    H = [a.T @ a for a in A]
    g = [a.T @ y for a, y in zip(A, b)]
    G = [sum(np.linalg.matrix_power(np.eye(d) - s * Hk, i) for i in range(e)) for Hk in H]
    expected = np.linalg.solve(sum(Hk @ Gk for Hk, Gk in zip(H, G)), sum(Gk @ gk for Gk, gk in zip(G, g)))
    pooled = pooled_least_squares(A, b)
    assert np.linalg.norm(expected - pooled) > 1e-3  # the closed form is not θ*: the check has teeth
    np.testing.assert_allclose(sim.theta.numpy(), expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("mu", [2.0, 20.0])
def test_random_ls_fedprox_converges_to_designs_closed_form(mu):
    sim = run_blocking(random_ls("fedprox", client={"mu": mu}, steps=400))
    A, b = client_data(sim)
    d, s = A[0].shape[1], 1.0 / mu
    H = [a.T @ a for a in A]
    g = [a.T @ y for a, y in zip(A, b)]
    P = [np.linalg.inv(np.eye(d) + s * Hk) for Hk in H]
    expected = np.linalg.solve(sum(np.eye(d) - Pk for Pk in P), sum(s * Pk @ gk for Pk, gk in zip(P, g)))
    # the same point from the fixed-point equation θ = mean_k prox_{f_k,μ}(θ), solved directly
    prox_lin = [np.linalg.solve(Hk + mu * np.eye(d), mu * np.eye(d)) for Hk in H]
    prox_off = [np.linalg.solve(Hk + mu * np.eye(d), gk) for Hk, gk in zip(H, g)]
    direct = np.linalg.solve(np.eye(d) - np.mean(prox_lin, axis=0), np.mean(prox_off, axis=0))
    np.testing.assert_allclose(expected, direct, rtol=0, atol=1e-10)
    assert np.linalg.norm(expected - pooled_least_squares(A, b)) > 1e-3
    np.testing.assert_allclose(sim.theta.numpy(), expected, rtol=0, atol=TOL)


@pytest.mark.parametrize("algorithm,server", [
    ("fedsplit", {}),
    ("feddr", {"alpha": 1.0}),
    ("feddr", {"alpha": 1.5}),
    ("fedpd", {}),
])
def test_random_ls_splitting_and_primal_dual_reach_the_pooled_solution(algorithm, server):
    sim = run_blocking(random_ls(algorithm, client={"mu": 10.0}, server=server, steps=120))
    A, b = client_data(sim)
    np.testing.assert_allclose(sim.theta.numpy(), pooled_least_squares(A, b), rtol=0, atol=TOL)


def ista(A: list[np.ndarray], b: list[np.ndarray], reg: float, iters: int = 20000) -> np.ndarray:
    """Proximal gradient on ``(1/K) Σ_k f_k + reg‖θ‖₁`` (FedDR's F, docs/baselines.md §4)."""
    K = len(A)
    H = sum(a.T @ a for a in A) / K
    g = sum(a.T @ y for a, y in zip(A, b)) / K
    step = 1.0 / np.linalg.eigvalsh(H).max()
    x = np.zeros(H.shape[0])
    for _ in range(iters):
        v = x - step * (H @ x - g)
        x = np.sign(v) * np.maximum(np.abs(v) - step * reg, 0.0)
    return x


@pytest.mark.parametrize("alpha", [1.0, 1.6])
def test_feddr_with_l1_reaches_the_composite_solution(alpha):
    s0 = random_ls("feddr", client={"mu": 10.0}, server={"alpha": alpha, "regularizer": "l1", "reg": 8.0}, steps=250)
    A, b = client_data(s0)
    expected = ista(A, b, 8.0)
    zeros = np.abs(expected) < 1e-12
    assert 0 < zeros.sum() < expected.size  # the regulariser is active but does not kill everything
    theta = final_theta(s0)
    np.testing.assert_allclose(theta, expected, rtol=0, atol=TOL)
    assert (theta[zeros] == 0.0).all()  # soft-thresholding gives exact zeros


def test_feddr_with_l2_reaches_the_ridge_solution():
    reg = 5.0
    s0 = random_ls("feddr", client={"mu": 10.0}, server={"alpha": 1.0, "regularizer": "l2", "reg": reg}, steps=150)
    A, b = client_data(s0)
    K, d = len(A), A[0].shape[1]
    expected = np.linalg.solve(sum(a.T @ a for a in A) / K + reg * np.eye(d), sum(a.T @ y for a, y in zip(A, b)) / K)
    np.testing.assert_allclose(final_theta(s0), expected, rtol=0, atol=TOL)


def test_prox_regularizer_closed_forms():
    v = torch.tensor([-3.0, -0.5, 0.0, 0.2, 2.0], dtype=torch.float64)
    np.testing.assert_allclose(prox_regularizer("l1", 2.0, v, 0.5).numpy(), [-2.0, 0.0, 0.0, 0.0, 1.0])
    np.testing.assert_allclose(prox_regularizer("l2", 2.0, v, 0.5).numpy(), v.numpy() / 2.0)
    assert prox_regularizer("none", 2.0, v, 0.5) is v
    with pytest.raises(ValueError, match="unknown regulariser"):
        prox_regularizer("l3", 1.0, v, 1.0)


# ----------------------------------------------------------------------------------------------
# partial participation, persistence of client state, FedPD's skipping
ALL_FIVE = [
    ("fedavg", {}, {}),
    ("fedprox", {"mu": 5.0}, {}),
    ("fedsplit", {"mu": 10.0}, {}),
    ("feddr", {"mu": 10.0}, {"alpha": 1.0}),
    ("fedpd", {"mu": 10.0}, {"skip_probability": 0.0}),
    ("fedpd", {"mu": 10.0}, {"skip_probability": 0.3}),  # runs; skipping has no exact fixed point
]


@pytest.mark.parametrize("algorithm,client,server", ALL_FIVE)
def test_partial_participation_runs_and_unsampled_clients_keep_their_state(algorithm, client, server):
    sim, snaps = step_through(random_ls(algorithm, cohort=3, client=client, server=server, steps=300))
    assert all(len(s["senders"]) == 3 for s in snaps)
    assert len({tuple(s["senders"]) for s in snaps}) > 1  # cohorts vary
    theta = sim.theta.numpy()
    assert np.isfinite(theta).all()
    if algorithm in ("fedavg", "fedprox"):
        return
    if server.get("skip_probability", 0.0) == 0.0:
        A, b = client_data(sim)
        # the table-over-all-clients choice keeps the fixed point right under partial participation
        np.testing.assert_allclose(theta, pooled_least_squares(A, b), rtol=0, atol=1e-6)
    for before, after in zip(snaps, snaps[1:]):
        unsampled = sorted(set(range(K_RANDOM)) - set(after["senders"]))
        for name, rows in after["state"].clients.items():
            if algorithm == "fedpd" and name == "c":
                continue  # θ_{k,0} is set by a broadcast; checked in the FedPD test
            torch.testing.assert_close(rows[unsampled], before["state"].clients[name][unsampled], rtol=0, atol=0)
        torch.testing.assert_close(after["state"].table[unsampled], before["state"].table[unsampled], rtol=0, atol=0)


def test_feddr_server_average_is_the_mean_over_all_clients_of_their_reflected_points():
    sim, snaps = step_through(random_ls("feddr", cohort=2, client={"mu": 4.0}, server={"alpha": 0.7}, steps=25))
    alg: FedDR = sim.algorithm
    K = K_RANDOM
    prev_theta = sim.task.initial_theta
    omega = prev_theta.clone()
    for snap in snaps:
        st: BaselineState = snap["state"]
        hat = 2 * st.clients["x"] - st.clients["omega"]  # θ̂_k = 2θ_k − ω_k of every client, stale ones included
        torch.testing.assert_close(st.table, hat, rtol=0, atol=1e-12)
        omega = omega + alg.alpha * (prev_theta - omega)
        expected = (K * hat.mean(dim=0) + omega) / (K + 1)  # g = 0
        torch.testing.assert_close(snap["theta"], expected, rtol=0, atol=1e-12)
        prev_theta = snap["theta"]


@pytest.mark.parametrize("p", [0.3, 0.7])
def test_fedpd_skips_with_probability_p_and_only_communicating_rounds_move_theta(p):
    n = 400
    sim, snaps = step_through(scenario("fedpd", client={"mu": 2.0}, server={"skip_probability": p}, steps=n))
    comms = np.diff([0] + [s["state"].communications for s in snaps])
    assert set(comms.tolist()) <= {0, 1}
    skipped = n - int(comms.sum())
    bound = 4 * np.sqrt(p * (1 - p) / n)  # 4 binomial standard deviations
    assert abs(skipped / n - p) < bound, (skipped / n, p)
    prev = sim.task.initial_theta
    for snap, communicated in zip(snaps, comms):
        st = snap["state"]
        if communicated:  # the broadcast resets every client's θ_{k,0}
            assert (st.clients["c"] == snap["theta"]).all()
        else:
            assert torch.equal(snap["theta"], prev)
            torch.testing.assert_close(st.clients["c"], st.clients["x"] + 0.5 * st.clients["lam"], rtol=0, atol=1e-14)
        prev = snap["theta"]
    assert sim.summary()["baseline"] == {"rounds": n, "communications": n - skipped, "skipped": skipped}
    # seeded: the same scenario skips the same rounds
    _, again = step_through(scenario("fedpd", client={"mu": 2.0}, server={"skip_probability": p}, steps=60))
    assert [s["state"].communications for s in again] == [s["state"].communications for s in snaps[:60]]


def test_warm_start_is_the_previous_local_output_not_the_prox_centre():
    alg = FedSplit(num_clients=3, mu=2.0)
    theta = torch.tensor([1.0, -1.0], dtype=torch.float64)
    state = alg.init(theta)
    job = alg.make_job(1, theta, seed=0, state=state)
    local = torch.tensor([0.5, 0.25], dtype=torch.float64)
    update = ClientUpdate(1, 1, 0, alg.client_message(job, local, state))
    new_theta, state, _ = alg.server_update(theta, 1, [update], state, _streams(0))
    torch.testing.assert_close(state.clients["z"][1], theta + 2 * (local - theta))
    torch.testing.assert_close(state.clients["x"][1], local)
    torch.testing.assert_close(new_theta, state.table.mean(dim=0))
    job2 = alg.make_job(1, new_theta, seed=1, state=state)
    torch.testing.assert_close(job2.start, local)
    torch.testing.assert_close(job2.centre, 2 * new_theta - state.clients["z"][1])
    assert not torch.equal(job2.start, job2.centre)
    with pytest.raises(ValueError, match="uploaded twice"):
        alg.server_update(new_theta, 2, [update, update], state, _streams(0))


@pytest.mark.parametrize("alg", [FedSplit(4, 2.0), FedDR(4, 2.0, 1.2, "l1", 0.1), FedPD(4, 2.0, 0.5)])
def test_state_round_trips_through_a_checkpoint(alg, tmp_path):
    torch.manual_seed(0)
    theta = torch.randn(3, dtype=torch.float64)
    state = alg.init(theta)
    for step in range(1, 4):
        updates = []
        for k in (step % 4, (step + 1) % 4):
            job = alg.make_job(k, theta, seed=step, state=state)
            updates.append(ClientUpdate(k, step, 0, alg.client_message(job, job.centre * 0.5, state)))
        theta, state, _ = alg.server_update(theta, step, updates, state, _streams(step))
    torch.save(state._asdict(), tmp_path / "state.pt")
    loaded = BaselineState(**torch.load(tmp_path / "state.pt", weights_only=False))
    job_a, job_b = alg.make_job(2, theta, 9, state), alg.make_job(2, theta, 9, loaded)
    upd = [ClientUpdate(2, 4, 0, alg.client_message(job_a, job_a.centre, state))]
    a = alg.server_update(theta, 4, upd, state, _streams(7))
    b = alg.server_update(theta, 4, upd, loaded, _streams(7))
    torch.testing.assert_close(job_a.centre, job_b.centre, rtol=0, atol=0)
    torch.testing.assert_close(a[0], b[0], rtol=0, atol=0)
    for name in state.clients:
        torch.testing.assert_close(a[1].clients[name], b[1].clients[name], rtol=0, atol=0)


def test_sync_rounds_share_the_virtual_time_axis_with_fedbuff():
    s = random_ls("fedsplit", cohort=3, client={"mu": 10.0}, steps=15, latency={"dist": "exponential", "mean": 1.0},
                  population={"speed_sigma": 0.5})
    sim, snaps = step_through(s)
    for step, snap in enumerate(snaps, start=1):
        arrivals = [r.arrival_time for r in sim.sink.updates if r.accepted and r.step == step]
        assert snap["time"] == max(arrivals)  # a round lasts until its slowest accepted client
    assert [m["time"] for m in sim.sink.metrics] == [0.0, snaps[-1]["time"]]


@pytest.mark.parametrize("overrides,message", [
    ({"client": {"mu": 0.0}}, "positive proximal coefficient"),
    ({"server": {"regularizer": "l1", "reg": 1.0}, "client": {"mu": 1.0}}, r"server.regularizer: unknown key.*a key of server.algorithm = 'feddr'"),
])
def test_bad_baseline_configurations_are_refused(overrides, message):
    with pytest.raises(ScenarioError, match=message):
        scenario("fedsplit", **overrides)


# ----------------------------------------------------------------------------------------------
# synthetic (1, 1), L2-regularised logistic regression, inexact (GD) local solvers
SYN = {"clients": 4, "dim": 10, "classes": 3, "l2": 0.3, "seed": 0}


def synthetic(algorithm: str, *, mu: float, local_steps: int, steps: int, server: dict[str, Any] | None = None) -> sc.Scenario:
    return sc.validate({
        "name": f"synthetic-{algorithm}",
        "seed": SYN["seed"],
        "population": {"clients": SYN["clients"]},
        "latency": {"dist": "constant", "value": 1.0},
        "task": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "model": "logreg", "dim": SYN["dim"],
                 "classes": SYN["classes"], "l2": SYN["l2"]},
        "client": {"solver": "sgd", "lr": 0.1, "local_steps": local_steps, "mu": mu},  # full batch
        "server": {"protocol": "sync", "cohort": SYN["clients"], "algorithm": algorithm, **(server or {})},
        "run": {"steps": steps, "eval_every": 10**6},
    })


def logreg_objective(X: list[np.ndarray], Y: list[np.ndarray], l2: float, d: int, C: int):
    """``F(θ) = (1/K) Σ_k [mean_i CE(W x_i + c, y_i) + (l2/2)‖θ‖²]`` and its gradient, θ = (W, c)
    flattened as the model's (weight [C, d], bias [C])."""

    def F(w: np.ndarray) -> tuple[float, np.ndarray]:
        W, c = w[: C * d].reshape(C, d), w[C * d:]
        value, grad = 0.0, np.zeros_like(w)
        for x, y in zip(X, Y):
            z = x @ W.T + c
            z -= z.max(axis=1, keepdims=True)
            lse = np.log(np.exp(z).sum(axis=1))
            value += float(np.mean(lse - z[np.arange(len(y)), y]))
            p = np.exp(z - lse[:, None])
            p[np.arange(len(y)), y] -= 1.0
            p /= len(y)
            grad[: C * d] += (p.T @ x).ravel()
            grad[C * d:] += p.sum(axis=0)
        K = len(X)
        return value / K + 0.5 * l2 * float(w @ w), grad / K + l2 * w

    return F


@pytest.fixture(scope="module")
def synthetic_optimum():
    sim = build_simulation(synthetic("fedavg", mu=0.0, local_steps=1, steps=1))
    X = [c.x.double().numpy() for c in sim.task.clients]
    Y = [c.y.numpy() for c in sim.task.clients]
    F = logreg_objective(X, Y, SYN["l2"], SYN["dim"], SYN["classes"])
    res = scipy.optimize.minimize(F, np.zeros(sim.task.dim), jac=True, method="L-BFGS-B",
                                  options={"maxiter": 10_000, "gtol": 1e-12, "ftol": 1e-16})
    assert np.linalg.norm(res.jac) < 1e-7
    return F, float(res.fun)


@pytest.mark.parametrize("algorithm,server", [("fedsplit", {}), ("feddr", {"alpha": 1.5}), ("fedpd", {})])
def test_synthetic_logreg_splitting_and_primal_dual_reach_the_pooled_optimum(algorithm, server, synthetic_optimum):
    F, F_star = synthetic_optimum
    sim = run_blocking(synthetic(algorithm, mu=1.0, local_steps=10, steps=35, server=server))
    gap = (F(sim.theta.double().numpy())[0] - F_star) / F_star
    assert -1e-9 < gap < 1e-4, gap


def test_synthetic_logreg_fedavg_with_many_local_steps_stalls_away_from_the_optimum(synthetic_optimum):
    F, F_star = synthetic_optimum
    sim, snaps = step_through(synthetic("fedavg", mu=0.0, local_steps=40, steps=25))
    gaps = [(F(s["theta"].double().numpy())[0] - F_star) / F_star for s in snaps]
    assert gaps[-1] > 1e-2  # client drift: the fixed point is not the optimum …
    assert abs(gaps[-1] - gaps[-5]) < 1e-2 * gaps[-1]  # … and FedAvg has settled there
