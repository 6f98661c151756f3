"""The ``[server]`` keys each protocol, server rule and algorithm owns (docs/scenario.md §1).

``[server]`` holds the keys every run has (``protocol``, ``rule``, ``algorithm``, ``lr``,
``buffer``, ``staleness_exponent``, ``max_staleness``: :class:`asyncfl.config.scenario.ServerConfig`)
and the keys of the components it names, each declared by its component here: FedBuff's
``concurrency``, sync's ``cohort``, the momentum rules' ``beta``, Adam's moments, MA's target,
ridge and window, the delay-adaptive rules' threshold and κ, FADAS's moments, the clip's τ, the
chain's links, FedDR's ``alpha``,
regulariser, diagnostics and schedule, FedPD's skip probability. A key of a
component the scenario does not name is refused (``server.adam_eps`` with ``rule = "sgd"``).
Torch-free.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator, model_validator

from asyncfl.config.base import NonNegFloat, PosFloat, Section

Count = Annotated[int, Field(ge=1, le=10**8)]  # counts of clients: at most population.clients (10^8)
Beta = Annotated[float, Field(ge=0, lt=1)]


# -- protocols (docs/protocol.md) -----------------------------------------------------------------
class FedBuffConfig(Section):
    """``concurrency`` K: clients training at once (default min(N, 10)); the buffer C defaults
    to min(K, 10)."""

    concurrency: Count | None = None


class SyncConfig(Section):
    """``cohort``: clients sampled per round (default min(N, 10)); the buffer C ≤ cohort accepts
    the first C arrivals of an over-selected cohort (default: the whole cohort)."""

    cohort: Count | None = None


# -- server rules (docs/server-rules.md) ------------------------------------------------------------
class MomentumConfig(Section):
    """Heavy ball and Nesterov: ``beta`` = β."""

    beta: Beta = 0.9


class AdamConfig(Section):
    """Adam: ``beta`` = β₁, ``adam_beta2`` = β₂, ``adam_eps`` = ε."""

    beta: Beta = 0.9
    adam_beta2: Beta = 0.999
    adam_eps: PosFloat = 1e-8


class MALightConfig(Section):
    """MA-light: the target's β and kind (``ma_target``)."""

    beta: Beta = 0.9
    ma_target: Literal["momentum", "nesterov"] = "momentum"


class MAFullConfig(MALightConfig):
    """MA-full: also the ridge λ of its least squares and the history window L (absent: all)."""

    ma_ridge: NonNegFloat = 1e-3
    ma_window: Annotated[int, Field(ge=1, le=10**9)] | None = None


class DelayScaleConfig(Section):
    """The delay-adaptive step (docs/async-optimisers.md §2): a server step whose buffer's largest
    staleness ``τ_max`` exceeds ``delay_threshold`` (``τ_c``) has its step multiplied by
    ``min(1, delay_kappa / τ_max)``; steps with ``τ_max ≤ τ_c`` are unchanged."""

    delay_threshold: Annotated[int, Field(ge=0, le=10**9)] = 1
    delay_kappa: PosFloat = 1.0


class FADASConfig(DelayScaleConfig):
    """FADAS (docs/async-optimisers.md §3): AMSGrad's ``beta`` = β₁, ``fadas_beta2`` = β₂ and
    ``fadas_eps`` = ε, with the delay-adaptive step (``delay_adaptive = false``: plain
    asynchronous AMSGrad)."""

    beta: Beta = 0.9
    fadas_beta2: Beta = 0.99
    fadas_eps: PosFloat = 1e-8
    delay_adaptive: bool = True


class ClipConfig(Section):
    """The global-norm clip of the aggregate (docs/server-rules.md §10): ``clip_tau`` = τ, the
    largest norm a direction leaves the clip with."""

    clip_tau: PosFloat = 1.0


MAX_LINKS = 16


class ChainConfig(Section):
    """A chain of rules (docs/server-rules.md §10): ``chain`` lists the links, registered rules
    applied in order, each to the direction of the one before; each link's own keys join
    ``[server]`` as if the link were named."""

    chain: Annotated[tuple[str, ...], Field(min_length=1, max_length=MAX_LINKS)]

    @field_validator("chain", mode="before")
    @classmethod
    def _from_array(cls, value: object) -> object:
        return tuple(value) if isinstance(value, list) else value  # a TOML array


# -- algorithms (docs/baselines.md) ----------------------------------------------------------------
REGULARIZERS = ("none", "l1", "l2", "box", "ball", "elastic-net", "group-lasso")


class FedDRConfig(Section):
    """FedDR (docs/baselines.md §4): relaxation ``alpha`` ∈ (0, 2); the server regulariser g
    (``regularizer``) with its parameters — ``reg`` (κ of ``l1``, ``l2``, ``group-lasso``, the ℓ₁
    weight of ``elastic-net``), ``reg_l2`` (the ℓ₂ weight of ``elastic-net``), ``box_low`` /
    ``box_high`` (``box``), ``ball_radius`` (``ball``), ``group_size`` (``group-lasso``), each read
    only by its regulariser (docs/baselines.md §4, table); ``feddr_diagnostics``: record the gradient
    mapping and the prox residuals at every evaluation (§4.1; off by default: a full gradient over
    every client's data per evaluation); the inexactness schedule ``feddr_schedule`` with
    ``feddr_growth`` and ``feddr_max_local_steps`` (§4.2)."""

    alpha: Annotated[float, Field(gt=0, lt=2)] = 1.0
    regularizer: Literal[REGULARIZERS] = "none"  # type: ignore[valid-type]
    reg: NonNegFloat = 0.0
    reg_l2: NonNegFloat = 0.0
    box_low: float = -1.0
    box_high: float = 1.0
    ball_radius: PosFloat = 1.0
    group_size: Annotated[int, Field(ge=1, le=10**9)] = 2
    feddr_diagnostics: bool = False
    feddr_schedule: Literal["fixed", "linear", "geometric"] = "fixed"
    feddr_growth: NonNegFloat = 0.0
    feddr_max_local_steps: Annotated[int, Field(ge=1, le=10**6)] = 1000

    @model_validator(mode="after")
    def _consistent(self) -> "FedDRConfig":
        if self.box_low > self.box_high:
            raise ValueError(f"box_low = {self.box_low}, box_high = {self.box_high}: need box_low ≤ box_high")
        if self.feddr_schedule == "geometric" and self.feddr_growth < 1.0:
            raise ValueError(f"feddr_growth = {self.feddr_growth}: a geometric schedule needs growth ≥ 1 "
                             "(as many local steps each round as the last, or more)")
        return self


class FedPDConfig(Section):
    """FedPD: the probability ``skip_probability`` that a round skips communication (its local
    step, exact or linearised, is the client's solver: docs/baselines.md §5.1)."""

    skip_probability: Annotated[float, Field(ge=0, lt=1)] = 0.0
