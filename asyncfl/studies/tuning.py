"""Tuning a learning rate on held-out seeds: the seed split, the ×2 refinement of a coarse grid,
the choice and its near-ties, and how wide the good range is (docs/studies.md §7).

* **Held-out seeds.** The learning rate is chosen on tuning seeds that no evaluation uses, so the
  evaluation does not reward the luck of the seed it was tuned on.
* **Refinement.** After a coarse grid, the rates ``best / f`` and ``best · f`` (``f = 2``) are
  run, and the choice repeated until both neighbours at ``×f`` have been tried: the optimum is
  then known to within a factor ``f``. A best at the edge of the grid is also extended beyond it
  by the grid's spacing there (the ratio of its two outermost values on that side).
* **Choice.** The score of a rate is its mean over the tuning seeds, ``ȳ(η) = mean_s y_s(η)``, in
  the reported metric (restricted steps to target, smaller is better; or final accuracy); the
  best rate is ``argmin`` (or ``argmax``) of ``ȳ``, the smallest rate on an exact tie. The
  rates within one standard error ``s_best / √n`` of the best mean are its near-ties, reported
  but not used to choose.
* **Sensitivity.** With ``ȳ`` interpolated linearly in ``x = log₂ η`` between the tried rates,
  the width (in ``log₂ η``) of the connected range around the best where ``ȳ`` stays within a
  tolerance ``τ`` of the best (``ȳ ≥ ȳ_best − τ``, or ``≤ ȳ_best + τ`` when smaller is better):
  how far the rate may be off before the score drops by ``τ`` — how much tuning a rule needs.
"""

from __future__ import annotations

import math
from typing import Iterable, Mapping, NamedTuple, Sequence

import numpy as np
from numpy.typing import NDArray

__all__ = ["Choice", "SeedSplit", "choose", "refine", "sensitivity", "split_seeds"]

#: Two rates closer than this (relative) are the same rate.
SAME = 1e-9


class SeedSplit(NamedTuple):
    """Evaluation seeds and the tuning seeds held out from them (docs/studies.md §7)."""

    evaluation: tuple[int, ...]
    tuning: tuple[int, ...]


def split_seeds(evaluation: int, tuning: int, *, tuning_start: int = 1000) -> SeedSplit:
    """Seeds ``0 … evaluation−1`` for the evaluation and ``tuning_start …`` for tuning, disjoint
    (docs/studies.md §7); adding evaluation seeds later never reaches the tuning ones as long as
    there are fewer than ``tuning_start``."""
    if evaluation < 1 or tuning < 1:
        raise ValueError(f"evaluation = {evaluation}, tuning = {tuning}: each needs at least one seed")
    if evaluation > tuning_start:
        raise ValueError(f"evaluation = {evaluation} seeds would reach the tuning seeds from tuning_start = {tuning_start}")
    return SeedSplit(tuple(range(evaluation)), tuple(range(tuning_start, tuning_start + tuning)))


def _rates(values: Iterable[float], name: str) -> list[float]:
    rates = sorted(float(v) for v in values)
    if not rates:
        raise ValueError(f"{name}: at least one learning rate is needed")
    if not all(math.isfinite(v) and v > 0 for v in rates):
        raise ValueError(f"{name}: learning rates must be finite and > 0 (got {rates})")
    return rates


def _same(a: float, b: float) -> bool:
    return abs(a - b) <= SAME * max(abs(a), abs(b))


def refine(grid: Iterable[float], best: float, factor: float = 2.0) -> list[float]:
    """The rates to run next around ``best`` of the tried ``grid`` (module docstring;
    docs/studies.md §7): ``best / factor`` and ``best · factor``, and beyond an edge
    ``best`` divided or multiplied by the grid's ratio there, less those already tried (within
    1e-9 relative); sorted. An empty list: the optimum is resolved to ``×factor``."""
    rates = _rates(grid, "grid")
    if not (math.isfinite(factor) and factor > 1):
        raise ValueError(f"factor = {factor}: must be finite and > 1")
    if not any(_same(best, r) for r in rates):
        raise ValueError(f"best = {best}: must be one of the grid's rates {rates}")
    new = [best / factor, best * factor]
    if len(rates) > 1 and _same(best, rates[0]):
        new.append(best / (rates[1] / rates[0]))
    if len(rates) > 1 and _same(best, rates[-1]):
        new.append(best * (rates[-1] / rates[-2]))
    out: list[float] = []
    for r in sorted(new):
        if not any(_same(r, t) for t in rates + out):
            out.append(r)
    return out


