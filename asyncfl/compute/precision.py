"""The arithmetic of local training: ``run.precision`` (docs/guide.md §7 "Precision",
docs/performance.md "bf16").

* ``"fp32"`` (the default): local training computes in the task's own dtype; the files are those
  of a scenario without the key, byte for byte.
* ``"bf16"`` (opt-in): the client solver's local training, job by job and batched, runs under
  ``torch.autocast(device_type, dtype=torch.bfloat16)``. Autocast computes the operations torch
  lists as safe in lower precision (matrix products, linear layers, convolutions) with bfloat16
  inputs and outputs; the others (losses, softmax, reductions, the parameter update
  ``θ ← θ − lr·g``) stay in float32. The parameters, their gradients, the uploads and everything
  on the server (aggregation, the server rule, MA, clipping, the DP noise) and the evaluations
  stay float32. The model is no longer bit-identical to fp32's; ``updates.csv``'s schedule
  (times, clients, staleness) is unchanged as long as no decision reads the model's numbers
  (a norm screen at its bound, a divergence guard, a metric stop).

The precision reaches the solver through the executor context (:class:`~asyncfl.compute.executors.ExecutorContext`),
as ``run.device`` does: :func:`at_precision` wraps the solver the composition root puts there,
so every executor — inline, batched, threads, and the process and Ray workers, which receive the
solver pickled — trains at the run's precision on the device of the task it trains
(:func:`~asyncfl.compute.device.device_of`).

:func:`precision_problems` refuses bf16 where it makes no sense (a float64 task, a device without
bfloat16 support); :func:`bf16_supported` asks torch what a device offers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import torch

from asyncfl.compute.device import device_of
from asyncfl.compute.solvers import LocalSolver
from asyncfl.compute.training import LocalJob
from asyncfl.config.sections import PRECISIONS
from asyncfl.tasks.base import Task

#: the dtype autocast computes in, by ``run.precision`` (fp32: no autocast)
AUTOCAST_DTYPE = {"bf16": torch.bfloat16}


def bf16_supported(device: torch.device) -> bool:
    """Whether ``device`` computes bfloat16 under autocast: the CPU always (with AVX512-BF16 or
    AMX in hardware, else emulated, slower); cuda where ``torch.cuda.is_bf16_supported()``
    (compute capability ≥ 8.0, Ampere on); mps on macOS 14 or newer; anything else not."""
    if device.type == "cpu":
        return True
    if device.type == "cuda":
        return bool(torch.cuda.is_bf16_supported())
    if device.type == "mps":
        newer = getattr(torch.backends.mps, "is_macos_or_newer", None)  # torch's own probe, absent before 2.2
        return bool(newer is not None and newer(14, 0))
    return False


def precision_problems(precision: str, *, task: str, dtype: torch.dtype, device: str, bf16: bool) -> list[str]:
    """Why ``run.precision = precision`` cannot run task ``task`` (whose parameters are
    ``dtype``) on ``device`` (its name; ``bf16``: whether it supports bfloat16,
    :func:`bf16_supported`): nothing for ``"fp32"``; for ``"bf16"``, a float64 task (it asks for
    more precision than fp32, not less: the quadratic tasks' exact solves and optimality gaps) and
    a device without bfloat16. Each problem names the field and what is allowed."""
    if precision not in PRECISIONS:
        return [f"run.precision = {precision!r}: allowed: {', '.join(map(repr, PRECISIONS))}"]
    if precision == "fp32":
        return []
    problems = []
    if dtype != torch.float32:
        problems.append(f"run.precision = {precision!r}: task {task!r} computes in {str(dtype).removeprefix('torch.')}; "
                        "bf16 autocast applies to float32 tasks only (set run.precision = \"fp32\")")
    if not bf16:
        problems.append(f"run.precision = {precision!r}: device {device} does not support bfloat16 (cuda needs compute "
                        "capability 8.0 or newer, mps macOS 14 or newer); set run.precision = \"fp32\" or another run.device")
    return problems


@dataclass(frozen=True)
class AutocastSolver(LocalSolver):
    """``solver`` with its local training under ``torch.autocast`` in ``dtype`` on the device of
    the task it trains (module doc): the same jobs, the same mini-batches and seeds, the
    arithmetic of autocast's lower-precision operations in ``dtype``. Picklable (process and Ray
    workers receive it as they receive the plain solver)."""

    solver: LocalSolver
    dtype: torch.dtype = torch.bfloat16

    def train(self, task: Task, cfg: Any, job: LocalJob) -> torch.Tensor:
        with self._autocast(task):
            return self.solver.train(task, cfg, job)

    def train_batched(self, task: Task, cfg: Any, jobs: Sequence[LocalJob]) -> list[torch.Tensor]:
        with self._autocast(task):
            return self.solver.train_batched(task, cfg, jobs)

    def _autocast(self, task: Task) -> torch.autocast:
        """Autocast on ``task``'s device, without autocast's weight cache: the cache keeps the
        low-precision copy of a leaf that requires grad for the whole region, and a solver's
        local steps update their leaves in place (:func:`~asyncfl.compute.training.sgd_train`
        per parameter), so a cached copy would be the job's starting weights at every step."""
        return torch.autocast(device_of(task).type, dtype=self.dtype, cache_enabled=False)


def at_precision(solver: LocalSolver, precision: str) -> LocalSolver:
    """``solver`` training at ``run.precision = precision``: itself for ``"fp32"`` (nothing
    changes, the files are today's), an :class:`AutocastSolver` for ``"bf16"``."""
    dtype = AUTOCAST_DTYPE.get(precision)
    return solver if dtype is None else AutocastSolver(solver, dtype)
