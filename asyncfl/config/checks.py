"""The built-in components' own cross-checks and derived defaults (docs/scenario.md §3).

Each function here is declared as a trait of one component (``check`` or ``resolve``, in
:mod:`asyncfl.components.builtin`) and runs only when a scenario names that component; each
problem names the keys involved and what is allowed. Checks that hold for every component of a
kind (a solver that needs a closed-form prox, an algorithm's protocols and μ) are asked of the
traits by :func:`asyncfl.config.scenario.validate`. Torch-free.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from asyncfl.config.files import _fmt as short
from asyncfl.config.files import package_name_problem, resolve_path

if TYPE_CHECKING:
    from asyncfl.config.scenario import Scenario


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
    always = sc.population.model_fields["availability"].default  # every client online: nothing to replay over
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
def check_participation_cap(sc: Scenario) -> list[str]:
    """The cap must be able to supply the run (k·N ≥ T·C) and rejections by norm would make who
    contributes depend on the data (docs/privacy.md §6)."""
    p, n, steps, buffer = sc.privacy, sc.population.clients, sc.run.steps, sc.server.buffer
    errors: list[str] = []
    if not p.enabled:
        return errors
    k = p.max_participations
    if k is None:
        errors.append(f"privacy.max_participations: required with privacy.sampling = {p.sampling!r} "
                      "(k ≥ 1: no client contributes to more than k server steps)")
    elif k * n < steps * buffer:
        need = -(-steps * buffer // n)
        errors.append(
            f"privacy.max_participations = {k}: the cap cannot supply the run: run.steps × server.buffer = "
            f"{steps} × {buffer} = {steps * buffer} uploads are needed, but population.clients × max_participations = "
            f"{n} × {k} = {n * k}; raise privacy.max_participations to at least {need}, or population.clients, or lower run.steps"
        )
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
    if p.max_participations is not None:
        errors.append(f"privacy.max_participations = {p.max_participations}: only used with privacy.sampling = "
                      f"'participation-cap' (it is {p.sampling!r})")
    if p.enabled and p.noise_cohort is not None and p.noise_cohort > n:
        errors.append(f"privacy.noise_cohort = {p.noise_cohort}: must be at most population.clients = {n} under "
                      f"privacy.sampling = {p.sampling!r} (its sampling rate is q = M/N ≤ 1)")
    return errors
