"""Performance features must not change the numbers (docs/architecture.md §2 principle 2): batched
training equals per-client training, and every executor gives the same run."""

from __future__ import annotations

import asyncio
import dataclasses
import multiprocessing

import numpy as np
import pytest
import torch

from asyncfl.config import scenario as sc
from asyncfl.compose import build_simulation, run_blocking
from asyncfl.errors import ScenarioError
from asyncfl.compose import build_executor, context
from asyncfl.compute.executors import BatchedExecutor, NullExecutor
from asyncfl.tasks import build_task
from asyncfl.compose import local_train, train_batched
from asyncfl.compute.training import LocalJob, batch_schedule, group_indices, local_steps_count, mlp_layers

from conftest import make_scenario


def _jobs(task, start, mu, clients, seed=100):
    return [LocalJob(k, start, start, mu, seed + i) for i, k in enumerate(clients)]


@pytest.mark.parametrize("task_cfg,client", [
    # Synthetic(1,1): every client has its own n_k (different step counts and last batches), l2 on
    ({"name": "synthetic", "l2": 0.01}, {"lr": 0.05, "batch_size": 10, "epochs": 1}),
    ({"name": "synthetic", "model": "mlp", "hidden": 8}, {"lr": 0.05, "batch_size": 7, "local_steps": 9, "mu": 0.3}),
    ({"name": "synthetic"}, {"lr": 0.05, "local_steps": 2}),  # full batches of unequal size
    ({"name": "gaussian-mlp", "samples_per_client": 23}, {"lr": 0.1, "batch_size": 10, "epochs": 2}),
    ({"name": "quadratic", "dim": 4, "samples_per_client": 13}, {"lr": 0.002, "batch_size": 5, "local_steps": 4, "mu": 0.5}),
    # a CNN classifier takes the vmap path (not the fused MLP one) with the cross entropy
    ({"name": "digits", "model": "cnn"}, {"lr": 0.05, "batch_size": 8, "local_steps": 3}),
])
def test_batched_training_equals_per_client_training(task_cfg, client):
    server = {"algorithm": "fedprox"} if client.get("mu") else {}  # a proximal term is FedProx's
    scenario = sc.validate({"name": "b", "seed": 2, "population": {"clients": 24}, "task": task_cfg, "client": client, "server": server})
    task = build_task(scenario.task, 24, 2)
    small = sorted(range(24), key=lambda k: len(task.clients[k]))[:10]  # keep the test fast
    a, b = task.initial_theta + 0.01, task.initial_theta - 0.02
    # two versions, repeated clients (distinct seeds), every client of a version in one batch
    jobs = _jobs(task, a, scenario.client.mu, small[:8] + small[3:4] * 2) + _jobs(task, b, scenario.client.mu, small, seed=7)
    want = [local_train(task, scenario.client, j) for j in jobs]
    got = train_batched(task, scenario.client, jobs)
    for w, g in zip(want, got):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=0, atol=1e-5)
    if task_cfg["name"] == "synthetic":
        assert len({len(task.clients[j.client]) for j in jobs}) > 3  # unequal data sizes covered
    if task_cfg.get("model") == "cnn":
        assert mlp_layers(task) is None  # the vmap path was the one compared


@pytest.mark.parametrize("client", [
    {"batch_size": 10, "epochs": 3},  # n = 23 → chunks 10, 10, 3 per epoch
    {"batch_size": 7, "local_steps": 9},  # the stream runs over several passes
    {"batch_size": 30, "local_steps": 4},  # n ≤ 30: full batches mixed with sampled ones
    {"local_steps": 2},  # full batches only
])
@pytest.mark.parametrize("sizes", [[23] * 5, [23, 23, 23, 31, 12, 40, 29]])  # equal sizes take a fast path
def test_group_indices_are_every_jobs_batch_schedule(client, sizes):
    """The padded index tensor holds, row for row, the batches ``batch_schedule`` draws from
    each job's own generator (so batched and per-client training see the same samples)."""
    cfg = sc.validate({"name": "g", "client": {"lr": 0.1, **client}}).client
    steps = local_steps_count(23, cfg)
    sizes = [n for n in sizes if local_steps_count(n, cfg) == steps]  # one group: equal step counts
    assert len(sizes) >= 3
    seeds = [11 * g + 5 for g in range(len(sizes))]
    index, lengths = group_indices(sizes, seeds, cfg)
    assert index.shape[:2] == lengths.shape == (len(sizes), steps)
    for g, (n, seed) in enumerate(zip(sizes, seeds)):
        schedule = batch_schedule(n, cfg, torch.Generator().manual_seed(seed))
        for s, batch in enumerate(schedule):
            want = torch.arange(n) if batch is None else batch
            assert int(lengths[g, s]) == len(want)
            assert torch.equal(index[g, s, : len(want)], want)
            assert not index[g, s, len(want):].any()  # padding points at sample 0 (masked out)


