"""Checkpoints: the simulation's declared state (:class:`~asyncfl.sim.state.SimState`) in a file,
and back (docs/architecture.md §5, docs/run-directory.md §4).

File (``checkpoint.pt``, one ``torch.save`` dict, read with ``weights_only=True`` so a hostile
file cannot run code)::

    format    CHECKPOINT_FORMAT (another value is refused with a message saying so)
    scenario  the resolved scenario TOML the run was started with (must equal scenario.toml)
    state     the SimState tree, encoded below
    run_dir   what the run directory held when it was taken: {"csv_rows": {file: data rows},
              "csv_sha256": {file: digest of the header and those rows}}, and "fault": the
              message of the numerical fault the run stopped on, for the checkpoint taken then
    sha256    :func:`content_digest` of the four entries above: ``torch.load`` checks no
              checksum, so a flipped bit in a tensor would otherwise load as a different state

Encoding. Only the declared state types of :data:`STATE_TYPES` are written, field by field, as
``{"__t": type name, "fields": {...}}``; tensors as tensors; numpy arrays as tagged byte
tensors with their dtype and shape; dicts with string keys, tuples, lists and plain scalars as
themselves. Anything else in the tree is an error naming its path. Decoding builds each type
with exactly its declared fields: a checkpoint whose fields do not match this version of a type
is refused, never half-loaded.

Validation (:func:`validate`) compares a decoded state with the initial state of a simulation
freshly built from the scenario — the same types, dict keys and dtypes everywhere, the same
tensor shapes except along dimensions a fresh state leaves empty (buffers that grow, such as
MA-full's history) — and checks every count against the scenario and the run directory's row
counts. The runner does this before it touches a file.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from asyncfl import rng as rngmod
from asyncfl.clients.fleet import FleetState
from asyncfl.clients.participation import ParticipationState
from asyncfl.components.core import KINDS
from asyncfl.privacy.aggregator import allotment_of, schema_of
from asyncfl.privacy.allotment import Allotment
from asyncfl.components.registry import REGISTRY
from asyncfl.compute.training import LocalJob
from asyncfl.config.files import read_limited
from asyncfl.config.memory import machine_memory
from asyncfl.components.contracts import ServerProtocol
from asyncfl.config.scenario import Scenario, one_upload_per_client
from asyncfl.errors import CheckpointError
from asyncfl.run.rundir import torch_bytes, write_bytes
from asyncfl.sim.state import ClientState, Counters, Records, SimState
from asyncfl.staleness_counts import StalenessCounts

#: 1: the reflective format of asyncfl ≤ 0.1; 2: without the content digest; 3: before components
#: (scenario sections with every plug-in's keys, state types by module) — all refused
#: 5: Counters.dropped_declared (a protocol's own drop reasons); 6: Counters.dropped_unallotted (random
#: allocation's late uploads, which format 5 did not count, so its checkpoints did not fit their rows);
#: 7: MAFullState.w_band and l_band (MA-full keeps W and its Cholesky factor as bands, docs/server-rules.md §4)
CHECKPOINT_FORMAT = 7
CHECKPOINT_NAME = "checkpoint.pt"

#: The engine's own state types, by name; the components' own (a rule's, a protocol's, …) are
#: declared on each component (``Component.state``) and added by :func:`state_types`.
STATE_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (SimState, ClientState, Counters, Records, StalenessCounts, FleetState, ParticipationState, LocalJob)
}


_STATE_CACHE: list[Any] = [None, None]  # (registry generation, types) of the last state_types()


def state_types() -> dict[str, type]:
    """Every type a state tree may hold, by name: the engine's and every registered component's
    declared state types (``Component.state``, the one way a plug-in declares one). Two
    different types under one name are an error naming both components."""
    if _STATE_CACHE[0] == REGISTRY.generation:
        return _STATE_CACHE[1]
    out = dict(STATE_TYPES)
    owner = {name: "the engine" for name in out}
    for kind in KINDS:  # every kind: a new kind's components checkpoint their state too
        for component in REGISTRY.components(kind):
            for cls in component.state_types():
                name = cls.__name__
                if name in out and out[name] is not cls:
                    raise CheckpointError(f"state type {name!r} of {component.kind_info.label} {component.name!r} clashes "
                                          f"with another of {owner[name]}; give it another class name")
                out[name], owner[name] = cls, f"{component.kind_info.label} {component.name!r}"
    _STATE_CACHE[:] = [REGISTRY.generation, out]
    return out


_PLAIN = (type(None), bool, int, float, str)


def _fields(cls: type) -> tuple[str, ...]:
    if hasattr(cls, "_fields"):
        return tuple(cls._fields)
    return tuple(f for f in cls.__dataclass_fields__)  # type: ignore[attr-defined]


# ---------------------------------------------------------------------------------------------
# encoding
def encode(value: Any, path: str = "state") -> Any:
    """``value`` as checkpointable data (see the module docstring); raises CheckpointError
    naming the path of a value that is not declared state."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu()  # saved device-independently: restored to the run's device (asyncfl.compute.device)
    if isinstance(value, _PLAIN):
        return value
    if isinstance(value, np.ndarray):
        if value.dtype.hasobject:
            raise CheckpointError(f"cannot checkpoint {path}: a numpy array of objects")
        arr = np.ascontiguousarray(value)
        data = torch.frombuffer(bytearray(arr.tobytes()), dtype=torch.uint8) if arr.nbytes else torch.zeros(0, dtype=torch.uint8)
        return {"__t": "ndarray", "dtype": arr.dtype.str, "shape": list(arr.shape), "data": data}
    if isinstance(value, np.generic):
        return encode(value.item(), path)
    name = type(value).__name__
    if state_types().get(name) is type(value):
        return {"__t": name, "fields": {f: encode(getattr(value, f), f"{path}.{f}") for f in _fields(type(value))}}
    if isinstance(value, tuple) and not hasattr(value, "_fields"):
        return {"__t": "tuple", "items": [encode(v, f"{path}[{i}]") for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [encode(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise CheckpointError(f"cannot checkpoint {path}: a dict with keys that are not strings")
        return {"__t": "dict", "items": {k: encode(v, f"{path}.{k}") for k, v in value.items()}}
    raise CheckpointError(f"cannot checkpoint {path}: {type(value).__module__}.{type(value).__qualname__} is not a declared state type")


def decode(value: Any, path: str = "state") -> Any:
    """The inverse of :func:`encode`; raises CheckpointError for anything it did not write."""
    if isinstance(value, list):
        return [decode(v, f"{path}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, torch.Tensor) or isinstance(value, _PLAIN):
        return value
    if not isinstance(value, dict) or "__t" not in value:
        raise CheckpointError(f"{path}: not checkpoint data ({type(value).__name__})")
    tag = value["__t"]
    if tag == "ndarray":
        try:
            raw = value["data"].numpy().tobytes()
            return np.frombuffer(raw, dtype=np.dtype(value["dtype"])).reshape(value["shape"]).copy()
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CheckpointError(f"{path}: a damaged array ({exc})") from None
    if tag == "tuple":
        return tuple(decode(v, f"{path}[{i}]") for i, v in enumerate(value["items"]))
    if tag == "dict":
        return {str(k): decode(v, f"{path}.{k}") for k, v in dict(value["items"]).items()}
    cls = state_types().get(tag)
    if cls is None:
        raise CheckpointError(f"{path}: type {tag!r} is not a state type of this asyncfl")
    fields = value.get("fields")
    want = _fields(cls)
    if not isinstance(fields, dict) or tuple(fields) != want:
        got = tuple(fields) if isinstance(fields, dict) else ()
        raise CheckpointError(f"{path}: {tag} has fields {', '.join(got) or 'none'}; this asyncfl's {tag} has {', '.join(want)}")
    return cls(**{f: decode(fields[f], f"{path}.{f}") for f in want})


# ---------------------------------------------------------------------------------------------
# files
def save(path: str | Path, scenario: Scenario, state: SimState, run_dir: Mapping[str, Any]) -> None:
    """Write a checkpoint atomically (temporary file, fsync, rename): a crash or a full disk
    leaves the previous checkpoint as it was."""
    data = seal({"format": CHECKPOINT_FORMAT, "scenario": scenario.to_toml(), "state": encode(state), "run_dir": dict(run_dir)})
    write_bytes(Path(path), torch_bytes(data))


def seal(data: dict[str, Any]) -> dict[str, Any]:
    """``data`` with its ``sha256`` entry (:func:`content_digest` of every other entry)."""
    body = {k: v for k, v in data.items() if k != "sha256"}
    return {**body, "sha256": content_digest(body)}


def content_digest(value: Any) -> str:
    """SHA-256 of a checkpoint's content, independent of how ``torch.save`` laid it out: a walk
    of dicts (keys sorted), lists, tuples, strings, numbers and tensors (dtype, shape and the bytes
    of their elements in order), each tagged with its kind and length. A tensor shared by several
    entries (one model version) is hashed once and its digest fed at every reference."""
    digest, seen = hashlib.sha256(), {}
    _feed(digest, value, seen)
    return digest.hexdigest()


def _feed(digest: Any, value: Any, seen: dict[tuple, bytes]) -> None:
    if isinstance(value, torch.Tensor):
        t = value.detach()
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), tuple(t.stride()), t.dtype)
        part = seen.get(key)
        if part is None:
            flat = t.contiguous().reshape(-1)
            data = flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""
            part = seen[key] = hashlib.sha256(f"{t.dtype}{tuple(t.shape)}".encode() + data).digest()
        digest.update(b"T" + part)
    elif isinstance(value, dict):
        digest.update(b"D%d|" % len(value))
        for k in sorted(value, key=str):
            _feed(digest, str(k), seen)
            _feed(digest, value[k], seen)
    elif isinstance(value, (list, tuple)):
        digest.update((b"L" if isinstance(value, list) else b"U") + b"%d|" % len(value))
        for item in value:
            _feed(digest, item, seen)
    elif isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        digest.update(b"S%d|" % len(data) + data)
    elif isinstance(value, bool) or value is None:
        digest.update({True: b"B1", False: b"B0", None: b"N"}[value])
    elif isinstance(value, int):
        digest.update(b"I%d|" % value)
    elif isinstance(value, float):
        digest.update(b"F" + value.hex().encode() + b"|")
    else:
        raise CheckpointError(f"not checkpoint data: {type(value).__name__}")


class Checkpoint:
    """A checkpoint file, read and decoded (not yet validated against a simulation)."""

    def __init__(self, path: Path, scenario_toml: str, state: SimState, csv_rows: dict[str, int], csv_sha256: dict[str, str],
                 fault: str | None = None) -> None:
        self.path, self.scenario_toml, self.state = path, scenario_toml, state
        self.csv_rows, self.csv_sha256 = csv_rows, csv_sha256
        self.fault = fault  # taken when the run stopped on this numerical fault: a resume only finalizes it

    @property
    def step(self) -> int:
        """Server steps the checkpointed run had taken."""
        return self.state.version - 1


def read(path: str | Path) -> Checkpoint:
    """Read and decode a checkpoint. A missing, damaged or foreign file, another format version
    or an incomplete state raises :class:`CheckpointError` with one message."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise CheckpointError(f"{path}: no checkpoint")
    raw = read_limited(path, machine_memory() or 1 << 40, CheckpointError)  # a regular file, that fits in memory
    try:
        data = torch.load(io.BytesIO(raw), weights_only=True, map_location="cpu")
    except Exception as exc:  # torch raises many types for a damaged or foreign file
        raise CheckpointError(f"{path}: not a readable checkpoint ({exc.__class__.__name__}: {_short(exc)})") from None
    if not isinstance(data, dict) or "format" not in data:
        raise CheckpointError(f"{path}: not an asyncfl checkpoint")
    if data["format"] != CHECKPOINT_FORMAT:
        raise CheckpointError(
            f"{path}: checkpoint format {data['format']!r}, written by another version of asyncfl; this asyncfl reads "
            f"format {CHECKPOINT_FORMAT} (an older run cannot be resumed: rerun it)"
        )
    missing = [k for k in ("scenario", "state", "run_dir", "sha256") if k not in data]
    if missing:
        raise CheckpointError(f"{path}: incomplete checkpoint (missing {', '.join(missing)})")
    try:
        intact = data["sha256"] == content_digest({k: v for k, v in data.items() if k != "sha256"})
    except (CheckpointError, RecursionError):  # not checkpoint data, or nested deeper than any state
        intact = False
    if not intact:
        raise CheckpointError(f"{path}: damaged (its content does not match the SHA-256 it was written with)")
    try:
        state = decode(data["state"])
    except CheckpointError as exc:
        raise CheckpointError(f"{path}: {exc}") from None
    except RecursionError:
        raise CheckpointError(f"{path}: not a simulation state (nested too deeply)") from None
    if not isinstance(state, SimState):
        raise CheckpointError(f"{path}: the checkpoint holds no simulation state")
    run_dir = data["run_dir"]
    rows, digests = run_dir.get("csv_rows") if isinstance(run_dir, dict) else None, run_dir.get("csv_sha256") if isinstance(run_dir, dict) else None
    if not (isinstance(rows, dict) and isinstance(digests, dict) and isinstance(data["scenario"], str)):
        raise CheckpointError(f"{path}: incomplete checkpoint (no row counts of the run directory)")
    fault = run_dir.get("fault")
    if fault is not None and not isinstance(fault, str):
        raise CheckpointError(f"{path}: run_dir.fault must be the fault's message")
    return Checkpoint(path, data["scenario"], state, {str(k): v for k, v in rows.items()}, {str(k): v for k, v in digests.items()},
                      fault)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else ""


# ---------------------------------------------------------------------------------------------
# validation
def validate(ck: Checkpoint, fresh: SimState, scenario: Scenario, protocol: ServerProtocol) -> list[str]:
    """Every way ``ck``'s state does not fit a simulation of ``scenario`` whose initial state is
    ``fresh`` and whose built protocol is ``protocol`` (asked which clients a stored protocol
    state refers to and what it must satisfy): one line per problem, empty when it fits."""
    problems: list[str] = []
    _compare(ck.state, fresh, "state", problems, skip={"clients"})
    if problems:
        return problems[:10]
    s = ck.state
    server, run = scenario.server, scenario.run
    steps = s.version - 1
    n = scenario.population.clients

    def check(ok: bool, message: str) -> None:
        if not ok:
            problems.append(message)

    check(0 <= steps <= run.steps, f"state.version = {s.version}: the run has run.steps = {run.steps} steps")
    counts = s.records.by_staleness
    check(counts.steps == steps, f"state.records.by_staleness: {counts.steps} steps, but {steps} steps were taken")
    check(len(s.records.step_times) == steps, f"state.records.step_times: {len(s.records.step_times)} entries, but {steps} steps were taken")
    if scenario.privacy.enabled:
        check(len(s.records.private_by_staleness) == steps, f"state.records.private_by_staleness: {len(s.records.private_by_staleness)} entries for {steps} steps")
    inconsistent = counts.problem()
    bound = fresh.records.by_staleness.columns  # max_staleness + 1, or 1 (grows) when unbounded
    if inconsistent:
        problems.append(f"state.records.by_staleness: {inconsistent}")
    elif server.max_staleness is not None or not scenario.component("protocol").traits.stale:
        check(counts.columns == bound, f"state.records.by_staleness: {counts.columns} staleness columns, but the scenario gives {bound}")
    if not inconsistent:
        accepted = counts.total()
        check(accepted == s.counters.accepted, f"state.counters.accepted = {s.counters.accepted}, but the per-step counts add up to {accepted}")
    for name in ("accepted", "dropped_stale", "cancelled_late", "rejected_nonfinite", "rejected_norm", "dropped_offline", "dropped_unallotted", "dispatched"):
        check(getattr(s.counters, name) >= 0, f"state.counters.{name} = {getattr(s.counters, name)}: must be ≥ 0")
    declared = scenario.component("protocol").traits.drops
    for reason, count in s.counters.dropped_declared:
        check(reason in declared and reason != "stale" and isinstance(count, int) and count >= 0,
              f"state.counters.dropped_declared: {reason!r} = {count!r}, but the protocol declares the drop reasons "
              f"{', '.join(declared)} (each counted ≥ 0)")
    check(s.counters.dispatched == s.next_seq, f"state.next_seq = {s.next_seq}, but {s.counters.dispatched} clients were dispatched")
    check(s.rejected_since_step >= 0, f"state.rejected_since_step = {s.rejected_since_step}: must be ≥ 0")
    check(math.isfinite(s.now) and s.now >= 0, f"state.now = {s.now}: must be a finite time ≥ 0")

    seqs = {c.seq for c in s.clients}
    check(len(seqs) == len(s.clients), "state.clients: a dispatch number appears twice")
    check(set(s.in_flight) <= seqs, "state.in_flight: names clients the checkpoint does not hold")
    check(protocol.referred_seqs(s.protocol) <= seqs, "state.protocol: names clients the checkpoint does not hold")
    problems.extend(protocol.state_problems(s.protocol))
    key = scenario.component("protocol").traits.in_flight_key
    limit = getattr(server, key)
    check(len(s.in_flight) <= limit, f"state.in_flight: {len(s.in_flight)} clients, more than server.{key} = {limit}")
    shape, dtype = tuple(fresh.theta.shape), fresh.theta.dtype
    for c in s.clients:
        where = f"state.clients[seq {c.seq}]"
        check(0 <= c.client < n, f"{where}.client = {c.client}: population.clients = {n}")
        check(1 <= c.seq <= s.next_seq, f"{where}: dispatch number outside 1..{s.next_seq}")
        check(1 <= c.version <= s.version, f"{where}.version = {c.version}: the server is at version {s.version}")
        check(c.dispatch_time <= s.now and c.dispatch_time <= c.arrival_time, f"{where}: dispatched at {c.dispatch_time}, after now = {s.now} or after its arrival")
        tensors = list(_model_sized(c.job, "job"))
        if c.result is not None:
            tensors.append(("result", c.result))
        for name, t in tensors:
            ok = isinstance(t, torch.Tensor) and tuple(t.shape) == shape and t.dtype == dtype
            check(ok, f"{where}.{name}: {_describe(t)}, but the model is a {dtype} tensor of shape {shape}")
    busy = s.fleet.busy
    check(busy.shape == (n,) and busy.dtype == np.bool_, f"state.fleet.busy: {_describe(busy)}, but population.clients = {n}")
    check(set(s.streams) == set(rngmod.STREAMS), f"state.streams: {sorted(s.streams)}, expected {sorted(rngmod.STREAMS)}")
    problems.extend(_participation_problems(s, scenario, steps, protocol))
    problems.extend(_noise_problems(s, fresh))
    expected_rows = {"updates.csv": s.counters.rows, "metrics.csv": 1 + steps // run.eval_every}
    for name, want in expected_rows.items():
        got = ck.csv_rows.get(name)
        check(isinstance(got, int) and got == want, f"run_dir.csv_rows[{name!r}] = {got!r}, but the state accounts for {want} rows")
    return problems[:10]


def _noise_problems(s: SimState, fresh: SimState) -> list[str]:
    """The noise buffers (docs/privacy.md §12) have the shape and dtype of those of a fresh
    simulation of the scenario (none without privacy), and are finite."""
    want = fresh.noise
    if s.noise is None or want is None:
        if (s.noise is None) != (want is None):
            return [f"state.noise: {'missing' if s.noise is None else 'present'}, but the scenario's private aggregation "
                    f"{'keeps' if want is not None else 'keeps no'} noise buffers"]
        return []
    got = np.asarray(s.noise.buffers)
    if got.shape != want.buffers.shape or got.dtype != np.float64 or not np.all(np.isfinite(got)):
        return [f"state.noise.buffers: {_describe(got)}, expected finite float64 of shape {want.buffers.shape} "
                "(privacy.noise's strategy)"]
    return []


def _participation_problems(s: SimState, scenario: Scenario, steps: int, protocol: ServerProtocol) -> list[str]:
    """The participation ledger of a private run (docs/privacy.md §6), or of a run whose
    algorithm takes one upload per client (docs/async-optimisers.md §5), against the scenario and
    the rest of the state: one entry per client, no client over its cap, participations adding
    up to the accepted uploads, exactly the clients of the undecided dispatches pending, each
    client's last step consistent with its participations, and every undecided dispatch made at
    least ``privacy.min_separation`` steps after its client's last contribution."""
    p, n = scenario.privacy, scenario.population.clients
    led = s.participation
    if not one_upload_per_client(scenario):
        return [] if led is None else ["state.participation: a participation ledger, but neither privacy nor the algorithm "
                                       "needs one"]
    if led is None:
        return ["state.participation: missing; this run keeps participations per client (privacy, or an algorithm "
                f"that takes one upload per client: server.algorithm = {scenario.server.algorithm!r})"]
    problems: list[str] = []
    spent, pending, first, last = led.spent, led.pending, led.first_step, led.last_step
    if (spent.shape != (n,) or spent.dtype != np.int64 or pending.shape != (n,) or pending.dtype != np.bool_
            or last.shape != (n,) or last.dtype != np.int64):
        return [f"state.participation: spent {_describe(spent)}, pending {_describe(pending)}, last_step {_describe(last)}; "
                f"expected int64, bool and int64 of shape ({n},) (population.clients = {n})"]
    cap, sep = schema_of(p)  # the sampling assumption's (k, b)
    if spent.size and int(spent.min()) < 0:
        problems.append("state.participation.spent: negative participations")
    if cap is not None and spent.size and int(spent.max()) > cap:
        worst = int(np.argmax(spent))
        problems.append(f"state.participation.spent: client {worst} has {int(spent[worst])} participations, "
                        f"above privacy.max_participations = {cap}")
    if int(spent.sum()) != s.counters.accepted:
        problems.append(f"state.participation.spent: adds up to {int(spent.sum())}, but state.counters.accepted = {s.counters.accepted}")
    most = int(spent.max(initial=0))
    ordered = first.ndim == 1 and bool(np.all(np.diff(first) >= 0)) and bool(np.all((first >= 1) & (first <= steps)))
    if first.shape != (most,) or not ordered:
        problems.append(f"state.participation.first_step: {_describe(first)}, expected {most} non-decreasing steps in 1..{steps}")
    bad_last = np.flatnonzero(np.where(spent > 0, (last < 1) | (last > steps), last != 0))
    if bad_last.size:
        i = int(bad_last[0])
        problems.append(f"state.participation.last_step: client {i} has last step {int(last[i])} with {int(spent[i])} "
                        f"participations (0 without any, else a step in 1..{steps})")
    elif most and first.shape == (most,) and int(last.max()) < int(first[-1]):
        problems.append(f"state.participation.last_step: at most {int(last.max())}, but some client reached {most} "
                        f"participations at step {int(first[-1])}")
    undecided = set(s.in_flight) | protocol.undecided_seqs(s.protocol)
    for c in s.clients:
        if c.seq in undecided:
            if 0 <= c.client < n and spent[c.client] > 0 and c.version - int(last[c.client]) < sep:
                problems.append(f"state.participation.last_step: client {c.client} was dispatched at version {c.version}, "
                                f"{c.version - int(last[c.client])} steps after its contribution to step {int(last[c.client])}; "
                                f"privacy.min_separation = {sep}")
                break
    allot = allotment_of(p)
    if allot is not None:
        problems.extend(_allotment_problems(s, led, Allotment(n, *allot, scenario.seed), undecided, steps))
    by_seq = {c.seq: c.client for c in s.clients}
    want = sorted({by_seq[seq] for seq in undecided if seq in by_seq})
    if len(want) != len(undecided) or np.flatnonzero(pending).tolist() != want:
        problems.append(f"state.participation.pending: clients {np.flatnonzero(pending).tolist()[:10]}, but the undecided "
                        f"dispatches are of clients {want[:10]} (one each)")
    return problems


def _allotment_problems(s: SimState, led: ParticipationState, allotment: Allotment, undecided: set[int],
                        steps: int) -> list[str]:
    """Under random allocation (docs/privacy.md §13) the ledger and the undecided dispatches
    against the allotment the scenario's seed draws: every undecided dispatch was made for a step
    allotted to its client (the dispatcher sends a client only then, and its upload may join only
    that step), every client's last contribution was to a step allotted to it, and no client has
    more than ``k`` participations per window begun. The allotment is a function of the seed, not
    stored state, so a checkpoint that disagrees with it was altered or belongs to another seed."""
    k, t = allotment.selected, allotment.window
    keys = f"privacy.allotted_steps = {k} of every privacy.allotment_window = {t} steps, drawn from seed = {allotment.seed}"
    n = allotment.clients
    for c in sorted(s.clients, key=lambda c: c.seq):
        if c.seq in undecided and 0 <= c.client < n and c.version >= 1 and not allotment.allows(c.client, c.version):
            return [f"state.clients[seq {c.seq}]: client {c.client} has a pending dispatch for step {c.version}, which is "
                    f"not allotted to it ({keys}; its steps: {allotment.steps_of(c.client, max(steps + 1, c.version)).tolist()})"]
    spent, last = led.spent, led.last_step
    for step in np.unique(last[spent > 0]).tolist():  # out-of-range steps are reported by the caller
        if not 1 <= step <= steps:
            continue
        off = np.flatnonzero((last == step) & (spent > 0) & ~allotment.mask(int(step)))
        if off.size:
            return [f"state.participation.last_step: client {int(off[0])} last contributed to step {int(step)}, which is not "
                    f"allotted to it ({keys})"]
    most = k * -(-steps // t)
    if spent.size and int(spent.max()) > most:
        worst = int(np.argmax(spent))
        return [f"state.participation.spent: client {worst} has {int(spent[worst])} participations in {steps} steps, more "
                f"than the {most} its allotment allows ({keys})"]
    return []


def _model_sized(job: Any, path: str) -> Any:
    """``(path, tensor)`` of every tensor a job holds, in its fields and their dicts (a job of any
    algorithm: ``LocalJob``'s start and centre, a splitting baseline's received model and memory);
    each must be model-sized."""
    for f in dataclasses.fields(job):
        value = getattr(job, f.name)
        if isinstance(value, torch.Tensor):
            yield f"{path}.{f.name}", value
        elif isinstance(value, dict):
            yield from ((f"{path}.{f.name}.{k}", v) for k, v in value.items())


def _describe(value: Any) -> str:
    if isinstance(value, (torch.Tensor, np.ndarray)):
        return f"{value.dtype} of shape {tuple(value.shape)}"
    return type(value).__name__


def _compare(got: Any, want: Any, path: str, problems: list[str], skip: set[str] = frozenset()) -> None:  # type: ignore[assignment]
    """Same types, keys and dtypes as ``want`` (a fresh state); same shapes except along
    dimensions that are empty in ``want``; containers that are empty in ``want`` are free."""
    if isinstance(want, torch.Tensor) or isinstance(want, np.ndarray):
        kind = torch.Tensor if isinstance(want, torch.Tensor) else np.ndarray
        if not isinstance(got, kind):
            problems.append(f"{path}: {_describe(got)}, expected a {want.dtype} array of shape {tuple(want.shape)}")
            return
        growable = all(w == g or w == 0 for w, g in zip(want.shape, got.shape))
        if got.dtype != want.dtype or got.ndim != want.ndim or not growable:
            problems.append(f"{path}: {_describe(got)}, but this scenario's is {_describe(want)}")
        return
    if type(got) is not type(want) and not (isinstance(want, (int, float)) and isinstance(got, (int, float)) and not isinstance(got, bool)):
        if want is None or got is None:
            return  # optional values (a result not yet known, an unset time)
        problems.append(f"{path}: a {type(got).__name__}, but this scenario's is a {type(want).__name__}")
        return
    if type(want).__name__ in state_types():
        for f in _fields(type(want)):
            if f not in skip:
                _compare(getattr(got, f), getattr(want, f), f"{path}.{f}", problems)
    elif isinstance(want, dict):
        if path.endswith(".streams") or path.endswith(".last_metrics"):
            return
        if set(got) != set(want):
            problems.append(f"{path}: keys {sorted(got)}, but this scenario's are {sorted(want)}")
            return
        for k in want:
            _compare(got[k], want[k], f"{path}.{k}", problems)
    elif isinstance(want, (tuple, list)) and want:
        for i, item in enumerate(got):
            _compare(item, want[min(i, len(want) - 1)], f"{path}[{i}]", problems)


def file_problems(ck: Checkpoint, digests: Mapping[str, str]) -> list[str]:
    """Whether each CSV file's first ``csv_rows`` rows are the ones the checkpoint saw:
    ``digests[name]`` is the SHA-256 of the file's header and first ``csv_rows[name]`` rows
    (:func:`asyncfl.run.rundir.csv_prefix`)."""
    problems = []
    for name, digest in digests.items():
        rows = ck.csv_rows.get(name)
        if not isinstance(rows, int) or rows < 0:
            problems.append(f"{ck.path}: csv_rows[{name!r}] = {rows!r} is not a row count")
            continue
        if digest != ck.csv_sha256.get(name):
            problems.append(f"{name}: its first {rows} rows are not the ones the checkpoint saw (the file was edited or damaged)")
    return problems
