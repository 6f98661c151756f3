"""Data sets as the Hugging Face ``datasets`` ecosystem ships them, partitioned by Flower Datasets'
partitioners (docs/tasks.md §20).

Two layouts of a folder ``root``, both read offline:

* a ``save_to_disk`` folder: ``dataset_dict.json`` and one sub-folder of Arrow files per split
  (a ``DatasetDict``), or ``state.json`` and the Arrow files of one split, taken as ``train``;
  read by ``datasets.load_from_disk`` (memory-mapped);
* the hub's parquet files, anywhere under ``root``: a file belongs to split ``S`` when its name
  starts with ``S-`` or ``S.`` (``train-00000-of-00001.parquet``, the hub's own names, as in
  ``plain_text/`` for CIFAR-10 or ``data/`` for FEMNIST) or when a folder on its path is named
  ``S``. They are read with pyarrow into memory (the ``datasets`` features travel in the files'
  schema metadata), so nothing is written to a cache.

:func:`partition_rows` gives each client's row indices of the training split under one of
Flower Datasets' partitioners (``flwr_datasets.partitioner``), with their own code and seed, after
the split is shuffled with the same seed as ``FederatedDataset`` does (``shuffle = true``):
``IidPartitioner`` (equal contiguous shards of the shuffled split), ``DirichletPartitioner``
(per class, Dirichlet(α) proportions over the partitions, redrawn until every partition holds
``min_partition_size`` samples), ``PathologicalPartitioner`` (each partition gets
``classes_per_partition`` classes, each class's samples split evenly among the partitions holding
it), ``ShardPartitioner`` (sorted by label, cut into shards, ``shards_per_partition`` dealt to each
partition) and ``NaturalIdPartitioner`` (one partition per value of an id column, e.g. FEMNIST's
``writer_id``; the ``N`` clients are then chosen among them with asyncfl's seeded key,
:mod:`asyncfl.datasets.users`, as for LEAF). ``datasets`` and ``flwr-datasets`` are optional
(``pip install 'asyncfl[hf]'``) and imported only here, on use. Torch-free.
"""

from __future__ import annotations

import contextlib
import io
import logging
import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

from asyncfl.datasets.files import refuse
from asyncfl.datasets.users import UserSelection
from asyncfl.errors import ScenarioError

INSTALL_HINT = "pip install 'asyncfl[hf]'"
ROW = "__asyncfl_row__"  # the column of original row numbers added before partitioning
log = logging.getLogger("asyncfl.datasets")


def import_hf() -> tuple[Any, Any]:
    """``(datasets, flwr_datasets.partitioner)``, or a :class:`ScenarioError` naming the extra."""
    try:  # optional and slow to import: only the hf-images task needs them
        import datasets
        from flwr_datasets import partitioner
    except ImportError:
        raise ScenarioError([f"task.name = 'hf-images' needs the optional packages datasets and flwr-datasets: "
                             f"{INSTALL_HINT}"]) from None
    datasets.disable_progress_bars()  # asyncfl's console owns stderr
    return datasets, partitioner


def parquet_splits(root: Path) -> dict[str, list[Path]]:
    """``{split: [parquet files]}`` under ``root`` by the naming rule of the module doc (a file
    matching no split name is listed under its name's first word)."""
    out: dict[str, list[Path]] = {}
    for path in sorted(root.rglob("*.parquet")):
        if not path.is_file():
            raise refuse(path, "not a regular file")
        parts = path.relative_to(root).parts[:-1]
        stem = path.name.split("-")[0].split(".")[0]
        split = next((p for p in reversed(parts) if p in ("train", "test", "validation", "valid")), stem)
        out.setdefault(split, []).append(path)
    return out


