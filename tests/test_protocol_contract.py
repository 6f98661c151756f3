"""The protocol as a public contract (docs/protocol.md §8): a user's protocol, written against
``asyncfl.ServerProtocol`` alone (``examples/plugin``'s ``deadline``), runs, declares its own drop
reason with its own counter and ``updates.csv`` reason, checkpoints and resumes exactly; what
``ProtocolTraits.resolve`` returns is checked; ``ready()`` only answers."""

from __future__ import annotations

import csv
import json
import sys
from pathlib import Path

import pytest

from asyncfl.components.core import Component
from asyncfl.components.registry import register, unregister
from asyncfl.components.traits import ProtocolTraits
from asyncfl.compose import build_simulation, compose, run_blocking
from asyncfl.config import scenario as sc
from asyncfl.config.base import Section
from asyncfl.errors import ScenarioError
from asyncfl.run.runner import run_to_dir_blocking

from conftest import make_raw, whole_and_resumed

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples" / "plugin"))  # the example package, importable without installing it

from asyncfl_example_plugin import COMPONENTS  # noqa: E402
from asyncfl_example_plugin.protocol import DeadlineProtocol  # noqa: E402

DEADLINE = next(c for c in COMPONENTS if c.kind == "protocol" and c.name == "deadline")
# FedBuff keys replaced by the deadline protocol's: K = 6, C = 3, drop uploads that trained > 1.0
KEYS = {"server.protocol": "deadline", "server.concurrency": 6, "server.buffer": 3, "server.deadline": 1.0,
        "server.max_staleness": None, "run.steps": 12, "run.eval_every": 4}


@pytest.fixture
def deadline():
    registered = register(DEADLINE, replace_existing=True)
    yield registered[0]
    unregister("protocol", "deadline")


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path / "updates.csv", newline="") as f:
        return list(csv.DictReader(f))


def test_the_example_protocol_runs_and_counts_its_own_drop_reason(deadline, tmp_path) -> None:
    scenario = sc.validate(make_raw(**KEYS))
    summary = run_to_dir_blocking(scenario, tmp_path / "run")
    rows = _rows(tmp_path / "run")
    dropped = [r for r in rows if r["reason"] == "deadline"]
    # every drop is an upload whose job took longer than the deadline, every accepted one did not
    assert dropped and all(float(r["arrival_time"]) - float(r["dispatch_time"]) > 1.0 for r in dropped)
    assert all(float(r["arrival_time"]) - float(r["dispatch_time"]) <= 1.0 for r in rows if r["accepted"] == "true")
    disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["updates_dropped_deadline"] == disk["updates_dropped_deadline"] == len(dropped)
    assert summary["updates_dropped_stale"] == 0 and summary["status"] == "completed"
    assert disk["updates_accepted"] == 12 * 3
    import asyncfl  # the results reader keeps a protocol's own reason as a category

    updates = asyncfl.load_run(tmp_path / "run").updates
    assert int((updates["reason"] == "deadline").sum()) == len(dropped)


def test_the_example_protocol_checkpoints_and_resumes_exactly(deadline, tmp_path) -> None:
    scenario = sc.validate(make_raw(**{**KEYS, "run.checkpoint_every": 4}))
    whole_and_resumed(scenario, tmp_path)  # same updates.csv bytes and model.pt tensors


def test_a_protocol_is_built_from_its_own_config_and_the_context_then_attached(deadline) -> None:
    scenario = sc.validate(make_raw(**KEYS))
    parts = compose(scenario)
    # the class the component's builder names, as imported now (another test may have re-imported the package)
    assert type(parts.protocol) is DEADLINE.builder() and not hasattr(parts.protocol, "host")
    assert (parts.protocol.concurrency, parts.protocol.size, parts.protocol.deadline) == (6, 3, 1.0)
    sim = build_simulation(scenario)
    assert sim.protocol.host is sim and not hasattr(sim, "scenario")


def test_dropping_for_a_reason_the_protocol_does_not_declare_is_an_error(tmp_path) -> None:
    undeclared = Component("protocol", "undeclared-drops", DeadlineProtocol, DEADLINE.config,
                           ProtocolTraits(drops=("stale",), resolve=DEADLINE.traits.resolve))
    register(undeclared)
    try:
        with pytest.raises(ValueError, match=r"dropped an upload for 'deadline', a reason it does not declare"):
            run_blocking(sc.validate(make_raw(**{**KEYS, "server.protocol": "undeclared-drops"})))
    finally:
        unregister("protocol", "undeclared-drops")


@pytest.mark.parametrize("drops", [("late",), ("offline",), ("Too Slow",), ("x", "x"), ("",)])
def test_a_protocol_may_not_declare_an_engine_reason_or_a_malformed_one(drops) -> None:
    with pytest.raises(ValueError, match="ProtocolTraits.drops"):
        ProtocolTraits(drops=drops)


class BareConfig(Section):
    concurrency: int | None = None


def test_a_protocol_that_leaves_the_buffer_unset_is_a_scenario_error_naming_it() -> None:
    """The trap the issue names: a protocol without a ``resolve`` that sets ``server.buffer``
    made ``asyncfl validate`` end in a TypeError; now the scenario is refused, naming the key."""
    register(Component("protocol", "no-resolve", DeadlineProtocol, BareConfig, ProtocolTraits()))
    try:
        raw = make_raw(**{**KEYS, "server.protocol": "no-resolve", "server.buffer": None, "server.deadline": None})
        with pytest.raises(ScenarioError, match=r"server.buffer = .*server.protocol = 'no-resolve' needs a positive integer"):
            sc.validate(raw)
    finally:
        unregister("protocol", "no-resolve")


def test_what_resolve_returns_is_checked() -> None:
    register(Component("protocol", "bad-resolve", DeadlineProtocol, BareConfig,
                       ProtocolTraits(resolve=lambda scenario: {"buffer": 2, "concurrency": 2, "window": 3})))
    try:
        raw = make_raw(**{**KEYS, "server.protocol": "bad-resolve", "server.deadline": None})
        with pytest.raises(ScenarioError, match=r"ProtocolTraits.resolve sets window, which \[server\] does not have"):
            sc.validate(raw)
    finally:
        unregister("protocol", "bad-resolve")


def test_ready_only_answers(deadline) -> None:
    """``ready()`` is a question: asked twice, the same answer, and the buffer is kept until
    ``stepped()``."""
    protocol = compose(sc.validate(make_raw(**KEYS))).protocol
    protocol.buffer = [(object(), 0)] * 3
    accepted = [(None, 0, None)] * 3
    assert protocol.ready(accepted) and protocol.ready(accepted) and len(protocol.buffer) == 3
    protocol.stepped()
    assert protocol.buffer == []
