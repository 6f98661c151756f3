"""The entries a review spec is made of (docs/ma-review.md §2; docs/privacy.md): a task, a DP
setting and the server learning-rate grids. Each is a strict table: an unknown key or a bad value
is an error naming the field (:func:`analysis.ma_review.spec.parse_review`)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

#: the privacy label of the runs without DP (their folder under ``runs/<task>/``)
NODP = "nodp"


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False, populate_by_name=True)


PosInt = Annotated[int, Field(ge=1, le=10**9)]
LrList = Annotated[list[Annotated[float, Field(gt=0, le=1e6)]], Field(min_length=1, max_length=20)]


class TaskEntry(_Section):
    """One task: a base scenario file (relative to the spec, else to the working directory)
    and/or dotted overrides (``"task.name" = "digits"``). ``target_accuracy`` is required and part
    of the spec's digest, but the review's target is its ``[target]`` (docs/ma-review.md §2)."""

    # a folder of the study's runs/ and part of file names: no leading dot, so never "." or ".."
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,59}$")]
    scenario: str | None = None
    overrides: dict[str, Any] = {}
    target_accuracy: Annotated[float, Field(gt=0, le=1)]


class PrivacyEntry(_Section):
    """One DP setting (docs/privacy.md): (ε, δ) or σ itself (``noise_multiplier``; 0 = clip only), clip S_Δ, the sampling assumption the ε rests on
    (``poisson`` or ``participation-cap`` with ``max_participations``), the noise cohort M, and
    ξ, γ or ``xi_over_sigma`` (ξ = that multiple of the run's σ, so one value fits every ε).
    ``name`` labels its runs (``runs/<task>/<name>/``) and is what a cell's ``privacy`` names;
    ``tasks`` limits it to some tasks (default: all)."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,39}$")] = "dp"
    epsilon: Annotated[float, Field(gt=0, le=1e4)] = 2.0
    # σ itself instead of a target ε (ε is then reported); 0 is the clip-only ablation (docs/privacy.md §4)
    noise_multiplier: Annotated[float, Field(ge=0, le=1e6)] | None = None
    delta: Annotated[float, Field(gt=0, lt=1)] = 1e-6
    clip: Annotated[float, Field(gt=0, le=1e6)] | None = None  # None: the task scenario's privacy.clip
    xi: Annotated[float, Field(gt=0, le=1e6)] | None = None
    gamma: Annotated[float, Field(gt=0, le=1e6)] | None = None
    xi_over_sigma: Annotated[float, Field(gt=1, le=1e6)] | None = None
    sampling: Literal["poisson", "participation-cap"] = "poisson"
    max_participations: PosInt | None = None
    noise_cohort: PosInt | None = None
    accountant: Literal["pld", "rdp"] = "pld"
    # a count post-processing mode's name (docs/privacy.md §3; the scenario's validation names the allowed ones)
    counts: Annotated[str, Field(min_length=1, max_length=200)] = "project"
    # the noise mechanism across steps (docs/privacy.md §12): "iid", or "banded"/"blt" under a participation cap
    noise: Annotated[str, Field(min_length=1, max_length=200)] = "iid"
    noise_bands: PosInt | None = None
    min_separation: PosInt | None = None
    tasks: Annotated[list[str], Field(min_length=1)] | None = None


class LrGrid(_Section):
    """Server learning-rate grid per method (the coarse grid a tuned cell starts from)."""

    fedbuff_sgd: LrList | None = Field(None, alias="fedbuff-sgd")
    fedbuff_momentum: LrList | None = Field(None, alias="fedbuff-momentum")
    fedbuff_nesterov: LrList | None = Field(None, alias="fedbuff-nesterov")
    fedbuff_ma_full: LrList | None = Field(None, alias="fedbuff-ma-full")
    fedbuff_ma_light: LrList | None = Field(None, alias="fedbuff-ma-light")
    sync_momentum: LrList | None = Field(None, alias="sync-momentum")
    fedbuff_fadas: LrList | None = Field(None, alias="fedbuff-fadas")
    fedbuff_ca2fl: LrList | None = Field(None, alias="fedbuff-ca2fl")
    fedbuff_sgd_delay: LrList | None = Field(None, alias="fedbuff-sgd-delay")

    def of(self, method: str) -> list[float] | None:
        return getattr(self, method.replace("-", "_"))