def load_splits(root: Path) -> dict[str, Any]:
    """``{split: datasets.Dataset}`` of the folder ``root`` (module doc)."""
    datasets, _ = import_hf()
    if (root / "dataset_dict.json").is_file() or (root / "state.json").is_file():
        try:
            loaded = datasets.load_from_disk(str(root))
        except Exception as exc:  # the library raises many kinds for a damaged folder
            raise refuse(root, f"not a readable save_to_disk folder ({exc.__class__.__name__}: {str(exc)[:120]})") from None
        return dict(loaded) if isinstance(loaded, datasets.DatasetDict) else {"train": loaded}
    import pyarrow.parquet as pq  # lazy, like datasets: heavy, and installed with it

    out = {}
    for split, files in parquet_splits(root).items():
        try:
            table = pq.ParquetDataset([str(f) for f in files]).read()
            out[split] = datasets.Dataset(table)
        except Exception as exc:  # pyarrow and datasets raise many kinds for a damaged file
            raise refuse(files[0], f"not a readable parquet file of a data set ({exc.__class__.__name__}: "
                                   f"{str(exc)[:120]})") from None
    if not out:
        raise refuse(root, "neither a save_to_disk folder (dataset_dict.json, state.json) nor parquet files")
    return out


def split_of(splits: dict[str, Any], name: str, root: Path, key: str) -> Any:
    """``splits[name]``, or a refusal listing the splits there are."""
    if name not in splits:
        raise ScenarioError([f"{key} = {name!r}: {root} holds the splits {', '.join(sorted(splits))}"])
    return splits[name]


def require_columns(ds: Any, columns: dict[str, str | None], root: Path) -> None:
    """Refuse a data set lacking one of ``{key: column}``, naming the key and the columns found."""
    for key, column in columns.items():
        if column is not None and column not in ds.column_names:
            raise ScenarioError([f"{key} = {column!r}: no such column in {root} (columns: "
                                 f"{', '.join(ds.column_names[:12])})"])


def class_count(ds: Any, label: str, classes: int | None, root: Path) -> int:
    """``classes`` when given, else the number of names of the label column's ``ClassLabel``."""
    if classes is not None:
        return classes
    feature = ds.features.get(label)
    count = getattr(feature, "num_classes", None)
    if not isinstance(count, int) or count < 2:
        raise ScenarioError([f"task.classes: {root}'s column {label!r} is not a ClassLabel naming its classes; "
                             "give task.classes"])
    return count


def image_arrays(ds: Any, image: str, label: str, side: int, channels: int, classes: int, root: Path) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of a whole split: ``x`` uint8 ``(n, side, side)`` or ``(n, side, side, 3)`` as
    decoded by ``datasets``, ``y`` int64 labels in ``[0, classes)``."""
    batch = ds.select_columns([image, label]).with_format("numpy")[:]
    try:
        x = np.stack([np.asarray(a) for a in batch[image]]) if len(ds) else np.zeros((0, side, side), np.uint8)
    except ValueError:
        raise refuse(root, f"column {image!r}: the images do not all have one shape") from None
    want = (side, side) if channels == 1 else (side, side, channels)
    if x.ndim == 4 and channels == 1 and x.shape[-1] == 1:
        x = x[..., 0]
    if x.shape[1:] != want or x.dtype != np.uint8:
        raise refuse(root, f"column {image!r}: expected uint8 images of shape {want} (task.side, task.channels), "
                           f"found {x.dtype.name} {x.shape[1:]}")
    y = np.asarray(batch[label])
    if y.dtype.kind not in "iu" or y.ndim != 1:
        raise refuse(root, f"column {label!r}: labels must be integers (a ClassLabel), found {y.dtype.name}")
    y = y.astype(np.int64)
    if len(y) and (y.min() < 0 or y.max() >= classes):
        raise refuse(root, f"column {label!r}: labels range over [{y.min()}, {y.max()}]; task.classes = {classes}")
    return x, y


#: each ``task.partitioner`` → how Flower Datasets builds it from (its module, the task's keys,
#: the number of clients, the column partitioned by); the keys of HF_PARTITIONERS (config)
_PARTITIONERS: dict[str, Callable[[Any, Any, int, str], Any]] = {
    "iid": lambda fp, cfg, n, by: fp.IidPartitioner(num_partitions=n),
    "dirichlet": lambda fp, cfg, n, by: fp.DirichletPartitioner(
        num_partitions=n, partition_by=by, alpha=cfg.alpha, min_partition_size=cfg.min_partition_size,
        self_balancing=cfg.self_balancing, shuffle=cfg.shuffle, seed=cfg.partition_seed),
    "pathological": lambda fp, cfg, n, by: fp.PathologicalPartitioner(
        num_partitions=n, partition_by=by, num_classes_per_partition=cfg.classes_per_partition,
        class_assignment_mode=cfg.class_assignment, shuffle=cfg.shuffle, seed=cfg.partition_seed),
    "shard": lambda fp, cfg, n, by: fp.ShardPartitioner(
        num_partitions=n, partition_by=by, num_shards_per_partition=cfg.shards_per_partition, shuffle=cfg.shuffle,
        seed=cfg.partition_seed),
    "natural-id": lambda fp, cfg, n, by: fp.NaturalIdPartitioner(partition_by=by),
}


def make_partitioner(cfg: Any, num_clients: int) -> Any:
    """The Flower Datasets partitioner ``cfg.partitioner`` names, with the task's keys."""
    _, fp = import_hf()
    return _PARTITIONERS[cfg.partitioner](fp, cfg, num_clients, cfg.partition_by or cfg.label)


