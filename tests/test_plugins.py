"""A plug-in package that is not part of the repository, installed with pip, works everywhere a
built-in does (docs/extending.md; issue "an open simulator").

``examples/plugin`` is installed with ``pip install --target`` into a folder of its own, which the
commands see through ``PYTHONPATH`` (so "uninstalling" it is running without that folder). It
adds a task with its own CNN and data file, a server rule with a hyper-parameter and state, a
latency model and a local solver; the checks below run the real CLI in subprocesses:

* ``asyncfl run`` on a scenario naming the four, with ``components.json`` naming the package
  and its version;
* ``asyncfl sweep --grid server.rule=momentum,clipped-momentum --seeds 0-1 --workers 2``, each run
  equal, byte for byte, to that point run alone;
* a SIGKILLed run resumed with ``asyncfl resume`` to the uninterrupted run's files;
* after uninstalling the package, or changing the task's data file, ``resume`` exits 2 naming
  what is missing or changed and touches no file.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
PLUGIN = ROOT / "examples" / "plugin"
ASYNCFL = [sys.executable, "-m", "asyncfl"]

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example plug-in pip-installed into a folder of its own (no network, no build isolation)."""
    target = tmp_path_factory.mktemp("site")
    build = tmp_path_factory.mktemp("src") / "plugin"
    shutil.copytree(PLUGIN, build, ignore=shutil.ignore_patterns("*.npz", "__pycache__", "*.egg-info", "build"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(build)], check=True, capture_output=True, timeout=300)
    return target


@pytest.fixture(scope="module")
def data(installed: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("data")
    subprocess.run([sys.executable, "-m", "asyncfl_example_plugin.make_data", str(folder / "blobs.npz")],
                   env=_env(installed), check=True, timeout=120)
    shutil.copy(PLUGIN / "scenario.toml", folder / "scenario.toml")
    return folder


def _env(site: Path | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if site is not None:
        env["PYTHONPATH"] = str(site)
    return env


def _asyncfl(args: list[str], site: Path | None, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*ASYNCFL, *args], env=_env(site), capture_output=True, text=True, timeout=600, **kwargs)


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir()) if p.is_file()}


def _same_run(a: Path, b: Path) -> None:
    assert (a / "updates.csv").read_bytes() == (b / "updates.csv").read_bytes()
    ma, mb = torch.load(a / "model.pt", weights_only=True), torch.load(b / "model.pt", weights_only=True)
    assert ma.keys() == mb.keys() and all(torch.equal(ma[k], mb[k]) for k in ma)


