"""Hostile and newcomer inputs (issue 14): one regression test per defect found, through the
command line where the defect is about the command line.

Every CLI case asserts the exit code, that no traceback is printed, and — where files should
survive — that they are unchanged (SHA-256 of every file, hidden ones included). The last test
fuzzes a stopped run directory (truncations, flipped bits, edited rows) before ``asyncfl
resume`` and asserts: exit 0 and the same result as a run never interrupted, or exit 2 and every
file unchanged.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import tomllib
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tomli_w
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from analysis.ma_review.__main__ import main as study_main
from analysis.privacy_sweep.__main__ import main as privacy_main
from asyncfl.cli.main import main
from asyncfl.clients import fedscale
from asyncfl.config import memory, scenario as sc
from asyncfl.config.files import resolve_path
from asyncfl.config.tasks import DigitsTask, GaussianMLPTask, MNIST1DTask, QuadraticTask, SyntheticTask
from asyncfl.errors import RunInterrupted, TraceError
from asyncfl.run import checkpoint, rundir
from asyncfl.run.runner import run_to_dir
from asyncfl.compose import build_simulation
from asyncfl.tasks import build_task

from conftest import make_raw, make_scenario
from test_reliability import assert_same_run

REPO = Path(__file__).resolve().parents[1]
STABLE = {"server.rule": "sgd", "server.lr": 0.5}  # the tiny scenario's momentum diverges after ~90 steps


# ---------------------------------------------------------------------------------------------
# helpers
#: the study scripts built on the library (``python -m analysis.…``), by the word that names them in these tests
SCRIPTS = {"study": study_main, "privacy": privacy_main}


def cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str, str]:
    """``asyncfl ARGS``, or ``python -m analysis.ma_review`` / ``analysis.privacy_sweep`` for
    ``study`` / ``privacy`` ARGS, in this process: (exit code, stdout, stderr); never a traceback."""
    argv = [str(a) for a in args]
    code = SCRIPTS[argv[0]](argv[1:]) if argv and argv[0] in SCRIPTS else main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, err
    return code, out, err


def subprocess_cli(*args: str, cwd: Path = REPO, **kw: Any) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "asyncfl.cli", *map(str, args)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def snapshot(path: Path) -> dict[str, str]:
    """SHA-256 of every file under ``path`` (hidden ones and subfolders included)."""
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file() and not p.is_symlink()}


def scenario_file(tmp_path: Path, file: str = "s.toml", **overrides: Any) -> Path:
    path = tmp_path / file
    path.write_text(tomli_w.dumps(make_raw(**overrides)))
    return path


def stop_run(scenario: sc.Scenario, out: Path, stop_at: int) -> None:
    """Run ``scenario`` into ``out`` and stop it before its ``stop_at``-th event, as SIGINT does."""
    calls = [0]

    def should_stop() -> bool:
        calls[0] += 1
        return calls[0] >= stop_at

    with pytest.raises(RunInterrupted):
        asyncio.run(run_to_dir(scenario, out, should_stop=should_stop))


@pytest.fixture(scope="module")
def stopped(tmp_path_factory) -> tuple[Path, Path]:
    """A run stopped after a few steps with a checkpoint, and the same run never interrupted."""
    root = tmp_path_factory.mktemp("stopped")
    scenario = make_scenario({"run.steps": 30, "run.checkpoint_every": 3})  # 96 events
    asyncio.run(run_to_dir(scenario, root / "ref"))
    stop_run(scenario, root / "run", 50)
    assert checkpoint.read(root / "run" / "checkpoint.pt").step > 0
    return root / "run", root / "ref"


@pytest.fixture
def run_dir(stopped, tmp_path) -> Path:
    """A fresh copy of the stopped run directory."""
    out = tmp_path / "run"
    shutil.copytree(stopped[0], out)
    return out


# ---------------------------------------------------------------------------------------------
# 1. a run directory is locked while a run or resume writes it
def test_1_a_locked_run_directory_is_refused_naming_the_holder(run_dir, capsys):
    before = snapshot(run_dir)
    with rundir.RunLock.acquire(run_dir):  # as another process's run would hold it
        for args in (["resume", run_dir, "--quiet"], ["run", run_dir / "scenario.toml", "--out", run_dir, "--overwrite", "--quiet"],
                     ["run", run_dir / "scenario.toml", "--out", run_dir, "--quiet"]):
            code, _, err = cli(capsys, *args)
            assert code == 2 and f"in use by process {os.getpid()}" in err, err
        assert (run_dir / rundir.LOCK_NAME).read_text().strip() == str(os.getpid())
    assert snapshot(run_dir) == before  # the lock file is gone again, nothing else changed
    assert cli(capsys, "resume", run_dir, "--quiet")[0] == 0


def test_1_a_run_holds_the_lock_for_its_whole_life(tmp_path):
    out, refused = tmp_path / "run", []

    def try_to_enter(event) -> None:
        with pytest.raises(rundir.RunDirError, match=f"in use by process {os.getpid()}"):
            rundir.RunLock.acquire(out)
        refused.append(event.step)

    asyncio.run(run_to_dir(make_scenario(), out, on_event=try_to_enter))
    assert refused == list(range(1, 13)) and not (out / rundir.LOCK_NAME).exists()


@pytest.mark.slow
def test_1_another_process_holding_the_lock_is_named_and_its_death_releases_it(run_dir, stopped, capsys):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from asyncfl.run.rundir import RunLock; "
         f"RunLock.acquire({str(run_dir)!r}); print('locked', flush=True); time.sleep(600)"],
        env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "locked"
    before = snapshot(run_dir)
    for args in (["resume", run_dir, "--quiet"], ["run", run_dir / "scenario.toml", "--out", run_dir, "--overwrite", "--quiet"]):
        proc = subprocess_cli(*args)
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 2 and f"in use by process {holder.pid}" in err and "Traceback" not in err, err
    assert snapshot(run_dir) == before
    holder.send_signal(signal.SIGKILL)  # the lock dies with its holder, SIGKILL included
    holder.communicate(timeout=60)
    assert (run_dir / rundir.LOCK_NAME).exists()  # a stale lock file, taken over
    assert cli(capsys, "resume", run_dir, "--quiet")[0] == 0
    assert_same_run(stopped[1], run_dir)
    assert not (run_dir / rundir.LOCK_NAME).exists()


# ---------------------------------------------------------------------------------------------
# 2. --overwrite removes only what a run directory holds
def test_2_overwrite_refuses_a_directory_holding_anything_else(stopped, tmp_path, capsys):
    path = scenario_file(tmp_path)
    for extra in ("notes.txt", "sub"):
        out = tmp_path / f"with-{extra}"
        shutil.copytree(stopped[0], out)
        (out / "sub").mkdir() if extra == "sub" else (out / extra).write_text("keep me")
        before = snapshot(out)
        code, _, err = cli(capsys, "run", path, "--out", out, "--overwrite", "--quiet")
        assert code == 2 and f"holds '{extra}'; nothing was removed" in err, err
        assert snapshot(out) == before and (out / extra).exists()
    home = tmp_path / "home"  # `--out ~ --overwrite` on a home directory with a dotfile
    home.mkdir()
    (home / ".bashrc").write_text("export X=1")
    assert cli(capsys, "run", path, "--out", home, "--overwrite", "--quiet")[0] == 2
    assert (home / ".bashrc").read_text() == "export X=1"
    out = tmp_path / "only-run-files"  # a run directory (with a stale temporary) is overwritten
    shutil.copytree(stopped[0], out)
    (out / ".model.pt.abcd1234").write_bytes(b"partial")
    assert cli(capsys, "run", path, "--out", out, "--overwrite", "--quiet")[0] == 0
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["scenario.toml", "components.json", "updates.csv", "metrics.csv", "counts.npz", "summary.json", "model.pt",
         "bias.json", "metrics.png"])


# ---------------------------------------------------------------------------------------------
# 3. a corrupted row before the checkpoint's cut
def test_3_a_damaged_row_before_the_cut_is_refused_touching_nothing(run_dir, capsys):
    lines = (run_dir / "updates.csv").read_text().splitlines(keepends=True)
    assert checkpoint.read(run_dir / "checkpoint.pt").csv_rows["updates.csv"] > 3
    lines[3] = "x,y,z\n"
    (run_dir / "updates.csv").write_text("".join(lines))
    before = snapshot(run_dir)
    code, _, err = cli(capsys, "resume", run_dir, "--quiet")
    assert code == 2 and "updates.csv: its first" in err and "not the ones the checkpoint saw" in err, err
    assert snapshot(run_dir) == before


# ---------------------------------------------------------------------------------------------
# 4. a checkpoint that does not fit the scenario is refused before anything is touched
def _reseal(ck: Path, edit) -> None:
    raw = torch.load(ck, weights_only=True)
    edit(raw)
    torch.save(checkpoint.seal(raw), ck)


@pytest.mark.parametrize("edit,phrase", [
    (lambda raw: raw["state"]["fields"].__setitem__("theta", torch.zeros(7, dtype=torch.float64)), "state.theta"),
    (lambda raw: raw["run_dir"]["csv_rows"].__setitem__("metrics.csv", -1), "csv_rows['metrics.csv'] = -1"),
    (lambda raw: raw["run_dir"]["csv_rows"].__setitem__("updates.csv", 10**9), "csv_rows['updates.csv'] = 1000000000"),
    (lambda raw: raw["state"]["fields"]["fleet"]["fields"].__setitem__("busy", {"__t": "ndarray", "dtype": "|b1", "shape": [3], "data": torch.zeros(3, dtype=torch.uint8)}), "state.fleet.busy"),
], ids=["theta-shape", "negative-metrics-rows", "too-many-rows", "fleet-size"])
def test_4_a_checkpoint_that_does_not_fit_changes_no_file(edit, phrase, run_dir, capsys):
    _reseal(run_dir / "checkpoint.pt", edit)
    before = snapshot(run_dir)
    code, _, err = cli(capsys, "resume", run_dir, "--quiet")
    assert code == 2 and phrase in err and "nothing was changed" in err, err
    assert snapshot(run_dir) == before


def test_4_a_checkpoint_with_a_flipped_bit_in_a_tensor_is_refused(run_dir, capsys):
    raw = torch.load(run_dir / "checkpoint.pt", weights_only=True)
    raw["state"]["fields"]["theta"][0] += 1e-9  # what a flipped bit in its storage does; the digest is the old one
    torch.save(raw, run_dir / "checkpoint.pt")
    before = snapshot(run_dir)
    code, _, err = cli(capsys, "resume", run_dir, "--quiet")
    assert code == 2 and "does not match the SHA-256" in err, err
    assert snapshot(run_dir) == before


def test_4_the_content_digest_matches_an_independent_walk():
    """``content_digest`` against a hand-written hash of the same walk for a small tree."""
    t = torch.tensor([1.5, -2.0], dtype=torch.float64)
    tree = {"b": [t, 3, True], "a": "x", "c": (None, 0.25)}
    part = hashlib.sha256(b"torch.float64(2,)" + t.numpy().tobytes()).digest()
    want = hashlib.sha256(
        b"D3|" + b"S1|a" + b"S1|x" + b"S1|b" + b"L3|" + b"T" + part + b"I3|" + b"B1"
        + b"S1|c" + b"U2|" + b"N" + b"F" + (0.25).hex().encode() + b"|"
    ).hexdigest()
    assert checkpoint.content_digest(tree) == want
    assert checkpoint.content_digest({**tree, "a": "y"}) != want


# ---------------------------------------------------------------------------------------------
# 5. a full disk: exit 2 with the system's message, the previous checkpoint intact
def _can_mount() -> bool:
    return sys.platform.startswith("linux") and os.geteuid() == 0 and shutil.which("mount") is not None


@pytest.mark.slow
@pytest.mark.skipif(not _can_mount(), reason="needs root to mount a small tmpfs")
def test_5_a_full_disk_stops_with_the_system_message_and_a_loadable_checkpoint(tmp_path, capsys):
    path = scenario_file(tmp_path, **{**STABLE, "run.steps": 400, "run.checkpoint_every": 5, "task.dim": 50})
    ref = tmp_path / "ref"
    assert cli(capsys, "run", path, "--out", ref, "--quiet")[0] == 0
    mnt = tmp_path / "M"
    mnt.mkdir()
    # the run's files end at ~190 kB (checkpoints of sparse staleness counts: ~40 kB): 120 kB fills mid-run
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=120k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("mount -t tmpfs failed (no privilege in this container)")
    try:
        out = mnt / "q"
        proc = subprocess_cli("run", path, "--out", out, "--quiet")
        _, err = proc.communicate(timeout=300)
        assert proc.returncode == 2 and "No space left on device" in err and "Traceback" not in err, err
        assert err.count("error:") == 1 and "is intact" in err
        step = checkpoint.read(out / "checkpoint.pt").step  # the previous checkpoint loads
        assert 0 < step < 400 and f"server step {step} " in err
        assert not [p for p in out.iterdir() if rundir.is_temporary(p.name)]
        subprocess.run(["mount", "-o", "remount,size=8m", str(mnt)], check=True)
        assert cli(capsys, "resume", out, "--quiet")[0] == 0  # after making room: the same run
        assert_same_run(ref, out)
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


@pytest.mark.slow
def test_5_a_write_that_fails_is_exit_2_and_the_run_can_be_resumed(tmp_path, capsys):
    """The same without privileges: a file-size limit (RLIMIT_FSIZE; Python ignores SIGXFSZ) makes
    ``updates.csv`` fail to grow mid-run (EFBIG)."""
    resource = pytest.importorskip("resource")
    path = scenario_file(tmp_path, **{**STABLE, "run.steps": 600, "run.checkpoint_every": 5})
    ref = tmp_path / "ref"
    assert cli(capsys, "run", path, "--out", ref, "--quiet")[0] == 0
    limit = (ref / "checkpoint.pt").stat().st_size // 2  # the checkpoint grows with the records: one fails mid-run
    out = tmp_path / "run"
    proc = subprocess_cli("run", path, "--out", out, "--quiet",
                          preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)))
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "cannot write" in err and "File too large" in err and "Traceback" not in err, err
    kept = snapshot(out)
    step = checkpoint.read(out / "checkpoint.pt").step  # the previous checkpoint is intact
    assert 0 < step < 600 and f"its last checkpoint of server step {step} " in err, err
    assert cli(capsys, "resume", out, "--quiet")[0] == 0
    assert_same_run(ref, out)
    assert kept["scenario.toml"] == snapshot(out)["scenario.toml"]


# ---------------------------------------------------------------------------------------------
# 6. workers of a `processes` run exit when their parent dies
def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(x) for x in text.split()]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _wait_gone(pids: list[int], seconds: float) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if _alive(p)]


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_6_killing_the_parent_of_a_processes_run_ends_its_workers(tmp_path):
    path = scenario_file(tmp_path, **{"run.steps": 10**6, "run.eval_every": 10**5, "run.executor": "processes", "run.workers": 2})
    proc = subprocess_cli("run", path, "--out", tmp_path / "run", "--quiet", start_new_session=True)
    deadline, workers = time.monotonic() + 120, []
    while time.monotonic() < deadline and proc.poll() is None:
        workers = [c for c in _children(proc.pid) if "spawn_main" in Path(f"/proc/{c}/cmdline").read_text(errors="replace")]
        if len(workers) == 2 and (tmp_path / "run" / "updates.csv").exists() and (tmp_path / "run" / "updates.csv").stat().st_size > 200:
            break
        time.sleep(0.1)
    assert len(workers) == 2, "the workers did not start"
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert _wait_gone(workers, 15) == []


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/task").is_dir(), reason="reads /proc")
def test_6_workers_started_off_the_main_thread_notice_the_parent_is_gone(tmp_path):
    """No PR_SET_PDEATHSIG here (it follows the starting thread): the idle poll of os.getppid()."""
    script = f"""
