"""Reliability (issue 7): exact checkpoint/resume, crash safety, hostile inputs, numerical faults.

Resumed runs are compared with uninterrupted ones bit for bit: ``updates.csv`` byte for byte,
``metrics.csv`` apart from ``wall_time``, ``model.pt`` with ``torch.equal`` and ``counts.npz``.
"""

from __future__ import annotations

import asyncio
import contextlib
import csv
import hashlib
import importlib
import io
import json
import math
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simpy
import tomli_w
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncfl.config import scenario as scenario_mod
from asyncfl.run import checkpoint
from asyncfl.run.parallel import RunJob, run_job
from asyncfl.cli.main import main
from asyncfl.sim.clock import timeout_at
from asyncfl.records import UPDATE_FIELDS
from asyncfl.compose import build_simulation
from asyncfl.errors import NumericalFault, RunInterrupted
from asyncfl.compose import solver_of
from asyncfl.compute.executors import InlineExecutor
from asyncfl.records import METRIC_FIELDS
from asyncfl.run.rundir import read_csv
from asyncfl.run.runner import resume_dir, run_to_dir
from asyncfl.tasks import build_task

from conftest import make_raw, make_scenario

REPO = Path(__file__).resolve().parents[1]

SYNC = {"server.protocol": "sync", "server.concurrency": None, "server.cohort": 6, "server.buffer": 4, "server.max_staleness": None}
CONFIGS = {
    "fedbuff-momentum": {"server.rule": "momentum"},
    "fedbuff-ma-full": {"server.rule": "ma-full"},
    "fedbuff-ma-light": {"server.rule": "ma-light"},
    "fedbuff-adam-fedasync": {"server.rule": "adam", "server.buffer": 1, "server.lr": 0.05},
    "sync-fedavg": {**SYNC},
    "fedbuff-momentum-threads": {"run.executor": "threads", "run.workers": 2},
}
# where to stop, as fractions of the reference run's simpy events: start-up, mid-buffer, later rounds
STOPS = (0.05, 0.3, 0.55, 0.9)


# ---------------------------------------------------------------------------------------------
# helpers
def _run(scenario, out: Path, stop_at: int | None = None, events: list[int] | None = None, **kw: Any) -> bool:
    """Run into ``out``; with ``stop_at``, stop before the ``stop_at``-th event (as SIGINT does).
    Returns True when the run was stopped; ``events`` receives the number of events polled."""
    calls = [0]

    def should_stop() -> bool:
        calls[0] += 1
        return stop_at is not None and calls[0] >= stop_at

    try:
        asyncio.run(run_to_dir(scenario, out, should_stop=should_stop, **kw))
    except RunInterrupted:
        return True
    finally:
        if events is not None:
            events.append(calls[0])
    return False


def _resume(out: Path, stop_at: int | None = None, **kw: Any) -> bool:
    calls = [0]

    def should_stop() -> bool:
        calls[0] += 1
        return stop_at is not None and calls[0] >= stop_at

    try:
        asyncio.run(resume_dir(out, should_stop=should_stop, **kw))
    except RunInterrupted:
        return True
    return False


def _metrics(path: Path) -> list[dict[str, str]]:
    return [{k: v for k, v in row.items() if k != "wall_time"} for row in read_csv(path / "metrics.csv")]


def assert_same_run(a: Path, b: Path) -> None:
    assert (a / "updates.csv").read_bytes() == (b / "updates.csv").read_bytes()
    assert _metrics(a) == _metrics(b)
    ma, mb = torch.load(a / "model.pt"), torch.load(b / "model.pt")
    assert ma.keys() == mb.keys() and all(torch.equal(ma[k], mb[k]) for k in ma)
    ca, cb = np.load(a / "counts.npz"), np.load(b / "counts.npz")
    assert sorted(ca.files) == sorted(cb.files)
    for key in ca.files:
        np.testing.assert_array_equal(ca[key], cb[key])
    assert (a / "privacy.csv").exists() == (b / "privacy.csv").exists()
    if (a / "privacy.csv").exists():  # private runs: the ε curve
        assert (a / "privacy.csv").read_bytes() == (b / "privacy.csv").read_bytes()
    sa, sb = (json.loads((p / "summary.json").read_text()) for p in (a, b))
    for s in (sa, sb):
        for key in ("wall_time", "updates_per_second", "checkpoint"):
            s.pop(key, None)
    assert sa == sb


def _buffered(out: Path) -> int:
    """Uploads waiting in the checkpoint's buffer (FedBuff) or open sync round."""
    state = checkpoint.read(out / "checkpoint.pt").state
    arrived = state.protocol.arrived if hasattr(state.protocol, "arrived") else ()
    return len(getattr(state.protocol, "buffer", ())) + len(arrived)


