"""The ``[population]`` keys each availability model owns (docs/protocol.md §5). Torch-free."""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import Field

from asyncfl.config.base import PosFloat, Section


class DiurnalConfig(Section):
    """Each client is online for a fraction ``online_fraction`` of every ``period``, from a
    client-specific phase φ_k ~ U[0, period): online at x iff (x − φ_k) mod period <
    online_fraction × period."""

    period: PosFloat = 24.0
    online_fraction: Annotated[float, Field(gt=0, le=1)] = 0.5


class TraceAvailabilityConfig(Section):
    """A FedScale-format availability pickle (``availability_file``, required), with
    ``availability_time_unit_ms`` milliseconds of it per unit of virtual time (default: the
    FedScale latency's ``time_unit_ms``, else 1000: one unit = one second)."""

    availability_file: str | None = None
    file_keys: ClassVar[tuple[str, ...]] = ("availability_file",)
    availability_time_unit_ms: PosFloat | None = None
