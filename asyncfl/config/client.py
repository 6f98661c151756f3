"""The ``[client]`` keys each local solver owns (docs/tasks.md §8, docs/extending.md §7).

``[client]`` holds the keys of every solver (``solver``, ``lr``, ``batch_size``, ``local_steps``
or ``epochs``, ``mu``: :class:`asyncfl.config.scenario.ClientConfig`); a solver adds its own.
Torch-free.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from asyncfl.config.base import NonNegFloat, PosFloat, Section


class SGDSolverConfig(Section):
    """Local SGD, as ``torch.optim.SGD``: heavy-ball ``momentum`` (0: plain gradient steps),
    ``nesterov`` look-ahead, and decoupled-free ``weight_decay`` (added to the gradient)."""

    momentum: Annotated[float, Field(ge=0, lt=1)] = 0.0
    nesterov: bool = False
    weight_decay: NonNegFloat = 0.0


class AdamSolverConfig(Section):
    """Local Adam, as ``torch.optim.Adam``: moments ``betas`` = (β₁, β₂), ``eps``, and
    ``weight_decay`` (added to the gradient)."""

    adam_beta1: Annotated[float, Field(ge=0, lt=1)] = 0.9
    adam_beta2: Annotated[float, Field(ge=0, lt=1)] = 0.999
    eps: PosFloat = 1e-8
    weight_decay: NonNegFloat = 0.0


class ClipHookConfig(Section):
    """The ``clip-norm`` update hook: every upload ``m`` becomes ``m · min(1, update_clip/‖m‖)``."""

    update_clip: PosFloat = 1.0


class TopKHookConfig(Section):
    """The ``top-k`` update hook: every upload keeps its ``⌈update_topk · d⌉`` entries of largest
    magnitude and the rest become 0 (sparsified uploads)."""

    update_topk: Annotated[float, Field(gt=0, le=1)] = 0.1
