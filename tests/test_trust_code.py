"""No code runs from data, and a resume notices changed code (issue 32 items 1, 2, 4, 5 and the
"Plug-in loading" findings; docs/extending.md §3, docs/run-directory.md §1.1 and §4).

Read as a specification:

* a scenario, a ``--set`` override, a run directory's ``scenario.toml`` or ``components.json``
  finds only registered components. ``"module:attribute"`` imports its module only when the user
  allowed it (``--allow-module``, ``ASYNCFL_ALLOW_MODULES``, ``asyncfl.allow_modules``): ``os:abort``,
  ``os:getcwd``, ``builtins:quit`` and a module with an import-time side effect are refused with
  nothing executed (the marker file is never written, the module is not in ``sys.modules``, the
  process lives and exits 2);
* with the opt-in, the attribute must *be* a Component (or a list or tuple holding exactly one of
  the kind asked for); a callable is refused without being called;
* reading a run directory (``load_run``, ``compare``, ``bias``) never imports, opted in or not;
* installed plug-ins are trusted, but one raising ``SystemExit`` on import is a failed plug-in, and
  a name two of them register is refused naming both;
* ``components.json`` holds the digest of each file of a plug-in's code; ``resume`` refuses code
  that changed, naming the file, and ``--accept-changed-code`` continues and records it;
* every refusal of ``resume`` happens before any file, lock file or progress bar is touched;
* the documented builder shapes are the called ones, a protocol without ``resolve`` is answered
  cleanly, and a rule's direction must have θ's shape.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any, Literal

import numpy as np
import pytest
import tomli_w
import torch

import asyncfl
from asyncfl.cli.main import main
from asyncfl.components import allow
from asyncfl.components.registry import REGISTRY, Registry, unregister
from asyncfl.components.traits import LatencyTraits, ProtocolTraits
from asyncfl.config.base import Section
from asyncfl.errors import ComponentError, RunDirError, RunInterrupted, ScenarioError
from asyncfl.results import load_run
from asyncfl.run import provenance
from asyncfl.run.runner import resume_dir_blocking, run_to_dir_blocking

from conftest import make_raw, make_scenario

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "scenarios" / "quickstart.toml"

LAB_RULE = '''
"""A lab's server rules, named by 'module:attribute' (tests/test_trust_code.py)."""
import os
from pathlib import Path

if os.environ.get("TRUSTLAB_MARKER"):
    Path(os.environ["TRUSTLAB_MARKER"]).write_text("trustlab_rule was imported")

import torch
from typing import Literal

from asyncfl import Component, RuleOutput, Section
from asyncfl.server.rules import EmptyState


class LabSGD:
    """m_t = r_t, written by a lab."""

    @classmethod
    def from_config(cls, cfg=None, ctx=None):
        return cls()

    def init(self, theta):
        return EmptyState()

    def direction(self, aggregate, state):
        return RuleOutput(aggregate.r, state)


class Short(LabSGD):
    def direction(self, aggregate, state):
        return RuleOutput(aggregate.r[:1], state)


class Scalar(LabSGD):
    def direction(self, aggregate, state):
        return RuleOutput(torch.tensor(0.5, dtype=aggregate.r.dtype), state)


class LabLatency(Section):
    dist: Literal["lab-latency"] = "lab-latency"


RULE = Component("rule", "lab-sgd", LabSGD.from_config, summary="SGD, from a lab")
SHORT = Component("rule", "lab-short", Short.from_config)
SCALAR = Component("rule", "lab-scalar", Scalar.from_config)
LATENCY = Component("latency", "lab-latency", LabSGD.from_config, LabLatency)
PAIR = [LATENCY, RULE]
TWO = (RULE, SHORT)


def make_rule():
    Path(os.environ.get("TRUSTLAB_CALLED", os.devnull)).write_text("make_rule was called")
    return RULE
