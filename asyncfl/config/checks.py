"""The built-in components' own cross-checks and derived defaults (docs/scenario.md §3).

Each function here is declared as a trait of one component (``check`` or ``resolve``, in
:mod:`asyncfl.components.builtin`) and runs only when a scenario names that component; each
problem names the keys involved and what is allowed. Checks that hold for every component of a
kind (a solver that needs a closed-form prox, an algorithm's protocols and μ) are asked of the
traits by :func:`asyncfl.config.scenario.validate`. Torch-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from asyncfl.config.files import _fmt as short
from asyncfl.config.files import package_name_problem, resolve_path
from asyncfl.config.privacy import WORKLOAD_NEEDS_BETA
from asyncfl.config.sections import ScenarioView as Scenario  # the composed scenario is a floor above


# -- protocols ------------------------------------------------------------------------------------
def resolve_fedbuff(sc: Scenario) -> dict[str, Any]:
    """``concurrency`` K = min(N, 10) and ``buffer`` C = min(K, 10) when absent."""
    n, server = sc.population.clients, sc.server
    k = server.concurrency if server.concurrency is not None else min(n, 10)
    c = server.buffer if server.buffer is not None else min(k, 10)
    return {"concurrency": k, "buffer": c}


def check_fedbuff(sc: Scenario) -> list[str]:
    n, server = sc.population.clients, sc.server
    errors = []
    if server.concurrency > n:
        errors.append(f"server.concurrency = {server.concurrency}: must be at most population.clients = {n}")
    if sc.privacy.enabled and server.max_staleness is None:
        errors.append("server.max_staleness: must be set when privacy is enabled (the one-hot staleness payload has length max_staleness + 1)")
    return errors


def resolve_sync(sc: Scenario) -> dict[str, Any]:
    """``cohort`` = min(N, 10) and ``buffer`` C = cohort when absent."""
    n, server = sc.population.clients, sc.server
    cohort = server.cohort if server.cohort is not None else min(n, 10)
    return {"cohort": cohort, "buffer": server.buffer if server.buffer is not None else cohort}


def check_sync(sc: Scenario) -> list[str]:
    n, server = sc.population.clients, sc.server
    errors = []
    if server.cohort > n:
        errors.append(f"server.cohort = {server.cohort}: must be at most population.clients = {n}")
    if server.buffer > server.cohort:
        errors.append(f"server.buffer = {server.buffer}: must be at most server.cohort = {server.cohort} (the first C arrivals of a cohort are accepted)")
    return errors


# -- algorithms -----------------------------------------------------------------------------------
def check_ca2fl(sc: Scenario) -> list[str]:
    """CA2FL calibrates the unweighted uploads (docs/async-optimisers.md §4)."""
    if sc.server.staleness_exponent > 0:
        return [f"server.staleness_exponent = {sc.server.staleness_exponent}: CA2FL calibrates unweighted updates "
                "(docs/async-optimisers.md §4); use 0"]
    return []


def check_feddr(sc: Scenario) -> list[str]:
    """FedDR's schedule sets each job's local steps: the solver's work must be ``client.local_steps``."""
    schedule = sc.server.feddr_schedule
    if schedule != "fixed" and (not sc.component("solver").traits.local_work or sc.client.local_steps is None):
        return [f"server.feddr_schedule = {schedule!r}: sets the local steps of each round, so it needs "
                f"client.local_steps and a solver whose work is local steps (client.solver = {sc.client.solver!r}"
                f"{'' if sc.component('solver').traits.local_work else ' solves exactly'})"]
    return []


# -- tasks ----------------------------------------------------------------------------------------
def check_quadratic(sc: Scenario) -> list[str]:
    if sc.task.problem == "seed-1d" and sc.population.clients != 2:
        return [f"population.clients = {sc.population.clients}: the seed-1d problem has exactly 2 clients"]
    return []


# -- latency and availability ---------------------------------------------------------------------
def _file_problem(path: Path) -> str:
    """Why ``path`` (which is not a regular file) cannot be read as an input file."""
    if not path.exists():
        return "no such file"
    return "is a directory" if path.is_dir() else "not a regular file (a device or a pipe cannot be read as input)"


def _input_file(key: str, text: str, ok: Any, what: str) -> list[str]:
    problem = package_name_problem(text)
    if problem:
        return [f"{key} = {short(text)}: {problem}"]
    path = resolve_path(text)
    if not ok(path):
        return [f"{key} = {text!r}: {_file_problem(path)} (must be {what})"]
    return []


