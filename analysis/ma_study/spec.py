"""The study spec (docs/architecture.md, "Studies and sweeps"; docs/server-rules.md): its schema,
its validation (one line per problem, each naming the field) and the methods it can compare.

Methods (the rule's server learning rate is the one tuned):

=====================  ==============================================================
``fedbuff-sgd``        FedBuff, ``server.rule = "sgd"``
``fedbuff-momentum``   FedBuff, naive server momentum (heavy ball, β)
``fedbuff-nesterov``   FedBuff, naive Nesterov (β)
``fedbuff-ma-full``    FedBuff, MA-full approximating ``ma_target`` (default momentum)
``fedbuff-ma-light``   FedBuff, MA-light approximating ``ma_target``
``sync-momentum``      synchronous FedAvg with server momentum, cohort = C (no staleness;
                       does not depend on K, so it runs once per task/DP/seed and its row
                       carries ``K = C``)
``fedbuff-fadas``      FedBuff, FADAS (AMSGrad with the delay-adaptive step, β₁ = β;
                       docs/async-optimisers.md §3)
``fedbuff-ca2fl``      FedBuff, CA2FL's cached-update calibration with the plain step
                       (``server.algorithm = "ca2fl"``, ``rule = "sgd"``, staleness exponent
                       0 as CA2FL requires; not private; docs/async-optimisers.md §4)
``fedbuff-sgd-delay``  FedBuff, the delay-adaptive step ``min(1, κ/τ_max)``
                       (docs/async-optimisers.md §2)
=====================  ==============================================================

The last three are not in the default ``methods`` (:data:`ALL_METHODS`); a spec names them.

The ``bias`` column of ``results.csv`` is the implicit momentum bias ``‖AW − M‖_F/‖M‖_F`` of the
run's own rule, read from its ``bias.json`` (computed on the exact W) under :data:`BIAS_KEY`:
``none`` (W against I) for SGD — its target is M = I; ``momentum`` (A = M) for momentum; for
Nesterov the run sets ``server.ma_target = "nesterov"`` (which only the MA rules and the analysis
read), so its ``momentum`` entry is naive Nesterov's bias against the Nesterov M; ``ma_full`` /
``ma_light`` for the MA rules (against ``ma_target``'s M). Sync runs have W = I exactly and use
A = M, so their bias is 0. FADAS and the delay-adaptive step have no linear target (their
``own_bias`` trait is None): their bias and amplification are blank (NaN); CA2FL's rule is SGD,
so its row is SGD's (W against I), measured on the uncalibrated W the rule receives.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from asyncfl.config import scenario as scenario_mod
from asyncfl.config.files import MAX_SCENARIO_BYTES, read_text_limited
from asyncfl.errors import AsyncFLError

MethodName = Literal[
    "fedbuff-sgd", "fedbuff-momentum", "fedbuff-nesterov", "fedbuff-ma-full", "fedbuff-ma-light", "sync-momentum",
    "fedbuff-fadas", "fedbuff-ca2fl", "fedbuff-sgd-delay",
]
ALL_METHODS: tuple[str, ...] = (
    "fedbuff-sgd", "fedbuff-momentum", "fedbuff-nesterov", "fedbuff-ma-full", "fedbuff-ma-light", "sync-momentum",
)
METHOD_LABELS = {
    "fedbuff-sgd": "FedBuff + SGD", "fedbuff-momentum": "FedBuff + momentum", "fedbuff-nesterov": "FedBuff + Nesterov",
    "fedbuff-ma-full": "FedBuff + MA-full", "fedbuff-ma-light": "FedBuff + MA-light", "sync-momentum": "sync FedAvg + momentum",
    "fedbuff-fadas": "FedBuff + FADAS", "fedbuff-ca2fl": "FedBuff + CA2FL", "fedbuff-sgd-delay": "FedBuff + delay-adaptive SGD",
}
#: bias.json key holding the bias of each method's own rule (see the module docstring)
BIAS_KEY = {
    "fedbuff-sgd": "none", "fedbuff-momentum": "momentum", "fedbuff-nesterov": "momentum",
    "fedbuff-ma-full": "ma_full", "fedbuff-ma-light": "ma_light", "sync-momentum": None,
    "fedbuff-ca2fl": "none",
}
#: methods without a linear target: no bias, no amplification (NaN in results.csv)
NO_BIAS = ("fedbuff-fadas", "fedbuff-sgd-delay")


class StudyError(AsyncFLError, ValueError):
    """An invalid study spec: one line per problem, each naming the field."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = list(problems)
        head = f"invalid study spec {source}" if source else "invalid study spec"
        super().__init__(head + ":\n" + "\n".join(f"  - {p}" for p in self.problems))