def _resume_check(overrides: dict[str, Any], tmp_path: Path, stops=STOPS) -> None:
    scenario = make_scenario(overrides)
    ref = tmp_path / "ref"
    events: list[int] = []
    assert not _run(scenario, ref, events=events)
    waiting = []
    for k in sorted({max(2, int(f * events[0])) for f in stops}):
        out = tmp_path / f"stop{k}"
        assert _run(scenario, out, stop_at=k)
        assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"
        waiting.append(_buffered(out))
        assert not _resume(out)
        assert_same_run(ref, out)
    if scenario.server.buffer > 1:  # FedAsync (C = 1) never holds a partial buffer
        assert any(waiting), "no checkpoint was taken with uploads waiting in the buffer"




# ---------------------------------------------------------------------------------------------
# 1. exact resume
def test_timeout_at_matches_simpy_and_is_exact():
    env = simpy.Environment(initial_time=0.20072653859351497)
    fired = []
    when = 1.3840503320687418  # now + (when − now) == 1.3840503320687416: one ulp early

    def proc(tag, t):
        yield timeout_at(env, t)
        fired.append((tag, env.now))

    for tag, t in (("a", when), ("b", when), ("c", 0.5), ("d", when)):
        env.process(proc(tag, t))
    env.run()
    assert fired == [("c", 0.5), ("a", when), ("b", when), ("d", when)]  # exact, ties in order


@pytest.mark.parametrize("name", list(CONFIGS))
def test_resume_is_bit_for_bit(name, tmp_path):
    _resume_check(CONFIGS[name], tmp_path)


@pytest.mark.parametrize("algorithm", ["fedprox", "fedsplit", "feddr", "fedpd"])
def test_resume_sync_algorithms(algorithm, tmp_path):
    _resume_check({**SYNC, "server.algorithm": algorithm, "server.rule": "sgd", "client.mu": 0.5}, tmp_path, stops=(0.3, 0.9))


def test_resume_with_diurnal_availability(tmp_path):
    """Offline drops, clients waiting to come online (a pending wake-up) and the availability
    phases are all part of the checkpoint."""
    _resume_check({"population.availability": "diurnal", "population.period": 3.0, "population.online_fraction": 0.4,
                   "run.steps": 15}, tmp_path)


def test_resume_of_a_replayed_trace(tmp_path):
    recorded = tmp_path / "recorded"
    assert not _run(make_scenario(), recorded)
    _resume_check({"latency.dist": "trace", "latency.mean": None, "latency.file": str(recorded / "updates.csv"),
                   "population.speed_sigma": 0.0, "server.rule": "sgd"}, tmp_path, stops=(0.3, 0.8))


def test_resume_with_privacy(tmp_path):
    _resume_check({"privacy.enabled": True, "privacy.noise_multiplier": 0.5, "privacy.xi": 1.0}, tmp_path, stops=(0.3, 0.9))


@pytest.mark.parametrize("protocol", ["fedbuff", "sync"])
def test_resume_with_a_participation_cap(protocol, tmp_path):
    """Participations per client and the undecided uploads are declared state: a capped run
    resumed anywhere is the uninterrupted run, bit for bit (clients reach the cap in both)."""
    capped = {"privacy.enabled": True, "privacy.noise_multiplier": 0.5, "privacy.xi": 1.0,
              "privacy.sampling": "participation-cap", "privacy.max_participations": 2, "run.steps": 15}
    _resume_check({**capped, **(SYNC if protocol == "sync" else {}), "privacy.max_participations": 2 if protocol == "fedbuff" else 3},
                  tmp_path, stops=(0.3, 0.8))


def test_periodic_checkpoint_after_a_crash_truncates_and_resumes_twice(tmp_path):
    """A crash after the last periodic checkpoint leaves rows the checkpoint never saw: resume
    cuts them and writes them again; a resumed run can itself be stopped and resumed."""
    scenario = make_scenario({"run.checkpoint_every": 3, "run.steps": 14, "run.eval_every": 2})
    ref = tmp_path / "ref"
    _run(scenario, ref)
    out = tmp_path / "crash"

    def crash(event):
        if event.step == 8:
            raise KeyboardInterrupt  # a hard stop in the middle: no new checkpoint

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(run_to_dir(scenario, out, on_event=crash))
    ck = checkpoint.read(out / "checkpoint.pt")
    assert ck.step == 6  # the last periodic checkpoint
    rows = ck.csv_rows
    assert len(read_csv(out / "updates.csv")) > rows["updates.csv"]
    assert _resume(out, stop_at=25)  # the resumed run is stopped again, mid-buffer
    assert not _resume(out)
    assert_same_run(ref, out)


