"""The private aggregator and the resolution of a ``[privacy]`` section (docs/privacy.md).

:class:`PrivateAggregator` implements the :class:`~asyncfl.server.aggregation.Aggregator` protocol:
per step it builds each buffered client's payload ``y_k``, adds them into one running sum,
adds one draw of ``N(0, (σ S C/M)² I)`` on all ``d + L`` coordinates (``M = C`` without a noise
cohort, docs/privacy.md §7), and decodes::

    r_t = (noisy sum)[:d] / C,   ĉ_τ = (noisy sum)[d:] / γ,   W[t, t−τ] = (τ+1)^(−p) ĉ'_τ / C

with ``ĉ'`` the post-processed counts (:func:`~asyncfl.privacy.mechanism.postprocess_counts`).
The server rule only ever receives the returned :class:`~asyncfl.server.aggregation.Aggregate`.

:func:`build_privacy` resolves the section: the sampling assumption (``privacy.sampling``,
:data:`~asyncfl.config.registries.SAMPLINGS`) says which releases the run makes about a client,
σ is calibrated for them (or given), and γ/ξ follow; :func:`summary` and :func:`epsilon_curve`
are what a run reports (docs/privacy.md §10).
"""

from __future__ import annotations

import dataclasses
import math

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch

from asyncfl.components.registry import REGISTRY
from asyncfl.config.registries import SAMPLINGS
from asyncfl.errors import ScenarioError
from asyncfl.privacy import accounting, allocation, budget, factorization, mechanism, per_client, tradeoff
from asyncfl.privacy.accountants import Releases
from asyncfl.privacy.factorization import CorrelatedNoise, NoiseContext, NoiseState, Strategy
from asyncfl.privacy.sampling import RunShape, SamplingAssumption
from asyncfl.server.aggregation import Aggregate, ClientUpdate, staleness_weight, weight_row


