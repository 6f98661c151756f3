"""asyncfl: a discrete-event simulator of asynchronous federated learning.

The public API is the names of :data:`__all__`, listed here and nowhere else (docs/extending.md
§8); every other module is private by convention. ``import asyncfl`` is light (no torch, no
pandas): each name is imported on first use from the module :data:`PUBLIC` gives.

* registering your own parts: :class:`Component`, :func:`register`, :func:`component`,
  :func:`allow_modules` (which modules a ``"module:attribute"`` name may import), the
  kinds (:data:`KINDS`) and their traits, the config bases :class:`Section` and
  :class:`TaskSection`; the one builder shape ``build(cfg, ctx)``'s :class:`BuildContext`,
  :func:`returns` (the builder of a ready-made product) and :class:`ServerProtocol`;
* what a component's builder works with (or subclasses): :class:`Task`, :class:`Tracker`, :class:`ClientData`, :class:`LocalJob`,
  :class:`LocalSolver`, :func:`batch_schedule`, :class:`ServerRule`, :class:`RuleOutput`,
  :class:`Aggregate`;
* running: :func:`load_scenario`, :func:`scenario_from_dict`, :func:`simulate`;
* reading results: :func:`load_run`, :func:`load_sweep`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from asyncfl.version import __version__

#: every public name and the module that defines it
PUBLIC: dict[str, str] = {
    "Component": "asyncfl.components.core",
    "Origin": "asyncfl.components.core",
    "KINDS": "asyncfl.components.core",
    "BuildContext": "asyncfl.components.contracts",
    "ServerProtocol": "asyncfl.components.contracts",
    "returns": "asyncfl.components.contracts",
    "register": "asyncfl.components.registry",
    "unregister": "asyncfl.components.registry",
    "allow_modules": "asyncfl.components.allow",
    "component": "asyncfl.components.registry",
    "UnknownComponent": "asyncfl.components.registry",
    "TaskTraits": "asyncfl.components.traits",
    "LatencyTraits": "asyncfl.components.traits",
    "AvailabilityTraits": "asyncfl.components.traits",
    "ProtocolTraits": "asyncfl.components.traits",
    "AlgorithmTraits": "asyncfl.components.traits",
    "RuleTraits": "asyncfl.components.traits",
    "SolverTraits": "asyncfl.components.traits",
    "ExecutorTraits": "asyncfl.components.traits",
    "SamplingTraits": "asyncfl.components.traits",
    "NoiseTraits": "asyncfl.components.traits",
    "TrackerTraits": "asyncfl.components.traits",
    "Tracker": "asyncfl.run.tracker_base",
    "MemoryPart": "asyncfl.components.traits",
    "MemoryShape": "asyncfl.components.traits",
    "Section": "asyncfl.config.base",
    "TaskSection": "asyncfl.config.tasks",
    "Scenario": "asyncfl.config.scenario",
    "ScenarioError": "asyncfl.errors",
    "Task": "asyncfl.tasks.base",
    "ClientData": "asyncfl.tasks.base",
    "LocalJob": "asyncfl.compute.training",
    "batch_schedule": "asyncfl.compute.training",
    "LocalSolver": "asyncfl.compute.solvers",
    "ServerRule": "asyncfl.server.rules",
    "RuleOutput": "asyncfl.server.rules",
    "Aggregate": "asyncfl.server.aggregation",
    "load_scenario": "asyncfl.api",
    "scenario_from_dict": "asyncfl.api",
    "simulate": "asyncfl.api",
    "load_run": "asyncfl.results",
    "load_sweep": "asyncfl.results",
}

__all__ = [
    "__version__",
    "Component",
    "Origin",
    "KINDS",
    "BuildContext",
    "ServerProtocol",
    "returns",
    "register",
    "unregister",
    "allow_modules",
    "component",
    "UnknownComponent",
    "TaskTraits",
    "LatencyTraits",
    "AvailabilityTraits",
    "ProtocolTraits",
    "AlgorithmTraits",
    "RuleTraits",
    "SolverTraits",
    "ExecutorTraits",
    "SamplingTraits",
    "NoiseTraits",
    "TrackerTraits",
    "Tracker",
    "MemoryPart",
    "MemoryShape",
    "Section",
    "TaskSection",
    "Scenario",
    "ScenarioError",
    "Task",
    "ClientData",
    "LocalJob",
    "batch_schedule",
    "LocalSolver",
    "ServerRule",
    "RuleOutput",
    "Aggregate",
    "load_scenario",
    "scenario_from_dict",
    "simulate",
    "load_run",
    "load_sweep",
]
assert set(__all__) == {"__version__", *PUBLIC}

if TYPE_CHECKING:  # the names as type checkers see them (at run time: __getattr__ below)
    from asyncfl.api import load_scenario as load_scenario
    from asyncfl.api import scenario_from_dict as scenario_from_dict
    from asyncfl.api import simulate as simulate
    from asyncfl.components.allow import allow_modules as allow_modules
    from asyncfl.components.contracts import BuildContext as BuildContext
    from asyncfl.components.contracts import ServerProtocol as ServerProtocol
    from asyncfl.components.contracts import returns as returns
    from asyncfl.components.core import KINDS as KINDS
    from asyncfl.components.core import Component as Component
    from asyncfl.components.core import Origin as Origin
    from asyncfl.components.registry import UnknownComponent as UnknownComponent
    from asyncfl.components.registry import component as component
    from asyncfl.components.registry import register as register
    from asyncfl.components.registry import unregister as unregister
    from asyncfl.components.traits import AlgorithmTraits as AlgorithmTraits
    from asyncfl.components.traits import AvailabilityTraits as AvailabilityTraits
    from asyncfl.components.traits import ExecutorTraits as ExecutorTraits
    from asyncfl.components.traits import LatencyTraits as LatencyTraits
    from asyncfl.components.traits import MemoryPart as MemoryPart
    from asyncfl.components.traits import MemoryShape as MemoryShape
    from asyncfl.components.traits import ProtocolTraits as ProtocolTraits
    from asyncfl.components.traits import RuleTraits as RuleTraits
    from asyncfl.components.traits import SamplingTraits as SamplingTraits
    from asyncfl.components.traits import NoiseTraits as NoiseTraits
    from asyncfl.components.traits import TrackerTraits as TrackerTraits
    from asyncfl.run.tracker_base import Tracker as Tracker
    from asyncfl.components.traits import SolverTraits as SolverTraits
    from asyncfl.components.traits import TaskTraits as TaskTraits
    from asyncfl.compute.solvers import LocalSolver as LocalSolver
    from asyncfl.compute.training import LocalJob as LocalJob
    from asyncfl.compute.training import batch_schedule as batch_schedule
    from asyncfl.config.base import Section as Section
    from asyncfl.config.scenario import Scenario as Scenario
    from asyncfl.config.tasks import TaskSection as TaskSection
    from asyncfl.errors import ScenarioError as ScenarioError
    from asyncfl.results import load_run as load_run
    from asyncfl.results import load_sweep as load_sweep
    from asyncfl.server.aggregation import Aggregate as Aggregate
    from asyncfl.server.rules import RuleOutput as RuleOutput
    from asyncfl.server.rules import ServerRule as ServerRule
    from asyncfl.tasks.base import ClientData as ClientData
    from asyncfl.tasks.base import Task as Task


def __getattr__(name: str) -> Any:
    module = PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'asyncfl' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