@pytest.mark.slow
def test_each_version_of_theta_is_stored_once(tmp_path):
    scenario = make_scenario({"task.dim": 4000, "server.max_staleness": 20, "run.steps": 6, "server.lr": 0.01})
    out = tmp_path / "run"
    assert _run(scenario, out, stop_at=14)
    ck = checkpoint.read(out / "checkpoint.pt")
    sim = build_simulation(scenario)
    sim.restore(ck.state)
    recs = [*sim.in_flight.values(), *sim.protocol.referred()]
    versions = {r.version for r in recs}
    assert len(versions) < len(recs)  # several clients share a version
    for v in versions:
        ptrs = {r.job.start.untyped_storage().data_ptr() for r in recs if r.version == v}
        assert len(ptrs) == 1
    # stored: one θ per version, the momentum trace, the finished local models; not one θ per job
    results = sum(c.result is not None for c in ck.state.clients)
    theta_bytes = 4000 * sim.theta.element_size()
    assert (out / "checkpoint.pt").stat().st_size < (len(versions) + results + 1) * theta_bytes + 64_000
    assert len(versions) + results + 1 < 2 * len(recs)


# ---------------------------------------------------------------------------------------------
# 2. crash safety: SIGKILL and SIGINT of the real command
def _cli(*args: str, **kw: Any) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "asyncfl.cli.main", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def _assert_files_parse(out: Path) -> None:
    for name, fields in (("updates.csv", UPDATE_FIELDS), ("metrics.csv", METRIC_FIELDS)):
        if (out / name).exists():
            text = (out / name).read_text()
            assert text == "" or text.endswith("\n"), f"{name} ends in a partial row"
            rows = list(csv.reader(io.StringIO(text)))
            assert not rows or tuple(rows[0]) == fields
            assert all(len(r) == len(fields) for r in rows)
    if (out / "summary.json").exists():
        assert json.loads((out / "summary.json").read_text())["format_version"] == 1
    if (out / "checkpoint.pt").exists():
        checkpoint.read(out / "checkpoint.pt")
    if (out / "counts.npz").exists():
        np.load(out / "counts.npz")["by_staleness"]


