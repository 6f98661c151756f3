"""Who may still be dispatched in a private run: participations per client and the one-upload
rule (docs/privacy.md §6).

A private run keeps, per client ``k``, ``spent[k]`` — the server steps it has contributed to
(accepted uploads) — and ``pending[k]`` — whether it has a dispatch whose fate is not decided
yet (in flight, waiting in the open FedBuff buffer, or arrived in the open synchronous round).
and ``last_step[k]`` — the server step it last contributed to (0: none yet). A client may be
dispatched at model version ``v`` (the step in progress) only when

    not pending[k]  and  spent[k] < k_max  and  (spent[k] = 0  or  v − last_step[k] ≥ b)

(``k_max = ∞`` without a participation cap, ``b = privacy.min_separation``, 1 by default, when
the separation rule is always true: a client is never dispatched during the step it contributed to)
and, under random allocation (docs/privacy.md §13), ``v`` is one of the steps allotted to ``k``; its
upload then joins only step ``v`` (:meth:`Participation.admits`) — one arriving later is dropped.

which gives, in every case:

* **one upload per client per step.** A client whose upload waits in the open buffer is not
  dispatched again until that step is taken (or the upload is dropped), so no step holds two
  uploads of one client — its sensitivity with respect to that client stays ``S``;
* **at most k_max participations.** A participation is *reserved at dispatch and spent at
  acceptance*: a dispatch needs ``spent + pending < k_max``; an accepted upload moves the
  reservation to ``spent``; every other fate — a stale drop, an offline drop, a cancelled
  straggler, a rejection — releases it unspent. So ``spent[k] ≤ k_max`` always, and an upload
  that would exceed the cap is never produced: its client was never dispatched;
* **contributions at least b steps apart.** An upload dispatched at version ``v`` can only be
  accepted by a step ``t ≥ v`` (the version only grows), and ``last_step`` cannot change while
  the dispatch is pending, so its step is ``t ≥ v ≥ last_step + b``.

Every fate passes through :meth:`Participation.settle` (one per ``updates.csv`` row), so the
rule holds for every protocol, for availability and for replayed traces alike. The ledger is
declared state (:class:`ParticipationState`, part of ``SimState``), together with ``first_step``:
the server step at which some client first reached ``j + 1`` participations (the ε curve of
``privacy.csv`` under the cap).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from asyncfl.privacy.allotment import Allotment


class ParticipationState(NamedTuple):
    """The ledger as data (docs/architecture.md §5)."""

    spent: np.ndarray  # int64 (N,): server steps each client has contributed to
    pending: np.ndarray  # bool (N,): the client has a dispatch whose fate is not decided yet
    first_step: np.ndarray  # int64 (m,): step at which some client first reached j + 1 participations
    last_step: np.ndarray  # int64 (N,): the server step each client last contributed to (0: none)


class Participation:
    """Participations per client and who may be dispatched (module docstring). ``cap`` is
    ``k_max`` (None: no cap, only the one-upload rule), ``separation`` b, and ``version()`` the
    step in progress (the simulation's model version)."""

    def __init__(self, clients: int, cap: int | None, separation: int = 1,
                 version: Callable[[], int] | None = None, allotment: Allotment | None = None) -> None:
        if cap is not None and cap < 1:
            raise ValueError(f"participation cap {cap}: must be at least 1")
        if separation < 1:
            raise ValueError(f"min separation {separation}: must be at least 1")
        if (separation > 1 or allotment is not None) and version is None:
            raise ValueError("a min separation or an allotment needs the simulation's version")
        self.cap = cap
        self.separation = int(separation)
        self.version = version
        # random allocation (docs/privacy.md §13): dispatched only for a step allotted to it
        self.allotment = allotment
        self.spent = np.zeros(clients, dtype=np.int64)
        self.pending = np.zeros(clients, dtype=bool)
        self.first_step = np.zeros(0, dtype=np.int64)
        self.last_step = np.zeros(clients, dtype=np.int64)

    # -- who may be dispatched -------------------------------------------------------------------
    def rested(self, client: int) -> bool:
        """``spent = 0`` or ``v − last_step ≥ b`` (always true for b = 1)."""
        if self.separation == 1 or self.spent[client] == 0:
            return True
        assert self.version is not None
        return self.version() - int(self.last_step[client]) >= self.separation

    def allotted(self, client: int, step: int) -> bool:
        """Under random allocation: ``step`` is one of ``client``'s allotted steps (always true
        without an allotment)."""
        return self.allotment is None or self.allotment.allows(client, step)

    def eligible(self, client: int) -> bool:
        return (not self.pending[client] and (self.cap is None or self.spent[client] < self.cap)
                and self.rested(client) and (self.allotment is None or self.allotted(client, self._now())))

    def _now(self) -> int:
        assert self.version is not None
        return self.version()

    def eligible_mask(self) -> np.ndarray:
        mask = ~self.pending
        if self.cap is not None:
            mask &= self.spent < self.cap
        if self.separation > 1:
            assert self.version is not None
            mask &= (self.spent == 0) | (self.version() - self.last_step >= self.separation)
        if self.allotment is not None:
            mask &= self.allotment.mask(self._now())
        return mask

    def exhausted(self) -> bool:
        """Under a cap: no client can be dispatched now (every client has reached the cap, waits
        for the open step, or contributed fewer than b steps ago). Asked when nothing is on the
        clock: then no step can be taken, the version cannot move, and nobody becomes eligible."""
        return (self.cap is not None or self.separation > 1 or self.allotment is not None) and not self.eligible_mask().any()

    # -- fates ------------------------------------------------------------------------------------
    def reserve(self, client: int) -> None:
        """A dispatch of ``client``; refused (an engine error) if it is not eligible."""
        if not self.eligible(client):
            raise RuntimeError(
                f"client {client} dispatched while not eligible (pending: {bool(self.pending[client])}, "
                f"participations {int(self.spent[client])} of cap {self.cap}, last step {int(self.last_step[client])}, "
                f"min separation {self.separation})"
            )
        self.pending[client] = True

    def settle(self, client: int, accepted: bool, step: int) -> None:
        """The fate of ``client``'s pending dispatch: accepted by server step ``step`` (the
        participation is spent) or not (released unspent). Under random allocation an upload is
        accepted only by its allotted step: anything else is an engine error (the engine drops such
        an upload on arrival, :meth:`admits`)."""
        self.pending[client] = False
        if accepted:
            if not self.allotted(client, step):
                raise RuntimeError(f"client {client}'s upload accepted by server step {step}, which is not allotted to it")
            self.spent[client] += 1
            self.last_step[client] = step
            if self.spent[client] > self.first_step.size:
                self.first_step = np.append(self.first_step, np.int64(step))

    def admits(self, client: int, dispatched: int, step: int) -> bool:
        """Whether an upload of ``client`` dispatched at version ``dispatched`` may join the open
        step ``step``. Under random allocation only the step it was dispatched for, which was
        allotted to it: an upload that arrives after that step was taken is dropped, never counted
        against a later step (docs/privacy.md §13). Always true without an allotment."""
        return self.allotment is None or dispatched == step

    # -- reports ------------------------------------------------------------------------------------
    def most_by(self, step: int) -> int:
        """The most server steps any one client had contributed to after step ``step``."""
        return int(np.count_nonzero(self.first_step <= step))

    def state(self) -> ParticipationState:
        return ParticipationState(self.spent.copy(), self.pending.copy(), self.first_step.copy(), self.last_step.copy())

    def restore(self, state: ParticipationState) -> None:
        self.spent = state.spent.copy()
        self.pending = state.pending.copy()
        self.first_step = state.first_step.copy()
        self.last_step = state.last_step.copy()
