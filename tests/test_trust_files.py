"""Issue 32, item 6: files received from someone else are data, never orders — as a specification.

* An ownership record (``.asyncfl-owner.json``) lists the run directories a command made; it is
  believed only where it names folders under the output folder's own ``runs/``. A record naming
  anything else (an absolute path, ``..``, a symbolic link leading outside, a path not under
  ``runs/``) is refused naming it, exit 2, and nothing is removed.
* ``--overwrite`` replaces a folder of the same command made from another spec, whatever the
  depth of its run directories.
* ``--extend`` and every reuse of a finished run compare the run's fully resolved scenario and the
  asyncfl that made it with what this command would run, never the spec's text alone.
* Study specs and reports refuse what they cannot mean (repeated seeds, non-numbers, text that is
  not UTF-8, a device or a pipe as the spec) with one message, exit 2.
* Readers of run, sweep and study directories read only regular files, within a size bound, and
  report every damaged file as a RunDirError naming it.

Every command must exit with the stated code and print no traceback. Where a read could hang (a
pipe in place of a file) or the fresh process is the point, it runs as the user runs it
(``python -m …`` in a subprocess, with a timeout: a hang is a failure); elsewhere its ``main``
runs in this process, which tests the same command without an interpreter's start-up.
"""

from __future__ import annotations

import csv
import hashlib
import importlib
import io
import json
import math
import os
import shutil
import subprocess
import sys
import time
import tomllib
import zipfile
from pathlib import Path

import numpy as np
import pytest
import tomli_w
import torch

import asyncfl as package
from analysis.ma_review.design import load_review
from analysis.ma_review.run import COMMAND, KIND  # importing it registers the review's kind of folder
from asyncfl import load_run
from asyncfl.cli.main import main
from asyncfl.components.registry import REGISTRY
from asyncfl.config.scenario import composed
from asyncfl.errors import RunDirError, UsageError
from asyncfl.privacy.aggregator import build_privacy
from asyncfl.privacy.factorization import DIRECT_TERMS, _best_separated_sum, _pattern_sum, _pattern_sum_t
from asyncfl.run import outdir
from asyncfl.run.runner import run_to_dir_blocking

from conftest import make_raw, make_scenario
from test_hostile_commands import scenario_file  # noqa: F401  (the same tiny scenario file, a fixture)

REPO = Path(__file__).resolve().parents[1]


def run(*args: object, timeout: float = 120, cwd: Path = REPO) -> tuple[int, str]:
    """``python ARGS`` with this checkout first on the path: (exit code, stdout + stderr); never a
    traceback."""
    env = {**os.environ, "PYTHONPATH": str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    done = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)
    output = done.stdout + done.stderr
    assert "Traceback" not in output, output
    return done.returncode, output


def asyncfl(*args: object, **kw) -> tuple[int, str]:
    return run("-m", "asyncfl", *args, **kw)


def snapshot(folder: Path) -> dict[str, str]:
    """SHA-256 of every file under ``folder`` (relative path → digest)."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(Path(folder).rglob("*")) if p.is_file() and p.name != ".asyncfl.lock"}


@pytest.fixture
def sentinel(tmp_path) -> Path:
    """A directory outside every output folder, with a file in it: it must survive everything."""
    folder = tmp_path / "precious"
    (folder / "deep").mkdir(parents=True)
    (folder / "deep" / "thesis.tex").write_text("years of work")
    (folder / "notes.txt").write_text("do not delete")
    return folder


def crafted(folder: Path, kind: str, runs: list[str]) -> Path:
    """A folder whose ownership record says ``kind``'s command made it (from another spec) and
    that the run directories ``runs`` are its own."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / ".asyncfl-owner.json").write_text(json.dumps(
        {"version": 1, "kind": kind, "command": "someone else's", "spec_sha256": "0" * 64, "runs": runs}))
    return folder


# ---------------------------------------------------------------------------------------------
# An ownership record is data, not an order
def hostile_records(tmp_path: Path, sentinel: Path) -> list[tuple[list[str], str]]:
    """Records naming something outside the folder's runs/, each with a word of its refusal."""
    return [
        ([str(sentinel)], "not a relative path"),                                   # an absolute path
        ([f"runs/../../{sentinel.name}"], "'..'"),                                    # climbing out
        (["runs/link"], "symbolic link"),                                             # a link leading outside
        (["runs/link/deep"], "symbolic link"),                                        # through a link
        (["results.csv"], "not under runs/"),                                         # not a run directory
        ([".."], "'..'"),
        ([7], "not a path"),
    ]