import asyncio, os, sys, threading, time
sys.path.insert(0, {str(REPO / 'tests')!r})
from conftest import make_scenario
from asyncfl.compose import solver_of
from asyncfl.compute.executors import ProcessExecutor, TaskRecipe
from asyncfl.tasks import build_task
from asyncfl.config.registries import TASKS
from asyncfl.components.contracts import BuildContext
sc = make_scenario({{"run.workers": 1}})
task = build_task(sc.task, sc.population.clients, sc.seed)
box = []
def start():
    box.append(ProcessExecutor(task, sc.client, solver_of(sc.client), sc.run, TaskRecipe(TASKS.load(sc.task.name), sc.task, BuildContext(clients=sc.population.clients, seed=sc.seed))))
t = threading.Thread(target=start); t.start(); t.join()
print(*[p.pid for p in box[0]._procs], flush=True)
time.sleep(600)
"""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True, start_new_session=True)
    workers = [int(x) for x in proc.stdout.readline().split()]
    assert workers and all(_alive(w) for w in workers)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    assert _wait_gone(workers, 15) == []


# ---------------------------------------------------------------------------------------------
# 7. fedavg with client.mu > 0 is refused; fedprox is FedAvg with the proximal term, on both protocols
def test_7_fedavg_with_a_proximal_term_is_refused(tmp_path, capsys):
    sync = {"server.protocol": "sync", "server.concurrency": None, "server.cohort": 6, "server.buffer": 4, "server.max_staleness": None}
    for overrides in ({"client.mu": 0.5}, {**sync, "client.mu": 0.5}):
        path = scenario_file(tmp_path, **overrides)
        for command in ("validate", "run"):
            out = tmp_path / f"out-{command}"
            code, _, err = cli(capsys, command, path, *(["--out", out, "--quiet"] if command == "run" else []))
            assert code == 2 and "client.mu = 0.5: server.algorithm = 'fedavg' has no proximal term" in err, err
            assert "use server.algorithm = 'fedprox'" in err and not out.exists()
    # FedBuff + fedprox is what fedavg + μ used to run: the jobs carry μ, and the run differs from μ = 0
    prox = build_simulation(make_scenario({"server.algorithm": "fedprox", "client.mu": 0.5}))
    asyncio.run(prox.run())
    plain = build_simulation(make_scenario())
    asyncio.run(plain.run())
    assert prox.algorithm.mu == 0.5 and plain.algorithm.mu == 0.0
    assert not torch.equal(prox.theta, plain.theta)
    assert cli(capsys, "validate", scenario_file(tmp_path, **{**sync, "server.algorithm": "fedprox", "client.mu": 0.5}))[0] == 0


# ---------------------------------------------------------------------------------------------
# 8. the saved scenario.toml names its trace files so that it reruns from anywhere
@pytest.mark.slow
def test_8_trace_replay_from_a_relative_path_finishes_and_its_directory_reruns(tmp_path, monkeypatch, capsys):
    out = tmp_path / "replay"
    monkeypatch.chdir(REPO)
    assert cli(capsys, "run", "scenarios/trace_replay.toml", "--set", "run.steps=3", "--out", out, "--quiet")[0] == 0
    assert (out / "bias.json").is_file() and (out / "metrics.png").is_file()
    saved = sc.load(out / "scenario.toml")
    assert saved.latency.file == str(REPO / "scenarios" / "traces" / "heavy_tailed-updates.csv")
    monkeypatch.chdir(tmp_path)  # from elsewhere: resume, bias and a rerun of the saved scenario
    assert cli(capsys, "resume", out, "--quiet")[0] == 0
    assert cli(capsys, "bias", out)[0] == 0
    assert cli(capsys, "run", out / "scenario.toml", "--out", tmp_path / "again", "--quiet")[0] == 0
    assert (tmp_path / "again" / "updates.csv").read_bytes() == (out / "updates.csv").read_bytes()
    # --set paths are relative to the working directory, and saved absolute too
    code, text, _ = cli(capsys, "validate", REPO / "scenarios" / "trace_replay.toml", "--set", f'latency.file="{os.path.relpath(out, tmp_path)}"')
    assert code == 0 and f'file = "{out}"' in text


# ---------------------------------------------------------------------------------------------
# 9. divergence relative to the run's own start
# the same bound tripped from the server's side (server.lr): whole suite
@pytest.mark.parametrize("key", ["client.lr", pytest.param("server.lr", marks=pytest.mark.slow)])
def test_9_a_loss_far_above_the_initial_one_is_divergence(key, tmp_path, capsys):
    path = REPO / "scenarios" / "quickstart.toml"
    out = tmp_path / "run"
    code, _, err = cli(capsys, "run", path, "--set", f"{key}=1e6", "--set", "run.steps=30", "--out", out, "--quiet")
    summary = json.loads((out / "summary.json").read_text())
    assert code == 3 and "run.divergence_factor = 100000 × the initial model's test loss" in err, err
    assert summary["status"] == "diverged" and "divergence_factor" in summary["error"]
    first = float(rundir.read_csv(out / "metrics.csv")[0]["loss"])
    assert summary["final"]["loss"] > 1e5 * first  # the bound that fired, checked on the files
    assert checkpoint.read(out / "checkpoint.pt").step == summary["steps"]


@pytest.mark.slow
def test_9_the_default_bounds_trip_on_no_committed_scenario(tmp_path, capsys):
    """The committed scenario whose loss grows most (FedBuff + momentum at the study's tuned lr:
    7150× its initial loss within 100 steps) completes under the default bounds."""
    path = REPO / "tests" / "data" / "growing_momentum_K5C.toml"
    code, _, err = cli(capsys, "run", path, "--out", tmp_path / "run", "--quiet")
    assert code == 0, err
    losses = [float(r["loss"]) for r in rundir.read_csv(tmp_path / "run" / "metrics.csv")]
    growth = max(losses) / losses[0]
    assert 1000 < growth < sc.RunConfig().divergence_factor / 10


@pytest.mark.slow
def test_9_each_bound_says_that_it_fired(tmp_path, capsys):
    base = {"server.lr": 1e4, "server.rule": "sgd", "run.eval_every": 1, "run.steps": 30}
    absolute = scenario_file(tmp_path, "a.toml", **{**base, "run.divergence_loss": 1e3, "run.divergence_factor": 1e12})
    code, _, err = cli(capsys, "run", absolute, "--out", tmp_path / "a", "--quiet")
    assert code == 3 and "is above run.divergence_loss = 1000" in err, err
    relative = scenario_file(tmp_path, "r.toml", **{**base, "run.divergence_loss": 1e12, "run.divergence_factor": 10.0})
    code, _, err = cli(capsys, "run", relative, "--out", tmp_path / "r", "--quiet")
    assert code == 3 and "is above run.divergence_factor = 10 × the initial model's test loss" in err, err
    assert cli(capsys, "validate", absolute, "--set", "run.divergence_factor=1")[0] == 2  # > 1


def test_9_the_initial_loss_after_a_resume_is_the_step_0_loss(stopped):
    """The reference of the relative bound is configuration: recomputed after a restore it is
    bit for bit the step-0 evaluation of the interrupted run."""
    run, _ = stopped
    ck = checkpoint.read(run / "checkpoint.pt")
    sim = build_simulation(sc.load(run / "scenario.toml"))
    sim.restore(ck.state)
    step0 = float(rundir.read_csv(run / "metrics.csv")[0]["loss"])
    assert sim.initial_loss == step0
    assert sim.initial_loss == sim.task.evaluate(sim.task.initial_theta)["loss"]


# ---------------------------------------------------------------------------------------------
# 10. README commands: tests/test_readme_commands.py runs them; the one that failed:
def test_10_the_readme_runs_no_concurrency_above_the_quickstart_population(capsys):
    text = (REPO / "README.md").read_text() + (REPO / "docs" / "guide.md").read_text()
    assert "--set server.concurrency=40" not in text
    quick = sc.load(REPO / "scenarios" / "quickstart.toml")
    for line in text.splitlines():
        if line.startswith("asyncfl run scenarios/quickstart.toml") and "concurrency=" in line:
            k = int(line.split("concurrency=")[1].split()[0])
            assert k <= quick.population.clients


# ---------------------------------------------------------------------------------------------
# 11. counts bounded by what can finish; input files read within bounds
@pytest.mark.parametrize("override,phrase", [
    ("client.local_steps=100000000000", "client.local_steps = 100000000000: must be less than or equal to 1000000"),
    ("client.epochs=100000000", "client.epochs"),
    ("server.max_staleness=1000000000000", "server.max_staleness"),
    ("run.eval_every=1000000000000", "run.eval_every"),
    ("run.checkpoint_every=1000000000000", "run.checkpoint_every"),
    ("server.buffer=1000000000", "server.buffer"),
])
def test_11_counts_that_cannot_finish_are_refused(override, phrase, tmp_path, capsys):
    code, _, err = cli(capsys, "validate", scenario_file(tmp_path), "--set", override)
    assert code == 2 and phrase in err, err


def test_11_the_work_of_a_whole_run_is_bounded(tmp_path, capsys):
    path = scenario_file(tmp_path)
    code, _, err = cli(capsys, "validate", path, "--set", "client.local_steps=1000000", "--set", "run.steps=100000000")
    assert code == 2 and "local gradient steps, more than the 1e+11 a run can finish" in err, err
    code, _, err = cli(capsys, "validate", path, "--set", "run.steps=1000000000", "--set", "server.buffer=30",
                       "--set", "server.concurrency=30", "--set", "client.local_steps=1")
    assert code == 2 and "uploads, more than the 1e+10 a run can finish" in err, err
    # epochs count batches of the task's mean client: 20 samples in batches of 10 = 2 steps an epoch
    epochs = {"client.local_steps": None, "client.epochs": 10**4}
    steps = sc.MAX_LOCAL_STEPS // (3 * 10**4 * 2)  # buffer 3
    sc.validate(make_raw(**epochs, **{"run.steps": steps}))
    with pytest.raises(sc.ScenarioError, match="client.epochs = 10000 \\(2 batches each\\) with run.steps = 1666667"):
        sc.validate(make_raw(**epochs, **{"run.steps": steps + 1}))


@pytest.mark.skipif(not Path("/dev/zero").exists(), reason="needs /dev/zero")
def test_11_devices_and_pipes_are_refused_not_read_forever(tmp_path, stopped, capsys):
    proc = subprocess_cli("validate", "/dev/zero")
    _, err = proc.communicate(timeout=60)  # read forever before
    assert proc.returncode == 2 and "not a regular file" in err and "Traceback" not in err, err
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    proc = subprocess_cli("validate", fifo)  # a FIFO blocks open() until a writer comes
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "not a regular file" in err, err
    big = tmp_path / "big.toml"
    with open(big, "wb") as fh:
        fh.truncate(2 << 20)
    code, _, err = cli(capsys, "validate", big)
    assert code == 2 and "larger than the 1.0 MiB read at most" in err, err
    spec = tmp_path / "spec.toml"
    spec.symlink_to("/dev/zero")
    code, _, err = cli(capsys, "study", spec, "--out", tmp_path / "study", "--check")
    assert code == 2 and "not a regular file" in err, err
    trace = scenario_file(tmp_path, "t.toml", **{"latency": {"dist": "trace", "file": "/dev/zero"}, "population.speed_sigma": 0.0})
    code, _, err = cli(capsys, "run", trace, "--out", tmp_path / "t", "--quiet")
    assert code == 2 and "not a regular file" in err, err
    for name, command in (("summary.json", "resume"), ("checkpoint.pt", "resume"), ("metrics.csv", "plot"), ("updates.csv", "resume"), ("counts.npz", "bias")):
        out = tmp_path / f"dev-{name}"
        shutil.copytree(stopped[0], out)
        (out / name).unlink()
        (out / name).symlink_to("/dev/zero")
        code, _, err = cli(capsys, command, out, *(["--quiet"] if command == "resume" else []))
        assert code == 2 and "not a regular file" in err, (name, err)


# ---------------------------------------------------------------------------------------------
# 12. a FedScale pickle's size is checked before it is read
def test_12_a_huge_fedscale_pickle_is_refused_before_it_is_read(tmp_path, capsys):
    big = tmp_path / "devices.pkl"
    with open(big, "wb") as fh:
        fh.truncate(600 << 20)  # sparse: no disk used
    tracemalloc.start()
    with pytest.raises(TraceError, match="larger than the 512.0 MiB read at most"):
        fedscale.load_devices(big)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 10 << 20  # nothing of the file was read into memory
    path = scenario_file(tmp_path, **{"latency": {"dist": "fedscale", "file": str(big)}, "population.speed_sigma": 0.0})
    code, _, err = cli(capsys, "run", path, "--out", tmp_path / "run", "--quiet")
    assert code == 2 and "FedScale device file" in err and "larger than" in err, err


# ---------------------------------------------------------------------------------------------
# 13. names and packaged paths stay inside their folders
def test_13_a_name_with_dots_and_slashes_stays_inside_runs(tmp_path, monkeypatch, capsys):
    (tmp_path / "work").mkdir()
    monkeypatch.chdir(tmp_path / "work")
    path = scenario_file(tmp_path, **{"name": "../../x", "run.steps": 2})
    assert cli(capsys, "run", path, "--quiet")[0] == 0
    made = list((tmp_path / "work" / "runs").iterdir())
    assert len(made) == 1 and made[0].name.startswith("_._.._x-") and (made[0] / "summary.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.toml", "work"]
    assert json.loads((made[0] / "summary.json").read_text())["name"] == "../../x"  # the name itself is kept
    code, _, err = cli(capsys, "validate", path, "--set", 'name="a\nerror: forged"')
    assert code == 2 and "control characters" in err


@pytest.mark.parametrize("key", ["latency.file", "population.availability_file"])
@pytest.mark.parametrize("value", ["asyncfl:../../../../etc/passwd", "asyncfl:../data/fedscale_sample_devices.pkl", "asyncfl:", "asyncfl:/etc/passwd"])
def test_13_the_package_prefix_cannot_leave_its_folder(key, value, tmp_path, capsys):
    fedscale_toml = REPO / "scenarios" / "fedscale.toml"
    code, _, err = cli(capsys, "run", fedscale_toml, "--set", f'{key}="{value}"', "--out", tmp_path / "run", "--quiet")
    assert code == 2 and f"{key} = '{value}'" in err and "must name a file shipped in asyncfl/data/" in err, err
    assert "root:" not in err and not (tmp_path / "run").exists()
    with pytest.raises(sc.ScenarioError):
        resolve_path(value)


def test_13_study_names_cannot_be_dot_dot(tmp_path, capsys):
    """A study's task name is a folder of its runs/ (runs/TASK/...): '..' would leave the study."""
    raw = tomllib.loads((REPO / "analysis" / "ma_review_ci.toml").read_text())
    for target in ("study", "task"):
        edited = json.loads(json.dumps(raw))
        if target == "study":
            edited["name"] = ".."
        else:
            edited["tasks"][0]["name"] = ".."
        path = tmp_path / f"{target}.toml"
        path.write_text(tomli_w.dumps(edited))
        code, _, err = cli(capsys, "study", path, "--out", tmp_path / "out", "--check")
        assert code == 2 and "name = '..'" in err, err


