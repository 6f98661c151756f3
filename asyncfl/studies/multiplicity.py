"""Multiplicity: Holm's step-down adjustment of a family of p-values (docs/studies.md §9).

With the family's ``m`` p-values sorted ascending, ``p_(1) ≤ … ≤ p_(m)``, the Holm-adjusted values
are

    p̃_(i) = min(1, max_{j ≤ i} (m − j + 1) · p_(j)),

and a hypothesis is rejected at level α exactly when its adjusted value is ≤ α; this controls the
family-wise error rate at α under any dependence between the tests (Holm 1979). A planned
comparison that was not run enters with ``p = 1``: the family is the one the plan fixed.
"""

from __future__ import annotations

import math
from typing import Sequence

__all__ = ["holm"]


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given (module docstring). A NaN (a comparison that
    could not be tested) counts as 1."""
    p = [1.0 if not math.isfinite(v) else float(v) for v in pvalues]
    if any(v < 0 or v > 1 for v in p):
        raise ValueError(f"p-values must lie in [0, 1] (got {pvalues!r})")
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    adjusted = [1.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p[i]))
        adjusted[i] = running
    return adjusted
