"""Specification of the shipped tasks (docs/baselines.md, docs/tasks.md §8) and of the Task contract (tasks/base.py)."""

from __future__ import annotations

import pickle
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_digits

from asyncfl.errors import ScenarioError
from asyncfl.config.tasks import DigitsTask, GaussianMLPTask, MNIST1DTask, QuadraticTask, SyntheticTask
from asyncfl.config.registries import TASKS
from asyncfl.tasks import ClientData, QuadraticForm, Task, build_task
from asyncfl.tasks.common import dirichlet_split, label_entropy, task_streams
from asyncfl.tasks.gaussian_mlp import TEST_SAMPLES, gaussian_mlp_data, label_skewed_data
from asyncfl.tasks.mnist1d import canonical_arrays
from asyncfl.tasks.synthetic import MAX_SAMPLES, covariance_diag, synthetic_devices

SMALL = {  # one small configuration per registered task (keeps the suite fast)
    "quadratic": (QuadraticTask(problem="random", dim=5, samples_per_client=20), 4),
    "synthetic": (SyntheticTask(), 8),
    "digits": (DigitsTask(), 10),
    "gaussian-mlp": (GaussianMLPTask(dim=8, samples_per_client=30), 5),
    "mnist1d": (MNIST1DTask(hidden=16), 6),
}


def full_objective(task: Task, k: int, theta: torch.Tensor) -> torch.Tensor:
    c = task.clients[k]
    return task.batch_objective(theta, k, c.x, c.y)


def assert_same_task(a: Task, b: Task) -> None:
    assert torch.equal(a.initial_theta, b.initial_theta)
    assert a.num_clients == b.num_clients
    for ca, cb in zip(a.clients + [a.test], b.clients + [b.test]):
        assert torch.equal(ca.x, cb.x) and torch.equal(ca.y, cb.y)


# -- registry ---------------------------------------------------------------------------------
def test_registry_covers_every_task_config() -> None:
    assert set(TASKS.names) == {"quadratic", "synthetic", "digits", "gaussian-mlp", "mnist1d",
                                # read from disk, and the twin (tests/test_datasets.py)
                                "femnist", "shakespeare", "cifar10", "cifar100", "mnist", "tff-emnist", "femnist-twin",
                                "hf-images"}


def test_unknown_task_name_is_a_scenario_error_listing_known_names() -> None:
    with pytest.raises(ScenarioError, match="digits"):
        build_task(SimpleNamespace(name="imagenet"), 2, 0)  # type: ignore[arg-type]


# -- quadratic: the seed's 1-D example ---------------------------------------------------------
@pytest.fixture(scope="module")
def seed1d() -> Task:
    return build_task(QuadraticTask(problem="seed-1d"), 2, 0)


def f1(m: float) -> float:
    return 0.5 * (4 + (m - 2) ** 2)


def f2(m: float) -> float:
    return 0.5 * (4 * m**2 + (2 * m - 1) ** 2)


def test_seed_1d_data_and_layout(seed1d: Task) -> None:
    assert seed1d.num_clients == 2 and seed1d.dim == 1 and seed1d.dtype == torch.float64
    assert seed1d.reduction == "sum" and not seed1d.classification
    assert seed1d.clients[0].x.flatten().tolist() == [0.0, 1.0] and seed1d.clients[0].y.tolist() == [2.0, 2.0]
    assert seed1d.clients[1].x.flatten().tolist() == [2.0, 2.0] and seed1d.clients[1].y.tolist() == [0.0, 1.0]
    assert seed1d.initial_theta.tolist() == [0.0]
    assert len(seed1d.test) == 4  # the pooled data


@pytest.mark.parametrize("m", [0.0, 4 / 9, 1.0, -2.5, 3.0])
def test_seed_1d_objectives_match_the_closed_forms(seed1d: Task, m: float) -> None:
    theta = torch.tensor([m], dtype=torch.float64)
    assert full_objective(seed1d, 0, theta).item() == pytest.approx(f1(m), rel=1e-12)
    assert full_objective(seed1d, 1, theta).item() == pytest.approx(f2(m), rel=1e-12)