@pytest.fixture(scope="module")
def kill_scenario(tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("kill")
    path = root / "s.toml"
    path.write_text(tomli_w.dumps(make_raw(**{"run.steps": 40, "run.checkpoint_every": 2, "run.eval_every": 5})))
    ref = root / "ref"
    assert main(["run", str(path), "--out", str(ref), "--quiet"]) == 0
    return path, ref


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_sigkill_at_random_moments_then_resume(seed, kill_scenario, tmp_path):
    """Seed 0 kills at a random moment from the start (often before the run directory exists);
    the others at a random moment after the run started writing (between checkpoints, inside a
    write, before the first checkpoint, ...)."""
    path, ref = kill_scenario
    out = tmp_path / "run"
    rng = random.Random(seed)
    proc = _cli("run", str(path), "--out", str(out), "--quiet")
    if seed:  # wait for a random number of rows of updates.csv (of about 130), then a little more
        rows, deadline = rng.randint(0, 110), time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            with contextlib.suppress(FileNotFoundError):
                if (out / "updates.csv").read_bytes().count(b"\n") > rows:
                    break
            time.sleep(0.001)
    try:
        proc.wait(timeout=rng.uniform(0.05, 1.0) if seed == 0 else rng.uniform(0.0, 0.05))
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    killed_at = None
    if not (out / "scenario.toml").exists():  # killed before the run directory existed
        assert main(["resume", str(out), "--quiet"]) == 2
        assert main(["run", str(path), "--out", str(out), "--quiet", "--overwrite"]) == 0
    else:
        _assert_files_parse(out)
        if (out / "checkpoint.pt").exists():
            killed_at = checkpoint.read(out / "checkpoint.pt").step
        assert main(["resume", str(out), "--quiet"]) == 0
    print(f"seed {seed}: killed {'after checkpoint of step %s' % killed_at if killed_at is not None else 'without a checkpoint'}")
    assert_same_run(ref, out)
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no temporaries left


@pytest.mark.slow
def test_sigint_checkpoints_and_says_how_to_resume(kill_scenario, tmp_path):
    path, ref = kill_scenario
    out = tmp_path / "run"
    proc = _cli("run", str(path), "--out", str(out), "--quiet", "--set", "run.checkpoint_every=0")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if (out / "metrics.csv").exists() and len((out / "metrics.csv").read_text().splitlines()) >= 3:
            break
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    if proc.returncode == 0:
        pytest.skip("the run finished before SIGINT arrived (very fast machine)")
    assert proc.returncode == 130, err
    assert "Traceback" not in err and f"asyncfl resume {out}" in err
    assert json.loads((out / "summary.json").read_text())["status"] == "interrupted"
    _assert_files_parse(out)
    # the directory's scenario says checkpoint_every = 0, the reference 2: compare the records
    assert main(["resume", str(out), "--quiet"]) == 0
    assert (out / "updates.csv").read_bytes() == (ref / "updates.csv").read_bytes()
    assert _metrics(out) == _metrics(ref)


# ---------------------------------------------------------------------------------------------
# 3. hostile inputs
def _snapshot(path: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(path.iterdir()) if p.is_file()}


@pytest.fixture
def stopped_run(tmp_path) -> Path:
    out = tmp_path / "run"
    assert _run(make_scenario(), out, stop_at=23)
    return out


def _corrupt(kind: str, out: Path) -> str:
    ck = out / "checkpoint.pt"
    if kind == "no-dir":
        return str(out / "missing")
    if kind == "empty-dir":
        (out / "empty").mkdir()
        return str(out / "empty")
    if kind == "garbage-scenario":
        (out / "scenario.toml").write_text("[[[ not toml")
    elif kind == "invalid-scenario":
        (out / "scenario.toml").write_text("[server]\nbufer = 3\n")
    elif kind == "edited-scenario":
        (out / "scenario.toml").write_text((out / "scenario.toml").read_text().replace("seed = 3", "seed = 4"))
    elif kind == "summary-not-json":
        (out / "summary.json").write_text("{\"status\": ")
    elif kind == "other-format-version":
        data = json.loads((out / "summary.json").read_text())
        (out / "summary.json").write_text(json.dumps({**data, "format_version": 99}))
    elif kind == "checkpoint-garbage":
        ck.write_bytes(os.urandom(3000))
    elif kind == "checkpoint-truncated":
        ck.write_bytes(ck.read_bytes()[: ck.stat().st_size // 2])
    elif kind == "checkpoint-other-format":
        torch.save(checkpoint.seal({**_raw(ck), "format": 99}), ck)
    elif kind == "checkpoint-older-format":  # asyncfl ≤ 0.1's reflective checkpoints
        torch.save(checkpoint.seal({**_raw(ck), "format": 1}), ck)
    elif kind == "checkpoint-missing-keys":
        raw = _raw(ck)
        del raw["state"]
        torch.save(checkpoint.seal(raw), ck)  # a well-formed checkpoint (its digest recomputed) that does not fit
    elif kind == "checkpoint-wrong-shape":  # θ of another model
        raw = _raw(ck)
        raw["state"]["fields"]["theta"] = torch.zeros(raw["state"]["fields"]["theta"].numel() + 1)
        torch.save(checkpoint.seal(raw), ck)  # a well-formed checkpoint (its digest recomputed) that does not fit
    elif kind == "checkpoint-wrong-dtype":
        raw = _raw(ck)
        theta = raw["state"]["fields"]["theta"]
        raw["state"]["fields"]["theta"] = theta.float() if theta.dtype == torch.float64 else theta.double()
        torch.save(checkpoint.seal(raw), ck)  # a well-formed checkpoint (its digest recomputed) that does not fit
    elif kind == "checkpoint-wrong-count":
        raw = _raw(ck)
        raw["state"]["fields"]["counters"]["fields"]["accepted"] += 1
        torch.save(checkpoint.seal(raw), ck)  # a well-formed checkpoint (its digest recomputed) that does not fit
    elif kind == "checkpoint-negative-rows":
        raw = _raw(ck)
        raw["run_dir"]["csv_rows"]["updates.csv"] = -5
        torch.save(checkpoint.seal(raw), ck)  # a well-formed checkpoint (its digest recomputed) that does not fit
    elif kind == "checkpoint-renamed-field":  # a state type whose fields changed since
        raw = _raw(ck)
        fields = raw["state"]["fields"]
        fields["model"] = fields.pop("theta")
        torch.save(checkpoint.seal(raw), ck)  # a well-formed checkpoint (its digest recomputed) that does not fit
    elif kind == "updates-row-edited":  # a damaged row before the checkpoint's cut
        lines = (out / "updates.csv").read_text().splitlines(keepends=True)
        lines[3] = "x,y,z\n"
        (out / "updates.csv").write_text("".join(lines))
    elif kind == "checkpoint-pickle-payload":
        torch.save({"format": 1, "x": _Evil()}, ck)
    elif kind == "updates-cut":
        lines = (out / "updates.csv").read_text().splitlines(keepends=True)
        (out / "updates.csv").write_text("".join(lines[:3]))
    elif kind == "metrics-missing":
        (out / "metrics.csv").unlink()
    elif kind == "metrics-other-header":
        text = (out / "metrics.csv").read_text()
        (out / "metrics.csv").write_text(text.replace("step,", "stp,", 1))
    elif kind == "diverged":
        data = json.loads((out / "summary.json").read_text())
        (out / "summary.json").write_text(json.dumps({**data, "status": "diverged"}))
    else:
        raise AssertionError(kind)
    return str(out)


def _raw(ck: Path) -> dict:
    return torch.load(ck, weights_only=True)


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch /tmp/asyncfl-pwned",))


HOSTILE_DIRS = [
    ("no-dir", "no such run directory"), ("empty-dir", "no scenario.toml"),
    ("garbage-scenario", "not valid TOML"), ("invalid-scenario", "did you mean 'buffer'"),
    ("edited-scenario", "another scenario"), ("summary-not-json", "not valid JSON"),
    ("other-format-version", "format_version 99"), ("checkpoint-garbage", "not a readable checkpoint"),
    ("checkpoint-truncated", "not a readable checkpoint"), ("checkpoint-other-format", "checkpoint format 99"),
    ("checkpoint-missing-keys", "missing state"), ("checkpoint-pickle-payload", "not a readable checkpoint"),
    ("checkpoint-older-format", "checkpoint format 1"), ("checkpoint-wrong-shape", "state.theta"),
    ("checkpoint-wrong-dtype", "state.theta: torch.float"), ("checkpoint-wrong-count", "state.counters.accepted"),
    ("checkpoint-negative-rows", "csv_rows['updates.csv'] = -5"), ("checkpoint-renamed-field", "SimState has fields"),
    ("updates-row-edited", "not the ones the checkpoint saw"),
    ("updates-cut", "complete rows"), ("metrics-missing", "missing"), ("metrics-other-header", "header"),
    ("diverged", "diverged"),
]


@pytest.mark.parametrize("kind,phrase", HOSTILE_DIRS, ids=[k for k, _ in HOSTILE_DIRS])
def test_resume_refuses_damaged_run_directories_and_touches_nothing(kind, phrase, stopped_run, capsys):
    target = _corrupt(kind, stopped_run)
    before = _snapshot(stopped_run)
    assert main(["resume", target, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert phrase in err and "Traceback" not in err, err
    assert len([line for line in err.splitlines() if line.startswith("error:")]) == 1
    assert _snapshot(stopped_run) == before
    assert not Path("/tmp/asyncfl-pwned").exists()


def test_resume_of_a_completed_run_changes_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    _run(make_scenario(), out)
    before = _snapshot(out)
    assert main(["resume", str(out), "--quiet"]) == 0
    assert "already completed" in capsys.readouterr().err
    assert _snapshot(out) == before


def test_resume_without_checkpoint_restarts_from_scratch(tmp_path):
    scenario = make_scenario({"run.checkpoint_every": 0})
    ref, out = tmp_path / "ref", tmp_path / "run"
    _run(scenario, ref)

    def crash(event):
        if event.step == 5:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(run_to_dir(scenario, out, on_event=crash))
    assert not (out / "checkpoint.pt").exists()
    assert main(["resume", str(out), "--quiet"]) == 0
    assert_same_run(ref, out)


KEYS = {
    "population": ["clients", "speed_sigma", "availability", "period", "online_fraction"],
    "latency": ["dist", "mean", "value", "median", "sigma", "low", "high", "file"],
    "task": ["name", "problem", "dim", "samples_per_client", "noise", "alpha", "model", "hidden"],
    "client": ["solver", "lr", "batch_size", "local_steps", "epochs", "mu"],
    "server": ["protocol", "concurrency", "buffer", "cohort", "max_staleness", "rule", "lr", "beta", "algorithm", "alpha"],
    "run": ["steps", "eval_every", "executor", "workers", "checkpoint_every", "max_update_norm", "divergence_loss"],
    "privacy": ["enabled", "clip", "epsilon", "noise_multiplier", "xi", "gamma", "accountant"],
    "bogus": ["x"],
}
scalars = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.sampled_from(["", "sgd", "sync", "momentum", "ma-full", "exponential", "quadratic", "nan", "ﬁ\x00"]),
    st.text(max_size=8),
)
values = st.one_of(scalars, st.lists(scalars, max_size=3), st.dictionaries(st.text(max_size=4), scalars, max_size=2))
dotted = st.sampled_from(sorted(KEYS)).flatmap(lambda s: st.sampled_from(KEYS[s] + ["nope"]).map(lambda k: f"{s}.{k}"))
override_texts = st.one_of(
    st.tuples(dotted, scalars).map(lambda kv: f"{kv[0]}={_toml_value(kv[1])}"),
    st.text(max_size=20),
    dotted.map(lambda k: f"{k}="),
)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    if isinstance(v, (int, float)):
        return repr(v)
    return json.dumps(v)


@st.composite
def scenario_texts(draw) -> str:
    kind = draw(st.sampled_from(["toml", "toml", "toml", "garbage", "empty-tables"]))
    if kind == "garbage":
        return draw(st.text(max_size=60))
    if kind == "empty-tables":
        return "".join(f"[{s}]\n" for s in draw(st.lists(st.sampled_from(sorted(KEYS)), max_size=4, unique=True)))
    raw = make_raw()
    for _ in range(draw(st.integers(0, 4))):
        key = draw(dotted).split(".")
        node = raw.setdefault(key[0], {}) if isinstance(raw.get(key[0], {}), dict) else raw
        node[key[1]] = draw(values)
    if draw(st.booleans()):
        raw[draw(st.sampled_from(["name", "seed", "server", "colour"]))] = draw(scalars)
    try:
        return tomli_w.dumps(raw)
    except Exception:  # tomli_w refuses NaN-free encodings of some values: write something else
        return json.dumps(raw, default=str)


@contextlib.contextmanager
def _captured():
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        yield err


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("ASYNCFL_FUZZ_EXAMPLES", 150)), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(text=scenario_texts(), sets=st.lists(override_texts, max_size=3))
def test_fuzz_validate_exits_0_or_2_without_traceback(text, sets, tmp_path):
    path = tmp_path / "fuzz.toml"
    path.write_bytes(text.encode("utf-8", "replace"))
    argv = ["validate", str(path)]
    for s in sets:
        argv += ["--set", s]
    with _captured() as err:
        code = main(argv)
    assert code in (0, 2), err.getvalue()
    assert "Traceback" not in err.getvalue()
    if code == 2:
        assert err.getvalue().startswith("error:")


RUN_SETS = st.lists(st.tuples(
    st.sampled_from(["server.rule", "server.buffer", "server.lr", "server.max_staleness", "client.lr", "client.local_steps",
                     "run.max_update_norm", "run.divergence_loss", "latency.mean", "server.staleness_exponent", "run.eval_every"]),
    st.one_of(st.integers(-3, 12), st.floats(allow_nan=True), st.sampled_from(["'sgd'", "'ma-full'", "'adam'", "'x'", "1e400"])),
).map(lambda kv: f"{kv[0]}={kv[1] if isinstance(kv[1], str) else _toml_value(kv[1])}"), max_size=3)


@pytest.mark.slow
@settings(max_examples=int(os.environ.get("ASYNCFL_FUZZ_RUN_EXAMPLES", 12)), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(sets=RUN_SETS)
def test_fuzz_run_exits_0_2_or_3_without_traceback(sets, tmp_path_factory):
    root = tmp_path_factory.mktemp("fz")
    path = root / "s.toml"
    path.write_text(tomli_w.dumps(make_raw(**{"run.steps": 3, "run.eval_every": 1})))
    argv = ["run", str(path), "--out", str(root / "out"), "--quiet"]
    for s in sets:
        argv += ["--set", s]
    with _captured() as err:
        code = main(argv)
    assert code in (0, 2, 3), err.getvalue()  # 3: the override made the model diverge
    assert "Traceback" not in err.getvalue()


@pytest.mark.slow
def test_subprocess_hostile_input_exits_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.toml"
    bad.write_bytes(b"\xff\xfe[server\x00")
    for args in (["run", str(bad), "--set", "run.steps=1e999"],):  # resume: in-process above (torch import is slow)
        proc = _cli(*args)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 2, (args, err)
        assert "Traceback" not in err and err.startswith("error:"), err


# ---------------------------------------------------------------------------------------------
# 4. numerical faults
class FaultyExecutor(InlineExecutor):
    """Test fault injection: jobs chosen by their seed return a NaN, an Inf or a huge model.
    Chosen by seed, so a resumed run injects the same faults."""

    def __init__(self, task, client, every: int = 4) -> None:
        super().__init__(task, client, solver_of(client))
        self.every = every
        self.kinds = ("nan", "inf", "huge")

    def kind(self, job) -> str | None:
        r = job.seed % (self.every * 4)
        return self.kinds[r] if r < len(self.kinds) else None

    async def _run(self, job):
        local = await super()._run(job)
        kind = self.kind(job)
        if kind == "nan":
            local = local.clone()
            local[0] = math.nan
        elif kind == "inf":
            local = local.clone()
            local[-1] = -math.inf
        elif kind == "huge":
            local = local + 1e6
        return local


def test_injected_faults_are_rejected_counted_and_never_reach_the_model(tmp_path):
    scenario = make_scenario({"run.max_update_norm": 1e3, "run.steps": 20, "run.checkpoint_every": 4})
    task = build_task(scenario.task, scenario.population.clients, scenario.seed)

    def faulty() -> dict[str, Any]:
        return {"task": task, "executor": FaultyExecutor(task, scenario.client, every=1)}

    sim = build_simulation(scenario, **faulty())
    applied: list[torch.Tensor] = []
    inner = sim.algorithm.server_update

    def spy(theta, step, updates, state, rng):
        for u in updates:
            assert torch.isfinite(u.message).all() and float(u.message.norm()) <= 1e3
            applied.append(u.message)
        return inner(theta, step, updates, state, rng)

    sim.algorithm.server_update = spy
    summary = asyncio.run(run_to_dir(scenario, tmp_path / "run", simulation=sim))
    rows = read_csv(tmp_path / "run" / "updates.csv")
    reasons = [r["reason"] for r in rows]
    disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "completed" and torch.isfinite(sim.theta).all()
    assert disk["updates_rejected_nonfinite"] == reasons.count("non-finite") > 0
    assert disk["updates_rejected_norm"] == reasons.count("norm") > 0
    assert all(r["accepted"] == "false" for r in rows if r["reason"] in ("non-finite", "norm"))
    assert disk["updates_accepted"] == len(applied) == 20 * 3
    # the same faults, stopped mid-buffer and resumed, give the same run
    out = tmp_path / "stopped"
    assert _run(scenario, out, stop_at=30, simulation=build_simulation(scenario, **faulty()))
    assert not _resume(out, overrides=faulty())
    assert_same_run(tmp_path / "run", out)


def test_divergence_stops_with_the_step_after_a_final_checkpoint(tmp_path, capsys):
    raw = make_raw(**{"server.lr": 1e4, "server.rule": "sgd", "run.divergence_loss": 1e6, "run.eval_every": 1, "run.steps": 30})
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(raw))
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 3
    err = capsys.readouterr().err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "diverged" and "Traceback" not in err
    step = summary["steps"]
    assert 0 < step < 30 and f"server step {step}" in err and f"server step {step}" in summary["error"]
    assert checkpoint.read(out / "checkpoint.pt").step == step
    assert _metrics(out)[-1]["step"] == str(step)
    assert main(["resume", str(out)]) == 2 and "diverged" in capsys.readouterr().err


def test_numerical_fault_from_the_engine_names_the_step():
    scenario = make_scenario({"server.lr": 1e4, "server.rule": "sgd", "run.divergence_loss": 1e6, "run.eval_every": 1})
    sim = build_simulation(scenario)
    with pytest.raises(NumericalFault, match=r"diverged at server step \d+"):
        asyncio.run(sim.run())


def test_a_run_whose_every_update_is_rejected_stops_instead_of_spinning(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(tomli_w.dumps(make_raw(**{"run.max_update_norm": 1e-9, "run.steps": 3})))
    out = tmp_path / "run"
    assert main(["run", str(path), "--out", str(out), "--quiet"]) == 3
    err = capsys.readouterr().err
    assert "no progress at server step 1" in err and "Traceback" not in err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["updates_rejected_norm"] >= 1000
    assert summary["updates_accepted"] == 0 and (out / "checkpoint.pt").exists()


def test_a_stalled_simulation_is_a_clear_error_not_a_traceback(tmp_path):
    from asyncfl.clients.fleet import Fleet
    from asyncfl.compose import compose
    from asyncfl.sim.engine import Simulation
    from asyncfl.errors import AsyncFLError, SimulationStalled

    class NobodyOnline(Fleet):
        def available(self, client, now):
            return False

    scenario = make_scenario()
    parts = compose(scenario)
    parts.fleet = NobodyOnline(scenario.population, parts.streams, draw=parts.fleet._draw)  # a part replaced by hand
    sim = Simulation(parts)
    with pytest.raises(SimulationStalled, match="stalled at virtual time 0") as info:
        asyncio.run(run_to_dir(scenario, tmp_path / "run", simulation=sim))
    assert isinstance(info.value, AsyncFLError)  # the CLI reports it with exit code 2
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "stalled"


# ---------------------------------------------------------------------------------------------
# a kill between the divergence checkpoint and the "diverged" summary
def test_a_run_killed_after_its_divergence_checkpoint_resumes_to_the_same_diverged_directory(tmp_path):
    """A diverging run writes a final checkpoint, then its ``diverged`` summary. A driver killed
    between the two leaves a ``running`` summary and that checkpoint. Resuming it must not run
    on past the fault (it would diverge again, later, with other rows: found by the sweep's
    SIGKILL test under load); the checkpoint carries the fault, and the resume only finalizes.
    Every file then equals the uninterrupted run's (wall times aside)."""
    raw = make_raw(**{"run.steps": 150, "run.eval_every": 10, "run.checkpoint_every": 10, "task.dim": 30,
                      "task.samples_per_client": 200, "server.rule": "ma-light"})
    scenario = scenario_mod.validate(raw)
    ref = tmp_path / "ref"
    assert run_job(RunJob("ref", scenario, ref)).status == "diverged"
    assert checkpoint.read(ref / "checkpoint.pt").fault == json.loads((ref / "summary.json").read_text())["error"]
    killed = tmp_path / "killed"
    shutil.copytree(ref, killed)
    summary = json.loads((killed / "summary.json").read_text())
    (killed / "summary.json").write_text(json.dumps({**summary, "status": "running"}))
    outcome = run_job(RunJob("killed", scenario, killed))
    assert outcome.status == "diverged"
    for name in ("updates.csv", "metrics.csv", "counts.npz", "bias.json", "checkpoint.pt"):
        assert (killed / name).read_bytes() == (ref / name).read_bytes(), name
    a, b = (torch.load(p / "model.pt", weights_only=True) for p in (ref, killed))
    assert all(torch.equal(a[k], b[k]) for k in a)
    strip = lambda p: {k: v for k, v in json.loads((p / "summary.json").read_text()).items()  # noqa: E731
                       if k not in ("wall_time", "updates_per_second")}
    assert strip(killed) == strip(ref)


@pytest.mark.slow
@pytest.mark.parametrize("noise", ["banded", "blt"])
def test_resume_with_correlated_noise_and_a_min_separation(noise, tmp_path):
    """The correlated noise's buffers are declared state (docs/privacy.md §12): a run whose every
    step's noise depends on the earlier steps' noise, resumed anywhere, is the uninterrupted run
    byte for byte — and its clients keep the schema k = 3, b = 2 across the resume."""
    overrides = {"privacy.enabled": True, "privacy.epsilon": 4.0, "privacy.xi": 50.0,
                 "privacy.sampling": "participation-cap", "privacy.max_participations": 3, "privacy.min_separation": 2,
                 "privacy.noise": noise, "run.steps": 15, "population.clients": 24}
    if noise == "banded":
        overrides["privacy.noise_bands"] = 2
    _resume_check(overrides, tmp_path, stops=(0.3, 0.8))
    summary = json.loads((tmp_path / "ref" / "summary.json").read_text())["privacy"]
    assert summary["noise"] == noise and summary["min_separation"] == 2 and summary["strategy_sensitivity"] > 1.0


def test_an_arrival_fires_at_its_exact_time_in_creation_order_and_not_once_interrupted():
    """An :class:`Arrival` is its own entry on simpy's queue: it fires at exactly ``end`` (no
    ``now + (end − now)`` rounding), ties in creation order among timeouts and arrivals alike;
    an interrupted one does not fire, an infinite one is never queued, a past one is refused."""
    from asyncfl.sim.clock import Arrival

    env = simpy.Environment(initial_time=0.20072653859351497)
    when = 1.3840503320687418  # now + (when − now) == 1.3840503320687416: one ulp early
    fired = []
    Arrival(env, when, lambda tag: fired.append((tag, env.now)), "a")
    timeout_at(env, when).callbacks.append(lambda _e: fired.append(("t", env.now)))
    Arrival(env, 0.5, lambda tag: fired.append((tag, env.now)), "c")
    cancelled = Arrival(env, 0.7, lambda tag: fired.append((tag, env.now)), "x")
    Arrival(env, when, lambda tag: fired.append((tag, env.now)), "d")
    Arrival(env, math.inf, lambda tag: fired.append((tag, env.now)), "never")
    cancelled.interrupt()
    assert len(env._queue) == 5
    env.run()
    assert fired == [("c", 0.5), ("a", when), ("t", when), ("d", when)]
    with pytest.raises(ValueError, match="before now"):
        Arrival(env, 1.0, lambda tag: None)
