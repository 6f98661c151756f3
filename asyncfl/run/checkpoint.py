"""Checkpoints: the whole state of a :class:`~asyncfl.sim.engine.Simulation` as data (DESIGN.md §2
principle 4), written to ``checkpoint.pt`` and read back so that a resumed run is bit for bit the
run that was never interrupted.

When. A checkpoint is taken only where the state is complete data: between two simpy events with
no buffer flush in progress (after a server step, or wherever ``Simulation.should_stop`` stops a
run — in the middle of a buffer, typically). At such a point every pending simpy event is the
arrival of a client in flight, so the event queue is rebuilt from ``in_flight`` alone.

What (``checkpoint.pt``, one ``torch.save`` dict, read with ``weights_only=True``)::

    format      CHECKPOINT_FORMAT (an int; another value is refused)
    scenario    the resolved scenario TOML the run was started with (must equal scenario.toml)
    now         the simpy clock
    streams     every named numpy Generator's bit_generator.state
    sim         the Simulation's data attributes: theta, version, algo_state, in_flight, buffer,
                counters, records, _seq, _eval_staleness, last_metrics — and any data attribute
                a feature adds (attributes that are not data are listed in ``skipped``)
    fleet       the fleet's data attributes (busy flags, speeds, availability arrays, …)
    protocol    the protocol's data attributes (SyncProtocol: round, arrived, need)
    algorithm   data attributes of the algorithm and of the asyncfl objects it holds
                (aggregator, rule, privacy accountant, …), or its ``state_dict()`` if it has one
    clients     {seq: {"fields": InFlight fields except future/process, "result": local model
                or None}} — every dispatched client still referenced (in flight, buffered,
                arrived in the open sync round); each job carries its inputs (start θ, centre,
                seed); θ tensors of one model version share storage, so each version is stored
                once
    extra       what the caller adds (the runner: rows written to updates.csv / metrics.csv)

Encoding. NamedTuples and dataclasses (from ``asyncfl`` modules only) become tagged dicts, numpy
arrays and scalars keep their dtype, tensors are stored as tensors, Python ints of any size
(generator states) as ints; an :class:`~asyncfl.sim.engine.InFlight` anywhere becomes a reference to
its ``clients`` entry, so shared records stay shared. Nothing is pickled as a class, so a
checkpoint is loaded with ``torch.load(weights_only=True)``: a hostile file cannot run code.

Resume (:func:`load_state`, then :func:`restart` from ``Simulation._start``): the simulation is
built from the scenario as usual, its data attributes are replaced, and the in-flight clients get
their simpy processes back in the original event order — sorted by ``(arrival_time, seq)``,
which is the order of their timeouts in the original queue — and their jobs are resubmitted to the
executor (a job is deterministic given its seed and start θ), unless the result was stored.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import io
from pathlib import Path
from typing import Any

import numpy as np
import simpy
import torch

from asyncfl import rng as rngmod
from asyncfl.sim.engine import InFlight, Simulation
from asyncfl.errors import CheckpointError
from asyncfl.run.rundir import atomic_write

CHECKPOINT_FORMAT = 1
CHECKPOINT_NAME = "checkpoint.pt"

# Simulation attributes that are configuration, machinery or handled separately.
SIM_EXCLUDE = {
    "scenario", "task", "sink", "_executor", "algorithm", "streams", "fleet", "env", "protocol",
    "_pending_flush", "_started", "_wall_start", "finished", "should_stop", "_restored",
}
COMPONENT_EXCLUDE = {"sim", "task", "scenario", "env", "streams"}
INFLIGHT_MACHINERY = ("future", "process")
_PLAIN = (type(None), bool, int, float, str, bytes)
REQUIRED = ("format", "scenario", "now", "streams", "sim", "fleet", "protocol", "algorithm", "clients", "extra")


class NotData(TypeError):
    """A value that is not checkpointable data (a function, an open file, a foreign object)."""


# ---------------------------------------------------------------------------------------------
# encoding: Python/numpy/torch values → a tree of dicts, lists, tensors and plain scalars
class _Encoder:
    def __init__(self) -> None:
        self.clients: dict[int, InFlight] = {}

    def __call__(self, value: Any) -> Any:
        if isinstance(value, InFlight):
            self.clients[value.seq] = value
            return {"__t": "inflight", "seq": value.seq}
        if isinstance(value, torch.Tensor):
            return value.detach()
        if isinstance(value, np.ndarray):
            if value.dtype.hasobject:
                raise NotData(f"numpy array of dtype {value.dtype}")
            arr = np.ascontiguousarray(value)
            data = torch.frombuffer(bytearray(arr.tobytes()), dtype=torch.uint8) if arr.nbytes else torch.zeros(0, dtype=torch.uint8)
            return {"__t": "ndarray", "dtype": arr.dtype.str, "shape": list(arr.shape), "data": data}
        if isinstance(value, np.generic):
            return {"__t": "npscalar", "value": self(np.asarray(value))}
        if isinstance(value, _PLAIN):
            return value
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return {"__t": "namedtuple", "cls": _class_name(value), "fields": {f: self(getattr(value, f)) for f in value._fields}}
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {"__t": "dataclass", "cls": _class_name(value),
                    "fields": {f.name: self(getattr(value, f.name)) for f in dataclasses.fields(value)}}
        if isinstance(value, tuple):
            return {"__t": "tuple", "items": [self(v) for v in value]}
        if isinstance(value, list):
            return [self(v) for v in value]
        if isinstance(value, dict):
            if not all(isinstance(k, _PLAIN) for k in value):
                raise NotData("dict with non-scalar keys")
            return {"__t": "dict", "items": [[k, self(v)] for k, v in value.items()]}
        raise NotData(f"{type(value).__module__}.{type(value).__qualname__}")

    def client(self, rec: InFlight) -> dict[str, Any]:
        fields = {f.name: self(getattr(rec, f.name)) for f in dataclasses.fields(rec) if f.name not in INFLIGHT_MACHINERY}
        result = None
        fut = rec.future
        if fut is not None and fut.done() and not fut.cancelled() and fut.exception() is None:
            result = fut.result().detach()
        return {"fields": fields, "result": result}


def _class_name(value: Any) -> str:
    cls = type(value)
    if not cls.__module__.startswith("asyncfl"):
        raise NotData(f"{cls.__module__}.{cls.__qualname__} (only asyncfl NamedTuples and dataclasses)")
    return f"{cls.__module__}:{cls.__qualname__}"


def _resolve(name: str) -> type:
    module, _, qualname = name.partition(":")
    if not (module == "asyncfl" or module.startswith("asyncfl.")):
        raise CheckpointError(f"checkpoint names a class outside asyncfl: {name}")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, type) or not (dataclasses.is_dataclass(obj) or issubclass(obj, tuple)):
        raise CheckpointError(f"checkpoint names {name}, which is not a NamedTuple or a dataclass")
    return obj


class _Decoder:
    def __init__(self, clients: dict[int, InFlight]) -> None:
        self.clients = clients

    def __call__(self, value: Any) -> Any:
        if isinstance(value, list):
            return [self(v) for v in value]
        if not isinstance(value, dict):
            return value
        tag = value["__t"]
        if tag == "inflight":
            return self.clients[value["seq"]]
        if tag == "ndarray":
            raw = value["data"].numpy().tobytes()
            return np.frombuffer(raw, dtype=np.dtype(value["dtype"])).reshape(value["shape"]).copy()
        if tag == "npscalar":
            return self(value["value"])[()]
        if tag == "namedtuple":
            return _resolve(value["cls"])(**{k: self(v) for k, v in value["fields"].items()})
        if tag == "dataclass":
            cls = _resolve(value["cls"])
            obj = cls.__new__(cls)
            for k, v in value["fields"].items():
                object.__setattr__(obj, k, self(v))
            return obj
        if tag == "tuple":
            return tuple(self(v) for v in value["items"])
        if tag == "dict":
            return {k: self(v) for k, v in value["items"]}
        raise CheckpointError(f"unknown tag {tag!r} in checkpoint")


# ---------------------------------------------------------------------------------------------
# components: the data attributes of an object (and of the asyncfl objects it holds)
def _component_state(obj: Any, enc: _Encoder, depth: int = 0) -> dict[str, Any]:
    if hasattr(obj, "state_dict") and callable(obj.state_dict):
        return {"state_dict": enc(obj.state_dict())}
    data: dict[str, Any] = {}
    children: dict[str, Any] = {}
    for name, value in vars(obj).items():
        if name in COMPONENT_EXCLUDE:
            continue
        try:
            data[name] = enc(value)
        except NotData:
            if depth < 4 and hasattr(value, "__dict__") and type(value).__module__.startswith("asyncfl") and not callable(value):
                children[name] = _component_state(value, enc, depth + 1)
    return {"data": data, "children": children}


def _load_component(obj: Any, state: dict[str, Any], dec: _Decoder) -> None:
    if "state_dict" in state:
        obj.load_state_dict(dec(state["state_dict"]))
        return
    for name, value in state["data"].items():
        setattr(obj, name, dec(value))
    for name, child in state["children"].items():
        if hasattr(obj, name):
            _load_component(getattr(obj, name), child, dec)


# ---------------------------------------------------------------------------------------------
def state_dict(sim: Simulation, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The simulation's complete state as checkpointable data (see the module docstring)."""
    if sim._pending_flush is not None:
        raise CheckpointError("a checkpoint can only be taken between events (a buffer flush is in progress)")
    enc = _Encoder()
    sim_state: dict[str, Any] = {}
    skipped: list[str] = []
    for name, value in vars(sim).items():
        if name in SIM_EXCLUDE:
            continue
        try:
            sim_state[name] = enc(value)
        except NotData:
            skipped.append(name)
    out = {
        "format": CHECKPOINT_FORMAT,
        "scenario": sim.scenario.to_toml(),
        "now": float(sim.env.now),
        "streams": enc(rngmod.streams_state(sim.streams)),
        "sim": sim_state,
        "skipped": skipped,
        "fleet": _component_state(sim.fleet, enc),
        "protocol": _component_state(sim.protocol, enc),
        "algorithm": _component_state(sim.algorithm, enc),
        "extra": enc(extra or {}),
    }
    clients: dict[int, Any] = {}
    done: set[int] = set()
    while len(done) < len(enc.clients):  # a client's fields may reference others (never today)
        for seq in sorted(set(enc.clients) - done):
            clients[seq] = enc.client(enc.clients[seq])
            done.add(seq)
    out["clients"] = {"__t": "dict", "items": [[seq, clients[seq]] for seq in sorted(clients)]}
    return out


