"""How much memory a scenario needs, estimated before anything is built (docs/architecture.md §8).

A scenario whose task and population cannot fit — 100 000 quadratic clients of 500 × 100
float64 samples are 40 GB — used to be built until the operating system killed the process,
minutes later and without a word. :func:`check_memory` refuses it first (a
:class:`~asyncfl.errors.ScenarioError`, exit code 2), naming the keys that drive the estimate.

The estimate (bytes) is the sum of these parts, each from the resolved scenario alone:

* **task data** — ``task.build_bytes(N)``: the peak while the task is built (the clients' and the
  test tensors, the builder's temporaries, ~2 kB of bookkeeping a client; the formulas are on
  the task variants, :class:`asyncfl.config.tasks.TaskSection`), plus ``task.data_bytes(N)``
  again when ``run.train_loss`` pools every client's data for the training objective; with
  ``run.executor = "processes"`` every one of the ``run.workers`` workers builds the task too;
* **models** — ``d × itemsize`` per model-sized vector: ``FIXED_MODEL_COPIES`` (θ, the initial
  model, the rule's state, gradients and evaluation temporaries), two per client in flight (its
  start model and its result), one per buffered upload, one per training thread; the splitting
  baselines keep ``BASELINE_ROWS[algorithm]`` vectors *per client* (their memory and the server's
  table); MA-full keeps up to ``2T`` past aggregates (its capacity doubles) and two ``2T × 2T``
  float64 factors, or with a window ``L`` a ring of ``L`` aggregates and the last ``L`` rows of ``W``
  (counted as two ``L × L`` blocks);
* **records** — per server step ``L + 1`` float64 (staleness counts, time; ``L`` = max_staleness + 1,
  or the staleness a K/C fleet typically reaches when unbounded) and ~200 bytes of bookkeeping,
  ``L`` more with privacy, and the rule's recorded coefficients (MA-full: ``T²/2``, MA-light: ``2T``);
* **fleet** — ``FLEET_BYTES_PER_CLIENT`` per client (speeds, busy flags, availability phases);
* **the interpreter and torch** — :data:`BASE_BYTES`.

The machine's memory is the smaller of the physical memory and the control group's limit
(:func:`machine_memory`). The estimate is meant to be within a factor of two of the real peak
(``tests/test_hostile.py`` compares it with built tasks), so it refuses only scenarios that
clearly cannot fit. Torch-free.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from asyncfl.errors import ScenarioError

if TYPE_CHECKING:
    from asyncfl.config.scenario import Scenario

BASE_BYTES = 400 << 20
FIXED_MODEL_COPIES = 10
FLEET_BYTES_PER_CLIENT = 64
STEP_RECORD_OVERHEAD = 200
#: per-client model-sized vectors of the splitting baselines: their memory (asyncfl.server.splitting)
#: and the server's table of latest uploads
BASELINE_ROWS = {"fedsplit": 3, "feddr": 3, "fedpd": 4}
#: a process worker's own interpreter and torch
WORKER_BASE_BYTES = 300 << 20


@dataclass(frozen=True)
class Part:
    """One part of the estimate: what it is, its bytes, and the keys that drive it."""

    what: str
    bytes: int
    keys: tuple[str, ...]


@dataclass(frozen=True)
class MemoryEstimate:
    parts: tuple[Part, ...]

    @property
    def total(self) -> int:
        return sum(p.bytes for p in self.parts)


def fmt_bytes(n: float) -> str:
    """``n`` bytes in GB, MB or kB (powers of 1000, one decimal)."""
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{int(n)} bytes"


def typical_staleness_columns(scenario: Scenario) -> int:
    """``L``: ``max_staleness + 1`` when bounded, 1 for sync runs, else ``4K/C + 1`` (a FedBuff
    fleet's staleness is about ``K/C`` on average), at most ``T``."""
    server, steps = scenario.server, scenario.run.steps
    if server.protocol == "sync":
        return 1
    if server.max_staleness is not None:
        return server.max_staleness + 1
    return min(steps, 4 * math.ceil((server.concurrency or 1) / (server.buffer or 1)) + 1)


def estimate(scenario: Scenario) -> MemoryEstimate:
    """The memory ``scenario`` needs, part by part (the module docstring gives every formula)."""
    task, run, server, n = scenario.task, scenario.run, scenario.server, scenario.population.clients
    keys = task.size_keys()
    parts = [Part("the task's data", task.build_bytes(n), keys)]
    if run.train_loss:
        parts.append(Part("the pooled training data for run.train_loss", task.data_bytes(n), (*keys, "run.train_loss")))
    if run.executor == "processes":
        parts.append(Part(f"{run.workers} worker processes, each building the task",
                          run.workers * (task.build_bytes(n) + WORKER_BASE_BYTES), ("run.workers", *keys)))
    vector = task.model_params() * task.itemsize
    in_flight = server.concurrency if server.protocol == "fedbuff" else server.cohort
    copies = FIXED_MODEL_COPIES + 2 * (in_flight or 1) + (server.buffer or 1)
    if run.executor == "threads":
        copies += run.workers
    parts.append(Part("model vectors (θ, rule state, clients in flight, the buffer)", copies * vector,
                      ("server.concurrency" if server.protocol == "fedbuff" else "server.cohort", "server.buffer", "task")))
    rows = BASELINE_ROWS.get(server.algorithm, 0)
    if rows:
        parts.append(Part(f"{server.algorithm}'s {rows} model vectors per client", rows * n * vector,
                          ("population.clients", "server.algorithm", "task")))
    steps = run.steps
    if server.rule == "ma-full":
        # the history's capacity doubles (up to 2T rows, or the window L) and the factors (or, with a
        # window, the kept rows of W) are as large squared
        cap = 2 * steps if server.ma_window is None else min(2 * steps, server.ma_window)
        ma = cap * vector + 2 * cap * cap * 8
        parts.append(Part("MA-full's history of aggregates and its factors", ma, ("run.steps", "server.ma_window", "task")))
    columns = typical_staleness_columns(scenario)
    per_step = (columns + 1) * 8 + STEP_RECORD_OVERHEAD
    if scenario.privacy.enabled:
        per_step += columns * 8
    record_keys: tuple[str, ...] = ("run.steps", "server.max_staleness")
    coefficients = 0
    if server.rule == "ma-full":
        coefficients = steps * steps * 4  # row t holds t float64
        record_keys = ("run.steps",)
    elif server.rule == "ma-light":
        coefficients = steps * 16
    parts.append(Part("per-step records", steps * per_step + coefficients, record_keys))
    parts.append(Part("the fleet", n * FLEET_BYTES_PER_CLIENT, ("population.clients",)))
    parts.append(Part("the interpreter and torch", BASE_BYTES, ()))
    return MemoryEstimate(tuple(parts))


def _read_int(path: str) -> int | None:
    try:
        text = Path(path).read_text().split()[0]
    except (OSError, IndexError):
        return None
    return int(text) if text.isdigit() else None


def machine_memory() -> int | None:
    """Bytes of memory this process may use: the physical memory, or the control group's limit
    when smaller (cgroup v2 ``memory.max``, v1 ``memory.limit_in_bytes``); None when unknown."""
    total = None
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        pass
    for limit_file in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        limit = _read_int(limit_file)
        if limit is not None and limit > 0 and (total is None or limit < total):
            total = limit
    return total


def check_memory(scenario: Scenario, available: int | None = None) -> MemoryEstimate:
    """Refuse (:class:`ScenarioError`) a scenario whose :func:`estimate` exceeds the machine's
    memory (``available``, default :func:`machine_memory`); returns the estimate otherwise. The
    message gives the estimate, the parts that make up most of it and the keys driving them."""
    est = estimate(scenario)
    have = machine_memory() if available is None else available
    if have is None or est.total <= have:
        return est
    big = sorted((p for p in est.parts if p.bytes >= 0.1 * est.total), key=lambda p: -p.bytes)
    listed = "; ".join(f"{p.what}: {fmt_bytes(p.bytes)} ({', '.join(_key_values(scenario, p.keys))})" for p in big)
    pooled = any("run.train_loss" in p.keys for p in big)
    raise ScenarioError([
        f"the scenario needs about {fmt_bytes(est.total)} of memory, more than this machine's {fmt_bytes(have)} "
        f"(it would be killed by the operating system): {listed}. Lower these keys"
        + (" (run.train_loss = false drops the pooled copy)" if pooled else "")
    ])


def _key_values(scenario: Scenario, keys: tuple[str, ...]) -> list[str]:
    """``section.key = value`` for each key (``task`` alone: the task's model-size keys)."""
    out = []
    for key in keys:
        if key == "task":
            out.append(f"task.name = {scenario.task.name!r} (d = {scenario.task.model_params()})")
            continue
        section, _, name = key.partition(".")
        value = getattr(getattr(scenario, section), name, None)
        out.append(f"{key} = {value!r}")
    return out
