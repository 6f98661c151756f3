"""What the review reads from one finished run (docs/ma-review.md §3; the files:
docs/run-directory.md §10): its status and evaluations, the interval-censored crossing of the
target, the implicit momentum bias and amplification of its own rule, the privacy it spent (the
mechanism's ε and each client's), and the noise that reaches the iterate. A file that is missing
or damaged reads as "no value" (None, [], NaN), so one broken run leaves a blank cell, not a
failed study.

**The noise reaching the iterate** (docs/server-rules.md §1, docs/privacy.md §2). Every linear
rule steps ``θ_{t+1} = θ_t − η m_t`` with ``m_t = Σ_{s≤t} a_t[s] r_s``, so after ``t`` steps

    θ_{t+1} − θ_1 = −η Σ_s (Σ_{j≤t} a_j[s]) r_s .

With i.i.d. privacy noise ``N(0, s_r² I)`` on every ``r_s`` (``s_r = σS/M``, docs/privacy.md §7)
the noise in the iterate is Gaussian with per-coordinate standard deviation

    s_r · η ‖Σ_{j≤t} a_j‖₂ ,

``noise_gain = η ‖Aᵀ 1‖₂`` (``t = T``) is the factor (``results.csv``), and ``iterate_noise =
s_r · noise_gain`` the standard deviation itself (i.i.d. noise only: correlated noise is not
independent across steps, so it is left blank there). ``A`` is the run's own: ``I`` for SGD
(and CA2FL's SGD step), the target ``M`` for naive momentum/Nesterov and sync, the coefficients
the MA rule recorded (``counts.npz``) for MA-full and MA-light. ``‖A‖_F/‖M‖_F`` (the
``amplification`` column) counts every coefficient; ``noise_gain`` counts them as they add up
in the iterate, with the learning rate the rule was tuned to.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, cast

import numpy as np

from asyncfl.errors import RunDirError
from asyncfl.results import Run
from asyncfl.run.bias_report import analysis_of, read_run_counts
from asyncfl.server.ma import TargetKind, light_matrix_from_uv, target_matrix
from asyncfl.studies.crossing import crossing
from asyncfl.studies.stopping import stopped_at_target
from analysis.ma_review.methods import BIAS_KEY, NO_BIAS

NAN = math.nan


def read_state(run_dir: Path, steps: int) -> tuple[str | None, bool]:
    """The run's status as the review reads it, and whether it stopped at its target before its
    horizon ``steps`` (docs/studies.md §2.1): such a run keeps asyncfl's status ``stopped`` and
    its crossings, but none of its whole-run values (final accuracy, ε spent, bias). A run whose
    target stop fired at step ``steps`` took every step: it is ``completed``. None when the run
    has no ``summary.json`` (not run, or damaged)."""
    try:
        summary = Run(run_dir).summary
    except (OSError, RunDirError):
        return None, False
    status = summary.get("status")
    if stopped_at_target(summary):
        step = summary["stop"].get("step")
        if isinstance(step, int) and step >= steps:
            return "completed", False
        return status, True
    return status, False


def read_metrics(run_dir: Path) -> list[dict[str, float]]:
    """The run's evaluations (:meth:`asyncfl.results.Run.evaluations`; ``[]`` before the first)."""
    return Run(run_dir).evaluations()


def _bias_entry(run_dir: Path, *path: str) -> float:
    """``bias.json[path…]`` as a float; NaN when the run has none or it is damaged."""
    try:
        value: Any = Run(run_dir).bias
        for key in path:
            value = value[key]
        return float(value)
    except (OSError, RunDirError, ValueError, KeyError, TypeError):
        return NAN


def run_bias(run_dir: Path, method: str) -> float:
    """The bias ``‖AW − M‖_F/‖M‖_F`` of the method's own rule from the run's ``bias.json`` (key
    :data:`~analysis.ma_review.methods.BIAS_KEY`; 0 for sync, NaN for a method without a linear
    target)."""
    if method in NO_BIAS:
        return NAN
    key = BIAS_KEY[method]
    if key is None:
        return 0.0  # sync: W = I and A = M
    return _bias_entry(run_dir, key)