@pytest.mark.parametrize("case", range(7))
def test_overwrite_refuses_a_record_naming_anything_outside_its_runs(tmp_path, sentinel, case):
    runs, phrase = hostile_records(tmp_path, sentinel)[case]
    out = crafted(tmp_path / "received", "sweep", runs)
    (out / "runs").mkdir()
    (out / "runs" / "link").symlink_to(sentinel, target_is_directory=True)
    outside, inside = snapshot(sentinel), snapshot(out)
    with pytest.raises(RunDirError, match="nothing was removed") as refused:
        outdir.claim(out, "sweep", "asyncfl sweep", "1" * 64, overwrite=True)
    assert phrase in str(refused.value) and ".asyncfl-owner.json" in str(refused.value)
    assert snapshot(sentinel) == outside and snapshot(out) == inside


def test_a_command_never_records_a_run_directory_outside_its_runs(tmp_path, sentinel):
    """A name from a spec (a task called '..') cannot place a run, nor a record entry, outside runs/."""
    out = tmp_path / "sweep"
    owned = outdir.claim(out, "sweep", "asyncfl sweep", "1" * 64)
    try:
        for rel in ("runs/../precious", "runs/a/../../x", "/abs", "elsewhere/run"):
            with pytest.raises(UsageError, match="would write the run directory"):
                owned.add_runs([rel])
        owned.add_runs(["runs/a-b.c_1/T4-s0"])
    finally:
        owned.release()
    assert json.loads((out / ".asyncfl-owner.json").read_text())["runs"] == ["runs/a-b.c_1/T4-s0"]


def test_sweep_overwrite_refuses_a_record_naming_a_directory_outside_out(scenario_file, tmp_path, sentinel, capsys):
    """``asyncfl sweep`` in this process (no read here can block; the refusal is the command's)."""
    out = crafted(tmp_path / "received", "sweep", [str(sentinel), "runs/link"])
    (out / "runs").mkdir()
    (out / "runs" / "link").symlink_to(sentinel, target_is_directory=True)
    outside, inside = snapshot(sentinel), snapshot(out)
    code = main([str(a) for a in ("sweep", scenario_file, "--out", out, "--overwrite", "--workers", "1", "--quiet")])
    output = "".join(capsys.readouterr())
    assert "Traceback" not in output, output
    assert code == 2 and str(sentinel) in output and "nothing was removed" in output, output
    assert snapshot(sentinel) == outside and snapshot(out) == inside


@pytest.mark.slow
def test_review_overwrite_refuses_a_record_naming_a_directory_outside_out(tmp_path, sentinel):
    out = crafted(tmp_path / "received", "ma-review", [str(sentinel)])
    (out / "results.csv").write_text("task\n")
    outside = snapshot(sentinel)
    code, output = run("-m", "analysis.ma_review", REPO / "analysis" / "ma_review_ci.toml", "--out", out, "--overwrite", "--quiet")
    assert code == 2 and str(sentinel) in output and "nothing was removed" in output, output
    assert snapshot(sentinel) == outside and (out / "results.csv").is_file()


def test_overwrite_replaces_a_folder_of_the_same_command_made_from_another_spec(tmp_path):
    """The folder rule: --overwrite removes that command's own files, its run directories at any
    depth (a study's runs/TASK/PRIVACY/K/METHOD/…) and the folders left empty between them."""
    nested = "runs/gaussian/none/K5/fedbuff-sgd/lr2/T12-s0"
    out = crafted(tmp_path / "review", "ma-review", [nested, "runs/gaussian/none/K5/fedbuff-sgd/lr4/T12-s0"])
    for rel in (nested, "runs/gaussian/none/K5/fedbuff-sgd/lr4/T12-s0"):
        (out / rel).mkdir(parents=True)
        (out / rel / "scenario.toml").write_text("name = 'x'\n")
        (out / rel / "summary.json").write_text("{}")
    (out / "results.csv").write_text("task\n")
    (out / "report.md").write_text("# old\n")
    owned = outdir.claim(out, "ma-review", "python -m analysis.ma_review", "1" * 64, overwrite=True)
    owned.release()
    assert sorted(p.name for p in out.iterdir()) == [".asyncfl-owner.json"]
    # a run directory of the command holding a file it does not write is still refused, touching nothing
    out2 = crafted(tmp_path / "review2", "ma-review", [nested])
    (out2 / nested).mkdir(parents=True)
    (out2 / nested / "scenario.toml").write_text("name = 'x'\n")
    (out2 / nested / "mine.txt").write_text("mine")
    (out2 / "runs" / "gaussian" / "stray.txt").write_text("mine")
    before = snapshot(out2)
    with pytest.raises(Exception, match="nothing was removed") as refused:
        outdir.claim(out2, "ma-review", "python -m analysis.ma_review", "1" * 64, overwrite=True)
    assert "mine.txt" in str(refused.value) and "stray.txt" in str(refused.value)
    assert snapshot(out2) == before


