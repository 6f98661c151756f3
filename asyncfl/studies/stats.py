"""Summaries over seeds (docs/architecture.md §9): the mean and a Student-t 95 % confidence
interval, used by every table and figure that aggregates runs."""

from __future__ import annotations

import math
from typing import Iterable, NamedTuple

from scipy import stats


class MeanCI(NamedTuple):
    """``mean ± half`` is the two-sided 95 % interval of the mean of ``n`` values:
    ``half = t_{0.975, n−1} · s / √n`` with ``s`` the sample standard deviation (NaN for n < 2)."""

    mean: float
    half: float
    n: int

    @property
    def low(self) -> float:
        return self.mean - self.half

    @property
    def high(self) -> float:
        return self.mean + self.half


def mean_ci95(values: Iterable[float]) -> MeanCI:
    """The mean and 95 % CI half-width of the finite ``values`` (non-finite ones are left out)."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    n = len(xs)
    if n == 0:
        return MeanCI(math.nan, math.nan, 0)
    mean = sum(xs) / n
    if n < 2:
        return MeanCI(mean, math.nan, 1)
    s = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    return MeanCI(mean, float(stats.t.ppf(0.975, n - 1)) * s / math.sqrt(n), n)
