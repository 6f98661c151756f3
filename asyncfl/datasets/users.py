"""The seeded choice of ``N`` users of a data set with natural users (docs/tasks.md §13).

Every user ``u`` gets the key ``h(seed, u)``: the first 8 bytes of BLAKE2b over the seed and the
user's id, read as an unsigned integer. The ``N`` eligible users with the smallest keys are the
clients, in increasing key order (client 0 has the smallest). This is a uniformly random subset
in random order for every seed, and it can be computed while the files are read one at a time,
keeping only the ``N`` best so far (:class:`UserSelection`), so a data set larger than memory
can be sub-sampled; it does not depend on the order of the files or of the users in them.
Torch-free.
"""

from __future__ import annotations

import hashlib
import heapq
from typing import Any, Callable


def user_key(seed: int, user: str) -> int:
    """``h(seed, u)``: 64 bits of BLAKE2b of ``"<seed>/<user>"``."""
    digest = hashlib.blake2b(f"{seed}/{user}".encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class UserSelection:
    """Keeps the ``size`` users with the smallest keys offered so far, with their data."""

    def __init__(self, size: int, seed: int) -> None:
        self.size, self.seed = size, seed
        self._heap: list[tuple[int, str, Any]] = []  # (−key, user, data): the root is the worst kept
        self.offered = 0

    def offer(self, user: str, make: Callable[[], Any]) -> None:
        """Consider ``user``; ``make()`` builds its data, called only if the user is kept."""
        self.offered += 1
        key = user_key(self.seed, user)
        if len(self._heap) < self.size:
            heapq.heappush(self._heap, (-key, user, make()))
        elif key < -self._heap[0][0]:
            heapq.heapreplace(self._heap, (-key, user, make()))

    def chosen(self) -> list[tuple[str, Any]]:
        """``(user, data)`` of the kept users, smallest key first."""
        return [(user, data) for _, user, data in sorted(self._heap, key=lambda t: -t[0])]
