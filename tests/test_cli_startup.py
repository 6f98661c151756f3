"""The command line starts light (docs/architecture.md, "Package layout"): the parser is built
from torch-free modules and each command's implementation is imported through the command
registry only when that command runs, so ``asyncfl --help``, every ``COMMAND --help``, argument
errors, ``asyncfl validate`` and ``asyncfl scenarios`` import neither torch, ray, matplotlib nor pandas;
``import asyncfl`` imports none of them either (``load_run`` / ``load_sweep`` load on first call).

Also checked statically: no function-level import of a project module in the CLI, the studies,
the figures or ``analysis/`` (lazy loading goes through the registry), the library never imports
``analysis/``, ``analysis/`` imports only the library and itself (the CLI only from a script's
``__main__``, for its command line), and those modules import
one another without a cycle (registry targets count as imports).
"""

from __future__ import annotations

import ast
import importlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from asyncfl.cli.commands import ARGUMENTS, COMMANDS

REPO = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "ray", "matplotlib", "pandas")

# Runs ``asyncfl.cli.main.main(argv)`` and writes its exit code and the heavy modules it loaded.
WRAPPER = """
import json, sys
result, argv = sys.argv[1], json.loads(sys.argv[2])
from asyncfl.cli.main import main
try:
    rc = main(argv)
except SystemExit as exc:  # --help and --version exit through argparse
    rc = exc.code
with open(result, "w") as fh:
    json.dump({"rc": rc, "heavy": sorted(m for m in %r if m in sys.modules)}, fh)
""" % (HEAVY,)

QUICKSTART = str(REPO / "scenarios" / "quickstart.toml")
LIGHT_COMMANDS = [
    (["--help"], 0),
    (["--version"], 0),
    *[([name, "--help"], 0) for name in COMMANDS.names],
    (["validate", QUICKSTART], 0),
    (["validate", QUICKSTART, "--set", "server.buffer=0"], 2),
    (["validate", QUICKSTART, "--set", "novalue"], 2),
    (["scenarios"], 0),
    (["scenarios", "--dir", str(REPO / "scenarios")], 0),
    ([], 2),
    (["frobnicate"], 2),
    (["run"], 2),
    (["run", QUICKSTART, "--bogus"], 2),
    (["plot"], 2),
    (["compare"], 2),
    (["bias"], 2),
    (["resume"], 2),
]


