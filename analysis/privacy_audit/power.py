"""What the one-run audit can prove about a Gaussian mechanism (docs/privacy.md §16): the power
computation behind the audit's size.

For a known-schedule canary of a Gaussian mechanism with signal-to-noise ``μ`` (one release:
``μ = S_Δ/(σS)``), the score is ``N(μ, 1)`` when the canary is included and ``N(0, 1)`` when not,
each with probability ½. Guessing "included" above a threshold ``τ₊`` and "not included" below
``τ₋`` on fractions ``f₊``, ``f₋`` of the ``m`` canaries gives, in expectation::

    f₊ = ½ (Φ̄(τ₊ − μ) + Φ̄(τ₊)),   precision₊ = Φ̄(τ₊ − μ) / (Φ̄(τ₊ − μ) + Φ̄(τ₊))
    f₋ = ½ (Φ(τ₋) + Φ(τ₋ − μ)),     precision₋ = Φ(τ₋) / (Φ(τ₋) + Φ(τ₋ − μ))

``r = m (f₊ + f₋)`` guesses of which ``v = m (f₊ precision₊ + f₋ precision₋)`` are right; the
expected audit proves :func:`~analysis.privacy_audit.bound.epsilon_lower_bound` of ``(m, r, v)``.
:func:`attainable` is the best of that over the guess fractions: the most an audit of ``m``
canaries can be expected to prove.
"""

from __future__ import annotations

from scipy import optimize, stats

from analysis.privacy_audit.bound import epsilon_lower_bound


def expected_counts(mu: float, m: int, guess_in: float, guess_out: float) -> tuple[int, int]:
    """``(r, v)`` of the expected audit (module docstring), rounded down. The pair ``N(0, 1)``,
    ``N(μ, 1)`` mirrors about ``μ/2``, so the lower tail holding a fraction ``f`` has the precision
    of the upper tail holding ``f``: one threshold search serves both."""
    r, v = 0.0, 0.0
    for frac in (guess_in, guess_out):
        if frac > 0:
            tau = optimize.brentq(lambda t: 0.5 * (stats.norm.sf(t - mu) + stats.norm.sf(t)) - frac, -40.0, 40.0)
            right = stats.norm.sf(tau - mu) / (stats.norm.sf(tau - mu) + stats.norm.sf(tau))
            r += m * frac
            v += m * frac * right
    return int(r), int(v)


def expected_bound(mu: float, m: int, guess_in: float, guess_out: float, delta: float, p: float = 0.05) -> float:
    """The lower bound of the expected audit of ``m`` canaries (module docstring)."""
    r, v = expected_counts(mu, m, guess_in, guess_out)
    return epsilon_lower_bound(m, r, v, delta, p) if r >= 1 else 0.0


def attainable(mu: float, m: int, delta: float, p: float = 0.05,
               fractions: tuple[float, ...] = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05)) -> tuple[float, float]:
    """``(bound, f)``: the best expected bound over equal guess fractions ``f₊ = f₋ = f``."""
    return max((expected_bound(mu, m, f, f, delta, p), f) for f in fractions)
