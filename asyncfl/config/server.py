"""The ``[server]`` keys each protocol, server rule and algorithm owns (docs/scenario.md §1).

``[server]`` holds the keys every run has (``protocol``, ``rule``, ``algorithm``, ``lr``,
``buffer``, ``staleness_exponent``, ``max_staleness``: :class:`asyncfl.config.scenario.ServerConfig`)
and the keys of the components it names, each declared by its component here: FedBuff's
``concurrency``, sync's ``cohort``, the momentum rules' ``beta``, Adam's moments, MA's target,
ridge and window, FedDR's ``alpha`` and regulariser, FedPD's skip probability. A key of a
component the scenario does not name is refused (``server.adam_eps`` with ``rule = "sgd"``).
Torch-free.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

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


# -- algorithms (docs/baselines.md) ----------------------------------------------------------------
class FedDRConfig(Section):
    """FedDR: relaxation ``alpha`` ∈ (0, 2) and the server regulariser g (``regularizer``, ``reg``)."""

    alpha: Annotated[float, Field(gt=0, lt=2)] = 1.0
    regularizer: Literal["none", "l1", "l2"] = "none"
    reg: NonNegFloat = 0.0


class FedPDConfig(Section):
    """FedPD: the probability ``skip_probability`` that a round skips communication."""

    skip_probability: Annotated[float, Field(ge=0, lt=1)] = 0.0
