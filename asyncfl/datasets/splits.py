"""Splits of a centralised data set over clients, and their statistics (docs/tasks.md §7, §15).

* label-Dirichlet: :func:`asyncfl.tasks.common.dirichlet_split` is the project's one
  implementation (the builders call it);
* shards (McMahan et al., 2017): sort the samples by label (ties in random order), cut them into
  ``s·N`` contiguous shards of equal size (the first ``n mod s·N`` one sample longer) and give
  every client ``s`` shards drawn at random without replacement: :func:`shard_split`.

:func:`split_statistics` summarises any split by the clients' labels: the number of clients,
the samples per client (min, median, max), the mean number of distinct labels a client holds and
the mean Shannon entropy (nats) of a client's label distribution, next to that of the pooled
labels (an IID split has client entropies close to it). Torch-free.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from asyncfl.errors import ScenarioError


def shard_split(labels: np.ndarray, num_clients: int, shards_per_client: int, rng: np.random.Generator) -> list[np.ndarray]:
    """Client ``k``'s sample indices (sorted) under the shard split described in the module doc."""
    n, shards = len(labels), num_clients * shards_per_client
    if shards > n:
        raise ScenarioError([f"population.clients = {num_clients} × task.shards_per_client = {shards_per_client} "
                             f"shards: only {n} training samples to cut"])
    order = np.lexsort((rng.permutation(n), labels))  # by label, ties at random
    pieces = np.array_split(order, shards)
    deal = rng.permutation(shards).reshape(num_clients, shards_per_client)
    return [np.sort(np.concatenate([pieces[s] for s in row])) for row in deal]


def _entropy(y: np.ndarray, classes: int) -> float:
    p = np.bincount(y, minlength=classes) / max(len(y), 1)
    p = p[p > 0]
    return float(-(p * np.log(p)).sum())


@dataclass(frozen=True)
class SplitStats:
    clients: int
    samples_min: int
    samples_median: float
    samples_max: int
    labels_per_client: float
    label_entropy: float
    pooled_entropy: float

    def describe(self) -> str:
        return (f"{self.clients} clients, samples per client min {self.samples_min} / median {self.samples_median:g} / "
                f"max {self.samples_max}, {self.labels_per_client:.1f} labels per client, label entropy "
                f"{self.label_entropy:.2f} nats per client vs {self.pooled_entropy:.2f} pooled")


def split_statistics(client_labels: list[np.ndarray], classes: int) -> SplitStats:
    """The statistics of the module doc for clients holding ``client_labels``."""
    sizes = np.array([len(y) for y in client_labels])
    pooled = np.concatenate(client_labels) if client_labels else np.zeros(0, dtype=np.int64)
    return SplitStats(
        clients=len(client_labels),
        samples_min=int(sizes.min()) if len(sizes) else 0,
        samples_median=float(np.median(sizes)) if len(sizes) else 0.0,
        samples_max=int(sizes.max()) if len(sizes) else 0,
        labels_per_client=float(np.mean([len(np.unique(y)) for y in client_labels])) if client_labels else 0.0,
        label_entropy=float(np.mean([_entropy(y, classes) for y in client_labels])) if client_labels else 0.0,
        pooled_entropy=_entropy(pooled, classes),
    )
