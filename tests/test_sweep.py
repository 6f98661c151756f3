"""``asyncfl sweep`` and the parallel runner behind it (docs/architecture.md §9).

* The grid is the cartesian product of its axes (the last varying fastest) and the seeds
  (innermost); each point is named by its values and every point is validated before any run.
* Every run of a sweep is the run of that point alone: same files, byte for byte, apart from
  wall times and the figure's legend (it names the directory).
* A sweep is resumable: killed with SIGKILL mid-way, its worker processes (or Ray actors) die
  with it, and the same command finishes it with the files an uninterrupted sweep writes.
* On Ray (a real local instance on the loopback interface), a fixed pool of actors sends each
  run directory back and the driver writes it; a lost worker fails its job alone and is
  replaced, and the pool's actors end with the sweep.
* ``results.csv`` has one row per run, ``summary.csv`` the mean and Student-t 95 % interval
  over seeds per grid point (checked against scipy).
"""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import tomli_w
import torch
from scipy import stats

from asyncfl.cli.main import main
from asyncfl.config import scenario as scenario_mod
from asyncfl.errors import UsageError
from asyncfl.run.parallel import InProcess, RunJob, run_jobs
from asyncfl.run.runner import run_to_dir_blocking
from asyncfl.figures.ci import mean_ci
from asyncfl.studies.sweep.grid import Axis, Grid, labels, parse_grid, parse_seeds, point_name, points

