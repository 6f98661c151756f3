"""The own keys of the trackers that ship (docs/run-directory.md §15). Torch-free.

Trackers are components of the list-valued kind ``tracker`` (:mod:`asyncfl.components.builtin`):
``run.trackers = ["tensorboard", "mlflow", "wandb"]`` names them, and each one's own keys sit in
its table ``run.tracker.NAME`` (``[run.tracker.mlflow] tracking_uri = "file:./mlruns"``),
validated by its config class below. The implementations are imported only by a run that names
them (their packages are optional: ``asyncfl[tensorboard]``, ``asyncfl[mlflow]``,
``asyncfl[wandb]``).
"""

from __future__ import annotations

from typing import Literal

from asyncfl.config.base import Section


class MLflowKeys(Section):
    """``tracking_uri``: the store (absent: ``MLFLOW_TRACKING_URI``, else MLflow's default
    ``./mlruns``); ``experiment``: the experiment's name; ``run_name``: the MLflow run's name
    (absent: the run directory's name)."""

    tracking_uri: str | None = None
    experiment: str = "asyncfl"
    run_name: str | None = None


class WandbKeys(Section):
    """``project``, ``entity``; ``dir``: where W&B writes its files (absent: W&B's default, the
    working directory's ``wandb/``); ``mode``: ``"offline"`` (default: nothing leaves the
    machine; ``wandb sync`` uploads later) or ``"online"``."""

    project: str = "asyncfl"
    entity: str | None = None
    dir: str | None = None
    mode: Literal["offline", "online"] = "offline"

