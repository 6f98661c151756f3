"""The oracle count mode of the review's ablation (docs/privacy.md §3, "Oracle counts"): the
server's ``Ŵ`` is the exact ``W`` while the model update keeps exactly the noise of the private
run (the same draws: the noisy counts are still decoded, then replaced).

It is registered through the public path (docs/extending.md §3) by naming it in a scenario,
``privacy.counts = "analysis.ma_review.oracle:ORACLE_COUNTS"``, never as a built-in: it is not a
private mode, and a run that names it says so in its privacy statement (``NOT PRIVATE: …``).
"""

from __future__ import annotations

import numpy as np

from asyncfl import Component, returns
from asyncfl.components.traits import CountsTraits


def exact_counts(c_hat: np.ndarray, C: float, exact: np.ndarray) -> np.ndarray:
    """The step's exact counts ``C_{t,t−τ}``, whatever the noisy ``ĉ`` (which is ignored)."""
    return np.asarray(exact, dtype=np.float64).copy()


#: the builder (``build(cfg, ctx)``, docs/extending.md §2): the post-processing above
build_exact_counts = returns(exact_counts)

#: the component a scenario names as ``analysis.ma_review.oracle:ORACLE_COUNTS``
ORACLE_COUNTS = Component("counts", "analysis.ma_review.oracle:ORACLE_COUNTS", "analysis.ma_review.oracle:build_exact_counts",
                          traits=CountsTraits(exact=True), summary="analysis oracle: the exact counts (not private)")
