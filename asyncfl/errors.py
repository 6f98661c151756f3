"""Errors that reach users as one clear message (exit code 2 from the CLI), never a traceback."""

from __future__ import annotations


class AsyncFLError(Exception):
    """Base class of the errors the CLI reports without a traceback."""


class ScenarioError(AsyncFLError, ValueError):
    """A scenario is invalid. ``problems`` holds one line per problem, each naming the field,
    the value and what is allowed."""

    def __init__(self, problems: list[str], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        head = f"invalid scenario {source}" if source else "invalid scenario"
        super().__init__(head + ":\n" + "\n".join(f"  - {p}" for p in self.problems))


class UsageError(AsyncFLError):
    """A command line that cannot be carried out as given (an argument, an option's value, a
    missing optional dependency): exit code 2."""


class RunDirError(AsyncFLError):
    """A run directory is missing, incomplete, from another version, or would be overwritten."""


class NumericalFault(AsyncFLError):
    """The model diverged (loss NaN/Inf or above the bound); the message names the step."""


class TraceError(AsyncFLError):
    """A trace file (a run's ``updates.csv`` to replay, a FedScale device or availability
    pickle) is missing, malformed, hostile, or too short for the run; the message names the file."""


class SimulationStalled(AsyncFLError, RuntimeError):
    """No event is left and no client can be dispatched (e.g. nobody is ever available):
    a property of the scenario, reported with exit code 2."""


class ParticipationCapReached(SimulationStalled):
    """A run under ``privacy.sampling = "participation-cap"`` cannot go on without a client
    contributing to more than ``privacy.max_participations`` server steps: every client has either
    reached its cap or has an upload waiting for the open step, or a replayed trace dispatches a
    client past its cap (docs/privacy.md §6). Reported with exit code 2; the run directory keeps
    everything written up to that step (summary status ``stalled``)."""


class ComponentError(AsyncFLError):
    """A component broke its contract while running (a server rule's direction of another shape
    than θ, …): the message names the component and the contract (docs/extending.md §2); exit 2."""


class RunInterrupted(Exception):
    """The run was asked to stop (SIGINT) and stopped between two events, where its state is
    complete data that a checkpoint can hold. Not an :class:`AsyncFLError`: the CLI exits 130."""

    def __init__(self, step: int, time: float) -> None:
        self.step, self.time = step, time
        super().__init__(f"stopped after server step {step} (virtual time {time:g})")


class CheckpointError(RunDirError):
    """A checkpoint cannot be written (state that is not data) or read (corrupted, other format)."""
