"""The collector's pace while the engine simulates (asyncfl/sim/collector.py, docs/architecture.md §10):
raised while a simulation advances, the caller's thresholds restored once the last one leaves,
and no effect on what a run computes."""

from __future__ import annotations

import asyncio
import gc

import pytest

from asyncfl.sim import collector
from asyncfl.compose import build_simulation

from conftest import make_scenario


@pytest.fixture
def thresholds():
    saved = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    yield (700, 10, 10)
    gc.set_threshold(*saved)


def test_nested_and_interleaved_uses_restore_the_callers_thresholds_once(thresholds):
    relaxed = (collector.YOUNG_THRESHOLD, *collector.OLDER_THRESHOLDS)
    outer, inner = collector.relaxed(), collector.relaxed()
    outer.__enter__()
    assert gc.get_threshold() == relaxed
    inner.__enter__()
    outer.__exit__(None, None, None)  # the first to enter leaves first: the other is still inside
    assert gc.get_threshold() == relaxed
    inner.__exit__(None, None, None)
    assert gc.get_threshold() == thresholds


def test_an_exception_inside_restores_the_thresholds(thresholds):
    with pytest.raises(RuntimeError):
        with collector.relaxed():
            raise RuntimeError("boom")
    assert gc.get_threshold() == thresholds


def test_a_run_simulates_with_the_relaxed_collector_and_gives_the_same_rows(thresholds):
    seen: list[tuple[int, ...]] = []

    def probe() -> bool:  # called inside the event loop, between arrivals
        seen.append(gc.get_threshold())
        return False

    scenario = make_scenario({"run.steps": 20})
    sim = build_simulation(scenario)
    sim.should_stop = probe
    asyncio.run(sim.run())
    assert seen and set(seen) == {(collector.YOUNG_THRESHOLD, *collector.OLDER_THRESHOLDS)}
    assert gc.get_threshold() == thresholds

    gc.disable()  # the same run with no collection at all: the same rows, bit for bit
    try:
        again = build_simulation(scenario)
        asyncio.run(again.run())
    finally:
        gc.enable()
    assert again.sink.updates == sim.sink.updates
