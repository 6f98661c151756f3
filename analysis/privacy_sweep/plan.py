"""The sweep's plan (docs/privacy.md; docs/privacy.md, "What a run reports"): the analytic noise
levels, σ resolved **once** for the whole sweep, the validated points, and the scenario of each
point."""

from __future__ import annotations

import math
from typing import Sequence

from asyncfl.config import scenario as scenario_mod
from asyncfl import privacy
from asyncfl.privacy import mechanism
from analysis.privacy_sweep.spec import Budget, SweepError, SweepPoint


# ----------------------------------------------------------------------------------------------
# analytic noise levels (docs/privacy.md)
def update_noise_std(sigma: float, clip: float, xi: float, M: int) -> float:
    """Std of the noise on each coordinate of ``r_t``: ``σ S_Δ ξ / (M √(ξ² − σ²))`` (= ``σS/M``;
    ``M`` the noise cohort, ``C`` without one: docs/privacy.md §2, §7)."""
    return mechanism.update_noise_std(sigma, clip, xi, M)


def count_noise_std(xi: float, M: int) -> float:
    """Std of the noise on each entry ``ĉ_τ / C`` of a row of ``Ŵ``: ``ξ / M`` (docs/privacy.md §7)."""
    return mechanism.count_noise_std(xi, M)


# ----------------------------------------------------------------------------------------------
def check_scenario(scenario: scenario_mod.Scenario) -> None:
    """The sweep needs a private FedBuff scenario (the staleness payload only exists there)."""
    if not scenario.privacy.enabled:
        raise SweepError(
            f"scenario {scenario.name!r} has no [privacy] section with enabled = true: the sweep varies "
            "ξ (or γ) at the scenario's fixed (ε, δ); add [privacy] with enabled, clip, epsilon, delta "
            "(see scenarios/private_synthetic.toml)"
        )
    if scenario.server.protocol != "fedbuff":
        raise SweepError(f"server.protocol = {scenario.server.protocol!r}: the sweep needs 'fedbuff' (there is no staleness to estimate in sync rounds)")


def resolve_budget(scenario: scenario_mod.Scenario) -> Budget:
    """σ for the scenario's privacy budget, computed **once** for the whole sweep.

    σ is calibrated to (ε, δ) for the releases of the scenario's sampling assumption — Poisson at
    ``q = M/N`` over T steps, or ``k`` un-subsampled releases under the participation cap
    (:func:`asyncfl.privacy.resolve_sigma`, the same resolution a run uses; docs/privacy.md
    §5–6) — or is ``privacy.noise_multiplier`` when the scenario gives σ instead of ε. ξ and γ
    do not enter: they only split the sensitivity ``S`` between update and counts."""
    check_scenario(scenario)
    p, server = scenario.privacy, scenario.server
    C, N, T = int(server.buffer), scenario.population.clients, scenario.run.steps
    shape = privacy.run_shape(p, server.protocol, N, C, T)
    sigma, _ = privacy.resolve_sigma(p, shape)
    report = privacy.sampling_report(p.sampling, shape)
    return Budget(sigma=sigma, epsilon_target=None if p.epsilon is None else float(p.epsilon),
                  delta=float(p.delta), accountant=p.accountant, q=report["sampling_rate"], steps=T,
                  clip=float(p.clip), C=C, sampling=p.sampling, claim=report["claim"], statement=report["statement"],
                  max_participations=report["max_participations"], noise_cohort=shape.noise_cohort)


