"""The step at which a curve first reaches a target, read from evaluations at some steps
(docs/studies.md §2).

A run is evaluated at steps ``s_0 < s_1 < … < s_m`` with values ``v_0, …, v_m`` (accuracy, or a
loss with ``higher_is_better=False``). Let ``i`` be the first index with ``v_i ≥ target``. The
true crossing step ``T`` is known only to lie in the interval

    (s_{i−1}, s_i]          (interval-censored: below the target at s_{i−1}, at/above it at s_i)

and its point estimate is the linear interpolation between those two evaluations,

    T̂ = s_{i−1} + (target − v_{i−1}) / (v_i − v_{i−1}) · (s_i − s_{i−1}).

A curve already at the target at step 0 (``i = 0``, ``s_0 = 0``) has ``T = 0`` exactly; one first
evaluated later than step 0 and already at the target there is only known to cross in
``(0, s_0]``, its point estimate ``s_0`` (nothing below the target to interpolate from). A curve
that never reaches the target is right-censored at its horizon ``h`` (the last evaluated step, or
the step the run was meant to last to): ``T > h``, recorded as ``low = h``, ``high = ∞``,
``point = h``. A value that is not finite (an evaluation of a diverged model) counts as not at the
target; the interpolation never starts from one (the point estimate is then ``s_i``).
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

__all__ = ["Crossing", "crossing"]


class Crossing(NamedTuple):
    """When a curve first reaches its target (module docstring; docs/studies.md §2): the crossing
    step lies in ``(low, high]``; ``point`` is the interpolated estimate; a curve that never
    reached it has ``reached = False``, ``low = point = horizon``, ``high = inf``. A crossing at
    step 0 is ``low = high = point = 0``. ``horizon``: the last step the run covers."""

    low: float
    high: float
    point: float
    reached: bool
    horizon: float

    @property
    def width(self) -> float:
        """``high − low``: how finely the evaluations resolve this crossing (``inf`` if censored)."""
        return self.high - self.low


def crossing(steps: Sequence[float], values: Sequence[float], target: float, *, higher_is_better: bool = True,
             horizon: float | None = None) -> Crossing:
    """The first step at which ``values`` (evaluated at ``steps``) reach ``target``: the interval
    ``(low, high]`` between the last evaluation below the target and the first at or above it, the
    linear interpolation ``point`` between them, or right-censoring at ``horizon`` when the target
    is never reached (module docstring; docs/studies.md §2).

    ``higher_is_better=False`` reads "at or below the target" instead (a loss). ``horizon`` (default:
    the last evaluated step) is where an unreached curve is censored: give the run's planned length
    for a run that stopped early (diverged), so that it is counted as not reaching the target
    within the study's horizon.
    """
    s = np.asarray(steps, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if s.ndim != 1 or v.ndim != 1 or s.size != v.size:
        raise ValueError(f"steps and values must be 1-D sequences of the same length (got {s.shape} and {v.shape})")
    if s.size == 0:
        raise ValueError("steps: at least one evaluation is needed")
    if not np.all(np.isfinite(s)) or s[0] < 0 or np.any(np.diff(s) <= 0):
        raise ValueError("steps must be finite, ≥ 0 and strictly increasing")
    if not math.isfinite(target):
        raise ValueError(f"target = {target}: must be finite")
    last = float(s[-1])
    h = last if horizon is None else float(horizon)
    if not h >= last:
        raise ValueError(f"horizon = {horizon}: must be at least the last evaluated step {last:g}")
    sign = 1.0 if higher_is_better else -1.0
    at = np.isfinite(v) & (sign * v >= sign * target)
    if not at.any():
        return Crossing(h, math.inf, h, False, h)
    i = int(np.argmax(at))
    hi = float(s[i])
    if i == 0:
        return Crossing(0.0, hi, hi, True, h)  # s_0 = 0 gives (0, 0, 0): reached at the start
    lo, v_lo, v_hi = float(s[i - 1]), float(v[i - 1]), float(v[i])
    if not math.isfinite(v_lo):
        return Crossing(lo, hi, hi, True, h)
    point = lo + (target - v_lo) / (v_hi - v_lo) * (hi - lo)
    return Crossing(lo, hi, min(max(point, lo), hi), True, h)