class Choice(NamedTuple):
    """The chosen rate (docs/studies.md §7): ``lr`` with mean tuning score ``score``; ``edge`` when
    it is the smallest or largest rate tried (the optimum may lie beyond); ``ties`` every rate
    (the chosen one included, ascending) whose mean is within ``se`` (the standard error of the
    chosen rate's mean; NaN with one tuning seed, when only exact ties count) of the best."""

    lr: float
    score: float
    edge: bool
    ties: tuple[float, ...]
    se: float = math.nan


def _table(scores: Mapping[float, Sequence[float]]) -> tuple[list[float], list[NDArray[np.float64]], NDArray[np.float64]]:
    """The rates ascending, each one's tuning scores, and its mean (NaN if any score is not finite)."""
    rates = _rates(scores.keys(), "scores")
    by_rate = {float(k): np.asarray(v, dtype=np.float64) for k, v in scores.items()}
    rows = [by_rate[r] for r in rates]
    for r, row in zip(rates, rows):
        if row.ndim != 1 or row.size == 0:
            raise ValueError(f"scores[{r:g}]: one score per tuning seed is needed")
    means = np.array([row.mean() if np.all(np.isfinite(row)) else math.nan for row in rows])
    return rates, rows, means


def choose(scores: Mapping[float, Sequence[float]], smaller_is_better: bool) -> Choice:
    """The rate with the best mean score over the tuning seeds, its near-ties within one standard
    error, and whether it sits at an edge of the grid (module docstring; docs/studies.md §7). A
    rate with a non-finite score (a diverged tuning run) has no mean and is never chosen."""
    rates, rows, means = _table(scores)
    if not np.any(np.isfinite(means)):
        raise ValueError("scores: every learning rate has a non-finite score (all tuning runs diverged?)")
    sign = 1.0 if smaller_is_better else -1.0
    keyed = np.where(np.isfinite(means), sign * means, math.inf)
    i = int(np.argmin(keyed))  # the first (smallest) rate on an exact tie
    row = rows[i]
    se = float(row.std(ddof=1) / math.sqrt(row.size)) if row.size > 1 else math.nan
    reach = se if math.isfinite(se) else 0.0
    ties = tuple(r for r, m in zip(rates, means) if math.isfinite(m) and abs(m - means[i]) <= reach)
    return Choice(rates[i], float(means[i]), i in (0, len(rates) - 1), ties, se)


def sensitivity(scores: Mapping[float, Sequence[float]], tolerance: float, *, smaller_is_better: bool = False,
                relative: bool = False) -> float:
    """The width in ``log₂ η`` of the connected range around the best rate where the mean score,
    linearly interpolated in ``log₂ η`` between tried rates, stays within ``tolerance`` of the best
    (module docstring; docs/studies.md §7). Higher scores are better unless ``smaller_is_better``
    (give it for steps to target); ``relative`` reads ``tolerance`` as a fraction of ``|best|``.
    The range stops at the grid's ends (a range that reaches one is a lower bound) and at a rate
    without a finite mean. 0: only the best rate is within tolerance and its neighbours are
    tried at the same point — the score falls off at once."""
    if not (math.isfinite(tolerance) and tolerance >= 0):
        raise ValueError(f"tolerance = {tolerance}: must be finite and ≥ 0")
    choice = choose(scores, smaller_is_better)
    rates, _, y = _table(scores)
    x = np.log2(rates)
    slack = tolerance * abs(choice.score) if relative else tolerance
    # g(η) = (how far inside the tolerance band ȳ(η) is): ≥ 0 inside
    g = (choice.score + slack - y) if smaller_is_better else (y - (choice.score - slack))
    i = rates.index(choice.lr)

    def edge(step: int) -> float:
        j = i
        while 0 <= j + step < len(x):
            k = j + step
            if not math.isfinite(g[k]):
                return float(x[j])
            if g[k] < 0:  # the band is left between j and k, where g crosses 0
                return float(x[j] + g[j] / (g[j] - g[k]) * (x[k] - x[j]))
            j = k
        return float(x[j])

    return edge(+1) - edge(-1)