# ---------------------------------------------------------------------------------------------
# 14. trace errors never quote the file
SECRET = "root:$6$SECRETHASHx9y8$abcdef:19000:0:99999:7:::"


def test_14_trace_errors_name_the_problem_without_quoting_the_file(tmp_path, capsys):
    shadow = tmp_path / "shadow"
    shadow.write_text(SECRET + "\nbin:*:19000:0:99999:7:::\n")
    link = tmp_path / "trace.csv"
    link.symlink_to(shadow)
    bad_row = tmp_path / "bad.csv"
    header = "client,version,step,dispatch_time,arrival_time,staleness,accepted,reason,dispatch\n"
    bad_row.write_text(header + f"0,1,1,0.0,1.0,0,true,,1\n{SECRET},1,1,0.0,1.0,0,true,,2\n")
    garbage_pickle = tmp_path / "devices.pkl"
    garbage_pickle.write_bytes(b"\x80\x04" + SECRET.encode() * 3)
    cases = [
        ({"latency": {"dist": "trace", "file": str(link)}}, "the first line is not the header of an asyncfl updates.csv"),
        ({"latency": {"dist": "trace", "file": str(bad_row)}}, "line 3: column client must be an integer"),
        ({"latency": {"dist": "fedscale", "file": str(garbage_pickle)}}, "not a valid pickle"),
    ]
    for i, (overrides, phrase) in enumerate(cases):
        path = scenario_file(tmp_path, f"s{i}.toml", **overrides, **{"population.speed_sigma": 0.0})
        code, out, err = cli(capsys, "run", path, "--out", tmp_path / f"r{i}", "--quiet")
        assert code == 2 and phrase in err, err
        assert "SECRET" not in out + err and "19000" not in out + err, err


