"""The public API is listed in one place, typed and importable without torch (docs/extending.md §8)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import asyncfl

ROOT = Path(__file__).resolve().parents[1]


def test_every_public_name_resolves_to_what_its_module_defines() -> None:
    import importlib

    assert set(asyncfl.__all__) == {"__version__", *asyncfl.PUBLIC}
    for name, module in asyncfl.PUBLIC.items():
        assert getattr(asyncfl, name) is getattr(importlib.import_module(module), name), name
    with pytest.raises(AttributeError, match="no attribute 'Simulation'"):
        asyncfl.Simulation  # noqa: B018 - private: not on the surface


def test_importing_asyncfl_and_declaring_a_component_imports_no_torch() -> None:
    code = ("import sys, asyncfl; from asyncfl import Component, RuleTraits, Section; "
            "Component('rule', 'x', 'm:f', traits=RuleTraits()); assert 'torch' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)


def test_python_dash_m_asyncfl_is_the_cli() -> None:
    done = subprocess.run([sys.executable, "-m", "asyncfl", "--version"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 0 and done.stdout.strip() == f"asyncfl {asyncfl.__version__}"


def test_simulate_runs_a_scenario_table_into_a_run_directory(tmp_path: Path) -> None:
    from conftest import BASE

    run = asyncfl.simulate(BASE, out=tmp_path / "run")
    assert run.summary["status"] == "completed" and len(run.metrics) == 4  # steps 0, 4, 8, 12
    again = asyncfl.scenario_from_dict(BASE, **{"server.rule": "sgd"})
    assert again.server.rule == "sgd" and not hasattr(again.server, "beta")


@pytest.mark.slow
def test_the_public_surface_is_mypy_strict_clean() -> None:
    """A user's module written against the public API type-checks under ``mypy --strict``."""
    done = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-incremental",
                           "tests/typing/public_api.py"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
