"""One-run audit of a private scenario with canary clients (docs/privacy.md §16).

The audit runs the scenario's own private aggregation — the :class:`PrivateAggregator` that
``build_privacy`` resolves from its ``[privacy]`` section (σ, S_Δ, γ, C, M, the noise stream), the
code that clips, sums and adds the noise in every run — over the scenario's ``T`` server steps,
with ``m`` canary clients in place of trained uploads:

* canary ``i`` owns coordinate ``i`` of an ``m``-dimensional upload; it is **included** with
  probability ½ (uploading ``S_Δ·e_i``, at the clip norm) or not (uploading zero: the zero-out
  neighbour of docs/privacy.md §1);
* it takes part in the steps its sampling assumption gives a client, read from the run's
  releases: ``k`` steps chosen uniformly (the cap: a known schedule, which the cap's guarantee
  allows the adversary to know), every step with probability ``q`` (Poisson), or ``k`` of every
  ``t`` steps (random allocation) — the last two secret, as their amplification assumes, so the
  auditor scores a canary over every step;
* the auditor sees only the decoded noisy sums ``r_t`` and scores canary ``i`` by ``Σ r_t[i]`` over
  the steps it scores; it guesses "included" for the ``r`` highest scores and abstains on the
  rest; ``v`` of its guesses are right.

:func:`~analysis.privacy_audit.bound.epsilon_lower_bound` turns ``(m, r, v)`` into an empirical
lower bound on ε at the scenario's δ with confidence ``1 − p``. It must stay below the
accountant's ε; a mechanism whose noise is removed or reduced must be caught. The reduction is a
test-only argument of :func:`audit` (``_noise_scale``), never a scenario key or a command-line
option. Correlated noise (§12) is not audited here (it is refused).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch

from asyncfl.config.scenario import Scenario
from asyncfl.errors import ScenarioError
from asyncfl.privacy import accounting
from asyncfl.server.aggregation import ClientUpdate
from asyncfl.compose import private_aggregator
from analysis.privacy_audit.bound import epsilon_lower_bound


@dataclass(frozen=True)
class AuditResult:
    """One audit: the scenario, ``canaries`` m, ``guesses`` r, ``correct`` v, ``confidence``
    1 − p, the empirical ``epsilon_lower`` and the accountant's ``epsilon_accountant`` at ``delta``,
    the ``schedule`` the auditor scored over (``known`` or ``secret``), ``noise_scale`` (1: the
    scenario's noise) and ``detected``: the lower bound exceeds the accountant's ε."""

    scenario: str
    sampling: str
    canaries: int
    guesses: int
    correct: int
    confidence: float
    epsilon_lower: float
    epsilon_accountant: float
    delta: float
    schedule: str
    noise_scale: float
    detected: bool

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def membership(releases: Any, canaries: int, steps: int, rng: np.random.Generator) -> tuple[np.ndarray, bool]:
    """``(in_step (m × T) bool, secret)``: the steps each canary takes part in under the run's
    releases (module docstring), and whether the schedule is secret from the auditor."""
    out = np.zeros((canaries, steps), dtype=bool)
    if releases.allocated:  # k of every t steps, window by window
        k, t = releases.count, releases.window
        for w in range(-(-steps // t)):
            picks = np.argsort(rng.random((canaries, t)), axis=1)[:, :k] + w * t
            for j in range(k):
                ok = picks[:, j] < steps
                out[np.flatnonzero(ok), picks[ok, j]] = True
        return out, True
    if releases.rate is not None:  # Poisson at q, every step
        return rng.random((canaries, steps)) < releases.rate, True
    k = min(int(releases.count), steps)  # the cap: k distinct steps, known
    picks = np.argsort(rng.random((canaries, steps)), axis=1)[:, :k]
    out[np.repeat(np.arange(canaries), k), picks.ravel()] = True
    return out, False


def audit(scenario: Scenario, canaries: int = 4000, guess_fraction: float = 0.1, p: float = 0.05, seed: int = 0,
          _noise_scale: float = 1.0) -> AuditResult:
    """Audit ``scenario`` with ``canaries`` canary clients, guessing on the top ``guess_fraction``
    of scores, at confidence ``1 − p`` (module docstring). ``_noise_scale`` (tests only) scales the
    aggregator's noise to check that the audit detects a broken mechanism."""
    if not scenario.privacy.enabled:
        raise ScenarioError([f"{scenario.name}: privacy.enabled is false: nothing to audit"])
    setup, aggregator = private_aggregator(scenario, dim=canaries)
    if setup.correlated:
        raise ScenarioError([f"privacy.noise = {setup.noise!r}: the one-run audit covers i.i.d. noise only"])
    aggregator.noise_std *= float(_noise_scale)  # the test-only override (1.0: the scenario's mechanism)
    steps = scenario.run.steps
    rng = np.random.default_rng(seed)
    included = rng.random(canaries) < 0.5
    in_step, secret = membership(setup.releases, canaries, steps, rng)
    noise_rng = np.random.default_rng(seed + 1)
    scores = np.zeros(canaries)
    clip = setup.clip
    for t in range(steps):
        members = np.flatnonzero(in_step[:, t])
        updates = []
        for i in members:
            message = torch.zeros(canaries, dtype=torch.float64)
            if included[i]:
                message[i] = clip
            updates.append(ClientUpdate(client=int(i), version=t + 1, staleness=0, message=message))
        if not updates:  # a step with no canary still releases a noisy sum (of a zero upload)
            updates.append(ClientUpdate(client=-1, version=t + 1, staleness=0, message=torch.zeros(canaries, dtype=torch.float64)))
        r = aggregator.aggregate(t + 1, updates, noise_rng).r.numpy()
        scores += r if secret else np.where(in_step[:, t], r, 0.0)
    guesses = max(1, int(round(guess_fraction * canaries)))
    top = np.argsort(-scores, kind="stable")[:guesses]
    correct = int(included[top].sum())
    lower = epsilon_lower_bound(canaries, guesses, correct, setup.delta, p)
    eps = accounting.epsilon_of(setup.releases, setup.sigma, setup.delta, setup.accountant)
    return AuditResult(scenario=scenario.name, sampling=setup.sampling, canaries=canaries, guesses=guesses,
                       correct=correct, confidence=1.0 - p, epsilon_lower=lower, epsilon_accountant=eps,
                       delta=setup.delta, schedule="secret" if secret else "known", noise_scale=float(_noise_scale),
                       detected=bool(lower > eps))
