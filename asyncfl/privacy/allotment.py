"""Random allocation's allotment: which server steps each client may contribute to
(docs/privacy.md §13).

Steps are numbered from 1 (the engine's version: the step in progress). Window ``w ≥ 0`` holds
steps ``w·t + 1 … (w+1)·t``; in each window every client is allotted ``k`` of its ``t`` steps,
uniformly and independently of the other clients and of the other windows::

    offsets_w = first k columns of argsort(U_w),   U_w ~ Uniform(0, 1)^{N × t}

from its own random stream, ``SeedSequence(seed, spawn_key=(ALLOTMENT_KEY, w))``: a pure function
of the run's seed and the window, drawn before any data is seen, that touches none of the run's
named streams (:mod:`asyncfl.rng`), so existing runs draw exactly what they drew before. Because
it is a function of the seed it needs no checkpointed state: a resumed run recomputes the same
allotment (only the current window is kept in memory).
"""

from __future__ import annotations

import numpy as np

#: the spawn key that separates the allotment's stream from the run's named streams (which are
#: the children 0 … 6 of ``SeedSequence(seed)``): "allot" as an integer
ALLOTMENT_KEY = int.from_bytes(b"allot", "big")


class Allotment:
    """``k`` of every ``t`` steps per client, drawn from ``seed`` (module docstring)."""

    def __init__(self, clients: int, selected: int, window: int, seed: int) -> None:
        if not 1 <= selected <= window:
            raise ValueError(f"allotment of {selected} of every {window} steps: need 1 ≤ k ≤ t")
        self.clients, self.selected, self.window, self.seed = int(clients), int(selected), int(window), int(seed)
        self._window_index = -1
        self._offsets = np.zeros((self.clients, self.selected), dtype=np.int64)
        self._mask_step = 0
        self._mask = np.zeros(self.clients, dtype=bool)

    def offsets(self, window: int) -> np.ndarray:
        """``(N, k)``: the allotted offsets ``0 … t−1`` of each client in window ``window``."""
        if window != self._window_index:
            seq = np.random.SeedSequence(self.seed, spawn_key=(ALLOTMENT_KEY, int(window)))
            draws = np.random.Generator(np.random.PCG64(seq)).random((self.clients, self.window))
            self._offsets = np.sort(np.argsort(draws, axis=1, kind="stable")[:, : self.selected], axis=1)
            self._window_index = int(window)
        return self._offsets

    def mask(self, step: int) -> np.ndarray:
        """Which clients are allotted step ``step`` (≥ 1); cached for the last step asked."""
        if step != self._mask_step:
            w, off = divmod(int(step) - 1, self.window)
            self._mask = (self.offsets(w) == off).any(axis=1)
            self._mask_step = int(step)
        return self._mask

    def allows(self, client: int, step: int) -> bool:
        return bool(self.mask(step)[client])

    def steps_of(self, client: int, steps: int) -> np.ndarray:
        """Every step ``≤ steps`` allotted to ``client`` (for tests and reports)."""
        out = []
        for w in range(-(-int(steps) // self.window)):
            out.extend(int(w * self.window + o + 1) for o in self.offsets(w)[client])
        return np.array([s for s in out if s <= steps], dtype=np.int64)
