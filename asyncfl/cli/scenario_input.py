"""The scenario a command was given: ``SCENARIO [--set KEY=VALUE]… [--unset KEY]…``
(docs/scenario.md §2). Torch-free: ``validate`` uses it.

The notes of the changes (the keys dropped when ``--set`` switches a tagged section's variant)
are printed on standard error, one line each, before the command goes on.
"""

from __future__ import annotations

import argparse

from asyncfl.cli.console import warn
from asyncfl.config import scenario as scenario_mod


def scenario_from_args(args: argparse.Namespace) -> scenario_mod.Scenario:
    """Load ``args.scenario`` with ``args.overrides`` (``--set``) and ``args.unset`` applied."""
    notes: list[str] = []
    scenario = scenario_mod.load(args.scenario, args.overrides, getattr(args, "unset", ()) or (), notes)
    for note in notes:
        warn(note)
    return scenario
