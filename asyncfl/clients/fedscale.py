"""FedScale device traces (issue 9 item 2): load the published pickles safely, turn them into
latencies and availability windows.

Formats (FedScale's ``client_device_capacity`` and ``client_behave_trace``):

* devices: ``{client_id: {"computation": ms per sample, "communication": kbit/s, ...}}``;
* availability: ``{client_id: {"active": [s, ...], "inactive": [s, ...], "finish_time": s?, ...}}``
  — the client is online on ``[active_i, inactive_i)`` (seconds); with ``finish_time`` the
  trace repeats with that period (FedScale's ``cur_time % finish_time``), without it the client
  stays offline after its last window. Other keys (``duration``, ``model``, …) are ignored.

Client ``k`` of the simulation uses the profile of the ``(k mod D)``-th client id in sorted
order (``D`` profiles in the file), so a small file can serve a large population.

Latency of one job of client ``k`` (milliseconds, then divided by ``time_unit_ms``):

    latency_k = n_k × computation_k + bits / communication_k

with ``n_k`` the samples one local job processes (``local_steps × min(batch_size, |D_k|)``, or
``epochs × |D_k|``; one pass for the exact solver) and ``bits = d × itemsize × 8`` the model
size (``d`` parameters of the task's dtype). ``kbit/s`` is ``bit/ms``, so ``bits /
communication`` is in milliseconds. One transfer (the upload) is counted.

The pickles are read by an unpickler whose ``find_class`` allows only the builtins ``dict``,
``list``, ``tuple``, ``int``, ``float`` and ``str``: a pickle that names any other global (for
instance ``os.system`` through ``__reduce__``) is refused before anything runs.
"""

from __future__ import annotations

import builtins
import io
import math
import pickle
import reprlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from asyncfl.clients.availability import Schedule
from asyncfl.config.files import read_limited, resolve_path
from asyncfl.errors import TraceError

MAX_BYTES = 512 * 2**20
SAFE_BUILTINS = frozenset({"dict", "list", "tuple", "int", "float", "str"})
MAX_LISTED = 5  # problems listed per file


class _Refused(pickle.UnpicklingError):
    """A global the restricted unpickler refused (its message is ours)."""


