"""Staleness scenarios (issue 9): trace replay, FedScale import, availability, the library."""

from __future__ import annotations

import csv
import os
import pickle
from pathlib import Path

import numpy as np
import pytest

from asyncfl.clients import fedscale

from asyncfl import rng as rngmod

from asyncfl.config import scenario as sc
from asyncfl.clients.availability import Schedule
from asyncfl.cli.main import main as cli_main
from asyncfl.compose import build_simulation, run_blocking
from asyncfl.errors import AsyncFLError, ScenarioError, TraceError
from asyncfl.cli.scenario_library import describe, library
from asyncfl.config.scenario import replay_scenario
from asyncfl.run.rundir import read_csv
from asyncfl.run.runner import run_to_dir_blocking

from conftest import make_scenario

SYNC = {"server.protocol": "sync", "server.concurrency": None, "server.cohort": 6, "server.buffer": 4, "server.max_staleness": None}
DIURNAL = {"population.availability": "diurnal", "population.period": 6.0, "population.online_fraction": 0.4}
DATA = Path(sc.__file__).resolve().parents[1] / "data"
REPO = Path(__file__).resolve().parent.parent


def _record(tmp_path: Path, overrides: dict, name: str = "rec") -> tuple[sc.Scenario, Path, dict]:
    scenario = make_scenario({"run.steps": 15, **overrides})
    out = tmp_path / name
    return scenario, out, run_to_dir_blocking(scenario, out)


# ------------------------------------------------------------------------------------------
# 1. replay
@pytest.mark.parametrize("overrides", [{}, SYNC, DIURNAL, {**SYNC, **DIURNAL}], ids=["fedbuff", "sync", "fedbuff-diurnal", "sync-diurnal"])
def test_replay_with_the_same_rule_reproduces_updates_csv_and_the_model(tmp_path, overrides):
    scenario, rec, summary = _record(tmp_path, overrides)
    rep = run_to_dir_blocking(replay_scenario(scenario, rec), tmp_path / "rep")
    assert (rec / "updates.csv").read_bytes() == (tmp_path / "rep" / "updates.csv").read_bytes()
    assert rep["final"]["loss"] == summary["final"]["loss"]  # job seeds follow the dispatch order
    assert rep["clients_dispatched"] == summary["clients_dispatched"]
    assert rep["updates_dropped_offline"] == summary["updates_dropped_offline"]
    if "population.availability" in overrides:
        assert summary["updates_dropped_offline"] > 0  # the offline drops were replayed too


@pytest.mark.parametrize("overrides,rule", [({}, "sgd"), (SYNC, "adam"), (DIURNAL, "nesterov")])
def test_replay_with_another_rule_gives_the_same_w(tmp_path, overrides, rule):
    scenario, rec, summary = _record(tmp_path, overrides)
    assert scenario.server.rule == "momentum" != rule
    other = run_to_dir_blocking(replay_scenario(scenario, rec / "updates.csv", **{"server.rule": rule}), tmp_path / "other")
    a, b = np.load(rec / "counts.npz"), np.load(tmp_path / "other" / "counts.npz")
    np.testing.assert_array_equal(a["by_staleness"], b["by_staleness"])
    np.testing.assert_array_equal(a["step_time"], b["step_time"])
    assert other["final"]["loss"] != summary["final"]["loss"]  # the rule did change the model


def test_replay_of_a_run_directory_with_a_larger_buffer_keeps_the_arrival_pattern(tmp_path):
    scenario, rec, _ = _record(tmp_path, {"server.max_staleness": None})
    sim = run_blocking(replay_scenario(scenario, rec, **{"server.buffer": 1, "run.steps": 20}))
    recorded = read_csv(rec / "updates.csv")
    by_seq = {int(r["dispatch"]): (int(r["client"]), float(r["arrival_time"])) for r in recorded}
    for row in sim.sink.updates:  # FedBuff dispatches at arrivals whatever C: same clients, same times
        assert by_seq[row.dispatch] == (row.client, row.arrival_time)


def _write_rows(path: Path, header: list[str], rows: list[list]) -> Path:
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows(rows)
    return path


