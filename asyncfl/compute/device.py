"""Where a run computes: ``run.device`` (docs/guide.md §7, docs/architecture.md §2).

``run.device`` is ``"cpu"`` (default), ``"cuda"``, ``"cuda:N"``, ``"mps"`` or ``"auto"`` (cuda
when available, else mps, else cpu). :func:`resolve` turns the name into a :class:`torch.device`
or refuses it (:class:`~asyncfl.errors.ScenarioError`, exit 2) naming ``run.device``, the device
asked for and the devices this machine has. What runs on the device: the task's model and data
(:func:`place_task`), local training job by job and batched, the aggregation, the server rule
and its state, MA, clipping and the private sum. What never does: the schedule and every random
stream that decides *what happens* (latencies, clients, staleness, the jobs' seeds and their
mini-batch permutations, drawn by CPU generators), and the DP noise, drawn on the CPU from the
run's ``noise`` stream (numpy) and moved to the device (so the noise is the same numbers on
every device; :mod:`asyncfl.privacy.aggregator`).

Determinism on an accelerator (:func:`prepare`): ``torch.use_deterministic_algorithms(True,
warn_only=True)`` and, for cuda, ``CUBLAS_WORKSPACE_CONFIG=:4096:8``: a run repeated on the same
device gives the same files. Results differ from the CPU's in the last bits (another order of
summation in matrix products, convolutions and reductions): ``updates.csv``'s times, clients and
staleness are the same on every device as long as no decision depends on the model's numbers
(a norm screen at its bound, a divergence guard, a metric stop can tip either way).

Checkpoints hold CPU tensors (:mod:`asyncfl.run.checkpoint`: the file does not depend on the
device that wrote it); :func:`to_device` puts a restored state on the run's device, where the run
continues exactly. ``model.pt`` is always written from CPU tensors.
"""

from __future__ import annotations

import copy
import dataclasses
import os
from typing import Any, NamedTuple

import torch

from asyncfl.config.sections import DEVICE_NAME, DEVICE_NAMES
from asyncfl.errors import ScenarioError
from asyncfl.tasks.base import ClientData, QuadraticForm, Task

#: cuBLAS' documented setting for deterministic matrix products (CUDA ≥ 10.2)
CUBLAS_WORKSPACE = ":4096:8"


class Available(NamedTuple):
    """The accelerators a machine offers: ``cuda`` devices and whether ``mps`` works."""

    cuda: int
    mps: bool

    def names(self) -> list[str]:
        """``["cpu", "cuda:0", …, "mps"]``."""
        return ["cpu", *(f"cuda:{i}" for i in range(self.cuda)), *(["mps"] if self.mps else [])]


def available() -> Available:
    """What this machine offers (asks torch; no device is initialised beyond counting)."""
    mps = torch.backends.mps.is_available() if hasattr(torch.backends, "mps") else False
    return Available(torch.cuda.device_count() if torch.cuda.is_available() else 0, bool(mps))


def resolve(name: str, offer: Available | None = None) -> torch.device:
    """The device ``run.device = name`` names on a machine offering ``offer`` (default: this one,
    :func:`available`); ``auto`` is cuda (device 0) if offered, else mps, else cpu. Refuses a
    malformed name or a device the machine lacks with a :class:`ScenarioError` naming
    ``run.device``, the request and what is available."""
    if not DEVICE_NAME.fullmatch(name):  # the scenario checked it; a name given by hand is checked here
        raise ScenarioError([f"run.device = {name!r}: not a device; allowed: {DEVICE_NAMES}"])
    if name == "cpu":  # no question to torch: the default path asks nothing
        return torch.device("cpu")
    offer = available() if offer is None else offer
    if name == "auto":
        return torch.device("cuda:0" if offer.cuda else "mps" if offer.mps else "cpu")
    if name == "mps":
        ok = offer.mps
    else:
        index = int(name.partition(":")[2] or 0)
        ok = index < offer.cuda
        name = f"cuda:{index}"
    if not ok:
        raise ScenarioError([
            f"run.device = {name!r}: this machine has no such device; available: {', '.join(offer.names())} "
            f"(\"auto\" picks the first accelerator, else the cpu)"
        ])
    return torch.device(name)


