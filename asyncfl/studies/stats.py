"""Paired comparisons over seeds, for the tables of any study built on the engine
(docs/architecture.md §9; docs/run-directory.md §11).

Two methods run on the same seeds (the same data split and initial model) are compared seed by
seed. With ``b_s`` and ``r_s`` the base's and the rule's value of a "smaller is better" quantity
(steps or virtual time to a target) on seed ``s``, the per-seed speed-up is ``b_s / r_s``; over
the ``n`` seeds where both are finite and positive

    speed-up = exp(mean_s ln(b_s / r_s)),   95 % interval exp(m ± t_{0.975, n−1} · s_ln / √n),

the geometric mean with the Student-t interval of the mean log ratio (:func:`asyncfl.figures.ci.mean_ci`
on ``ln(b_s / r_s)``). A seed where only the rule reached its target bounds its ratio from below
and is counted apart, as are the seeds where only the base, or neither, did.

Leaving those seeds out of the ratio favours the side that failed; the study method
(docs/studies.md §4–§5, :func:`asyncfl.studies.survival.paired_rmst_ratio`) counts every seed,
an unreached one at the horizon. This function stays for the reports already built on it.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping, NamedTuple

from asyncfl.figures.ci import mean_ci

__all__ = ["PairedSpeedup", "paired_speedup"]


class PairedSpeedup(NamedTuple):
    """Speed-up of one rule over another, paired by seed (module docstring): ``geo`` the geometric
    mean of the per-seed ratios with its 95 % interval ``[low, high]`` over the ``n`` seeds where
    both reached the target; ``lower_bounds`` = seeds where only the rule did (their ratio is at
    least ``steps / steps_rule``), ``base_only`` / ``neither`` the others."""

    geo: float
    low: float
    high: float
    n: int
    lower_bounds: int
    base_only: int
    neither: int

    def text(self, rule: str = "MA", base: str = "momentum") -> str:
        """``2.00× [1.31, 3.05]``, with the seeds left out named (``rule`` / ``base``: the two sides)."""
        if self.n == 0:
            extra = f"{self.lower_bounds} seed(s) only {rule} reached" if self.lower_bounds else "no seed where both reached"
            return f"— ({extra})"
        ci = f" [{self.low:.2f}, {self.high:.2f}]" if self.n > 1 else " (n = 1)"
        notes = []
        if self.lower_bounds:
            notes.append(f"+{self.lower_bounds} only {rule} reached")
        if self.base_only:
            notes.append(f"{self.base_only} only {base} reached")
        return f"{self.geo:.2f}×{ci}" + (f" ({'; '.join(notes)})" if notes else "")


def paired_speedup(base: Iterable[Mapping[str, Any]], rule: Iterable[Mapping[str, Any]], key: str = "steps_to_target",
                   by: str = "seed") -> PairedSpeedup:
    """:class:`PairedSpeedup` of the rows ``rule`` over the rows ``base`` on column ``key`` (NaN:
    the target was not reached), paired by column ``by``; a rule row without its base is left out."""
    by_seed = {r[by]: r for r in base}
    logs, lower, base_only, neither = [], 0, 0, 0
    for r in rule:
        b = by_seed.get(r[by])
        if b is None:
            continue
        rb, rr = b[key], r[key]
        both = math.isfinite(rb) and math.isfinite(rr) and rr > 0 and rb > 0
        if both:
            logs.append(math.log(rb / rr))
        elif math.isfinite(rr):
            lower += 1
        elif math.isfinite(rb):
            base_only += 1
        else:
            neither += 1
    ci = mean_ci(logs)
    if ci.n == 0:
        return PairedSpeedup(math.nan, math.nan, math.nan, 0, lower, base_only, neither)
    half = ci.half if math.isfinite(ci.half) else math.nan
    return PairedSpeedup(math.exp(ci.mean), math.exp(ci.mean - half), math.exp(ci.mean + half), ci.n, lower, base_only, neither)
