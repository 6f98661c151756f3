"""The asynchronous comparators (docs/async-optimisers.md) against computations written out here:
FADAS and the delay-adaptive step unrolled by hand on a small quadratic, CA2FL's calibrated
aggregate from its definition, FedDR on FedBuff reaching the pooled least-squares solution, and
each comparator selectable in a scenario and in an ``asyncfl sweep`` grid."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import tomli_w
import torch

from asyncfl.cli.main import main
from asyncfl.config import scenario as sc
from asyncfl.config.server import DelayScaleConfig, FADASConfig
from asyncfl.errors import ScenarioError
from asyncfl.server.aggregation import Aggregate, ClientUpdate, ExactAggregator
from asyncfl.server.algorithms import ServerStreams
from asyncfl.server.async_rules import FADAS, DelayAdaptiveSGD, delay_scale, max_staleness
from asyncfl.server.algorithms import AlgorithmContext
from asyncfl.server.ca2fl import CA2FL, build_ca2fl
from asyncfl.compose import build_rule as make_rule
from asyncfl.server.rules import SGD, apply
from asyncfl.compose import run_blocking

from conftest import make_raw, whole_and_resumed

H = np.array([[3.0, 0.5, 0.0], [0.5, 1.0, 0.2], [0.0, 0.2, 0.4]])  # f(θ) = ½ θᵀHθ
THETA0 = np.array([1.0, -2.0, 0.5])
# staleness rows W[t, t−τ] (C = 4, p = 0): τ_max per step 0, 1, 3, 2, 5, 0, 4
ROWS = [np.array(r) / 4 for r in ([4], [3, 1], [1, 1, 0, 2], [2, 1, 1], [1, 0, 1, 0, 0, 2], [4], [0, 2, 0, 0, 2])]


def _run_rule(rule, lr: float) -> list[np.ndarray]:
    """θ_{t+1} = θ_t − η m_t with r_t = Hθ_t (a fresh full gradient, whatever the weights say)."""
    theta = torch.tensor(THETA0)
    state = rule.init(theta)
    out = [theta.numpy().copy()]
    for t, w in enumerate(ROWS, start=1):
        res = rule.direction(Aggregate(t, torch.tensor(H) @ theta, w), state)
        state, theta = res.state, apply(theta, res.direction, lr)
        out.append(theta.numpy().copy())
    return out


def test_max_staleness_and_the_delay_scale_follow_the_definition():
    assert [max_staleness(w) for w in ROWS] == [0, 1, 3, 2, 5, 0, 4]
    assert max_staleness(np.zeros(3)) == 0
    # τ_c = 2, κ = 1: unchanged up to τ_c, then 1/τ_max
    assert [delay_scale(t, 2, 1.0) for t in (0, 2, 3, 5)] == [1.0, 1.0, 1 / 3, 1 / 5]
    # κ = 4 (τ_c = 1): min(1, 4/τ_max) = 1 until τ_max = 4, then 4/5
    assert [delay_scale(t, 1, 4.0) for t in (2, 4, 5)] == [1.0, 1.0, 0.8]


@pytest.mark.parametrize("threshold,kappa", [(1, 1.0), (2, 1.5), (10, 1.0)])
def test_delay_adaptive_sgd_is_the_hand_unrolled_scaled_gradient_step(threshold, kappa):
    lr = 0.3
    got = _run_rule(DelayAdaptiveSGD.from_config(DelayScaleConfig(delay_threshold=threshold, delay_kappa=kappa)), lr)
    theta, want = THETA0.copy(), [THETA0.copy()]
    for w in ROWS:
        tau = max(i for i, x in enumerate(w) if x != 0)
        s = 1.0 if tau <= threshold else min(1.0, kappa / tau)
        theta = theta - lr * s * (H @ theta)
        want.append(theta.copy())
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-14)
    if threshold == 10:  # above every τ_max: plain SGD
        np.testing.assert_allclose(got, _run_rule(SGD(), lr), rtol=0, atol=0)


@pytest.mark.parametrize("cfg", [FADASConfig(), FADASConfig(beta=0.5, fadas_beta2=0.9, fadas_eps=1e-3, delay_threshold=2,
                                             delay_kappa=2.0),
                                 FADASConfig(delay_adaptive=False)])
def test_fadas_is_amsgrad_with_the_delay_adaptive_step_unrolled_by_hand(cfg):
    lr = 0.05
    got = _run_rule(FADAS.from_config(cfg), lr)
    theta = THETA0.copy()
    m = v = v_hat = np.zeros(3)
    want = [theta.copy()]
    for w in ROWS:
        r = H @ theta
        m = cfg.beta * m + (1 - cfg.beta) * r
        v = cfg.fadas_beta2 * v + (1 - cfg.fadas_beta2) * r**2
        v_hat = np.maximum(v_hat, v)
        tau = max(i for i, x in enumerate(w) if x != 0)
        s = 1.0 if not cfg.delay_adaptive or tau <= cfg.delay_threshold else min(1.0, cfg.delay_kappa / tau)
        theta = theta - lr * s * m / (np.sqrt(v_hat) + cfg.fadas_eps)
        want.append(theta.copy())
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-14)


def test_fadas_first_step_is_sign_like_and_the_defaults_are_the_documented_ones():
    # step 1 from zero moments: m = (1−β₁)r, v̂ = (1−β₂)r², so the direction is
    # (1−β₁)/√(1−β₂) · sign(r) up to ε: 0.1/√0.01 = 1 per coordinate with the defaults
    cfg = FADASConfig()
    assert (cfg.beta, cfg.fadas_beta2, cfg.fadas_eps, cfg.delay_threshold, cfg.delay_kappa, cfg.delay_adaptive) == (
        0.9, 0.99, 1e-8, 1, 1.0, True)
    rule = FADAS.from_config(cfg)
    r = torch.tensor([2.0, -0.5, 1e-3], dtype=torch.float64)
    out = rule.direction(Aggregate(1, r, np.array([1.0])), rule.init(torch.zeros(3, dtype=torch.float64)))
    np.testing.assert_allclose(out.direction.numpy(), np.sign(r.numpy()), rtol=1e-4)


def test_new_rules_are_selected_by_name_and_configured_by_their_own_server_keys():
    scenario = sc.validate(make_raw(**{"server.rule": "fadas", "server.delay_threshold": 3, "server.fadas_beta2": 0.95}))
    rule = make_rule(scenario)
    assert isinstance(rule, FADAS) and rule.cfg == FADASConfig(delay_threshold=3, fadas_beta2=0.95)
    assert scenario.config_of("rule") == FADASConfig(delay_threshold=3, fadas_beta2=0.95)
    rule = make_rule(sc.validate(make_raw(**{"server.rule": "sgd-delay", "server.delay_kappa": 2.0})))
    assert isinstance(rule, DelayAdaptiveSGD) and rule.delay == DelayScaleConfig(delay_kappa=2.0)
    with pytest.raises(ScenarioError) as err:  # a key of a rule the scenario does not name
        sc.validate(make_raw(**{"server.rule": "sgd", "server.fadas_beta2": 0.9}))
    assert "server.fadas_beta2: unknown key" in str(err.value) and "'fadas'" in str(err.value)
    with pytest.raises(ScenarioError) as err:
        sc.validate(make_raw(**{"server.rule": "fadas", "server.delay_kappa": -1.0}))
    assert "server.delay_kappa = -1.0: must be greater than 0" in str(err.value)


def test_the_comparators_declare_their_traits_and_state():
    from asyncfl.components.registry import REGISTRY
    from asyncfl.run.checkpoint import state_types
    from asyncfl.server.async_rules import AMSGradState
    from asyncfl.server.ca2fl import CA2FLState

    assert REGISTRY.get("rule", "fadas").traits.own_bias is None  # not linear in the aggregates
    assert REGISTRY.get("rule", "sgd-delay").traits.own_bias is None  # s_t depends on the staleness
    ca2fl, feddr = REGISTRY.get("algorithm", "ca2fl").traits, REGISTRY.get("algorithm", "feddr").traits
    assert (ca2fl.protocols, ca2fl.uses_rule, ca2fl.mu, ca2fl.private, ca2fl.one_upload_per_client) == (None, True, "zero", False, False)
    assert (feddr.protocols, feddr.uses_rule, feddr.one_upload_per_client) == (None, False, True)
    assert state_types()["AMSGradState"] is AMSGradState and state_types()["CA2FLState"] is CA2FLState


# ----------------------------------------------------------------------------------------------
# CA2FL
def test_ca2fl_calibrates_with_the_cache_as_defined():
    """Three steps, N = 4 clients, C = 3 (client 1 twice in step 2), checked against
    v_t = mean_k h_k + (1/C) Σ_i (Δ_i − h_{k_i}) with the cache of the step's start."""
    N, lr = 4, 0.5
    alg = build_ca2fl(None, AlgorithmContext(N, 0.0, lr, ExactAggregator(0.0, None), SGD()))
    assert isinstance(alg, CA2FL)
    rng = np.random.default_rng(3)
    steps = [[0, 1, 2], [1, 3, 1], [2, 0, 3]]
    theta = torch.zeros(2, dtype=torch.float64)
    state = alg.init(theta)
    cache, want_theta = np.zeros((N, 2)), np.zeros(2)
    streams = ServerStreams(np.random.default_rng(0), np.random.default_rng(1))
    for t, clients in enumerate(steps, start=1):
        deltas = rng.normal(size=(3, 2))
        ups = [ClientUpdate(k, t, 0, torch.tensor(d)) for k, d in zip(clients, deltas)]
        theta, state, _ = alg.server_update(theta, t, ups, state, streams)
        v = cache.mean(axis=0) + sum(d - cache[k] for k, d in zip(clients, deltas)) / 3
        for k, d in zip(clients, deltas):
            cache[k] = d
        want_theta = want_theta - lr * v
        np.testing.assert_allclose(theta.numpy(), want_theta, rtol=0, atol=1e-14)
        np.testing.assert_allclose(state.cache.numpy(), cache, rtol=0, atol=0)
        np.testing.assert_allclose(state.cache_sum.numpy(), cache.sum(axis=0), rtol=0, atol=1e-14)
    # step 1 from an empty cache is FedBuff's plain mean
    assert steps[0] == [0, 1, 2]


