"""The ``[privacy]`` keys each privacy component owns (docs/scenario.md §1, docs/privacy.md).

``[privacy]`` holds the keys of every private run (``enabled``, ``clip``, ``epsilon``, ``delta``,
``noise_multiplier``, ``xi``, ``gamma``, ``noise_cohort`` and the names ``sampling``,
``accountant``, ``counts``, ``noise``: :class:`asyncfl.config.scenario.PrivacyConfig`) and the
keys of the components it names, each declared here by its component:

* the participation-cap sampling assumption's schema (docs/privacy.md §6): ``max_participations``
  k and ``min_separation`` b — no client contributes to more than k server steps, nor to two
  steps fewer than b apart;
* the random-allocation sampling assumption's allotment (docs/privacy.md §13): ``allotted_steps`` k
  and ``allotment_window`` t — each client is allotted k of every window of t server steps;
* the correlated-noise mechanisms' strategy (docs/privacy.md §12): ``noise_bands`` (banded),
  ``noise_buffers`` (BLT), and for both the ``noise_workload`` the strategy is optimised for and
  its momentum ``noise_beta``.

A key of a component the scenario does not name is refused (``privacy.max_participations`` with
``sampling = "poisson"``). Torch-free.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from asyncfl.config.base import PosInt, Section


class ParticipationCapConfig(Section):
    """``max_participations`` k (required): server steps a client may contribute to;
    ``min_separation`` b (default 1: any two distinct steps): a client may contribute to step
    ``t`` only if its previous contribution was to a step ``≤ t − b`` (docs/privacy.md §6)."""

    max_participations: PosInt | None = None
    min_separation: Annotated[int, Field(ge=1, le=10**9)] = 1


class RandomAllocationConfig(Section):
    """``allotted_steps`` k and ``allotment_window`` t (both required, ``k ≤ t``): every client is
    allotted k of the t server steps of each window ``[w·t + 1, (w+1)·t]``, drawn uniformly from the
    run's seed before the run (docs/privacy.md §13)."""

    allotted_steps: PosInt | None = None
    allotment_window: PosInt | None = None


Workload = Literal["prefix", "momentum"]
#: per workload: whether it needs a momentum β (``noise_beta`` or the rule's ``beta``)
WORKLOAD_NEEDS_BETA: dict[str, bool] = {"prefix": False, "momentum": True}


class _CorrelatedNoise(Section):
    """What a correlated-noise strategy is optimised for (docs/privacy.md §12): ``noise_workload``
    ``"prefix"`` (the model trajectory of plain SGD: prefix sums) or ``"momentum"`` (the
    heavy-ball trace ``m_t = Σ_s β^(t−s) r_s``, with ``noise_beta`` β; absent: the server rule's
    own ``beta``)."""

    noise_workload: Workload = "prefix"
    noise_beta: Annotated[float, Field(ge=0, lt=1)] | None = None


class BandedNoiseConfig(_CorrelatedNoise):
    """``noise_bands`` b̂ ≥ 1: the strategy's first column has b̂ non-zero entries (b̂ = 1 is
    i.i.d. noise); with k > 1 participations b̂ ≤ ``privacy.min_separation``."""

    noise_bands: Annotated[int, Field(ge=1, le=10**5)] = 4


class BLTNoiseConfig(_CorrelatedNoise):
    """``noise_buffers`` n: the buffered-linear-Toeplitz strategy keeps n noise vectors."""

    noise_buffers: Annotated[int, Field(ge=1, le=64)] = 3
