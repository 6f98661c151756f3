"""The benchmarks are run on demand, not in CI, so their building blocks are smoke-tested here at
toy sizes: a benchmark that no longer runs is found by the test command, not by its next user."""

from __future__ import annotations

import pytest

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


def test_mnist1d_pooled_benchmark_trains_each_model():
    from benchmarks.mnist1d_pooled import PUBLISHED, train_pooled

    from asyncfl.config.tasks import MNIST1DTask
    from asyncfl.tasks import build_task

    final, best = train_pooled(build_task(MNIST1DTask(model="logreg"), 1, 0), steps=40, eval_every=20)
    assert 0.1 < final <= best <= 1.0  # beats chance after 40 steps
    assert set(PUBLISHED) == {"logreg", "mlp", "cnn"}
