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
* **per-step records** (:func:`record_parts`; docs/run-directory.md §5) — the staleness counts keep
  their non-zero entries only, at most one ``(t, τ, count)`` of 24 bytes per accepted upload
  (``C`` a step), counted four times (the buffer's doubling capacity, the copy written, the copy
  read back for ``bias.json``): ``96·T·C``; the step times and the staleness since the last
  evaluation (``40·T + 36·E·C``, ``E`` = ``run.eval_every``); with privacy the noisy counts
  ``ĉ_τ``, dense by nature (``L`` = max_staleness + 1 float64 a step, held and read back:
  ``16·T·L``); the bias report, on the band of ``W`` (``BIAS_BAND_ARRAYS`` ``T × L`` float64 and
  ``BIAS_ROW_BYTES`` a step for its per-row lists, twice with privacy; stale protocols only), or,
  where MA-full's coefficients are computed offline with ``λ = 0``, the dense report of the
  first ``T' = min(T, 2000)`` steps (``BIAS_MATRICES`` ``T'×T'`` float64). The rules' own records
  (MA-full's ``a_t``) are their ``memory`` traits'. A scenario whose records exceed
  :data:`RECORDS_WARN_BYTES` is run, with a warning naming the keys (:func:`record_warning`);
* **the population** — ``POPULATION_BYTES_PER_CLIENT`` = 9 per client (a float64 speed and a
  busy flag), 8 more while ``slow_fraction > 0`` picks the slow clients (an int64 permutation)
  and 8 more for the fixed per-client latencies of device profiles; the participation ledger of
  a private or one-upload run, ``LEDGER_BYTES_PER_CLIENT`` = 17 (int64 participations and last
  step, a pending flag); the availability model's own arrays through its ``memory`` trait
  (diurnal: 17 bytes a client, :mod:`asyncfl.components.builtin`). No part is a Python object
  per client (docs/architecture.md §10);
* **clients in flight** — ``IN_FLIGHT_BYTES`` of bookkeeping each (the engine's record of the
  dispatch, its job, future and clock event: 1.25 kB measured with 10⁵ in flight), beside their
  model vectors;
* **the interpreter and torch** — :data:`BASE_BYTES`.

On an accelerator (``run.device``, :mod:`asyncfl.compute.device`) the device's memory is checked
too (:func:`device_estimate`, :func:`check_device_memory`): the task's data (``task.data_bytes(N)``,
built on the CPU and copied over), the pooled copy with ``run.train_loss``, the model vectors and
the components' own parts (counted where the model is: a rule's state, MA's history) and
:data:`DEVICE_BASE_BYTES` for the kernels' workspaces and the caching allocator's slack, against
the device's free memory (cuda: ``torch.cuda.mem_get_info``; mps: its recommended working set).
The per-step records, the population and the bias report stay in host memory.

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

from asyncfl.components.traits import MemoryPart, MemoryShape
from asyncfl.config.scenario import one_upload_per_client
from asyncfl.errors import ScenarioError

if TYPE_CHECKING:
    from asyncfl.config.scenario import Scenario

BASE_BYTES = 400 << 20
FIXED_MODEL_COPIES = 10
#: bytes of one ``(t, τ, count)`` entry of the staleness counts, and how many copies exist at the
#: peak (the buffer's doubling capacity: 2, the copy written: 1, the copy read back: 1)
COUNT_ENTRY_BYTES, COUNT_ENTRY_COPIES = 24, 4  # asyncfl.staleness_counts.ENTRY_BYTES (this module imports no numpy)
#: a step's time (a Python float in a list, and its float64 in the file), and a staleness kept until
#: the next evaluation (a Python int and its list slot)
STEP_TIME_BYTES, EVAL_STALENESS_BYTES = 40, 36
#: steps the bias report analyses (asyncfl.run.bias_report), and the ``T'×T'`` float64 matrices it
#: holds at its peak (W, M, the coefficient matrices, their products: 9.3–9.5 measured with
#: tracemalloc at T' = 200 and 400), twice with privacy (a second report on the noisy Ŵ)
BIAS_REPORT_STEPS, BIAS_MATRICES = 2000, 12
#: the banded report (asyncfl.server.banded): ``T × L`` float64 arrays at its peak (the counts, the
#: band of W, its band storage, MA-full's Cholesky band, the noise weights and their temporaries:
#: 70 MB measured with tracemalloc at T = 20 000, L = 31, i.e. about 14 such arrays with the rows),
#: and per step the per-row lists of bias.json (five lists of Python floats) and the streams' arrays
BIAS_BAND_ARRAYS, BIAS_ROW_BYTES = 8, 600
#: per-step records above this are run with a warning (``asyncfl run`` and ``validate`` print it)
RECORDS_WARN_BYTES = 500_000_000
POPULATION_BYTES_PER_CLIENT = 9
LEDGER_BYTES_PER_CLIENT = 17
IN_FLIGHT_BYTES = 1280
#: a process worker's own interpreter and torch
WORKER_BASE_BYTES = 300 << 20
#: on an accelerator, beside the estimate: cuBLAS/cuDNN workspaces and the caching allocator's
#: slack (the context itself is already taken from the free memory the device reports)
DEVICE_BASE_BYTES = 512 << 20


