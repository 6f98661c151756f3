"""Every ``asyncfl`` subcommand: its arguments and help (here) and its implementation (the
command registry; docs/architecture.md, "Package layout").

The parser is built from this module alone, so ``asyncfl --help``, argument errors,
``asyncfl validate`` and ``asyncfl scenarios`` import neither torch, ray nor matplotlib. Each
command's implementation is a function ``cmd(args) -> exit code`` in its own module, named in
:data:`COMMANDS` as ``"module:attribute"`` and imported by :meth:`~asyncfl.cli.table.CommandTable.load` only when that
command runs. A new command is one entry in :data:`COMMANDS` and one function in
:data:`ARGUMENTS`.
"""

from __future__ import annotations

import argparse
from typing import Callable

from asyncfl.figures.style import FORMATS

#: the metrics ``asyncfl compare --metric`` can overlay (columns of metrics.csv)
METRICS = ("accuracy", "loss", "gap", "train_loss", "staleness_mean", "staleness_max")
from asyncfl.cli.table import CommandTable

#: subcommand name → (implementation, one-line help); the order is that of ``asyncfl --help``
COMMANDS: CommandTable[Callable[[argparse.Namespace], int]] = CommandTable("command", "COMMAND", {
    "run": ("asyncfl.cli.run_cmd:cmd_run", "run a scenario and write its run directory"),
    "resume": ("asyncfl.cli.run_cmd:cmd_resume", "continue an interrupted or killed run from its last checkpoint"),
    "validate": ("asyncfl.cli.validate:cmd_validate", "check a scenario and print it with every default resolved"),
    "bias": ("asyncfl.cli.bias:cmd_bias", "implicit momentum bias of a run: bias.json, a table and heat maps"),
    "scenarios": ("asyncfl.cli.scenario_library:cmd_scenarios", "list the scenario library, one line each"),
    "plot": ("asyncfl.cli.plot:cmd_plot", "learning curves of one or more runs against steps and virtual time"),
    "compare": ("asyncfl.cli.compare:cmd_compare", "compare runs (any protocols): a table of final metrics and one metric's curves"),
    "sweep": ("asyncfl.cli.sweep:cmd_sweep", "a grid of scenario keys × seeds, run in parallel: results.csv, summary.csv with 95%% CIs"),
})

#: the commands that draw the figure of a run they drive: their figure process is started before
#: their module (and torch) is imported (``args.figures``, docs/performance.md "Start-up")
DRAW_FIGURES = ("run", "resume")


# ---------------------------------------------------------------------------------------------
def changes_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a scenario key (repeatable); VALUE is read as TOML, else as a string. Switching "
                        "latency.dist or task.name drops the file's keys of the old variant (a note names them)")
    p.add_argument("--unset", action="append", default=[], metavar="SECTION.KEY",
                   help="remove a key of the file, so that its default applies (repeatable)")


def allow_module_arg(p: argparse.ArgumentParser) -> None:
    """``--allow-module MODULE``: the one way a command line lets a ``"module:attribute"``
    component name import code (docs/extending.md §3)."""
    p.add_argument("--allow-module", dest="allow_modules", action="append", default=[], metavar="MODULE",
                   help="let component names 'MODULE:attribute' (and 'MODULE.sub:attribute') import MODULE "
                        "(repeatable; also exported to worker processes as ASYNCFL_ALLOW_MODULES). Without it a "
                        "scenario or run directory runs no code: only registered components are found")


def _scenario_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="scenario TOML file (see scenarios/)")
    changes_args(p)
    allow_module_arg(p)


def quiet_arg(p: argparse.ArgumentParser, help: str = "no progress bar and no summary table") -> None:
    p.add_argument("--quiet", action="store_true", help=help)


def run_args(p: argparse.ArgumentParser) -> None:
    _scenario_args(p)
    p.add_argument("--out", help="run directory (default: runs/NAME-TIMESTAMP)")
    p.add_argument("--overwrite", action="store_true", help="--out may hold an earlier run: its files (and only those) are removed first; "
                                                                   "a directory holding anything else is refused")
    format_arg(p)
    quiet_arg(p)