def _quadratic(**server):
    return {"population": {"clients": 6, "speed_sigma": 1.0}, "latency": {"dist": "exponential"},
            "task": {"name": "quadratic", "problem": "random", "dim": 3, "samples_per_client": 8},
            "server": {"concurrency": 4, "buffer": 2, **server}, "run": {"steps": 1500, "eval_every": 1500}}


def test_feddr_on_fedbuff_with_exact_solves_reaches_the_pooled_least_squares_solution():
    """Asynchronous FedDR's fixed point is the minimiser of (1/N)Σ f_k (docs/async-optimisers.md
    §5): with exact prox solves it reaches θ* = (Σ A_kᵀA_k)⁻¹ Σ A_kᵀb_k, computed here by lstsq,
    while the same staleness pattern with FedAvg stops elsewhere."""
    raw = _quadratic(algorithm="feddr", alpha=1.0)
    raw["client"] = {"solver": "exact", "mu": 2.0}
    sim = run_blocking(sc.validate(raw))
    A = np.vstack([c.x.numpy() for c in sim.task.clients])
    b = np.concatenate([c.y.numpy() for c in sim.task.clients])
    pooled = np.linalg.lstsq(A, b, rcond=None)[0]
    assert sim.theta.dtype == torch.float64
    np.testing.assert_allclose(sim.theta.numpy(), pooled, rtol=0, atol=1e-9)
    raw = _quadratic()
    raw["client"] = {"solver": "exact"}
    fedavg = run_blocking(sc.validate(raw)).theta.numpy()
    assert np.abs(fedavg - pooled).max() > 1e-2
    steps = {}
    for row in sim.sink.updates:  # the ledger: never two uploads of one client in a step
        if row.accepted:
            assert row.client not in steps.setdefault(row.step, set())
            steps[row.step].add(row.client)


