"""The MLflow and Weights & Biases trackers (``run.trackers = ["mlflow"]``, ``["wandb"]``;
docs/run-directory.md §15): the builders of the components ``mlflow`` and ``wandb``, whose keys
are :mod:`asyncfl.config.trackers`'s. Their packages are optional (``asyncfl[mlflow]``, ``asyncfl[wandb]``)
and imported only when a run names them."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from asyncfl.errors import ScenarioError
from asyncfl.run.tracker_base import Start, Tracker


# ---------------------------------------------------------------------------------------------
# MLflow (asyncfl[mlflow]: mlflow-skinny suffices)
def _mlflow() -> Any:
    try:
        import mlflow  # lazy: an optional, heavy package, imported only by a run that names it
    except ImportError:
        raise ScenarioError(["run.trackers = 'mlflow': needs the optional package mlflow "
                             "(pip install 'asyncfl[mlflow]'), which is not installed"]) from None
    return mlflow


class MLflowTracker(Tracker):
    """An MLflow run per asyncfl run, in experiment ``experiment`` of the store ``tracking_uri``.
    A ``file:`` store is MLflow's file backend, which MLflow 3 keeps only on request
    (``MLFLOW_ALLOW_FILE_STORE``, set here for such a URI)."""

    def __init__(self, cfg: Any, ctx: Any = None) -> None:
        super().__init__(cfg, ctx)
        mlflow = _mlflow()
        uri = cfg.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or None
        if uri is None or uri.startswith("file:") or "://" not in uri:
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        self.client = mlflow.tracking.MlflowClient(tracking_uri=uri)
        self.run_id: str | None = None

    def _experiment(self) -> str:
        found = self.client.get_experiment_by_name(self.keys.experiment)
        return found.experiment_id if found is not None else self.client.create_experiment(self.keys.experiment)

    def start(self, start: Start) -> str:
        if start.resume_id is not None:
            self.run_id = start.resume_id
            self.client.update_run(self.run_id, status="RUNNING")
            return self.run_id
        tags = {"asyncfl.run_dir": str(start.run_dir)}
        if start.parent is not None:
            tags["mlflow.parentRunId"] = start.parent["run_id"]
        run = self.client.create_run(self._experiment(), run_name=self.keys.run_name or start.name, tags=tags)
        self.run_id = run.info.run_id
        from mlflow.entities import Param  # lazy: part of the optional package

        params = [Param(k, str(v)[:6000]) for k, v in start.params.items()]
        for i in range(0, len(params), 100):
            self.client.log_batch(self.run_id, params=params[i:i + 100])
        return self.run_id

    def last_step(self) -> int | None:
        assert self.run_id is not None
        history = self.client.get_metric_history(self.run_id, "updates_accepted")
        return max((m.step for m in history), default=None)

    def log(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric  # lazy: part of the optional package

        now = time.time_ns() // 1_000_000
        self.client.log_batch(self.run_id, metrics=[Metric(k, v, now, step) for k, v in values.items()])

    def artefact(self, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path))

    def finish(self, status: str) -> None:
        self.client.set_tag(self.run_id, "asyncfl.status", status)
        self.client.set_terminated(self.run_id, "FINISHED" if status in ("completed", "stopped") else "FAILED")

    def open_parent(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        run = self.client.create_run(self._experiment(), run_name=name, tags={"asyncfl.sweep": name})
        return {"run_id": run.info.run_id}

    def close_parent(self, parent: dict[str, Any]) -> None:
        self.client.set_terminated(parent["run_id"], "FINISHED")


# ---------------------------------------------------------------------------------------------
# Weights & Biases (asyncfl[wandb]), offline unless asked otherwise
def _wandb() -> Any:
    try:
        import wandb  # lazy: an optional, heavy package, imported only by a run that names it
    except ImportError:
        raise ScenarioError(["run.trackers = 'wandb': needs the optional package wandb "
                             "(pip install 'asyncfl[wandb]'), which is not installed"]) from None
    return wandb


class WandbTracker(Tracker):
    """A W&B run per asyncfl run. ``mode = "offline"`` (the default) sets ``WANDB_MODE=offline``
    and writes everything under ``dir``'s ``wandb/offline-run-*``; nothing leaves the machine.
    A resumed run reopens the same id (``resume="allow"``); offline, W&B writes the continuation
    to a new folder of the same id, which ``wandb sync`` merges."""

    def __init__(self, cfg: Any, ctx: Any = None) -> None:
        super().__init__(cfg, ctx)
        self.wandb = _wandb()
        self.run: Any = None

    def _init(self, **kw: Any) -> Any:
        if self.keys.mode == "offline":
            os.environ["WANDB_MODE"] = "offline"
        settings = self.wandb.Settings(mode=self.keys.mode, silent=True, console="off", x_disable_stats=True)
        return self.wandb.init(project=self.keys.project, entity=self.keys.entity, dir=self.keys.dir,
                               mode=self.keys.mode, settings=settings, reinit="create_new", **kw)

    def start(self, start: Start) -> str:
        group = start.parent["group"] if start.parent is not None else None
        self.run = self._init(id=start.resume_id, resume="allow" if start.resume_id else None, name=start.name,
                              group=group, job_type="point" if group else None, config=start.scenario)
        self.run.define_metric("*", step_metric="server_step")
        return str(self.run.id)

    def log(self, step: int, values: dict[str, float]) -> None:
        self.run.log({**values, "server_step": step})

    def artefact(self, path: Path) -> None:
        self.run.save(str(path), base_path=str(path.parent), policy="now")

    def finish(self, status: str) -> None:
        self.run.summary["asyncfl_status"] = status
        self.run.finish(exit_code=0 if status in ("completed", "stopped") else 1)

    def open_parent(self, name: str, params: dict[str, Any]) -> dict[str, Any]:
        return {"group": name}