def test_14_fedscale_values_in_messages_are_shortened(tmp_path):
    path = tmp_path / "devices.pkl"
    path.write_bytes(pickle.dumps({"x" * 500: {"computation": "y" * 10**6, "communication": 1.0}}))
    with pytest.raises(TraceError) as info:
        fedscale.load_devices(path)
    assert len(str(info.value)) < 600


# ---------------------------------------------------------------------------------------------
# 15. paths and values are printed verbatim by every command
ODD = "root:x:0:0 [bold]b[/bold] :smile: $x$"


@pytest.mark.slow
def test_15_every_command_prints_user_values_verbatim(tmp_path, capsys):
    path = scenario_file(tmp_path, **{"name": ODD, "run.steps": 3})
    out = tmp_path / "out_:x:_emoji [red]r[/red] :thumbs_up:"
    code, text, _ = cli(capsys, "validate", path)
    assert code == 0 and f'name = "{ODD}"' in text
    code, text, _ = cli(capsys, "run", path, "--out", out)  # with the summary table
    assert code == 0 and f"{ODD} — completed" in text and f"run directory: {out}\n" in text
    code, _, err = cli(capsys, "resume", out)
    assert code == 0 and f"{out}: the run is already completed" in err
    code, text, _ = cli(capsys, "bias", out)
    assert code == 0 and f"wrote {out / 'bias.json'} and {out / 'bias_heatmaps.png'}" in text
    png = tmp_path / "curves :x: [b].png"
    code, text, _ = cli(capsys, "plot", out, "--out", png, "--label", ODD)
    assert code == 0 and text == f"wrote {png}\n" and png.is_file()
    library = tmp_path / "lib :x:"
    library.mkdir()
    (library / "odd.toml").write_text(f"# {ODD}\nname = 'x'\n")
    code, text, _ = cli(capsys, "scenarios", "--dir", library)
    assert code == 0 and text == f"odd  {ODD}\n"
    code, _, err = cli(capsys, "validate", tmp_path / "missing :x: [b].toml")
    assert code == 2 and f"{tmp_path / 'missing :x: [b].toml'}: no such scenario file" in err
    code, _, err = cli(capsys, "resume", tmp_path / "nowhere :x:")
    assert code == 2 and f"{tmp_path / 'nowhere :x:'}: no such run directory" in err
    spec = tmp_path / "spec :x:.toml"
    shutil.copy(REPO / "analysis" / "ma_review_ci.toml", spec)
    code, text, _ = cli(capsys, "study", spec, "--out", tmp_path / "study", "--check")
    assert code == 0 and text.startswith(f"{spec}: valid review spec")


