"""Worker processes that do not outlive the process that started them (docs/architecture.md §9).

A worker calls :func:`die_with_parent` first thing. On Linux the kernel then sends it ``SIGKILL``
the moment its parent dies (``prctl(PR_SET_PDEATHSIG)``), SIGKILL of the parent included; the
parent's pid is checked once more right after, because the parent may have died before the call
(the worker is then already re-parented); and a daemon thread polls the parent's pid, for the
cases the signal does not cover. A worker whose parent is gone exits with ``os._exit`` at once
(a normal exit would wait for queues nobody reads).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
import time

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
POLL_SECONDS = 0.5


def die_with_parent(parent_pid: int, by_main_thread: bool = True) -> None:
    """Make this process exit when ``parent_pid`` (the process that started it) dies.

    The kernel's signal follows the death of the *thread* that started the process, so it is
    asked for only when that was the parent's main thread (``by_main_thread``); a daemon thread
    that polls the parent's pid every :data:`POLL_SECONDS` covers every other case (a pool
    started from a worker thread, another operating system)."""
    if by_main_thread and sys.platform.startswith("linux"):
        _prctl_deathsig(signal.SIGKILL)
    if os.getppid() != parent_pid:  # the parent died before we got here
        os._exit(1)
    threading.Thread(target=_watch, args=(parent_pid,), name="asyncfl-parent-watch", daemon=True).start()


def _prctl_deathsig(sig: int) -> bool:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        return libc.prctl(PR_SET_PDEATHSIG, int(sig), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch(parent_pid: int) -> None:
    while os.getppid() == parent_pid:
        time.sleep(POLL_SECONDS)
    os._exit(1)
