"""Hyper-parameters of the asynchronous comparators and of FedDR's extra regularisers, one small
section class each (docs/async-optimisers.md, docs/baselines.md §4).

Torch-free, like every config module. Each class is what one implementation's
``from_config(cfg)`` takes, and nothing else. A scenario sets them in the table
``[server.options.NAME]`` of the component it selects (``server.rule``, ``server.algorithm`` or
``server.regularizer``); :data:`OPTION_SECTIONS` maps each name to its class, so an unknown key or a
value out of range is reported as ``server.options.NAME.key = value: what is allowed``.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from asyncfl.config.base import NonNegFloat, PosFloat, Section

DelayThreshold = Annotated[int, Field(ge=0, le=10**9)]


class DelayScaleConfig(Section):
    """The delay-adaptive step (docs/async-optimisers.md §2): the step of a server step whose
    buffer's largest staleness ``τ_max`` exceeds ``threshold`` (``τ_c``) is multiplied by
    ``min(1, kappa / τ_max)``; steps with ``τ_max ≤ τ_c`` are not changed."""

    threshold: DelayThreshold = 1
    kappa: PosFloat = 1.0


class FADASConfig(Section):
    """FADAS (docs/async-optimisers.md §3): AMSGrad on the aggregate with the delay-adaptive step.
    ``beta1``, ``beta2``, ``eps``: the moment rates and the denominator's constant;
    ``delay_adaptive = false`` is FADAS without the delay adjustment (plain asynchronous AMSGrad)."""

    beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9
    beta2: Annotated[float, Field(ge=0, lt=1)] = 0.99
    eps: PosFloat = 1e-8
    delay_adaptive: bool = True
    threshold: DelayThreshold = 1
    kappa: PosFloat = 1.0

    def delay(self) -> DelayScaleConfig | None:
        return DelayScaleConfig(threshold=self.threshold, kappa=self.kappa) if self.delay_adaptive else None


class CA2FLConfig(Section):
    """CA2FL (docs/async-optimisers.md §4). ``cache_init``: what a client's cached update is
    before its first upload (``zero``, the paper's choice)."""

    cache_init: Literal["zero"] = "zero"


class FedDRDiagnosticsConfig(Section):
    """FedDR's diagnostics and inexactness schedule (docs/baselines.md §4.1–4.2).

    ``diagnostics``: at every evaluation step, the norm of the gradient mapping at ``θ̄`` and the
    prox residual of that step's client solves (written to ``summary.json``).
    ``schedule``: the number of local steps of a job dispatched in server step ``t``:
    ``constant`` — ``client.local_steps``; ``linear`` — ``client.local_steps + ⌊growth·(t−1)⌋``;
    ``geometric`` — ``⌈client.local_steps · growth^(t−1)⌉``; both capped at ``max_local_steps``."""

    diagnostics: bool = True
    schedule: Literal["constant", "linear", "geometric"] = "constant"
    growth: NonNegFloat = 0.0
    max_local_steps: Annotated[int, Field(ge=1, le=10**6)] = 1000

    @model_validator(mode="after")
    def _growth_fits(self) -> "FedDRDiagnosticsConfig":
        if self.schedule == "geometric" and self.growth < 1.0:
            raise ValueError(f"growth = {self.growth}: a geometric schedule needs growth ≥ 1 (more local steps each round)")
        return self


class BoxConfig(Section):
    """``g(θ) = ι{low ≤ θ ≤ high}`` (elementwise)."""

    low: float = -1.0
    high: float = 1.0

    @model_validator(mode="after")
    def _ordered(self) -> "BoxConfig":
        if self.low > self.high:
            raise ValueError(f"low = {self.low}, high = {self.high}: need low ≤ high")
        return self


class BallConfig(Section):
    """``g(θ) = ι{‖θ − centre‖₂ ≤ radius}`` with the centre at the origin."""

    radius: PosFloat = 1.0


class ElasticNetConfig(Section):
    """``g(θ) = l1‖θ‖₁ + (l2/2)‖θ‖²``."""

    l1: NonNegFloat = 0.01
    l2: NonNegFloat = 0.01


class GroupLassoConfig(Section):
    """``g(θ) = weight Σ_j ‖θ_{G_j}‖₂`` over consecutive groups of ``group_size`` coordinates (the
    last group may be shorter)."""

    weight: NonNegFloat = 0.01
    group_size: Annotated[int, Field(ge=1, le=10**9)] = 2


#: ``server.options.NAME`` → the section class of the component NAME (the rule, algorithm or
#: regulariser of that name).
OPTION_SECTIONS: dict[str, type[Section]] = {
    "sgd-delay": DelayScaleConfig,
    "fadas": FADASConfig,
    "ca2fl": CA2FLConfig,
    "feddr": FedDRDiagnosticsConfig,
    "box": BoxConfig,
    "ball": BallConfig,
    "elastic-net": ElasticNetConfig,
    "group-lasso": GroupLassoConfig,
}


def options_of(server: object, name: str) -> Section:
    """The validated section of component ``name`` from ``server.options`` (its defaults when the
    scenario gives none)."""
    cls = OPTION_SECTIONS[name]
    raw = getattr(server, "options", {}).get(name, {})
    return raw if isinstance(raw, cls) else cls.model_validate(dict(raw))
