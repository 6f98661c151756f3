"""The privacy–utility sweep's vocabulary (docs/privacy.md, "What a run reports"): the rules
it compares, the columns of ``sweep.csv``, the fixed budget, one point, one row, and its error.

Torch-free: the command line reads :data:`RULES` for ``--rules``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from asyncfl.errors import AsyncFLError

RULES: tuple[str, ...] = ("ma-light", "ma-full", "momentum")
#: bias.json key of each rule's own coefficients (docs/server-rules.md: naive momentum is ``A = M``)
BIAS_KEY: dict[str, str] = {"ma-light": "ma_light", "ma-full": "ma_full", "momentum": "momentum"}
COLUMNS: tuple[str, ...] = (
    "xi", "xi_over_C", "gamma", "sigma", "epsilon_target", "epsilon_spent", "delta",
    "sampling", "claim", "sampling_rate", "max_participations", "noise_cohort", "rule", "seed",
    "status", "message", "steps", "participations_max", "participations_mean", "clients_at_cap",
    "final_accuracy", "final_loss", "initial_accuracy", "bias_exact", "bias_noisy", "bias_momentum",
    "update_noise_std", "count_noise_std", "run_dir",
)


class SweepError(AsyncFLError):
    """Bad sweep input (exit code 2 from the command line); the message names the option or field."""


@dataclass(frozen=True)
class Budget:
    """The sweep's fixed privacy parameters: ``sigma`` σ (calibrated once to ``epsilon_target``
    at ``delta`` for the sampling assumption's releases, or given), the assumption (``sampling``,
    its ``claim`` and ``statement``; docs/privacy.md §5–6) with ``q`` (Poisson: M/N) or
    ``max_participations`` (k), ``steps`` T, ``clip`` S_Δ, ``C`` and the ``noise_cohort`` M."""

    sigma: float
    epsilon_target: float | None
    delta: float
    accountant: str
    q: float | None
    steps: int
    clip: float
    C: int
    sampling: str = "poisson"
    claim: str = "approximation"
    statement: str = ""
    max_participations: int | None = None
    noise_cohort: int | None = None

    @property
    def M(self) -> int:
        """The noise cohort M (the buffer C without one): the noise levels are σS/M and ξ/M."""
        return self.C if self.noise_cohort is None else self.noise_cohort

    def describe(self) -> str:
        releases = (f"{self.steps} steps at q = M/N = {self.q:.4g}" if self.q is not None
                    else f"k = {self.max_participations} participations per client")
        how = ("given (privacy.noise_multiplier)" if self.epsilon_target is None else
               f"calibrated to ε = {self.epsilon_target:g}, δ = {self.delta:g} for {releases} ({self.accountant})")
        cohort = f", noise cohort M = {self.M} (ε of that deployment)" if self.M != self.C else ""
        return f"σ = {self.sigma:.6g} {how}{cohort}; {self.sampling}: {self.statement or self.claim}"


@dataclass(frozen=True)
class SweepPoint:
    """One value of the split: ``xi`` ξ and ``gamma`` γ (one given, the other derived)."""

    xi: float
    gamma: float
    given: str  # "xi" or "gamma"


@dataclass
class SweepRow:
    """One run of the sweep (one line of ``sweep.csv``; columns in :data:`COLUMNS`)."""

    xi: float
    xi_over_C: float
    gamma: float
    sigma: float
    epsilon_target: float | None
    epsilon_spent: float
    delta: float
    sampling: str
    claim: str
    sampling_rate: float | None
    max_participations: int | None
    noise_cohort: int
    rule: str
    seed: int
    status: str
    steps: int
    participations_max: float
    participations_mean: float
    clients_at_cap: float | None  # None without a participation cap
    final_accuracy: float
    final_loss: float
    bias_exact: float
    bias_noisy: float
    bias_momentum: float
    update_noise_std: float
    count_noise_std: float
    run_dir: str
    message: str = ""  # why the run did not complete (empty when it did)
    initial_accuracy: float = float("nan")  # the untrained model's (metrics.csv, step 0)

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