def test_seed_1d_values_at_zero(seed1d: Task) -> None:
    zero = seed1d.initial_theta
    assert full_objective(seed1d, 0, zero).item() == 4.0
    assert full_objective(seed1d, 1, zero).item() == 0.5


def test_seed_1d_pooled_optimum_is_four_ninths(seed1d: Task) -> None:
    assert seed1d.quadratic is not None
    opt = seed1d.quadratic.pooled_solution()
    assert opt.item() == pytest.approx(4 / 9, abs=1e-14)
    theta = opt.clone().requires_grad_(True)
    total = full_objective(seed1d, 0, theta) + full_objective(seed1d, 1, theta)
    (grad,) = torch.autograd.grad(total, theta)
    assert abs(grad.item()) < 1e-12
    # the clients' own minimisers: m_1 = 2, m_2 = 1/4 (FedAvg would average them to 9/8)
    own = [seed1d.quadratic.prox(k, torch.zeros(1, dtype=torch.float64), 0.0).item() for k in (0, 1)]
    assert own == pytest.approx([2.0, 0.25], abs=1e-12)


def test_seed_1d_needs_exactly_two_clients() -> None:
    with pytest.raises(ScenarioError, match="exactly 2 clients"):
        build_task(QuadraticTask(problem="seed-1d"), 3, 0)


# -- quadratic: random problems ---------------------------------------------------------------
@pytest.fixture(scope="module")
def quad() -> Task:
    return build_task(QuadraticTask(problem="random", dim=7, samples_per_client=30), 5, 3)


def test_random_quadratic_shapes(quad: Task) -> None:
    assert quad.num_clients == 5 and quad.dim == 7 and quad.dtype == torch.float64
    assert quad.quadratic is not None and len(quad.quadratic.A) == 5
    for k, c in enumerate(quad.clients):
        assert c.x.shape == (30, 7) and c.y.shape == (30,) and c.x.dtype == torch.float64
        assert quad.quadratic.A[k] is c.x and quad.quadratic.b[k] is c.y
    assert quad.test.x.shape == (30, 7)
    assert torch.equal(quad.initial_theta, torch.zeros(7, dtype=torch.float64))
    assert quad.outputs(quad.initial_theta, quad.clients[0].x).shape == (30,)


def test_sum_reduction_full_batch_is_half_squared_residual(quad: Task) -> None:
    theta = torch.from_numpy(np.random.default_rng(0).standard_normal(7))
    for k, c in enumerate(quad.clients):
        A, b, th = c.x.numpy(), c.y.numpy(), theta.numpy()
        expected = 0.5 * np.sum((A @ th - b) ** 2)
        assert full_objective(quad, k, theta).item() == pytest.approx(expected, rel=1e-12)
    # a mini-batch B is rescaled by n_k/|B|
    c, idx = quad.clients[2], np.arange(0, 30, 3)
    r = c.x.numpy()[idx] @ theta.numpy() - c.y.numpy()[idx]
    got = quad.batch_objective(theta, 2, c.x[idx], c.y[idx]).item()
    assert got == pytest.approx(30 / len(idx) * 0.5 * np.sum(r**2), rel=1e-12)


def test_prox_matches_a_numpy_linear_solve(quad: Task) -> None:
    assert quad.quadratic is not None
    rng = np.random.default_rng(1)
    center, mu = rng.standard_normal(7), 0.7
    for k in range(quad.num_clients):
        A, b = quad.clients[k].x.numpy(), quad.clients[k].y.numpy()
        expected = np.linalg.solve(A.T @ A + mu * np.eye(7), A.T @ b + mu * center)
        got = quad.quadratic.prox(k, torch.from_numpy(center), mu).numpy()
        np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-12)


def test_noiseless_homogeneous_quadratic_every_client_recovers_the_common_model() -> None:
    task = build_task(QuadraticTask(problem="random", dim=4, samples_per_client=12, noise=0.0, heterogeneity=0.0), 3, 9)
    assert task.quadratic is not None
    pooled = task.quadratic.pooled_solution()
    for k in range(3):
        torch.testing.assert_close(task.quadratic.prox(k, pooled, 0.0), pooled, rtol=1e-9, atol=1e-9)
    assert task.evaluate(pooled)["loss"] < 1e-18  # the test set comes from the same (average) model


