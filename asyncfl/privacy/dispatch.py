"""The participation ledger of a private run, as its sampling assumption and budget ask
(docs/privacy.md §6, §13, §14): the one place the engine builds it from.

* the participation cap's ``(k, b)`` (the assumption's ``cap`` and ``min_separation``);
* random allocation's allotment (the assumption's trait ``allotment``): an
  :class:`~asyncfl.privacy.allotment.Allotment` drawn from the run's seed;
* a per-client budget ``privacy.client_budget`` (the privacy filter of §14): the cap ``k_B``, the
  most contributions whose realised ε stays within the budget, joins the cap.
"""

from __future__ import annotations

from typing import Any, Callable

from asyncfl.clients.participation import Participation
from asyncfl.privacy.aggregator import PrivacySetup
from asyncfl.privacy.allotment import Allotment


def private_ledger(scenario: Any, setup: PrivacySetup, version: Callable[[], int]) -> Participation:
    """The ledger of a private run of ``scenario`` resolved into ``setup``."""
    shape = setup.shape
    allotment = None
    if shape.allotment is not None:
        k, t = shape.allotment
        allotment = Allotment(shape.clients, k, t, scenario.seed)
    return Participation(shape.clients, setup.cap, shape.min_separation, version, allotment=allotment)