class PrivateAggregator:
    """Gaussian mechanism on staleness-tagged payloads (docs/privacy.md).

    Isolation of individual clients is structural:

    * payloads exist only inside :meth:`aggregate`, one at a time, and are added into a single
      float64 buffer of ``d + L`` coordinates before the noise; nothing per-client is stored;
    * the returned :class:`Aggregate` holds the step number, a freshly allocated ``r`` (not a
      view of the sum, detached from any autograd graph that could lead back to a client's
      tensor) and a freshly computed ``weights`` row;
    * it keeps no per-client state: the correlated noise's buffers hold past *noise* only
      (:meth:`noise_state`, declared state), and the raw noisy counts ``ĉ_τ`` (a post-processing of the noisy sum) are
      returned in the aggregate (``Aggregate.raw_counts``) for the run's ``private_by_staleness``.

    Payloads and the noisy sum are computed in float64 so that rounding cannot push a payload
    over the sensitivity ``S``; ``r`` is returned in the clients' dtype and device.
    """

    def __init__(
        self,
        buffer: int,
        exponent: float,
        num_staleness: int,
        sigma: float,
        clip: float,
        gamma: float,
        counts: mechanism.CountsMode = "project",
        noise_cohort: int | None = None,
        strategy: Strategy | None = None,
        strategy_sensitivity: float = 1.0,
        dim: int | None = None,
    ) -> None:
        if num_staleness is None or num_staleness < 1:
            raise ScenarioError(["server.max_staleness: must be set when privacy is enabled"])
        self.buffer = int(buffer)
        self.exponent = float(exponent)
        self.num_staleness = int(num_staleness)  # L = max_staleness + 1
        self.sigma = float(sigma)
        self.clip = float(clip)
        self.gamma = float(gamma)
        self.counts = counts
        # an analysis oracle (CountsTraits.exact) is handed the step's exact counts (docs/privacy.md §3)
        self.oracle = bool(REGISTRY.get("counts", counts).traits.exact)
        self.noise_cohort = self.buffer if noise_cohort is None else int(noise_cohort)  # M
        if self.noise_cohort < self.buffer:
            raise ScenarioError([f"privacy.noise_cohort = {self.noise_cohort}: must be at least server.buffer = {self.buffer}"])
        # σ S C/M: the noise of a deployment summing M uploads, seen on a sum of C (C/M = 1.0
        # exactly without a noise cohort, so σS is then bit for bit the plain mechanism's)
        self.noise_std = self.sigma * mechanism.sensitivity(self.clip, self.gamma) * (self.buffer / self.noise_cohort)
        # a correlated strategy C: z_t ~ N(0, (σ · sens(C) · S · C/M)²) streamed through C⁻¹ (§12);
        # the identity (i.i.d.) has sens = 1 (the product is exact) and passes z_t through unchanged
        self.strategy = strategy
        self.noise_std *= float(strategy_sensitivity)
        self.stream: CorrelatedNoise | None = None
        if strategy is not None and dim is not None:
            self.stream = CorrelatedNoise(strategy, dim + self.num_staleness)

    def noise_state(self) -> NoiseState | None:
        """The correlated noise's buffers (declared state; None before the first step of a run
        built without its dimension, or without a strategy)."""
        return None if self.stream is None else self.stream.state()

    def restore_noise(self, state: NoiseState) -> None:
        if self.strategy is None:
            raise ValueError("noise state given to an aggregator without a noise strategy")
        if self.stream is None:
            self.stream = CorrelatedNoise(self.strategy, int(np.asarray(state.buffers).shape[1]))
        self.stream.restore(state)

    def aggregate(self, step: int, updates: Sequence[ClientUpdate], rng: np.random.Generator) -> Aggregate:
        """One private step: ``Σ_k y_k + N(0, (σSC/M)² I)`` decoded into an :class:`Aggregate`.

        Draws exactly ``d + L`` normals from ``rng`` (``rng.normal(0, σSC/M, d + L)``; with a
        correlated strategy the std carries ``sens(C)`` and the step's noise is
        :meth:`CorrelatedNoise.next` of the draw, docs/privacy.md §12). The decode
        divides by the fixed ``C = server.buffer``, also in a synchronous round that accepted
        fewer: the number of contributions is not released (docs/privacy.md §2, §9)."""
        if not updates:
            raise ValueError(f"step {step}: no client updates to aggregate")
        L = self.num_staleness
        like = updates[0].message
        d = like.numel()
        with torch.no_grad():
            total = torch.zeros(d + L, dtype=torch.float64, device=like.device)
            for u in updates:
                w = float(staleness_weight(u.staleness, self.exponent))
                total.add_(mechanism.payload(u.message, u.staleness, w, self.clip, self.gamma, L))
            noise = rng.normal(0.0, self.noise_std, size=d + L)
            if self.strategy is not None:
                if self.stream is None:
                    self.stream = CorrelatedNoise(self.strategy, d + L)
                noise = self.stream.next(noise)
            total.add_(torch.from_numpy(noise).to(device=total.device))
            r, c_hat = mechanism.decode(total, d, L, self.buffer, self.gamma)
            r = r.to(dtype=like.dtype).reshape(like.shape).clone()
        del total  # the noisy sum is not kept either
        exact = np.bincount([min(int(u.staleness), L - 1) for u in updates], minlength=L) if self.oracle else None
        counts = mechanism.postprocess_counts(c_hat, self.buffer, self.counts, exact)
        return Aggregate(step=int(step), r=r, weights=weight_row(counts, self.buffer, self.exponent), raw_counts=c_hat.copy())


