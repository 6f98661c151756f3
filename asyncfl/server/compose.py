"""Building the server side of a scenario by name (docs/architecture.md §4): the server rule
(``server.rule``, :data:`~asyncfl.config.registries.RULES`) and the algorithm
(``server.algorithm``, :data:`~asyncfl.config.registries.ALGORITHMS`).

Registries are resolved here, in the code that composes a run, and never in the modules that
implement a rule or an algorithm: those are what a registry points to, so they import nothing
that points back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from asyncfl.config.registries import ALGORITHMS, RULES
from asyncfl.errors import ScenarioError
from asyncfl.server.aggregation import Aggregator
from asyncfl.server.algorithms import Algorithm
from asyncfl.server.rules import ServerRule

if TYPE_CHECKING:
    from asyncfl.config.scenario import Scenario, ServerConfig
    from asyncfl.tasks.base import Task


def make_rule(server: ServerConfig) -> ServerRule:
    """The rule named by ``server.rule``, configured from the ``[server]`` section by its
    ``from_config``."""
    if server.rule not in RULES:
        raise ScenarioError([RULES.unknown(server.rule)])
    return RULES.load(server.rule).from_config(server)


def build_algorithm(scenario: Scenario, task: Task, aggregator: Aggregator) -> Algorithm:
    """The algorithm named by ``server.algorithm``, over ``aggregator`` with the scenario's
    server rule: ``build(scenario, task, aggregator, rule)``."""
    name = scenario.server.algorithm
    if name not in ALGORITHMS:
        raise ScenarioError([ALGORITHMS.unknown(name)])
    return ALGORITHMS.load(name)(scenario, task, aggregator, make_rule(scenario.server))
