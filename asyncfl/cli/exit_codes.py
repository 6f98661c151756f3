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