@dataclass(frozen=True)
class PrivacySetup:
    """Resolved privacy parameters of a run (docs/privacy.md).

    ``sigma`` σ (noise multiplier), ``gamma`` γ, ``xi`` ξ = σS/γ, ``clip`` S_Δ, ``delta`` δ,
    ``epsilon_target`` (None when σ was given), ``accountant``, ``counts`` (post-processing),
    ``sampling`` (the assumption's name), ``shape`` (what the assumption knows of the run),
    ``releases`` (what σ was calibrated for: ``Releases(T, q)`` or ``Releases(k)``, or
    ``Releases(1)`` for correlated noise: the whole run is one Gaussian release of ``C X``), and the
    noise mechanism: ``noise`` (its name), ``strategy`` and ``strategy_sensitivity`` ``sens(C)``
    under the schema (k, b) (None and 1.0 for i.i.d. noise; docs/privacy.md §12)."""

    sigma: float
    gamma: float
    xi: float
    clip: float
    delta: float
    epsilon_target: float | None
    accountant: str
    counts: str
    sampling: str
    shape: RunShape
    releases: Releases
    noise: str = "iid"
    strategy: Strategy | None = None
    strategy_sensitivity: float = 1.0
    #: the privacy filter (docs/privacy.md §14): ``privacy.client_budget`` ε_max and ``k_B``, the most
    #: contributions whose realised ε stays within it (None, None: no budget)
    client_budget: float | None = None
    budget_participations: int | None = None

    @property
    def correlated(self) -> bool:
        return self.strategy is not None

    def client_release(self, count: int) -> tuple[Releases, float]:
        """``(releases, σ)`` of a client that contributed to ``count`` ≥ 1 steps, composed
        without amplification (docs/privacy.md §11): i.i.d. noise — ``count`` Gaussian releases
        at σ; correlated — one Gaussian release at ``σ · sens(C; k, b) / sens(C; count, b)``, the
        worst admissible pattern of ``count`` contributions (an upper bound on the client's ε)."""
        if self.strategy is None:
            return Releases(int(count)), self.sigma
        own = factorization.strategy_sensitivity(self.strategy, int(count), self.shape.min_separation)
        return Releases(1), self.sigma * self.strategy_sensitivity / own

    @property
    def sensitivity(self) -> float:
        """``S = √(S_Δ² + γ²)``."""
        return mechanism.sensitivity(self.clip, self.gamma)

    @property
    def assumption(self) -> SamplingAssumption:
        return SAMPLINGS.make(self.sampling)

    @property
    def cap(self) -> int | None:
        """The participation cap ``k`` the engine enforces (None under Poisson)."""
        return self.assumption.cap(self.shape)

    @property
    def noise_cohort(self) -> int:
        return self.shape.noise_cohort

    @property
    def noise_multiplier_of_run(self) -> float:
        """``σ C/M``: the noise multiplier of the simulated sum itself (σ when ``M = C``)."""
        return self.sigma * (self.shape.buffer / self.shape.noise_cohort)


def resolve_sigma(privacy_cfg: Any, shape: RunShape) -> tuple[float, Releases]:
    """``(σ, releases)`` of a ``[privacy]`` section for a run of ``shape``: the releases are the
    sampling assumption's (docs/privacy.md §5–6), σ is ``noise_multiplier`` if given, else
    calibrated to (``epsilon``, ``delta``) for those releases. Shared by the run and the sweep."""
    p = privacy_cfg
    if p.sampling not in SAMPLINGS:
        raise ScenarioError([SAMPLINGS.unknown(p.sampling)])
    releases = SAMPLINGS.make(p.sampling).releases(shape)
    if REGISTRY.get("noise", p.noise).traits.correlated:
        releases = Releases(1)  # C X is one Gaussian release; the participations are inside sens(C) (§12)
    if p.noise_multiplier is not None:
        return float(p.noise_multiplier), releases
    return accounting.sigma_for(releases, p.epsilon, p.delta, p.accountant), releases


def schema_of(privacy_cfg: Any) -> tuple[int | None, int]:
    """``(k, b)``: the participation schema of the section's sampling assumption (its trait
    ``schema`` of its own config; ``(None, 1)`` without one, docs/privacy.md §6)."""
    component = REGISTRY.get("sampling", privacy_cfg.sampling)
    schema = component.traits.schema
    return (None, 1) if schema is None else schema(component.own_config(privacy_cfg))