def test_replay_rejects_bad_trace_files(tmp_path):
    scenario, rec, _ = _record(tmp_path, {})
    rows = list(csv.reader(open(rec / "updates.csv")))
    header, body = rows[0], rows[1:]

    def fails(path: Path, *fragments: str) -> None:
        with pytest.raises(AsyncFLError) as exc:
            run_blocking(replay_scenario(scenario, path))
        for fragment in (str(path), *fragments):
            assert fragment in str(exc.value)

    with pytest.raises(ScenarioError, match="latency.file = .*no such file"):
        replay_scenario(scenario, tmp_path / "missing.csv")
    fails(_write_rows(tmp_path / "cols.csv", ["client", "when"], [[1, 2]]), "missing column", "arrival_time")
    neg = [r[:] for r in body]
    neg[3][4] = str(float(neg[3][3]) - 0.5)  # arrival before dispatch
    fails(_write_rows(tmp_path / "neg.csv", header, neg), "negative latency", "line 5")
    fails(_write_rows(tmp_path / "short.csv", header, body[:10]), "too short", "run.steps × server.buffer")
    fails(_write_rows(tmp_path / "garbage.csv", header, [["x"] * len(header)]), "line 2")
    fails(_write_rows(tmp_path / "empty.csv", header, []), "no rows")
    with pytest.raises(TraceError, match=r"names client \d+, but population.clients = 10"):
        run_blocking(replay_scenario(scenario, rec, **{"population.clients": 10, "server.concurrency": 8}))


def test_a_replay_that_runs_out_stops_with_an_error_naming_the_trace(tmp_path):
    scenario, rec, _ = _record(tmp_path, {"server.max_staleness": None})
    # every recorded upload is needed (steps × C = uploads) but a staleness bound drops some
    uploads = sum(1 for r in read_csv(rec / "updates.csv"))
    steps = uploads // 3
    with pytest.raises(TraceError, match=r"ran out.*rec/updates.csv|rec/updates.csv.*ran out"):
        run_blocking(replay_scenario(scenario, rec, **{"run.steps": steps, "server.max_staleness": 0}))


def test_replay_rejects_contradicting_population_keys(tmp_path):
    scenario, rec, _ = _record(tmp_path, {})
    raw = replay_scenario(scenario, rec).to_dict()
    raw["population"].update(speed_sigma=0.5, availability="diurnal")
    with pytest.raises(ScenarioError) as exc:
        sc.validate(raw)
    text = str(exc.value)
    assert "population.speed_sigma = 0.5: must be 0 with latency.dist = 'trace'" in text
    assert "population.availability = 'diurnal': must be 'always'" in text


# ------------------------------------------------------------------------------------------
# 2. FedScale
def test_fedscale_sample_loads_with_the_published_structure():
    raw_dev = pickle.loads((DATA / "fedscale_sample_devices.pkl").read_bytes())
    dev = fedscale.load_devices(DATA / "fedscale_sample_devices.pkl")
    assert dev.ids == tuple(sorted(raw_dev)) and len(dev.ids) >= 10
    for i, cid in enumerate(dev.ids):
        assert dev.computation[i] == raw_dev[cid]["computation"] > 0
        assert dev.communication[i] == raw_dev[cid]["communication"] > 0
    raw_av = pickle.loads((DATA / "fedscale_sample_availability.pkl").read_bytes())
    av = fedscale.load_availability("asyncfl:fedscale_sample_availability.pkl")
    for i, cid in enumerate(av.ids):
        assert av.active[i].tolist() == raw_av[cid]["active"] and av.inactive[i].tolist() == raw_av[cid]["inactive"]
    # windows in seconds → virtual time (unit 2 s), repeated every finish_time
    s = av.schedule(30, seconds_per_unit=2.0)
    a0, b0, fin = raw_av[av.ids[0]]["active"][0], raw_av[av.ids[0]]["inactive"][0], raw_av[av.ids[0]]["finish_time"]
    assert s.online(0, a0 / 2) and not s.online(0, b0 / 2) and s.online(0, (a0 + fin) / 2 + 1e-6)
    assert s.online(len(av.ids), a0 / 2)  # client k uses profile k mod D