@pytest.mark.slow
def test_15_the_privacy_sweep_prints_its_paths_verbatim(tmp_path, capsys):
    path = scenario_file(tmp_path, **{"name": ODD, "run.steps": 2, "privacy": {"enabled": True, "noise_multiplier": 1.0, "xi": 2.0}})
    out = tmp_path / "sweep :x: [b]"
    code, text, _ = cli(capsys, "privacy", path, "--xi", "2", "--rules", "momentum", "--out", out)
    assert code == 0 and f"wrote {out / 'sweep.csv'}, {out / 'sweep.md'}, {out / 'sweep.png'}" in text


# ---------------------------------------------------------------------------------------------
# 16. asyncfl plot on a damaged metrics.csv
def test_16_plot_names_the_file_row_and_column_of_a_value_that_is_not_a_number(stopped, tmp_path, capsys):
    out = tmp_path / "run"
    shutil.copytree(stopped[1], out)
    lines = (out / "metrics.csv").read_text().splitlines(keepends=True)
    fields = lines[2].split(",")
    fields[3] = "abc"  # loss
    lines[2] = ",".join(fields)
    (out / "metrics.csv").write_text("".join(lines))
    before = snapshot(out)
    code, _, err = cli(capsys, "plot", out, "--out", tmp_path / "p.png")
    assert code == 2 and f"{out / 'metrics.csv'}, row 3: column loss is not a number" in err, err
    assert snapshot(out) == before and not (tmp_path / "p.png").exists()
    code, _, err = cli(capsys, "plot", stopped[1], stopped[1], "--label", "only-one", "--out", tmp_path / "q.png")
    assert code == 2 and "--label given 1 time(s) for 2 run(s)" in err, err
    (out / "metrics.csv").write_text("step,loss\n1,2\n")
    code, _, err = cli(capsys, "plot", out, "--out", tmp_path / "p.png")
    assert code == 2 and "no column time, accuracy" in err, err