# ---------------------------------------------------------------------------------------------
# Readers: a damaged or hostile run directory is a RunDirError naming the file, never a hang
@pytest.fixture
def run_dir(tmp_path) -> Path:

    out = tmp_path / "run"
    run_to_dir_blocking(make_scenario({"run.steps": 6, "run.eval_every": 3}), out)
    return out


def npy(shape: tuple, payload: bytes, descr: str = "<i8") -> bytes:
    """An npy member whose header claims ``shape`` over ``payload`` (written by hand: numpy
    refuses to write a negative shape)."""
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    return buf.getvalue() + payload


def rewrite_counts(run: Path, members: dict[str, bytes]) -> None:
    """``counts.npz`` with some members replaced (the others kept as the run wrote them)."""
    path = run / "counts.npz"
    with zipfile.ZipFile(path) as old:
        kept = {n: old.read(n) for n in old.namelist()}
    kept.update(members)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as new:
        for name, data in kept.items():
            new.writestr(name, data)


def test_an_array_of_negative_shape_is_a_run_dir_error_naming_the_file(run_dir):
    rewrite_counts(run_dir, {"step_time.npy": npy((-1, -2), b"\0" * 16)})
    with pytest.raises(RunDirError, match=r"counts\.npz.*step_time.*\(-1, -2\)"):
        load_run(run_dir).arrays


def test_sparse_counts_claiming_2_to_the_35_rows_are_refused_before_allocating(run_dir):
    def member(array):
        return npy(array.shape, array.astype("<i8").tobytes())


    path = run_dir / "counts.npz"  # the dense layout replaced by sparse entries claiming 2³⁵ steps
    with zipfile.ZipFile(path) as old:
        kept = {n: old.read(n) for n in old.namelist() if n != "by_staleness.npy"}
    kept.update({"by_staleness_entries.npy": member(np.array([[1, 0, 1]])),
                 "by_staleness_shape.npy": member(np.array([2 ** 35, 4]))})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as new:
        for name, data in kept.items():
            new.writestr(name, data)
    run = load_run(run_dir)
    assert run.staleness.steps == 2 ** 35  # the entries themselves are small and readable
    for read in (run.counts, run.W):
        with pytest.raises(RunDirError, match=r"counts\.npz.*more than this machine's memory"):
            read()


PROBE = """
import sys
from asyncfl import load_run
from asyncfl.errors import RunDirError
for folder in sys.argv[1:]:
    run = load_run(folder)
    for what in ("status", "metrics", "updates", "evaluations", "model", "staleness"):
        try:
            value = getattr(run, what)
            value() if callable(value) else value
        except RunDirError as exc:
            print("RunDirError:", exc)
"""

PIPED = ("summary.json", "metrics.csv", "updates.csv", "model.pt", "counts.npz")


def test_a_pipe_in_place_of_a_run_file_is_refused_without_blocking(run_dir, tmp_path):
    """Each file a reader opens, replaced by a FIFO with no writer: refused by name at once."""
    folders = []
    for name in PIPED:
        folder = tmp_path / f"piped-{name}"
        shutil.copytree(run_dir, folder)
        (folder / name).unlink()
        os.mkfifo(folder / name)
        folders.append(folder)
    code, output = run("-c", PROBE, *folders, timeout=60)
    assert code == 0, output
    for folder, name in zip(folders, PIPED):
        assert f"{folder / name}: not a regular file" in output, output
    code, output = asyncfl("compare", folders[0], timeout=60)
    assert code == 2 and "summary.json: not a regular file" in output, output


# ---------------------------------------------------------------------------------------------
# Study specs and reports: what a spec or a table cannot mean is refused, exit 2, naming the field
REVIEW_CI = REPO / "analysis" / "ma_review_ci.toml"
XI_CI = REPO / "analysis" / "privacy_sweep" / "xi_study_ci.toml"


