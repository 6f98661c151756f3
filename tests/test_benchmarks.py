"""The benchmarks are run on demand, not in CI, so their building blocks are smoke-tested here at
toy sizes: a benchmark that no longer runs is found by the test command, not by its next user."""

from __future__ import annotations

import pytest
import torch

from benchmarks import throughput
from benchmarks.common import engine_scenario, heapq_fedbuff
from benchmarks.engine import run_engine


def test_engine_benchmark_runs_the_same_arrivals_as_its_heapq_reference():
    scenario = engine_scenario(clients=200, concurrency=20, buffer=5, steps=30)
    arrivals, seconds = run_engine(scenario)
    assert arrivals == heapq_fedbuff(scenario) >= 5 * 30 and seconds > 0


@pytest.mark.parametrize("protocol", ["sync", "fedbuff"])
def test_throughput_benchmark_runs_its_workload(monkeypatch, protocol):
    monkeypatch.setattr(throughput, "ROUNDS", 3)
    total, steady = throughput.run_asyncfl(protocol, "batched", workers=1)
    assert total > 0 and steady > 0
    assert throughput.best_of([(1.0, 4.0), (2.0, 3.0)]) == (2.0, 4.0)
    assert throughput.best_of([None, None]) is None
    # round-paired ratios 10, 20, 40 (the second round was slow for both): median 20
    assert throughput.paired_ratio([(100.0, 0), (100.0, 0), (400.0, 0)], [(10.0, 0), (5.0, 0), (10.0, 0)]) == 20.0


def test_throughput_benchmark_times_a_bare_kernel_and_splits_a_batched_update(monkeypatch):
    monkeypatch.setattr(throughput, "ROUNDS", 2)
    total, steady = throughput.bare_kernel()
    assert total > 0 and steady > 0 and throughput.bare_cpu() > 0
    train, parent = throughput.cpu_split("fedbuff")
    assert train > 0 and parent > 0


def test_engine_benchmark_measures_its_floor_and_counts_python_calls():
    from benchmarks.engine import carried_objects, python_calls

    def two_frames() -> list[int]:
        return [abs(-k) for k in range(3)]  # the function and its comprehension; abs is a builtin

    assert python_calls(two_frames) == 2
    assert carried_objects(200) > 0
    scenario = engine_scenario(clients=200, concurrency=20, buffer=5, steps=10)
    assert python_calls(run_engine, scenario) > python_calls(heapq_fedbuff, scenario) > heapq_fedbuff(scenario)


def test_mnist1d_pooled_benchmark_trains_each_model():
    from benchmarks.mnist1d_pooled import PUBLISHED, train_pooled

    from asyncfl.config.tasks import MNIST1DTask
    from asyncfl.tasks import build_task

    final, best = train_pooled(build_task(MNIST1DTask(model="logreg"), 1, 0), steps=40, eval_every=20)
    assert 0.1 < final <= best <= 1.0  # beats chance after 40 steps
    assert set(PUBLISHED) == {"logreg", "mlp", "cnn"}


@pytest.mark.slow
def test_parallel_benchmark_profiles_a_batched_run_and_times_a_sweep(tmp_path):
    """The one-large-run profile (benchmarks/parallel.py §2, §5) and the sweep's phases (§1)."""
    from benchmarks import parallel

    inline = parallel.run_profile("inline", 3)
    assert inline.steps == 2 and inline.updates >= 2 * 50 and 0 < inline.train_cpu < inline.process_cpu and inline.rate > 0
    b = parallel.bounds(inline)
    assert parallel.parent_cpu(inline) > 0 and parallel.heapq_cpu(3) > 0 and "load average" in parallel.load()
    assert b.train + b.parent == pytest.approx(b.total) and 1 < b.critical <= b.amdahl <= 2 and b.with_overhead != b.with_overhead
    # a remote parent costing inline's whole CPU per step loses the workers' half of the training
    share = inline.train_cpu / inline.process_cpu
    assert parallel.bounds(inline, inline).with_overhead == pytest.approx(1 / (1 + share / 2))
    # a free remote parent and no fixed cost: the two halves of the training alone
    free = parallel.bounds(inline, inline._replace(process_cpu=0.0))
    assert free.with_overhead == pytest.approx(2 * inline.process_cpu / inline.train_cpu)
    fixed, per_job = parallel.group_cost(repeats=2)
    assert fixed >= 0 and per_job > 0
    heavy = parallel.fedbuff("inline", 3, parallel.WORKLOADS["5 epochs"])
    assert heavy.client.epochs == 5 and heavy.run.batched
    timing = parallel.sweep_timing("workers1", 2, parallel.sc.validate(parallel.TINY))
    assert timing.runs == 2 and 0 < timing.first <= timing.all_back and timing.rate > 0


