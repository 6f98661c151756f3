"""Latency models: one draw of a job's base latency from the ``[latency]`` distribution
(docs/protocol.md, "Latency").

Each drawn model is a pure function ``draw(cfg, rng) -> float`` of its config
(:mod:`asyncfl.config.latency`) and the ``latency`` random stream; the fleet multiplies the draw
by the client's speed. Each is a latency component of mode ``draw``
(:mod:`asyncfl.components.builtin`), built by ``build_<name>(cfg, ctx)``, which binds it to its
config (:func:`sampler`).

``trace`` and ``fedscale`` are latency components too, of other modes: a recorded trace is
replayed by :class:`asyncfl.clients.replay.ReplayFleet` (mode ``replay``), and FedScale device
profiles give each client a fixed latency (:func:`asyncfl.clients.fedscale.task_latencies`, mode
``profiles``, handed to the :class:`~asyncfl.clients.fleet.Fleet` as ``job_latency``).
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


def sampler(draw: Callable[[Any, np.random.Generator], float], c: Any) -> LatencySampler:
    """``draw`` bound to its config ``c``: ``rng -> draw(c, rng)`` (the same numpy calls, in the
    same order, as ``draw`` itself)."""
    return functools.partial(draw, c)


def drawn(draw: Callable[[Any, np.random.Generator], float]) -> Callable[[Any, Any], LatencySampler]:
    """The builder of a drawn model: ``build(cfg, ctx) -> sampler(draw, cfg)``."""
    def build(cfg: Any, ctx: Any) -> LatencySampler:
        return sampler(draw, cfg)
    build.__qualname__ = f"drawn({draw.__name__})"
    return build


# the drawn latency components' builders (asyncfl.components.builtin): build(cfg, ctx) -> LatencySampler
build_constant = drawn(constant)
build_exponential = drawn(exponential)
build_halfnormal = drawn(halfnormal)
build_lognormal = drawn(lognormal)
build_uniform = drawn(uniform)
build_pareto = drawn(pareto)