def test_16_bias_refuses_a_damaged_or_oversized_counts_file(stopped, tmp_path, capsys):
    for kind in ("garbage", "negative", "bomb"):
        out = tmp_path / kind
        shutil.copytree(stopped[1], out)
        if kind == "garbage":
            (out / "counts.npz").write_bytes(b"PK\x03\x04" + os.urandom(100))
        elif kind == "negative":
            np.savez_compressed(out / "counts.npz", by_staleness=-np.ones((3, 2), dtype=np.int64), step_time=np.zeros(3))
        else:  # an archive whose directory declares 3.5 GB of arrays (a zip bomb's shape)
            np.savez_compressed(out / "counts.npz", by_staleness=np.zeros((3, 2), dtype=np.int64))
            data = bytearray((out / "counts.npz").read_bytes())
            entry = data.rindex(b"PK\x01\x02")  # the central directory's entry: uncompressed size at +24
            data[entry + 24: entry + 28] = (0xD0000000).to_bytes(4, "little")
            (out / "counts.npz").write_bytes(bytes(data))
        before = snapshot(out)
        code, _, err = cli(capsys, "bias", out)
        assert code == 2 and "counts.npz" in err, (kind, err)
        if kind == "bomb":
            assert "more than deflate expands to (1032:1); the file is damaged" in err, err
        assert snapshot(out) == before