def test_femnist_throughput_benchmark_times_its_three_ways(monkeypatch):
    from benchmarks import femnist_throughput as ft

    from asyncfl.config.scenario import ClientConfig

    monkeypatch.setattr(ft, "client_config", lambda: ClientConfig(lr=0.05, batch_size=5, local_steps=1))
    task = ft.cohort_task(2)
    assert task.num_clients == 2 and task.dim == 6_603_710  # LEAF's CNN on the twin
    assert min(ft.time_batched(task)) > 0 and min(ft.time_batched(task, vmap=True)) > 0
    assert task.batched_training is False  # restored after the forced vmap
    assert sum(ft.groups(task).values()) == 2
    shares = ft.profile_batched(task, top=3)
    assert len(shares) == 3 and 0 < sum(s for _, s in shares) <= 1


def test_datasets_pooled_benchmark_learns_the_twin():
    import argparse

    from benchmarks.datasets_pooled import PUBLISHED, workloads

    from asyncfl.tasks import build_task
    from asyncfl.tasks.pooled import train_pooled

    cfg, clients, lr, batch, shuffled = workloads(argparse.Namespace(users=20, cifar10=None))["twin mlp"]
    final, best = train_pooled(build_task(cfg, clients, 0), steps=60, lr=lr, batch=batch, eval_every=30, shuffle_seed=0)
    assert 0.05 < final <= best <= 1.0  # above chance (1/62) after 60 steps
    assert PUBLISHED["mnist1d cnn"] == 0.94


def test_records_benchmark_measures_a_bounded_run_and_reads_its_dense_file_back(tmp_path, monkeypatch):
    from asyncfl import staleness_counts
    from benchmarks import records

    monkeypatch.setattr(staleness_counts, "DENSE_LIMIT_BYTES", staleness_counts.DENSE_LIMIT_BYTES)  # the worker raises it
    run = records.worker_run(tmp_path / "run", 20, 10, True)
    assert run["shape"] == [20, 100_001] and run["entries"] > 0 and run["peak"] >= run["baseline"] > 0
    old = records.worker_old_file(tmp_path / "old.npz", tmp_path / "run")
    read = records.worker_read(tmp_path / "old.npz")
    assert old["shape"] == read["shape"] == [20, 100_001] and read["entries"] == run["entries"] and read["total"] == 20 * 10
    assert records.worker_bias(tmp_path / "run")["wall"] > 0


def test_scale_benchmark_measures_one_size_in_a_fresh_process():
    """benchmarks/scale.py at a toy size: the child process builds a diurnal population of 300
    clients (speeds and busy flags, 9 bytes a client; the schedule's three arrays, 17), runs 30
    steps of C = 5 and reports its own peak RSS, which includes its baseline after imports."""
    from benchmarks import scale

    row = scale.in_fresh_process(300, 30, 5, 150, "diurnal")
    assert row["arrivals"] >= 150 and row["population_bytes"] == 300 * (9 + 17)
    assert row["peak_rss_bytes"] >= row["baseline_rss_bytes"] > 0 and row["arrivals_per_s"] > 0
    line = scale.report([row]).splitlines()[1]
    assert line.split()[:3] == ["300", "30", f"{row['arrivals']:,}"] and line.endswith(f"{row['load_after']:<4.1f}")


def test_femnist_system_time_profile_splits_user_and_system_time(tmp_path):
    """benchmarks/femnist_throughput.py part 2's pieces: the CPU split's arithmetic (user 3 s and
    system 1 s: a 25 % share), and the profiled run's scenario is a valid FedBuff run on the twin
    that evaluates the training loss."""
    from benchmarks import femnist_throughput as ft

    from asyncfl.api import load_scenario

    split = ft.CpuSplit(5.0, 1.5, 1000) - ft.CpuSplit(2.0, 0.5, 400)
    assert split == (3.0, 1.0, 600) and split.share == 0.25
    path = tmp_path / "s.toml"
    path.write_text(ft.run_scenario("cnn", **ft.SMOKE_RUN))
    sc = load_scenario(path)
    assert (sc.task.name, sc.task.model, sc.population.clients, sc.run.steps) == ("femnist-twin", "cnn", 4, 2)
    assert sc.run.train_loss and sc.server.protocol == "fedbuff"


@pytest.mark.slow
def test_femnist_system_time_smoke_profiles_both_runs_and_both_ways(capsys):
    """``--system-time --smoke``: two child runs (LEAF's CNN, the MLP) and the two ways of local
    training, each with user time, system time and faults printed."""
    from benchmarks import femnist_throughput as ft

    ft.main(["--system-time", "--smoke"])
    out = capsys.readouterr().out
    for name in ("run cnn", "run mlp", "asyncfl", "kernel"):
        line = next(l for l in out.splitlines() if l.strip().startswith(name + " "))
        assert "user" in line and "system" in line and "minor faults" in line


