"""The components of each kind, as tables (docs/extending.md §2): ``RULES`` is every registered
server rule, built-in or a user's, and so on. Live views of :data:`asyncfl.components.REGISTRY`:
a component registered later is in them. Torch-free."""

from __future__ import annotations

from asyncfl.components.core import KINDS
from asyncfl.components.registry import KindTable, table

TASKS: KindTable = table("task")
LATENCIES: KindTable = table("latency")
AVAILABILITIES: KindTable = table("availability")
PROTOCOLS: KindTable = table("protocol")
ALGORITHMS: KindTable = table("algorithm")
RULES: KindTable = table("rule")
SOLVERS: KindTable = table("solver")
HOOKS: KindTable = table("hook")
EXECUTORS: KindTable = table("executor")
SAMPLINGS: KindTable = table("sampling")
ACCOUNTANTS: KindTable = table("accountant")
COUNT_MODES: KindTable = table("counts")
NOISES: KindTable = table("noise")
TRACKERS: KindTable = table("tracker")

REGISTRIES: tuple[KindTable, ...] = tuple(table(kind) for kind in KINDS)
"""Every kind's table, for tools that list what exists."""