def resume_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="the run directory (written by 'asyncfl run')")
    format_arg(p, figure_path=False)
    quiet_arg(p)
    allow_module_arg(p)
    p.add_argument("--accept-changed-code", action="store_true",
                   help="continue although a plug-in's code differs from the code the run started with "
                        "(components.json); the files that changed are recorded in the run directory")


def validate_args(p: argparse.ArgumentParser) -> None:
    _scenario_args(p)


def format_arg(p: argparse.ArgumentParser, figure_path: bool = True) -> None:
    p.add_argument("--format", choices=FORMATS,
                   help="file format of the figures (default: png" + (", or the suffix of a figure path given with --out)"
                                                                       if figure_path else ")"))


def bias_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dir", help="a run directory written by `asyncfl run` (bias.json and the heat maps are written into it)")
    format_arg(p, figure_path=False)


def scenarios_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--dir", help="directory of scenario files (default: the library's scenarios/)")


def plot_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dirs", nargs="+", help="run directories (overlaid)")
    p.add_argument("--out", help="figure path, outside every run directory (default: plot.FORMAT in the current directory)")
    p.add_argument("--label", action="append", help="legend label per run (repeatable, in order)")
    p.add_argument("--overwrite", action="store_true", help="replace the figure if it exists")
    p.add_argument("--tradeoff", action="store_true",
                   help="draw the f-DP trade-off of private runs (attacker's TPR against FPR) instead of learning curves")
    format_arg(p)


def compare_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_dirs", nargs="+", metavar="RUN", help="run directories (FedBuff, sync, baselines, private: any mix)")
    p.add_argument("--metric", default="accuracy",
                   help=f"the metric whose curves are overlaid: {', '.join(METRICS)} or a task's own (macro_f1, …) "
                        "(default: accuracy; loss when no run has one)")
    p.add_argument("--out", help="figure path, outside every run directory (default: no figure, only the table)")
    p.add_argument("--label", action="append", help="label per run (repeatable, in order; default: scenario names)")
    p.add_argument("--csv", help="also write the table as CSV to this path (outside every run directory)")
    p.add_argument("--overwrite", action="store_true", help="replace the figure and the CSV file if they exist")
    format_arg(p)


def seeds_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--seeds", nargs="+", metavar="SEEDS",
                   help="seeds: a list (0 1 2), a range (0-4), commas (0,2,5) or a mix (default: the scenario's seed)")


def overwrite_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--overwrite", action="store_true",
                   help="--out may hold the results of another spec of this command: its files (and only those) are "
                        "removed first; a folder holding anything else is refused")


def placement_args(p: argparse.ArgumentParser) -> None:
    """Where the runs go (docs/architecture.md §9)."""
    p.add_argument("--workers", type=int, metavar="N",
                   help="runs at once in local worker processes (default: the machine's cores; 1 = in this process); "
                        "with --ray: the CPUs of the local Ray instance")
    p.add_argument("--ray", metavar="ADDRESS", help="run on Ray: 'auto' starts a local instance, HOST:PORT joins a cluster "
                                                    "(pip install 'asyncfl[ray]')")


def sweep_args(p: argparse.ArgumentParser) -> None:
    _scenario_args(p)
    p.add_argument("--grid", action="append", default=[], metavar="KEY=V1,V2,...",
                   help="a scenario key and its values (repeatable: the cartesian product is run)")
    seeds_arg(p)
    p.add_argument("--out", required=True, help="sweep directory (rerunning the same command resumes it)")
    p.add_argument("--extend", action="store_true", help="add points to the sweep in --out (its grid must be a subset)")
    overwrite_arg(p)
    placement_args(p)
    quiet_arg(p, "no progress display and no table")


#: subcommand name → the function adding its arguments (same names as :data:`COMMANDS`)
ARGUMENTS: dict[str, Callable[[argparse.ArgumentParser], None]] = {
    "run": run_args, "resume": resume_args, "validate": validate_args, "bias": bias_args,
    "scenarios": scenarios_args, "plot": plot_args, "compare": compare_args, "sweep": sweep_args,
}


def add_commands(sub: argparse._SubParsersAction) -> None:
    """One subparser per registered command, with its help and arguments."""
    for entry in COMMANDS.entries():
        ARGUMENTS[entry.name](sub.add_parser(entry.name, help=entry.summary))
