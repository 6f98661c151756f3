"""What a client-aware latency or availability model sees of its client (docs/extending.md §6).

A client's static profile is fixed for the whole run: its index ``k``, its speed multiplier (drawn
once from ``population.speed_sigma``, ``slow_fraction`` and ``slow_factor``; docs/protocol.md §4)
and its number of training samples (``None`` where the fleet is built without a task). The
profiles are views of two arrays, made on demand: N clients cost no N Python objects.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


class ClientProfile(NamedTuple):
    """Client ``index``'s static profile (see the module docstring)."""

    index: int
    speed: float
    samples: int | None


class ClientProfiles:
    """Every client's profile: ``len(profiles)`` clients, ``profiles[k]``, and the arrays
    ``speeds`` (float64) and ``samples`` (int64, or None) for vectorised models."""

    def __init__(self, speeds: np.ndarray, samples: np.ndarray | None) -> None:
        self.speeds, self.samples = speeds, samples

    def __len__(self) -> int:
        return len(self.speeds)

    def __getitem__(self, k: int) -> ClientProfile:
        return ClientProfile(int(k), float(self.speeds[k]), None if self.samples is None else int(self.samples[k]))


def sample_counts(task: object) -> np.ndarray | None:
    """Each client's number of training samples (None without a task)."""
    clients = getattr(task, "clients", None)
    return None if clients is None else np.fromiter((len(c) for c in clients), dtype=np.int64, count=len(clients))