def run_shape(privacy_cfg: Any, protocol: str, clients: int, buffer: int, steps: int) -> RunShape:
    """What the sampling assumption knows of a run (:class:`~asyncfl.privacy.sampling.RunShape`):
    ``M = privacy.noise_cohort`` (``C`` when not given), the schema (k, b) (:func:`schema_of`) and
    the protocol's account of why its choice of clients is not a Poisson sample (its traits)."""
    cohort = int(buffer) if privacy_cfg.noise_cohort is None else int(privacy_cfg.noise_cohort)
    k, b = schema_of(privacy_cfg)
    return RunShape(protocol=protocol, clients=int(clients), buffer=int(buffer), noise_cohort=cohort,
                    steps=int(steps), max_participations=k, min_separation=b, allotment=allotment_of(privacy_cfg),
                    not_poisson=REGISTRY.get("protocol", protocol).traits.not_poisson)


def allotment_of(privacy_cfg: Any) -> tuple[int, int] | None:
    """``(k, t)``: the sampling assumption's allotment (its trait ``allotment`` of its own config;
    None without one, docs/privacy.md §13)."""
    component = REGISTRY.get("sampling", privacy_cfg.sampling)
    allot = component.traits.allotment
    return None if allot is None else allot(component.own_config(privacy_cfg))


def sampling_report(sampling: str, shape: RunShape) -> dict[str, Any]:
    """``sampling``, ``claim`` (``approximation`` or ``guarantee``), ``statement``, and
    ``sampling_rate`` q or ``max_participations`` k: what a table says the ε rests on."""
    if sampling not in SAMPLINGS:
        raise ScenarioError([SAMPLINGS.unknown(sampling)])
    assumption: SamplingAssumption = SAMPLINGS.make(sampling)
    return {"sampling": sampling, "claim": assumption.claim, "statement": assumption.statement(shape),
            **assumption.parameters(shape)}


