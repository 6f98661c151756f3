"""The ``[latency]`` section's variants, one per latency model (docs/protocol.md).

A job's latency is the client's speed multiplier times a draw from the model named by
``dist``; each variant accepts only its own keys. The variants are registered, with their
samplers (:mod:`asyncfl.clients.latency`), in :data:`asyncfl.config.registries.LATENCIES`.
Torch-free.
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from asyncfl.config.base import NonNegFloat, PosFloat, Section


# ---------------------------------------------------------------------------------------------
# [latency]  (tag: dist)
class ConstantLatency(Section):
    dist: Literal["constant"] = "constant"
    value: PosFloat = 1.0


class ExponentialLatency(Section):
    dist: Literal["exponential"] = "exponential"
    mean: PosFloat = 1.0


class HalfNormalLatency(Section):
    dist: Literal["halfnormal"] = "halfnormal"
    scale: PosFloat = 1.0


class LogNormalLatency(Section):
    dist: Literal["lognormal"] = "lognormal"
    median: PosFloat = 1.0
    sigma: Annotated[float, Field(ge=0, le=10)] = 1.0


class UniformLatency(Section):
    dist: Literal["uniform"] = "uniform"
    low: NonNegFloat = 0.5
    high: PosFloat = 1.5


class ParetoLatency(Section):
    """Heavy-tailed stragglers: ``scale × (1 + Lomax(shape))`` (Pareto I, minimum ``scale``;
    the mean ``scale·shape/(shape−1)`` is infinite for ``shape ≤ 1``)."""

    dist: Literal["pareto"] = "pareto"
    scale: PosFloat = 1.0
    shape: Annotated[float, Field(gt=0, le=100)] = 2.0


class TraceLatency(Section):
    """Replay the dispatch order and latencies of an earlier run's ``updates.csv`` (``file``:
    the CSV or its run directory; see ``asyncfl.clients.replay``)."""

    dist: Literal["trace"] = "trace"
    file: str
    file_keys: ClassVar[tuple[str, ...]] = ("file",)


class FedScaleLatency(Section):
    """FedScale device profiles: latency = samples × computation (ms/sample) + size / bandwidth."""

    dist: Literal["fedscale"] = "fedscale"
    file: str
    file_keys: ClassVar[tuple[str, ...]] = ("file",)
    time_unit_ms: PosFloat = 1000.0  # one unit of virtual time, in milliseconds


LatencyConfig = (
    ConstantLatency | ExponentialLatency | HalfNormalLatency | LogNormalLatency | UniformLatency
    | ParetoLatency | TraceLatency | FedScaleLatency
)
