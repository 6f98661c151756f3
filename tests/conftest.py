"""Shared helpers: small scenarios that run in a fraction of a second."""

from __future__ import annotations

import copy
import os

# Ray binds a local instance to the machine's external address unless this is set (read when
# ray is imported): tests only ever talk to loopback addresses.
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
import io
from pathlib import Path
from typing import Any

import matplotlib  # noqa: F401  (see below)
import pytest
import torch

# The commands the tests drive in this process (``asyncfl.cli.main.main``) find matplotlib imported
# and draw a run's figure in place, as a notebook driving the CLI does, instead of starting a figure
# process each (about 1 s of CPU a command; asyncfl/figures/process.py). The figure process is
# tested on its own (tests/test_figure_process.py) and runs in every test that starts
# ``python -m asyncfl run`` or ``resume`` in a fresh interpreter.

from asyncfl.config import scenario as sc
from asyncfl.errors import RunInterrupted
from asyncfl.run import checkpoint
from asyncfl.run.runner import resume_dir_blocking, run_to_dir_blocking

BASE: dict[str, Any] = {
    "name": "tiny",
    "seed": 3,
    "population": {"clients": 30, "speed_sigma": 0.5},
    "latency": {"dist": "exponential", "mean": 1.0},
    "task": {"name": "quadratic", "problem": "random", "dim": 5, "samples_per_client": 20},
    "client": {"solver": "sgd", "lr": 0.01, "local_steps": 2, "batch_size": 10},
    "server": {"protocol": "fedbuff", "concurrency": 8, "buffer": 3, "max_staleness": 6, "rule": "momentum", "lr": 0.5},
    "run": {"steps": 12, "eval_every": 4},
}


def make_raw(**overrides: Any) -> dict[str, Any]:
    """BASE with dotted-key overrides (``server__buffer=2`` style is awkward; pass a dict)."""
    raw = copy.deepcopy(BASE)
    for dotted, value in overrides.items():
        node = raw
        parts = dotted.split(".")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if value is None:
            node.pop(parts[-1], None)
        else:
            node[parts[-1]] = value
    return raw


def make_scenario(overrides: dict[str, Any] | None = None) -> sc.Scenario:
    return sc.validate(make_raw(**(overrides or {})))


@pytest.fixture
def tiny() -> sc.Scenario:
    return make_scenario()


def through_file(state: Any) -> Any:
    """``state`` written as a checkpoint writes it and read back as a checkpoint reads it
    (``torch.save``, ``weights_only`` load)."""
    buf = io.BytesIO()
    torch.save(checkpoint.encode(state), buf)
    buf.seek(0)
    return checkpoint.decode(torch.load(buf, weights_only=True))


def whole_and_resumed(scenario: sc.Scenario, tmp_path: Path) -> tuple[Path, Path]:
    """The run of ``scenario`` uninterrupted (``whole``) and stopped at the first event after its
    first checkpoint, then resumed (``cut``); asserts that both wrote the same ``updates.csv``
    bytes and the same ``model.pt`` tensors, and returns the two directories."""
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    run_to_dir_blocking(scenario, whole)
    with pytest.raises(RunInterrupted):
        run_to_dir_blocking(scenario, cut, should_stop=lambda: (cut / "checkpoint.pt").exists())
    resume_dir_blocking(cut)
    assert (cut / "updates.csv").read_bytes() == (whole / "updates.csv").read_bytes()
    a, b = torch.load(whole / "model.pt", weights_only=True), torch.load(cut / "model.pt", weights_only=True)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    return whole, cut
