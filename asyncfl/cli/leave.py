"""How an ``asyncfl`` process ends: without tearing the interpreter down (docs/performance.md,
"Start-up"; issue 34 item 4).

After ``import torch`` a normal interpreter exit spends 0.4 s of CPU on the 2-core VM of
docs/performance.md, more after a run (torch, scipy, pydantic, matplotlib's modules), freeing
module by module what the operating system frees at once when the process ends. A command has
written and closed every file by then (a run's directory is complete when :func:`asyncfl.cli.main.main`
returns: its figure process has been waited for), so :func:`leave` does what a normal exit does
that anyone can observe and skips the rest:

1. the ``atexit`` handlers run, as at a normal exit (loggers flushed, temporary folders removed,
   ray shut down, ``weakref.finalize`` callbacks called);
2. ``sys.stdout`` and ``sys.stderr`` are flushed; if that fails the status is 120 (as Python's
   own exit reports a failed flush), unless it was already non-zero;
3. the process ends with ``os._exit(code)``: no module teardown, no ``__del__`` at shutdown.

A thread that is not a daemon and still runs would be joined by a normal exit; then
:func:`leave` exits normally (``sys.exit``), so no such thread is cut short.

Only the command line's entry points (``asyncfl``, ``python -m asyncfl``, ``python -m
asyncfl.cli``) leave this way; :func:`asyncfl.cli.main.main` itself returns its code, so a
process that calls it (tests, notebooks, scripts) goes on as before.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import NoReturn

#: Python's exit status when flushing the standard streams at exit fails
EXIT_FLUSH_FAILED = 120


def leave(code: int) -> NoReturn:
    """End the process with status ``code`` as described in the module doc."""
    main = threading.main_thread()
    if any(t is not main and not t.daemon and t.is_alive() for t in threading.enumerate()):
        sys.exit(code)  # a normal exit joins them
    atexit._run_exitfuncs()  # CPython's: what a normal exit runs first
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):
            code = code or EXIT_FLUSH_FAILED
    os._exit(code)
