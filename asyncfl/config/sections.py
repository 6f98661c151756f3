"""The base sections of a scenario (docs/scenario.md §1): ``[population]``, ``[client]``,
``[server]``, ``[run]`` and ``[privacy]``, each before the components it names add their keys.

A floor below the components (docs/architecture.md §3): the implementations type their settings
with these classes, the components declare their own keys beside them, and the composed
scenario (:mod:`asyncfl.config.scenario`) is built above both. Torch-free.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Protocol

from pydantic import Field, PlainValidator, field_validator

from asyncfl.config.base import NonNegFloat, PosFloat, PosInt, Probability, Section
from asyncfl.config.stop import StopConfig


# ---------------------------------------------------------------------------------------------
# [population]
class PopulationConfig(Section):
    """``clients`` (N); per-client speed multiplier ~ LogNormal(0, ``speed_sigma``), times
    ``slow_factor`` for ``round(slow_fraction × N)`` uniformly chosen clients (a bimodal fleet);
    ``availability`` names the availability model (a component: ``always``, ``diurnal``,
    ``trace``, or a plug-in's), whose own keys join this section (docs/protocol.md §5)."""

    clients: Annotated[int, Field(ge=1, le=10**8)] = 100
    speed_sigma: Annotated[float, Field(ge=0, le=10)] = 0.0
    slow_fraction: Probability = 0.0
    slow_factor: Annotated[float, Field(ge=1, le=1e6)] = 1.0
    availability: str = "always"


# ---------------------------------------------------------------------------------------------
# [client]
class ClientConfig(Section):
    """Local training. ``solver`` names the local solver (a component: ``sgd``, ``adam``,
    ``exact``, or a plug-in's), whose own keys join this section. Local work is ``local_steps``
    gradient steps or ``epochs`` passes (one of them); ``batch_size`` absent = full batch; ``mu``
    adds (μ/2)‖θ − centre‖² (FedProx etc.)."""

    solver: str = "sgd"
    update_hook: str = "none"  # what a client does to its upload (a component: docs/extending.md §7)
    lr: PosFloat = 0.05
    batch_size: Annotated[int, Field(ge=1, le=10**7)] | None = None
    # bounded by what a job can finish (and, with run.steps, by MAX_LOCAL_STEPS in a run)
    local_steps: Annotated[int, Field(ge=1, le=10**6)] | None = None
    epochs: Annotated[int, Field(ge=1, le=10**4)] | None = None
    mu: NonNegFloat = 0.0


# ---------------------------------------------------------------------------------------------
# [server]
class ServerConfig(Section):
    """The keys of every server (docs/protocol.md §7, docs/server-rules.md, docs/baselines.md).

    ``protocol``, ``rule`` and ``algorithm`` name components; each one's own keys join this
    section (FedBuff's ``concurrency``, sync's ``cohort``, the momentum rules' ``beta``, …:
    :mod:`asyncfl.config.server`). ``buffer`` C (C = 1 is FedAsync; for sync, C ≤ cohort accepts
    the first C arrivals); ``max_staleness`` absent = unbounded; ``lr`` is the server's η.
    """

    protocol: str = "fedbuff"
    rule: str = "sgd"
    algorithm: str = "fedavg"
    lr: PosFloat = 1.0
    buffer: Annotated[int, Field(ge=1, le=10**8)] | None = None
    staleness_exponent: Annotated[float, Field(ge=0, le=100)] = 0.0
    # the per-step staleness records have max_staleness + 1 columns (counted in the memory estimate)
    max_staleness: Annotated[int, Field(ge=0, le=10**9)] | None = None


# ---------------------------------------------------------------------------------------------
# [run]
#: run.device's values (asyncfl.compute.device resolves them against the machine)
DEVICE_NAME = re.compile(r"cpu|cuda(:\d{1,3})?|mps|auto")
DEVICE_NAMES = '"cpu", "cuda", "cuda:N", "mps", "auto"'


def _batched(value: Any) -> bool | Literal["auto"]:
    """``run.batched``: true, false or "auto" (one message for any other value)."""
    if isinstance(value, bool) or value == "auto":
        return value
    raise ValueError('must be true, false or "auto"')


Batched = Annotated[bool | Literal["auto"], PlainValidator(_batched)]

#: run.precision's values (asyncfl.compute.precision): fp32, or bf16 autocast in local training
PRECISIONS = ("fp32", "bf16")


def _precision(value: Any) -> str:
    """``run.precision``: "fp32" or "bf16" (one message for any other value)."""
    if isinstance(value, str) and value in PRECISIONS:
        return value
    raise ValueError('must be "fp32" or "bf16"')


Precision = Annotated[Literal["fp32", "bf16"], PlainValidator(_precision)]


class RunConfig(Section):
    """Length, evaluation, placement of compute, checkpoints and numerical guards."""

    steps: Annotated[int, Field(ge=1, le=10**9)] = 100
    eval_every: Annotated[int, Field(ge=1, le=10**9)] = 10
    # also evaluate the training objective over every client's data (one forward pass over the
    # whole population's samples per evaluation); off: metrics.csv leaves train_loss empty
    train_loss: bool = True
    executor: str = "inline"  # a component (docs/architecture.md §4)
    workers: Annotated[int, Field(ge=1, le=4096)] = 1
    # train clients of one model version together (torch.func.vmap): true, false, or "auto" —
    # batched where the executor, the solver and the task allow it with the same bits as job by job
    # (asyncfl.config.batching.choose_batched)
    batched: Batched = "auto"
    # where the model, the data, training and the server compute (asyncfl.compute.device):
    # "cpu", "cuda", "cuda:N", "mps" or "auto" (cuda, else mps, else cpu); docs/guide.md §7
    device: str = "cpu"
    # the arithmetic of local training (asyncfl.compute.precision): "fp32", or "bf16" — bf16
    # autocast around the client solver's training, parameters and server in fp32; docs/guide.md §7
    precision: Precision = "fp32"
    ray_address: str | None = None
    # torch intra-op threads. Client models are small: one thread per job is fastest, and
    # parallelism across clients comes from the executor. 0 = leave torch's default.
    torch_threads: Annotated[int, Field(ge=0, le=4096)] = 1
    checkpoint_every: Annotated[int, Field(ge=0, le=10**9)] = 0  # 0 = no periodic checkpoints
    max_update_norm: PosFloat | None = None
    # divergence guards (docs/architecture.md §8): an evaluated test loss that is NaN/Inf, above
    # divergence_loss, or above divergence_factor × the loss of the initial model stops the run
    divergence_loss: PosFloat = 1e8
    divergence_factor: Annotated[float, Field(gt=1, le=1e12)] = 1e5
    # also log the evaluations to RUN_DIR/tensorboard (optional package: asyncfl[tensorboard])
    tensorboard: bool = False
    # end the run before run.steps: a metric's target, an ε, virtual-time or wall-clock budget
    stop: StopConfig | None = None
    # experiment trackers to log to (docs/run-directory.md §15) and their own keys, by name
    trackers: Annotated[list[Annotated[str, Field(min_length=1, max_length=300)]], Field(max_length=16)] | None = None
    tracker: dict[str, dict[str, Any]] | None = None

    @field_validator("device")
    @classmethod
    def _device_name(cls, value: str) -> str:
        if not DEVICE_NAME.fullmatch(value):
            raise ValueError(f"not a device; allowed: {DEVICE_NAMES}")
        return value


# ---------------------------------------------------------------------------------------------
# [privacy]
class PrivacyConfig(Section):
    """Private aggregation (docs/privacy.md). Give ``epsilon`` (σ is calibrated) or
    ``noise_multiplier`` (σ directly, ε is reported); give ``xi`` (> σ) or ``gamma``.
    ``sampling``, ``accountant``, ``counts`` and ``noise`` name components, whose own keys join
    this section (:mod:`asyncfl.config.privacy`).

    ``sampling`` is what the reported ε rests on: ``"poisson"`` (default; every step accounted as
    Poisson subsampling at ``q = M/N``: an approximation, FedBuff does not Poisson-sample, §5) or
    ``"participation-cap"`` (the engine lets no client contribute to more than
    ``max_participations`` = k server steps, nor to two steps fewer than ``min_separation`` = b
    apart, and ε is that of k Gaussian releases without amplification: a guarantee for any
    dispatch order, §6). ``noise`` is the mechanism's noise across steps: ``"iid"`` (default,
    §1), or correlated by a ``"banded"`` or ``"blt"`` strategy (§12, with a participation cap).
    ``noise_cohort`` = M ≥ C (default C) simulates the noise of a deployment whose buffer sums M
    uploads: the noise is scaled by C/M and the accounting is the deployment's (§7).
    ``client_budget`` = ε_max: a client whose next participation would take its realised ε (§11)
    above it is not dispatched again (a privacy filter, §14)."""

    enabled: bool = False
    clip: PosFloat = 1.0
    epsilon: PosFloat | None = None
    delta: Annotated[float, Field(gt=0, lt=1)] = 1e-6
    noise_multiplier: NonNegFloat | None = None  # 0: clip only (no noise, ε = ∞; docs/privacy.md §4)
    xi: PosFloat | None = None
    gamma: PosFloat | None = None
    sampling: str = "poisson"
    noise_cohort: PosInt | None = None  # M ≥ server.buffer; None: M = C
    accountant: str = "pld"
    counts: str = "project"
    noise: str = "iid"
    client_budget: PosFloat | None = None  # ε_max per client: a privacy filter (docs/privacy.md §14)


class ScenarioView(Protocol):
    """What a component's ``check`` and a protocol's ``resolve`` read of the validated scenario:
    its sections and the components it names. :class:`asyncfl.config.scenario.Scenario`, a floor
    above, is one; code on this floor and the components' declarations type against this view, so
    no import points up (docs/architecture.md §3)."""

    name: str
    seed: int
    population: Any
    latency: Any
    task: Any
    client: Any
    server: Any
    run: Any
    privacy: Any

    def component(self, kind: str) -> Any: ...

    def config_of(self, kind: str) -> Any: ...