Part = MemoryPart
"""One part of the estimate: what it is, its bytes, and the keys that drive it (the type a
component's ``memory`` trait returns, too)."""


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
    """``L``: ``max_staleness + 1`` when bounded, 1 when the protocol's uploads are never stale
    (sync), else ``4K/C + 1`` (a FedBuff fleet's staleness is about ``K/C`` on average), at most ``T``."""
    server, steps = scenario.server, scenario.run.steps
    protocol = scenario.component("protocol").traits
    if not protocol.stale:
        return 1
    if server.max_staleness is not None:
        return server.max_staleness + 1
    in_flight = getattr(server, protocol.in_flight_key) or 1
    return min(steps, 4 * math.ceil(in_flight / (server.buffer or 1)) + 1)


def record_parts(scenario: Scenario) -> list[Part]:
    """The engine's per-step records and what reads them back (the module docstring gives each
    formula); a rule's own records come from its ``memory`` trait."""
    server, run = scenario.server, scenario.run
    T, C = run.steps, server.buffer or 1
    parts = [
        Part("per-step staleness counts (non-zero entries)", COUNT_ENTRY_COPIES * COUNT_ENTRY_BYTES * T * C,
             ("run.steps", "server.buffer"), record=True),
        Part("per-step times and the staleness since the last evaluation",
             STEP_TIME_BYTES * T + EVAL_STALENESS_BYTES * run.eval_every * C, ("run.steps", "run.eval_every"), record=True),
    ]
    if scenario.privacy.enabled:
        parts.append(Part("per-step noisy staleness counts (privacy)", 2 * 8 * T * typical_staleness_columns(scenario),
                          ("run.steps", "server.max_staleness"), record=True))
    if scenario.component("protocol").traits.stale:
        reports = 2 if scenario.privacy.enabled else 1  # with privacy, a second report on the noisy Ŵ
        if getattr(server, "ma_ridge", None) == 0 and scenario.component("rule").traits.coefficients != "full":
            analysed = min(T, BIAS_REPORT_STEPS)  # offline MA-full with λ = 0: the dense report
            parts.append(Part("the bias report's matrices (bias.json)", reports * BIAS_MATRICES * 8 * analysed * analysed,
                              ("run.steps", "server.ma_ridge"), record=True))
        else:
            # the band is as wide as the staleness observed (about K/C, counted 4K/C + 1 as for the
            # unbounded counts), never the configured bound, and never wider than the run
            protocol = scenario.component("protocol").traits
            in_flight = getattr(server, protocol.in_flight_key) or 1
            L = min(T, typical_staleness_columns(scenario), 4 * math.ceil(in_flight / C) + 1)
            parts.append(Part("the bias report's band of W (bias.json)",
                              reports * (BIAS_BAND_ARRAYS * 8 * L + BIAS_ROW_BYTES) * T, ("run.steps", "server.max_staleness"), record=True))
    return parts


def record_warning(scenario: Scenario, est: MemoryEstimate) -> str | None:
    """A warning when the per-step records (every part marked ``record``) take more than
    :data:`RECORDS_WARN_BYTES`, naming the parts and the keys that drive them; None otherwise."""
    records = [p for p in est.parts if p.record]
    total = sum(p.bytes for p in records)
    if total <= RECORDS_WARN_BYTES:
        return None
    big = sorted((p for p in records if p.bytes >= 0.1 * total), key=lambda p: -p.bytes)
    listed = "; ".join(f"{p.what}: {fmt_bytes(p.bytes)} ({', '.join(_key_values(scenario, p.keys))})" for p in big)
    return (f"warning: the run's per-step records need about {fmt_bytes(total)} of memory (more than "
            f"{fmt_bytes(RECORDS_WARN_BYTES)}): {listed}")


