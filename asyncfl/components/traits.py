"""What the rest of asyncfl may ask a component, kind by kind (docs/extending.md §2).

A component declares its traits once, next to its name and config (:class:`asyncfl.components.Component`);
code outside the component asks these traits and never compares the component's name. Every
trait has a default, so a user's component declares only what differs. Torch-free: a trait is
plain data or a function of the component's own (torch-free) config.

The memory traits return :class:`MemoryPart` entries, which :mod:`asyncfl.config.memory` adds to
the estimate of a scenario (docs/architecture.md §8).
"""

from __future__ import annotations

from dataclasses import dataclass
import re
from typing import Any, Callable, Literal, Mapping

from asyncfl.config.sections import ScenarioView as Scenario  # the composed scenario is a floor above


@dataclass(frozen=True)
class MemoryPart:
    """Bytes a component adds to a run's memory: what they hold, and the keys that drive them."""

    what: str
    bytes: int
    keys: tuple[str, ...]
    record: bool = False  # a per-step record (counted toward the estimate's records warning)


@dataclass(frozen=True)
class MemoryShape:
    """What a component's memory trait is told: the model's size ``d`` and bytes per entry, the
    number of clients, server steps and clients in flight."""

    params: int
    itemsize: int
    clients: int
    steps: int
    in_flight: int

    @property
    def vector(self) -> int:
        """Bytes of one model-sized vector."""
        return self.params * self.itemsize


_REASON = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")

NoMemory: Callable[[Any, MemoryShape], tuple[MemoryPart, ...]] = lambda cfg, shape: ()  # noqa: E731


@dataclass(frozen=True)
class Traits:
    """Base of every kind's traits: cross-checks of the component against the whole scenario
    (``check(scenario) -> [problem, …]``, each naming the keys involved, docs/scenario.md §3), and
    its memory beyond what the engine counts (``memory(cfg, shape) -> (MemoryPart, …)``).

    ``links`` and ``combine`` make a component a composite, such as the rule ``chain``
    (docs/server-rules.md §10): ``links`` names the key of its config that lists other components
    of its kind (``server.chain = ["clip", "momentum"]``), whose keys then join the section;
    ``combine(links) -> traits`` derives the composite's traits from those components."""

    check: Callable[["Scenario"], list[str]] | None = None
    memory: Callable[[Any, MemoryShape], tuple[MemoryPart, ...]] = NoMemory
    # a composite (docs/extending.md §1): the key of its own config that lists components of its
    # own kind, its links, whose keys join the section as if each were named; ``combine(links)``
    # gives the composite's traits from its links (each an asyncfl.Component)
    links: str | None = None
    combine: Callable[[tuple[Any, ...]], "Traits"] | None = None


@dataclass(frozen=True)
class TaskTraits(Traits):
    """``closed_form_prox``: the task offers ``prox_{f_k,μ}`` in closed form (``Task.quadratic``),
    so a solver that needs it (``exact``) may run on it; ``batched_exact``: its batched training
    gives the same bits as job by job, so ``run.batched = "auto"`` may batch it
    (:func:`asyncfl.config.batching.choose_batched`)."""

    closed_form_prox: bool = False
    batched_exact: bool = False


@dataclass(frozen=True)
class LatencyTraits(Traits):
    """How the fleet uses the model: ``"draw"`` — the builder is ``draw(cfg, rng) -> float``,
    times the client's speed, per job; ``"client"`` — the builder is ``draw(cfg, rng, client) ->
    float``, the job's latency itself, given the client's static profile
    (:class:`asyncfl.clients.profiles.ClientProfile`: index, speed, samples); ``"profiles"`` — the builder gives every client a fixed
    job latency from the task (``build(scenario, task) -> array``, one per client); ``"replay"`` — the
    builder is a whole fleet replaying a recording (``build(scenario, streams) -> Fleet``).
    ``speeds_from``: what the speeds come from when not the population's speed model (then
    ``population.speed_sigma`` and ``slow_fraction`` must be 0)."""

    mode: Literal["draw", "client", "profiles", "replay"] = "draw"
    speeds_from: str | None = None


@dataclass(frozen=True)
class AvailabilityTraits(Traits):
    """``sees_clients``: the builder gets every client's static profile
    (:class:`asyncfl.clients.profiles.ClientProfiles`) where it otherwise gets their number:
    ``build(cfg, profiles, rng, seconds_per_unit) -> Schedule | None``."""

    sees_clients: bool = False


#: ``updates.csv`` reasons the engine itself gives (a protocol may not declare them)
ENGINE_REASONS = ("offline", "late", "non-finite", "norm")


@dataclass(frozen=True)
class ProtocolTraits(Traits):
    """``in_flight_key``: the ``[server]`` key counting the clients a step waits on (FedBuff's
    ``concurrency`` K, sync's ``cohort``); ``stale``: uploads can be stale (the staleness records
    have ``max_staleness + 1`` columns), else every accepted upload has ``τ = 0``; ``resolve``:
    the derived defaults of its keys (``buffer``, ``concurrency``, …) from the scenario, a mapping
    of ``[server]`` keys (checked: ``buffer`` and ``in_flight_key`` must end up positive
    integers); ``drops``: the reasons it may drop an arrived upload for (``Host.drop``), each with
    its own counter (``updates_dropped_<reason>`` in the summary) and ``updates.csv`` reason —
    lower-case words joined by ``-``, none of the engine's own (:data:`ENGINE_REASONS`);
    ``not_poisson``: why the protocol's choice of clients is not a Poisson sample of the
    population, which the Poisson sampling assumption's statement quotes (docs/privacy.md §5)."""

    in_flight_key: str = "concurrency"
    stale: bool = True
    resolve: Callable[["Scenario"], Mapping[str, Any]] | None = None
    drops: tuple[str, ...] = ("stale",)
    not_poisson: str = "the protocol does not declare how it chooses its clients"

    def __post_init__(self) -> None:
        for reason in self.drops:
            if not isinstance(reason, str) or not _REASON.fullmatch(reason) or reason in ENGINE_REASONS:
                raise ValueError(f"ProtocolTraits.drops: {reason!r} is not a drop reason a protocol may declare "
                                 f"(lower-case words joined by '-', none of {', '.join(ENGINE_REASONS)})")
        if len(set(self.drops)) != len(self.drops):
            raise ValueError(f"ProtocolTraits.drops: {self.drops!r} names a reason twice")


