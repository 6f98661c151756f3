"""The ``asyncfl`` command line (docs/architecture.md, "Package layout").

:mod:`asyncfl.cli.main` builds the parser from :mod:`asyncfl.cli.commands` (every subcommand's
arguments and help, torch-free) and runs one command, whose implementation module is imported
through the command registry only when that command runs.
"""
