"""Private aggregation inside real runs (docs/privacy.md): what the run directory records, what
the server rule can see, and that private FedBuff still learns with every rule."""

from __future__ import annotations

import json

import numpy as np
import pytest

from asyncfl.config import scenario as sc
from asyncfl.server.aggregation import Aggregate
from asyncfl.compose import build_simulation, run_blocking
from asyncfl.server.rules import Momentum
from asyncfl.run.runner import run_to_dir_blocking

PRIVATE = {
    "name": "private", "seed": 1,
    "population": {"clients": 60},
    "latency": {"dist": "exponential", "mean": 1.0},
    "task": {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "model": "logreg"},
    "client": {"lr": 0.1, "local_steps": 5, "batch_size": 20},
    "server": {"concurrency": 40, "buffer": 20, "max_staleness": 10, "staleness_exponent": 0.5,
               "rule": "momentum", "lr": 0.1, "beta": 0.9},
    "run": {"steps": 30, "eval_every": 30},
    "privacy": {"enabled": True, "clip": 1.0, "noise_multiplier": 0.3, "xi": 1.0},
}


def private(**server) -> sc.Scenario:
    raw = json.loads(json.dumps(PRIVATE))
    raw["server"].update(server)
    return sc.validate(raw)


def test_run_directory_records_the_privacy_parameters_and_noisy_counts(tmp_path):
    summary = run_to_dir_blocking(private(rule="ma-light"), tmp_path / "run")
    p = summary["privacy"]
    sigma, clip, xi = 0.3, 1.0, 1.0
    gamma = sigma * clip / np.sqrt(xi**2 - sigma**2)  # γ = σ S_Δ / √(ξ² − σ²), docs/privacy.md
    assert p["sigma"] == sigma and p["xi"] == xi and p["gamma"] == pytest.approx(gamma, rel=1e-12)
    assert p["accountant"] == "pld" and p["delta"] == 1e-6 and p["epsilon_spent"] > 0
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())["privacy"]
    # the f-DP trade-off (docs/privacy.md §15) is nested: compared after a JSON round trip
    assert on_disk.pop("tradeoff") == json.loads(json.dumps(p["tradeoff"]))
    assert on_disk == pytest.approx({k: v for k, v in p.items() if k != "tradeoff"})
    with np.load(tmp_path / "run" / "counts.npz") as data:
        exact, noisy = data["by_staleness"], data["private_by_staleness"]
    assert noisy.shape == exact.shape == (30, 11) and noisy.dtype == np.float64
    # ĉ_τ = c_τ + N(0, ξ²): 330 residuals, sample std within ±30% of ξ (≈ 7.7 standard errors)
    residual = noisy - exact
    assert abs(residual.mean()) < 4 * xi / np.sqrt(residual.size)
    assert 0.7 * xi < residual.std() < 1.3 * xi
    bias = json.loads((tmp_path / "run" / "bias.json").read_text())
    assert set(bias["noisy_w"]) == {"none", "momentum", "ma_full", "ma_light"}


class SpyMomentum(Momentum):
    """A server rule that records everything it is handed."""

    def __init__(self) -> None:
        super().__init__(0.9)
        self.seen: list[Aggregate] = []

    def direction(self, aggregate, state):
        self.seen.append(aggregate)
        return super().direction(aggregate, state)


def test_the_server_rule_receives_one_aggregate_per_step_and_nothing_per_client():
    scenario = private()
    sim = build_simulation(scenario)
    spy = SpyMomentum()
    sim.algorithm.rule = spy
    sim.algo_state = sim.algorithm.init(sim.theta)
    import asyncio

    asyncio.run(sim.run())
    assert [a.step for a in spy.seen] == list(range(1, 31))
    for aggregate in spy.seen:
        assert type(aggregate) is Aggregate and aggregate._fields == ("step", "r", "weights", "raw_counts")
        assert aggregate.r.shape == (sim.task.dim,)
        assert aggregate.weights.shape == (11,)  # one row of Ŵ, indexed by staleness
    # the weights the rule saw are the post-processed noisy counts ('project': they sum to 1 with p = 0)
    # and never the exact ones
    exact = sim.by_staleness()
    w = np.array([a.weights for a in spy.seen])
    taus = np.arange(11)
    seen_counts = w * 20 / (taus + 1.0) ** (-0.5)
    np.testing.assert_allclose(seen_counts.sum(axis=1), 20.0, rtol=1e-9)
    assert not np.allclose(seen_counts, exact)


@pytest.mark.parametrize("rule", ["momentum", "ma-full", "ma-light"])
def test_private_fedbuff_learns_with_every_rule(rule):
    sim = run_blocking(private(rule=rule))
    first, last = sim.sink.metrics[0], sim.sink.metrics[-1]
    assert last["train_loss"] < 0.8 * first["train_loss"], (first["train_loss"], last["train_loss"])
    assert last["accuracy"] > first["accuracy"] + 0.2, (first["accuracy"], last["accuracy"])


def test_calibrated_sigma_is_reported_with_the_epsilon_spent():
    raw = json.loads(json.dumps(PRIVATE))
    raw["privacy"] = {"enabled": True, "clip": 1.0, "epsilon": 2.0, "delta": 1e-6, "xi": 20.0}
    raw["run"]["steps"] = 2
    sim = run_blocking(sc.validate(raw))
    p = sim.summary()["privacy"]
    assert p["epsilon_spent"] <= 2.0 and p["epsilon_spent"] > 1.9  # calibrated onto the target
    assert p["sigma"] > 0 and p["xi"] == 20.0
