"""``asyncfl validate SCENARIO``: check a scenario and print it with every default resolved
(docs/architecture.md, "Package layout"). Torch-free: validation needs only the config. The
memory estimate (:mod:`asyncfl.config.memory`) is checked too: a scenario that cannot fit in
this machine's memory is refused (exit 2) as ``asyncfl run`` would refuse it, and one whose per-step
records are large is accepted with the same warning ``asyncfl run`` prints. After the scenario, a
TOML comment names each component it uses and where that component came from (built into
asyncfl, an installed package and its version, or a module; docs/extending.md §3), so the output
stays a scenario file."""

from __future__ import annotations

import argparse
from typing import Any

from asyncfl.cli.console import say, warn
from asyncfl.cli.exit_codes import EXIT_OK
from asyncfl.cli.scenario_input import scenario_from_args
from asyncfl.config.memory import check_memory, record_warning
from asyncfl.run.tracker_names import named


def cmd_validate(args: argparse.Namespace) -> int:
    scenario = scenario_from_args(args)
    note = record_warning(scenario, check_memory(scenario))  # a scenario this machine cannot hold is refused here too
    if note:
        warn(note)
    say(scenario.to_toml())
    say(origins(scenario))
    return EXIT_OK


def origins(scenario: Any) -> str:
    """``# server.rule = "clipped-momentum": package asyncfl-example-plugin 0.1.0 (…)``, one
    comment line per component the scenario uses."""
    lines = ["# the components of this scenario and where each came from:"]
    for component in (*scenario.components().values(), *named(scenario)):
        where = component.origin.describe() if component.origin is not None else "registered from Python"
        lines.append(f"#   {component.kind_info.field} = {component.name!r}: {where}")
    return "\n".join(lines)