def test_batched_executor_trains_pending_jobs_together_and_matches_inline_run():
    base = {"task.name": "synthetic", "task.dim": None, "task.problem": None, "task.samples_per_client": None,
            "client.lr": 0.05, "population.clients": 40, "run.steps": 8}
    inline = run_blocking(make_scenario(base))
    batched = build_simulation(make_scenario({**base, "run.batched": True}))
    asyncio.run(batched.run())
    assert isinstance(batched.executor, BatchedExecutor)
    assert max(batched.executor.batches) > 1
    assert inline.sink.updates == batched.sink.updates
    torch.testing.assert_close(batched.theta, inline.theta, rtol=0, atol=1e-5)


def _executor_run(executor: str, **extra):
    scenario = make_scenario({
        "task.name": "gaussian-mlp", "task.dim": 6, "task.hidden": 8, "task.classes": 3, "task.samples_per_client": 12,
        "task.problem": None, "client.lr": 0.1, "client.batch_size": 5, "client.local_steps": None, "client.epochs": 1,
        "run.executor": executor, "run.workers": 2, "run.steps": 6, "run.eval_every": 3, **extra,
    })
    return run_blocking(scenario)


@pytest.fixture(scope="module")
def inline_run():
    return _executor_run("inline")


def _same_run(a, b):
    assert a.sink.updates == b.sink.updates  # updates.csv rows
    torch.testing.assert_close(b.theta, a.theta, rtol=0, atol=1e-6)  # final model


@pytest.mark.parametrize("executor,extra", [("inline", {"run.batched": True}), ("threads", {}),
                                           pytest.param("processes", {}, marks=pytest.mark.slow),
                                           pytest.param("processes", {"run.batched": True}, marks=pytest.mark.slow)])
def test_every_executor_gives_the_same_run(inline_run, executor, extra):
    _same_run(inline_run, _executor_run(executor, **extra))
    assert not multiprocessing.active_children()  # process workers shut down with the run


@pytest.mark.slow
@pytest.mark.parametrize("protocol", ["fedbuff", "sync"])
def test_batched_groups_on_worker_processes_equal_inline_batched(protocol):
    """One large run on many cores: the jobs of one model version go to each worker as one
    batched group; the run is inline batched's (same updates.csv rows, model to round-off)."""
    extra = {"server.protocol": "sync", "server.concurrency": None, "server.cohort": 12, "server.buffer": 12,
             "server.max_staleness": None} if protocol == "sync" else {"server.concurrency": 16, "server.buffer": 8}
    inline = _executor_run("inline", **extra, **{"run.batched": True})
    remote = _executor_run("processes", **extra, **{"run.batched": True, "run.workers": 2})
    _same_run(inline, remote)


def test_a_process_worker_holds_one_tensor_per_model_version():
    """``train_batched`` batches jobs that share their start and centre tensor objects: a job
    whose centre is its start sends the same ``(key, array)`` spec twice, and a second tensor
    built from it once made the first job of every version a group of its own (trained
    unbatched: twice the time of a 25-job group at 5 local epochs)."""

    from asyncfl.compute.executors import WORKER_CACHE, _WorkerVersions

    versions = _WorkerVersions()
    first = (0, np.zeros(3, dtype=np.float32))
    assert versions.get(first) is versions.get(first) is versions.get((0,))
    for key in range(1, WORKER_CACHE + 1):  # the parent's FIFO: key 0 is the oldest and goes
        versions.get((key, np.full(3, key, dtype=np.float32)))
    with pytest.raises(KeyError):
        versions.get((0,))
    assert float(versions.get((WORKER_CACHE,))[0]) == WORKER_CACHE


@pytest.mark.slow
def test_ray_executor_gives_the_same_run(inline_run):
    import ray  # a test dependency (conftest.py keeps a local instance on loopback)

    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        assert ray.util.get_node_ip_address().startswith("127.")
        _same_run(inline_run, _executor_run("ray"))
        _same_run(_executor_run("inline", **{"run.batched": True}), _executor_run("ray", **{"run.batched": True}))
        assert ray.is_initialized()  # a session the caller started is left to the caller
    finally:
        ray.shutdown()


