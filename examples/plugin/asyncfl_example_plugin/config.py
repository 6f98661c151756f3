"""The scenario keys each component owns (torch-free pydantic classes, as asyncfl's own)."""

from typing import ClassVar, Literal

from pydantic import Field
from typing_extensions import Annotated

from asyncfl import Section, TaskSection


class BlobCNNTask(TaskSection):
    """``[task] name = "blob-cnn"``: ``path`` to the ``.npz`` data set, ``channels`` of the CNN."""

    name: Literal["blob-cnn"] = "blob-cnn"
    path: str
    file_keys: ClassVar[tuple[str, ...]] = ("path",)  # relative to the scenario file
    channels: Annotated[int, Field(ge=1, le=64)] = 4


class ClippedMomentumConfig(Section):
    """``[server]`` keys of ``clipped-momentum``: β and the clipping norm τ."""

    beta: Annotated[float, Field(ge=0, lt=1)] = 0.9
    clip_tau: Annotated[float, Field(gt=0)] = 1.0


class WeibullLatency(Section):
    """``[latency] dist = "weibull"``: ``scale × Weibull(shape)``."""

    dist: Literal["weibull"] = "weibull"
    shape: Annotated[float, Field(gt=0, le=100)] = 1.5
    scale: Annotated[float, Field(gt=0)] = 1.0


class ClippedSGDConfig(Section):
    """``[client]`` key of ``clipped-sgd``: the norm every gradient is clipped to."""

    grad_clip: Annotated[float, Field(gt=0)] = 1.0


class DeadlineConfig(Section):
    """``[server]`` keys of the ``deadline`` protocol: ``concurrency`` K (default min(N, 10)) and
    the training ``deadline`` in virtual time units (an upload that took longer is dropped)."""

    concurrency: Annotated[int, Field(ge=1)] | None = None
    deadline: Annotated[float, Field(gt=0)] = 2.0
