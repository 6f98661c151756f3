"""Issue 23: the sweep, study, privacy, compare, plot, bias and results commands under hostile and
careless use. Each test reproduces one reported defect through the CLI or the public API and
asserts the exit code, that no traceback was printed, and that the files that should survive
kept their SHA-256.

The rule every folder-writing command follows (asyncfl/run/outdir.py, README "Where results
go"): a command writes only into a folder of its own kind, records what produced it (command,
spec digest), refuses a foreign or different one naming it, and ``--overwrite`` removes only
files it made; figures and tables never land on a run's own files.
"""

from __future__ import annotations

import csv
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import zipfile
from pathlib import Path

import pytest
import tomli_w

import asyncfl
import asyncfl.cli.console as console_module
from analysis.ma_review.__main__ import main as study_main
from analysis.privacy_sweep.__main__ import main as privacy_main
from asyncfl.cli.main import main
from asyncfl.errors import RunDirError
from asyncfl.run.runner import run_to_dir_blocking

from conftest import make_raw, make_scenario

REPO = Path(__file__).resolve().parents[1]


def snapshot(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` (relative path → digest)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(folder).rglob("*")) if p.is_file() and p.name != ".asyncfl.lock"}


#: the study scripts built on the library (``python -m analysis.…``), by the word that names them in these tests
SCRIPTS = {"study": study_main, "privacy": privacy_main}


def cli(capsys, *args) -> tuple[int, str, str]:
    """``asyncfl ARGS``, or ``python -m analysis.ma_review`` / ``analysis.privacy_sweep`` for
    ``study`` / ``privacy`` ARGS, in this process: (exit code, stdout, stderr); never a traceback."""
    argv = [str(a) for a in args]
    code = SCRIPTS[argv[0]](argv[1:]) if argv and argv[0] in SCRIPTS else main(argv)
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, out + err
    return code, out, err


@pytest.fixture
def scenario_file(tmp_path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(tomli_w.dumps(make_raw(**{"run.steps": 6, "run.eval_every": 3})))
    return path


@pytest.fixture
def private_file(tmp_path) -> Path:
    path = tmp_path / "private.toml"
    path.write_text(tomli_w.dumps(make_raw(**{
        "run.steps": 6, "run.eval_every": 3, "server.rule": "momentum",
        "privacy": {"enabled": True, "clip": 1.0, "noise_multiplier": 1.0, "xi": 4.0}})))
    return path


@pytest.fixture
def run_dir(tmp_path) -> Path:
    out = tmp_path / "run"
    run_to_dir_blocking(make_scenario({"run.steps": 6, "run.eval_every": 3}), out)
    return out


# ---------------------------------------------------------------------------------------------
# 1. data loss
@pytest.mark.slow
def test_1_privacy_overwrite_removes_only_its_own_runs_and_refuses_a_foreign_folder(private_file, tmp_path, capsys, run_dir):
    out = tmp_path / "p"
    base = ["privacy", private_file, "--xi", "4", "--rules", "momentum", "--out", out, "--workers", "1", "--quiet"]
    assert cli(capsys, *base)[0] == 0
    # another command's run placed in its runs/ folder survives an --overwrite: it is refused
    foreign = out / "runs" / "mine"
    run_to_dir_blocking(make_scenario({"run.steps": 3}), foreign)
    before = snapshot(out)
    code, _, err = cli(capsys, "privacy", private_file, "--xi", "5", "--rules", "momentum", "--out", out, "--workers", "1",
                       "--quiet", "--overwrite")
    assert code == 2 and "runs/mine" in err and "nothing was removed" in err
    assert snapshot(out) == before
    # a non-empty folder no command made is refused, touched nothing
    other = tmp_path / "notes"
    other.mkdir()
    (other / "todo.txt").write_text("mine")
    code, _, err = cli(capsys, "privacy", private_file, "--xi", "4", "--out", other, "--quiet")
    assert code == 2 and "not a folder python -m analysis.privacy_sweep made" in err and snapshot(other) == {"todo.txt": hashlib.sha256(b"mine").hexdigest()}


def test_1_study_into_a_sweep_folder_and_run_into_a_sweep_folder_are_refused(scenario_file, tmp_path, capsys):
    sweep = tmp_path / "s"
    assert cli(capsys, "sweep", scenario_file, "--grid", "server.rule=sgd,momentum", "--out", sweep, "--workers", "1", "--quiet")[0] == 0
    before = snapshot(sweep)
    code, _, err = cli(capsys, "study", REPO / "analysis" / "ma_review_ci.toml", "--out", sweep, "--quiet")
    assert code == 2 and "an asyncfl sweep folder" in err
    code, _, err = cli(capsys, "run", scenario_file, "--out", sweep, "--overwrite", "--quiet")
    assert code == 2 and "asyncfl run writes only into a run directory" in err
    code, _, err = cli(capsys, "run", scenario_file, "--out", sweep / "runs" / "x", "--quiet")
    assert code == 2 and "inside" in err
    assert snapshot(sweep) == before


def test_1_compare_and_plot_never_write_onto_a_runs_files(run_dir, tmp_path, capsys):
    before = snapshot(run_dir)
    for args in (("compare", run_dir, "--csv", run_dir / "metrics.csv"), ("compare", run_dir, "--csv", run_dir / "updates.csv"),
                 ("compare", run_dir, "--out", run_dir / "model.pt"), ("plot", run_dir, "--out", run_dir / "summary.json"),
                 ("plot", run_dir, "--out", run_dir / "scenario.toml", "--format", "png")):
        code, _, err = cli(capsys, *args)
        assert code == 2 and ("inside" in err), (args, err)
    assert snapshot(run_dir) == before
    # plot without --out writes plot.png in the working directory, not the run's own metrics.png
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert cli(capsys, "plot", run_dir)[0] == 0
        assert (tmp_path / "plot.png").is_file()
        code, _, err = cli(capsys, "plot", run_dir)  # an existing file needs --overwrite
        assert code == 2 and "--overwrite" in err
        assert cli(capsys, "plot", run_dir, "--overwrite")[0] == 0
    finally:
        os.chdir(cwd)
    assert snapshot(run_dir) == before


# ---------------------------------------------------------------------------------------------
# 2. silently stale results
@pytest.mark.slow
def test_2_an_edited_study_spec_is_refused_not_kept(tmp_path, capsys):
    spec = tmp_path / "study.toml"
    raw = __import__("tomllib").loads((REPO / "analysis" / "ma_review_ci.toml").read_text())
    raw.update(steps=4, eval_every=2, seeds=[0], tuning_seeds=[7], target={"value": 0.5}, tuning={"refine": 0},
               lr_grid={"fedbuff-sgd": [0.5]}, privacy=[], cells=[{"name": "core", "methods": ["fedbuff-sgd"], "k_multiples": [1]}])
    spec.write_text(tomli_w.dumps(raw))
    out = tmp_path / "st"
    assert cli(capsys, "study", spec, "--out", out, "--quiet", "--workers", "1")[0] == 0
    assert cli(capsys, "study", spec, "--out", out, "--quiet", "--workers", "1")[0] == 0  # the same spec resumes
    before = snapshot(out)
    raw["lr_grid"] = {"fedbuff-sgd": [0.25]}
    spec.write_text(tomli_w.dumps(raw))
    code, _, err = cli(capsys, "study", spec, "--out", out, "--quiet", "--workers", "1")
    assert code == 2 and "holds the results of another python -m analysis.ma_review" in err
    assert snapshot(out) == before
    # duplicate seeds or K multiples are refused by --check (fake statistics from one run)
    raw["seeds"] = [0, 0]
    spec.write_text(tomli_w.dumps(raw))
    code, _, err = cli(capsys, "study", spec, "--out", tmp_path / "x", "--check")
    assert code == 2 and "seeds: 0 given twice" in err
    raw["seeds"], raw["cells"][0]["k_multiples"] = [0], [1, 1]
    spec.write_text(tomli_w.dumps(raw))
    code, _, err = cli(capsys, "study", spec, "--out", tmp_path / "x", "--check")
    assert code == 2 and "cells[0] (core).k_multiples: 1 given twice" in err


@pytest.mark.slow
def test_2_extend_with_the_axes_in_another_order_keeps_the_runs(scenario_file, tmp_path, capsys):
    out = tmp_path / "s"
    base = ["sweep", scenario_file, "--out", out, "--workers", "1", "--quiet"]
    assert cli(capsys, *base, "--grid", "server.rule=sgd,momentum", "--grid", "server.lr=0.1,0.2")[0] == 0
    before = snapshot(out / "runs")
    assert cli(capsys, *base, "--grid", "server.lr=0.1,0.2", "--grid", "server.rule=sgd,momentum")[0] == 0  # the same sweep
    assert cli(capsys, *base, "--grid", "server.lr=0.1,0.2,0.3", "--grid", "server.rule=sgd,momentum", "--extend")[0] == 0
    after = snapshot(out / "runs")
    assert all(after[k] == v for k, v in before.items() if not k.endswith(("metrics.png", "summary.json")))
    assert len({k.split("/")[0] for k in after}) == 6


# ---------------------------------------------------------------------------------------------
# 4. concurrency and faults
@pytest.mark.slow
def test_4_a_second_sweep_on_a_folder_in_use_is_refused_naming_the_holder(scenario_file, tmp_path, capsys):
    from asyncfl.run.rundir import RunLock

    out = tmp_path / "s"
    assert cli(capsys, "sweep", scenario_file, "--out", out, "--workers", "1", "--quiet")[0] == 0
    before = snapshot(out)
    lock = RunLock.acquire(out, what="another asyncfl sweep")  # what the first sweep holds while it runs
    try:
        code = subprocess.run([sys.executable, "-m", "asyncfl", "sweep", str(scenario_file), "--out", str(out), "--quiet",
                               "--workers", "1"], capture_output=True, text=True, cwd=REPO, timeout=120)
    finally:
        lock.release()
    assert code.returncode == 2 and f"in use by process {os.getpid()}" in code.stderr and "Traceback" not in code.stderr
    assert snapshot(out) == before


@pytest.mark.slow
def test_4_kill_9_of_one_pool_worker_fails_only_its_run_and_the_sweep_exits_non_zero(tmp_path):
    scenario = tmp_path / "s.toml"
    scenario.write_text(tomli_w.dumps(make_raw(**{"run.steps": 150, "run.eval_every": 10, "task.dim": 30,
                                                  "task.samples_per_client": 200, "server.lr": 0.1, "client.lr": 0.002})))
    out = tmp_path / "k"
    proc = subprocess.Popen([sys.executable, "-m", "asyncfl", "sweep", str(scenario), "--grid", "server.rule=momentum,sgd,nesterov",
                             "--seeds", "0-1", "--workers", "2", "--out", str(out), "--quiet"], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline, victim = time.monotonic() + 120, None
    while time.monotonic() < deadline and proc.poll() is None and victim is None:
        kids = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        started = list(out.glob("runs/*/metrics.csv"))
        for pid in kids:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes() if Path(f"/proc/{pid}/cmdline").exists() else b""
            if started and b"asyncfl" in cmd and b"sweep" in cmd:  # a forked worker (not Python's resource tracker)
                victim = int(pid)
                break
        time.sleep(0.05)
    assert victim is not None, "no worker to kill"
    os.kill(victim, signal.SIGKILL)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 2 and "Traceback" not in err, err
    rows = list(csv.DictReader(open(out / "results.csv")))
    failed = [r for r in rows if r["status"] == "failed"]
    assert len(failed) == 1 and "worker process lost (killed by signal 9)" in failed[0]["message"]
    assert sum(r["status"] == "completed" for r in rows) == 5


# ---------------------------------------------------------------------------------------------
# 5. failures that say nothing
@pytest.mark.slow
def test_5_a_sweep_whose_run_diverged_exits_3_and_says_which(scenario_file, tmp_path, capsys, monkeypatch):
    # the table as wide as a file or a pipe gets it: where COLUMNS is set (pytest-xdist's workers inherit it), rich
    # would wrap the message at that width
    monkeypatch.setattr(console_module.console, "width", console_module.NOT_A_TERMINAL_WIDTH)
    code, out, err = cli(capsys, "sweep", scenario_file, "--grid", "server.lr=0.3,1e4", "--set", "server.rule=sgd",
                         "--set", "run.divergence_loss=1e6", "--set", "run.eval_every=1", "--out", tmp_path / "s", "--workers", "1")
    assert code == 3 and "diverged: lr=10000__seed=3: the model diverged" in err
    assert "seed 3 diverged: the model diverged" in out  # in the table's "not completed" column


def test_5_study_check_refuses_xi_below_sigma_and_a_cap_without_k(tmp_path, capsys):
    raw = __import__("tomllib").loads((REPO / "analysis" / "ma_review_ci.toml").read_text())
    raw["privacy"][0] = {"name": "eps2", "epsilon": 2.0, "xi": 0.01}
    spec = tmp_path / "s.toml"
    spec.write_text(tomli_w.dumps(raw))
    code, _, err = cli(capsys, "study", spec, "--out", tmp_path / "o", "--check")
    assert code == 2 and "privacy.xi = 0.01: must exceed the noise multiplier" in err and not (tmp_path / "o").exists()
    raw["privacy"][0] = {"name": "eps2", "epsilon": 2.0, "xi_over_sigma": 4, "sampling": "participation-cap"}
    spec.write_text(tomli_w.dumps(raw))
    code, _, err = cli(capsys, "study", spec, "--out", tmp_path / "o", "--check")
    assert code == 2 and "max_participations: required with sampling = 'participation-cap'" in err


# ---------------------------------------------------------------------------------------------
# 6. tracebacks
@pytest.mark.parametrize("grid", ["server.lr=1,1.0", "server.lr=1,1"])
def test_6_grid_values_that_name_one_run_are_refused_before_anything_is_written(scenario_file, tmp_path, capsys, grid):
    code, _, err = cli(capsys, "sweep", scenario_file, "--grid", grid, "--out", tmp_path / "s")
    assert code == 2 and "given twice" in err and not (tmp_path / "s").exists()


def test_6_close_grid_values_get_their_own_runs(scenario_file, tmp_path, capsys):
    assert cli(capsys, "sweep", scenario_file, "--grid", "server.lr=0.1234567,0.1234568", "--out", tmp_path / "s", "--workers", "1",
               "--quiet")[0] == 0
    assert sorted(p.name for p in (tmp_path / "s" / "runs").iterdir()) == ["lr=0.1234567__seed=3", "lr=0.1234568__seed=3"]


@pytest.mark.parametrize("extra", [["--seeds", "0", "0"], ["--rules", "momentum", "momentum"], ["--xi", "4", "4"],
                                   ["--xi", "4", "4.00001"]])
def test_6_privacy_duplicates_are_refused_before_anything_is_written(private_file, tmp_path, capsys, extra):
    args = ["privacy", private_file, "--out", tmp_path / "p", "--quiet"]
    if "--xi" not in extra:
        args += ["--xi", "4"]
    code, _, err = cli(capsys, *args, *extra)
    if extra[-1] == "4.00001":  # two different ξ: two runs, each named by its full value
        assert code == 0 and {p.name for p in (tmp_path / "p" / "runs").glob("xi4*-ma-light-s3")} == {"xi4-ma-light-s3", "xi4.00001-ma-light-s3"}
    else:
        assert code == 2 and "twice" in err and not (tmp_path / "p").exists()


def test_6_a_damaged_sweep_record_with_extend_is_a_clean_error(scenario_file, tmp_path, capsys):
    out = tmp_path / "s"
    assert cli(capsys, "sweep", scenario_file, "--grid", "server.rule=sgd,momentum", "--out", out, "--workers", "1", "--quiet")[0] == 0
    (out / "sweep.toml").write_text('grid = "x"\nseeds = 3\n')
    before = snapshot(out)
    code, _, err = cli(capsys, "sweep", scenario_file, "--grid", "server.rule=sgd,momentum,nesterov", "--out", out, "--extend")
    assert code == 2 and "not a sweep record" in err and snapshot(out) == before


def test_6_scenarios_dir_skips_study_specs_and_binary_files(tmp_path, capsys):
    (tmp_path / "spec.toml").write_bytes((REPO / "analysis" / "ma_review_ci.toml").read_bytes())
    (tmp_path / "bin.toml").write_bytes(b"\xff\xfe\x00\x01garbage")
    (tmp_path / "ok.toml").write_bytes((REPO / "scenarios" / "quickstart.toml").read_bytes())
    code, out, err = cli(capsys, "scenarios", "--dir", tmp_path)
    assert code == 0 and out.startswith("ok ") and "spec.toml not listed: not a scenario" in err and "bin.toml not listed" in err


@pytest.mark.parametrize("damage", ["empty", "binary", "list"])
def test_6_compare_and_the_readers_report_a_damaged_run_as_run_dir_error(run_dir, capsys, damage):
    if damage == "empty":
        (run_dir / "metrics.csv").write_bytes(b"")
    elif damage == "binary":
        (run_dir / "metrics.csv").write_bytes(b"\xff\xfe\x00garbage\n\x81,\x82\n")
    else:
        (run_dir / "summary.json").write_text("[1, 2]")
    before = snapshot(run_dir)
    code, _, err = cli(capsys, "compare", run_dir, "--out", run_dir.parent / "c.png")
    assert code == 2 and str(run_dir) in err
    run = asyncfl.load_run(run_dir)
    with pytest.raises(RunDirError):
        run.metrics if damage != "list" else run.status  # noqa: B018
    assert snapshot(run_dir) == before


def test_6_every_reader_raises_only_run_dir_error(run_dir, tmp_path):
    (run_dir / "model.pt").write_bytes(b"not a model")
    (run_dir / "counts.npz").write_bytes(b"PK\x03\x04 not a zip")
    (run_dir / "updates.csv").write_bytes(b"\x00\x01\x02")
    run = asyncfl.load_run(run_dir)
    for read in (run.model, run.counts, run.W, lambda: run.updates):
        with pytest.raises(RunDirError):
            read()
    sweep = tmp_path / "sw"
    sweep.mkdir()
    (sweep / "results.csv").write_bytes(b"\xff\xfe")
    (sweep / "sweep.toml").write_text("x = 1\n")
    (sweep / "summary.csv").write_bytes(b"")
    loaded = asyncfl.load_sweep(sweep)
    for attribute in ("results", "summary"):
        with pytest.raises(RunDirError):
            getattr(loaded, attribute)


@pytest.mark.slow
def test_6_ray_auto_with_ray_address_set_is_no_traceback(scenario_file, tmp_path, monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.setenv("RAY_ADDRESS", "127.0.0.1:1")  # as on managed clusters; nothing listens there
    proc = subprocess.run([sys.executable, "-m", "asyncfl", "sweep", str(scenario_file), "--out", str(tmp_path / "s"), "--ray", "auto",
                           "--workers", "2", "--quiet"], capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0"})
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    assert (tmp_path / "s" / "results.csv").is_file()


# ---------------------------------------------------------------------------------------------
# 7. a hang
@pytest.mark.slow
def test_7_ray_at_an_address_where_a_non_ray_program_listens_is_refused_within_seconds(scenario_file, tmp_path, capsys):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))  # loopback only
    server.listen()
    port = server.getsockname()[1]
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            held.append(conn)  # accepts and says nothing, as a stuck service would

    threading.Thread(target=accept, daemon=True).start()
    try:
        start = time.monotonic()
        code, _, err = cli(capsys, "sweep", scenario_file, "--out", tmp_path / "s", "--ray", f"127.0.0.1:{port}", "--quiet")
        assert code == 2 and "not a Ray cluster" in err and time.monotonic() - start < 20
    finally:
        server.close()
        for conn in held:
            conn.close()


# ---------------------------------------------------------------------------------------------
# 8. wrong figures
def test_8_a_tiny_gamma_is_bounded_like_xi_and_the_noise_column_is_the_true_value(private_file, tmp_path, capsys):
    code, _, err = cli(capsys, "privacy", private_file, "--gamma", "1e-300", "--out", tmp_path / "p", "--quiet")
    assert code == 2 and "implies a count noise" in err and not (tmp_path / "p").exists()
    code, _, err = cli(capsys, "run", private_file, "--set", "privacy.gamma=1e-300", "--unset", "privacy.xi", "--out", tmp_path / "r", "--quiet")
    assert code == 2 and "privacy.gamma = 1e-300: implies a count noise" in err
    from asyncfl.privacy.mechanism import update_noise_std
    # ξ = 1e200: ξ² overflows, the value is σ S_Δ / C (σ = 1, S_Δ = 1, C = 3)
    assert update_noise_std(1.0, 1.0, 1e200, 3) == pytest.approx(1 / 3, rel=1e-12)


def test_8_sweeping_the_name_key_is_refused(scenario_file, tmp_path, capsys):
    code, _, err = cli(capsys, "sweep", scenario_file, "--grid", "name=a,b", "--out", tmp_path / "s")
    assert code == 2 and "--grid name: not a key a sweep can vary" in err and not (tmp_path / "s").exists()


# ---------------------------------------------------------------------------------------------
# 9. lost or doubled records
def test_9_tensorboard_travels_with_a_shipped_run_and_a_resume_logs_each_step_once(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    from asyncfl.run.parallel import RunJob, run_shipped, unpack
    from asyncfl.run.tensorboard import drop_after

    job = RunJob("tb", make_scenario({"run.steps": 6, "run.eval_every": 3, "run.tensorboard": True}), tmp_path / "tb")
    outcome, files = run_shipped(job, {})  # what a Ray worker sends back
    assert outcome.status == "completed" and any(name.startswith("tensorboard/events.out.tfevents.") for name in files)
    unpack(files, tmp_path / "tb")
    events = tmp_path / "tb" / "tensorboard"
    assert list(events.glob("events.out.tfevents.*"))

    def steps() -> list[int]:
        return sorted(e.step for f in sorted(events.glob("events.out.tfevents.*")) for e in EventFileLoader(str(f)).Load()
                      if e.HasField("summary") and any(v.tag == "eval/loss" for v in e.summary.value))

    assert steps() == [3, 6]  # the evaluations after step 0
    drop_after(events, 3)  # what a resume from the checkpoint of step 3 does before it logs 6 again
    assert steps() == [3]


# ---------------------------------------------------------------------------------------------
# 10. newcomer friction
def test_10_python_m_asyncfl_and_help_texts(capsys):
    proc = subprocess.run([sys.executable, "-m", "asyncfl", "--help"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 0 and "sweep" in proc.stdout
    for command in ("resume", "bias"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        assert "--out" not in capsys.readouterr().out


@pytest.mark.slow
def test_10_seeds_take_both_forms_in_sweep_and_privacy(scenario_file, private_file, tmp_path, capsys):
    assert cli(capsys, "sweep", scenario_file, "--seeds", "0", "1", "--out", tmp_path / "a", "--workers", "1", "--quiet")[0] == 0
    assert cli(capsys, "sweep", scenario_file, "--seeds", "0-1", "--out", tmp_path / "b", "--workers", "1", "--quiet")[0] == 0
    assert {p.name for p in (tmp_path / "a" / "runs").iterdir()} == {p.name for p in (tmp_path / "b" / "runs").iterdir()}
    assert cli(capsys, "privacy", private_file, "--xi", "4", "--rules", "momentum", "--seeds", "0-1", "--out", tmp_path / "p",
               "--workers", "1", "--quiet")[0] == 0
    assert {p.name for p in (tmp_path / "p" / "runs").iterdir()} == {"xi4-momentum-s0", "xi4-momentum-s1"}


def test_10_grid_switches_a_variant_as_set_does(scenario_file, tmp_path, capsys):
    raw = make_raw(**{"run.steps": 4, "run.eval_every": 2})
    raw["latency"] = {"dist": "lognormal", "median": 1.0, "sigma": 0.5}
    path = tmp_path / "ln.toml"
    path.write_text(tomli_w.dumps(raw))
    code, _, err = cli(capsys, "sweep", path, "--grid", "latency.dist=lognormal,exponential", "--out", tmp_path / "s", "--workers", "1",
                       "--quiet")
    assert code == 0 and "note: latency.dist 'lognormal' → 'exponential': dropped the file's latency.median, latency.sigma" in err


@pytest.mark.slow
def test_10_tables_are_not_cut_to_80_columns_in_a_pipe(private_file, tmp_path):
    proc = subprocess.run([sys.executable, "-m", "analysis.privacy_sweep", str(private_file), "--xi", "4", "--rules", "momentum",
                           "--out", str(tmp_path / "p"), "--workers", "1"], capture_output=True, text=True, cwd=REPO, timeout=300,
                          env={k: v for k, v in os.environ.items() if k != "COLUMNS"})
    assert proc.returncode == 0, proc.stderr
    assert "…" not in proc.stdout and max(map(len, proc.stdout.splitlines())) > 80


def test_10_findings_report_no_best_xi_when_nothing_learned():
    from analysis.privacy_sweep.spec import Budget, SweepRow
    from analysis.privacy_sweep.tables import findings

    budget = Budget(sigma=1.0, epsilon_target=None, delta=1e-6, accountant="pld", q=0.1, steps=10, clip=1.0, C=10)

    def row(xi: float, acc: float) -> SweepRow:
        return SweepRow(xi=xi, xi_over_C=xi / 10, gamma=1.0, sigma=1.0, epsilon_target=None, epsilon_spent=1.0, delta=1e-6,
                        sampling="poisson", claim="approximation", sampling_rate=0.1, max_participations=None, noise_cohort=10,
                        rule="momentum", seed=0, status="completed", steps=10, participations_max=1.0, participations_mean=1.0,
                        clients_at_cap=None, final_accuracy=acc, final_loss=1.0, bias_exact=0.1, bias_noisy=0.1, bias_momentum=0.1,
                        update_noise_std=0.1, count_noise_std=0.1, run_dir="r", initial_accuracy=0.10)

    lines = findings([row(2.0, 0.11), row(4.0, 0.12)], budget)
    assert lines == ["momentum: did not learn at any ξ (best final accuracy 0.1200, the untrained model's 0.1; learning means "
                     "more than 0.05 above it), so no ξ is best"]
    assert findings([row(2.0, 0.11), row(4.0, 0.60)], budget)[0].startswith("momentum: best final accuracy 0.6000 at ξ = 4")


@pytest.mark.slow
def test_10_the_wheel_ships_the_scenario_library_and_the_repository_a_license(tmp_path):
    assert "Apache License" in (REPO / "LICENSE").read_text() and "Version 2.0" in (REPO / "LICENSE").read_text()
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", str(REPO), "-w", str(tmp_path)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    [wheel] = tmp_path.glob("asyncfl-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    library = {Path(n).name for n in names if n.startswith("asyncfl/scenario_library/")}
    assert library == {p.name for p in (REPO / "scenarios").glob("*.toml")}
    assert "asyncfl/__main__.py" in names
