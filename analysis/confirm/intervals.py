"""The paired t interval the confirmatory report prints for a comparison (docs/confirm.md §3), on
arrays alone, so the report and the measurement of its coverage (:mod:`analysis.confirm.coverage`,
docs/confirm.md §3.1) apply one and the same procedure.

* ``log_time``: ``d_s = log R_base,s − log R_rule,s`` with ``R = min(T̂, h)`` (an unreached run
  counted at ``h``); the paired t-test and interval of ``d̄`` at ``level``
  (:func:`asyncfl.studies.effects.paired_t`); the report prints ``exp`` of the mean and ends.
* ``final_accuracy``: ``d_s = acc_rule,s − acc_base,s``; the paired t-test and interval of ``d̄``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from asyncfl.studies.effects import PairedTest, paired_t

__all__ = ["accuracy_t", "log_time_t"]


def log_time_t(base_restricted: ArrayLike, rule_restricted: ArrayLike, level: float) -> PairedTest:
    """The paired t interval, on the log scale, of ``d_s = log R_base,s − log R_rule,s`` at
    ``level`` (module docstring): ``d̄ ± t_{(1+level)/2, n−1} · s_d / √n``. ``R`` are the
    restricted times ``min(T̂, h)``, seed by seed."""
    d = np.log(np.asarray(base_restricted, dtype=np.float64)) - np.log(np.asarray(rule_restricted, dtype=np.float64))
    return paired_t(d, level)


def accuracy_t(base_accuracy: ArrayLike, rule_accuracy: ArrayLike, level: float) -> PairedTest:
    """The paired t interval of ``d_s = acc_rule,s − acc_base,s`` at ``level`` (module docstring;
    a seed where either is not finite — a diverged run — is left out)."""
    return paired_t(np.asarray(rule_accuracy, dtype=np.float64) - np.asarray(base_accuracy, dtype=np.float64), level)
