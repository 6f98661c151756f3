"""Experiment trackers: a run logged to TensorBoard, MLflow, Weights & Biases or a user's tracker
as it goes (``run.trackers``; docs/run-directory.md §15). A tracker is a component of the
list-valued kind ``tracker`` (:mod:`asyncfl.components.builtin`; a user's registers like any
other plug-in, docs/extending.md §9); this module builds the ones a scenario names and drives them.

Every tracker gets, against the server step:

* at the start, the resolved scenario as parameters (``section.key`` → value);
* at every evaluation, the metrics row (``loss``, ``accuracy``, ``train_loss``, ``gap``, the task's
  own metrics, ``staleness_mean``, ``staleness_max``, ``virtual_time``), the cumulative counters
  ``updates_accepted``, ``updates_dropped``, ``updates_rejected`` and, in a private run, the ε
  spent so far and the worst-off client's (``epsilon``, ``epsilon_client_max``: the row
  ``privacy.csv`` holds for that step);
* at the end, the summary and the figures the run directory holds as artefacts, and the status.

**The run's own files come first.** Every call into a tracker is guarded: a tracker that raises
is switched off for the rest of the run, its error is recorded in ``summary.json``'s
``trackers`` section, and the run goes on writing its files as without it.

**Resume.** ``trackers.json`` in the run directory records each tracker's run id and the last
step it logged (rewritten atomically after each evaluation). A resumed run — from a checkpoint,
or restarted from scratch — reopens the same tracker run and skips the evaluations it already
holds (the larger of the recorded step and what the store itself reports,
:meth:`Tracker.last_step`): the evaluations are the same numbers, so none is logged twice.

**A sweep** (:func:`sweep_parent`) opens one parent run per tracker and passes it to the points'
runs through the environment variable :data:`PARENT_ENV` (worker processes inherit it): MLflow
nests each point under the parent (``mlflow.parentRunId``), W&B groups them by the sweep's name.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from asyncfl.components import contracts as ct
from asyncfl.components.contracts import Tracker
from asyncfl.config.registries import TRACKERS
from asyncfl.config.scenario import Scenario
from asyncfl.errors import ScenarioError
from asyncfl.privacy import epsilon_curve
from asyncfl.records import StepEvent
from asyncfl.run.rundir import atomic_write
from asyncfl.run.tracker_base import Start
from asyncfl.run.tracker_names import named

LEDGER = "trackers.json"
PARENT_ENV = "ASYNCFL_TRACKER_PARENT"
#: files of a run directory logged as artefacts at the end (those that exist)
ARTEFACTS = ("summary.json", "bias.json", "components.json", "scenario.toml")
FIGURES = (".png", ".pdf", ".svg")


def build(scenario: Scenario) -> dict[str, Tracker]:
    """The trackers of ``scenario``, by name, each built by its component's builder from its own
    keys (``run.tracker.NAME``) and the run's :class:`~asyncfl.components.contracts.BuildContext`
    — their optional packages checked, before anything is written. A builder that returns no
    tracker (:class:`asyncfl.components.contracts.Tracker`) is a :class:`ScenarioError` naming it."""
    ctx = ct.BuildContext(clients=scenario.population.clients, seed=scenario.seed, steps=scenario.run.steps)
    out: dict[str, Tracker] = {}
    for component in named(scenario):
        tracker = component.make(component.own_config(scenario.run), ctx)
        if not isinstance(tracker, ct.Tracker):
            raise ScenarioError([f"run.trackers = {component.name!r}: its builder returned a {type(tracker).__name__}, "
                                 "not a tracker (subclass asyncfl.Tracker; docs/extending.md §9)"])
        out[component.name] = tracker
    return out


def flat_params(table: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """``{"server": {"lr": 0.3}}`` → ``{"server.lr": 0.3}`` (lists as their text)."""
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out.update(flat_params(value, name + "."))
        else:
            out[name] = value if isinstance(value, (int, float, str, bool)) else json.dumps(value)
    return out


def values_of(sim: Any, event: StepEvent) -> dict[str, float]:
    """What every tracker logs at an evaluation (see the module docstring)."""
    assert event.metrics is not None
    out = {("virtual_time" if k == "time" else k): float(v) for k, v in event.metrics.items()
           if k not in ("step", "wall_time") and v is not None and math.isfinite(float(v))}
    out.update(updates_accepted=float(event.accepted), updates_dropped=float(event.dropped),
               updates_rejected=float(event.rejected))
    if sim.privacy_setup is not None:
        row = epsilon_curve(sim.privacy_setup, [(event.step, sim.participation.most_by(event.step))])[0]
        out.update({k: float(row[k]) for k in ("epsilon", "epsilon_client_max") if math.isfinite(row[k])})
    return out


def _read_ledger(run_dir: Path) -> dict[str, Any]:
    try:
        data = json.loads((run_dir / LEDGER).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _warn(text: str) -> None:
    print(f"warning: {text}", file=sys.stderr)


@dataclass
class TrackerSet:
    """The trackers of one run, each guarded (see the module docstring)."""

    run_dir: Path
    trackers: dict[str, Tracker]
    failed: dict[str, str] = field(default_factory=dict)
    ledger: dict[str, Any] = field(default_factory=dict)
    skip: dict[str, int] = field(default_factory=dict)

    @classmethod
    def open(cls, scenario: Scenario, run_dir: Path, start_step: int, trackers: dict[str, Tracker]) -> "TrackerSet":
        self = cls(Path(run_dir), trackers)
        if not trackers:
            return self
        self.ledger = _read_ledger(self.run_dir)
        parents = json.loads(os.environ.get(PARENT_ENV, "{}") or "{}")
        table = scenario.to_dict()
        for name, tracker in list(self.trackers.items()):
            mine = self.ledger.get(name) if isinstance(self.ledger.get(name), dict) else {}
            start = Start(self.run_dir, self.run_dir.name, flat_params(table), table, mine.get("run_id"),
                          parents.get(name), start_step)
            run_id = self._call(name, tracker.start, start)
            if name in self.failed:
                continue
            known = self._call(name, tracker.last_step)
            self.skip[name] = -1 if TRACKERS.traits(name).rewrites_on_resume else max(int(mine.get("last_step", -1)), -1 if known is None else int(known))
            self.ledger[name] = {"run_id": run_id, "last_step": self.skip[name]}
        self._save()
        return self

    def _call(self, name: str, method: Any, *args: Any) -> Any:
        if name in self.failed:
            return None
        try:
            return method(*args)
        except Exception as exc:  # noqa: BLE001 - a tracker never costs the run its own files
            self.failed[name] = f"{type(exc).__name__}: {exc}"
            _warn(f"tracker {name} failed and is switched off for the rest of the run (the run's own files are kept): {self.failed[name]}")
            return None

    def _save(self) -> None:
        if self.ledger:
            body = json.dumps(self.ledger, indent=1, sort_keys=True)
            atomic_write(self.run_dir / LEDGER, lambda p: p.write_text(body, encoding="utf-8"))

    def on_event(self, sim: Any, event: StepEvent) -> None:
        if not self.trackers or event.metrics is None:
            return
        values = values_of(sim, event)
        for name, tracker in self.trackers.items():
            if event.step <= self.skip.get(name, -1):
                continue  # logged before a kill: the same numbers, not logged twice
            self._call(name, tracker.on_event, sim, event)
            self._call(name, tracker.log, event.step, values)
            if name not in self.failed:
                self.ledger[name]["last_step"] = event.step
        self._save()

    def close(self, status: str) -> dict[str, str]:
        """Attach the artefacts and close every tracker; returns ``summary.json``'s ``trackers``
        section (``ok`` or the error of each)."""
        files = [self.run_dir / n for n in ARTEFACTS] + sorted(p for p in self.run_dir.iterdir() if p.suffix in FIGURES)
        for name, tracker in self.trackers.items():
            for path in files:
                if path.is_file():
                    self._call(name, tracker.artefact, path)
            self._call(name, tracker.finish, status)
        return {name: self.failed.get(name, "ok") for name in self.trackers}


@contextlib.contextmanager
def sweep_parent(scenario: Scenario | None, name: str) -> Iterator[None]:
    """One parent run per tracker of ``scenario`` (a point of the sweep) for a sweep called
    ``name``, passed to the points' runs through :data:`PARENT_ENV` while the sweep runs."""
    trackers = build(scenario) if scenario is not None else {}
    if not trackers:
        yield
        return
    parents: dict[str, Any] = {}
    for tracker_name, tracker in trackers.items():
        try:
            parent = tracker.open_parent(name, flat_params(scenario.to_dict()))
        except Exception as exc:  # noqa: BLE001 - the sweep's runs go on without the parent
            _warn(f"tracker {tracker_name}: the sweep's parent run could not be opened: {type(exc).__name__}: {exc}")
            parent = None
        if parent is not None:
            parents[tracker_name] = parent
    before = os.environ.get(PARENT_ENV)
    os.environ[PARENT_ENV] = json.dumps(parents)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(PARENT_ENV, None)
        else:
            os.environ[PARENT_ENV] = before
        for tracker_name, parent in parents.items():
            with contextlib.suppress(Exception):
                trackers[tracker_name].close_parent(parent)