# -- synthetic ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def synth() -> Task:
    return build_task(SyntheticTask(), 30, 0)


def test_synthetic_sizes_and_90_10_split(synth: Task) -> None:
    rng, _ = task_streams(0)
    devices = synthetic_devices(30, 1.0, 1.0, 60, 10, rng)
    assert synth.num_clients == 30 and synth.dtype == torch.float32 and synth.classification
    assert synth.dim == 60 * 10 + 10  # logreg
    test_x, test_y = [], []
    for dev, c in zip(devices, synth.clients):
        n = len(dev.y)
        assert 50 <= n <= MAX_SAMPLES
        assert len(c) == int(0.9 * n) and c.x.shape[1] == 60
        assert torch.equal(c.x, torch.from_numpy(dev.x[: len(c)]))
        test_x.append(dev.x[len(c):])
        test_y.append(dev.y[len(c):])
    assert torch.equal(synth.test.x, torch.from_numpy(np.concatenate(test_x)))
    assert torch.equal(synth.test.y, torch.from_numpy(np.concatenate(test_y)))


def test_synthetic_labels_follow_the_argmax_rule() -> None:
    for dev in synthetic_devices(10, 1.0, 1.0, 60, 10, np.random.default_rng(5)):
        assert dev.x.shape == (len(dev.y), 60) and dev.W.shape == (60, 10) and dev.b.shape == (10,)
        np.testing.assert_array_equal(dev.y, np.argmax(dev.x.astype(np.float64) @ dev.W + dev.b, axis=1))


def test_synthetic_generator_statistics() -> None:
    devices = synthetic_devices(60, 0.0, 0.0, 20, 5, np.random.default_rng(11))
    # α = β = 0 ⇒ u_k = B_k = 0 ⇒ v, W, b are standard normal
    assert all(d.u == 0.0 and d.B == 0.0 for d in devices)
    for name in ("v", "W", "b"):
        vals = np.concatenate([getattr(d, name).ravel() for d in devices])
        assert abs(vals.mean()) < 0.1 and abs(vals.std() - 1) < 0.1
    resid = np.concatenate([d.x - d.v for d in devices])  # x ~ N(v_k, Σ)
    assert len(resid) > 5000
    np.testing.assert_allclose(resid.var(axis=0), covariance_diag(20), rtol=0.1)
    assert covariance_diag(3) == pytest.approx([1.0, 2**-1.2, 3**-1.2])
    # heterogeneity: α = 5 spreads the device means u_k
    us = np.array([d.u for d in synthetic_devices(200, 5.0, 0.0, 2, 2, np.random.default_rng(0))])
    assert 4.0 < us.std() < 6.0


def test_synthetic_mlp_layout() -> None:
    task = build_task(SyntheticTask(model="mlp", hidden=16), 3, 0)
    assert task.dim == 60 * 16 + 16 + 16 * 10 + 10
    assert task.outputs(task.initial_theta, task.clients[0].x).shape == (len(task.clients[0]), 10)


def test_l2_enters_objective_and_train_loss_but_not_evaluate() -> None:
    plain = build_task(SyntheticTask(), 3, 4)
    reg = build_task(SyntheticTask(l2=0.3), 3, 4)
    assert reg.l2 == 0.3 and plain.l2 == 0.0
    theta = torch.randn(plain.dim, generator=torch.Generator().manual_seed(0))
    penalty = 0.5 * 0.3 * float(theta.double().square().sum())
    for k in range(3):
        diff = full_objective(reg, k, theta) - full_objective(plain, k, theta)
        assert diff.item() == pytest.approx(penalty, rel=1e-5)
    assert reg.train_loss(theta) - plain.train_loss(theta) == pytest.approx(penalty, rel=1e-5)
    assert reg.evaluate(theta) == plain.evaluate(theta)


# -- digits ------------------------------------------------------------------------------------
def sorted_rows(x: np.ndarray) -> np.ndarray:
    return x[np.lexsort(x.T[::-1])]