def refuse_unsupported(device: torch.device, *, private: bool) -> None:
    """Refuse what ``device`` cannot compute: on mps, which has no float64, a private run (the
    clipped payloads and the noisy sum are float64, docs/privacy.md §2). A float64 task is refused
    there by :func:`place_task`."""
    if device.type == "mps" and private:
        raise ScenarioError([
            "run.device = 'mps', privacy.enabled = true: the private sum is computed in float64, which mps does "
            "not support; use run.device = \"cpu\" or \"cuda\""
        ])


def prepare(device: torch.device) -> None:
    """Ask ``device`` for deterministic kernels (module doc): nothing on the CPU (whose kernels the
    golden runs recorded); on an accelerator ``torch.use_deterministic_algorithms(True,
    warn_only=True)`` (an operation without a deterministic kernel warns instead of failing) and,
    for cuda, ``CUBLAS_WORKSPACE_CONFIG`` unless already set (read when cuBLAS starts). torch's
    settings are the process's: once an accelerator run has asked, they stay on."""
    if device.type == "cpu":
        return
    if device.type == "cuda":
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", CUBLAS_WORKSPACE)
        torch.backends.cudnn.benchmark = False
    torch.use_deterministic_algorithms(True, warn_only=True)


def place_task(task: Task, device: torch.device) -> Task:
    """``task`` with its model, clients' data, test set, initial model and quadratic form on
    ``device``: the task itself on the CPU (nothing copied), else a copy (the CPU task is left as
    it is). A float64 task is refused on mps, which has no float64."""
    if device.type == "cpu" and task.initial_theta.device.type == "cpu":
        return task
    if device.type == "mps" and task.dtype == torch.float64:
        raise ScenarioError([
            f"run.device = 'mps': task {task.name!r} computes in float64, which mps does not support; use "
            "run.device = \"cpu\" or \"cuda\""
        ])

    def data(d: ClientData) -> ClientData:
        return ClientData(d.x.to(device), d.y.to(device))

    quadratic = task.quadratic
    if quadratic is not None:
        quadratic = QuadraticForm(tuple(a.to(device) for a in quadratic.A), tuple(b.to(device) for b in quadratic.b))
    return dataclasses.replace(
        task, model=copy.deepcopy(task.model).to(device), clients=[data(d) for d in task.clients], test=data(task.test),
        initial_theta=task.initial_theta.to(device), quadratic=quadratic,
    )


def device_of(task: Task) -> torch.device:
    """The device ``task`` computes on (where :func:`place_task` put it: its initial model's)."""
    return task.initial_theta.device


def batches_on(task: Task, device: torch.device) -> bool:
    """Whether ``train_batched`` batches ``task``'s jobs on ``device`` (docs/tasks.md §9): on the
    CPU its ``batched_training`` trait, on an accelerator its ``batched_on_accelerator`` trait."""
    return task.batched_training if device.type == "cpu" else task.batched_on_accelerator


def to_device(value: Any, device: torch.device) -> Any:
    """``value`` with every tensor in it on ``device``: tensors, dataclasses (rebuilt with their
    init fields), named tuples, tuples, lists and dicts are walked; anything else (numpy arrays,
    numbers, strings) is kept as it is. A tensor already there is kept (the same object)."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {f.name: to_device(getattr(value, f.name), device) for f in dataclasses.fields(value) if f.init}
        return dataclasses.replace(value, **changes)
    if isinstance(value, tuple) and hasattr(value, "_fields"):
        return type(value)(*(to_device(v, device) for v in value))
    if isinstance(value, (tuple, list)):
        return type(value)(to_device(v, device) for v in value)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    return value


def device_memory(device: torch.device) -> int | None:
    """Bytes of ``device``'s memory a run may use: cuda's free memory
    (``torch.cuda.mem_get_info``), mps' recommended working set; None on the CPU (the host's
    memory is :func:`asyncfl.config.memory.machine_memory`'s)."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type == "mps":
        return int(torch.mps.recommended_max_memory())
    return None


def describe(device: torch.device) -> str:
    """The device's name as a person reads it (``cpu``, ``cuda:0 (NVIDIA H200)``, ``mps``)."""
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)