def partition_rows(train: Any, cfg: Any, num_clients: int, seed: int, root: Path) -> list[tuple[str, np.ndarray]]:
    """``[(partition name, row indices of the training split), …]`` of the ``num_clients``
    clients, in client order (module doc). Flower's partitioners raise ``ValueError`` for
    settings they cannot meet (too few samples for the shards, classes for a partition, …): the
    refusal quotes them."""
    data = train.add_column(ROW, np.arange(len(train), dtype=np.int64))
    if cfg.shuffle:
        data = data.shuffle(seed=cfg.partition_seed)  # as FederatedDataset(shuffle=True, seed=...) does
    partitioner = make_partitioner(cfg, num_clients)
    partitioner.dataset = data
    # Flower's partitioners draw tqdm bars on stderr and warn through `warnings`: the bars are
    # dropped (asyncfl's console owns stderr), the partitioners' own warnings logged as notes
    with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("always")
        out = _load_partitions(partitioner, data, cfg, num_clients, seed, root)
    for w in caught:
        if issubclass(w.category, UserWarning) and not issubclass(w.category, (DeprecationWarning, FutureWarning)):
            log.warning("note: Flower Datasets' %s partitioner: %s", cfg.partitioner, str(w.message)[:300])
    return out


def _load_partitions(partitioner: Any, data: Any, cfg: Any, num_clients: int, seed: int, root: Path) -> list[tuple[str, np.ndarray]]:
    try:
        if cfg.partitioner != "natural-id":
            return [(str(k), np.asarray(partitioner.load_partition(k)[ROW], dtype=np.int64)) for k in range(num_clients)]
        total = partitioner.num_partitions
        if total < num_clients:
            raise ScenarioError([f"population.clients = {num_clients}: column {cfg.partition_by!r} of {root} names "
                                 f"{total} users"])
        names = partitioner.partition_id_to_natural_id
        selection = UserSelection(num_clients, seed)
        for k in range(total):
            selection.offer(str(names[k]), lambda k=k: k)
        return [(user, np.asarray(partitioner.load_partition(k)[ROW], dtype=np.int64)) for user, k in selection.chosen()]
    except (ValueError, KeyError) as exc:
        raise ScenarioError([f"task.partitioner = {cfg.partitioner!r} on {root}: {str(exc)[:300]}"]) from None


def hold_out(rows: np.ndarray, fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """``(train rows, test rows)`` of one partition cut by ``datasets``'
    ``train_test_split(test_size=fraction, seed=seed)`` — what Flower's tutorials do to a
    partition of a data set with one split."""
    datasets, _ = import_hf()
    if len(rows) < 2:
        return rows, rows[:0]
    # the cut depends only on the partition's length, the fraction and the seed: cut the row numbers
    cut = datasets.Dataset.from_dict({ROW: rows}).train_test_split(test_size=fraction, seed=seed)
    return np.asarray(cut["train"][ROW], dtype=np.int64), np.asarray(cut["test"][ROW], dtype=np.int64)