from conftest import make_raw

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def scenario_file(tmp_path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(tomli_w.dumps(make_raw(**{"run.steps": 8, "run.eval_every": 4})))
    return path


def _cli(*args: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-m", "asyncfl.cli", *args], cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def _same_run(a: Path, b: Path) -> None:
    """The files of two run directories agree (wall times and the figure's legend aside)."""
    for name in ("updates.csv", "scenario.toml", "counts.npz", "bias.json"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    ma, mb = torch.load(a / "model.pt", weights_only=True), torch.load(b / "model.pt", weights_only=True)
    assert ma.keys() == mb.keys() and all(torch.equal(ma[k], mb[k]) for k in ma)
    strip = lambda p: [{k: v for k, v in r.items() if k != "wall_time"} for r in csv.DictReader(open(p / "metrics.csv"))]  # noqa: E731
    assert strip(a) == strip(b)
    sa, sb = (json.loads((p / "summary.json").read_text()) for p in (a, b))
    for s in (sa, sb):
        s.pop("wall_time"), s.pop("updates_per_second")
    assert sa == sb


# ---------------------------------------------------------------------------------------------
# the grid
def test_grid_values_are_read_as_toml_and_split_outside_brackets():
    assert parse_grid("server.rule=momentum,ma-light") == Axis("server.rule", ("momentum", "ma-light"))
    assert parse_grid("server.lr=0.1, 1, 3e-2") == Axis("server.lr", (0.1, 1, 0.03))
    assert parse_grid('x.y=[1, 2],"a,b",true') == Axis("x.y", ([1, 2], "a,b", True))
    for bad in ("server.rule", "=1,2", "server.lr=", "server.lr=1,,2", "a..b=1", "server.lr=1,1"):
        with pytest.raises(UsageError):
            parse_grid(bad)


def test_seeds_are_ranges_or_lists():
    assert parse_seeds("0-4") == (0, 1, 2, 3, 4)
    assert parse_seeds("3") == (3,)
    assert parse_seeds("0-2,7,9") == (0, 1, 2, 7, 9)
    for bad in ("", "a", "3-1", "-1", "1,1", "0-2,2"):
        with pytest.raises(UsageError):
            parse_seeds(bad)


def test_points_are_the_cartesian_product_seeds_innermost_and_named_by_their_values():
    axes = (Axis("server.rule", ("momentum", "ma-light")), Axis("server.lr", (0.1, 0.3)))
    got = points(axes, (0, 1))
    assert len(got) == 2 * 2 * 2
    assert [p.seed for p in got[:4]] == [0, 1, 0, 1]
    assert [dict(p.values)["server.lr"] for p in got[:4]] == [0.1, 0.1, 0.3, 0.3]
    short = labels(["server.rule", "server.lr"])
    assert point_name(got[3], short) == "rule=momentum__lr=0.3__seed=1"
    # colliding leaves keep their full path; unsafe characters get a digest of the exact value
    assert labels(["server.beta", "task.beta"]) == {"server.beta": "server.beta", "task.beta": "task.beta"}
    odd = points((Axis("name", ("a/b", "a b")),), (0,))
    names = [point_name(p, labels(["name"])) for p in odd]
    assert len(set(names)) == 2 and all("/" not in n and " " not in n for n in names)


def test_every_point_is_validated_before_anything_runs_naming_the_key(scenario_file, tmp_path, capsys):
    out = tmp_path / "sweep"
    code = main(["sweep", str(scenario_file), "--grid", "server.rul=momentum,sgd", "--seeds", "0-1", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "server.rul: unknown key" in err and "did you mean 'rule'" in err and "Traceback" not in err
    assert not out.exists()
    code = main(["sweep", str(scenario_file), "--grid", "server.lr=0.1,-1", "--out", str(out), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "lr=-1__seed=3: server.lr = -1" in err and not out.exists()


@pytest.mark.slow
def test_ray_without_ray_installed_and_an_address_that_does_not_answer(scenario_file, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as if not installed
    code = main(["sweep", str(scenario_file), "--out", str(tmp_path / "a"), "--ray", "auto", "--quiet"])
    assert code == 2 and "pip install 'asyncfl[ray]'" in capsys.readouterr().err
    monkeypatch.undo()
    started = time.monotonic()
    code = main(["sweep", str(scenario_file), "--out", str(tmp_path / "b"), "--ray", "127.0.0.1:1", "--quiet"])
    assert code == 2 and "no Ray cluster answers there" in capsys.readouterr().err
    assert time.monotonic() - started < 30


# ---------------------------------------------------------------------------------------------
# runs equal the same point run alone
@pytest.mark.slow
def test_a_2x2x2_sweep_on_two_workers_equals_each_point_run_alone(scenario_file, tmp_path):
    out = tmp_path / "sweep"
    assert main(["sweep", str(scenario_file), "--grid", "server.rule=momentum,ma-light", "--grid", "server.lr=0.2,0.5",
                 "--seeds", "0-1", "--out", str(out), "--workers", "2", "--quiet"]) == 0
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert len(rows) == 8 and {r["status"] for r in rows} == {"completed"}
    for row in rows:
        alone = tmp_path / "alone" / row["name"]
        overrides = [f"server.rule={row['server.rule']}", f"server.lr={row['server.lr']}", f"seed={row['seed']}"]
        run_to_dir_blocking(scenario_mod.load(scenario_file, overrides), alone)
        _same_run(alone, out / row["run_dir"])
        assert float(row["loss"]) == json.loads((alone / "summary.json").read_text())["final"]["loss"]
    # rerunning the command keeps every run and rewrites the same tables
    before = (out / "results.csv").read_bytes()
    assert main(["sweep", str(scenario_file), "--grid", "server.rule=momentum,ma-light", "--grid", "server.lr=0.2,0.5",
                 "--seeds", "0-1", "--out", str(out), "--workers", "2", "--quiet"]) == 0
    assert (out / "results.csv").read_bytes() == before


def test_summary_is_the_mean_and_student_t_interval_over_seeds(scenario_file, tmp_path):
    out = tmp_path / "sweep"
    assert main(["sweep", str(scenario_file), "--grid", "server.rule=sgd,momentum", "--seeds", "0-2",
                 "--out", str(out), "--workers", "1", "--quiet"]) == 0
    rows = list(csv.DictReader(open(out / "results.csv")))
    summary = {r["server.rule"]: r for r in csv.DictReader(open(out / "summary.csv"))}
    for rule in ("sgd", "momentum"):
        acc = np.array([float(r["accuracy"]) if r["accuracy"] else math.nan for r in rows if r["server.rule"] == rule])
        loss = np.array([float(r["loss"]) for r in rows if r["server.rule"] == rule])
        half = stats.t.ppf(0.975, 2) * loss.std(ddof=1) / math.sqrt(3)
        assert summary[rule]["runs"] == "3" and summary[rule]["completed"] == "3"
        assert float(summary[rule]["loss_mean"]) == pytest.approx(loss.mean(), rel=1e-12)
        assert float(summary[rule]["loss_ci95"]) == pytest.approx(half, rel=1e-12)
        assert np.isnan(acc).all() and summary[rule]["accuracy_mean"] == ""  # a regression task has no accuracy


def test_the_sweep_summary_interval_is_scipys():
    xs = [0.81, 0.79, 0.84, 0.8, 0.83]
    lo, hi = stats.t.interval(0.95, len(xs) - 1, loc=np.mean(xs), scale=stats.sem(xs))
    ci = mean_ci(xs)
    assert ci.mean == pytest.approx(np.mean(xs), rel=1e-15) and (ci.low, ci.high) == pytest.approx((lo, hi), rel=1e-12)
    assert mean_ci([1.0, math.nan, float("inf")]).n == 1 and math.isnan(mean_ci([2.0]).half)


@pytest.mark.slow
def test_a_diverging_point_is_recorded_and_the_others_run(scenario_file, tmp_path):
    out = tmp_path / "sweep"
    assert main(["sweep", str(scenario_file), "--grid", "server.lr=0.3,1e4", "--set", "server.rule=sgd",
                 "--set", "run.divergence_loss=1e6", "--set", "run.eval_every=1", "--out", str(out), "--quiet"]) == 3  # a run diverged: exit 3, the others ran
    rows = {r["server.lr"]: r for r in csv.DictReader(open(out / "results.csv"))}
    assert rows["0.3"]["status"] == "completed"
    assert rows["10000.0"]["status"] == "diverged" and "diverged at server step" in rows["10000.0"]["message"]


@pytest.mark.slow
def test_a_changed_grid_is_refused_and_extend_adds_points(scenario_file, tmp_path, capsys):
    out = tmp_path / "sweep"
    base = ["sweep", str(scenario_file), "--out", str(out), "--workers", "1", "--quiet"]
    assert main([*base, "--grid", "server.rule=sgd,momentum"]) == 0
    first = {p.name: (p / "updates.csv").read_bytes() for p in (out / "runs").iterdir()}
    assert main([*base, "--grid", "server.rule=sgd,nesterov"]) == 2
    assert "holds the results of another asyncfl sweep (made by: asyncfl sweep" in capsys.readouterr().err
    assert main([*base, "--grid", "server.rule=sgd,nesterov", "--extend"]) == 2  # momentum would be lost
    assert main([*base, "--grid", "server.rule=sgd,momentum,nesterov", "--extend"]) == 0
    rows = list(csv.DictReader(open(out / "results.csv")))
    assert [r["server.rule"] for r in rows] == ["sgd", "momentum", "nesterov"]
    assert all((out / "runs" / n / "updates.csv").read_bytes() == b for n, b in first.items())  # kept as they were


def test_a_directory_that_is_not_a_sweep_is_refused(scenario_file, tmp_path, capsys):
    out = tmp_path / "x"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert main(["sweep", str(scenario_file), "--out", str(out), "--quiet"]) == 2
    assert "not a folder asyncfl sweep made" in capsys.readouterr().err and (out / "notes.txt").read_text() == "mine"


# ---------------------------------------------------------------------------------------------
# killed and resumed
def _children(pid: int) -> set[int]:
    out = subprocess.run(["pgrep", "-P", str(pid)], capture_output=True, text=True).stdout
    return {int(x) for x in out.split()}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie is dead
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_sigkill_of_the_driver_kills_its_workers_and_the_same_command_resumes(tmp_path):
    scenario = tmp_path / "s.toml"
    # server.lr = 0.1, client.lr = 0.002: every run completes (at the base's all six diverged at step 10, which a
    # sweep that exited 0 whatever happened hid)
    scenario.write_text(tomli_w.dumps(make_raw(**{"run.steps": 150, "run.eval_every": 10, "run.checkpoint_every": 10,
                                                  "task.dim": 30, "task.samples_per_client": 200, "server.lr": 0.1,
                                                  "client.lr": 0.002})))
    args = ["sweep", str(scenario), "--grid", "server.rule=momentum,ma-light,nesterov", "--seeds", "0-1", "--workers", "2", "--quiet"]
    ref = tmp_path / "ref"
    assert main([*args, "--out", str(ref)]) == 0
    out = tmp_path / "killed"
    proc = _cli(*args, "--out", str(out))
    deadline = time.monotonic() + 120
    workers: set[int] = set()
    while time.monotonic() < deadline and proc.poll() is None:
        workers |= _children(proc.pid)
        if len(list(out.glob("runs/*/checkpoint.pt"))) >= 2:
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep finished before it could be killed"
    workers |= _children(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(w) for w in workers):
        time.sleep(0.05)
    assert workers and not [w for w in workers if _alive(w)], "a worker outlived the driver"
    assert main([*args, "--out", str(out)]) == 0
    for run in (ref / "runs").iterdir():
        _same_run(run, out / "runs" / run.name)
    strip = lambda p: [{k: v for k, v in r.items() if k not in ("wall_time", "updates_per_second")} for r in csv.DictReader(open(p))]  # noqa: E731
    assert strip(ref / "results.csv") == strip(out / "results.csv")


# ---------------------------------------------------------------------------------------------
# Ray
@pytest.mark.slow
def test_a_sweep_on_ray_ships_run_directories_back_over_loopback(scenario_file, tmp_path, monkeypatch):
    import ray  # a test dependency; conftest.py sets RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 before it is imported

    assert os.environ["RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"] == "0"
    ray.init(num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        assert ray.util.get_node_ip_address().startswith("127.")
        out = tmp_path / "sweep"
        assert main(["sweep", str(scenario_file), "--grid", "server.rule=momentum,ma-light", "--seeds", "0-1",
                     "--out", str(out), "--ray", "auto", "--quiet"]) == 0
        assert _cpus_freed(ray, 2.0), "the sweep's actors outlived it"
    finally:
        ray.shutdown()
    for row in csv.DictReader(open(out / "results.csv")):
        alone = tmp_path / "alone" / row["name"]
        run_to_dir_blocking(scenario_mod.load(scenario_file, [f"server.rule={row['server.rule']}", f"seed={row['seed']}"]), alone)
        _same_run(alone, out / row["run_dir"])


def _cpus_freed(ray, cpus: float) -> bool:
    deadline = time.monotonic() + 20  # ray.kill is asynchronous
    while time.monotonic() < deadline:
        if ray.available_resources().get("CPU", 0) == cpus:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.slow
def test_a_lost_ray_worker_fails_its_job_alone_and_is_replaced(scenario_file, tmp_path, monkeypatch):
    """One actor (one CPU): the job whose worker process dies fails with "Ray worker lost", the
    next job runs on a fresh actor; a directory too large to send fails that job alone; closing
    the pool gives the caller's session its CPU back."""
    import ray

    from asyncfl.run import parallel
    from asyncfl.run.parallel import RayPool

    def die(out: Path) -> None:  # a nested function: Ray pickles it by value for the worker
        os._exit(3)

    scenario = scenario_mod.load(scenario_file)
    big = tmp_path / "big"
    big.mkdir()
    (big / "notes.bin").write_bytes(b"x" * 100)
    jobs = [RunJob("a", scenario, tmp_path / "a"), RunJob("b", scenario.replace(seed=1), tmp_path / "b", after=die),
            RunJob("c", scenario.replace(seed=2), tmp_path / "c"), RunJob("big", scenario, big)]
    monkeypatch.setattr(parallel, "SHIPPED_LIMIT", 50)  # in the driver only: the worker sends back more
    ray.init(num_cpus=1, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    try:
        pool = RayPool("auto")
        try:
            assert pool.slots == 1
            got = {o.name: o for o in run_jobs(jobs, pool)}
        finally:
            pool.close()
        assert _cpus_freed(ray, 1.0), "the pool's actor outlived close()"
        assert ray.is_initialized()  # a session the caller started is left to the caller
    finally:
        ray.shutdown()
    assert got["a"].status == got["c"].status == "completed"
    assert got["b"].status == "failed" and "Ray worker lost" in got["b"].message and not (tmp_path / "b").exists()
    assert got["big"].status == "failed" and "could not send the run directory" in got["big"].message
    alone = tmp_path / "alone"
    run_to_dir_blocking(scenario.replace(seed=2), alone)
    _same_run(alone, tmp_path / "c")


def _descendants(pid: int) -> set[int]:
    found = _children(pid)
    for child in list(found):
        found |= _descendants(child)
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


#: Ray's own node agents: after a SIGKILL of the driver they notice their raylet is gone and
#: exit by themselves, a minute or two later (they run no job)
RAY_AGENTS = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")


@pytest.mark.slow
def test_sigkill_of_a_ray_sweep_driver_ends_its_actors_and_the_same_command_finishes(tmp_path):
    quickstart = REPO / "scenarios" / "quickstart.toml"
    args = ["sweep", str(quickstart), "--set", "run.steps=100", "--seeds", "0-5",
            "--ray", "auto", "--workers", "2", "--quiet", "--out", str(tmp_path / "out")]
    proc = _cli(*args)
    deadline = time.monotonic() + 120
    seen: set[int] = set()
    while time.monotonic() < deadline and proc.poll() is None:
        seen |= _descendants(proc.pid)
        if list((tmp_path / "out").glob("runs/*/summary.json")):
            break
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep finished before it could be killed"
    seen |= _descendants(proc.pid)
    names = {pid: _cmdline(pid) for pid in seen}
    assert sum(n.startswith("ray::RunWorker") for n in names.values()) == 2, names
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    watched = [pid for pid, name in names.items() if not name.startswith(RAY_AGENTS)]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and any(_alive(p) for p in watched):
        time.sleep(0.1)
    assert not [names[p] for p in watched if _alive(p)], "a Ray process outlived the driver"
    assert main(args) == 0  # the runs lost with the workers run again; the finished ones are kept
    rows = list(csv.DictReader(open(tmp_path / "out" / "results.csv")))
    assert len(rows) == 6 and {r["status"] for r in rows} == {"completed"}
    row = rows[-1]
    alone = tmp_path / "alone"
    run_to_dir_blocking(scenario_mod.load(quickstart, ["run.steps=100", f"seed={row['seed']}"]), alone)
    _same_run(alone, tmp_path / "out" / row["run_dir"])


def test_shipping_a_run_directory_resumes_it_where_the_driver_left_it(scenario_file, tmp_path):
    """What a Ray worker does, without Ray: the driver's files in, the finished files out."""
    from asyncfl.run.parallel import pack, run_shipped, unpack

    scenario = scenario_mod.load(scenario_file, ["run.checkpoint_every=2", "run.steps=8"])
    ref = tmp_path / "ref"
    run_to_dir_blocking(scenario, ref)
    out = tmp_path / "out"
    calls = [0]

    def stop() -> bool:
        calls[0] += 1
        return calls[0] > 12

    from asyncfl.errors import RunInterrupted
    from asyncfl.run.runner import run_to_dir
    import asyncio

    with pytest.raises(RunInterrupted):
        asyncio.run(run_to_dir(scenario, out, should_stop=stop))
    outcome, files = run_shipped(RunJob("x", scenario, out), pack(out))
    unpack(files, out)
    assert outcome.status == "completed"
    _same_run(ref, out)


def test_in_process_backend_reads_finished_runs_back(scenario_file, tmp_path):
    scenario = scenario_mod.load(scenario_file)
    jobs = [RunJob("a", scenario, tmp_path / "a"), RunJob("b", scenario.replace(seed=9), tmp_path / "b")]
    first = run_jobs(jobs, InProcess())
    again = run_jobs(jobs, InProcess())
    assert [o.status for o in first] == ["completed"] * 2 and not any(o.reused for o in first)
    assert all(o.reused for o in again)


def test_a_point_whose_rule_does_not_own_a_varied_key_drops_it_with_a_note(scenario_file, tmp_path, capsys):
    """``--grid server.rule=momentum,clip --grid server.clip_tau=0.05,2`` (docs/extending.md §5):
    the momentum points have no ``clip_tau``; they run without it (each equal to momentum run
    alone), the clip points with it, and the sweep says so once. A varied key no component owns is
    still refused."""
    out = tmp_path / "sweep"
    assert main(["sweep", str(scenario_file), "--grid", "server.rule=momentum,clip", "--grid", "server.clip_tau=0.05,2",
                 "--seeds", "0", "--out", str(out), "--workers", "1", "--quiet"]) == 0
    err = capsys.readouterr().err
    assert err.count("server.clip_tau is a key of 'clip', which 2 of the 4 points do not name") == 1, err
    rows = {r["name"]: r for r in csv.DictReader(open(out / "results.csv"))}
    assert len(rows) == 4 and {r["status"] for r in rows.values()} == {"completed"}
    for name, overrides in (("rule=momentum__clip_tau=2__seed=0", ["server.rule=momentum"]),
                            ("rule=clip__clip_tau=0.05__seed=0", ["server.rule=clip", "server.clip_tau=0.05"])):
        alone = tmp_path / "alone" / name
        run_to_dir_blocking(scenario_mod.load(scenario_file, [*overrides, "seed=0"]), alone)
        _same_run(alone, out / rows[name]["run_dir"])
    a, b = (torch.load(out / rows[f"rule=clip__clip_tau={t}__seed=0"]["run_dir"] / "model.pt", weights_only=True) for t in ("0.05", "2"))
    assert any(not torch.equal(a[k], b[k]) for k in a)  # the clip points did use their τ
    code = main(["sweep", str(scenario_file), "--grid", "server.rule=momentum,clip", "--grid", "server.clip_ta=1,2",
                 "--out", str(tmp_path / "typo"), "--quiet"])
    assert code == 2 and "server.clip_ta: unknown key" in capsys.readouterr().err