def save(sim: Simulation, path: str | Path, extra: dict[str, Any] | None = None) -> None:
    """Write ``sim``'s state atomically (temporary file, fsync, rename) to ``path``."""
    try:
        state = state_dict(sim, extra)
    except NotData as exc:
        raise CheckpointError(f"cannot checkpoint: the state holds a value that is not data ({exc})") from None
    atomic_write(Path(path), lambda p: torch.save(state, p))


def read(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint file; a corrupted file or another format raises :class:`CheckpointError`."""
    path = Path(path)
    try:
        state = torch.load(io.BytesIO(path.read_bytes()), weights_only=True, map_location="cpu")
    except FileNotFoundError:
        raise CheckpointError(f"{path}: no checkpoint") from None
    except Exception as exc:  # torch raises many types for a damaged or foreign file
        raise CheckpointError(f"{path}: not a readable checkpoint ({exc.__class__.__name__}: {_short(exc)})") from None
    if not isinstance(state, dict) or "format" not in state:
        raise CheckpointError(f"{path}: not an asyncfl checkpoint")
    if state["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError(f"{path}: checkpoint format {state['format']!r}, this asyncfl reads format {CHECKPOINT_FORMAT}")
    missing = [k for k in REQUIRED if k not in state]
    if missing or not isinstance(state["sim"], dict) or not isinstance(state["sim"].get("version"), int):
        raise CheckpointError(f"{path}: incomplete checkpoint (missing {', '.join(missing) or 'sim.version'})")
    return state


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


def extra_of(state: dict[str, Any]) -> dict[str, Any]:
    return _Decoder({})(state["extra"])


def load_state(sim: Simulation, state: dict[str, Any]) -> None:
    """Put a checkpoint's state into a freshly built, not yet started ``sim``."""
    if sim._started:
        raise CheckpointError("load_state needs a simulation that has not started")
    try:
        _load(sim, state)
    except CheckpointError:
        raise
    except Exception as exc:  # a structurally damaged checkpoint
        raise CheckpointError(f"checkpoint does not match this simulation ({exc.__class__.__name__}: {_short(exc)})") from None


def _load(sim: Simulation, state: dict[str, Any]) -> None:
    clients: dict[int, InFlight] = {}
    dec = _Decoder(clients)
    entries = dict(state["clients"]["items"])
    for seq in entries:  # first pass: empty records, so that references resolve
        clients[seq] = InFlight.__new__(InFlight)
    for seq, entry in entries.items():
        rec = clients[seq]
        for f in dataclasses.fields(InFlight):
            object.__setattr__(rec, f.name, None)
        for name, value in entry["fields"].items():
            object.__setattr__(rec, name, dec(value))
    rngmod.restore_streams(sim.streams, dec(state["streams"]))
    for name, value in state["sim"].items():
        setattr(sim, name, dec(value))
    _load_component(sim.fleet, state["fleet"], dec)
    _load_component(sim.protocol, state["protocol"], dec)
    _load_component(sim.algorithm, state["algorithm"], dec)
    sim.env = simpy.Environment(initial_time=state["now"])
    sim._restored = {seq: entries[seq]["result"] for seq in clients}, clients


def restart(sim: Simulation) -> None:
    """(Called by ``Simulation._start`` in the event loop.) Resubmit the jobs of every client the
    checkpoint holds and give the in-flight ones their simpy processes back, in event order."""
    results, clients = sim._restored
    sim._restored = None
    loop = asyncio.get_running_loop()
    for seq in sorted(clients):
        rec, result = clients[seq], results[seq]
        if result is not None:
            fut: asyncio.Future[torch.Tensor] = loop.create_future()
            fut.set_result(result)
            rec.future = fut
        else:
            rec.future = sim.executor.submit(rec.job)
    for rec in sorted(sim.in_flight.values(), key=lambda r: r.seq):  # ties keep dispatch order
        sim.launch(rec)
