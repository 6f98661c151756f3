"""``asyncfl validate SCENARIO``: check a scenario and print it with every default resolved
(docs/architecture.md, "Package layout"). Torch-free: validation needs only the config."""

from __future__ import annotations

import argparse

from asyncfl.cli.console import say
from asyncfl.cli.exit_codes import EXIT_OK
from asyncfl.cli.scenario_input import scenario_from_args


def cmd_validate(args: argparse.Namespace) -> int:
    scenario = scenario_from_args(args)
    say(scenario.to_toml())
    return EXIT_OK
