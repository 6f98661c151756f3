"""Stopping a study's runs at their target (docs/studies.md §2.1; the stop itself:
docs/run-directory.md §14).

A study that reads from a run only *when* its curve first reaches one or more targets (the
crossings of §2) need not run it further: :func:`target_stop` turns the study's targets
``a_1 … a_m`` into the ``run.stop`` table that ends the run at the first evaluation with

    metric ≥ max_j a_j          (``higher_is_better``; a loss: metric ≤ min_j a_j).

Nothing a crossing reads is lost, for every target. Let ``k*`` be the first evaluation at or
above the highest target ``a*``. For any target ``a_j ≤ a*`` the first index at or above it is
``k_j ≤ k*``, so its crossing — the interval ``(s_{k_j − 1}, s_{k_j}]`` and the interpolation
between them — reads only evaluations ``0 … k*``, which the stopped run holds exactly as the
run to ``T`` does (the watch takes no random draw: the stopped run's files are a prefix of the
full run's). Censoring stays right: a run that stops at its target has reached it at its last
evaluation (observed, at its crossing); a run that never reaches ``a*`` is not stopped by the
target, ends at ``T`` and is right-censored there for ``a*`` exactly as without the stop (lower
targets it reached are observed as before). What a stopped run does not hold is everything after
``k*`` — its final accuracy, its ε spent, the bias of all ``T`` steps — so a study stops its runs
only where it reads their crossings alone, and records that it did (:func:`stopped_at_target`
reads a run's ``summary.json``).
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Mapping


def target_stop(targets: Iterable[float], metric: str = "accuracy", *, higher_is_better: bool = True) -> dict[str, Any]:
    """The ``run.stop`` table that ends a run at the first evaluation reaching every one of
    ``targets`` on ``metric``: ``{"target": {"metric": metric, "at_least": max(targets)}}``
    (``higher_is_better=False``, a loss: ``at_most = min(targets)``). Targets that are not finite
    are refused (a ValueError naming them), as is an empty list."""
    values = [float(t) for t in targets]
    if not values:
        raise ValueError("target_stop: no target given")
    bad = [t for t in values if not math.isfinite(t)]
    if bad:
        raise ValueError(f"target_stop: targets must be finite, got {bad}")
    bound = {"at_least": max(values)} if higher_is_better else {"at_most": min(values)}
    return {"target": {"metric": metric, **bound}}


def stopped_at_target(summary: Mapping[str, Any]) -> bool:
    """Whether the run whose ``summary.json`` is ``summary`` ended at its target stop (status
    ``stopped``, ``stop.reason = "target"``)."""
    stop = summary.get("stop")
    return summary.get("status") == "stopped" and isinstance(stop, Mapping) and stop.get("reason") == "target"
