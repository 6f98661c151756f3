"""Per-client budgets: the privacy filter ``privacy.client_budget`` (docs/privacy.md §14).

* ``k_B`` is the largest count whose realised ε (the closed form of μ-GDP, μ = √k/σ) stays within
  the budget — checked against a brute-force loop over k;
* in a run, no client contributes more than ``k_B`` times (recounted from the rows), and the
  summary's ``clients_retired`` / ``retired_at`` are exactly the rows' clients with k_B
  contributions and the steps of their last one;
* a budget so small that a step cannot fill stops the run with a clear stalled status naming
  ``privacy.client_budget`` (not a hang); one below the ε of a single participation is refused.
"""

from __future__ import annotations

import collections
import math

import numpy as np
import pytest

from asyncfl.config import scenario as sc
from asyncfl.errors import ParticipationCapReached, ScenarioError
from asyncfl.privacy import budget, per_client
from asyncfl.privacy.accountants import Releases
from asyncfl.records import MemorySink
from asyncfl.compose import build_simulation
from conftest import make_raw
from test_privacy_schema import run_until


@pytest.mark.parametrize("sigma, eps_max, delta", [(1.0, 5.0, 1e-6), (2.5, 3.0, 1e-5), (0.8, 20.0, 1e-6)])
def test_budget_participations_is_the_largest_count_within_the_budget(sigma, eps_max, delta):
    k_b = budget.budget_participations(lambda k: (Releases(k), sigma), eps_max, delta, "pld", 200)
    brute = max((k for k in range(1, 201) if per_client.gdp_epsilon(math.sqrt(k) / sigma, delta) <= eps_max), default=0)
    # the PLD bound is pessimistic by its grid: it may retire a client one count early, never late
    assert brute - 1 <= k_b <= brute
    assert per_client.gdp_epsilon(math.sqrt(k_b) / sigma, delta) <= eps_max


def budget_raw(eps_max: float, n: int = 16, steps: int = 10) -> dict:
    raw = make_raw(**{"population.clients": n, "run.steps": steps, "run.eval_every": 5, "run.train_loss": False})
    raw["server"] = {"protocol": "fedbuff", "concurrency": 4, "buffer": 2, "max_staleness": 4, "rule": "sgd", "lr": 0.5}
    raw["privacy"] = {"enabled": True, "noise_multiplier": 2.0, "xi": 4.0, "client_budget": eps_max}
    return raw


def test_no_client_exceeds_its_budget_and_the_summary_says_who_retired_when():
    scenario = sc.validate(budget_raw(3.5))
    sim = build_simulation(scenario, sink=MemorySink())
    k_b = sim.privacy_setup.budget_participations
    assert k_b == budget.budget_participations(lambda k: (Releases(k), 2.0), 3.5, 1e-6, "pld", 10) and k_b >= 1
    run_until(sim, None)
    rows = list(sim.sink.updates)
    counts = collections.Counter(r.client for r in rows if r.accepted)
    assert max(counts.values()) <= k_b
    last = {c: max(r.step for r in rows if r.accepted and r.client == c) for c in counts}
    retired = sorted(last[c] for c, n in counts.items() if n == k_b)
    report = sim.privacy_summary()
    assert report["clients_retired"] == len(retired) > 0
    assert report["retired_at"] == [[s, n] for s, n in sorted(collections.Counter(retired).items())]
    assert report["epsilon_client_max"] <= 3.5


def test_a_budget_that_empties_the_population_stops_the_run_clearly():
    # k_B = 1 (σ = 2: one participation ε ≈ 2.1, two ≈ 3.1) and 16 clients for 10 steps of 2
    sim = build_simulation(sc.validate(budget_raw(2.5)), sink=MemorySink())
    assert sim.privacy_setup.budget_participations == 1
    with pytest.raises(ParticipationCapReached, match=r"privacy.client_budget = 2.5: \d+ of population.clients = 16"):
        run_until(sim, None)
    assert 0 < sim.steps_done < 10


def test_a_budget_below_one_participation_is_refused():
    from asyncfl.privacy.aggregator import build_privacy

    scenario = sc.validate(budget_raw(0.5))
    with pytest.raises(ScenarioError, match="privacy.client_budget = 0.5: below the ε of one participation"):
        build_privacy(scenario.privacy, 2, 16, 10, 4, 0.5)