def test_fedscale_latency_formula():
    scenario = make_scenario({
        "population.speed_sigma": 0.0, "population.clients": 30,
        "latency": {"dist": "fedscale", "file": "asyncfl:fedscale_sample_devices.pkl", "time_unit_ms": 250.0},
        "task": {"name": "synthetic", "model": "logreg"},
        "client": {"solver": "sgd", "lr": 0.01, "local_steps": 3, "batch_size": 7},
    })
    sim = build_simulation(scenario)
    raw = pickle.loads((DATA / "fedscale_sample_devices.pkl").read_bytes())
    ids = sorted(raw)
    dim = 60 * 10 + 10  # logistic regression on 60 features, 10 classes
    bits = dim * sim.task.initial_theta.element_size() * 8
    for k in range(30):
        n = len(sim.task.clients[k])
        prof = raw[ids[k % len(ids)]]
        want_ms = 3 * min(7, n) * prof["computation"] + bits / prof["communication"]
        assert sim.fleet.latency(k, 0.0, sim.streams["latency"]) == pytest.approx(want_ms / 250.0, rel=1e-12)


class _RunsCode:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("case", ["code", "numpy", "list", "str-value", "bool", "negative", "nan", "missing", "truncated", "empty", "not-pickle", "bad-key"])
def test_fedscale_loader_rejects_hostile_and_malformed_files(tmp_path, case):
    marker = tmp_path / "pwned"
    good = {1: {"computation": 10.0, "communication": 100.0}, 2: {"computation": 5, "communication": 50}}
    payloads = {
        "code": {1: {"computation": _RunsCode(marker), "communication": 1.0}},
        "numpy": {1: {"computation": np.float64(3.0), "communication": 1.0}},
        "list": [good[1]],
        "str-value": {1: {"computation": "fast", "communication": 1.0}},
        "bool": {1: {"computation": True, "communication": 1.0}},
        "negative": {1: {"computation": -1.0, "communication": 1.0}},
        "nan": {1: {"computation": 1.0, "communication": float("nan")}},
        "missing": {1: {"computation": 1.0}},
        "bad-key": {(1, 2): good[1]},
    }
    path = tmp_path / f"{case}.pkl"
    if case == "truncated":
        path.write_bytes(pickle.dumps(good)[:-7])
    elif case == "empty":
        path.write_bytes(b"")
    elif case == "not-pickle":
        path.write_text("client,computation\n1,2\n")
    else:
        path.write_bytes(pickle.dumps(payloads[case]))
    with pytest.raises(TraceError) as exc:
        fedscale.load_devices(path)
    assert str(path) in str(exc.value)
    expected = {"code": "refused to load the global", "numpy": "refused to load the global numpy",
                "list": "must hold a dict", "str-value": "'computation' = 'fast'", "bool": "'computation' = True",
                "negative": "non-negative", "nan": "'communication' = nan", "missing": "'communication' is missing",
                "truncated": "truncated", "empty": "empty", "not-pickle": "pickle", "bad-key": "client id"}[case]
    assert expected in str(exc.value)
    assert not marker.exists()  # nothing ran


@pytest.mark.parametrize("entry,fragment", [
    ({"active": [0.0, 10.0], "inactive": [5.0]}, "pair up"),
    ({"active": [10.0, 0.0], "inactive": [20.0, 5.0]}, "ordered"),
    ({"active": [0.0], "inactive": [5.0], "finish_time": 3.0}, "before the last inactive"),
    ({"active": "0", "inactive": [5.0]}, "'active' must be a list"),
    ({"active": [-1.0], "inactive": [5.0]}, "'active' must be a list"),
    ({"inactive": [5.0]}, "'active' is missing"),
    ([0.0, 5.0], "must be a dict"),
])
def test_fedscale_availability_loader_rejects_malformed_entries(tmp_path, entry, fragment):
    path = tmp_path / "av.pkl"
    path.write_bytes(pickle.dumps({1: {"active": [0.0], "inactive": [1.0]}, 2: entry}))
    with pytest.raises(TraceError, match=fragment):
        fedscale.load_availability(path)


# ------------------------------------------------------------------------------------------
# 3. availability
def _diurnal_online(phase: float, period: float, frac: float, x: float) -> bool:
    return (x - phase) % period < frac * period