'''

LAB_NAMES = ("trustlab_rule", "trustlab_sidefx", "trustlab_boom", "trustlab_bye")


@pytest.fixture(autouse=True)
def nothing_allowed(monkeypatch: pytest.MonkeyPatch):
    """Every test starts with no module allowed and leaves none allowed."""
    monkeypatch.delenv(allow.ENV, raising=False)
    allow.reset()
    yield
    allow.reset()
    for kind in ("rule", "latency"):
        for name in [n for n in REGISTRY.names(kind) if n.startswith("trustlab_")]:
            unregister(kind, name)


@pytest.fixture
def lab(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder of a lab's modules on ``sys.path``: ``trustlab_rule`` (components, and a callable
    that writes a marker if called), ``trustlab_sidefx`` (writes a marker on import),
    ``trustlab_boom`` (raises on import), ``trustlab_bye`` (``sys.exit(0)`` on import)."""
    folder = tmp_path / "lab"
    folder.mkdir()
    (folder / "trustlab_rule.py").write_text(LAB_RULE)
    (folder / "trustlab_sidefx.py").write_text(f"open({str(tmp_path / 'sidefx-marker')!r}, 'w').write('imported')\n")
    (folder / "trustlab_boom.py").write_text("raise RuntimeError('boom at import')\n")
    (folder / "trustlab_bye.py").write_text("import sys\nsys.exit(0)\n")
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for name in LAB_NAMES:
        sys.modules.pop(name, None)


def cli(args: list[str], *paths: Path, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m asyncfl ARGS`` in a fresh process, with this checkout and ``paths`` on its path."""
    base = {k: v for k, v in os.environ.items() if k not in (allow.ENV, "PYTHONPATH", "TRUSTLAB_MARKER", "TRUSTLAB_CALLED")}
    base.update({"PYTHONPATH": os.pathsep.join([str(ROOT), *map(str, paths)]), "COLUMNS": "400", "NO_COLOR": "1"})
    return subprocess.run([sys.executable, "-m", "asyncfl", *args], env={**base, **(env or {})}, cwd=cwd or ROOT,
                          capture_output=True, text=True, timeout=300)


def cli_here(capsys: pytest.CaptureFixture, args: list[str]) -> subprocess.CompletedProcess:
    """``asyncfl ARGS`` through its ``main`` in this process, answered as :func:`cli` answers (a
    fresh interpreter less: about 3.5 s of CPU with torch's import)."""
    capsys.readouterr()
    code = main(args)
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["asyncfl", *args], code, out, err)


def clean_refusal(done: subprocess.CompletedProcess, *phrases: str) -> str:
    """Exit 2, no traceback, each phrase in the message (whitespace-normalised); the message."""
    text = " ".join(done.stderr.split())
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    for phrase in phrases:
        assert phrase in text, (phrase, text)
    return text


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` (hidden ones, the lock file included) → SHA-256 of its bytes."""
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def scenario_file(folder: Path, **overrides: Any) -> Path:
    path = folder / "tiny.toml"
    path.write_text(tomli_w.dumps(make_raw(**overrides)))
    return path


# -- 1. a name from data runs no code ---------------------------------------------------------------
def test_os_abort_is_refused_and_the_process_lives() -> None:
    done = cli(["validate", str(QUICKSTART), "--set", 'server.rule="os:abort"'])
    clean_refusal(done, "server.rule = 'os:abort'", "--allow-module os", f"{allow.ENV}=os", "asyncfl.allow_modules('os')")
    with pytest.raises(ScenarioError, match="does not import unless you allow it"):
        make_scenario({"server.rule": "os:abort"})  # this process is still here to see the error


def test_os_getcwd_is_never_called_allowed_or_not(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []
    monkeypatch.setattr(os, "getcwd", lambda: calls.append("called") or "/")
    with pytest.raises(ScenarioError, match="does not import unless you allow it"):
        make_scenario({"server.rule": "os:getcwd"})
    asyncfl.allow_modules("os")
    with pytest.raises(ScenarioError, match="names a function, not an asyncfl.Component .*never calls"):
        make_scenario({"server.rule": "os:getcwd"})
    assert calls == []


def test_a_module_with_an_import_side_effect_is_not_imported(lab: Path, tmp_path: Path) -> None:
    marker = tmp_path / "sidefx-marker"
    with pytest.raises(ScenarioError, match="names code in the module 'trustlab_sidefx'"):
        make_scenario({"server.rule": "trustlab_sidefx:RULE"})
    assert "trustlab_sidefx" not in sys.modules and not marker.exists()
    done = cli(["validate", str(QUICKSTART), "--set", 'server.rule="trustlab_sidefx:RULE"'], lab)
    clean_refusal(done, "--allow-module trustlab_sidefx")
    assert not marker.exists()
    # an allowed parent does not allow a sibling that merely shares a prefix
    asyncfl.allow_modules("trustlab")
    with pytest.raises(ScenarioError, match="names code in the module 'trustlab_sidefx'"):
        make_scenario({"server.rule": "trustlab_sidefx:RULE"})
    assert not marker.exists()


@pytest.mark.parametrize("name", ["os:abort", "os:getcwd", "signal:pause", "venv:main", "builtins:exit", "asyncfl.__main__:x"])
def test_the_reviews_hostile_names_import_nothing(name: str, tmp_path: Path) -> None:
    """``signal:pause`` once made ``asyncfl bias`` block forever and ``venv:main`` turned a results
    folder into a virtualenv; ``asyncfl.__main__`` would run the command line itself."""
    before = set(sys.modules)
    with pytest.raises(ScenarioError, match=f"names code in the module '{name.partition(':')[0]}'"):
        make_scenario({"server.rule": name})
    out = tmp_path / "run"
    run_to_dir_blocking(make_scenario(), out)
    toml = out / "scenario.toml"
    toml.write_text(toml.read_text().replace('rule = "momentum"', f'rule = "{name}"'))
    asyncfl.allow_modules(name.partition(":")[0])  # even allowed: reading never imports
    with pytest.raises(RunDirError, match="reading a run directory never imports code"):
        load_run(out).scenario
    from asyncfl.run.bias_report import write_bias_json
    with pytest.raises(ScenarioError, match="reading a run directory never imports code"):
        write_bias_json(out)
    module = name.partition(":")[0]
    assert not [m for m in set(sys.modules) - before if m == module or m.startswith(module + ".")]


@pytest.mark.slow  # several fresh processes
def test_builtins_quit_and_exit_are_refused_not_obeyed() -> None:
    for name in ("builtins:quit", "builtins:exit"):
        clean_refusal(cli(["validate", str(QUICKSTART), "--set", f'server.rule="{name}"']), f"server.rule = '{name}'")
        # allowed, they are still not components, and nothing calls them
        done = cli(["validate", str(QUICKSTART), "--set", f'server.rule="{name}"', "--allow-module", "builtins"])
        clean_refusal(done, "names a Quitter, not an asyncfl.Component")


def test_with_opt_in_a_component_attribute_loads_and_a_callable_is_refused_uncalled(lab: Path, tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    called = tmp_path / "called"
    monkeypatch.setenv("TRUSTLAB_CALLED", str(called))
    asyncfl.allow_modules("trustlab_rule")
    scenario = make_scenario({"server.rule": "trustlab_rule:RULE"})
    rule = scenario.component("rule")
    assert rule.name == "trustlab_rule:RULE" and rule.origin.source == "module" and rule.origin.module == "trustlab_rule"
    # a list holding exactly one rule gives that rule; a tuple of two rules is refused, naming them
    assert make_scenario({"server.rule": "trustlab_rule:PAIR"}).component("rule").build == rule.build
    with pytest.raises(ScenarioError, match="must name exactly one server rule component; it holds rule 'lab-sgd', rule 'lab-short'"):
        make_scenario({"server.rule": "trustlab_rule:TWO"})
    with pytest.raises(ScenarioError, match="names a function, not an asyncfl.Component"):
        make_scenario({"server.rule": "trustlab_rule:make_rule"})
    with pytest.raises(ScenarioError, match="names a latency model component 'lab-latency', not|exactly one server rule"):
        make_scenario({"server.rule": "trustlab_rule:LATENCY"})
    assert not called.exists()


def test_an_entry_of_the_allow_list_covers_its_submodules_only() -> None:
    asyncfl.allow_modules("mylab")
    assert allow.is_allowed("mylab") and allow.is_allowed("mylab.rules.deep")
    assert not allow.is_allowed("mylabx") and not allow.is_allowed("other.mylab")
    with pytest.raises(ValueError, match="dotted module name"):
        asyncfl.allow_modules("../evil")
    assert os.environ[allow.ENV] == "mylab"  # exported: worker processes inherit it


def test_the_flag_allows_for_the_command_and_exports_the_variable_to_its_workers(lab: Path) -> None:
    assert main(["validate", str(QUICKSTART), "--set", 'server.rule="trustlab_rule:RULE"',
                 "--allow-module", "trustlab_rule"]) == 0
    assert os.environ[allow.ENV] == "trustlab_rule"
    assert main(["validate", str(QUICKSTART), "--allow-module", "not a module"]) == 2


@pytest.mark.slow  # several fresh processes
def test_unimportable_failing_and_exiting_modules_are_refused_cleanly(lab: Path) -> None:
    allowed = ["--allow-module", "nowhere", "--allow-module", "trustlab_boom", "--allow-module", "trustlab_bye"]
    for name, phrase in (("nowhere.at.all:X", "(ModuleNotFoundError"), ("trustlab_boom:X", "(RuntimeError: boom at import)"),
                         ("trustlab_bye:X", "(SystemExit: 0)")):
        done = cli(["validate", str(QUICKSTART), "--set", f'server.rule="{name}"', *allowed], lab)
        clean_refusal(done, f"server.rule = '{name}': importing 'X' from the allowed module", phrase)
        assert done.stdout == ""  # not validated: nothing printed as if it were


def test_a_latency_model_named_module_attribute_is_refused_cleanly(lab: Path) -> None:
    for extra in ([], ["--allow-module", "trustlab_rule"]):
        done = cli(["validate", str(QUICKSTART), "--set", 'latency.dist="trustlab_rule:LATENCY"', *extra], lab)
        clean_refusal(done, "latency.dist = 'trustlab_rule:LATENCY'")
    assert "owns the whole [latency] section" in " ".join(done.stderr.split())


# -- reading a run directory imports nothing ---------------------------------------------------------
@pytest.fixture
def lab_run(lab: Path, tmp_path: Path, capsys: pytest.CaptureFixture) -> Path:
    """A completed run whose rule is ``trustlab_rule:RULE`` (made with the opt-in, by ``asyncfl
    run`` in this process: the lab's folder is on this process's path)."""
    out = tmp_path / "lab-run"
    done = cli_here(capsys, ["run", str(scenario_file(tmp_path)), "--set", 'server.rule="trustlab_rule:RULE"',
                             "--allow-module", "trustlab_rule", "--out", str(out), "--quiet"])
    assert done.returncode == 0, done.stderr
    return out


@pytest.mark.slow  # several fresh processes
def test_reading_a_run_directory_that_names_a_module_imports_nothing(lab: Path, lab_run: Path, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    probe = (f"import sys\nfrom asyncfl import load_run\nfrom asyncfl.errors import RunDirError\n"
             f"run = load_run({str(lab_run)!r})\nprint(run.status, run.summary['rule'])\n"
             "try:\n    run.scenario\nexcept RunDirError as exc:\n    print('refused:', ' '.join(str(exc).split()))\n"
             "print('imported' if 'trustlab_rule' in sys.modules else 'not imported')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(ROOT), str(lab)]), "TRUSTLAB_MARKER": str(marker), allow.ENV: "trustlab_rule"}
    done = subprocess.run([sys.executable, "-c", probe], env={**os.environ, **env}, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "completed trustlab_rule:RULE" in done.stdout
    assert "refused: " in done.stdout and "reading a run directory never imports code" in done.stdout
    assert done.stdout.strip().endswith("not imported")
    for command in (["compare", str(lab_run)], ["bias", str(lab_run)]):
        before = snapshot(lab_run)
        done = cli(command, lab, env={"TRUSTLAB_MARKER": str(marker), allow.ENV: "trustlab_rule"})
        clean_refusal(done, "server.rule = 'trustlab_rule:RULE': not registered in this process")
        assert snapshot(lab_run) == before
    assert not marker.exists()


@pytest.mark.slow
def test_compare_of_a_run_naming_builtins_exit_exits_2(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run_to_dir_blocking(make_scenario(), out)
    toml = out / "scenario.toml"
    toml.write_text(toml.read_text().replace('rule = "momentum"', 'rule = "builtins:exit"'))
    before = snapshot(out)
    clean_refusal(cli(["compare", str(out)]), "server.rule = 'builtins:exit'")
    clean_refusal(cli(["resume", str(out)]), "server.rule = 'builtins:exit'")
    assert snapshot(out) == before


# -- installed plug-ins: trusted, but a failed or ambiguous one is said -----------------------------
def _fake_distribution(site: Path, dist: str, module: str, source: str) -> None:
    """An installed distribution ``dist`` 0.1 whose entry point ``asyncfl.plugins`` is ``module:COMPONENTS``."""
    site.mkdir(exist_ok=True)
    (site / f"{module}.py").write_text(textwrap.dedent(source))
    info = site / f"{dist}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[asyncfl.plugins]\n{dist} = {module}:COMPONENTS\n")
    (info / "RECORD").write_text(f"{module}.py,,\n{dist}-0.1.dist-info/METADATA,,\n")


def test_an_installed_plugin_exiting_on_import_is_a_failed_plugin(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _fake_distribution(site, "byeplug", "trustlab_byeplug", "import sys\nsys.exit(0)\n")
    done = cli(["validate", str(QUICKSTART)], site)
    assert done.returncode == 0 and 'name = "quickstart"' in done.stdout, done.stderr  # asyncfl went on
    clean_refusal(cli(["validate", str(QUICKSTART), "--set", 'server.rule="nope"'], site),
                  "plug-in 'byeplug' of byeplug 0.1 (trustlab_byeplug:COMPONENTS) failed to load: SystemExit: 0")


def test_two_installed_plugins_registering_one_name_are_refused_naming_both(tmp_path: Path) -> None:
    site = tmp_path / "site"
    twin = """
    from asyncfl import Component
    COMPONENTS = [Component("rule", "twin", "asyncfl.server.rules:SGD.from_config")]
    """
    _fake_distribution(site, "alpha-plug", "trustlab_alpha", twin)
    _fake_distribution(site, "beta-plug", "trustlab_beta", twin)
    assert cli(["validate", str(QUICKSTART)], site).returncode == 0  # a scenario not naming it is unaffected
    clean_refusal(cli(["validate", str(QUICKSTART), "--set", 'server.rule="twin"'], site),
                  "server.rule = 'twin': registered by more than one installed plug-in", "alpha-plug 0.1", "beta-plug 0.1")


def test_a_conflict_is_recorded_by_the_registry_not_resolved_by_order() -> None:
    registry = Registry()
    registry._loaded = True  # no entry points: the two plug-ins below are the only ones
    one = asyncfl.Component("rule", "twin", "asyncfl.server.rules:SGD.from_config")
    registry._register_plugin([one], asyncfl.Origin("package", "a", "a-plug", "1"))
    registry._register_plugin([one], asyncfl.Origin("package", "b", "b-plug", "2"))
    with pytest.raises(asyncfl.UnknownComponent, match="package a-plug 1 .*and package b-plug 2"):
        registry.find("rule", "twin")


# -- a rule's direction must have θ's shape -------------------------------------------------------
@pytest.mark.slow  # several fresh processes
@pytest.mark.parametrize("name, got", [("trustlab_rule:SHORT", r"a tensor of shape \(1,\)"),
                                       ("trustlab_rule:SCALAR", r"a tensor of shape \(\)")])
def test_a_direction_of_another_shape_than_theta_is_refused_naming_the_rule(lab: Path, tmp_path: Path, name: str, got: str) -> None:
    asyncfl.allow_modules("trustlab_rule")
    with pytest.raises(ComponentError, match=f"server.rule: trustlab_rule.(Short|Scalar).direction returned {got} as the "
                                             r"direction m_t; it must be a tensor of θ's shape \(5,\)"):
        run_to_dir_blocking(make_scenario({"server.rule": name}), tmp_path / "run")
    done = cli(["run", str(scenario_file(tmp_path)), "--set", f'server.rule="{name}"', "--allow-module", "trustlab_rule",
                "--out", str(tmp_path / "cli-run"), "--quiet"], lab)
    clean_refusal(done, "must be a tensor of θ's shape (5,)")


# -- item 4: the documented builder shapes are the called ones ------------------------------------
class FixedLatency(Section):
    dist: Literal["trust-fixed"] = "trust-fixed"
    value: float = 2.0


def fixed_latencies(cfg: Any, ctx: Any) -> np.ndarray:
    """``profiles`` mode in the one builder shape: ``build(cfg, ctx) -> array``, one per client."""
    return np.full(ctx.clients, cfg.value)


def test_a_profiles_latency_and_an_executor_plugin_run_with_the_one_builder_shape(tmp_path: Path) -> None:
    from asyncfl.compute.executors import InlineExecutor

    seen = []

    def build_executor(cfg, ctx):  # ctx: ExecutorContext (task, client, solver, run, recipe)
        seen.append(ctx.run.executor)
        return InlineExecutor(ctx.task, ctx.client, ctx.solver)

    parts = asyncfl.register(
        asyncfl.Component("latency", "trust-fixed", fixed_latencies, FixedLatency, LatencyTraits(mode="profiles")),
        asyncfl.Component("executor", "trust-inline", build_executor))
    try:
        raw = make_raw(**{"latency": {"dist": "trust-fixed", "value": 2.0}, "population.speed_sigma": 0.0,
                          "run.executor": "trust-inline"})
        from asyncfl.config import scenario as sc
        summary = run_to_dir_blocking(sc.validate(raw), tmp_path / "run")
        assert summary["status"] == "completed" and seen == ["trust-inline"]
        updates = load_run(tmp_path / "run").updates
        # a fixed latency of 2 per job: every upload arrives exactly 2 after its dispatch
        np.testing.assert_allclose((updates.arrival_time - updates.dispatch_time).to_numpy(), 2.0)
    finally:
        for c in parts:
            unregister(c.kind, c.name)


def test_a_protocol_without_resolve_is_answered_cleanly() -> None:
    fedbuff = asyncfl.component("protocol", "fedbuff")
    bare = asyncfl.Component("protocol", "trust-bare", fedbuff.build, fedbuff.config,
                             ProtocolTraits(in_flight_key="concurrency", stale=True))
    asyncfl.register(bare)
    try:
        with pytest.raises(ScenarioError, match="server.buffer = None: server.protocol = 'trust-bare' needs a positive integer"):
            make_scenario({"server.protocol": "trust-bare", "server.buffer": None, "server.concurrency": None})
        scenario = make_scenario({"server.protocol": "trust-bare", "server.buffer": 3, "server.concurrency": 8})
        assert scenario.server.buffer == 3
    finally:
        unregister("protocol", "trust-bare")


# -- item 2 and 5: code fingerprints, and resume refusals that touch nothing -----------------------
def _interrupted(scenario: Any, out: Path) -> Path:
    """A run stopped at the first event after its first checkpoint (status ``interrupted``)."""
    with pytest.raises(RunInterrupted):
        run_to_dir_blocking(scenario, out, should_stop=lambda: (out / "checkpoint.pt").exists())
    return out


def _no_progress_bar(done: subprocess.CompletedProcess) -> None:
    assert "virtual t=" not in done.stderr and "steps" not in done.stderr.split("error:")[0]
    assert "resuming after" not in done.stderr


def test_components_json_records_a_digest_of_each_file_of_a_plugins_code(lab: Path, lab_run: Path) -> None:
    record = provenance.read(lab_run)
    rule = next(c for c in record["components"] if c["kind"] == "rule")
    expected = hashlib.sha256((lab / "trustlab_rule.py").read_bytes()).hexdigest()
    assert rule["code"] == {"basis": "source", "files": {"trustlab_rule.py": expected}}
    task = next(c for c in record["components"] if c["kind"] == "task")
    assert task["code"] == {"basis": "asyncfl", "version": asyncfl.__version__}  # built-ins: asyncfl's version


@pytest.mark.slow  # several fresh processes
def test_an_edited_plugin_is_refused_at_resume_and_accepted_with_the_flag(lab: Path, tmp_path: Path) -> None:
    asyncfl.allow_modules("trustlab_rule")
    scenario = make_scenario({"server.rule": "trustlab_rule:RULE", "run.steps": 40, "run.checkpoint_every": 4})
    out = _interrupted(scenario, tmp_path / "run")
    source = lab / "trustlab_rule.py"
    source.write_text(source.read_text().replace('"""m_t = r_t, written by a lab."""', '"""m_t = r_t, edited."""'))
    before = snapshot(out)
    done = cli(["resume", str(out), "--allow-module", "trustlab_rule"], lab)
    clean_refusal(done, "server.rule = 'trustlab_rule:RULE': its code differs from the code the run started with: "
                        "trustlab_rule.py (changed)", "--accept-changed-code", "nothing was changed")
    _no_progress_bar(done)
    assert snapshot(out) == before
    # without the opt-in the component is not even imported: refused for that first
    clean_refusal(cli(["resume", str(out)], lab), "--allow-module trustlab_rule")
    assert snapshot(out) == before
    done = cli(["resume", str(out), "--allow-module", "trustlab_rule", "--accept-changed-code", "--quiet"], lab)
    assert done.returncode == 0, done.stderr
    assert "accepted (--accept-changed-code)" in done.stderr
    record = provenance.read(out)
    (accepted,) = record["accepted_code_changes"]
    assert accepted["field"] == "server.rule" and accepted["files"] == ["trustlab_rule.py (changed)"]
    assert accepted["when"].endswith("+00:00")
    rule = next(c for c in record["components"] if c["kind"] == "rule")
    assert rule["code"]["files"]["trustlab_rule.py"] == hashlib.sha256(source.read_bytes()).hexdigest()
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"


def test_the_api_accepts_changed_code_only_when_asked(lab: Path, tmp_path: Path) -> None:
    asyncfl.allow_modules("trustlab_rule")
    out = _interrupted(make_scenario({"server.rule": "trustlab_rule:RULE", "run.steps": 40, "run.checkpoint_every": 4}),
                       tmp_path / "run")
    record = provenance.read(out)
    record["components"][[c["kind"] for c in record["components"]].index("rule")]["code"]["files"]["trustlab_rule.py"] = "0" * 64
    (out / "components.json").write_text(json.dumps(record))
    with pytest.raises(RunDirError, match="trustlab_rule.py \\(changed\\)"):
        resume_dir_blocking(out)
    assert resume_dir_blocking(out, accept_changed_code=True)["status"] == "completed"


def test_a_refusal_for_changed_data_touches_nothing_not_even_a_stale_lock(tmp_path: Path) -> None:
    out = _interrupted(make_scenario({"run.steps": 40, "run.checkpoint_every": 4}), tmp_path / "run")
    record = provenance.read(out)
    task = next(c for c in record["components"] if c["kind"] == "task")
    task["fingerprint"]["data"] = "0" * 64
    (out / "components.json").write_text(json.dumps(record))
    (out / ".asyncfl.lock").write_text("999999\n")  # left by a killed run: nobody holds it
    before = snapshot(out)
    done = cli(["resume", str(out)])
    clean_refusal(done, "task.name = 'quadratic': its data differ from the data the run started on", "nothing was changed")
    _no_progress_bar(done)
    assert snapshot(out) == before


@pytest.mark.parametrize("damage", ['{"version": 1, "components": [1, 2]}', "{not json", '{"version": 1, "components": '
                                    '[{"kind": "rule", "field": "server.rule", "name": "builtins:exit", "origin": {}}]}'])
def test_a_damaged_or_hostile_components_json_is_refused_at_resume(tmp_path: Path, damage: str, capsys) -> None:
    """``asyncfl resume`` in this process (the refusal of changed data above runs it in a fresh one)."""
    out = _interrupted(make_scenario({"run.steps": 40, "run.checkpoint_every": 4}), tmp_path / "run")
    (out / "components.json").write_text(damage)
    before = snapshot(out)
    done = cli_here(capsys, ["resume", str(out)])
    text = clean_refusal(done)
    assert "components.json: not" in text or "server.rule = 'builtins:exit' came from module ?, and cannot be used now" in text
    _no_progress_bar(done)
    assert snapshot(out) == before


def test_the_readme_command_with_os_abort_exits_2() -> None:
    """``asyncfl validate scenarios/quickstart.toml --set 'server.rule="os:abort"'`` (issue 32)."""
    done = cli(["validate", "scenarios/quickstart.toml", "--set", 'server.rule="os:abort"'])
    assert done.returncode == 2 and "Traceback" not in done.stderr
