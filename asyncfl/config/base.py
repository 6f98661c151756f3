"""The base of every scenario section and the value types shared by sections (docs/architecture.md §2).

Torch-free (the scenario, ``asyncfl validate`` and ``--help`` must not import torch).
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

MAX_INT = 10**12  # "huge numbers" are refused long before they exhaust memory or time


class Section(BaseModel):
    """Base of every scenario section: unknown keys, NaN/Inf and wrong types are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)


PosInt = Annotated[int, Field(ge=1, le=MAX_INT)]
NonNegInt = Annotated[int, Field(ge=0, le=MAX_INT)]
PosFloat = Annotated[float, Field(gt=0, le=1e12)]
NonNegFloat = Annotated[float, Field(ge=0, le=1e12)]
Probability = Annotated[float, Field(ge=0, le=1)]