def test_digits_uses_every_sample_exactly_once() -> None:
    task = build_task(DigitsTask(), 12, 0)
    xs = np.concatenate([c.x.numpy() for c in task.clients] + [task.test.x.numpy()])
    ys = np.concatenate([c.y.numpy() for c in task.clients] + [task.test.y.numpy()])
    data = load_digits()
    assert len(xs) == 1797
    expected = np.column_stack([data.data / 16.0, data.target]).astype(np.float32)
    np.testing.assert_array_equal(sorted_rows(np.column_stack([xs, ys]).astype(np.float32)), sorted_rows(expected))
    assert xs.min() == 0.0 and xs.max() == 1.0 and task.dtype == torch.float32


def test_digits_test_split_is_stratified() -> None:
    task = build_task(DigitsTask(test_fraction=0.25), 5, 1)
    counts = np.bincount(load_digits().target, minlength=10)
    test_counts = np.bincount(task.test.y.numpy(), minlength=10)
    assert np.all(np.abs(test_counts - 0.25 * counts) <= 1)


def test_digits_non_iid_decreases_with_alpha() -> None:
    def mean_entropy(alpha: float) -> float:
        task = build_task(DigitsTask(dirichlet_alpha=alpha), 10, 2)
        return float(np.mean([label_entropy(c.y.numpy(), 10) for c in task.clients]))

    skewed, iid = mean_entropy(0.1), mean_entropy(100.0)
    assert skewed < iid - 0.8
    assert iid > 0.95 * np.log(10)


def test_digits_every_client_gets_samples() -> None:
    task = build_task(DigitsTask(dirichlet_alpha=0.05), 100, 0)
    assert min(len(c) for c in task.clients) >= 5


@pytest.mark.parametrize("model,dim", [("logreg", 650), ("mlp", 64 * 32 + 32 + 32 * 10 + 10), ("cnn", 8 * 9 + 8 + 128 * 10 + 10)])
def test_digits_models(model: str, dim: int) -> None:
    task = build_task(DigitsTask(model=model, hidden=32), 4, 0)
    assert task.dim == dim
    x = task.clients[0].x
    assert task.outputs(task.initial_theta, x).shape == (len(x), 10)
    assert task.outputs(task.initial_theta, x[0]).shape == (10,)  # unbatched (per-sample vmap)