def in_process(capsys, script: str, *args: object) -> tuple[int, str]:
    """``python -m analysis.SCRIPT ARGS`` in this process (the study scripts' ``main``)."""
    code = importlib.import_module(f"analysis.{script}.__main__").main([str(a) for a in args])
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err, out + err
    return code, out + err


def edited(tmp_path: Path, source: Path, **changes: object) -> Path:

    raw = {**tomllib.loads(source.read_text(encoding="utf-8")), **changes}
    path = tmp_path / f"edited-{source.name}"
    path.write_text(tomli_w.dumps(raw), encoding="utf-8")
    return path


@pytest.mark.parametrize("changes, phrase", [
    ({"seeds": [1, 0, 1]}, "seeds: 1 given twice"),
    ({"tuning_seeds": [8, 8]}, "tuning_seeds: 8 given twice"),
    ({"seeds": list(range(99)), "tuning_seeds": [200, 201]}, "101 seeds together; at most 100"),
])
def test_review_check_refuses_seeds_that_cannot_mean_distinct_runs(tmp_path, capsys, changes, phrase):
    code, output = in_process(capsys, "ma_review", edited(tmp_path, REVIEW_CI, **changes), "--out", tmp_path / "o", "--check")
    assert code == 2 and phrase in output, output
    assert not (tmp_path / "o").exists()


def test_xi_study_refuses_repeated_tuning_seeds_before_running_anything(tmp_path, capsys):
    code, output = in_process(capsys, "privacy_sweep.study", "run", edited(tmp_path, XI_CI, tuning_seeds=[5, 77, 5]),
                              "--out", tmp_path / "o")
    assert code == 2 and "tuning_seeds" in output and "5 given twice" in output, output
    assert not (tmp_path / "o").exists()


def test_a_spec_that_is_not_utf8_text_or_is_huge_is_refused_by_name(tmp_path, capsys):
    latin = tmp_path / "latin.toml"
    latin.write_bytes(REVIEW_CI.read_bytes() + "# café\n".encode("latin-1"))
    xi_latin = tmp_path / "xi-latin.toml"
    xi_latin.write_bytes(XI_CI.read_bytes() + "# café\n".encode("latin-1"))
    huge = tmp_path / "huge.toml"
    with open(huge, "wb") as fh:
        fh.truncate(2 << 20)  # sparse: 2 MiB of zeros, twice the bound
    for review_spec, xi_spec, phrase in ((latin, xi_latin, "not UTF-8 text (save it as UTF-8)"),
                                         (huge, huge, "larger than the 1.0 MiB read at most")):
        code, output = in_process(capsys, "ma_review", review_spec, "--out", tmp_path / "o", "--check")
        assert code == 2 and str(review_spec) in output and phrase in output, output
        code, output = in_process(capsys, "privacy_sweep.study", "run", xi_spec, "--out", tmp_path / "o")
        assert code == 2 and str(xi_spec) in output and phrase in output, output
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_a_device_or_a_pipe_as_the_spec_is_refused_without_reading_it(tmp_path):
    """In a subprocess with a timeout: reading /dev/zero or a FIFO without a writer never ends."""
    fifo = tmp_path / "spec.toml"
    os.mkfifo(fifo)
    for spec in ("/dev/zero", fifo):
        code, output = run("-m", "analysis.ma_review", spec, "--out", tmp_path / "o", "--check", timeout=60)
        assert code == 2 and f"{spec}: not a regular file" in output, output
        code, output = run("-m", "analysis.privacy_sweep.study", "run", spec, "--out", tmp_path / "o", timeout=60)
        assert code == 2 and str(spec) in output and "not a regular file" in output, output
    assert not (tmp_path / "o").exists()


def test_collect_without_the_references_tuning_runs_is_refused(tmp_path, capsys):
    empty = tmp_path / "nothing"
    code, output = in_process(capsys, "ma_review", REVIEW_CI, "--out", empty, "--collect", "--quiet")
    assert code == 2 and "holds no python -m analysis.ma_review folder to collect" in output and not empty.exists()
    started = tmp_path / "started"  # a review whose runs have not finished: no target can be fixed
    outdir.claim(started, KIND.name, COMMAND, load_review(REVIEW_CI).digest()).release()
    before = snapshot(started)
    code, output = in_process(capsys, "ma_review", REVIEW_CI, "--out", started, "--collect", "--quiet")
    assert code == 2 and "has no target yet" in output and "sync-momentum" in output, output
    assert snapshot(started) == before