# ---------------------------------------------------------------------------------------------
class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False, populate_by_name=True)


PosInt = Annotated[int, Field(ge=1, le=10**9)]
LrList = Annotated[list[Annotated[float, Field(gt=0, le=1e6)]], Field(min_length=1, max_length=20)]


class TaskEntry(_Section):
    """One task: a base scenario file (relative to the spec, else to the working directory)
    and/or dotted overrides (``"task.name" = "digits"``), and the target test accuracy."""

    # a folder of the study's runs/ and part of file names: no leading dot, so never "." or ".."
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,59}$")]
    scenario: str | None = None
    overrides: dict[str, Any] = {}
    target_accuracy: Annotated[float, Field(gt=0, le=1)]


#: the privacy label of the runs without DP (their folder under ``runs/<task>/``)
NODP = "nodp"


class PrivacyEntry(_Section):
    """One DP setting of the ``dp = true`` runs (docs/privacy.md): (ε, δ), clip S_Δ, the sampling
    assumption the ε rests on (``poisson`` or ``participation-cap`` with ``max_participations``),
    the noise cohort M, and ξ, γ or ``xi_over_sigma`` (ξ = that multiple of the run's σ, so one
    value fits every ε). ``name`` labels its runs (``runs/<task>/<name>/``); ``tasks`` limits it to
    some tasks (default: all). A spec gives one ``[privacy]`` table or several ``[[privacy]]``."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,39}$")] = "dp"
    epsilon: Annotated[float, Field(gt=0, le=1e4)] = 2.0
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

    def describe(self) -> str:
        """One line: what the ε of these runs is and rests on."""
        split = (f"ξ = {self.xi_over_sigma:g}σ" if self.xi_over_sigma is not None else
                 f"ξ = {self.xi:g}" if self.xi is not None else f"γ = {self.gamma:g}" if self.gamma is not None else "ξ/γ of the task")
        cap = f", at most {self.max_participations} participations per client" if self.sampling == "participation-cap" else ""
        if self.sampling == "participation-cap" and self.min_separation is not None:
            cap += f", at least {self.min_separation} steps apart"
        cohort = f", noise cohort M = {self.noise_cohort}" if self.noise_cohort is not None else ""
        noise = "" if self.noise == "iid" else f", {self.noise} noise" + (f" ({self.noise_bands} bands)" if self.noise_bands else "")
        return (f"ε = {self.epsilon:g}, δ = {self.delta:g} ({self.sampling}{cap}{cohort}; {self.accountant}), {split}, "
                f"counts `{self.counts}`{noise}")


class TuningEntry(_Section):
    """Learning-rate tuning budget: one seed, ``steps`` server steps (default: the study's).
    ``dp = "reuse-nodp"`` gives every DP run the learning rate tuned without DP for the same
    task/K/method (saves the DP tuning runs; needs ``false`` in the study's ``dp``).
    ``widen`` = n: when the best learning rate of a group is the smallest or largest of its
    grid, the grid is extended beyond that edge by the ratio of its two outermost values there,
    up to n times, until the best is an interior point (docs/architecture.md §9)."""

    steps: PosInt | None = None
    seed: Annotated[int, Field(ge=0, lt=2**63)] = 0
    dp: Literal["tune", "reuse-nodp"] = "tune"
    # up to this many grid points added beyond an edge that won, each one grid ratio further
    widen: Annotated[int, Field(ge=0, le=10)] = 0


class LrGrid(_Section):
    """Server learning-rate grid per method (values tried in tuning)."""

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


class StudySpec(_Section):
    """The whole study (see the module docstring and ``analysis/study_small.toml``)."""

    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,79}$")]
    buffer: PosInt  # C
    k_multiples: Annotated[list[PosInt], Field(min_length=1, max_length=20)]  # K = m·C
    seeds: Annotated[list[Annotated[int, Field(ge=0, lt=2**63)]], Field(min_length=1, max_length=100)]
    dp: Annotated[list[bool], Field(min_length=1, max_length=2)] = [False]
    dp_seeds: Annotated[list[Annotated[int, Field(ge=0, lt=2**63)]], Field(min_length=1, max_length=100)] | None = None
    steps: PosInt
    eval_every: PosInt = 5
    methods: Annotated[list[MethodName], Field(min_length=1)] = list(ALL_METHODS)
    ma_target: Literal["momentum", "nesterov"] = "momentum"
    # the report adds a speed-up table at this fraction of every task's target (read from the
    # same runs' curves; results.csv keeps the main target)
    secondary_target_fraction: Annotated[float, Field(gt=0, lt=1)] | None = None
    lr_grid: LrGrid
    defaults: dict[str, Any] = {}
    tasks: Annotated[list[TaskEntry], Field(min_length=1, max_length=50)]
    # one [privacy] table is read as a list of one setting (parse_spec)
    privacy: Annotated[list[PrivacyEntry], Field(min_length=1, max_length=20)] = [PrivacyEntry()]
    tuning: TuningEntry = TuningEntry()
    # pooled (centralised) reference per task and seed: Adam steps (0: none; docs/tasks.md §12)
    pooled_steps: Annotated[int, Field(ge=0, le=10**6)] = 0

    def seeds_of(self, dp: bool) -> list[int]:
        """The seeds of the DP (``dp_seeds``, default ``seeds``) or no-DP runs."""
        return list(self.dp_seeds) if dp and self.dp_seeds is not None else list(self.seeds)

    @property
    def tuning_steps(self) -> int:
        return self.tuning.steps if self.tuning.steps is not None else self.steps


_MODEL_AT = {"": StudySpec, "tasks": TaskEntry, "privacy": PrivacyEntry, "tuning": TuningEntry, "lr_grid": LrGrid}


def _loc_text(loc: tuple[Any, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _allowed(cls: type[BaseModel]) -> list[str]:
    return [f.alias or name for name, f in cls.model_fields.items()]


def _spec_errors(exc: ValidationError) -> list[str]:
    def allowed_keys(loc: tuple) -> list[str]:
        parents = [p for p in loc[:-1] if isinstance(p, str)]
        return _allowed(_MODEL_AT.get(parents[-1] if parents else "", StudySpec))

    return scenario_mod.describe_errors(exc, _loc_text, allowed_keys)


def read_spec_file(path: str | Path) -> dict[str, Any]:
    """The raw table of a spec file (a :class:`StudyError` if it cannot be read as TOML)."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise StudyError([f"{path}: no such study spec"])
    text = read_text_limited(path, MAX_SCENARIO_BYTES, lambda message: StudyError([f"study spec {message}"]))
    try:
        return tomllib.loads(text)
    except RecursionError:
        raise StudyError([f"{path}: not valid TOML (arrays or tables nested too deeply)"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise StudyError([f"{path}: not valid TOML ({exc})"]) from None


def parse_spec(raw: dict[str, Any], source: str | None = None) -> StudySpec:
    """Validate a raw spec table against the schema (a :class:`StudyError` naming every field)."""
    table = isinstance(raw.get("privacy"), dict)
    if table:  # one [privacy] table: a list of one setting, its errors named privacy.KEY
        raw = {**raw, "privacy": [raw["privacy"]]}
    try:
        return StudySpec.model_validate(raw)
    except ValidationError as exc:
        problems = _spec_errors(exc)
        if table:
            problems = [p.replace("privacy[0]", "privacy", 1) if p.startswith("privacy[0]") else p for p in problems]
        raise StudyError(problems, source) from None