@pytest.mark.parametrize("overrides", [{}, SYNC], ids=["fedbuff", "sync"])
def test_no_dispatch_to_an_offline_client_and_drops_are_counted(tmp_path, overrides):
    period, frac = 6.0, 0.4
    scenario = make_scenario({"run.steps": 25, **overrides, **DIURNAL})
    summary = run_to_dir_blocking(scenario, tmp_path / "run")
    rows = read_csv(tmp_path / "run" / "updates.csv")
    phases = rngmod.make_streams(scenario.seed)["availability"].uniform(0.0, period, size=scenario.population.clients)
    eps = 1e-9
    for r in rows:
        k, t0, t1 = int(r["client"]), float(r["dispatch_time"]), float(r["arrival_time"])
        assert _diurnal_online(phases[k], period, frac, t0 + eps), r  # online when dispatched
        if r["reason"] == "offline":  # dropped exactly when its online window ended
            assert r["accepted"] == "false" and not _diurnal_online(phases[k], period, frac, t1 + eps)
            assert _diurnal_online(phases[k], period, frac, t1 - eps)
        elif r["reason"] != "late":  # an upload that arrived: the client stayed online throughout
            grid = np.linspace(t0, t1, 50)[1:-1]
            assert all(_diurnal_online(phases[k], period, frac, x) for x in grid), r
    dropped = sum(r["reason"] == "offline" for r in rows)
    assert dropped > 0 and summary["updates_dropped_offline"] == dropped
    assert summary["status"] == "completed"


def _blackout(scenario, start: float, end: float) -> Schedule:
    """Everyone online except during [start, end) (an availability override of compose)."""
    n = scenario.population.clients
    return Schedule([np.array([0.0, end])] * n, [np.array([start, 1e12])] * n, None)


def test_dispatch_waits_for_clients_to_come_back_and_restores_k():
    scenario = make_scenario({"run.steps": 40, "server.max_staleness": None})
    sim = build_simulation(scenario, availability=_blackout(scenario, 3.0, 7.0))
    import asyncio

    asyncio.run(sim.run())
    rows = sim.sink.updates
    k = scenario.server.concurrency
    assert not any(3.0 <= r.dispatch_time < 7.0 for r in rows)
    dropped = [r for r in rows if r.reason == "offline"]
    assert len(dropped) == k and all(r.arrival_time == 3.0 for r in dropped)  # all K in flight dropped at 3
    assert sim.counters.dropped_offline == k
    assert sum(r.dispatch_time == 7.0 for r in rows) + sum(
        1 for rec in sim.in_flight.values() if rec.dispatch_time == 7.0) == k  # K dispatched the moment they return
    assert max(r.dispatch_time for r in rows) > 7.0


def test_sync_round_waits_for_clients_and_survives_a_cohort_going_offline():
    scenario = make_scenario({"run.steps": 15, **SYNC})
    sim = run_blocking(scenario, availability=_blackout(scenario, 2.0, 5.0))
    rows = sim.sink.updates
    assert not any(2.0 <= r.dispatch_time < 5.0 for r in rows)
    assert sim.counters.dropped_offline > 0 and sim.steps_done == 15
    assert any(r.dispatch_time == 5.0 for r in rows)


def test_an_availability_schedule_that_ends_stops_with_a_clear_error():
    scenario = make_scenario({"run.steps": 40})
    n = scenario.population.clients
    ending = Schedule([np.array([0.0])] * n, [np.array([2.0])] * n, None)
    with pytest.raises(TraceError, match="no client comes online after"):
        run_blocking(scenario, availability=ending)


def test_availability_keys_are_checked():
    with pytest.raises(ScenarioError) as exc:
        make_scenario({"population.availability": "trace"})
    assert "population.availability_file: required with population.availability = 'trace'" in str(exc.value)
    with pytest.raises(ScenarioError, match=r"population.availability_file: unknown key.*\(a key of population.availability = 'trace'\)"):
        make_scenario({"population.availability_file": "x.pkl"})
    with pytest.raises(ScenarioError, match="no such file"):
        make_scenario({"population.availability": "trace", "population.availability_file": "nope.pkl"})


