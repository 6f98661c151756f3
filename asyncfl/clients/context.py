"""What the fleet's components are told (docs/protocol.md §4–6): :class:`FleetContext`, the
:class:`~asyncfl.components.contracts.BuildContext` of the latency and availability kinds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from asyncfl.components.contracts import BuildContext


@dataclass(frozen=True)
class FleetContext(BuildContext):
    """Besides the common context (clients, seed, steps, buffer, the built task, streams): the
    ``[client]`` section (device profiles count a job's samples from it), whether the solver's
    work is ``client.local_steps`` or ``client.epochs`` (``SolverTraits.local_work``) and the
    seconds of an availability trace per unit of virtual time; and, for a latency model of mode
    ``client`` or an availability model that ``sees_clients``, every client's static profile
    (``profiles``: :class:`asyncfl.clients.profiles.ClientProfiles`; None otherwise)."""

    client: Any = None
    local_work: bool = True
    seconds_per_unit: float = 1.0
    profiles: Any = None