def estimate(scenario: Scenario) -> MemoryEstimate:
    """The memory ``scenario`` needs, part by part (the module docstring gives every formula; each
    named component adds its own parts through its ``memory`` trait)."""
    task, run, server, n = scenario.task, scenario.run, scenario.server, scenario.population.clients
    parts_of = scenario.components()
    keys = task.size_keys()
    parts = [Part("the task's data", task.build_bytes(n), keys)]
    if run.train_loss:
        parts.append(Part("the pooled training data for run.train_loss", task.data_bytes(n), (*keys, "run.train_loss")))
    if parts_of["executor"].traits.task_per_worker:
        parts.append(Part(f"{run.workers} worker processes, each building the task",
                          run.workers * (task.build_bytes(n) + WORKER_BASE_BYTES), ("run.workers", *keys)))
    parts.extend(model_parts(scenario))
    parts.extend(record_parts(scenario))
    parts.extend(population_parts(scenario))
    in_flight_key = parts_of["protocol"].traits.in_flight_key
    in_flight = getattr(server, in_flight_key) or 1
    parts.append(Part("clients in flight (bookkeeping)", in_flight * IN_FLIGHT_BYTES, (f"server.{in_flight_key}",)))
    parts.append(Part("the interpreter and torch", BASE_BYTES, ()))
    return MemoryEstimate(tuple(parts))


def model_parts(scenario: Scenario) -> list[Part]:
    """The model vectors (θ, rule state, clients in flight, the buffer, one per worker thread)
    and every component's own parts (its ``memory`` trait): what lives where the model does."""
    task, run, server, n = scenario.task, scenario.run, scenario.server, scenario.population.clients
    parts_of = scenario.components()
    vector = task.model_params() * task.itemsize
    in_flight_key = parts_of["protocol"].traits.in_flight_key
    in_flight = getattr(server, in_flight_key) or 1
    copies = FIXED_MODEL_COPIES + 2 * in_flight + (server.buffer or 1)
    if parts_of["executor"].traits.model_per_worker:
        copies += run.workers
    parts = [Part("model vectors (θ, rule state, clients in flight, the buffer)", copies * vector,
                  (f"server.{in_flight_key}", "server.buffer", "task"))]
    shape = MemoryShape(task.model_params(), task.itemsize, n, run.steps, in_flight)
    for kind, component in parts_of.items():
        parts.extend(component.traits.memory(scenario.config_of(kind), shape))
    return parts


def device_estimate(scenario: Scenario) -> MemoryEstimate:
    """The memory ``scenario`` needs on an accelerator (the module docstring): the task's data,
    the pooled copy with ``run.train_loss``, :func:`model_parts` and :data:`DEVICE_BASE_BYTES`."""
    task, run, n = scenario.task, scenario.run, scenario.population.clients
    keys = task.size_keys()
    parts = [Part("the task's data on the device", task.data_bytes(n), (*keys, "run.device"))]
    if run.train_loss:
        parts.append(Part("the pooled training data for run.train_loss", task.data_bytes(n), (*keys, "run.train_loss")))
    parts.extend(model_parts(scenario))
    parts.append(Part("the device's workspaces and allocator slack", DEVICE_BASE_BYTES, ()))
    return MemoryEstimate(tuple(parts))


def check_device_memory(scenario: Scenario, available: int | None, device: str) -> MemoryEstimate | None:
    """Refuse (:class:`ScenarioError`) a scenario whose :func:`device_estimate` exceeds
    ``available``, the free memory of ``device`` (None: a CPU run, nothing to check); returns
    the estimate otherwise."""
    if available is None:
        return None
    est = device_estimate(scenario)
    if est.total <= available:
        return est
    big = sorted((p for p in est.parts if p.bytes >= 0.1 * est.total), key=lambda p: -p.bytes)
    listed = "; ".join(f"{p.what}: {fmt_bytes(p.bytes)}" + (f" ({', '.join(_key_values(scenario, p.keys))})" if p.keys else "")
                       for p in big)
    raise ScenarioError([
        f"run.device = {scenario.run.device!r}: the scenario needs about {fmt_bytes(est.total)} of device memory, more "
        f"than the {fmt_bytes(available)} free on {device}: {listed}. Lower these keys, or run on another device"
    ])


def population_parts(scenario: Scenario) -> list[Part]:
    """The population's arrays (module docstring): speeds and busy flags, the slow clients'
    permutation, fixed per-client latencies, the participation ledger."""
    pop, n = scenario.population, scenario.population.clients
    per_client = POPULATION_BYTES_PER_CLIENT + 8 * (pop.slow_fraction > 0)
    per_client += 8 * (scenario.component("latency").traits.mode in ("profiles", "client"))  # job latencies; sample counts
    parts = [Part("the population (speeds, busy flags)", n * per_client, ("population.clients",))]
    if one_upload_per_client(scenario):
        parts.append(Part("the participation ledger", n * LEDGER_BYTES_PER_CLIENT, ("population.clients", "privacy.enabled")))
    return parts


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