def test_schedule_boundaries_are_consistent():
    s = Schedule([np.array([1.0, 4.0])], [np.array([2.0, 4.5])], 5.0)
    for x in (0.3, 1.0, 1.7, 2.0, 4.2, 6.0, 123.456):
        t = s.next_online(0, x)
        assert t > x and s.online(0, t)
        off = s.offline_time(0, x)
        assert off >= x and not s.online(0, off)
    assert s.offline_time(0, 4.2) == 4.5 and s.next_online(0, 4.6) == 6.0


# ------------------------------------------------------------------------------------------
# 4. the scenario library
EXPECTED = {"quickstart", "heavy_tailed", "bimodal", "diurnal", "trace_replay", "high_concurrency"}


def test_library_lists_every_scenario_with_a_description(capsys):
    entries = library(REPO / "scenarios")
    assert EXPECTED <= set(entries)
    assert cli_main(["scenarios", "--dir", str(REPO / "scenarios")]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == len(entries)
    for line, (name, path) in zip(lines, entries.items()):
        assert line.startswith(name) and describe(path) and describe(path) in line


#: shipped scenarios whose run is left to the whole suite: private_synthetic draws its 5 000
#: Synthetic(1, 1) devices (about 7 s of CPU) before its first step; it is validated in the fast
#: subset by tests/test_privacy_sampling.py (its σ) and tests/test_privacy_audit.py (its audit)
SLOW_TO_BUILD = {"private_synthetic"}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.slow) if n in SLOW_TO_BUILD else n
                                  for n in sorted(p.stem for p in (REPO / "scenarios").glob("*.toml"))])
def test_library_scenario_validates_and_runs(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # relative trace paths are relative to the scenario file
    scenario = sc.load(REPO / "scenarios" / f"{name}.toml", ["run.steps=3", "run.eval_every=3"])
    assert (REPO / "scenarios" / f"{name}.toml").read_text().startswith("#")
    sim = run_blocking(scenario)
    assert sim.steps_done == 3


def test_high_concurrency_is_k_equal_20c_and_trace_replay_matches_its_recording():
    hc = sc.load(REPO / "scenarios" / "high_concurrency.toml")
    assert hc.server.concurrency == 20 * hc.server.buffer
    replay = sc.load(REPO / "scenarios" / "trace_replay.toml")
    source = sc.load(REPO / "scenarios" / "heavy_tailed.toml")
    for key in ("protocol", "concurrency", "buffer", "max_staleness"):
        assert getattr(replay.server, key) == getattr(source.server, key)
    assert replay.server.rule != source.server.rule


def test_pareto_and_bimodal_speeds():
    scenario = make_scenario({"latency": {"dist": "pareto", "scale": 0.5, "shape": 1.5},
                              "population.speed_sigma": 0.0, "population.slow_fraction": 0.2, "population.slow_factor": 10.0})
    sim = build_simulation(scenario)
    assert sorted(np.unique(sim.fleet.speeds).tolist()) == [1.0, 10.0]
    assert int((sim.fleet.speeds == 10.0).sum()) == round(0.2 * scenario.population.clients)
    k = int(np.flatnonzero(sim.fleet.speeds == 1.0)[0])
    draws = [sim.fleet.latency(k, 0.0, sim.streams["latency"]) for _ in range(2000)]
    assert min(draws) >= 0.5 and np.median(draws) == pytest.approx(0.5 * 2 ** (1 / 1.5), rel=0.1)


# ------------------------------------------------------------------------------------------
# 5. analysis
def test_staleness_analysis_writes_a_figure(tmp_path, capsys):
    from analysis.staleness import main, run_w, staleness_stats

    scenario, rec, _ = _record(tmp_path, {})
    assert main([str(rec)]) == 0
    assert (rec / "staleness.png").stat().st_size > 10_000
    stats = staleness_stats(rec)
    assert stats["accepted"] == 15 * 3 and sum(stats["counts"]) == 45
    W = run_w(rec)
    assert W.shape == (15, 15) and np.allclose(W, np.tril(W))
    assert "staleness mean" in capsys.readouterr().out
