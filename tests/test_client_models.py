"""Latency and availability models that see their client (docs/extending.md §6): the example of
the docs, run as written, against a brute-force replay of its draws — every job's latency
recomputed from a fresh ``latency`` stream in dispatch order with each client's index, speed and
sample count — and the schedule's online windows checked client by client."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np
import pytest

from asyncfl import rng as rngmod
from asyncfl.clients.fleet import draw_speeds
from asyncfl.components.registry import unregister
from asyncfl.config import scenario as sc
from asyncfl.run.runner import run_to_dir_blocking
from asyncfl.compose import build_simulation
from conftest import make_raw

DOC = Path(__file__).resolve().parents[1] / "docs" / "extending.md"


@pytest.fixture
def example():
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("**Models that see their client.**"):]
    code = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    namespace: dict = {"__name__": "docs_extending_example"}
    exec(compile(code, str(DOC), "exec", dont_inherit=True), namespace)  # the example as written: it registers both models
    yield namespace
    unregister("latency", "per-client")
    unregister("availability", "slow-half-offline")


def scenario(**extra) -> sc.Scenario:
    raw = make_raw(**{"population.speed_sigma": 0.7, "run.steps": 30, **extra})
    raw["task"] = {"name": "synthetic", "alpha": 1.0, "beta": 1.0, "model": "logreg"}  # unequal sample counts
    raw["latency"] = {"dist": "per-client", "mean": 0.5, "slow_every": 4, "slow_scale": 5.0}
    return sc.validate(raw)


def test_a_latency_model_sees_each_clients_index_speed_and_samples(example, tmp_path):
    s = scenario()
    out = tmp_path / "run"
    run_to_dir_blocking(s, out)
    with (out / "updates.csv").open(newline="") as f:
        rows = sorted(csv.DictReader(f), key=lambda r: int(r["dispatch"]))
    streams = rngmod.make_streams(s.seed)
    speeds = draw_speeds(s.population, streams["speed"])
    samples = [len(c) for c in build_simulation(s).task.clients]
    assert len(set(samples)) > 5
    latency = streams["latency"]
    expected = {}
    assert int(rows[0]["dispatch"]) == 1
    for d in range(1, int(rows[-1]["dispatch"]) + 1):  # every dispatch (numbered from 1) draws once, in order
        rec = next((r for r in rows if int(r["dispatch"]) == d), None)
        k = int(rec["client"]) if rec is not None else None
        draw = latency.exponential(0.5)
        if k is not None:
            expected[d] = speeds[k] * (5.0 if k % 4 == 0 else 1.0) * (samples[k] / 20) * draw
    timed = [r for r in rows if r["reason"] in ("", "stale")]
    assert len(timed) > 30
    for r in timed:
        got = float(r["arrival_time"]) - float(r["dispatch_time"])
        assert got == pytest.approx(expected[int(r["dispatch"])], rel=1e-9, abs=1e-12), r


def test_an_availability_model_sees_the_clients_speeds(example, tmp_path):
    s = scenario(**{"population.availability": "slow-half-offline", "population.offline_period": 10.0})
    sim = build_simulation(s)
    speeds, schedule = sim.fleet.speeds, sim.fleet.availability
    slow = speeds > np.median(speeds)
    assert slow.any() and (~slow).any()
    for k in range(s.population.clients):  # the fast half always online; the slow half half the time
        online = np.mean([schedule.online(k, x) for x in np.linspace(0, 100, 2001)])
        assert online == pytest.approx(0.5 if slow[k] else 1.0, abs=0.02), k
    s_plain = s.replace(**{"population.availability": "always"})
    assert np.array_equal(build_simulation(s_plain).fleet.speeds, speeds)  # the same speed stream
    run_to_dir_blocking(s, tmp_path / "run")
    with (tmp_path / "run" / "updates.csv").open(newline="") as f:
        for r in csv.DictReader(f):
            if r["reason"] != "offline":
                assert schedule.online(int(r["client"]), float(r["dispatch_time"]))