# ---------------------------------------------------------------------------------------------
# 17. --set SECTION={...} merges into the table
def test_17_an_inline_table_override_merges_into_the_table(tmp_path, capsys):
    path = REPO / "scenarios" / "quickstart.toml"
    merged = cli(capsys, "validate", path, "--set", "server={lr=1, beta=0.5}")
    dotted = cli(capsys, "validate", path, "--set", "server.lr=1", "--set", "server.beta=0.5")
    assert merged[0] == dotted[0] == 0 and merged[1] == dotted[1]
    kept = sc.load(path, ["server={lr=1}"])
    assert kept.server.concurrency == 10 and kept.server.buffer == 5 and kept.server.rule == "momentum" and kept.server.lr == 1
    switched = sc.load(path, ['latency={dist="constant", value=2.0}'])  # another variant replaces the section
    assert switched.latency.model_dump() == {"dist": "constant", "value": 2.0}
    same = sc.load(path, ["latency={sigma=0.25}"])  # the same variant merges
    assert same.latency.model_dump() == {"dist": "lognormal", "median": 1.0, "sigma": 0.25}


# ---------------------------------------------------------------------------------------------
# 18. a scenario that cannot fit in memory is refused before anything is built
def test_18_a_task_too_large_for_the_machine_is_refused_naming_keys_and_estimate(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(memory, "machine_memory", lambda: 16 << 30)
    path = scenario_file(tmp_path, **{"population.clients": 100000, "task.dim": 100, "task.samples_per_client": 500,
                                      "server.concurrency": 10, "server.buffer": 5})
    out = tmp_path / "run"
    for command in ("validate", "run"):
        code, _, err = cli(capsys, command, path, *(["--out", out, "--quiet"] if command == "run" else []))
        assert code == 2 and "more than this machine's 17.2 GB" in err, err
        assert "the task's data: 40." in err and "population.clients = 100000" in err and "task.samples_per_client = 500" in err
        assert "task.dim = 100" in err and "run.train_loss = false" in err
    assert not out.exists()  # refused before the run directory is made
    # without the patch: a population no machine holds (8·10¹⁴ bytes)
    monkeypatch.undo()
    code, _, err = cli(capsys, "validate", scenario_file(tmp_path, "huge.toml", **{
        "population.clients": 10**8, "task.samples_per_client": 10**4, "task.dim": 100}))
    assert code == 2 and "TB of memory" in err, err


def _tensor_bytes(task) -> int:
    return sum(d.x.nbytes + d.y.nbytes for d in [*task.clients, task.test])


@pytest.mark.parametrize("cfg,clients,exact", [
    (QuadraticTask(dim=7, samples_per_client=13), 40, True),
    (QuadraticTask(problem="seed-1d"), 2, True),
    (GaussianMLPTask(dim=9, classes=4, samples_per_client=11, hidden=5), 30, True),
    (GaussianMLPTask(dim=9, classes=4, samples_per_client=11, hidden=5, label_alpha=0.2), 30, True),
    (SyntheticTask(dim=3, classes=2), 4000, False),
    (SyntheticTask(dim=5, classes=3, model="mlp", hidden=4), 100, False),
    (DigitsTask(model="logreg"), 20, False), (DigitsTask(model="mlp", hidden=12), 20, False), (DigitsTask(model="cnn"), 20, False),
    (MNIST1DTask(model="mlp", hidden=7), 10, False), (MNIST1DTask(model="cnn"), 10, False), (MNIST1DTask(model="logreg"), 10, False),
    (MNIST1DTask(model="logreg", samples=1500), 10, False),
], ids=lambda v: getattr(v, "name", str(v)) + (f"-{v.model}" if hasattr(v, "model") else ""))
def test_18_task_sizes_match_built_tasks(cfg, clients, exact):
    """The torch-free size formulas against the task built: ``d`` exactly; the data's bytes exactly
    for fixed-size tasks, within 5 % where the split is random (synthetic within 5 % at 4000
    clients: its sample counts are lognormal)."""
    task = build_task(cfg, clients, seed=1)
    assert cfg.model_params() == task.dim
    assert cfg.itemsize == task.initial_theta.element_size()
    want = _tensor_bytes(task)
    got = cfg.data_bytes(clients) - clients * 2048  # without the per-client bookkeeping
    if exact:
        assert got == want
    elif cfg.name == "synthetic" and clients < 1000:
        assert 0.3 * want < got < 3 * want
    else:
        assert got == pytest.approx(want, rel=0.05)
    assert cfg.mean_samples_per_client(clients) == pytest.approx(np.mean([len(d) for d in task.clients]), rel=0.05 if clients > 1000 or exact else 0.6)


def test_18_the_synthetic_mean_sample_count_matches_a_monte_carlo():
    """E[min(⌊e^Z⌋ + 50, 5000)], Z ~ N(4, 2²), closed form against 2·10⁶ draws of the task's own
    formula (standard error ≈ 0.1 %)."""
    rng = np.random.default_rng(0)
    s = np.exp(rng.normal(4.0, 2.0, 2_000_000))
    n = np.minimum(np.floor(np.minimum(s, 5000)) + 50, 5000)
    assert SyntheticTask().device_samples() == pytest.approx(n.mean(), rel=0.005)


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads /proc/self/statm")
def test_18_the_estimate_is_close_to_the_measured_memory(tmp_path):
    """Build a ~550 MB task (and its pooled copy) in a fresh process and compare the growth of
    its resident memory with the estimate's task parts: never below 0.8× the growth (it must not
    underestimate) and under 2.5× it."""
    script = f"""
import os, sys
sys.path.insert(0, {str(REPO / 'tests')!r})
from conftest import make_scenario
from asyncfl.config.memory import estimate
from asyncfl.tasks import build_task
import torch
resident = lambda: int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
sc = make_scenario({{"population.clients": 4000, "population.speed_sigma": 0.0,
    "task": {{"name": "gaussian-mlp", "dim": 64, "samples_per_client": 250, "hidden": 16}}, "server.concurrency": 8}})
before = resident()
task = build_task(sc.task, sc.population.clients, sc.seed)
task.train_loss(task.initial_theta)
parts = {{p.what: p.bytes for p in estimate(sc).parts}}
print(resident() - before, parts["the task's data"] + parts["the pooled training data for run.train_loss"])
"""
    proc = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=300)
    measured, estimated = map(int, proc.stdout.split())
    assert 0.8 * measured < estimated < 2.5 * measured, (measured, estimated)


def _state_bytes(value) -> int:
    if isinstance(value, torch.Tensor):
        return value.nbytes
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, dict):
        return sum(_state_bytes(v) for v in value.values())
    if isinstance(value, (tuple, list)):
        return sum(_state_bytes(v) for v in value)
    if hasattr(value, "_asdict"):
        return _state_bytes(value._asdict())
    return 0