def test_ray_missing_is_a_scenario_error(monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_ray(name, *args, **kwargs):
        if name == "ray":
            raise ImportError("No module named 'ray'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_ray)
    scenario = make_scenario({"run.executor": "ray"})
    with pytest.raises(ScenarioError, match=r"run\.executor = 'ray'.*pip install asyncfl\[ray\]"):
        build_executor(scenario, None)


def test_batched_is_refused_with_threads():
    with pytest.raises(ScenarioError, match=r"run\.batched = true, run\.executor = 'threads'.*inline, processes, ray"):
        make_scenario({"run.executor": "threads", "run.batched": True})
    scenario = make_scenario()  # the executor's builder refuses it too, for a run section made by hand
    run = scenario.run.model_copy(update={"executor": "threads", "batched": True})
    with pytest.raises(ScenarioError, match=r"run\.batched = true, run\.executor = 'threads'.*inline, processes, ray"):
        build_executor(dataclasses.replace(scenario, run=run), None)


def test_null_executor_runs_the_engine_without_training():
    scenario = make_scenario({"run.steps": 30})
    sim = run_blocking(scenario, executor=NullExecutor())
    reference = run_blocking(scenario)
    assert [r[:-2] for r in sim.sink.updates] == [r[:-2] for r in reference.sink.updates]  # same schedule
    assert bool((sim.theta == sim.task.initial_theta).all())  # Δ = 0 every time


@pytest.mark.slow
def test_thread_workers_do_not_share_a_module():
    """functional_call swaps a module's parameters while it runs: threads sharing one module
    (and the evaluation in the event loop) computed with each other's weights — seen as a
    final-model difference of 0.04–0.12 against inline on this scenario before each thread got
    its own copy."""
    overrides = {"client.epochs": 3, "run.workers": 4, "run.steps": 20, "run.eval_every": 2,
                 "server.concurrency": 20, "server.buffer": 5}
    inline = _executor_run("inline", **overrides)
    for _ in range(2):
        _same_run(inline, _executor_run("threads", **overrides))


def test_batched_client_messages_equal_the_per_upload_messages_bit_for_bit():
    """``Δ = θ_s − θ_local`` over stacked tensors (uploads of several model versions) is the
    same elementwise subtraction as one upload at a time."""
    from asyncfl.compose import build_algorithm

    scenario = make_scenario()
    task = build_task(scenario.task, scenario.population.clients, scenario.seed)
    algorithm = build_algorithm(scenario, context(scenario).with_(task=task))
    state = algorithm.init(task.initial_theta)
    g = torch.Generator().manual_seed(0)
    versions = [task.initial_theta + torch.randn(task.dim, generator=g) for _ in range(3)]
    jobs = [LocalJob(k, versions[k % 3], versions[k % 3], 0.0, k) for k in range(7)]
    locals_ = [torch.randn(task.dim, generator=g, dtype=task.dtype) for _ in jobs]
    want = [algorithm.client_message(j, l, state) for j, l in zip(jobs, locals_)]
    got = algorithm.client_messages(jobs, locals_, state)  # one (7, d) tensor, a message per row
    assert len(got) == len(want) and all(torch.equal(a, b) for a, b in zip(got, want))


def test_one_start_model_broadcast_gives_the_stacked_messages_bit_for_bit():
    """A flush whose uploads all started from one θ_s: ``θ_s − stack(locals)`` (broadcast) is the
    per-upload ``θ_s − θ_local`` bit for bit, whether the locals are the rows of one trained
    block (used without a copy) or separate tensors."""
    from asyncfl.compose import build_algorithm

    scenario = make_scenario()
    task = build_task(scenario.task, scenario.population.clients, scenario.seed)
    algorithm = build_algorithm(scenario, context(scenario).with_(task=task))
    state = algorithm.init(task.initial_theta)
    g = torch.Generator().manual_seed(1)
    theta = task.initial_theta + torch.randn(task.dim, generator=g, dtype=task.dtype)
    jobs = [LocalJob(k, theta, theta, 0.0, k) for k in range(6)]
    block = torch.randn(6, task.dim, generator=g, dtype=task.dtype)
    for locals_ in (list(block.unbind(0)), [row.clone() for row in block]):
        want = [algorithm.client_message(j, l, state) for j, l in zip(jobs, locals_)]
        got = algorithm.client_messages(jobs, locals_, state)
        assert got.shape == (6, task.dim) and all(torch.equal(a, b) for a, b in zip(got, want))


def test_stack_rows_uses_a_block_of_consecutive_rows_as_it_is_and_stacks_anything_else():
    from asyncfl.server.aggregation import stack_rows, weighted_sum

    block = torch.arange(12.0).reshape(4, 3).clone()  # a tensor of its own (not a view)
    rows = list(block.unbind(0))
    assert stack_rows(rows) is block  # the 4 rows, in order: no copy
    for other in (rows[::-1], rows[:3], rows[1:], [r.clone() for r in rows], list(torch.arange(24.0).reshape(8, 3)[::2])):
        out = stack_rows(other)
        assert out.data_ptr() != block.data_ptr() and torch.equal(out, torch.stack(other))
    # Σ w_k x_k with w = (1, 2, 0, −1) over rows (0,1,2), (3,4,5), (6,7,8), (9,10,11): (−3, −1, 1)
    w = np.array([1.0, 2.0, 0.0, -1.0])
    assert torch.equal(weighted_sum(w, rows), torch.tensor([-3.0, -1.0, 1.0]))
    assert torch.equal(weighted_sum(w, rows), weighted_sum(w, [r.clone() for r in rows]))
