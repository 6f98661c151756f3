"""Which training path a run takes: batched or job by job (``run.batched``, docs/guide.md §"Batched
training").

One pure function of the request and the declared traits of the executor, the local solver and
the task (:func:`choose_batched`); the composition root calls it, the executors receive its
answer, and the run's ``summary.json`` records it (``batched``, ``batched_why``). Torch-free.

* ``true`` asks for batched training: an executor or a solver that cannot batch is an error
  (:func:`batched_problems`, the scenario's validation);
* ``false`` trains job by job;
* ``"auto"`` (the default) on the CPU trains batched only where the executor and the solver can
  batch *and* the task declares ``TaskTraits.batched_exact``: its batched training gives the same
  bits as job by job, so the run's files are those of ``run.batched = false``. None of the
  built-in tasks declares it: their batched training equals job by job to float round-off only
  (the same ``updates.csv``, another ``model.pt``; docs/performance.md §"Batched by default"), so
  ``"auto"`` runs them job by job on the CPU.
* ``"auto"`` on an accelerator (``run.device``) does not ask for bit-identity, which is not on
  offer there anyway (its matrix products and reductions sum in another order than the CPU's,
  batched or not): it trains batched where the executor and the solver can batch and the task
  declares that batching pays on an accelerator (``Task.batched_on_accelerator``,
  docs/tasks.md §9).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Union

if TYPE_CHECKING:
    from asyncfl.components.traits import ExecutorTraits, SolverTraits, TaskTraits

#: what ``run.batched`` accepts
BatchedRequest = Union[bool, Literal["auto"]]


@dataclass(frozen=True)
class BatchedChoice:
    """The path a run takes (``batched``) and why, in words for the summary (``why``)."""

    batched: bool
    why: str


def choose_batched(requested: BatchedRequest, executor: ExecutorTraits, solver: SolverTraits,
                   task: TaskTraits, *, device: str = "cpu", batched_on_accelerator: bool = True) -> BatchedChoice:
    """Batched or job by job: ``requested`` if it is a bool; for ``"auto"``, with ``device`` the
    resolved ``run.device`` (``"cpu"``, ``"cuda:0"``, ``"mps"``; its kind is the part before
    ``:``) and ``batched_on_accelerator`` the task's declaration (``Task.batched_on_accelerator``):

    * on the CPU, batched exactly when ``executor.batched and solver.batched and
      task.batched_exact`` (the files then equal job by job's);
    * on an accelerator, batched exactly when ``executor.batched and solver.batched and
      batched_on_accelerator``.

    An explicit ``true`` that the executor or solver refuse is reported by
    :func:`batched_problems`, not here."""
    if requested is True:
        return BatchedChoice(True, "run.batched = true")
    if requested is False:
        return BatchedChoice(False, "run.batched = false")
    if not executor.batched:
        return BatchedChoice(False, "auto: the executor trains one job at a time")
    if not solver.batched:
        return BatchedChoice(False, "auto: the solver trains one job at a time")
    if device.partition(":")[0] != "cpu":
        if not batched_on_accelerator:
            return BatchedChoice(False, f"auto: on {device}, the task does not batch on an accelerator "
                                        "(Task.batched_on_accelerator = False)")
        return BatchedChoice(True, f"auto: on {device}, executor, solver and task batch (on an accelerator "
                                   "job by job is not bit-identical either)")
    if not task.batched_exact:
        return BatchedChoice(False, "auto: the task's batched training equals job by job only to round-off")
    return BatchedChoice(True, "auto: executor, solver and task batch, with the same bits as job by job")


def batched_problems(requested: BatchedRequest, executor: str, executor_traits: ExecutorTraits, batching_executors: list[str],
                     solver: str, solver_traits: SolverTraits) -> list[str]:
    """What an explicit ``run.batched = true`` cannot have: an executor or a solver that does not
    batch (each problem names the keys and what to set instead); nothing for ``false`` or ``"auto"``."""
    if requested is not True:
        return []
    problems = []
    if not executor_traits.batched:
        problems.append(f"run.batched = true, run.executor = {executor!r}: batched training runs with the executors "
                        f"{', '.join(batching_executors)} (set one of them, or run.batched = false)")
    if not solver_traits.batched:
        problems.append(f"run.batched = true, client.solver = {solver!r}: this solver trains one job at a time "
                        "(set run.batched = false)")
    return problems
