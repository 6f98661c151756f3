"""Post-processing of one row of noisy staleness counts ``ĉ_τ`` (``privacy.counts``, registered
in :data:`asyncfl.config.registries.COUNT_MODES`; docs/privacy.md §3). Each mode is a function
``(ĉ, C) -> c`` of the released noisy sum alone, so it costs no privacy.
"""

from __future__ import annotations

import numpy as np

from asyncfl.components.contracts import returns

def project_simplex(c_hat: np.ndarray, C: float) -> np.ndarray:
    """Euclidean projection of a row onto ``{c ≥ 0, Σ c = C}`` (sort-based, Duchi et al. 2008).

    Because the true counts lie in that set and projection onto a convex set is
    non-expansive, ``‖proj(ĉ) − c‖ ≤ ‖ĉ − c‖`` for every noise draw."""
    v = np.asarray(c_hat, dtype=np.float64)
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - C
    idx = np.arange(1, v.size + 1)
    rho = np.nonzero(u - css / idx > 0)[0][-1]
    theta = css[rho] / (rho + 1.0)
    return np.maximum(v - theta, 0.0)


def counts_raw(c_hat: np.ndarray, C: float) -> np.ndarray:
    """``'raw'``: unchanged (unbiased, may be negative and need not sum to ``C``)."""
    return np.array(c_hat, dtype=np.float64)


def counts_clamp(c_hat: np.ndarray, C: float) -> np.ndarray:
    """``'clamp'``: ``max(ĉ_τ, 0)``."""
    return np.maximum(np.asarray(c_hat, dtype=np.float64), 0.0)


def counts_project(c_hat: np.ndarray, C: float) -> np.ndarray:
    """``'project'``: clamp, then rescale the row to sum ``C`` (every step consumes exactly
    ``C`` updates). If nothing is left after clamping, the row is spread uniformly, ``C/L`` per
    staleness: with no information, the centroid of the feasible set ``{c ≥ 0, Σc = C}`` has the
    smallest worst-case L2 error, whereas putting all ``C`` on ``τ = 0`` would assert "no
    staleness" and switch off the correction MA exists for."""
    c = np.maximum(np.asarray(c_hat, dtype=np.float64), 0.0)
    total = c.sum()
    if total <= 0.0:
        return np.full_like(c, C / c.size)
    return c / total * C  # divide first: no overflow when total is subnormal


# the count post-processing components' builders (asyncfl.components.builtin): build(cfg, ctx) -> postprocess
build_raw = returns(counts_raw)
build_clamp = returns(counts_clamp)
build_project = returns(counts_project)
build_simplex = returns(project_simplex)