class RestrictedUnpickler(pickle.Unpickler):
    """Unpickles plain data only: every global other than the safe builtins is refused."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in SAFE_BUILTINS:
            return getattr(builtins, name)
        raise _Refused(
            f"refused to load the global {ascii(module)[1:-1][:60]}.{ascii(name)[1:-1][:60]} (only plain data is allowed: "
            f"{', '.join(sorted(SAFE_BUILTINS))}); the file may try to run code"
        )


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = 40


def _clip(value: Any) -> str:
    """A value read from a trace, shortened for a message (``reprlib``: long strings and
    containers are elided, never formatted whole)."""
    return _SHORT.repr(value)


def load_plain_pickle(path: str | Path, what: str) -> Any:
    """Read ``path`` with :class:`RestrictedUnpickler`; every failure is a :class:`TraceError`.
    ``asyncfl:NAME`` names a file shipped in ``asyncfl/data``."""
    path = resolve_path(str(path))
    if not path.exists():
        raise TraceError(f"{what} {path}: no such file")
    raw = read_limited(path, MAX_BYTES, lambda message: TraceError(f"{what} {message}"))  # size checked before reading
    if not raw:
        raise TraceError(f"{what} {path}: the file is empty")
    try:
        return RestrictedUnpickler(io.BytesIO(raw)).load()
    except _Refused as exc:
        raise TraceError(f"{what} {path}: not a plain-data pickle: {exc}") from None
    except EOFError:
        raise TraceError(f"{what} {path}: truncated (the pickle ends early)") from None
    except Exception as exc:  # malformed opcodes raise many types; their messages may quote the file
        raise TraceError(f"{what} {path}: not a valid pickle ({exc.__class__.__name__})") from None


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _sorted_ids(data: dict, path: Path, what: str) -> list[Any]:
    bad = [k for k in data if isinstance(k, bool) or not isinstance(k, (int, str))]
    if bad:
        raise TraceError(f"{what} {path}: client id {_clip(bad[0])} must be an int or a str")
    return sorted(data, key=lambda k: (isinstance(k, str), k))


def _top(data: Any, path: Path, what: str) -> list[Any]:
    if not isinstance(data, dict):
        raise TraceError(f"{what} {path}: must hold a dict {{client_id: {{...}}}}, not {type(data).__name__}")
    if not data:
        raise TraceError(f"{what} {path}: holds no clients")
    return _sorted_ids(data, path, what)


def _fail(problems: list[str], path: Path, what: str) -> None:
    if problems:
        more = f" (and {len(problems) - MAX_LISTED} more)" if len(problems) > MAX_LISTED else ""
        raise TraceError(f"{what} {path}: " + "; ".join(problems[:MAX_LISTED]) + more)


# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceProfiles:
    """Per-device compute (ms per sample) and bandwidth (kbit/s), in sorted client-id order."""

    ids: tuple[Any, ...]
    computation: np.ndarray
    communication: np.ndarray

    def index(self, client: int) -> int:
        return client % len(self.ids)


def load_devices(path: str | Path) -> DeviceProfiles:
    """Load and check a FedScale device-capacity pickle."""
    path, what = resolve_path(str(path)), "FedScale device file"
    data = load_plain_pickle(path, what)
    ids = _top(data, path, what)
    problems: list[str] = []
    comp, comm = [], []
    for cid in ids:
        entry = data[cid]
        if not isinstance(entry, dict):
            problems.append(f"client {_clip(cid)}: must be a dict with 'computation' and 'communication', not {type(entry).__name__}")
            continue
        for key, low, unit in (("computation", "non-negative", "ms per sample"), ("communication", "positive", "kbit/s")):
            value = entry.get(key)
            ok = _is_number(value) and (value >= 0 if key == "computation" else value > 0)
            if key not in entry:
                problems.append(f"client {_clip(cid)}: '{key}' is missing")
            elif not ok:
                problems.append(f"client {_clip(cid)}: '{key}' = {_clip(value)}: must be a finite {low} number ({unit})")
        if not problems:
            comp.append(float(entry["computation"]))
            comm.append(float(entry["communication"]))
    _fail(problems, path, what)
    return DeviceProfiles(tuple(ids), np.array(comp), np.array(comm))


@dataclass(frozen=True)
class AvailabilityTrace:
    """Per-client online windows (seconds) and optional repeat period ``finish_time``."""

    ids: tuple[Any, ...]
    active: tuple[np.ndarray, ...]
    inactive: tuple[np.ndarray, ...]
    finish_time: tuple[float | None, ...]

    def schedule(self, clients: int, seconds_per_unit: float) -> Schedule:
        """Windows of simulated clients ``0..clients-1`` in virtual time (``s / seconds_per_unit``):
        one profile per trace client used, and client ``k`` follows profile ``k mod D`` (an int32
        index a client when the population outnumbers the ``D`` trace clients)."""
        d = len(self.ids)
        used = range(min(clients, d))
        scale = 1.0 / seconds_per_unit
        periods = [None if self.finish_time[i] is None else self.finish_time[i] * scale for i in used]
        profile_of = np.arange(clients, dtype=np.int32) % np.int32(d) if clients > d else None
        return Schedule([self.active[i] * scale for i in used], [self.inactive[i] * scale for i in used], periods, profile_of)


def load_availability(path: str | Path) -> AvailabilityTrace:
    """Load and check a FedScale availability (behaviour) pickle."""
    path, what = resolve_path(str(path)), "FedScale availability file"
    data = load_plain_pickle(path, what)
    ids = _top(data, path, what)
    problems: list[str] = []
    actives, inactives, finishes = [], [], []
    for cid in ids:
        entry = data[cid]
        if not isinstance(entry, dict):
            problems.append(f"client {_clip(cid)}: must be a dict with 'active' and 'inactive' lists, not {type(entry).__name__}")
            continue
        lists = {}
        for key in ("active", "inactive"):
            value = entry.get(key)
            if key not in entry:
                problems.append(f"client {_clip(cid)}: '{key}' is missing")
            elif not isinstance(value, (list, tuple)) or not all(_is_number(v) and v >= 0 for v in value):
                problems.append(f"client {_clip(cid)}: '{key}' must be a list of finite non-negative times (s)")
            else:
                lists[key] = np.array(value, dtype=np.float64)
        finish = entry.get("finish_time")
        if finish is not None and not (_is_number(finish) and finish > 0):
            problems.append(f"client {_clip(cid)}: 'finish_time' = {_clip(finish)}: must be a finite positive time (s)")
        if len(lists) < 2 or problems:
            continue
        a, b = lists["active"], lists["inactive"]
        if a.size != b.size:
            problems.append(f"client {_clip(cid)}: 'active' has {a.size} times and 'inactive' {b.size}; they must pair up")
        elif a.size and (np.any(b < a) or np.any(a[1:] < b[:-1])):
            problems.append(f"client {_clip(cid)}: windows must be ordered: active[i] <= inactive[i] <= active[i+1]")
        elif finish is not None and a.size and b[-1] > finish:
            problems.append(f"client {_clip(cid)}: 'finish_time' = {_clip(finish)} is before the last inactive time {b[-1]:g}")
        else:
            actives.append(a)
            inactives.append(b)
            finishes.append(None if finish is None else float(finish))
    _fail(problems, path, what)
    return AvailabilityTrace(tuple(ids), tuple(actives), tuple(inactives), tuple(finishes))


# ---------------------------------------------------------------------------------------------
def samples_per_job(n: int, client: Any, local_work: bool = True) -> int:
    """Samples one local job of a client with ``n`` examples processes (see the module doc); a
    solver without local steps (``local_work`` false: the exact prox) reads each sample once."""
    if not local_work:
        return n
    if client.epochs is not None:
        return client.epochs * n
    size = client.batch_size if client.batch_size is not None and client.batch_size < n else n
    return (client.local_steps or 1) * size


def model_bits(dim: int, itemsize: int) -> int:
    """Model size in bits: ``d × itemsize × 8``."""
    return dim * itemsize * 8


def job_latencies_ms(devices: DeviceProfiles, samples: np.ndarray, bits: int) -> np.ndarray:
    """``latency_k = samples_k × computation_k + bits / communication_k`` (ms), per client."""
    idx = np.array([devices.index(k) for k in range(len(samples))], dtype=np.int64)
    return samples * devices.computation[idx] + bits / devices.communication[idx]


def task_latencies(cfg: Any, ctx: Any) -> np.ndarray:
    """Virtual-time latency of every client's job: :func:`job_latencies_ms` / ``time_unit_ms``
    (the latency component ``fedscale``, mode ``profiles``: ``build(cfg, ctx: FleetContext)``,
    from ``ctx.task``, ``ctx.client`` and ``ctx.local_work``)."""
    task = ctx.task
    if task is None:
        raise ValueError(f"latency.dist = {cfg.dist!r} needs the task (sample counts and model size)")
    devices = load_devices(cfg.file)
    samples = np.array([samples_per_job(len(task.clients[k]), ctx.client, ctx.local_work)
                        for k in range(ctx.clients)], dtype=np.float64)
    itemsize = task.initial_theta.element_size()
    return job_latencies_ms(devices, samples, model_bits(task.dim, itemsize)) / cfg.time_unit_ms


def build_availability(cfg: Any, ctx: Any) -> Schedule:
    """The availability component ``trace``: the pickle ``cfg.availability_file`` as a schedule
    (``build(cfg, ctx: FleetContext)``: ``ctx.clients``, ``ctx.seconds_per_unit``)."""
    return load_availability(cfg.availability_file).schedule(ctx.clients, ctx.seconds_per_unit)