def build_privacy(
    privacy_cfg: Any,
    buffer: int,
    clients: int,
    steps: int,
    max_staleness: int | None,
    exponent: float,
    protocol: str = "fedbuff",
    noise_beta: float | None = None,
    dim: int | None = None,
) -> tuple[PrivacySetup, PrivateAggregator]:
    """Resolve a ``[privacy]`` section (:class:`~asyncfl.config.scenario.PrivacyConfig`) into a
    :class:`PrivacySetup` and its :class:`PrivateAggregator`.

    σ is ``noise_multiplier`` if given, else calibrated to (``epsilon``, ``delta``) for the
    releases of the sampling assumption (:func:`resolve_sigma`): Poisson at
    ``q = noise_cohort / clients`` over ``steps``, or ``max_participations`` un-subsampled
    releases. γ follows from ``xi`` (``γ = σS_Δ/√(ξ² − σ²)``, ξ must exceed σ) or ξ from
    ``gamma`` (``ξ = σS/γ``). Every problem raises :class:`ScenarioError` naming the field.

    The noise mechanism ``privacy.noise`` builds its strategy ``C`` for ``steps`` under the schema
    (k, b) (a momentum workload with ``noise_beta``); a correlated one is optimised here, its
    ``sens(C)`` computed exactly, and σ calibrated for one Gaussian release (docs/privacy.md §12).
    ``dim`` (the upload's length d) sizes the noise buffers now (else at the first step)."""
    p = privacy_cfg
    problems: list[str] = []
    if (p.epsilon is None) == (p.noise_multiplier is None):
        problems.append("privacy.epsilon, privacy.noise_multiplier: give exactly one (a target ε to calibrate σ, or σ itself)")
    if (p.xi is None) == (p.gamma is None):
        problems.append("privacy.xi, privacy.gamma: give exactly one (the count-noise level ξ, or the payload scale γ)")
    if max_staleness is None:
        problems.append("server.max_staleness: must be set when privacy is enabled (the one-hot staleness payload has length max_staleness + 1)")
    if not 1 <= buffer <= clients:
        problems.append(f"server.buffer = {buffer}: must be between 1 and population.clients = {clients}")
    cohort = buffer if p.noise_cohort is None else int(p.noise_cohort)
    if cohort < buffer:
        problems.append(f"privacy.noise_cohort = {cohort}: must be at least server.buffer = {buffer}")
    if p.sampling not in SAMPLINGS:
        problems.append(SAMPLINGS.unknown(p.sampling))
    elif SAMPLINGS.get(p.sampling).traits.schema is not None and schema_of(p)[0] is None:
        problems.append(f"privacy.max_participations: required with privacy.sampling = {p.sampling!r}")
    if problems:
        raise ScenarioError(problems)
    shape = run_shape(p, protocol, clients, buffer, steps)
    noise = REGISTRY.get("noise", p.noise)
    strategy: Strategy | None = None
    sens = 1.0
    if noise.traits.correlated:
        if shape.max_participations is None:
            raise ScenarioError([f"privacy.noise = {p.noise!r}: correlated noise needs a participation schema "
                                 f"(privacy.sampling = {p.sampling!r} has none)"])
        ctx = NoiseContext(steps=int(steps), k=shape.max_participations, b=shape.min_separation, beta=noise_beta)
        try:
            strategy = noise.make(noise.own_config(p), ctx)
            sens = factorization.strategy_sensitivity(strategy, min(shape.max_participations, int(steps)), shape.min_separation)
        except ValueError as exc:
            raise ScenarioError([f"privacy.noise = {p.noise!r}: {exc}"]) from None
        if not (np.all(np.isfinite(strategy.column)) and math.isfinite(sens) and sens > 0):
            # a numerical fault of the optimiser (seen: 2 bands at k = 30, b = 10 on the momentum
            # workload) must not reach the noise: refused, naming the setting
            raise ScenarioError([f"privacy.noise = {p.noise!r}: optimising the strategy for T = {steps}, "
                                 f"k = {shape.max_participations}, b = {shape.min_separation} gave a non-finite "
                                 "result; choose another noise_bands / noise_buffers, or privacy.noise = 'blt'"])
    sigma, releases = resolve_sigma(p, shape)
    if p.xi is not None and sigma == 0:
        raise ScenarioError([f"privacy.xi = {p.xi}: with privacy.noise_multiplier = 0 (clip only) the counts carry no noise; "
                             "give privacy.gamma (the payload scale, e.g. 1.0) instead"])
    if p.xi is not None:
        if not p.xi > sigma:
            how = "given" if p.noise_multiplier is not None else f"calibrated to ε = {p.epsilon}, δ = {p.delta}"
            raise ScenarioError([f"privacy.xi = {p.xi}: must exceed the noise multiplier σ = {sigma:.6g} ({how})"])
        xi = float(p.xi)
        gamma = mechanism.gamma_from_xi(sigma, p.clip, xi)
    else:
        gamma = float(p.gamma)
        xi = mechanism.xi_from_gamma(sigma, p.clip, gamma)
    setup = PrivacySetup(
        sigma=sigma, gamma=gamma, xi=xi, clip=float(p.clip), delta=float(p.delta),
        epsilon_target=None if p.epsilon is None else float(p.epsilon), accountant=p.accountant,
        counts=p.counts, sampling=p.sampling, shape=shape, releases=releases,
        noise=p.noise, strategy=strategy, strategy_sensitivity=sens,
    )
    if p.client_budget is not None:
        k_b = budget.budget_participations(setup.client_release, float(p.client_budget), setup.delta, setup.accountant,
                                           int(steps))
        if k_b < 1:
            eps_one = accounting.epsilon_of(*setup.client_release(1), setup.delta, setup.accountant)
            raise ScenarioError([f"privacy.client_budget = {p.client_budget}: below the ε of one participation "
                                 f"({eps_one:.4g} at σ = {sigma:.4g}, δ = {setup.delta}): no client could ever be "
                                 "dispatched; raise it, or the noise"])
        setup = dataclasses.replace(setup, client_budget=float(p.client_budget), budget_participations=k_b)
    aggregator = PrivateAggregator(
        buffer=buffer, exponent=exponent, num_staleness=max_staleness + 1, sigma=sigma,
        clip=setup.clip, gamma=gamma, counts=p.counts, noise_cohort=cohort,
        strategy=noise.make(noise.own_config(p), NoiseContext(int(steps), None, 1, None)) if strategy is None else strategy,
        strategy_sensitivity=sens, dim=dim,
    )
    return setup, aggregator