def test_ca2fl_on_fedbuff_is_refused_with_privacy_a_staleness_exponent_or_a_proximal_term():
    private = {"privacy.enabled": True, "privacy.noise_multiplier": 1.0, "privacy.gamma": 1.0, "server.max_staleness": 4}
    for changes, needle in [({"server.staleness_exponent": 0.5}, "server.staleness_exponent = 0.5"),
                            ({"client.mu": 0.1}, "client.mu = 0.1"),
                            (private, "privacy.enabled = true: server.algorithm = 'ca2fl'")]:
        raw = make_raw(**{"server.algorithm": "ca2fl", **changes})
        with pytest.raises(ScenarioError) as err:
            sc.validate(raw)
        assert needle in str(err.value)
    with pytest.raises(ScenarioError) as err:
        sc.validate(make_raw(**{"server.algorithm": "fedsplit"}))
    assert "server.algorithm = 'fedsplit': runs on server.protocol = 'sync' only" in str(err.value)
    assert "'fedavg', 'fedprox', 'feddr', 'ca2fl'" in str(err.value)  # what FedBuff runs, from the traits


# ----------------------------------------------------------------------------------------------
# in a sweep like any other name
@pytest.mark.slow
def test_the_comparators_appear_in_an_asyncfl_sweep_grid(tmp_path):
    path = tmp_path / "tiny.toml"
    path.write_text(tomli_w.dumps(make_raw(**{"run.steps": 6, "run.eval_every": 3})))
    out = tmp_path / "sweep"
    assert main(["sweep", str(path), "--grid", "server.rule=sgd,sgd-delay,fadas", "--grid", "server.algorithm=fedavg,ca2fl",
                 "--out", str(out), "--workers", "1", "--quiet"]) == 0
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert {(r["server.rule"], r["server.algorithm"]) for r in rows} == {
        (rule, alg) for rule in ("sgd", "sgd-delay", "fadas") for alg in ("fedavg", "ca2fl")}
    assert {r["status"] for r in rows} == {"completed"}
    for r in rows:
        written = sc.load(out / r["run_dir"] / "scenario.toml").server
        assert (written.rule, written.algorithm) == (r["server.rule"], r["server.algorithm"])
        bias = json.loads((out / r["run_dir"] / "bias.json").read_text())
        assert bias["participation"]["total"] == 6 * written.buffer


# ----------------------------------------------------------------------------------------------
# their state in a checkpoint
@pytest.mark.parametrize("server,client", [
    ({"algorithm": "ca2fl", "rule": "fadas", "lr": 0.05}, {}),  # AMSGradState inside CA2FLState
    ({"algorithm": "feddr", "feddr_schedule": "linear", "feddr_growth": 1.0, "feddr_diagnostics": True,
      "regularizer": "ball", "ball_radius": 2.0}, {"mu": 1.0}),  # the ledger, scheduled jobs, diagnostics
], ids=["ca2fl-fadas", "feddr-fedbuff"])
def test_a_run_cut_at_a_checkpoint_resumes_to_the_same_files(server, client, tmp_path):
    raw = _quadratic(**server)
    raw["client"] = {"local_steps": 3, "lr": 0.01, **client}
    raw["run"] = {"steps": 12, "eval_every": 4, "checkpoint_every": 5}
    whole, cut = whole_and_resumed(sc.validate(raw), tmp_path)  # cut after the step-5 checkpoint
    assert json.loads((cut / "summary.json").read_text()).get("baseline") == json.loads(
        (whole / "summary.json").read_text()).get("baseline")
