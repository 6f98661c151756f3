"""The base of every scenario section and the value types shared by sections (docs/architecture.md §2).

Torch-free (the scenario, ``asyncfl validate`` and ``--help`` must not import torch).
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import BaseModel, ConfigDict, Field

MAX_INT = 10**12  # "huge numbers" are refused long before they exhaust memory or time


class Section(BaseModel):
    """Base of every scenario section: unknown keys, NaN/Inf and wrong types are errors.

    ``file_keys``: the keys that name input files; a relative path written in a scenario file is
    relative to that file, and the resolved scenario names it absolutely (docs/scenario.md §2).

    ``defer_build``: a section's validator is built when it first validates, not when its class
    is defined, so a run pays only for the sections and components its scenario names, not for
    every registered one (docs/performance.md, "Start-up")."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False, defer_build=True)
    file_keys: ClassVar[tuple[str, ...]] = ()


PosInt = Annotated[int, Field(ge=1, le=MAX_INT)]
NonNegInt = Annotated[int, Field(ge=0, le=MAX_INT)]
PosFloat = Annotated[float, Field(gt=0, le=1e12)]
NonNegFloat = Annotated[float, Field(ge=0, le=1e12)]
Probability = Annotated[float, Field(ge=0, le=1)]