def check_trace_latency(sc: Scenario) -> list[str]:
    errors = _input_file("latency.file", sc.latency.file, lambda p: p.is_file() or (p / "updates.csv").is_file(),
                         "an updates.csv or a run directory holding one")
    always = type(sc.population).model_fields["availability"].default  # every client online: nothing to replay over
    if sc.population.availability != always:
        errors.append(f"population.availability = {sc.population.availability!r}: must be {always!r} with latency.dist = "
                      f"{sc.latency.dist!r} (the recording already holds its availability: waits and offline drops are replayed)")
    return errors


def check_fedscale_latency(sc: Scenario) -> list[str]:
    return _input_file("latency.file", sc.latency.file, Path.is_file, "a FedScale device pickle")


def check_trace_availability(sc: Scenario) -> list[str]:
    pop = sc.population
    if pop.availability_file is None:
        return [f"population.availability_file: required with population.availability = {pop.availability!r} (a FedScale availability pickle)"]
    return _input_file("population.availability_file", pop.availability_file, Path.is_file, "a FedScale availability pickle")


# -- privacy --------------------------------------------------------------------------------------
def participation_schema(cfg: Any) -> tuple[int | None, int]:
    """The participation-cap's schema ``(k, b)`` from its own config (docs/privacy.md §6)."""
    return cfg.max_participations, int(cfg.min_separation)


