"""The one builder shape and what each kind of component builds (docs/extending.md §2).

Every component's builder is ``build(cfg, ctx) -> product``: ``cfg`` is the component's own
config (an instance of its config class, or None when it owns no keys) and ``ctx`` a small frozen
context (:class:`BuildContext`, or a kind's own extension of it, named by the kind). What the
builder returns is the kind's *product*, a public :class:`typing.Protocol` declared here, so a
reader and a type checker see the contract (``ServerRule``, ``Algorithm``, ``ServerProtocol``, …).

:func:`check_builder` is pluggy's registration-time check: a builder whose signature cannot take
``(cfg, ctx)`` is refused with a message naming the kind's contract, instead of a ``TypeError``
deep inside a run. Torch-free: products are described by protocols only.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np


@dataclass(frozen=True)
class BuildContext:
    """What every builder is told of the run besides its own config: the number of clients, the
    seed, ``run.steps``, the protocol's buffer ``C`` and in-flight bound, whether uploads may be
    stale, the built task (None while the task itself is built) and the run's named random streams.

    :meth:`stream` hands a component its own stream: the engine's named streams for the built-ins
    (``"latency"``, ``"availability"``, …) and, for any other name (a plug-in's), a stream derived
    from the seed and that name alone, so a plug-in's draws never shift anyone else's."""

    clients: int
    seed: int
    steps: int = 0
    buffer: int = 0
    in_flight: int = 0
    stale: bool = True
    max_staleness: int | None = None
    task: Any = None
    streams: Mapping[str, np.random.Generator] = field(default_factory=dict, compare=False)

    def stream(self, name: str) -> np.random.Generator:
        """The random stream ``name``: one of the run's streams, else one derived from
        ``(seed, name)`` (the same generator for the same name, docs/architecture.md §2)."""
        found = self.streams.get(name)
        if found is not None:
            return found
        words = [int(b) for b in name.encode("utf-8")]
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence([self.seed, 0x5A17, *words])))

    def with_(self, **changes: Any) -> "BuildContext":
        """A copy with ``changes`` (the task, once built)."""
        return replace(self, **changes)


# -- the products: what each kind's builder returns -------------------------------------------------
@runtime_checkable
class Task(Protocol):
    """A federated learning problem (``asyncfl.tasks.base.Task``; docs/tasks.md)."""

    num_clients: int
    dim: int

    def evaluate(self, theta: Any) -> dict[str, float]: ...


@runtime_checkable
class LatencyModel(Protocol):
    """Latency of a job (docs/protocol.md §4), by the kind's ``LatencyTraits.mode``: ``"draw"`` —
    a callable ``rng -> float`` (times the client's speed); ``"profiles"`` — an array of one fixed
    job latency per client (from ``ctx.task``); ``"replay"`` — a whole ``Fleet`` replaying a trace."""


@runtime_checkable
class AvailabilityModel(Protocol):
    """An availability schedule (``asyncfl.clients.availability.Schedule``), or None: always online."""

    def online(self, k: int, x: float) -> bool: ...

    def offline_time(self, k: int, x: float) -> float: ...

    def next_online(self, k: int, x: float) -> float: ...


@runtime_checkable
class ServerProtocol(Protocol):
    """Who is dispatched when, what an arrival does and when the server steps (docs/protocol.md
    §8). Built without the engine; :meth:`attach` hands it the ``Host`` it drives. Its state is
    data (:meth:`state`, :meth:`restore`); :meth:`referred_seqs`, :meth:`undecided_seqs` and
    :meth:`state_problems` answer checkpoint validation from a stored state alone; :meth:`ready`
    only answers (no side effect): :meth:`stepped` is told when the step is taken."""

    def attach(self, host: Any) -> None: ...

    def start(self) -> None: ...

    def on_arrival(self, rec: Any) -> None: ...

    def on_offline(self, rec: Any) -> None: ...

    def consumed(self, entries: list, accepted: list) -> None: ...

    def ready(self, accepted: list) -> bool: ...

    def stepped(self) -> None: ...

    def state(self) -> Any: ...

    def restore(self, state: Any, records: Mapping[int, Any]) -> None: ...

    def referred(self) -> Sequence[Any]: ...

    def referred_seqs(self, state: Any) -> set[int]: ...

    def undecided_seqs(self, state: Any) -> set[int]: ...

    def state_problems(self, state: Any) -> list[str]: ...


@runtime_checkable
class Algorithm(Protocol):
    """A server algorithm (``asyncfl.server.algorithms.Algorithm``; docs/baselines.md)."""

    def init(self, theta: Any) -> Any: ...

    def make_job(self, client: int, theta: Any, seed: int, state: Any) -> Any: ...

    def client_messages(self, jobs: Sequence[Any], locals_: Sequence[Any], state: Any) -> Any: ...

    def server_update(self, theta: Any, step: int, updates: Sequence[Any], state: Any, streams: Any) -> Any: ...

    def summary(self, state: Any) -> dict[str, Any]: ...


@runtime_checkable
class ServerRule(Protocol):
    """A server rule (``asyncfl.server.rules.ServerRule``; docs/server-rules.md): ``init(θ) ->
    state``, ``direction(aggregate, state) -> RuleOutput``; the state is a value."""

    def init(self, theta: Any) -> Any: ...

    def direction(self, aggregate: Any, state: Any) -> Any: ...


@runtime_checkable
class LocalSolver(Protocol):
    """A client's local solver (docs/tasks.md §8)."""

    def train(self, task: Any, cfg: Any, job: Any) -> Any: ...

    def train_batched(self, task: Any, cfg: Any, jobs: Sequence[Any]) -> list[Any]: ...


@runtime_checkable
class UpdateHook(Protocol):
    """What clients do to their uploads (docs/extending.md §7): ``apply(jobs, messages)``."""

    def apply(self, jobs: Sequence[Any], messages: Any) -> Any: ...


@runtime_checkable
class Executor(Protocol):
    """Where local training runs (docs/architecture.md §2)."""

    def submit(self, job: Any) -> Any: ...

    async def aclose(self) -> None: ...


@runtime_checkable
class SamplingAssumption(Protocol):
    """What a privacy guarantee assumes of participation (docs/privacy.md §5–6)."""

    def releases(self, shape: Any) -> Any: ...

    def cap(self, shape: Any) -> int | None: ...


@runtime_checkable
class Accountant(Protocol):
    """``epsilon(releases, sigma, delta) -> float`` (docs/privacy.md §4)."""

    def __call__(self, releases: Any, sigma: float, delta: float) -> float: ...


@runtime_checkable
class CountsPostprocessor(Protocol):
    """``postprocess(counts, C) -> ndarray`` (``CountsTraits.exact``: ``(counts, C, exact)``;
    docs/privacy.md §3)."""

    def __call__(self, counts: Any, C: float, *exact: Any) -> Any: ...


@runtime_checkable
class NoiseMechanism(Protocol):
    """A noise strategy (``asyncfl.privacy.factorization.Strategy``; docs/privacy.md §12)."""


@runtime_checkable
class Tracker(Protocol):
    """An experiment tracker (docs/run-directory.md §15): told when the run starts (``start``
    returns its run id, reopened on resume), given each evaluation's values against the server
    step (``log``; ``on_event`` sees the whole event), asked the last step it holds, given the
    run's files as artefacts and its status at the end; a sweep's parent run is
    ``open_parent``/``close_parent``. ``asyncfl.Tracker`` implements every method as a no-op:
    subclass it and override what you log."""

    def start(self, start: Any) -> str | None: ...

    def log(self, step: int, values: dict[str, float]) -> None: ...

    def on_event(self, sim: Any, event: Any) -> None: ...

    def last_step(self) -> int | None: ...

    def artefact(self, path: Any) -> None: ...

    def finish(self, status: str) -> None: ...

    def open_parent(self, name: str, params: dict[str, Any]) -> dict[str, Any] | None: ...

    def close_parent(self, parent: dict[str, Any]) -> None: ...


def returns(product: Any) -> Callable[[Any, Any], Any]:
    """The builder of a product that needs neither config nor context (a stateless solver, an
    accountant function): ``build(cfg, ctx) -> product``."""
    def build(cfg: Any, ctx: Any) -> Any:
        return product
    build.__qualname__ = f"returns({getattr(product, '__qualname__', type(product).__name__)})"
    return build


# -- the registration-time check (pluggy's, for builders) -----------------------------------------
def signature_problem(builder: Callable[..., Any]) -> str | None:
    """Why ``builder`` is not a ``build(cfg, ctx)`` (None: it is). As pluggy checks a hook
    implementation's argument names against its spec, the builder must take two positional
    arguments named ``cfg`` and ``ctx`` (or ``*args``) and require no other: an old
    ``draw(cfg, rng)`` or ``build(cfg, num_clients, seed)`` is refused, not called wrongly."""
    if not callable(builder):
        return f"{builder!r} is not callable"
    try:
        sig = inspect.signature(builder)
    except (TypeError, ValueError):  # a builtin without a signature: trust it
        return None
    try:
        sig.bind(None, None)
    except TypeError as exc:
        return f"{_name(builder)}{sig} cannot be called as build(cfg, ctx) ({exc})"
    params = list(sig.parameters.values())
    if any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in params[:2]):
        return None
    names = tuple(p.name for p in params[:2])
    if names != ("cfg", "ctx"):
        return f"{_name(builder)}{sig} takes ({', '.join(names)}), not (cfg, ctx)"
    return None


def _name(builder: Any) -> str:
    return getattr(builder, "__qualname__", None) or type(builder).__name__
