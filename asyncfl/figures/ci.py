"""Mean ± 95 % confidence interval over seeds, shared by every sweep and study figure and table
(docs/run-directory.md §11).

For ``n`` finite values with mean ``x̄`` and sample standard deviation ``s`` (``ddof = 1``) the
interval is ``x̄ ± t_{1−α/2, n−1} · s / √n`` (Student's t with ``n − 1`` degrees of freedom,
``α = 1 − confidence``): the interval for the mean of seeds drawn from a normal population with
unknown variance. One value has no interval (half-width NaN); no value has no mean. Non-finite
values (a diverged run) are left out and counted.
"""

from __future__ import annotations

import math
from typing import Iterable, NamedTuple

import numpy as np
from scipy import stats


class MeanCI(NamedTuple):
    """``mean`` ± ``half`` (the 95 % interval's half-width) over ``n`` finite values."""

    mean: float
    half: float
    n: int

    @property
    def low(self) -> float:
        return self.mean - self.half

    @property
    def high(self) -> float:
        return self.mean + self.half

    def text(self, digits: int = 3) -> str:
        """``0.812 ± 0.021 (n = 3)``; ``0.812 (n = 1)``; ``—`` without values."""
        if self.n == 0:
            return "—"
        if not math.isfinite(self.half):
            return f"{self.mean:.{digits}g} (n = 1)"
        return f"{self.mean:.{digits}g} ± {self.half:.{digits}g} (n = {self.n})"


def mean_ci(values: Iterable[float], confidence: float = 0.95) -> MeanCI:
    """Mean and Student-t confidence half-width of the finite ``values`` (see module docstring)."""
    if not 0 < confidence < 1:
        raise ValueError(f"confidence = {confidence}: must be in (0, 1)")
    x = np.asarray([v for v in values if v is not None], dtype=np.float64)
    x = x[np.isfinite(x)]
    n = int(x.size)
    if n == 0:
        return MeanCI(math.nan, math.nan, 0)
    mean = float(x.mean())
    if n == 1:
        return MeanCI(mean, math.nan, 1)
    sem = float(x.std(ddof=1)) / math.sqrt(n)
    return MeanCI(mean, float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sem, n)


def mean_ci_columns(rows: np.ndarray, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Column-wise :func:`mean_ci` of a (seeds × points) array: ``(means, half-widths)``."""
    rows = np.atleast_2d(np.asarray(rows, dtype=np.float64))
    out = [mean_ci(rows[:, j], confidence) for j in range(rows.shape[1])]
    return np.array([c.mean for c in out]), np.array([c.half for c in out])