# -- dirichlet split ---------------------------------------------------------------------------
@settings(max_examples=30, deadline=None)
@given(n=st.integers(20, 300), k=st.integers(1, 20), alpha=st.sampled_from([0.01, 0.3, 10.0]), seed=st.integers(0, 2**32))
def test_dirichlet_split_is_a_partition_with_a_minimum(n: int, k: int, alpha: float, seed: int) -> None:
    labels = np.random.default_rng(seed).integers(0, 5, n)
    parts = dirichlet_split(labels, k, alpha, np.random.default_rng(seed))
    assert len(parts) == k
    np.testing.assert_array_equal(np.sort(np.concatenate(parts)), np.arange(n))
    assert min(len(p) for p in parts) >= min(5, n // k)


def test_dirichlet_split_refuses_more_clients_than_samples() -> None:
    with pytest.raises(ScenarioError, match="population.clients"):
        dirichlet_split(np.zeros(3, dtype=np.int64), 4, 1.0, np.random.default_rng(0))


# -- gaussian-mlp ------------------------------------------------------------------------------
def test_gaussian_mlp_labels_come_from_one_shared_map() -> None:
    task = build_task(GaussianMLPTask(dim=6, classes=4, samples_per_client=40, hidden=8), 7, 5)
    rng, _ = task_streams(5)
    clients, test, V = gaussian_mlp_data(7, 6, 4, 40, rng)
    assert V.shape == (6, 4) and len(task.test) == TEST_SAMPLES
    for c, (x, y) in zip(task.clients + [task.test], clients + [test]):
        assert torch.equal(c.x, torch.from_numpy(x)) and torch.equal(c.y, torch.from_numpy(y))
        np.testing.assert_array_equal(c.y.numpy(), np.argmax(c.x.numpy().astype(np.float64) @ V, axis=1))
    assert task.dim == 6 * 8 + 8 + 8 * 4 + 4


def test_label_skewed_gaussian_mlp_keeps_the_shared_map_and_fixed_client_sizes() -> None:
    """With ``label_alpha`` every label is still ``argmax(xᵀV)`` of its input, every client holds
    ``samples_per_client`` samples, the test set is class-balanced, and the built task is these
    arrays (same stream)."""
    task = build_task(GaussianMLPTask(dim=6, classes=4, samples_per_client=40, hidden=8, label_alpha=0.3), 9, 5)
    rng, _ = task_streams(5)
    clients, test, V = label_skewed_data(9, 6, 4, 40, 0.3, rng)
    assert len(task.clients) == 9 and all(len(c) == 40 for c in task.clients)
    np.testing.assert_array_equal(np.bincount(test[1], minlength=4), [TEST_SAMPLES // 4] * 4)
    for c, (x, y) in zip(task.clients + [task.test], clients + [test]):
        assert torch.equal(c.x, torch.from_numpy(x)) and torch.equal(c.y, torch.from_numpy(y))
        np.testing.assert_array_equal(y, np.argmax(x.astype(np.float64) @ V, axis=1))


@pytest.mark.parametrize("alpha", [0.1, pytest.param(1.0, marks=pytest.mark.slow)])  # α = 1: the formula again (whole suite)
def test_label_skew_matches_the_dirichlet_multinomial_closed_form(alpha: float) -> None:
    """Client label counts are Dirichlet-multinomial: with ``p ~ Dir(α·1_K)``, ``n_c ~ Mult(n, p)``,
    ``E[Σ_c (n_c/n)²] = (α + 1)/(Kα + 1)·(1 − 1/n) + 1/n`` — 0.5590 for α = 0.1, K = 10, n = 50
    and 0.1982 for α = 1 (IID labels would give 1/K + (1 − 1/K)/n = 0.118). Checked over 4000
    clients (standard error below 0.005)."""
    K, n, N = 10, 50, 4000
    clients, _, _ = label_skewed_data(N, 8, K, n, alpha, np.random.default_rng(3))
    simpson = np.mean([np.sum((np.bincount(y, minlength=K) / n) ** 2) for _, y in clients])
    want = (alpha + 1) / (K * alpha + 1) * (1 - 1 / n) + 1 / n
    assert simpson == pytest.approx(want, abs=0.015)


def test_mnist1d_samples_asks_the_generator_for_more_signals() -> None:
    """``samples`` = S gives make_dataset's own 80/20 cut of S signals (the canonical default
    is 4000/1000); the split covers every training signal exactly once."""
    cfg = MNIST1DTask(samples=1500, model="logreg")
    assert cfg.train_test == (1200, 300) and MNIST1DTask().train_test == (4000, 1000)
    task = build_task(cfg, 30, 0)
    assert sum(len(c) for c in task.clients) == 1200 and len(task.test) == 300
    assert canonical_arrays(1500).x.shape == (1200, 40)


# -- mnist1d: the canonical data set -----------------------------------------------------------
@pytest.fixture(scope="module")
def m1d() -> Task:
    return build_task(MNIST1DTask(), 8, 0)


def _rows(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The (signal, label) rows of a data set in one canonical order (a multiset comparison)."""
    rows = np.concatenate([x.astype(np.float64), y[:, None].astype(np.float64)], axis=1)
    return rows[np.lexsort(rows.T[::-1])]


def test_mnist1d_pooled_arrays_are_make_datasets_bit_for_bit(m1d: Task, monkeypatch) -> None:
    """The package's own make_dataset(), called here with the network cut off (it must download
    nothing), gives exactly the task's data: the test set in order, the clients' training data
    as a split of its 4000 training signals (each used once)."""
    import random
    import socket

    import mnist1d.data

    def no_network(*args, **kwargs):
        raise AssertionError("make_dataset() tried to reach the network")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    np_state, py_state = np.random.get_state(), random.getstate()
    ref = mnist1d.data.make_dataset()  # default arguments: seed 42, 5000 samples, 80 % train
    np.random.set_state(np_state)
    random.setstate(py_state)
    assert ref["x"].shape == (4000, 40) and ref["x_test"].shape == (1000, 40)
    np.testing.assert_array_equal(m1d.test.x.numpy(), ref["x_test"].astype(np.float32))
    np.testing.assert_array_equal(m1d.test.y.numpy(), ref["y_test"])
    pooled = m1d.pooled_training_data()
    assert len(pooled) == 4000
    np.testing.assert_array_equal(_rows(pooled.x.numpy(), pooled.y.numpy()),
                                  _rows(ref["x"].astype(np.float32), ref["y"]))


def test_mnist1d_is_generated_once_per_process_and_leaves_the_global_rngs_alone() -> None:
    import random

    assert canonical_arrays() is canonical_arrays()
    assert not canonical_arrays().x.flags.writeable
    np_before, py_before = np.random.get_state()[1].copy(), random.getstate()
    canonical_arrays.cache_clear()
    try:
        canonical_arrays()  # regenerates: make_dataset seeds numpy's and Python's global RNGs with 42
        np.testing.assert_array_equal(np.random.get_state()[1], np_before)
        assert random.getstate() == py_before
    finally:
        canonical_arrays()


def test_mnist1d_split_depends_on_the_seed_and_alpha_not_the_data(m1d: Task) -> None:
    other = build_task(MNIST1DTask(), 8, 1)
    assert [len(c) for c in other.clients] != [len(c) for c in m1d.clients]
    assert torch.equal(other.test.x, m1d.test.x)
    iid = build_task(MNIST1DTask(dirichlet_alpha=1000.0), 8, 0)
    entropy = lambda t: np.mean([label_entropy(c.y.numpy(), 10) for c in t.clients])  # noqa: E731
    assert entropy(m1d) < entropy(iid) - 0.3  # α = 0.3: clients see far fewer labels than near-IID


def test_mnist1d_models(m1d: Task) -> None:
    assert m1d.dim == 40 * 100 + 100 + 100 * 100 + 100 + 100 * 10 + 10
    for c in m1d.clients + [m1d.test]:
        assert c.x.shape[1:] == (40,) and c.x.dtype == torch.float32 and c.y.dtype == torch.int64
    for kind, dim in (("cnn", 16 * 5 + 16 + 16 * 16 * 5 + 16 + 160 * 10 + 10), ("logreg", 40 * 10 + 10)):
        task = build_task(MNIST1DTask(model=kind), 2, 0)
        x = task.clients[0].x
        assert task.dim == dim
        assert task.outputs(task.initial_theta, x).shape == (len(x), 10)
        assert task.outputs(task.initial_theta, x[0]).shape == (10,)


# -- contract: determinism, layout, evaluation, pickling ------------------------------------
@pytest.mark.parametrize("name", sorted(SMALL))
def test_same_seed_same_task_different_seed_different_task(name: str) -> None:
    cfg, n = SMALL[name]
    before = torch.get_rng_state()
    a, b, c = build_task(cfg, n, 7), build_task(cfg, n, 7), build_task(cfg, n, 8)
    assert torch.equal(torch.get_rng_state(), before)  # the global torch RNG is left alone
    assert_same_task(a, b)
    differs = any(not torch.equal(ca.x, cc.x) for ca, cc in zip(a.clients, c.clients) if ca.x.shape == cc.x.shape)
    differs |= [len(x) for x in a.clients] != [len(x) for x in c.clients]
    assert differs
    if name != "quadratic":  # quadratic starts at θ = 0 whatever the seed
        assert not torch.equal(a.initial_theta, c.initial_theta)


@pytest.mark.parametrize("name", sorted(SMALL))
def test_flatten_unflatten_round_trip(name: str) -> None:
    cfg, n = SMALL[name]
    task = build_task(cfg, n, 0)
    assert torch.equal(task.flatten(dict(task.model.named_parameters())).detach(), task.initial_theta)
    theta = torch.randn(task.dim, dtype=task.dtype, generator=torch.Generator().manual_seed(1))
    assert torch.equal(task.flatten(task.unflatten(theta)), theta)
    batch = torch.randn(3, task.dim, dtype=task.dtype, generator=torch.Generator().manual_seed(2))
    views = task.unflatten(batch)
    for i in range(3):
        single = task.unflatten(batch[i])
        for key, p in task.model.named_parameters():
            assert views[key].shape == (3, *p.shape)
            assert torch.equal(views[key][i], single[key])
        assert torch.equal(task.flatten({k: v[i] for k, v in views.items()}), batch[i])


def test_evaluate_matches_a_manual_computation() -> None:
    task = build_task(DigitsTask(model="logreg"), 3, 0)
    theta = 0.1 * torch.randn(task.dim, generator=torch.Generator().manual_seed(3))
    W = theta[: 640].reshape(10, 64).double().numpy()
    b = theta[640:].double().numpy()
    x, y = task.test.x.double().numpy(), task.test.y.numpy()
    logits = x @ W.T + b
    logp = logits - logits.max(1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(1, keepdims=True))
    metrics = task.evaluate(theta)
    assert metrics["loss"] == pytest.approx(-logp[np.arange(len(y)), y].mean(), rel=1e-5)
    assert metrics["accuracy"] == pytest.approx((logits.argmax(1) == y).mean(), abs=1e-12)
    own = task.evaluate(theta, task.clients[1])
    assert own["accuracy"] == pytest.approx(
        ((task.clients[1].x.double().numpy() @ W.T + b).argmax(1) == task.clients[1].y.numpy()).mean())


@pytest.mark.parametrize("name", sorted(SMALL))
def test_tasks_pickle(name: str) -> None:
    cfg, n = SMALL[name]
    task = build_task(cfg, n, 0)
    again = pickle.loads(pickle.dumps(task))
    assert_same_task(task, again)
    x = task.clients[0].x
    assert torch.equal(again.outputs(again.initial_theta, x), task.outputs(task.initial_theta, x))


def test_reexports_are_the_base_contract() -> None:
    from asyncfl.tasks import base

    assert (Task, ClientData, QuadraticForm) == (base.Task, base.ClientData, base.QuadraticForm)


def test_cross_entropy_both_branches_match_a_numpy_log_softmax() -> None:
    """With autograd recording (fused F.cross_entropy) and without (logsumexp − gather): the same
    numbers as −log softmax computed in float64 numpy, also for logits of size 10³."""
    from asyncfl.tasks.common import cross_entropy

    g = torch.Generator().manual_seed(0)
    for offset in (0.0, 1e3):
        out = torch.randn(257, 10, generator=g) * 5 + offset
        y = torch.randint(0, 10, (257,), generator=g)
        z = out.double().numpy()
        z = z - z.max(1, keepdims=True)
        want = -(z - np.log(np.exp(z).sum(1, keepdims=True)))[np.arange(257), y.numpy()]
        plain = cross_entropy(out, y)
        recorded = cross_entropy(out.clone().requires_grad_(), y)
        assert recorded.requires_grad and not plain.requires_grad
        np.testing.assert_allclose(plain.numpy(), want, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(recorded.detach().numpy(), want, rtol=1e-5, atol=1e-4)


def test_evaluation_in_chunks_equals_one_pass(monkeypatch) -> None:
    """Chunked sums (here 7 rows a chunk, so chunks straddle clients) equal one pass over the data."""
    import asyncfl.tasks.base as base

    task = build_task(DigitsTask(model="logreg"), 3, 0)
    theta = 0.1 * torch.randn(task.dim, generator=torch.Generator().manual_seed(3))
    pooled = task.pooled_training_data()
    with torch.no_grad():
        out = task.outputs(theta, pooled.x)
        want_loss = float(torch.nn.functional.cross_entropy(out.double(), pooled.y))
        want_test = task.evaluate(theta)
    monkeypatch.setattr(base, "EVAL_CHUNK", 7)
    assert len(pooled) % 7 and len(task.test) > 7
    assert task.train_loss(theta) == pytest.approx(want_loss, rel=1e-6)
    chunked = task.evaluate(theta)
    assert chunked["loss"] == pytest.approx(want_test["loss"], rel=1e-6)
    assert chunked["accuracy"] == want_test["accuracy"]
