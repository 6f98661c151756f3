"""Update hooks: what a client does to its upload before sending it (docs/extending.md §7).

A hook is a component of kind ``hook`` (``client.update_hook``; default ``none``) whose builder
returns an :class:`UpdateHook`. The engine calls ``hook.apply(jobs, messages)`` on the messages of
the uploads that arrived for a step — each the algorithm's ``client_message`` (FedAvg's
``Δ = θ_s − θ_local``) — before it screens them for NaN and norm and before the aggregator (and
privacy) sees them, so a hook models what a real client would do: compression, client-side
clipping, an attack. A hook that draws random numbers takes them from
``torch.Generator().manual_seed(hook_seed(job))``, so an upload's fate does not depend on the
executor or on which uploads share its step.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

from asyncfl.compute.training import LocalJob

Messages = torch.Tensor | list[torch.Tensor]


def hook_seed(job: LocalJob) -> int:
    """The seed of a hook's own randomness for ``job``: derived from the job's seed, apart from
    the stream its training drew (docs/architecture.md §7)."""
    return (job.seed * 0x9E3779B97F4A7C15 + 0x5BD1E995) % 2**63


class UpdateHook:
    """``transform(job, message) -> message`` for one upload; ``apply`` runs it on a step's
    uploads (a list, or one tensor whose rows are the messages) and keeps the form it was given."""

    def transform(self, job: LocalJob, message: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def apply(self, jobs: Sequence[LocalJob], messages: Messages) -> Messages:
        out = [self.transform(job, m) for job, m in zip(jobs, messages)]
        return torch.stack(out) if isinstance(messages, torch.Tensor) and out else out


class NoHook(UpdateHook):
    """Uploads as the algorithm made them (the same tensors, untouched)."""

    def transform(self, job: LocalJob, message: torch.Tensor) -> torch.Tensor:
        return message

    def apply(self, jobs: Sequence[LocalJob], messages: Messages) -> Messages:
        return messages


class ClipNorm(UpdateHook):
    """``m ← m · min(1, c/‖m‖₂)``: client-side clipping at ``c = update_clip``."""

    def __init__(self, clip: float) -> None:
        self.clip = clip

    def transform(self, job: LocalJob, message: torch.Tensor) -> torch.Tensor:
        norm = float(torch.linalg.vector_norm(message))
        return message * (self.clip / norm) if norm > self.clip else message


class TopK(UpdateHook):
    """Keep the ``k = ⌈fraction · d⌉`` entries of largest magnitude (ties: the lower index), zero
    the others."""

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction

    def transform(self, job: LocalJob, message: torch.Tensor) -> torch.Tensor:
        flat = message.reshape(-1)
        k = max(1, math.ceil(self.fraction * flat.numel()))
        if k >= flat.numel():
            return message
        order = torch.argsort(flat.abs(), descending=True, stable=True)[:k]
        out = torch.zeros_like(flat)
        out[order] = flat[order]
        return out.reshape(message.shape)


def build_none(cfg: Any, ctx: Any) -> UpdateHook:
    return NoHook()


def build_clip(cfg: Any, ctx: Any) -> UpdateHook:
    return ClipNorm(cfg.update_clip)


def build_topk(cfg: Any, ctx: Any) -> UpdateHook:
    return TopK(cfg.update_topk)