def sweep_points(budget: Budget, xis: Sequence[float] = (), gammas: Sequence[float] = ()) -> list[SweepPoint]:
    """The points of the sweep, sorted by ξ.

    ``--xi`` values must be finite and exceed σ (the count noise ``ξ = σS/γ > σ`` for every
    γ > 0); ``γ = σ S_Δ / √(ξ² − σ²)``. ``--gamma`` values must be finite and positive, and
    imply ``ξ = σ √(S_Δ² + γ²) / γ`` at most :data:`~asyncfl.privacy.mechanism.MAX_XI` (the
    bound of ``privacy.xi``). Every bad value is reported in one :class:`SweepError` naming the
    option and σ — none is silently skipped — and so is a point given twice (the same ξ, or
    two values that would name the same run)."""
    if not xis and not gammas:
        raise SweepError("give the sweep's points with --xi (count-noise levels ξ > σ) and/or --gamma (payload scales γ > 0)")
    problems: list[str] = []
    bad_xi = [x for x in xis if not (math.isfinite(x) and budget.sigma < x <= mechanism.MAX_XI)]
    if bad_xi:
        problems.append(
            f"--xi {' '.join(f'{x:g}' for x in bad_xi)}: every ξ must be finite, at most {mechanism.MAX_XI:g}, and exceed "
            f"the noise multiplier {budget.describe()} (the count noise ξ = σS/γ is above σ for every γ); "
            f"the smallest useful ξ is a little above {budget.sigma:.4g}"
        )
    bad_gamma = [g for g in gammas if not (math.isfinite(g) and g > 0)]
    if bad_gamma:
        problems.append(f"--gamma {' '.join(f'{g:g}' for g in bad_gamma)}: every γ must be finite and positive")
    tiny = [g for g in gammas if g not in bad_gamma and not mechanism.xi_bound_ok(budget.sigma, budget.clip, g)]
    if tiny:
        problems.append(f"--gamma {' '.join(f'{g:g}' for g in tiny)}: implies a count noise ξ = σS/γ above "
                        f"{mechanism.MAX_XI:g} (the largest ξ allowed); give γ ≥ {budget.sigma * budget.clip / mechanism.MAX_XI:.3g}")
    if problems:
        raise SweepError("\n".join(problems))
    points = [SweepPoint(float(x), mechanism.gamma_from_xi(budget.sigma, budget.clip, float(x)), "xi") for x in xis]
    points += [SweepPoint(mechanism.xi_from_gamma(budget.sigma, budget.clip, float(g)), float(g), "gamma") for g in gammas]
    points.sort(key=lambda pt: pt.xi)
    labels = [xi_label(pt.xi) for pt in points]
    twice = sorted({label for label in labels if labels.count(label) > 1})
    if twice:
        raise SweepError(f"--xi/--gamma: the point ξ = {', '.join(twice)} is given twice (values that give the same ξ, "
                         "or that name the same run, count as one); give each once")
    return points


def xi_label(xi: float) -> str:
    """ξ as a run's name shows it: 4 significant digits, or in full where those would merge two values."""
    short = f"{xi:.4g}"
    return short if float(short) == xi else repr(float(xi))


def run_name(point: SweepPoint, rule: str, seed: int) -> str:
    """The run directory of a point under ``runs/``: ``xi<ξ>-<rule>-s<seed>``."""
    return f"xi{xi_label(point.xi)}-{rule}-s{seed}"


def point_scenario(base: scenario_mod.Scenario, budget: Budget, point: SweepPoint, rule: str, seed: int) -> scenario_mod.Scenario:
    """``base`` with ``privacy.noise_multiplier = σ`` (the calibrated value, so every point uses
    the same σ and no point re-calibrates), ``privacy.xi`` or ``privacy.gamma`` as given,
    ``server.rule = rule`` and ``seed``; re-validated."""
    raw = base.to_dict()
    privacy = raw["privacy"]
    for key in ("epsilon", "noise_multiplier", "xi", "gamma"):
        privacy.pop(key, None)
    privacy["noise_multiplier"] = budget.sigma
    privacy[point.given] = point.xi if point.given == "xi" else point.gamma
    scenario_mod.apply_values(raw, [("server.rule", rule)])  # the old rule's own keys go with it
    raw["seed"] = int(seed)
    raw["name"] = f"{base.name}-{run_name(point, rule, seed)}"
    return scenario_mod.validate(raw)
