"""Latency models: one draw of a job's base latency from the ``[latency]`` distribution
(docs/protocol.md, "Latency").

Each model is a pure function ``draw(cfg, rng) -> float`` of its config variant
(:mod:`asyncfl.config.latency`) and the ``latency`` random stream; the fleet multiplies the draw
by the client's speed. They are registered by ``dist`` name, with their config classes, in
:data:`asyncfl.config.registries.LATENCIES`; :func:`sampler` binds one to its config.

``trace`` and ``fedscale`` are registered too but are not drawn per job: a recorded trace is
replayed by :class:`asyncfl.clients.replay.ReplayFleet`, and FedScale device profiles give each
client a fixed latency (:func:`asyncfl.clients.fedscale.task_latencies`, handed to the
:class:`~asyncfl.clients.fleet.Fleet` as ``job_latency``).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import numpy as np

from asyncfl.config.latency import (
    ConstantLatency, ExponentialLatency, HalfNormalLatency, LogNormalLatency, ParetoLatency,
    UniformLatency,
)

LatencySampler = Callable[[np.random.Generator], float]
"""A model bound to its config: ``rng -> latency``."""


def constant(c: ConstantLatency, rng: np.random.Generator) -> float:
    """``value`` (draws nothing)."""
    return c.value


def exponential(c: ExponentialLatency, rng: np.random.Generator) -> float:
    """``Exponential(mean)``."""
    return float(rng.exponential(c.mean))


def halfnormal(c: HalfNormalLatency, rng: np.random.Generator) -> float:
    """``|N(0, scale²)|``."""
    return abs(float(rng.normal(0.0, c.scale)))


def lognormal(c: LogNormalLatency, rng: np.random.Generator) -> float:
    """``median · exp(σ z)``, ``z ~ N(0, 1)``."""
    return c.median * float(np.exp(c.sigma * rng.standard_normal()))


def uniform(c: UniformLatency, rng: np.random.Generator) -> float:
    """``Uniform(low, high)``."""
    return float(rng.uniform(c.low, c.high))


def pareto(c: ParetoLatency, rng: np.random.Generator) -> float:
    """Pareto (type I): ``scale × (1 + Lomax(shape)) ≥ scale``; infinite mean when ``shape ≤ 1``."""
    return c.scale * (1.0 + float(rng.pareto(c.shape)))


class NotDrawn:
    """A registered latency model whose latencies are not drawn per job (calling it raises)."""

    def __init__(self, name: str, source: str) -> None:
        self.name, self.source = name, source

    @property
    def message(self) -> str:
        return f"latency.dist = {self.name!r} is not drawn per job: {self.source}"

    def __call__(self, c: Any, rng: np.random.Generator | None = None) -> float:
        raise NotImplementedError(self.message)

    def __repr__(self) -> str:
        return f"NotDrawn({self.name!r})"


trace = NotDrawn("trace", "the recorded dispatches and latencies are replayed (asyncfl.clients.replay.ReplayFleet)")
fedscale = NotDrawn(
    "fedscale", "each client has a fixed latency from its device profile "
    "(asyncfl.clients.fedscale.task_latencies, given to the Fleet as job_latency)",
)


def sampler(draw: Callable[[Any, np.random.Generator], float], c: Any) -> LatencySampler:
    """``draw`` bound to its config ``c``: ``rng -> draw(c, rng)`` (the same numpy calls, in the
    same order, as ``draw`` itself). Raises :class:`NotImplementedError` for a model that is not
    drawn per job."""
    if isinstance(draw, NotDrawn):
        raise NotImplementedError(draw.message)
    return functools.partial(draw, c)
