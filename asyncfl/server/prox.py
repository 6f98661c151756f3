"""FedDR's server regulariser ``g``: its value and its proximal operator (docs/baselines.md §4).

``prox_{h·g}(v) = argmin_x g(x) + ‖x − v‖²/(2h)`` for a step ``h > 0``:

==============  ==========================================  ===============================================
kind            ``g(x)``                                    ``prox_{h·g}(v)``
==============  ==========================================  ===============================================
``none``        0                                           ``v``
``l1``          ``κ‖x‖₁``                                   ``S_{hκ}(v)``, ``S_a(v) = sign(v)·max(|v| − a, 0)``
``l2``          ``(κ/2)‖x‖²``                               ``v / (1 + hκ)``
``box``         ``ι{low ≤ x ≤ high}``                       ``min(max(v, low), high)`` (elementwise)
``ball``        ``ι{‖x‖₂ ≤ R}``                             ``v · min(1, R/‖v‖₂)``
``elastic-net`` ``l1‖x‖₁ + (l2/2)‖x‖²``                     ``S_{h·l1}(v) / (1 + h·l2)``
``group-lasso`` ``w Σ_j ‖x_{G_j}‖₂``                        per group ``v_G · max(0, 1 − hw/‖v_G‖₂)``
==============  ==========================================  ===============================================

(``κ = server.reg``; the others are the kind's ``[server.options.KIND]`` section,
:mod:`asyncfl.config.comparators`.) The indicator functions are ``+∞`` outside their set;
:meth:`Regularizer.value` reports that as ``inf``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from asyncfl.config.comparators import BallConfig, BoxConfig, ElasticNetConfig, GroupLassoConfig

KINDS = ("none", "l1", "l2", "box", "ball", "elastic-net", "group-lasso")


def soft_threshold(v: torch.Tensor, a: float) -> torch.Tensor:
    """``S_a(v) = sign(v) · max(|v| − a, 0)``."""
    return torch.sign(v) * torch.clamp(v.abs() - a, min=0.0)


def _groups(v: torch.Tensor, size: int) -> torch.Tensor:
    """``v`` (length d) as rows of ``size`` coordinates, the last row zero-padded."""
    d = v.numel()
    pad = (-d) % size
    return torch.cat([v.reshape(-1), v.new_zeros(pad)]).reshape(-1, size)


@dataclass(frozen=True)
class Regularizer:
    """``g`` of one kind with its parameters: ``reg`` (``κ`` of ``l1`` / ``l2``) or ``options``
    (the kind's config section)."""

    kind: str
    reg: float = 0.0
    options: Any = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown regulariser {self.kind!r}; known: {', '.join(KINDS)}")
        wanted = {"box": BoxConfig, "ball": BallConfig, "elastic-net": ElasticNetConfig, "group-lasso": GroupLassoConfig}
        if self.kind in wanted and not isinstance(self.options, wanted[self.kind]):
            raise ValueError(f"regulariser {self.kind!r} needs a {wanted[self.kind].__name__}, got {self.options!r}")

    def prox(self, v: torch.Tensor, h: float) -> torch.Tensor:
        """``prox_{h·g}(v)`` (module table)."""
        kind, o = self.kind, self.options
        if kind == "none" or (kind in ("l1", "l2") and self.reg == 0.0):
            return v
        if kind == "l1":
            return soft_threshold(v, h * self.reg)
        if kind == "l2":
            return v / (1.0 + h * self.reg)
        if kind == "box":
            return torch.clamp(v, min=o.low, max=o.high)
        if kind == "ball":
            norm = float(torch.linalg.vector_norm(v))
            return v if norm <= o.radius else v * (o.radius / norm)
        if kind == "elastic-net":
            return soft_threshold(v, h * o.l1) / (1.0 + h * o.l2)
        rows = _groups(v, o.group_size)
        norms = torch.linalg.vector_norm(rows, dim=1, keepdim=True)
        factor = torch.clamp(1.0 - h * o.weight / torch.clamp(norms, min=torch.finfo(v.dtype).tiny), min=0.0)
        return (rows * factor).reshape(-1)[: v.numel()].reshape(v.shape)

    def value(self, x: torch.Tensor, tol: float = 1e-12) -> float:
        """``g(x)`` (``inf`` outside an indicator's set, with ``tol`` of slack)."""
        kind, o = self.kind, self.options
        if kind == "none":
            return 0.0
        if kind == "l1":
            return self.reg * float(x.abs().sum())
        if kind == "l2":
            return 0.5 * self.reg * float((x * x).sum())
        if kind == "box":
            inside = bool(((x >= o.low - tol) & (x <= o.high + tol)).all())
            return 0.0 if inside else math.inf
        if kind == "ball":
            return 0.0 if float(torch.linalg.vector_norm(x)) <= o.radius + tol else math.inf
        if kind == "elastic-net":
            return o.l1 * float(x.abs().sum()) + 0.5 * o.l2 * float((x * x).sum())
        return o.weight * float(torch.linalg.vector_norm(_groups(x, o.group_size), dim=1).sum())


def gradient_mapping(theta: torch.Tensor, grad: torch.Tensor, g: Regularizer, beta: float) -> torch.Tensor:
    """``G_β(θ) = (θ − prox_{β·g}(θ − β∇f(θ))) / β`` (docs/baselines.md §4.1): zero exactly at a
    stationary point of ``f + g``; ``∇f(θ)`` when ``g = 0``."""
    return (theta - g.prox(theta - beta * grad, beta)) / beta