@pytest.mark.parametrize("line, phrase", [
    ("gaussian,four", "column K is 'four', not an integer"),
    ("caf\xe9,4", "not UTF-8 text"),
])
def test_a_report_over_a_damaged_results_csv_is_refused_naming_the_line(tmp_path, capsys, line, phrase):
    review = tmp_path / "review"
    review.mkdir()
    (review / "results.csv").write_bytes(f"task,K\n{line}\n".encode("latin-1"))
    (review / "tuning.csv").write_text("task,K\n")
    code, output = in_process(capsys, "ma_review", "report", "--out", review)
    assert code == 2 and "results.csv" in output and phrase in output, output
    xi = tmp_path / "xi"
    xi.mkdir()
    header = "run_dir,task,role,stage,status,step,accuracy,wall_time,steps,K"
    (xi / "results.csv").write_bytes(f"{header}\nruns/a,{line.split(',')[0]},study,xi,completed,0,0.5,1.0,10,{line.split(',')[1]}\n"
                                     .encode("latin-1"))
    code, output = in_process(capsys, "privacy_sweep.study", "report", xi)
    assert code == 2 and "results.csv" in output and phrase in output, output
    assert sorted(p.name for p in xi.iterdir()) == ["results.csv"]


# ---------------------------------------------------------------------------------------------
# Privacy: the correlated-noise set-up scales to T = k = 6000
def _old_best_separated_sum(values, k, b):
    """The scalar dynamic programme the vectorised one replaced (the independent computation)."""
    T = values.size
    best = np.zeros((k + 1, T + b + 1))
    for j in range(1, k + 1):
        for t in range(T - 1, -1, -1):
            best[j, t] = max(best[j, t + 1], values[t] + best[j - 1, t + b])
    return float(best[k, 0])


def test_the_exact_sensitivity_programme_equals_the_scalar_loop():
    rng = np.random.default_rng(32)
    checked = 0
    for T in (1, 2, 5, 13, 40):
        for k in (1, 2, 3, 7, 50):
            for b in (1, 2, 3, 8):
                for values in (rng.random(T), rng.exponential(size=T) * (rng.random(T) < 0.5), np.ones(T)):
                    assert _best_separated_sum(values, k, b) == pytest.approx(_old_best_separated_sum(values, k, b), rel=1e-12, abs=1e-12)
                    checked += 1
    assert checked == 5 * 5 * 4 * 3


def test_the_optimisers_pattern_sum_equals_the_term_by_term_sum():
    rng = np.random.default_rng(6000)
    for T, terms, b in ((300, 100, 1), (300, 65, 3), (301, 200, 2), (1000, 400, 7), (90, 90, 1)):
        assert terms > DIRECT_TERMS or T < DIRECT_TERMS
        col = np.sort(rng.random(T))[::-1].copy()
        fast = _pattern_sum_t(torch.as_tensor(col), T, terms, b).numpy()
        assert np.allclose(fast, _pattern_sum(col, T, terms, b), rtol=1e-12, atol=1e-12)


def test_the_correlated_noise_set_up_at_t_equal_k_6000_is_quick():
    """Banded noise (one band, b = 1) under k = T = 6000 participations: the exact sensitivity of
    a run whose every client may join every step is √T = √6000 (the all-ones pattern summed)."""
    cls = composed("privacy", tuple(REGISTRY.get(kind, name) for kind, name in (
        ("sampling", "participation-cap"), ("accountant", "pld"), ("counts", "project"), ("noise", "banded"))))
    cfg = cls(enabled=True, epsilon=2.0, gamma=0.2, sampling="participation-cap", max_participations=6000,
              min_separation=1, noise="banded", noise_bands=1, noise_workload="prefix")
    start = time.perf_counter()
    setup, _ = build_privacy(cfg, 5, 100, 6000, 10, 0.5)
    assert time.perf_counter() - start < 20
    assert setup.strategy_sensitivity == pytest.approx(math.sqrt(6000), rel=1e-12)


def test_feddr_with_a_group_larger_than_the_model_runs_as_one_group(tmp_path, capsys):
    """``server.group_size = 5e8`` on the 610 parameters of a 60-feature, 10-class logistic
    regression: one group, the whole model — the same run, to the bit, as ``group_size = 610``."""
    models = []
    for size in (500_000_000, 610):
        out = tmp_path / f"g{size}"
        code = main(["run", str(REPO / "tests" / "golden" / "sync_feddr.toml"), "--out", str(out), "--quiet",
                     "--set", 'server.regularizer="group-lasso"', "--set", "server.reg=0.01",
                     "--set", f"server.group_size={size}", "--set", "run.steps=4", "--set", "run.eval_every=2",
                     "--set", "run.train_loss=false"])
        output = "".join(capsys.readouterr())
        assert code == 0 and "Traceback" not in output, output
        models.append(torch.load(out / "model.pt", weights_only=True))
    assert sum(t.numel() for t in models[0].values()) == 610
    assert all(torch.equal(models[0][k], models[1][k]) for k in models[0])


