"""Per-client privacy budgets: a privacy filter (docs/privacy.md §14).

``privacy.client_budget = ε_max``: a client whose next participation would take its realised ε
(its contributions composed without amplification, §11) above ``ε_max`` is no longer dispatched —
it is *retired*. Every contribution is the same Gaussian release at σ, and a client's realised ε
grows with its count, so the filter is the count

    k_B = max{ k ≤ T : ε(client_release(k)) ≤ ε_max }

computed before the run (:func:`budget_participations`) and enforced by the participation ledger
like a cap (a client with ``k_B`` contributions is not eligible). :func:`retirements` reports how
many clients were retired and at which server steps (the step of their ``k_B``-th contribution).
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from asyncfl.privacy import accounting
from asyncfl.privacy.accountants import Releases


def budget_participations(release: Callable[[int], tuple[Releases, float]], budget: float, delta: float,
                          accountant: str, steps: int) -> int:
    """``k_B``: the most contributions (at most ``steps``) whose ε at ``δ`` stays within
    ``budget`` (0 if even one exceeds it); ε is non-decreasing in the count, so a doubling then
    bisection search over ``1 … steps``."""
    def within(k: int) -> bool:
        return accounting.epsilon_of(*release(k), delta, accountant) <= budget

    if not within(1):
        return 0
    lo, hi = 1, 2
    while hi <= steps and within(hi):
        lo, hi = hi, 2 * hi
    hi = min(hi, steps + 1)  # within(lo), and not within(hi) unless hi = steps + 1
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if within(mid) else (lo, mid)
    return lo


def retirements(setup: Any, participations: np.ndarray | None, last_step: np.ndarray | None) -> dict[str, Any]:
    """``client_budget``, ``budget_participations`` (k_B), ``clients_retired`` and
    ``retired_at``: ``[[step, clients retired at it], …]`` (the step of a retired client's k_B-th
    contribution, its last), ascending."""
    k_b = setup.budget_participations
    out: dict[str, Any] = {"client_budget": setup.client_budget, "budget_participations": k_b,
                           "clients_retired": None, "retired_at": None}
    if participations is None or k_b is None:
        return out
    retired = np.asarray(participations) >= k_b
    out["clients_retired"] = int(np.count_nonzero(retired))
    if last_step is not None:
        steps, counts = np.unique(np.asarray(last_step)[retired], return_counts=True)
        out["retired_at"] = [[int(s), int(c)] for s, c in zip(steps, counts)]
    return out
