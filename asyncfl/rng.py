"""Seeded random streams (docs/architecture.md §2 principle 1: event order is a pure function of the
scenario and its seed).

One ``numpy.random.SeedSequence`` per run is split into independent named streams, so adding a
draw in one part of the simulator never shifts another part's draws. Each local training job
gets its own seed drawn at dispatch, so its result does not depend on where or when it runs.
Generator states are plain dicts (``bit_generator.state``) and go into checkpoints as data.
"""

from __future__ import annotations

from typing import Any

import numpy as np

STREAMS = ("speed", "latency", "selection", "jobs", "noise", "availability", "algorithm")


def make_streams(seed: int) -> dict[str, np.random.Generator]:
    children = np.random.SeedSequence(seed).spawn(len(STREAMS))
    return {name: np.random.Generator(np.random.PCG64(child)) for name, child in zip(STREAMS, children)}


def streams_state(streams: dict[str, np.random.Generator]) -> dict[str, Any]:
    return {name: gen.bit_generator.state for name, gen in streams.items()}


def restore_streams(streams: dict[str, np.random.Generator], state: dict[str, Any]) -> None:
    for name, gen in streams.items():
        gen.bit_generator.state = state[name]


def job_seed(rng: np.random.Generator) -> int:
    """A seed for one local training job (63 bits, valid for ``torch.Generator.manual_seed``)."""
    return int(rng.integers(0, 2**63 - 1))
