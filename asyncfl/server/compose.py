"""Building the server side of a scenario (docs/architecture.md §4): the server rule and the
algorithm it names, each by its component's builder with its own config.

Components are resolved here, in the code that composes a run, and never in the modules that
implement a rule or an algorithm: those are what a component points to, so they import nothing
that points back.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from asyncfl.server.aggregation import Aggregator
from asyncfl.server.algorithms import Algorithm, AlgorithmContext
from asyncfl.server.rules import ServerRule

if TYPE_CHECKING:
    from asyncfl.config.scenario import Scenario


def make_rule(scenario: Scenario) -> ServerRule:
    """The rule ``server.rule`` names, built from its own config."""
    return scenario.component("rule").builder()(scenario.config_of("rule"))


def build_algorithm(scenario: Scenario, num_clients: int, aggregator: Aggregator) -> Algorithm:
    """The algorithm ``server.algorithm`` names, built from its own config and an
    :class:`AlgorithmContext` (the clients, ``client.mu``, ``server.lr``, ``aggregator``, the rule)."""
    ctx = AlgorithmContext(num_clients, scenario.client.mu, scenario.server.lr, aggregator, make_rule(scenario))
    return scenario.component("algorithm").builder()(scenario.config_of("algorithm"), ctx)
