"""Every command and code block of docs/extending.md runs as written (issue 33 item 6).

The fenced blocks are read in order and run in one scratch folder holding a copy of the
repository's ``examples/`` and ``scenarios/``, with the example plug-in pip-installed into a
folder of its own (as tests/test_plugins.py does):

* ``bash`` blocks: each line a command. ``asyncfl …`` and ``python -m …`` run in a subprocess
  that sees the installed plug-in and this source tree; ``pip install`` is done by the fixture
  (listed, not run again). Every command must exit 0.
* ``python`` blocks run in one shared namespace, in order (a later block may use what an earlier
  one defined); components they register are unregistered afterwards.
* ``toml`` blocks: an entry-point table names the group asyncfl reads and an object that
  exists; any other block is a scenario fragment, merged into the tiny test scenario and
  validated.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from asyncfl.components import allow
from asyncfl.components.registry import ENTRY_POINT_GROUP, REGISTRY, unregister
from asyncfl.config import scenario as sc

from conftest import make_raw

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "extending.md"
# done by the fixture; the install recipe's lines (a fresh venv beside a checkout) are run as written
# by tests/test_plugins.py
NOT_RUN = ("pip install ./examples/plugin", "python3 -m venv", ".venv/bin/python", "../lab-venv/bin/python")

pytestmark = pytest.mark.slow


def blocks() -> list[tuple[str, str]]:
    """``(language, text)`` of every fenced block, in order (an indented block is dedented)."""
    out = []
    for m in re.finditer(r"^( *)```(\w+)\n(.*?)^\1```", DOC.read_text(encoding="utf-8"), flags=re.S | re.M):
        indent = len(m.group(1))
        out.append((m.group(2), "\n".join(line[indent:] for line in m.group(3).splitlines())))
    return out


def test_the_page_has_blocks_of_every_kind_it_runs():
    languages = [lang for lang, _ in blocks()]
    assert set(languages) == {"python", "bash", "toml"}, languages
    assert languages.count("python") >= 6 and languages.count("bash") >= 2


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """A scratch folder with examples/ and scenarios/, the plug-in installed in ``site``; the
    Python blocks see it on sys.path; what they register is unregistered afterwards."""
    work, site = tmp_path / "work", tmp_path / "site"
    shutil.copytree(ROOT / "examples", work / "examples",
                    ignore=shutil.ignore_patterns("*.npz", "__pycache__", "*.egg-info", "build"))
    shutil.copytree(ROOT / "scenarios", work / "scenarios")
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(site), str(work / "examples" / "plugin")], check=True, capture_output=True, timeout=300)
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(site))
    monkeypatch.delenv(allow.ENV, raising=False)  # a block may allow modules: for this test only
    before = {kind: set(REGISTRY.names(kind)) for kind in REGISTRY._by_kind}
    yield work, site
    for kind, names in before.items():
        for name in set(REGISTRY.names(kind)) - names:
            unregister(kind, name)
    allow.reset()
    for module in [m for m in sys.modules if m.startswith("asyncfl_example_plugin")]:
        del sys.modules[module]


def _command(line: str, work: Path, site: Path) -> subprocess.CompletedProcess:
    words = shlex.split(line)
    assigned = {}
    while words and re.fullmatch(r"[A-Z_]+=\S*", words[0]):  # VAR=value before the command
        name, _, value = words.pop(0).partition("=")
        assigned[name] = value
    if words[0] == "asyncfl":
        argv = [sys.executable, "-m", "asyncfl", *words[1:]]
    elif words[:2] == ["python", "-m"]:
        argv = [sys.executable, *words[1:]]
    else:
        raise AssertionError(f"docs/extending.md: a command this test does not know how to run: {line!r}")
    env = {**os.environ, **assigned, "PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}
    done = subprocess.run(argv, cwd=work, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
    return done


def _toml(text: str) -> None:
    table = tomllib.loads(text)
    points = table.get("project", {}).get("entry-points")
    if points is not None:
        assert set(points) == {ENTRY_POINT_GROUP}
        for target in points[ENTRY_POINT_GROUP].values():
            module, _, attribute = target.partition(":")
            assert getattr(__import__(module, fromlist=[attribute]), attribute)
        return
    raw = make_raw()
    for section, values in table.items():
        raw.setdefault(section, {}).update(values)
    sc.validate(raw)


def test_every_block_of_extending_md_runs(folder):
    work, site = folder
    namespace: dict = {"__name__": "extending_md"}
    ran = {"python": 0, "bash": 0, "toml": 0}
    for number, (language, text) in enumerate(blocks(), start=1):
        if language == "python":
            exec(compile(text, f"docs/extending.md block {number}", "exec"), namespace)
        elif language == "bash":
            for line in text.splitlines():
                line = line.split("  #")[0].strip()
                if line and not line.startswith("#") and not line.startswith(NOT_RUN):
                    done = _command(line, work, site)
                    if " --grid server.clip_tau=" in line:  # the promise of §5: the momentum points drop the key, saying so
                        assert "note: server.clip_tau is a key of" in done.stderr, done.stderr
        elif language == "toml":
            _toml(text)
        ran[language] += 1
    assert all(ran.values()), ran
    # what the commands and blocks wrote
    assert (work / "runs" / "example" / "summary.json").is_file()
    assert (work / "runs" / "mine" / "summary.json").is_file() and (work / "runs" / "ma-light" / "summary.json").is_file()
    results = (work / "runs" / "clip-sweep" / "results.csv").read_text()
    assert results.count("completed") == 4
