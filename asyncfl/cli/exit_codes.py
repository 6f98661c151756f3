"""Exit codes of every ``asyncfl`` command (docs/architecture.md, "Package layout").

A leaf module: the command implementations and :mod:`asyncfl.cli.main` both read it, so neither
imports the other.
"""

EXIT_OK = 0
#: bad input (scenario, arguments, study spec, run directory): one clear message, no traceback
EXIT_USAGE = 2
#: numerical fault: the model diverged (the run directory holds everything up to that step)
EXIT_NUMERICAL = 3
#: interrupted (Ctrl-C / SIGINT): a checkpoint is written and the resume command printed
EXIT_INTERRUPTED = 130


def of_runs(statuses: "list[str] | tuple[str, ...]") -> int:
    """The exit code of a command that ran many runs (sweep, study, privacy), from their
    statuses: 0 when every run completed or stopped as its ``run.stop`` asked; else what ``asyncfl run`` would have exited with for
    the worst of them — 130 if one was interrupted, 2 if one failed or stalled (its message
    says why), 3 if one diverged."""
    if "interrupted" in statuses:
        return EXIT_INTERRUPTED
    if any(s not in ("completed", "stopped", "diverged") for s in statuses):  # config.stop.FINISHED_STATUSES (kept light)
        return EXIT_USAGE
    return EXIT_NUMERICAL if "diverged" in statuses else EXIT_OK