@dataclass(frozen=True)
class AlgorithmTraits(Traits):
    """``protocols``: the protocols it runs on (None: every one); ``uses_rule``: its server step
    goes through ``server.rule`` (a pseudo-gradient), so the rule's bias applies; ``mu``: what it
    needs of ``client.mu`` (``"zero"``, ``"positive"`` or ``"any"``); ``private``: its uploads go
    through the aggregator, so private aggregation applies (docs/privacy.md §6);
    ``one_upload_per_client``: its clients keep memory that the server step writes, so on a
    protocol with stale uploads a client is not dispatched again while its upload waits in the
    buffer (the participation ledger of docs/privacy.md §6; docs/async-optimisers.md §5), and
    ``server.buffer`` must not exceed ``population.clients``."""

    protocols: tuple[str, ...] | None = None
    uses_rule: bool = True
    mu: Literal["zero", "positive", "any"] = "any"
    private: bool = True
    one_upload_per_client: bool = False


@dataclass(frozen=True)
class RuleTraits(Traits):
    """``own_bias``: which row of ``bias.json`` measures this rule's implicit momentum bias
    (``"none"``: it targets ``M = I``; ``"momentum"``, ``"ma_full"``, ``"ma_light"``; None: the rule
    is not linear in the aggregates, so it has no target ``M``; docs/server-rules.md §7);
    ``target``: the kind of momentum its bias is measured against when its config has no
    ``ma_target`` (``"momentum"``: heavy ball; ``"nesterov"``); ``coefficients``: the rule records
    history weights per step (MA), ``"full"`` (a row of length ``t``), ``"pair"`` (``(u_t, v_t)``)
    or None."""

    own_bias: str | None = "none"
    target: Literal["momentum", "nesterov"] = "momentum"
    coefficients: Literal["full", "pair"] | None = None


@dataclass(frozen=True)
class SolverTraits(Traits):
    """``needs_closed_form``: runs only on a task with ``closed_form_prox``; ``local_work``: its
    work is ``client.local_steps`` or ``client.epochs`` (exactly one must be given); ``batched``:
    it can train the jobs of one model version together (``run.batched``)."""

    needs_closed_form: bool = False
    local_work: bool = True
    batched: bool = True


@dataclass(frozen=True)
class ExecutorTraits(Traits):
    """``batched``: it can run ``run.batched`` groups; ``task_per_worker``: each of its
    ``run.workers`` workers builds its own copy of the task; ``model_per_worker``: each worker
    holds a model-sized vector in this process (threads) (both: memory)."""

    batched: bool = False
    task_per_worker: bool = False
    model_per_worker: bool = False


@dataclass(frozen=True)
class SamplingTraits(Traits):
    """``schema``: the participation schema the engine enforces for this assumption, as a function
    of its own config, ``schema(cfg) -> (k, b)``: at most k contributions per client, any two at
    least b server steps apart (None: no schema — no cap, b = 1). A correlated-noise mechanism's
    sensitivity needs one (docs/privacy.md §6, §12)."""

    schema: Callable[[Any], tuple[int | None, int]] | None = None
    #: ``allotment(cfg) -> (k, t)``: the engine dispatches each client only for the k steps of every
    #: window of t allotted to it (random allocation, docs/privacy.md §13); None: no allotment
    allotment: Callable[[Any], tuple[int, int]] | None = None


@dataclass(frozen=True)
class NoiseTraits(Traits):
    """``correlated``: the mechanism's noise is correlated across steps (a strategy ``C`` other
    than the identity), so σ is calibrated for the whole run as one Gaussian release of ``C X``
    with the strategy's sensitivity under the sampling assumption's schema; False: i.i.d. noise,
    σ calibrated for the sampling assumption's releases (docs/privacy.md §12)."""

    correlated: bool = False


@dataclass(frozen=True)
class CountsTraits(Traits):
    """``exact``: the mode also reads the step's exact staleness counts, ``postprocess(ĉ, C,
    exact)`` — an analysis oracle, not a private mode: no built-in declares it, and a run whose
    mode does is reported as not private (docs/privacy.md §3, "Oracle counts")."""

    exact: bool = False


@dataclass(frozen=True)
class TrackerTraits(Traits):
    """``rewrites_on_resume``: the tracker itself drops what a killed run logged after its last
    checkpoint (TensorBoard rewrites its event files), so a resumed run logs every evaluation
    after the checkpoint again; otherwise it skips those the tracker already holds
    (docs/run-directory.md §15)."""

    rewrites_on_resume: bool = False


@dataclass(frozen=True)
class PlainTraits(Traits):
    """Kinds whose components have nothing to declare beyond the base (accountants, update
    hooks)."""