# ---------------------------------------------------------------------------------------------
# Silently stale: a kept run must be the run this command would make now
def test_extend_runs_again_a_run_made_under_another_resolved_scenario_or_asyncfl(tmp_path, capsys):
    """The issue's case: a default changed between two asyncfl versions (``client.local_steps``
    1 → 3) changes no spec, only the resolved scenario. Simulated by editing the recorded
    ``scenario.toml`` of one finished run back to the old value, and the ``asyncfl_version`` of
    another; ``--extend`` (one seed more) runs both again, saying why, and keeps the third."""
    def asyncfl(*args: object) -> tuple[int, str]:  # in this process: three sweeps, no interpreter start-ups
        code = main([str(a) for a in args])
        output = "".join(capsys.readouterr())
        assert "Traceback" not in output, output
        return code, output

    scenario = tmp_path / "s.toml"
    scenario.write_text(tomli_w.dumps(make_raw(**{"run.steps": 4, "run.eval_every": 2, "client.local_steps": 3})))
    out = tmp_path / "sweep"
    base = ("sweep", scenario, "--out", out, "--workers", "1", "--quiet")
    code, output = asyncfl(*base, "--seeds", "0-2")
    assert code == 0, output
    runs = sorted((out / "runs").iterdir())
    assert len(runs) == 3
    old_default, old_version, kept = runs
    recorded = old_default / "scenario.toml"
    recorded.write_text(recorded.read_text().replace("local_steps = 3", "local_steps = 1"))
    summary = json.loads((old_version / "summary.json").read_text())
    (old_version / "summary.json").write_text(json.dumps({**summary, "asyncfl_version": "0.1.0"}))
    kept_before = snapshot(kept)
    code, output = asyncfl(*base, "--seeds", "0-3", "--extend")
    assert code == 0, output
    assert f"{old_default.name}: run again" in output and "client.local_steps: 1 → 3" in output, output
    assert f"{old_version.name}: run again" in output and f"asyncfl 0.1.0, this is asyncfl {package.__version__}" in output
    assert tomllib.loads(recorded.read_text())["client"]["local_steps"] == 3
    assert json.loads((old_version / "summary.json").read_text())["asyncfl_version"] == package.__version__
    assert {k: v for k, v in snapshot(kept).items() if k != "metrics.png"} == {k: v for k, v in kept_before.items() if k != "metrics.png"}
    with open(out / "results.csv", newline="") as fh:
        messages = {row["name"]: row["message"] for row in csv.DictReader(fh)}
    assert "client.local_steps: 1 → 3" in messages[old_default.name] and messages[kept.name] == ""
    # the same command again: every run is now this command's own, nothing is run again
    before = snapshot(out / "runs")
    code, output = asyncfl(*base, "--seeds", "0-3")
    assert code == 0 and "run again" not in output, output
    assert snapshot(out / "runs") == before


def test_a_pipe_in_place_of_a_sweep_record_is_refused_without_blocking(tmp_path):
    """The same kind elsewhere: every reader of a sweep, study or privacy folder's own records
    (``sweep.toml``, ``privacy_sweep.toml``, a study's tables) reads a regular file, bounded."""
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "results.csv").write_text("name,run_dir\n")
    os.mkfifo(sweep / "sweep.toml")
    probe = ("import sys\nfrom asyncfl import load_sweep\nfrom asyncfl.errors import RunDirError\n"
             "try:\n    load_sweep(sys.argv[1]).spec\nexcept RunDirError as exc:\n    print('RunDirError:', exc)\n")
    code, output = run("-c", probe, sweep, timeout=60)
    assert code == 0 and "sweep.toml: not a regular file" in output, output
    scenario = tmp_path / "s.toml"
    scenario.write_text(tomli_w.dumps(make_raw(**{"run.steps": 4, "run.eval_every": 2})))
    code, output = asyncfl("sweep", scenario, "--out", sweep, "--workers", "1", "--quiet", timeout=60)
    assert code == 2 and "sweep.toml: not a regular file" in output, output
