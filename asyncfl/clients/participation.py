"""Who may still be dispatched in a private run: participations per client and the one-upload
rule (docs/privacy.md §6).

A private run keeps, per client ``k``, ``spent[k]`` — the server steps it has contributed to
(accepted uploads) — and ``pending[k]`` — whether it has a dispatch whose fate is not decided
yet (in flight, waiting in the open FedBuff buffer, or arrived in the open synchronous round).
A client may be dispatched only when

    not pending[k]  and  spent[k] < k_max          (k_max = ∞ without a participation cap)

which gives, in every case:

* **one upload per client per step.** A client whose upload waits in the open buffer is not
  dispatched again until that step is taken (or the upload is dropped), so no step holds two
  uploads of one client — its sensitivity with respect to that client stays ``S``;
* **at most k_max participations.** A participation is *reserved at dispatch and spent at
  acceptance*: a dispatch needs ``spent + pending < k_max``; an accepted upload moves the
  reservation to ``spent``; every other fate — a stale drop, an offline drop, a cancelled
  straggler, a rejection — releases it unspent. So ``spent[k] ≤ k_max`` always, and an upload
  that would exceed the cap is never produced: its client was never dispatched.

Every fate passes through :meth:`Participation.settle` (one per ``updates.csv`` row), so the
rule holds for every protocol, for availability and for replayed traces alike. The ledger is
declared state (:class:`ParticipationState`, part of ``SimState``), together with ``first_step``:
the server step at which some client first reached ``j + 1`` participations (the ε curve of
``privacy.csv`` under the cap).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class ParticipationState(NamedTuple):
    """The ledger as data (docs/architecture.md §5)."""

    spent: np.ndarray  # int64 (N,): server steps each client has contributed to
    pending: np.ndarray  # bool (N,): the client has a dispatch whose fate is not decided yet
    first_step: np.ndarray  # int64 (m,): step at which some client first reached j + 1 participations


class Participation:
    """Participations per client and who may be dispatched (module docstring). ``cap`` is
    ``k_max`` (None: no cap, only the one-upload rule)."""

    def __init__(self, clients: int, cap: int | None) -> None:
        if cap is not None and cap < 1:
            raise ValueError(f"participation cap {cap}: must be at least 1")
        self.cap = cap
        self.spent = np.zeros(clients, dtype=np.int64)
        self.pending = np.zeros(clients, dtype=bool)
        self.first_step = np.zeros(0, dtype=np.int64)

    # -- who may be dispatched -------------------------------------------------------------------
    def eligible(self, client: int) -> bool:
        return not self.pending[client] and (self.cap is None or self.spent[client] < self.cap)

    def eligible_mask(self) -> np.ndarray:
        mask = ~self.pending
        if self.cap is not None:
            mask &= self.spent < self.cap
        return mask

    def exhausted(self) -> bool:
        """Under a cap: no client can be dispatched, now or later, without exceeding it (every
        client has reached the cap or waits for the open step)."""
        return self.cap is not None and not self.eligible_mask().any()

    # -- fates ------------------------------------------------------------------------------------
    def reserve(self, client: int) -> None:
        """A dispatch of ``client``; refused (an engine error) if it is not eligible."""
        if not self.eligible(client):
            raise RuntimeError(
                f"client {client} dispatched while not eligible (pending: {bool(self.pending[client])}, "
                f"participations {int(self.spent[client])} of cap {self.cap})"
            )
        self.pending[client] = True

    def settle(self, client: int, accepted: bool, step: int) -> None:
        """The fate of ``client``'s pending dispatch: accepted by server step ``step`` (the
        participation is spent) or not (released unspent)."""
        self.pending[client] = False
        if accepted:
            self.spent[client] += 1
            if self.spent[client] > self.first_step.size:
                self.first_step = np.append(self.first_step, np.int64(step))

    # -- reports ------------------------------------------------------------------------------------
    def most_by(self, step: int) -> int:
        """The most server steps any one client had contributed to after step ``step``."""
        return int(np.count_nonzero(self.first_step <= step))

    def state(self) -> ParticipationState:
        return ParticipationState(self.spent.copy(), self.pending.copy(), self.first_step.copy())

    def restore(self, state: ParticipationState) -> None:
        self.spent = state.spent.copy()
        self.pending = state.pending.copy()
        self.first_step = state.first_step.copy()