def test_18_the_algorithm_parts_bound_the_built_state():
    """The baselines' per-client vectors exactly (FedPD: λ, c, x and the table, N × d each);
    MA-full's history and factors from above, within 3× (capacities double)."""
    sync = {"server.protocol": "sync", "server.concurrency": None, "server.cohort": 6, "server.buffer": 4,
            "server.max_staleness": None, "server.rule": "sgd", "client.mu": 0.5}
    for algorithm in ("fedsplit", "feddr", "fedpd"):
        scenario = make_scenario({**sync, "server.algorithm": algorithm})
        sim = build_simulation(scenario)
        rows = {"fedsplit": 3, "feddr": 3, "fedpd": 4}[algorithm]  # their memory and the server's table, per client
        part = {p.what: p.bytes for p in memory.estimate(scenario).parts}[f"{algorithm}'s {rows} model vectors per client"]
        state = sim.algo_state
        assert part == _state_bytes(state.clients) + _state_bytes(state.table)
    for window in (None, 8):
        scenario = make_scenario({"server.rule": "ma-full", "run.steps": 37, "server.ma_window": window})
        sim = build_simulation(scenario)
        asyncio.run(sim.run())
        part = {p.what: p.bytes for p in memory.estimate(scenario).parts}["MA-full's history of aggregates and its factors"]
        actual = _state_bytes(sim.algo_state.rule)
        assert actual <= part <= 3 * actual, (window, actual, part)


def test_18_every_committed_scenario_fits_a_small_machine():
    for path in sorted((REPO / "scenarios").glob("*.toml")):
        assert memory.estimate(sc.load(path)).total < 4 << 30, path


# ---------------------------------------------------------------------------------------------
# the same kinds of defect, found elsewhere
def test_deeply_nested_input_is_refused_not_a_traceback(run_dir, tmp_path, capsys):
    """Python's TOML and JSON parsers recurse once per nesting level: RecursionError tracebacks."""
    deep = tmp_path / "deep.toml"
    deep.write_text("[run]\nsteps = " + "[" * 5000 + "]" * 5000 + "\n")
    code, _, err = cli(capsys, "validate", deep)
    assert code == 2 and "nested too deeply" in err, err
    code, _, err = cli(capsys, "validate", scenario_file(tmp_path), "--set", "run.steps=" + "[" * 5000 + "]" * 5000)
    assert code == 2 and "--set run.steps: the value is nested too deeply" in err, err
    code, _, err = cli(capsys, "study", deep, "--out", tmp_path / "study", "--check")
    assert code == 2 and "nested too deeply" in err, err
    (run_dir / "summary.json").write_text("[" * 100000 + "]" * 100000)
    before = snapshot(run_dir)
    code, _, err = cli(capsys, "resume", run_dir, "--quiet")
    assert code == 2 and "summary.json: not valid JSON" in err and snapshot(run_dir) == before, err


def test_plot_labels_are_drawn_verbatim(stopped, tmp_path, capsys):
    """A '$' made matplotlib parse mathtext (an unbalanced one raised); a label starting with '_'
    was silently left out of the legend."""
    out = tmp_path / "_private $run"
    shutil.copytree(stopped[1], out)
    import matplotlib.figure

    seen = []
    original = matplotlib.axes.Axes.legend

    def spy(self, *args, **kw):
        seen.append(list(args[1]) if len(args) > 1 else None)
        return original(self, *args, **kw)

    matplotlib.axes.Axes.legend = spy
    try:
        code, _, err = cli(capsys, "plot", out, stopped[1], "--out", tmp_path / "p.png", "--label", "$\\frac{", "--label", "_hidden")
    finally:
        matplotlib.axes.Axes.legend = original
    assert code == 0, err
    assert seen == [["\\$\\frac{", "_hidden"]]  # '$' escaped, '_' kept: both drawn as written
    assert cli(capsys, "plot", out, "--out", tmp_path / "q.png")[0] == 0


def test_a_scenario_refused_while_building_leaves_no_run_directory(tmp_path, capsys):
    path = scenario_file(tmp_path, **{"task": {"name": "digits"}, "population.clients": 5000, "server.concurrency": 8})
    out = tmp_path / "run"
    code, _, err = cli(capsys, "run", path, "--out", out, "--quiet")
    assert code == 2 and "training samples to split" in err and not out.exists(), err


def test_workers_are_counted_in_the_memory_estimate(tmp_path, capsys):
    code, _, err = cli(capsys, "validate", scenario_file(tmp_path), "--set", 'run.executor="processes"', "--set", "run.workers=4096")
    assert code == 2 and "4096 worker processes, each building the task" in err, err


# ---------------------------------------------------------------------------------------------
# the run directory, fuzzed before resume
FUZZED = ("updates.csv", "metrics.csv", "summary.json", "checkpoint.pt")
EDITS = ("", "x", "-1", "nan", "1e308", "true", "0", "99999999999999999999", "\"", ",,,")
mutations = st.tuples(
    st.sampled_from(FUZZED), st.sampled_from(["truncate", "flip", "edit"]),
    st.floats(0, 1, exclude_max=True), st.integers(0, 7), st.sampled_from(EDITS),
)


def _mutate(path: Path, kind: str, where: float, bit: int, text: str) -> None:
    data = bytearray(path.read_bytes())
    if kind == "truncate":
        path.write_bytes(bytes(data[: int(where * len(data))]))
    elif not data:
        path.write_bytes(b"x")
    elif kind == "flip" or path.suffix == ".pt":
        data[int(where * len(data))] ^= 1 << bit
        path.write_bytes(bytes(data))
    else:  # edit one field of one row (summary.json: one line)
        lines = data.decode("utf-8", "surrogateescape").split("\n")
        i = int(where * len(lines))
        fields = lines[i].split(",")
        fields[bit % len(fields)] = text
        lines[i] = ",".join(fields)
        path.write_bytes("\n".join(lines).encode("utf-8", "surrogateescape"))


@settings(max_examples=int(os.environ.get("ASYNCFL_FUZZ_RESUME_EXAMPLES", 30)), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@pytest.mark.slow
@given(changes=st.lists(mutations, min_size=1, max_size=3))
def test_a_fuzzed_run_directory_resumes_exactly_or_is_refused_untouched(changes, stopped, capsys):
    work = Path(tempfile.mkdtemp(prefix="fuzz-"))
    try:
        out = work / "run"
        shutil.copytree(stopped[0], out)
        for name, kind, where, bit, text in changes:
            _mutate(out / name, kind, where, bit, text)
        before = snapshot(out)
        code, _, err = cli(capsys, "resume", out, "--quiet")
        if code == 0:
            assert_same_run(stopped[1], out)
        else:
            assert code == 2 and err.startswith(f"{out}:") or err.startswith("error:"), err
            assert code == 2 and snapshot(out) == before, err
    finally:
        shutil.rmtree(work)
