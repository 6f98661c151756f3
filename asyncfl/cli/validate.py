"""``asyncfl validate SCENARIO``: check a scenario and print it with every default resolved
(docs/architecture.md, "Package layout"). Torch-free: validation needs only the config. The
memory estimate (:mod:`asyncfl.config.memory`) is checked too: a scenario that cannot fit in
this machine's memory is refused (exit 2) as ``asyncfl run`` would refuse it, and one whose per-step
records are large is accepted with the same warning ``asyncfl run`` prints."""

from __future__ import annotations

import argparse

from asyncfl.cli.console import say, warn
from asyncfl.cli.exit_codes import EXIT_OK
from asyncfl.cli.scenario_input import scenario_from_args
from asyncfl.config.memory import check_memory, record_warning


def cmd_validate(args: argparse.Namespace) -> int:
    scenario = scenario_from_args(args)
    note = record_warning(scenario, check_memory(scenario))  # a scenario this machine cannot hold is refused here too
    if note:
        warn(note)
    say(scenario.to_toml())
    return EXIT_OK
