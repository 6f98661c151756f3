"""The cyclic garbage collector's pace while the engine simulates (docs/architecture.md §10).

The engine makes and drops a handful of small objects per arrival (a job, a future, an in-flight
record, a clock entry, an ``updates.csv`` row). Reference counting frees them at once; none of
them forms a cycle that only the collector could free. Python's collector nevertheless runs a
young-generation pass every ``700`` net allocations (its default ``threshold0``) and scans every
young container each time, and with ``10⁴``–``10⁵`` clients in flight the survivors it promotes
make the older passes long as well: about half of the engine's CPU time at ``10⁶``–``10⁷``
clients and a third of it in ``benchmarks.engine`` (docs/architecture.md §10).

While a simulation advances its clock, :func:`relaxed` raises ``threshold0`` to
:data:`YOUNG_THRESHOLD` (and the older generations' to :data:`OLDER_THRESHOLDS`): the collector
still runs, so a cycle made by a user's component is still freed, only less often. Nothing the
simulation computes depends on when the collector runs, so every run gives the same files.
The previous thresholds come back when the last simulation in the process leaves its loop
(a depth counter, so simulations interleaved on one event loop restore them once, in the end).
"""

from __future__ import annotations

import gc
from contextlib import contextmanager
from typing import Iterator

__all__ = ["OLDER_THRESHOLDS", "YOUNG_THRESHOLD", "relaxed"]

#: net container allocations between two young-generation passes while simulating (default 700)
YOUNG_THRESHOLD = 100_000
#: young passes per middle pass, middle passes per full pass (defaults 10 and 10)
OLDER_THRESHOLDS = (50, 1000)

_depth = 0
_saved: tuple[int, ...] = ()


@contextmanager
def relaxed() -> Iterator[None]:
    """Run the block with the collector's thresholds raised (module docstring); nested and
    interleaved uses restore the caller's thresholds once, when the outermost one exits."""
    global _depth, _saved
    if _depth == 0:
        _saved = gc.get_threshold()
        gc.set_threshold(YOUNG_THRESHOLD, *OLDER_THRESHOLDS)
    _depth += 1
    try:
        yield
    finally:
        _depth -= 1
        if _depth == 0:
            gc.set_threshold(*_saved)