def test_run_names_the_plugins_and_their_version(installed: Path, data: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    done = _asyncfl(["run", str(data / "scenario.toml"), "--out", str(out)], installed)
    assert done.returncode == 0, done.stderr
    record = json.loads((out / "components.json").read_text())
    by_kind = {c["kind"]: c for c in record["components"]}
    for kind, name in (("task", "blob-cnn"), ("rule", "clipped-momentum"), ("latency", "weibull"), ("solver", "clipped-sgd")):
        assert by_kind[kind]["name"] == name
        assert by_kind[kind]["origin"] == {"source": "package", "module": "asyncfl_example_plugin",
                                           "package": "asyncfl-example-plugin", "version": "0.1.0"}
    assert by_kind["protocol"]["origin"]["source"] == "builtin"
    assert len(by_kind["task"]["fingerprint"]["data"]) == 64
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["rule"] == "clipped-momentum" and summary["task"] == "blob-cnn"
    # the CNN learns the writers' blobs: 4 classes, chance is 0.25
    assert summary["final"]["accuracy"] > 0.5


def test_sweep_over_a_plugin_rule_on_two_workers_equals_each_point_run_alone(installed: Path, data: Path, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    done = _asyncfl(["sweep", str(data / "scenario.toml"), "--grid", "server.rule=momentum,clipped-momentum",
                     "--seeds", "0-1", "--workers", "2", "--out", str(sweep), "--quiet"], installed)
    assert done.returncode == 0, done.stderr
    runs = sorted(p.parent for p in sweep.rglob("summary.json") if p.parent != sweep)
    assert len(runs) == 4
    for run in runs:
        scenario = (run / "scenario.toml").read_text()
        rule = "clipped-momentum" if 'rule = "clipped-momentum"' in scenario else "momentum"
        seed = 1 if "seed = 1" in scenario else 0
        alone = tmp_path / f"alone-{rule}-{seed}"
        args = ["run", str(data / "scenario.toml"), "--set", f"server.rule={rule!r}".replace("'", '"'),
                "--set", f"seed={seed}", "--out", str(alone)]
        point = _asyncfl(args, installed)
        assert point.returncode == 0, point.stderr
        _same_run(run, alone)


def test_sweep_over_the_plugin_protocol_counts_its_own_drop_reason(installed: Path, data: Path, tmp_path: Path) -> None:
    """The example protocol (``deadline``, its own drop reason) runs from the installed package
    in a sweep's worker processes; a tighter deadline drops more uploads, each counted under its
    reason in ``summary.json`` and ``updates.csv``."""
    sweep = tmp_path / "sweep"
    done = _asyncfl(["sweep", str(data / "scenario.toml"), "--set", 'server.protocol="deadline"', "--unset",
                     "server.max_staleness", "--set", "run.steps=10", "--grid", "server.deadline=0.5,3.0", "--seeds", "0",
                     "--workers", "2", "--out", str(sweep), "--quiet"], installed)
    assert done.returncode == 0, done.stderr
    dropped = {}
    for summary in sweep.rglob("summary.json"):
        if summary.parent == sweep:
            continue
        record = json.loads(summary.read_text())
        deadline = 0.5 if "deadline = 0.5" in (summary.parent / "scenario.toml").read_text() else 3.0
        rows = (summary.parent / "updates.csv").read_text().count(",deadline,")
        assert record["status"] == "completed" and record["updates_dropped_deadline"] == rows
        dropped[deadline] = rows
    assert set(dropped) == {0.5, 3.0} and dropped[0.5] > dropped[3.0]


def test_sigkilled_run_resumes_to_the_uninterrupted_files(installed: Path, data: Path, tmp_path: Path) -> None:
    whole, killed = tmp_path / "whole", tmp_path / "killed"
    args = ["--set", "run.steps=200", "--set", "run.checkpoint_every=10"]
    assert _asyncfl(["run", str(data / "scenario.toml"), *args, "--out", str(whole)], installed).returncode == 0
    proc = subprocess.Popen([*ASYNCFL, "run", str(data / "scenario.toml"), *args, "--out", str(killed)],
                            env=_env(installed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (killed / "checkpoint.pt").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert (killed / "checkpoint.pt").exists()
    done = _asyncfl(["resume", str(killed)], installed)
    assert done.returncode == 0, done.stderr
    _same_run(killed, whole)


def _interrupted(installed: Path, data: Path, out: Path) -> Path:
    """A run stopped by SIGINT after its first checkpoint (exit 130), ready to resume."""
    proc = subprocess.Popen([*ASYNCFL, "run", str(data / "scenario.toml"), "--set", "run.steps=400",
                             "--set", "run.checkpoint_every=5", "--out", str(out)],
                            env=_env(installed), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while not (out / "checkpoint.pt").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=120) == 130
    return out


def test_resume_without_the_plugin_exits_2_naming_it_and_touches_nothing(installed: Path, data: Path, tmp_path: Path) -> None:
    out = _interrupted(installed, data, tmp_path / "run")
    before = _digests(out)
    done = _asyncfl(["resume", str(out)], None)  # the package is not on the path: uninstalled
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "'clipped-momentum' came from package asyncfl-example-plugin 0.1.0" in done.stderr
    assert "'blob-cnn' came from package asyncfl-example-plugin 0.1.0" in done.stderr
    assert _digests(out) == before


def test_resume_on_changed_data_exits_2_naming_it_and_touches_nothing(installed: Path, data: Path, tmp_path: Path) -> None:
    own = tmp_path / "data"
    shutil.copytree(data, own)
    out = _interrupted(installed, own, tmp_path / "run")
    before = _digests(out)
    subprocess.run([sys.executable, "-c", "from asyncfl_example_plugin.make_data import make; "
                    f"make({str(own / 'blobs.npz')!r}, seed=1)"], env=_env(installed), check=True, timeout=120)
    done = _asyncfl(["resume", str(out)], installed)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr
    assert "task.name = 'blob-cnn': its data differ from the data the run started on" in done.stderr
    assert _digests(out) == before


def test_resume_on_edited_plugin_code_exits_2_naming_the_file_and_the_flag_accepts_it(installed: Path, data: Path,
                                                                                     tmp_path: Path) -> None:
    """The package's version is unchanged; one installed file of it is edited (as an editable
    install would be): the digest of that file, recorded from the installed RECORD, differs."""
    site = tmp_path / "site"
    shutil.copytree(installed, site)
    out = _interrupted(site, data, tmp_path / "run")
    record = json.loads((out / "components.json").read_text())
    rule = next(c for c in record["components"] if c["kind"] == "rule")
    assert rule["code"]["basis"] == "installed"
    assert rule["code"]["files"]["asyncfl_example_plugin/rule.py"] == \
        hashlib.sha256((site / "asyncfl_example_plugin" / "rule.py").read_bytes()).hexdigest()
    source = site / "asyncfl_example_plugin" / "rule.py"
    source.write_text(source.read_text() + "\n# edited after the run started\n")
    before = _digests(out)
    done = _asyncfl(["resume", str(out)], site)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "asyncfl_example_plugin/rule.py (changed)" in done.stderr and "--accept-changed-code" in done.stderr
    assert _digests(out) == before
    done = _asyncfl(["resume", str(out), "--accept-changed-code", "--quiet"], site)
    assert done.returncode == 0, done.stderr
    accepted = json.loads((out / "components.json").read_text())["accepted_code_changes"]
    assert {a["name"] for a in accepted} >= {"clipped-momentum"}
    assert all(a["files"] == ["asyncfl_example_plugin/rule.py (changed)"] for a in accepted)


def recipe() -> list[str]:
    """The commands of docs/extending.md's "Installing your package beside a checkout"."""
    import re

    text = (ROOT / "docs" / "extending.md").read_text(encoding="utf-8")
    section = text[text.index("**Installing your package beside a checkout.**"):]
    block = re.search(r"```bash\n(.*?)```", section, flags=re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip() and not line.startswith("#")]


def test_the_install_recipe_works_as_written_in_a_fresh_venv_beside_a_checkout(tmp_path: Path) -> None:
    """The recipe, run line by line with bash from a checkout whose ``.venv`` is this test's
    environment: a fresh environment sees that asyncfl, gets the example package installed
    offline, and validates (naming where each component came from) and runs its scenario."""
    checkout = tmp_path / "checkout"
    (checkout / "examples").mkdir(parents=True)
    (checkout / ".venv").symlink_to(Path(sys.prefix))
    shutil.copytree(PLUGIN, checkout / "examples" / "plugin",
                    ignore=shutil.ignore_patterns("*.npz", "__pycache__", "*.egg-info", "build"))
    commands = recipe()
    assert commands[0].startswith("python3 -m venv --without-pip ../lab-venv") and len(commands) == 6
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PIP_REQUIRE_VIRTUALENV")}
    done = []
    for command in commands:
        # python3 is the interpreter this environment was made from (CI: the one that made .venv)
        line = command.replace("python3 -m venv", f"{sys._base_executable} -m venv", 1)
        done.append(subprocess.run(["bash", "-ec", line], cwd=checkout, env=env, capture_output=True, text=True, timeout=600))
        assert done[-1].returncode == 0, (command, done[-1].stderr[-2000:])
    assert not (tmp_path / "lab-venv" / "bin" / "pip").exists()  # the checkout's pip did the install
    validated = done[4].stdout
    assert "server.rule = 'clipped-momentum': package asyncfl-example-plugin 0.1.0" in validated
    assert "task.name = 'blob-cnn': package asyncfl-example-plugin 0.1.0" in validated
    assert "client.update_hook = 'none': built into asyncfl" in validated
    run = tmp_path / "lab-runs" / "first"
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    components = json.loads((run / "components.json").read_text())
    assert "asyncfl-example-plugin" in json.dumps(components)