def summary(setup: PrivacySetup, participations: np.ndarray | None = None,
            last_step: np.ndarray | None = None) -> dict[str, Any]:
    """What a run reports (docs/privacy.md §10): ``sigma``, ``gamma``, ``xi``, ``epsilon_spent``
    (by the setup's accountant, for the σ used and the whole run's releases; ``inf`` for
    negligible noise), ``delta``, ``accountant``; the sampling assumption (``sampling``,
    ``claim`` — ``approximation`` or ``guarantee`` —, ``statement``, ``sampling_rate`` q or
    ``max_participations`` k); the noise cohort (``noise_cohort`` M, ``buffer`` C,
    ``noise_multiplier_of_run`` σC/M, ``epsilon_of``: whose ε it is); and, given the participations
    per client, ``participations_max``, ``participations_mean`` (over all N clients),
    ``clients_participated`` and ``clients_at_cap`` (None without a cap), and each client's realised
    ε composed without amplification (:func:`asyncfl.privacy.per_client.client_summary`:
    ``epsilon_client_max``, its quantiles, ``mu_client_max``; docs/privacy.md §11)."""
    eps = accounting.epsilon_of(setup.releases, setup.sigma, setup.delta, setup.accountant)
    shape = setup.shape
    report = sampling_report(setup.sampling, shape)
    statement = report.pop("statement")
    if shape.noise_cohort != shape.buffer:
        whose = f"a deployment whose buffer sums noise_cohort = {shape.noise_cohort} uploads"
        statement += (f". The noise is that of {whose}, scaled by C/M = {shape.buffer}/{shape.noise_cohort} on this "
                      f"simulation's sums of C = {shape.buffer}: the ε is that deployment's, not this run's, whose own "
                      f"sums carry noise multiplier σC/M = {setup.noise_multiplier_of_run:.4g} (docs/privacy.md §7)")
    else:
        whose = "this run"
    if setup.correlated:  # not k Gaussian releases: one release of the factorised mechanism (§12)
        statement += (f". The noise is correlated across steps ({setup.noise} strategy): the whole run is one Gaussian "
                      f"release of the factorised mechanism, with sensitivity {setup.strategy_sensitivity:.4g} under "
                      f"the (k, b) = ({shape.max_participations}, {shape.min_separation}) schema, and ε is that "
                      "release's (docs/privacy.md §12), not the k-fold composition above")
    if REGISTRY.get("counts", setup.counts).traits.exact:  # an analysis oracle (docs/privacy.md §3)
        statement = (f"NOT PRIVATE: privacy.counts = {setup.counts!r} reads the exact staleness counts (an analysis "
                     "oracle), so the counts the server uses are released without noise; the ε below covers the "
                     "model update only. " + statement)
    out: dict[str, Any] = {
        "sigma": setup.sigma,
        "gamma": setup.gamma,
        "xi": setup.xi,
        "epsilon_spent": eps,
        "delta": setup.delta,
        "accountant": setup.accountant,
        **report,
        "statement": statement,
        "noise_cohort": shape.noise_cohort,
        "buffer": shape.buffer,
        "noise_multiplier_of_run": setup.noise_multiplier_of_run,
        "epsilon_of": whose,
        "min_separation": shape.min_separation if shape.max_participations is not None else None,
        "noise": setup.noise,
        "strategy_sensitivity": setup.strategy_sensitivity if setup.correlated else None,
    }
    if setup.releases.allocated:  # random allocation: pld-accounting's lower bound too (§13)
        out["epsilon_lower"] = allocation.allocation_epsilon(setup.releases, setup.sigma, setup.delta, lower=True).lower
    if setup.client_budget is not None:  # the privacy filter's retirements (§14)
        out.update(budget.retirements(setup, participations, last_step))
    most = 0 if participations is None else int(participations.max(initial=0))
    out["tradeoff"] = run_tradeoff(setup, most)
    if participations is not None:
        cap = setup.cap
        out.update(
            participations_max=int(participations.max(initial=0)),
            participations_mean=float(participations.mean()) if participations.size else 0.0,
            clients_participated=int(np.count_nonzero(participations)),
            clients_at_cap=None if cap is None else int(np.count_nonzero(participations >= cap)),
            **per_client.client_summary(participations, setup.sigma, setup.delta, setup.accountant,
                                        release=setup.client_release),
        )
    return out


