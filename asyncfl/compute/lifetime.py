"""Worker processes that do not outlive the process that started them (docs/architecture.md §9).

A worker calls :func:`die_with_parent` first thing. On Linux the kernel then sends it ``SIGKILL``
the moment its parent dies (``prctl(PR_SET_PDEATHSIG)``), SIGKILL of the parent included; the
parent's pid is checked once more right after, because the parent may have died before the call
(the worker is then already re-parented). Elsewhere a daemon thread polls the parent's pid.
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


def die_with_parent(parent_pid: int) -> None:
    """Make this process exit when ``parent_pid`` (the process that started it) dies."""
    if sys.platform.startswith("linux") and _prctl_deathsig(signal.SIGKILL):
        if os.getppid() != parent_pid:  # the parent died before prctl took effect
            os._exit(1)
        return
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