def _run(tmp_path: Path, argv: list[str]) -> tuple[dict, subprocess.CompletedProcess]:
    result = tmp_path / "result.json"
    proc = subprocess.run([sys.executable, "-c", WRAPPER, str(result), json.dumps(argv)], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert result.is_file(), proc.stderr
    return json.loads(result.read_text()), proc


# Runs ``main(argv)`` for each argv in turn in one interpreter, each with its own standard streams,
# and writes each one's exit code, standard error and the heavy modules loaded by the time it ended.
SEQUENCE = """
import contextlib, io, json, sys
result, argvs = sys.argv[1], json.loads(sys.argv[2])
from asyncfl.cli.main import main
done = []
for argv in argvs:
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:  # --help and --version exit through argparse
            rc = exc.code
    done.append({"rc": rc, "stderr": err.getvalue(), "heavy": sorted(m for m in %r if m in sys.modules)})
with open(result, "w") as fh:
    json.dump(done, fh)
""" % (HEAVY,)


@pytest.fixture(scope="module")
def light_runs(tmp_path_factory) -> list[dict]:
    """Every command of :data:`LIGHT_COMMANDS`, in order, in one fresh interpreter (one start-up,
    not one each): a heavy module loaded by any command is still loaded when it and every later
    command ends, so each command's record names it."""
    result = tmp_path_factory.mktemp("light") / "result.json"
    proc = subprocess.run([sys.executable, "-c", SEQUENCE, str(result), json.dumps([a for a, _ in LIGHT_COMMANDS])],
                          cwd=REPO, capture_output=True, text=True, timeout=300)
    assert result.is_file(), proc.stderr
    return json.loads(result.read_text())


@pytest.mark.parametrize("index", range(len(LIGHT_COMMANDS)),
                         ids=[" ".join(a[:2]) or "(none)" for a, _ in LIGHT_COMMANDS])
def test_light_commands_import_no_torch_ray_or_matplotlib(light_runs, index):
    (argv, code), out = LIGHT_COMMANDS[index], light_runs[index]
    assert out["rc"] == code, out["stderr"]
    assert out["heavy"] == [], f"asyncfl {' '.join(argv)} imported {out['heavy']}"
    assert "Traceback" not in out["stderr"]


def test_import_asyncfl_is_light_and_its_readers_load_on_first_call():
    code = ("import sys, asyncfl; heavy = [m for m in %r if m in sys.modules]; "
            "assert callable(asyncfl.load_run) and callable(asyncfl.load_sweep); print(heavy)") % (HEAVY,)
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr


def test_a_run_starts_without_scipy_which_only_its_bias_report_needs():
    """``asyncfl run``'s module (the engine, torch) loads neither scipy nor the bias report: the
    runner imports them when the run finishes, while the figure process draws (docs/performance.md,
    "Start-up")."""
    code = ("import sys, asyncfl.cli.run_cmd; "
            "print([m for m in ('scipy', 'asyncfl.run.bias_report', 'asyncfl.server.ma') if m in sys.modules])")
    proc = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "[]", proc.stderr


def test_argument_errors_are_one_line_naming_the_problem(tmp_path):
    out, proc = _run(tmp_path, ["run", QUICKSTART, "--bogus"])
    assert out["rc"] == 2
    assert proc.stderr.strip() == "error: asyncfl: unrecognized arguments: --bogus"


#: the study scripts built on the library, with their argument errors (exit 2, one line, no traceback)
SCRIPT_ERRORS = [
    (["analysis.privacy_sweep", QUICKSTART, "--rules", "adam"],
     "error: python -m analysis.privacy_sweep: argument --rules: invalid choice: 'adam' (choose from 'ma-light', 'ma-full', 'momentum')"),
    pytest.param(["analysis.privacy_sweep", QUICKSTART, "--xi", "ten"],  # the same script's other refusal
                 "error: python -m analysis.privacy_sweep: argument --xi: invalid float value: 'ten'", marks=pytest.mark.slow),
    (["analysis.ma_review"], "error: python -m analysis.ma_review: the following arguments are required: spec, --out"),
]


@pytest.mark.parametrize("argv,message", SCRIPT_ERRORS,
                         ids=[" ".join((e.values if hasattr(e, "values") else e)[0][:2]) for e in SCRIPT_ERRORS])
def test_the_study_scripts_argument_errors_are_one_line_naming_the_problem(argv, message, capsys):
    """The refusal as the user meets it (``python -m SCRIPT``, a fresh interpreter: its whole
    standard error is the one line); ``--help`` through the script's ``main`` in this process
    (a second start-up of a study script costs about 3.5 s of CPU)."""
    proc = subprocess.run([sys.executable, "-m", *argv], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stderr.strip() == message, proc.stderr
    with pytest.raises(SystemExit) as help_:
        importlib.import_module(f"{argv[0]}.__main__").main(["--help"])
    out, err = capsys.readouterr()
    assert help_.value.code == 0 and out.startswith(f"usage: python -m {argv[0]}") and "Traceback" not in err


def test_python_dash_m_asyncfl_cli(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "asyncfl.cli", "--help"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("usage: asyncfl")
    for name in COMMANDS.names:
        assert name in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "asyncfl.cli", "frobnicate"], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "invalid choice: 'frobnicate'" in proc.stderr and "Traceback" not in proc.stderr


def test_every_command_has_arguments_and_an_implementation():
    assert list(ARGUMENTS) == list(COMMANDS.names)
    assert COMMANDS.names == ("run", "resume", "validate", "bias", "scenarios", "plot", "compare", "sweep")
    for entry in COMMANDS.entries():
        assert entry.summary, entry.name
        assert callable(COMMANDS.load(entry.name)), entry.target


# ---------------------------------------------------------------------------------------------
# the import graph of the CLI, the studies, the figures and analysis/
OWNED = ["asyncfl/cli", "asyncfl/studies", "asyncfl/figures", "asyncfl/run/bias_report.py", "analysis"]
PROJECT = ("asyncfl", "analysis")


def _files() -> list[Path]:
    files: list[Path] = []
    for item in OWNED:
        path = REPO / item
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST) -> list[tuple[str, bool, int]]:
    """(module, at function level?, line) of every import of a project module."""
    out: list[tuple[str, bool, int]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                out.extend((a.name, in_function, child.lineno) for a in child.names if a.name.split(".")[0] in PROJECT)
            elif isinstance(child, ast.ImportFrom) and child.level == 0 and child.module and child.module.split(".")[0] in PROJECT:
                out.append((child.module, in_function, child.lineno))
                # ``from asyncfl.run import runner`` imports the module asyncfl.run.runner
                out.extend((f"{child.module}.{a.name}", in_function, child.lineno) for a in child.names)
            elif isinstance(child, ast.Call) and isinstance(child.func, ast.Name) and child.func.id == "__import__":
                out.append(("__import__", True, child.lineno))
            visit(child, nested)

    visit(tree, False)
    return out


def _graph() -> tuple[dict[str, set[str]], list[str]]:
    modules = {_module_name(p): p for p in _files()}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    function_level: list[str] = []
    for name, path in modules.items():
        for target, in_function, line in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if in_function:
                function_level.append(f"{path.relative_to(REPO)}:{line} imports {target}")
            if target in modules and target != name:
                graph[name].add(target)
    for entry in COMMANDS.entries():  # registry targets are imports too
        graph["asyncfl.cli.commands"].add(entry.module)
    return graph, function_level


def test_no_function_level_imports_of_project_modules():
    _, function_level = _graph()
    assert function_level == []


def test_library_never_imports_analysis_and_analysis_imports_only_the_library():
    for path in sorted((REPO / "asyncfl").rglob("*.py")):
        for target, _, line in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            assert not target.startswith("analysis"), f"{path.relative_to(REPO)}:{line} imports {target}"
    for path in sorted((REPO / "analysis").rglob("*.py")):
        entry = path.name == "__main__.py"  # a script's command line shares asyncfl's (parser helpers, console, exit codes)
        for target, _, line in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            assert target.startswith(("asyncfl", "analysis")), f"{path.relative_to(REPO)}:{line} imports {target}"
            assert entry or not target.startswith("asyncfl.cli"), f"{path.relative_to(REPO)}:{line} imports {target}"


def test_no_import_cycle_among_cli_studies_figures_and_analysis():
    graph, _ = _graph()
    state: dict[str, int] = {}  # 1 on the stack, 2 done

    def visit(node: str, stack: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                path = stack + [node]
                raise AssertionError("import cycle: " + " -> ".join(path[path.index(nxt):] + [nxt]))
            if nxt in graph and nxt not in state:
                visit(nxt, stack + [node])
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node, [])
