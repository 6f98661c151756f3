"""Command line: ``asyncfl run SCENARIO [--set section.key=value ...] [--out DIR]`` and friends
(docs/architecture.md, "Package layout").

Exit codes: 0 success; 2 bad input (scenario, arguments, run directory) with one clear message
and no traceback; 3 numerical fault (the model diverged; the run directory holds everything up
to that step and a checkpoint of it); 130 interrupted (Ctrl-C / SIGINT: the run stops between two
events, writes ``checkpoint.pt`` and prints the ``asyncfl resume RUN_DIR`` command; a second
Ctrl-C aborts at once, leaving the previous checkpoint).

This module builds the parser from :mod:`asyncfl.cli.commands` and imports only torch-free
modules; the command that runs is loaded from :data:`asyncfl.cli.commands.COMMANDS`.
:func:`run_script` gives a script built on the library (``python -m analysis.…``) the same
parser behaviour and exit codes.
"""

from __future__ import annotations

import argparse
import shlex
import sys

from asyncfl.version import __version__
from asyncfl.cli.commands import COMMANDS, DRAW_FIGURES, add_commands
from asyncfl.components.allow import allow_modules
from asyncfl.cli.console import fault, warn
from asyncfl.cli.exit_codes import EXIT_INTERRUPTED, EXIT_NUMERICAL, EXIT_OK, EXIT_USAGE
from asyncfl.lifecycle import leave, loading
from typing import Callable

from asyncfl.errors import AsyncFLError, NumericalFault, UsageError
from asyncfl.figures.process import FigureProcess

__all__ = ["EXIT_INTERRUPTED", "EXIT_NUMERICAL", "EXIT_OK", "EXIT_USAGE", "UsageError", "build_parser", "main", "run_script"]


class _Parser(argparse.ArgumentParser):
    """argparse that raises instead of exiting, so usage errors share the exit-2 path."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="asyncfl", description="Simulate asynchronous federated learning.")
    parser.add_argument("--version", action="version", version=f"asyncfl {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    def command(args: argparse.Namespace) -> int:
        permit(args)
        # a command that draws a run's figure gets a figure process, started before its module
        # imports torch, so that matplotlib's import overlaps torch's (docs/performance.md "Start-up")
        with FigureProcess(start=args.command in DRAW_FIGURES) as args.figures:
            with loading():  # the collector paused while torch and the engine load (asyncfl.lifecycle)
                implementation = COMMANDS.load(args.command)
            return int(implementation(args) or EXIT_OK)

    return _guarded(build_parser, command, "asyncfl", argv)


def permit(args: argparse.Namespace) -> None:
    """Allow the modules of ``--allow-module`` (:func:`asyncfl.allow_modules`), before anything is read."""
    try:
        allow_modules(*getattr(args, "allow_modules", None) or ())
    except ValueError as exc:
        raise UsageError(f"--allow-module: {exc}") from None


def run_script(prog: str, description: str, add_arguments: Callable[[argparse.ArgumentParser], None],
               command: Callable[[argparse.Namespace], int], argv: list[str] | None = None) -> int:
    """Run ``command`` on the arguments ``add_arguments`` declares, as ``asyncfl`` runs its own
    commands: a usage error exits 2 with one line, a numerical fault 3, Ctrl-C 130, no
    traceback; ``args.command_line`` holds ``prog`` and the arguments as typed (what the folders
    the command makes record)."""
    def parser() -> argparse.ArgumentParser:
        p = _Parser(prog=prog, description=description)
        add_arguments(p)
        return p

    def guarded(args: argparse.Namespace) -> int:
        permit(args)
        return int(command(args) or EXIT_OK)

    return _guarded(parser, guarded, prog, argv)


def _guarded(parser: Callable[[], argparse.ArgumentParser], command: Callable[[argparse.Namespace], int], prog: str,
             argv: list[str] | None) -> int:
    """Parse ``argv`` and run ``command``, mapping errors to exit codes (module docstring)."""
    try:
        args = parser().parse_args(argv)
        args.command_line = " ".join([prog, *(shlex.quote(str(a)) for a in (sys.argv[1:] if argv is None else argv))])
        return command(args)
    except NumericalFault as exc:
        fault("numerical fault:", str(exc))
        return EXIT_NUMERICAL
    except AsyncFLError as exc:
        warn(f"error: {exc}")
        return EXIT_USAGE
    except OSError as exc:  # an unwritable --out, a full disk: the system's message, no traceback
        warn(f"error: {exc.strerror or exc}{f': {exc.filename}' if exc.filename else ''}")
        return EXIT_USAGE
    except KeyboardInterrupt:
        warn("interrupted")
        return EXIT_INTERRUPTED


def entry() -> None:  # pragma: no cover
    """The ``asyncfl`` command (and ``python -m asyncfl``): :func:`main`, then the process ends
    without tearing the interpreter down (:func:`asyncfl.lifecycle.leave`)."""
    leave(main())


if __name__ == "__main__":  # pragma: no cover
    entry()
