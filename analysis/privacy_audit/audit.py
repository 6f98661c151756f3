"""One-run audit of a private scenario with canary clients (docs/privacy.md §16).

The audit runs the scenario's own private aggregation — the :class:`PrivateAggregator` that
``build_privacy`` resolves from its ``[privacy]`` section (σ, S_Δ, γ, C, M, the noise draw), the
code that clips, sums and adds the noise in every run — over the scenario's ``T`` server steps,
with ``m`` canary clients in place of trained uploads (white-box gradient canaries, Steinke,
Nasr & Jagielski 2023 §7):

* canary ``i`` owns one coordinate of the upload and is **included** with probability ½
  (uploading ``S_Δ`` times that basis vector, at the clip norm) or not (uploading zero: the
  zero-out neighbour of docs/privacy.md §1);
* the canaries are split into blocks of at most ``block``; each block is one pass of the
  aggregator over the ``T`` steps with its own coordinates (dimension = the block's size) and
  its own noise draws. The theorem behind the bound needs only that the whole output be
  (ε, δ)-DP with respect to each canary's inclusion, which holds: a canary enters one pass, and
  the other passes are independent of it. Blocks keep the cost linear in ``m`` (a pass costs
  its members times its dimension);
* a canary takes part in the steps its sampling assumption gives a client, read from the run's
  releases: ``k`` steps chosen uniformly (the cap: a known schedule, which the cap's guarantee
  allows the adversary to know), every step with probability ``q`` (Poisson), or ``k`` of every
  ``t`` steps (random allocation) — the last two secret, as their amplification assumes;
* the auditor sees only the decoded noisy sums ``r_t``: it reads canary ``i``'s coordinate (the
  inner product of the canary with the release), normalises it by the claimed noise, and scores
  the canary by its log-likelihood ratio under the claimed mechanism
  (:mod:`~analysis.privacy_audit.scores`); it guesses "included" for the ``k₊`` highest scores,
  "not included" for the ``k₋`` lowest, and abstains on the rest; ``v`` of its ``r = k₊ + k₋``
  guesses are right.

:func:`~analysis.privacy_audit.bound.epsilon_lower_bound` turns ``(m, r, v)`` into an empirical
lower bound on ε at the scenario's δ with confidence ``1 − p``. It must stay below the
accountant's ε; a mechanism whose noise is removed or halved must be caught. The reduction is a
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
from analysis.privacy_audit import scores
from analysis.privacy_audit.bound import epsilon_lower_bound

#: the guesses (k₊/m, k₋/m) by membership law, fixed before any audit from the Gaussian model of
#: the canaries' scores at m = 50 000 (docs/privacy.md §16): the known schedule (cap) guesses both
#: tails, the secret ones only the top (a canary that was never sampled looks like an absent one,
#: so low scores say little)
GUESSES = {"known": (0.005, 0.005), "poisson": (0.005, 0.0), "allocation": (0.01, 0.0)}
#: the default number of canaries and the block size (docs/privacy.md §16)
CANARIES = 50_000
BLOCK = 1000


@dataclass(frozen=True)
class AuditResult:
    """One audit: the scenario, ``canaries`` m, ``guesses`` r = k₊ + k₋ (``guess_in`` k₊,
    ``guess_out`` k₋), ``correct`` v, ``confidence`` 1 − p, the empirical ``epsilon_lower`` and the
    accountant's ``epsilon_accountant`` at ``delta``, the ``schedule`` the auditor scored over
    (``known`` or ``secret``), ``noise_scale`` (1: the scenario's noise) and ``detected``: the
    lower bound exceeds the accountant's ε."""

    scenario: str
    sampling: str
    canaries: int
    guesses: int
    guess_in: int
    guess_out: int
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


def released(aggregator: Any, included: np.ndarray, in_step: np.ndarray, clip: float, block: int,
             rng: np.random.Generator) -> np.ndarray:
    """``(m × T)``: each canary's coordinate of every step's decoded release ``r_t``, the canaries
    run through ``aggregator`` in blocks of at most ``block`` (module docstring)."""
    m, steps = in_step.shape
    out = np.zeros((m, steps))
    for start in range(0, m, block):
        size = min(block, m - start)
        for t in range(steps):
            members = start + np.flatnonzero(in_step[start:start + size, t])
            updates = []
            for i in members:
                message = torch.zeros(size, dtype=torch.float64)
                if included[i]:
                    message[i - start] = clip
                updates.append(ClientUpdate(client=int(i), version=t + 1, staleness=0, message=message))
            if not updates:  # a step with no canary still releases a noisy sum (of a zero upload)
                updates.append(ClientUpdate(client=-1, version=t + 1, staleness=0, message=torch.zeros(size, dtype=torch.float64)))
            out[start:start + size, t] = aggregator.aggregate(t + 1, updates, rng).r.numpy()
    return out


def law(releases: Any) -> str:
    """The membership law of the releases: ``known`` (the cap), ``poisson`` or ``allocation``."""
    return "allocation" if releases.allocated else "poisson" if releases.rate is not None else "known"


def canary_scores(z: np.ndarray, in_step: np.ndarray, secret: bool, releases: Any, mu: float) -> np.ndarray:
    """The log-likelihood-ratio score of each canary (:mod:`~analysis.privacy_audit.scores`) from
    its normalised coordinates ``z`` (m × T) under the claimed signal-to-noise ``mu``."""
    if not secret:
        return scores.known(z, in_step)
    if releases.allocated:
        return scores.allocation(z, mu, int(releases.count), int(releases.window))
    return scores.poisson(z, mu, float(releases.rate))


def guess(scores_: np.ndarray, included: np.ndarray, guess_in: int, guess_out: int) -> int:
    """``v``: how many of the guesses are right — "included" for the ``guess_in`` highest scores,
    "not included" for the ``guess_out`` lowest (ties broken by canary index)."""
    m = scores_.size
    if guess_in < 0 or guess_out < 0 or guess_in + guess_out > m or guess_in + guess_out == 0:
        raise ValueError(f"guesses k+ = {guess_in}, k- = {guess_out}: need k+, k- ≥ 0 and 1 ≤ k+ + k- ≤ m = {m}")
    order = np.argsort(-scores_, kind="stable")
    top, bottom = order[:guess_in], order[m - guess_out:] if guess_out else order[:0]
    return int(included[top].sum() + (~included[bottom]).sum())


def audit(scenario: Scenario, canaries: int = CANARIES, guess_in: float | None = None, guess_out: float | None = None,
          p: float = 0.05, seed: int = 0, block: int = BLOCK, _noise_scale: float = 1.0) -> AuditResult:
    """Audit ``scenario`` with ``canaries`` canary clients, guessing "included" on the top
    ``guess_in`` and "not included" on the bottom ``guess_out`` fraction of scores (default: the
    schedule's :data:`GUESSES`), at confidence ``1 − p`` (module docstring). ``_noise_scale``
    (tests only) scales the aggregator's noise to check that the audit detects a broken mechanism;
    the auditor still scores with the claimed noise."""
    if not scenario.privacy.enabled:
        raise ScenarioError([f"{scenario.name}: privacy.enabled is false: nothing to audit"])
    if canaries < 1 or block < 1:
        raise ScenarioError([f"canaries = {canaries}, block = {block}: both must be at least 1"])
    for name, frac in (("guess_in", guess_in), ("guess_out", guess_out)):
        if frac is not None and not 0.0 <= frac <= 1.0:
            raise ScenarioError([f"{name} = {frac}: a fraction of the canaries, in [0, 1]"])
    setup, aggregator = private_aggregator(scenario, dim=min(block, canaries))
    if setup.correlated:
        raise ScenarioError([f"privacy.noise = {setup.noise!r}: the one-run audit covers i.i.d. noise only"])
    f_in, f_out = GUESSES[law(setup.releases)]
    k_in = int(round((f_in if guess_in is None else guess_in) * canaries))
    k_out = int(round((f_out if guess_out is None else guess_out) * canaries))
    if k_in + k_out < 1 or k_in + k_out > canaries:
        raise ScenarioError([f"guess_in, guess_out: {k_in} + {k_out} guesses of m = {canaries} canaries; need 1 … m"])
    claimed_std = float(aggregator.noise_std)
    aggregator.noise_std *= float(_noise_scale)  # the test-only override (1.0: the scenario's mechanism)
    steps = scenario.run.steps
    rng = np.random.default_rng(seed)
    included = rng.random(canaries) < 0.5
    in_step, secret = membership(setup.releases, canaries, steps, rng)
    r = released(aggregator, included, in_step, setup.clip, block, np.random.default_rng(seed + 1))
    # r = (S_Δ·[in] + noise)/C on the canary's coordinate: z in units of the claimed noise
    z = r * aggregator.buffer / claimed_std
    mu = setup.clip / claimed_std
    correct = guess(canary_scores(z, in_step, secret, setup.releases, mu), included, k_in, k_out)
    lower = epsilon_lower_bound(canaries, k_in + k_out, correct, setup.delta, p)
    eps = accounting.epsilon_of(setup.releases, setup.sigma, setup.delta, setup.accountant)
    schedule = "secret" if secret else "known"
    return AuditResult(scenario=scenario.name, sampling=setup.sampling, canaries=canaries, guesses=k_in + k_out,
                       guess_in=k_in, guess_out=k_out, correct=correct, confidence=1.0 - p, epsilon_lower=lower,
                       epsilon_accountant=eps, delta=setup.delta, schedule=schedule, noise_scale=float(_noise_scale),
                       detected=bool(lower > eps))
