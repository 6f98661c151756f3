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

(``κ`` = ``server.reg``; ``l1``, ``l2`` of the elastic net = ``server.reg``, ``server.reg_l2``;
``low``, ``high`` = ``server.box_low``, ``box_high``; ``R`` = ``server.ball_radius``; ``w`` =
``server.reg`` over groups of ``server.group_size``: FedDR's keys,
:class:`asyncfl.config.server.FedDRConfig`.) The indicator functions are ``+∞`` outside their set;
:meth:`Regularizer.value` reports that as ``inf``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from asyncfl.config.server import REGULARIZERS as KINDS


def soft_threshold(v: torch.Tensor, a: float) -> torch.Tensor:
    """``S_a(v) = sign(v) · max(|v| − a, 0)``."""
    return torch.sign(v) * torch.clamp(v.abs() - a, min=0.0)


def _groups(v: torch.Tensor, size: int) -> torch.Tensor:
    """``v`` (length d) as rows of ``size`` coordinates, the last row zero-padded. A group
    larger than the model is the whole model: one row of the d coordinates (zero padding adds
    nothing to a norm, and ``server.group_size = 5e8`` must not allocate 5e8 zeros)."""
    d = v.numel()
    size = min(int(size), max(d, 1))
    pad = (-d) % size
    return torch.cat([v.reshape(-1), v.new_zeros(pad)]).reshape(-1, size)


@dataclass(frozen=True)
class Regularizer:
    """``g`` of one kind with its parameters (module table): ``reg`` (``κ`` of ``l1``, ``l2``, the
    weight ``w`` of ``group-lasso``, the ℓ₁ weight of ``elastic-net``), ``reg_l2`` (the elastic
    net's ℓ₂ weight), ``low``/``high`` (``box``), ``radius`` (``ball``), ``group_size``."""

    kind: str
    reg: float = 0.0
    reg_l2: float = 0.0
    low: float = -1.0
    high: float = 1.0
    radius: float = 1.0
    group_size: int = 2

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"unknown regulariser {self.kind!r}; known: {', '.join(KINDS)}")
        if self.low > self.high or self.radius <= 0 or self.group_size < 1 or self.reg < 0 or self.reg_l2 < 0:
            raise ValueError(f"regulariser {self} : need low ≤ high, radius > 0, group_size ≥ 1, reg, reg_l2 ≥ 0")

    @classmethod
    def from_config(cls, cfg: Any) -> "Regularizer":
        """FedDR's regulariser from its config (:class:`asyncfl.config.server.FedDRConfig`)."""
        return cls(cfg.regularizer, cfg.reg, cfg.reg_l2, cfg.box_low, cfg.box_high, cfg.ball_radius, cfg.group_size)

    def prox(self, v: torch.Tensor, h: float) -> torch.Tensor:
        """``prox_{h·g}(v)`` (module table)."""
        kind = self.kind
        if kind == "none" or (kind in ("l1", "l2", "group-lasso") and self.reg == 0.0):
            return v
        if kind == "l1":
            return soft_threshold(v, h * self.reg)
        if kind == "l2":
            return v / (1.0 + h * self.reg)
        if kind == "box":
            return torch.clamp(v, min=self.low, max=self.high)
        if kind == "ball":
            norm = float(torch.linalg.vector_norm(v))
            return v if norm <= self.radius else v * (self.radius / norm)
        if kind == "elastic-net":
            return soft_threshold(v, h * self.reg) / (1.0 + h * self.reg_l2)
        rows = _groups(v, self.group_size)
        norms = torch.linalg.vector_norm(rows, dim=1, keepdim=True)
        factor = torch.clamp(1.0 - h * self.reg / torch.clamp(norms, min=torch.finfo(v.dtype).tiny), min=0.0)
        return (rows * factor).reshape(-1)[: v.numel()].reshape(v.shape)

    def value(self, x: torch.Tensor, tol: float = 1e-12) -> float:
        """``g(x)`` (``inf`` outside an indicator's set, with ``tol`` of slack)."""
        kind = self.kind
        if kind == "none":
            return 0.0
        if kind == "l1":
            return self.reg * float(x.abs().sum())
        if kind == "l2":
            return 0.5 * self.reg * float((x * x).sum())
        if kind == "box":
            inside = bool(((x >= self.low - tol) & (x <= self.high + tol)).all())
            return 0.0 if inside else math.inf
        if kind == "ball":
            return 0.0 if float(torch.linalg.vector_norm(x)) <= self.radius + tol else math.inf
        if kind == "elastic-net":
            return self.reg * float(x.abs().sum()) + 0.5 * self.reg_l2 * float((x * x).sum())
        return self.reg * float(torch.linalg.vector_norm(_groups(x, self.group_size), dim=1).sum())


def gradient_mapping(theta: torch.Tensor, grad: torch.Tensor, g: Regularizer, beta: float) -> torch.Tensor:
    """``G_β(θ) = (θ − prox_{β·g}(θ − β∇f(θ))) / β`` (docs/baselines.md §4.1): zero exactly at a
    stationary point of ``f + g``; ``∇f(θ)`` when ``g = 0``."""
    return (theta - g.prox(theta - beta * grad, beta)) / beta
