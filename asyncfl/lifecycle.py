"""How an ``asyncfl`` process starts its heavy imports and how it ends (docs/performance.md,
"Start-up"; issue 34 item 4): two costs of the interpreter, not of the work, on a short run.

**Loading a command** (:func:`loading`). Importing torch, the engine and pydantic creates some
million objects; Python's cyclic garbage collector keeps traversing them as they are created
(0.16 s of ``import torch`` alone on the 2-core VM of docs/performance.md), and after them every
full collection of the run traverses them again, though module-level objects live as long as
the process. So while a command's implementation is imported for the first time in a process
(torch not imported yet), and while the figure process imports matplotlib and draws its warm-up
figure, the collector is paused; then everything alive is moved to the permanent generation
(``gc.freeze``), which later collections skip, and the collector resumes. Reference counting
frees what it always freed; a process that had torch already (tests, notebooks) is left alone.

**Ending** (:func:`leave`). After ``import torch`` a normal interpreter exit spends 0.4 s of CPU on
the same VM, more after a run (torch, scipy, pydantic), freeing module by module what the
operating system frees at once when the process ends. A command has written and closed every
file by then (a run's directory is complete when :func:`asyncfl.cli.main.main` returns: its
figure process has been waited for), so :func:`leave` does what a normal exit does that anyone
can observe and skips the rest:

1. the ``atexit`` handlers run, as at a normal exit (loggers flushed, temporary folders removed,
   ray shut down, ``weakref.finalize`` callbacks called);
2. ``sys.stdout`` and ``sys.stderr`` are flushed; if that fails the status is 120 (as Python's
   own exit reports a failed flush), unless it was already non-zero;
3. the process ends with ``os._exit(code)``: no module teardown, no ``__del__`` at shutdown.

A thread that is not a daemon and still runs would be joined by a normal exit; then
:func:`leave` exits normally (``sys.exit``), so no such thread is cut short.

Only the command line's entry points (``asyncfl``, ``python -m asyncfl``, ``python -m
asyncfl.cli``) and the figure process (:mod:`asyncfl.figures.process`) leave this way;
:func:`asyncfl.cli.main.main` itself returns its code, so a process that calls it (tests,
notebooks, scripts) goes on as before.
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import os
import sys
import threading
from typing import Iterator, NoReturn

#: Python's exit status when flushing the standard streams at exit fails
EXIT_FLUSH_FAILED = 120


@contextlib.contextmanager
def loading() -> Iterator[None]:
    """The collector paused for the duration, then the survivors frozen (module doc), when torch
    is not imported yet and the collector is on; otherwise nothing changes."""
    if "torch" in sys.modules or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.freeze()
        gc.enable()


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