def admissible_participations(k: int, b: int, steps: int) -> int:
    """``k′ = min(k, ⌈T/b⌉)``: the most contributions a client can make to ``T`` steps ``b`` apart."""
    return min(int(k), -(-int(steps) // int(b)))


def noise_cohort(sc: Scenario) -> int:
    """``M``: the uploads the accounted deployment's step sums (``privacy.noise_cohort``, else C)."""
    return sc.server.buffer if sc.privacy.noise_cohort is None else sc.privacy.noise_cohort


def check_participation_cap(sc: Scenario) -> list[str]:
    """The schema (k, b) must be able to supply the accounted deployment — ``k′·N ≥ T·M`` with
    ``k′ = min(k, ⌈T/b⌉)`` and ``N ≥ b·M`` (b consecutive steps of M uploads need b·M distinct
    clients) — so that only a consistent setting is called a guarantee; and rejections by norm
    would make who contributes depend on the data (docs/privacy.md §6)."""
    p, n, steps = sc.privacy, sc.population.clients, sc.run.steps
    errors: list[str] = []
    if not p.enabled:
        return errors
    k, b = participation_schema(p)
    m = noise_cohort(sc)
    per_step = "server.buffer" if p.noise_cohort is None else "privacy.noise_cohort"
    if k is None:
        errors.append(f"privacy.max_participations: required with privacy.sampling = {p.sampling!r} "
                      "(k ≥ 1: no client contributes to more than k server steps)")
    else:
        kk = admissible_participations(k, b, steps)
        if kk * n < steps * m:
            need = -(-steps * m // kk)
            what = ("max_participations" if kk == k else
                    f"k′ = min(max_participations, ⌈run.steps / min_separation⌉) = min({k}, ⌈{steps}/{b}⌉)")
            errors.append(
                f"privacy.max_participations = {k}, privacy.min_separation = {b}: the cap cannot supply the run: "
                f"run.steps × {per_step} = {steps} × {m} = {steps * m} uploads are needed, but population.clients × "
                f"{what} = {n} × {kk} = {n * kk}; the accounted deployment needs a population of at least "
                f"⌈T·M/k′⌉ = {need}: raise population.clients or privacy.max_participations, lower "
                "privacy.min_separation or run.steps")
    if b * m > n:
        errors.append(
            f"privacy.min_separation = {b}: b consecutive steps of {per_step} = {m} uploads need b·M = {b * m} distinct "
            f"clients (none may contribute again within b steps), but population.clients = {n}; lower "
            "privacy.min_separation or raise population.clients")
    if sc.run.max_update_norm is not None:
        errors.append(
            f"run.max_update_norm = {sc.run.max_update_norm}: must be unset with privacy.sampling = {p.sampling!r} "
            "(a rejection by norm depends on the client's data and changes who contributes to a step, which the "
            "guarantee does not cover; clipping at privacy.clip already bounds every contribution)"
        )
    return errors


def check_poisson(sc: Scenario) -> list[str]:
    p, n = sc.privacy, sc.population.clients
    errors = []
    if p.enabled and p.noise_cohort is not None and p.noise_cohort > n:
        errors.append(f"privacy.noise_cohort = {p.noise_cohort}: must be at most population.clients = {n} under "
                      f"privacy.sampling = {p.sampling!r} (its sampling rate is q = M/N ≤ 1)")
    return errors


def noise_beta(sc: Scenario) -> float | None:
    """The momentum β a ``"momentum"`` noise workload is optimised for: ``privacy.noise_beta``,
    else the server rule's own ``beta`` (None: neither, or a noise mechanism without a workload)."""
    own = sc.config_of("noise")
    if own is None or not WORKLOAD_NEEDS_BETA[own.noise_workload]:
        return None
    given = own.noise_beta
    if given is not None:
        return float(given)
    beta = getattr(sc.config_of("rule"), "beta", None)
    return None if beta is None else float(beta)


def check_correlated_noise(sc: Scenario) -> list[str]:
    """Correlated noise needs a participation schema (its sensitivity is computed under (k, b),
    docs/privacy.md §12), a β for the momentum workload, and — banded with k > 1 — at most b
    bands (columns b apart then have disjoint supports, the case the exact sensitivity covers)."""
    p = sc.privacy
    if not p.enabled:
        return []
    schema = sc.component("sampling").traits.schema
    if schema is None:
        return [f"privacy.noise = {p.noise!r}: correlated noise needs a participation schema (its sensitivity is that "
                f"of the worst admissible participation pattern); privacy.sampling = {p.sampling!r} has none, use a "
                "sampling assumption that enforces one (max_participations, min_separation)"]
    errors: list[str] = []
    workload = sc.config_of("noise").noise_workload
    if WORKLOAD_NEEDS_BETA[workload] and noise_beta(sc) is None:
        errors.append(f"privacy.noise_beta: required with privacy.noise_workload = {workload!r} when server.rule = "
                      f"{sc.server.rule!r} has no beta")
    k, b = schema(sc.config_of("sampling"))
    bands = getattr(p, "noise_bands", None)
    if bands is not None and k is not None and k > 1 and min(bands, sc.run.steps) > b:
        errors.append(f"privacy.noise_bands = {bands}: must be at most privacy.min_separation = {b} with "
                      f"max_participations = {k} > 1 (columns b apart must not overlap for the exact sensitivity)")
    return errors


def allotment_of(cfg: Any) -> tuple[int, int]:
    """The random allocation's ``(k, t)`` from its own config: k of every t server steps
    (docs/privacy.md §13; only called once :func:`check_random_allocation` found both set)."""
    return int(cfg.allotted_steps), int(cfg.allotment_window)


def check_random_allocation(sc: Scenario) -> list[str]:
    """Random allocation (docs/privacy.md §13) is refused before the run when it cannot work:
    ``k`` and ``t`` are required and ``k ≤ t``; the clients allotted to a step, ``N·k/t`` on average,
    must be able to supply its ``M`` uploads (``N·k ≥ t·M``); a stale protocol accepts an upload only
    in the step it was dispatched for, so ``C`` uploads must be able to be in flight at once
    (``K ≥ C``); and, as under the cap, no rejection by norm (it would depend on the data)."""
    p, n = sc.privacy, sc.population.clients
    errors: list[str] = []
    if not p.enabled:
        return errors
    k, t = p.allotted_steps, p.allotment_window
    if k is None or t is None:
        missing = [name for name, v in (("privacy.allotted_steps", k), ("privacy.allotment_window", t)) if v is None]
        return [f"{', '.join(missing)}: required with privacy.sampling = {p.sampling!r} (each client is allotted "
                "allotted_steps = k of every allotment_window = t server steps)"]
    m = noise_cohort(sc)
    per_step = "server.buffer" if p.noise_cohort is None else "privacy.noise_cohort"
    if k > t:
        errors.append(f"privacy.allotted_steps = {k}, privacy.allotment_window = {t}: k must be at most t (a client is "
                      "allotted k distinct steps of every window of t)")
    elif n * k < t * m:
        need = -(-t * m // k)
        errors.append(f"privacy.allotted_steps = {k}, privacy.allotment_window = {t}: too few clients for {per_step} = "
                      f"{m} uploads per step: population.clients × k / t = {n} × {k} / {t} = {n * k / t:.4g} clients are "
                      f"allotted to a step on average; the run needs population.clients ≥ ⌈t·M/k⌉ = {need}, or a larger "
                      "privacy.allotted_steps, or a smaller privacy.allotment_window")
    protocol = sc.component("protocol")
    if protocol.traits.stale:
        key = protocol.traits.in_flight_key
        in_flight = getattr(sc.server, key)
        if in_flight is not None and in_flight < sc.server.buffer:
            errors.append(f"server.{key} = {in_flight}: must be at least server.buffer = {sc.server.buffer} with "
                          f"privacy.sampling = {p.sampling!r} (an upload counts only in the step it was dispatched for, "
                          "so a step's C uploads must be in flight together)")
    if sc.run.max_update_norm is not None:
        errors.append(
            f"run.max_update_norm = {sc.run.max_update_norm}: must be unset with privacy.sampling = {p.sampling!r} "
            "(a rejection by norm depends on the client's data and changes who contributes to a step)")
    return errors
