"""The participation ledger of a private run, as its sampling assumption and budget ask
(docs/privacy.md §6, §13, §14): the one place the composition root builds it from.

* the participation cap's ``(k, b)`` (the assumption's ``cap`` and ``min_separation``);
* random allocation's allotment (the assumption's trait ``allotment``): an
  :class:`~asyncfl.privacy.allotment.Allotment` drawn from the run's seed;
* a per-client budget ``privacy.client_budget`` (the privacy filter of §14): the cap ``k_B``, the
  most contributions whose realised ε stays within the budget, joins the cap.
"""

from __future__ import annotations

from asyncfl.clients.participation import Participation
from asyncfl.privacy.aggregator import PrivacySetup
from asyncfl.privacy.allotment import Allotment


def ledger_terms(setup: PrivacySetup, seed: int) -> tuple[int | None, int, Allotment | None]:
    """``(cap, min_separation, allotment)`` of the ledger of a private run resolved into
    ``setup`` with the run's ``seed``: the sampling assumption's cap, joined by the budget's
    ``k_B`` (§14), and random allocation's allotment drawn from the seed (§13)."""
    shape = setup.shape
    allotment = None
    if shape.allotment is not None:
        k, t = shape.allotment
        allotment = Allotment(shape.clients, k, t, seed)
    cap = setup.cap
    if setup.budget_participations is not None:  # the privacy filter joins the cap (§14)
        cap = setup.budget_participations if cap is None else min(cap, setup.budget_participations)
    return cap, shape.min_separation, allotment


def stall_reason(ledger: Participation, setup: PrivacySetup, step: int, steps: int, buffer: int, now: float) -> str | None:
    """Why a run whose ledger has an allotment or a budget cannot take step ``step`` (None: the
    participation cap's own message applies)."""
    if ledger.allotment is None and setup.budget_participations is None:
        return None
    n = ledger.spent.size
    parts = []
    if setup.budget_participations is not None:
        retired = int((ledger.spent >= setup.budget_participations).sum())
        parts.append(f"privacy.client_budget = {setup.client_budget}: {retired} of population.clients = {n} clients "
                     f"are retired (their next participation would exceed the budget: k_B = "
                     f"{setup.budget_participations} contributions)")
    if ledger.allotment is not None:
        allotted = int(ledger.allotment.mask(step).sum())
        parts.append(f"privacy.allotted_steps = {ledger.allotment.selected}, privacy.allotment_window = "
                     f"{ledger.allotment.window}: {allotted} clients are allotted to this step")
    return (f"server step {step} of run.steps = {steps} cannot fill (virtual time {now:g}): " + "; ".join(parts)
            + f"; the rest have an upload waiting or cannot be dispatched, and the step needs server.buffer = {buffer} "
            "uploads. The run stops here (status stalled); what it wrote so far is kept")