def run_tradeoff(setup: PrivacySetup, most: int) -> dict[str, Any]:
    """The f-DP trade-off (docs/privacy.md §15): an attacker's best true positive rate at the false
    positive rates :data:`~asyncfl.privacy.tradeoff.FPRS`, for the run's releases at σ (``run``)
    and for its busiest client's ``most`` contributions composed without amplification
    (``busiest_client``; None when no client contributed); ``curve`` holds both at the false
    positive rates :data:`~asyncfl.privacy.tradeoff.CURVE_FPRS`, for ``asyncfl plot --tradeoff``."""
    out: dict[str, Any] = {"fpr": list(tradeoff.FPRS), "run": None, "busiest_client": None,
                           "busiest_client_participations": most,
                           "curve": {"fpr": list(tradeoff.CURVE_FPRS), "run": None, "busiest_client": None}}
    if tradeoff.trivial(setup.releases, setup.sigma):  # negligible noise: no meaningful trade-off (§4)
        return out
    run_pld = tradeoff.releases_pld(setup.releases, setup.sigma)
    out["run"], out["curve"]["run"] = tradeoff.tradeoff(run_pld), tradeoff.curve(run_pld)
    if most >= 1 and not tradeoff.trivial(*setup.client_release(most)):
        busiest_pld = tradeoff.releases_pld(*setup.client_release(most))
        out["busiest_client"] = tradeoff.tradeoff(busiest_pld)
        out["curve"]["busiest_client"] = tradeoff.curve(busiest_pld)
    return out


def epsilon_curve(setup: PrivacySetup, points: Sequence[tuple[int, int]]) -> list[dict[str, Any]]:
    """``privacy.csv`` (docs/run-directory.md): for each ``(t, m_t)`` — ``t`` server steps done,
    ``m_t`` the most steps any one client has contributed to by then — the releases so far
    (``compositions``: ``t`` under Poisson, ``m_t`` under the cap) and the ε spent after them at
    δ, by the run's accountant (0 before anything is released), and ``epsilon_client_max``: the
    worst-off client's ε, its ``m_t`` contributions composed without amplification (equal to
    ``epsilon`` under the cap; docs/privacy.md §11; with correlated noise both are
    :meth:`PrivacySetup.client_release` of ``m_t``, §12)."""
    rows = []
    for steps, most in points:
        releases = setup.assumption.so_far(setup.shape, steps, most)
        worst = 0.0 if most < 1 else accounting.epsilon_of(*setup.client_release(int(most)), setup.delta, setup.accountant)
        if setup.correlated:  # the run's ε so far is its worst-off client's (§12)
            releases = None if most < 1 else setup.client_release(int(most))[0]
            eps = worst
        else:
            eps = 0.0 if releases is None else accounting.epsilon_of(releases, setup.sigma, setup.delta, setup.accountant)
        rows.append({"step": int(steps), "participations_max": int(most),
                     "compositions": 0 if releases is None else releases.count, "epsilon": eps,
                     "epsilon_client_max": worst, "delta": setup.delta})
    return rows