def test_device_benchmark_smoke_measures_both_cnns_every_way_on_the_cpu(capsys):
    """benchmarks/device.py at its smoke size on the CPU (what CI runs): the device's name, both
    workloads, job by job, batched and the bare kernel timed every round (pfl too where it is
    importable), and batched models equal to the job-by-job ones to float round-off."""
    import importlib.util

    from benchmarks import device

    results = device.main(["--smoke", "--device", "cpu"])
    out = capsys.readouterr().out
    assert out.startswith("device: cpu\nhost: ") and "load average" in out
    assert [r["workload"] for r in results] == ["leaf-cnn", "cifar-cnn"]
    ways = {"jobs", "batched", "kernel"} | ({"pfl"} if importlib.util.find_spec("pfl") else set())
    for r in results:
        assert set(r["rates"]) == ways
        assert set(r["cpu_rates"]) == ways
        assert all(len(v) == device.SMOKE["rounds"] and min(v) > 0 for rates in (r["rates"], r["cpu_rates"]) for v in rates.values())
        assert r["batched_max_abs_diff"] < 1e-5
    assert results[0]["d"] == 6_603_710 and results[1]["d"] == 122_570  # LEAF's CNN, the CIFAR CNN


@pytest.mark.slow
def test_startup_benchmark_times_a_run_against_importing_torch(capsys):
    """benchmarks/startup.py, once each: it checks the run wrote its bias report and figure, and
    prints both clocks' medians and the overhead."""
    from benchmarks import startup

    assert startup.main(["--repeat", "1", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "overhead over importing torch" in out and "(CPU)" in out and "load average" in out
    assert "bytecode: cached" in out and "without the teardown" not in out


@pytest.mark.slow
def test_startup_benchmark_times_the_quadratic_run_against_both_references(capsys):
    """``--set`` reaches every run (a quadratic task here; an override the run refuses fails the benchmark) and
    ``--bare-exit`` adds ``import torch`` without the interpreter's teardown as a second reference."""
    from benchmarks import startup

    argv = ["--repeat", "1", "--steps", "2", "--bare-exit", "--set",
            'task={name="quadratic", problem="random", dim=20, samples_per_client=50}', "--set", "client.lr=0.004"]
    assert startup.main(argv) == 0
    out = capsys.readouterr().out
    assert "python -c 'import torch, os; os._exit(0)'" in out
    assert out.count("overhead over importing torch without the teardown") == 2  # wall and CPU
    with pytest.raises(SystemExit, match="server.buffer"):  # an override the run refuses: it did reach the run
        startup.main(["--repeat", "1", "--steps", "2", "--set", "server.buffer=0"])


def test_bf16_accuracy_benchmarks_t_interval_is_students():
    """Paired differences 0.01, 0.03, 0.02: mean 0.02, s = 0.01, t_{2, 0.975} = 4.302653, so the
    95 % interval is 0.02 ± 4.302653 · 0.01 / √3 = 0.02 ± 0.0248414."""
    from benchmarks.bf16_accuracy import t_interval

    mean, low, high = t_interval([0.01, 0.03, 0.02])
    assert mean == pytest.approx(0.02) and low == pytest.approx(0.02 - 0.0248414, abs=1e-7)
    assert high == pytest.approx(0.02 + 0.0248414, abs=1e-7)


@pytest.mark.slow
def test_bf16_accuracy_benchmark_runs_both_precisions_through_asyncfl(capsys):
    """benchmarks/bf16_accuracy.py at a toy size: two seeds of a 2-step MNIST-1D CNN run at fp32
    and at bf16 (run.precision), each seed's accuracies, the paired difference with its t
    interval and the CPU ratio printed."""
    import argparse

    from benchmarks import bf16_accuracy as bf

    femnist = bf.scenario("femnist", 0, "bf16", argparse.Namespace(mnist1d_steps=2, femnist_steps=2, femnist_users=4))
    assert femnist["run"]["precision"] == "bf16" and femnist["task"] == {"name": "femnist-twin", "users": 4}
    assert bf.main(["--workloads", "mnist1d", "--seeds", "0", "1", "--mnist1d-steps", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("mnist1d seed ") == 2 and "paired Δ (bf16 − fp32)" in out and "95 % t interval [" in out
    assert "nan" not in out


def test_ma_full_solver_benchmark_runs_the_rule_and_measures_its_banded_state():
    """60 steps, K = 8, C = 2, d = 3: the rule's state is the history (capacity 64 × 3 float32),
    the two bands of W and of its factor (64 × (largest staleness + 1) float64 each) and the
    8-byte step counter — O(t·b), not the dense solver's 64² + 64·65/2 floats."""
    from benchmarks import ma_full_solver

    res = ma_full_solver.run(60, 8, 2, 3, 1e-3, seed=0)
    b = res["staleness"]
    assert res["T"] == 60 and b >= 1
    assert res["state_mb"] * 2**20 == 64 * 3 * 4 + 2 * 64 * (b + 1) * 8 + 8
    assert res["cpu_s"] > 0 and res["peak_mb"] > 0
