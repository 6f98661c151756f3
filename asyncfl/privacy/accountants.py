"""The accountants a scenario can name (``privacy.accountant``, registered in
:data:`asyncfl.config.registries.ACCOUNTANTS`; docs/privacy.md §4): each is a function
``(σ, δ, q, steps) -> ε`` for ``steps`` self-composed releases of the Poisson-subsampled
Gaussian mechanism, evaluated with ``dp-accounting``. Argument checks, the ``inf`` floor and
calibration are in :mod:`asyncfl.privacy.accounting`, which looks these up by name.
"""

from __future__ import annotations

import logging
import math

import dp_accounting
from dp_accounting import pld, rdp


def dp_event(sigma: float, q: float, steps: int) -> dp_accounting.DpEvent:
    """``SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(σ)), T)``."""
    return dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps
    )


def _rdp_epsilon(sigma: float, delta: float, q: float, steps: int) -> float:
    # dp-accounting logs (through absl) every Rényi order whose series fails to converge and
    # that it excludes; those orders only loosen the bound, so the warnings are muted here.
    absl_logger = logging.getLogger("absl")
    level = absl_logger.level
    absl_logger.setLevel(logging.ERROR)
    try:
        return float(rdp.RdpAccountant().compose(dp_event(sigma, q, steps)).get_epsilon(delta))
    finally:
        absl_logger.setLevel(level)


def pld_interval(sigma: float, delta: float, q: float, steps: int) -> float:
    """The PLD ``value_discretization_interval`` used for ``σ`` (rule in the module docstring)."""
    eps_ref = _rdp_epsilon(sigma, delta, q, steps)
    per_step_range = 10.0 / sigma + 1.0 / (2.0 * sigma**2)
    return max(1e-5, min(1e-3, eps_ref / (100.0 * math.sqrt(steps))), per_step_range / 1e5, eps_ref / 1e6)


def rdp_epsilon(sigma: float, delta: float, q: float, steps: int) -> float:
    """``'rdp'``: the Rényi-DP bound on ε (no argument checks: see :func:`epsilon_spent`)."""
    return _rdp_epsilon(sigma, delta, q, steps)


def pld_epsilon(sigma: float, delta: float, q: float, steps: int) -> float:
    """``'pld'``: the privacy-loss-distribution bound on ε with the grid of :func:`pld_interval`
    (the RDP bound where that grid would be coarser than 1; no argument checks: see
    :func:`epsilon_spent`)."""
    interval = pld_interval(sigma, delta, q, steps)
    if interval > 1.0:  # ε_rdp > 1e6 or σ ≲ 2e-3: see the module docstring
        return _rdp_epsilon(sigma, delta, q, steps)
    acc = pld.PLDAccountant(value_discretization_interval=interval)
    return float(acc.compose(dp_event(sigma, q, steps)).get_epsilon(delta))
