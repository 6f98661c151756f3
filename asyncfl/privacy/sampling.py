"""The sampling assumptions a reported ε can rest on (``privacy.sampling``, registered in
:data:`asyncfl.config.registries.SAMPLINGS`; docs/privacy.md §5–7).

Every server step is one Gaussian mechanism with noise multiplier σ with respect to each client
whose upload it holds (docs/privacy.md §1). What a whole run releases about one client — the
:class:`~asyncfl.privacy.accountants.Releases` the accountant composes — is not a property of
the mechanism but of who takes part in which step, and that is the assumption:

* :data:`POISSON` (``"poisson"``, an **approximation**): every step is accounted as a Poisson
  sample of the population at rate ``q = M/N`` (``M`` the noise cohort, by default the buffer
  ``C``), ``T`` steps: ``Releases(T, q)``. Neither protocol Poisson-samples (§5).
* :data:`RANDOM_ALLOCATION` (``"random-allocation"``, a **guarantee** if the allotment is secret):
  every client is allotted ``k`` of every ``t`` steps from the seed, the engine enforces it, and ε is
  Feldman & Shenfeld's amplification by random allocation: ``Releases(k, window=t, windows=⌈T/t⌉)``
  (§13).
* :data:`PARTICIPATION_CAP` (``"participation-cap"``, a **guarantee**): the engine lets no client
  contribute to more than ``k = max_participations`` steps, at most once per step and to no two
  steps fewer than ``b = min_separation`` apart, and ε is
  that of ``k`` Gaussian releases without amplification: ``Releases(k)``, whatever the dispatch
  order, the latencies or the availability (§6).

An assumption answers :meth:`SamplingAssumption.releases` (the whole run, what σ is calibrated
for), :meth:`SamplingAssumption.so_far` (after ``t`` steps: the ε curve of ``privacy.csv``),
:meth:`SamplingAssumption.cap` (what the engine enforces) and the statement a run reports.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, NamedTuple

from asyncfl.components.contracts import returns
from asyncfl.privacy.accountants import Releases


class RunShape(NamedTuple):
    """What a sampling assumption needs to know of a run (docs/privacy.md §5–7)."""

    protocol: str  # server.protocol
    clients: int  # N
    buffer: int  # C: the uploads a step sums (at most C in a short synchronous round)
    noise_cohort: int  # M ≥ C: the uploads the simulated deployment's step sums
    steps: int  # T
    max_participations: int | None  # k (participation-cap only)
    min_separation: int = 1  # b: server steps between two contributions of a client (participation-cap only)
    allotment: tuple[int, int] | None = None  # (k, t): k of every t steps per client (random-allocation only)
    not_poisson: str = "the protocol does not say how it chooses its clients"  # its ProtocolTraits.not_poisson


class SamplingAssumption(ABC):
    """One way of accounting a run (docs/privacy.md §5–6). ``claim`` is ``"approximation"`` or
    ``"guarantee"``: what a reader may call the ε it gives."""

    name: str = ""
    claim: str = ""

    @abstractmethod
    def releases(self, shape: RunShape) -> Releases:
        """The releases of the whole run about one client: what σ is calibrated for."""

    @abstractmethod
    def so_far(self, shape: RunShape, steps: int, most_participations: int) -> Releases | None:
        """The releases after ``steps`` server steps, in which the most-used client has
        contributed to ``most_participations`` of them (None: nothing released yet)."""

    def cap(self, shape: RunShape) -> int | None:
        """The participation cap the engine enforces (None: no cap)."""
        return None

    def parameters(self, shape: RunShape) -> dict[str, Any]:
        """``sampling_rate`` (q, or None) and ``max_participations`` (k, or None) for the summary."""
        return {"sampling_rate": None, "max_participations": self.cap(shape)}

    @abstractmethod
    def statement(self, shape: RunShape) -> str:
        """One sentence for the run summary: what the ε rests on and why it is what it is."""


class Poisson(SamplingAssumption):
    """``Releases(T, q = M/N)``: the calibration production systems and pfl-research's simulations
    use. An approximation in both protocols (docs/privacy.md §5)."""

    name = "poisson"
    claim = "approximation"

    def rate(self, shape: RunShape) -> float:
        """``q = M/N`` (``M = C`` without a noise cohort)."""
        return shape.noise_cohort / shape.clients

    def releases(self, shape: RunShape) -> Releases:
        return Releases(shape.steps, self.rate(shape))

    def so_far(self, shape: RunShape, steps: int, most_participations: int) -> Releases | None:
        return Releases(steps, self.rate(shape)) if steps >= 1 else None

    def parameters(self, shape: RunShape) -> dict[str, Any]:
        return {"sampling_rate": self.rate(shape), "max_participations": None}

    def statement(self, shape: RunShape) -> str:
        q = self.rate(shape)
        why = shape.not_poisson  # the protocol's own account (ProtocolTraits.not_poisson)
        return (f"an approximation: every one of the {shape.steps} steps is accounted as a Poisson sample of the "
                f"population at rate q = M/N = {q:.4g}, but {why} (docs/privacy.md §5)")


class ParticipationCap(SamplingAssumption):
    """``Releases(k)``: k-fold composition of the Gaussian mechanism, no amplification. A
    guarantee for any dispatch order, given what the engine enforces (docs/privacy.md §6)."""

    name = "participation-cap"
    claim = "guarantee"

    def cap(self, shape: RunShape) -> int | None:
        if shape.max_participations is None:
            raise ValueError("participation-cap needs max_participations")
        return int(shape.max_participations)

    def releases(self, shape: RunShape) -> Releases:
        return Releases(int(self.cap(shape) or 0))

    def so_far(self, shape: RunShape, steps: int, most_participations: int) -> Releases | None:
        return Releases(most_participations) if most_participations >= 1 else None

    def statement(self, shape: RunShape) -> str:
        k, b = self.cap(shape), shape.min_separation
        apart = f", nor to two steps fewer than b = {b} apart" if b > 1 else ", nor twice to one step"
        return (f"a guarantee: no client contributed to more than k = {k} server steps{apart} "
                f"(enforced by the engine), so user-level (ε, δ)-DP follows from the {k}-fold composition of the "
                "Gaussian mechanism without amplification, for any dispatch order, latencies and availability "
                "(docs/privacy.md §6)")


class RandomAllocation(SamplingAssumption):
    """``k`` of every ``t`` steps per client, allotted from the seed and enforced by the engine:
    ``Releases(k, window=t, windows=⌈T/t⌉)``, accounted by Feldman & Shenfeld's random-allocation
    PLD (docs/privacy.md §13). A guarantee on the condition that the allotment stays secret (only
    the noisy sums are released) — the same condition as every amplification by sampling."""

    name = "random-allocation"
    claim = "guarantee"

    def allotment(self, shape: RunShape) -> tuple[int, int]:
        if shape.allotment is None:
            raise ValueError("random-allocation needs allotted_steps and allotment_window")
        return shape.allotment

    def windows(self, shape: RunShape, steps: int | None = None) -> int:
        """``W = ⌈T/t⌉``: a last, truncated window releases a prefix of a whole one (post-processing)."""
        return -(-int(shape.steps if steps is None else steps) // self.allotment(shape)[1])

    def releases(self, shape: RunShape) -> Releases:
        k, t = self.allotment(shape)
        return Releases(k, window=t, windows=self.windows(shape))

    def so_far(self, shape: RunShape, steps: int, most_participations: int) -> Releases | None:
        if steps < 1:
            return None
        k, t = self.allotment(shape)
        return Releases(k, window=t, windows=self.windows(shape, steps))

    def parameters(self, shape: RunShape) -> dict[str, Any]:
        k, t = self.allotment(shape)
        return {"sampling_rate": k / t, "max_participations": k * self.windows(shape)}

    def statement(self, shape: RunShape) -> str:
        k, t = self.allotment(shape)
        w = self.windows(shape)
        return (f"a guarantee if the allotment stays secret: every client was allotted k = {k} of every t = {t} server "
                f"steps ({w} window{'s' if w != 1 else ''}), drawn uniformly from the seed before the run, and the engine "
                "let no upload count outside its allotted step, so user-level (ε, δ)-DP follows from amplification by "
                "random allocation (Feldman & Shenfeld; pld-accounting), on the condition that only the noisy sums are "
                "released — not who was dispatched when (docs/privacy.md §13)")


POISSON = Poisson()
PARTICIPATION_CAP = ParticipationCap()
RANDOM_ALLOCATION = RandomAllocation()

# the sampling components' builders (asyncfl.components.builtin): build(cfg, ctx) -> SamplingAssumption
build_poisson = returns(POISSON)
build_participation_cap = returns(PARTICIPATION_CAP)
build_random_allocation = returns(RANDOM_ALLOCATION)
