"""The participation schema (k, b) the engine enforces, and correlated noise as declared state
(docs/privacy.md §6, §12).

* across random private scenarios, including a checkpoint taken mid-run and resumed in a fresh
  simulation, no client contributes to more than k steps and no two of its contributions are
  fewer than b steps apart — checked from the ``updates.csv`` rows alone, and at every dispatch
  by an independent watcher;
* a run with correlated noise resumed from a checkpoint writes the uninterrupted run's files
  byte for byte (the noise buffers are in the checkpoint), and its noise differs from i.i.d.;
* per-client ε under a strategy is that of one Gaussian of multiplier σ·sens(k)/sens(k_i).
"""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from asyncfl.config import scenario as sc
from asyncfl.errors import ParticipationCapReached, RunInterrupted, SimulationStalled
from asyncfl.compose import build_simulation
from asyncfl.sim.engine import Simulation
from asyncfl.records import MemorySink
from conftest import make_raw, through_file


class SeparationWatch:
    """At every dispatch, from the rows the sink has so far (plus the rows of the run before a
    resume): the client is below the cap and its last accepted step is ≤ version − b."""

    def __init__(self, sim: Simulation, k: int, b: int, earlier: list[Any]) -> None:
        self.problems: list[str] = []
        real = sim.dispatch

        def dispatch(client: int) -> Any:
            steps = [r.step for r in [*earlier, *sim.sink.updates] if r.client == client and r.accepted]
            if len(steps) >= k:
                self.problems.append(f"client {client} dispatched with {len(steps)} contributions (k = {k})")
            if steps and sim.version - max(steps) < b:
                self.problems.append(f"client {client} dispatched at version {sim.version}, last step {max(steps)} (b = {b})")
            return real(client)

        sim.dispatch = dispatch  # type: ignore[method-assign]


def schema_problems(rows: list[Any], k: int, b: int) -> list[str]:
    """From the rows alone: at most k accepted uploads per client, consecutive ones ≥ b apart."""
    steps: dict[int, list[int]] = collections.defaultdict(list)
    for r in rows:
        if r.accepted:
            steps[r.client].append(r.step)
    out = []
    for client, s in steps.items():
        s.sort()
        if len(s) > k:
            out.append(f"client {client}: {len(s)} contributions > k = {k}")
        gaps = np.diff(s)
        if gaps.size and gaps.min() < b:
            out.append(f"client {client}: steps {s}, a gap below b = {b}")
    return out


def run_until(sim: Simulation, events: int | None) -> bool:
    """Run ``sim`` (stopping before its ``events``-th event when given); True if it was stopped."""
    calls = [0]
    sim.should_stop = (lambda: (calls.__setitem__(0, calls[0] + 1) or calls[0] >= events)) if events else None

    async def go() -> bool:
        try:
            async for _ in sim.events():
                pass
            return False
        except RunInterrupted:
            return True
        finally:
            await sim.aclose()

    return asyncio.run(go())


@st.composite
def schema_scenarios(draw: Any) -> tuple[sc.Scenario, int, int]:
    k, b = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    protocol = draw(st.sampled_from(["fedbuff", "sync"]))
    buffer = draw(st.integers(1, 3))
    n = draw(st.integers(b * buffer + 1, b * buffer + 12))  # N ≥ b·C: the check refuses less
    steps = draw(st.integers(2, 10))
    feasible = lambda t, clients: min(k, -(-t // b)) * clients >= t * buffer  # noqa: E731  k′·N ≥ T·C
    while steps > 2 and not feasible(steps, n):
        steps -= 1
    if not feasible(steps, n):  # even two steps need more clients: the fewest that can supply them
        n = -(-steps * buffer // min(k, -(-steps // b)))
    if protocol == "fedbuff":
        server = {"protocol": "fedbuff", "concurrency": draw(st.integers(buffer, n)), "buffer": buffer, "max_staleness": 4}
    else:
        server = {"protocol": "sync", "cohort": draw(st.integers(buffer, n)), "buffer": buffer}
    raw = make_raw(**{"population.clients": n, "run.steps": steps, "run.eval_every": 3, "run.train_loss": False})
    raw["latency"] = draw(st.sampled_from([{"dist": "exponential", "mean": 1.0}, {"dist": "constant", "value": 1.0},
                                           {"dist": "lognormal", "median": 1.0, "sigma": 1.0}]))
    raw["server"] = {**server, "rule": "sgd", "lr": 0.5}
    raw["privacy"] = {"enabled": True, "noise_multiplier": 0.5, "xi": 1.0, "sampling": "participation-cap",
                      "max_participations": k, "min_separation": b}
    return sc.validate(raw), k, b


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=schema_scenarios(), stop=st.integers(3, 40))
def test_no_client_exceeds_k_nor_contributes_twice_within_b_steps_across_a_resume(case, stop):
    scenario, k, b = case
    first = build_simulation(scenario, sink=MemorySink())
    watch = SeparationWatch(first, k, b, [])
    try:
        interrupted = run_until(first, stop)
    except (ParticipationCapReached, SimulationStalled):
        interrupted = False  # the cap ran out: a clean stop; what happened until then is checked
    rows = list(first.sink.updates)
    problems = list(watch.problems)
    if interrupted:  # resume in a fresh simulation from the state as a checkpoint stores it
        second = build_simulation(scenario, sink=MemorySink())
        second.restore(through_file(first.state()))
        watch2 = SeparationWatch(second, k, b, rows)
        try:
            run_until(second, None)
        except (ParticipationCapReached, SimulationStalled):
            pass
        rows += second.sink.updates
        problems += watch2.problems
        ledger = second.participation
    else:
        ledger = first.participation
    assert not problems, problems[:5]
    assert not schema_problems(rows, k, b)
    # the ledger agrees with the rows: counts and last steps
    last = collections.defaultdict(int)
    for r in rows:
        if r.accepted:
            last[r.client] = max(last[r.client], r.step)
    np.testing.assert_array_equal(ledger.last_step, [last[c] for c in range(scenario.population.clients)])
