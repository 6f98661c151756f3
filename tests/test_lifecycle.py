"""How an ``asyncfl`` process loads a command and how it ends (asyncfl/lifecycle.py;
docs/performance.md, "Start-up"): the garbage collector paused while torch and the engine load
for the first time, then what they made frozen; at the end, what a normal exit does that anyone
can observe (``atexit`` handlers, the standard streams flushed, the status; a thread still
running is joined), without the interpreter's teardown. Each in a fresh interpreter, so that this
one's collector and exit stay as they are."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from asyncfl.cli.main import main

REPO = Path(__file__).resolve().parents[1]


def _python(code: str, **kw) -> subprocess.CompletedProcess:
    """``python -c code`` in the repository; its output captured unless ``kw`` says where it goes."""
    kw = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **kw}
    return subprocess.run([sys.executable, "-c", code], cwd=REPO, text=True, timeout=120, **kw)


LOADING = ("import gc, sys\n"
           "from asyncfl.lifecycle import loading\n"
           "{before}"
           "with loading():\n"
           "    inside = gc.isenabled()\n"
           "print(inside, gc.isenabled(), gc.get_freeze_count() > 0)")


def test_loading_pauses_the_collector_then_freezes_what_the_imports_made():
    proc = _python(LOADING.format(before=""))
    assert proc.stdout.split() == ["False", "True", "True"], proc.stderr


def test_loading_leaves_a_process_that_has_torch_already_alone():
    proc = _python(LOADING.format(before="sys.modules['torch'] = type(sys)('torch')  # as a test session has it\n"))
    assert proc.stdout.split() == ["True", "True", "False"], proc.stderr


def test_leave_runs_the_atexit_handlers_flushes_stdout_and_exits_with_the_code():
    proc = _python("import atexit, sys\n"
                   "from asyncfl.lifecycle import leave\n"
                   "atexit.register(print, 'handler ran')\n"
                   "sys.stdout.write('buffered, no newline; ')\n"
                   "leave(3)")
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout == "buffered, no newline; handler ran\n"


def test_leave_skips_the_interpreter_teardown():
    """An object that lives until the end is not finalized at shutdown (a normal exit would run
    its ``__del__`` while tearing the modules down): the teardown is what :func:`leave` saves."""
    code = ("class Noisy:\n"
            "    def __del__(self):\n"
            "        print('torn down', flush=True)\n"
            "kept = Noisy()\n")
    assert _python(code + "import sys; sys.exit(0)").stdout == "torn down\n"  # what is skipped
    proc = _python(code + "from asyncfl.lifecycle import leave; leave(0)")
    assert proc.returncode == 0 and proc.stdout == "", proc.stderr


def test_leave_exits_normally_while_a_non_daemon_thread_runs_so_it_finishes():
    proc = _python("import threading, time\n"
                   "from asyncfl.lifecycle import leave\n"
                   "threading.Thread(target=lambda: (time.sleep(0.3), print('thread finished', flush=True))).start()\n"
                   "leave(5)")
    assert proc.returncode == 5 and proc.stdout == "thread finished\n", proc.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
def test_a_failed_flush_of_stdout_exits_120_as_python_does():
    """Buffered output to a full disk (``/dev/full``): the write succeeds, the flush at exit fails."""
    write = "import sys; sys.stdout.write('x' * 10); "
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with open("/dev/full", "w") as full:
        plain = _python(write + "sys.exit(0)", stdout=full, stderr=subprocess.PIPE, env=env)
        left = _python(write + "from asyncfl.lifecycle import leave; leave(0)", stdout=full, stderr=subprocess.PIPE, env=env)
    assert plain.returncode == left.returncode == 120


@pytest.mark.slow
def test_asyncfl_run_as_a_command_writes_the_files_main_writes_in_process(tmp_path):
    """``python -m asyncfl run`` (which leaves through :func:`leave`) and :func:`main` in this
    process (which returns) write the same run directory, byte for byte (``metrics.csv`` and
    ``summary.json`` hold wall-clock times)."""
    argv = ["run", str(REPO / "scenarios" / "quickstart.toml"), "--set", "run.steps=5", "--quiet"]
    command = subprocess.run([sys.executable, "-m", "asyncfl", *argv, "--out", str(tmp_path / "command")], cwd=REPO,
                             capture_output=True, text=True, timeout=300)
    assert command.returncode == 0, command.stderr
    assert main([*argv, "--out", str(tmp_path / "in_process")]) == 0
    written = sorted(p.name for p in (tmp_path / "in_process").iterdir())
    assert sorted(p.name for p in (tmp_path / "command").iterdir()) == written
    assert {"bias.json", "metrics.png", "model.pt", "updates.csv", "summary.json"} <= set(written)
    for name in set(written) - {"metrics.csv", "summary.json"}:
        assert (tmp_path / "command" / name).read_bytes() == (tmp_path / "in_process" / name).read_bytes(), name
