"""The library's synchronous-baseline scenarios (scenarios/sync_*.toml; docs/baselines.md) run and
converge as the baselines should: on least squares FedSplit, FedDR and FedPD reach the pooled
optimum (gap F − F* logged in metrics.csv, checked against scipy's least squares) and FedAvg /
FedProx stop at their inexact-local-solver fixed point; on the L2 logistic regression every method
lowers F = (1/N) Σ_k f_k towards F*, computed here with scipy's L-BFGS on the pooled objective."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import scipy.linalg
import scipy.optimize
import torch

import asyncfl
from asyncfl.cli.scenario_library import library
from asyncfl.config import scenario as sc
from asyncfl.run.runner import run_to_dir_blocking
from asyncfl.tasks import build_task

REPO = Path(__file__).resolve().parents[1]
ALGORITHMS = ("fedavg", "fedprox", "fedsplit", "feddr", "fedpd")
EXACT = ("fedsplit", "feddr", "fedpd")  # converge to F* (docs/baselines.md)


def test_the_library_lists_every_baseline_on_both_problems():
    names = set(library(REPO / "scenarios"))
    assert {f"sync_{a}_{p}" for a in ALGORITHMS for p in ("lsq", "logreg")} <= names
    assert not any(n.startswith("study_") for n in names)  # generated scenarios live with the study's outputs


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_least_squares_baselines_converge(tmp_path, algorithm):
    scenario = sc.load(REPO / "scenarios" / f"sync_{algorithm}_lsq.toml")
    run_to_dir_blocking(scenario, tmp_path / "run")
    run = asyncfl.load_run(tmp_path / "run")
    task = build_task(scenario.task, scenario.population.clients, scenario.seed)
    A, b = [c.x.numpy() for c in task.clients], [c.y.numpy() for c in task.clients]
    theta_star = scipy.linalg.lstsq(np.vstack(A), np.concatenate(b))[0]
    F = lambda th: sum(0.5 * np.sum((a @ th - y) ** 2) for a, y in zip(A, b)) / len(A)  # noqa: E731
    gap0, gap = run.metrics["gap"].iloc[0], run.metrics["gap"].iloc[-1]
    assert gap0 == pytest.approx(F(np.zeros(A[0].shape[1])) - F(theta_star), rel=1e-9)
    if algorithm in EXACT:
        assert gap < 1e-8 * gap0
    else:  # the fixed point of inexact local solves: far below the start, far above F*
        assert 1e-3 * gap0 < gap < 0.1 * gap0


def _logistic_F(task) -> tuple[callable, float]:
    X = [c.x.double().numpy() for c in task.clients]
    Y = [c.y.numpy() for c in task.clients]
    d, K = X[0].shape[1], int(max(y.max() for y in Y)) + 1

    def F(theta: np.ndarray) -> float:
        Wt, bias = theta[: K * d].reshape(K, d), theta[K * d:]
        total = 0.0
        for x, y in zip(X, Y):
            z = x @ Wt.T + bias
            z = z - z.max(axis=1, keepdims=True)
            total += np.mean(np.log(np.exp(z).sum(axis=1)) - z[np.arange(len(y)), y])
        return total / len(X) + 0.5 * task.l2 * float(theta @ theta)

    res = scipy.optimize.minimize(F, np.zeros(K * d + K), method="L-BFGS-B", options={"maxiter": 5000, "gtol": 1e-10})
    return F, float(res.fun)


@pytest.mark.slow
def test_logistic_baselines_converge(tmp_path):
    F_star = F = None
    finals = {}
    for algorithm in ALGORITHMS:
        scenario = sc.load(REPO / "scenarios" / f"sync_{algorithm}_logreg.toml")
        run_to_dir_blocking(scenario, tmp_path / algorithm)
        if F is None:
            F, F_star = _logistic_F(build_task(scenario.task, scenario.population.clients, scenario.seed))
            F0 = F(build_task(scenario.task, scenario.population.clients, scenario.seed).initial_theta.double().numpy())
        model = asyncfl.load_run(tmp_path / algorithm).model()
        theta = torch.cat([model["0.weight"].reshape(-1), model["0.bias"]]).double().numpy()
        finals[algorithm] = F(theta) - F_star
    for algorithm, gap in finals.items():
        assert 0 <= gap + 1e-9 and gap < 0.1 * (F0 - F_star), (algorithm, gap)
    for algorithm in EXACT:  # the splitting methods reach F* far closer than FedAvg
        assert finals[algorithm] < 1e-3 * (F0 - F_star) and finals[algorithm] < 0.1 * finals["fedavg"], finals