def run_amplification(run_dir: Path, method: str) -> float:
    """The noise amplification of the method's own rule, ``‖A‖_F`` relative to naive momentum's,
    from the run's ``bias.json`` (docs/server-rules.md); 1 for sync (A = M), NaN without a linear target."""
    if method in NO_BIAS:
        return NAN
    key = BIAS_KEY[method]
    if key is None:
        return 1.0
    return _bias_entry(run_dir, "amplification", key)


def crossing_of(metrics: list[dict[str, float]], target: float, horizon: int, axis: str = "step") -> dict[str, Any]:
    """The run's crossing of ``target`` along ``axis`` (``step`` or virtual ``time``):
    ``low``, ``high``, ``point`` (linear interpolation between the two evaluations around the
    first reach) and ``reached``; unreached: right-censored at the run's last evaluation
    (``horizon`` steps; its virtual time on the time axis)."""
    if not metrics:
        return {"low": NAN, "high": NAN, "point": NAN, "reached": False}
    xs = [float(r[axis]) for r in metrics]
    ys = [float(r.get("accuracy", NAN)) for r in metrics]
    # a run that stopped early (diverged) is censored at the planned horizon, not its last evaluation
    c = crossing(xs, ys, target, horizon=max(float(horizon), xs[-1]) if axis == "step" else None)
    return {"low": float(c.low), "high": float(c.high), "point": float(c.point), "reached": bool(c.reached)}


def privacy_of(run_dir: Path) -> dict[str, float]:
    """The mechanism's ε, the per-client ε (max, median) and σ, ξ, γ, S_Δ, M from ``summary.json``
    (NaN without privacy)."""
    keys = ("epsilon_spent", "epsilon_client_max", "epsilon_client_p50", "sigma", "xi", "gamma", "noise_cohort")
    try:
        p = Run(run_dir).summary.get("privacy") or {}
    except (OSError, RunDirError):
        p = {}
    out = {}
    for key in keys:
        value = p.get(key)
        out[key] = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else NAN
    return out


def own_coefficients(run_dir: Path, method: str) -> np.ndarray | None:
    """The run's own ``A`` (module docstring); None for a rule without one (FADAS, the
    delay-adaptive step) or a damaged run."""
    try:
        scenario, counts, arrays = read_run_counts(run_dir)
    except (OSError, RunDirError):
        return None
    T = counts.steps
    kind, beta, _, _ = analysis_of(scenario)
    if method in ("fedbuff-sgd", "fedbuff-ca2fl"):
        return np.eye(T)
    if method in ("fedbuff-momentum", "sync-momentum"):
        return target_matrix("momentum", beta, T)
    if method == "fedbuff-nesterov":
        return target_matrix("nesterov", beta, T)
    coefficients = arrays.get("coefficients")
    if coefficients is None:
        return None
    if method == "fedbuff-ma-full":
        return np.asarray(coefficients[:T, :T], dtype=np.float64)
    if method == "fedbuff-ma-light":
        return light_matrix_from_uv(np.asarray(coefficients[:T, :2], dtype=np.float64), cast(TargetKind, kind), beta)
    return None


def noise_gain(A: np.ndarray, lr: float) -> float:
    """``η ‖Aᵀ 1‖₂``: the factor from each step's noise to the iterate's after all ``T`` steps."""
    return float(lr * np.linalg.norm(np.asarray(A, dtype=np.float64).sum(axis=0)))


def iterate_noise(gain: float, privacy: dict[str, float], clip: float, buffer: int, iid: bool) -> float:
    """``s_r · gain`` with ``s_r = σ S / M``, ``S = √(S_Δ² + γ²)``; NaN without privacy or with
    correlated noise (module docstring)."""
    sigma, gamma, cohort = privacy["sigma"], privacy["gamma"], privacy["noise_cohort"]
    if not iid or not all(math.isfinite(v) for v in (sigma, gamma, gain)):
        return NAN
    M = cohort if math.isfinite(cohort) else float(buffer)
    return float(sigma * math.sqrt(clip * clip + gamma * gamma) / M * gain)
