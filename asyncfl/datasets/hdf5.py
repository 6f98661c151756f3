"""Federated data sets in HDF5: TensorFlow Federated's layout, and FLAIR's (docs/tasks.md §17).

* TFF (EMNIST, ``fed_emnist_{train,test}.h5``): a group ``examples`` with one group per writer,
  each holding equal-length datasets — EMNIST's ``pixels`` ``(n, 28, 28)`` float32 and
  ``label`` ``(n,)`` int32.
* FLAIR (Song et al., 2022, as its preparation script writes it): one group per partition with one
  group per user holding ``images`` and the labels as ``'|'``-joined strings (a multi-label task).

Both are "a group of users, each a group of named arrays": :func:`read_h5_users` reads the chosen
users' arrays from such a group (the users chosen by :mod:`asyncfl.datasets.users`), checking each
array's trailing shape and dtype kind from its header before reading it. HDF5 lets a tiny file
declare a huge dataset (compressed chunks, or none written at all, read back as the fill value),
so a dataset declaring more than ``MAX_GZIP_RATIO`` (100) times the bytes it occupies in the file
(at least 64 KiB) is refused unread, as gzipped files are (:mod:`asyncfl.datasets.files`). Only the TFF layout has a task (``tff-emnist``); FLAIR's
string labels and 256×256 images would need their own decoding, loss and model, not written yet.
``h5py`` is an optional dependency (``pip install asyncfl[h5]``), imported on use; without it
the task is refused with that command. Torch-free.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from asyncfl.datasets.files import MAX_GZIP_RATIO, refuse
from asyncfl.datasets.users import UserSelection
from asyncfl.errors import ScenarioError

INSTALL_HINT = "pip install 'asyncfl[h5]'"
#: a dataset's bytes are bounded by MAX_GZIP_RATIO × the bytes it occupies, or this (tiny datasets)
MIN_DATASET_BYTES = 64 << 10


def import_h5py() -> Any:
    """The ``h5py`` module, or a :class:`ScenarioError` saying how to install it."""
    try:
        import h5py  # optional dependency: only tasks read from HDF5 need it
    except ImportError:
        raise ScenarioError([f"reading HDF5 data sets needs the optional package h5py: {INSTALL_HINT}"]) from None
    return h5py


def _open(path: Path) -> Any:
    h5py = import_h5py()
    if not path.is_file():
        raise refuse(path, "no such file")
    try:
        return h5py.File(path, "r")
    except OSError as exc:
        raise refuse(path, f"not an HDF5 file ({str(exc)[:80]})") from None


def _users_group(fh: Any, path: Path, group: str) -> Any:
    node = fh.get(group)
    if node is None or not hasattr(node, "keys"):
        raise refuse(path, f"no group {group!r} of users (found: {', '.join(list(fh.keys())[:6]) or 'nothing'})")
    return node


def _read_user(node: Any, path: Path, user: str, keys: dict[str, tuple[tuple[int, ...], str]]) -> list[np.ndarray]:
    """The arrays ``keys`` of one user: each ``name: (trailing shape, dtype kind)`` checked from
    the dataset's header before it is read, and its size bounded by the bytes it occupies in the
    file (module doc)."""
    h5py = import_h5py()
    if not isinstance(node, h5py.Group):
        raise refuse(path, f"user {user[:40]!r} is not a group of datasets")
    out, n = [], None
    for name, (shape, kinds) in keys.items():
        ds = node.get(name)
        if not isinstance(ds, h5py.Dataset):
            raise refuse(path, f"user {user[:40]!r} has no dataset {name!r}")
        found = ds.shape
        if found is None or found[1:] != shape or ds.dtype.kind not in kinds:
            raise refuse(path, f"user {user[:40]!r}: {name!r} must be (n, {', '.join(map(str, shape))}) of kind "
                               f"{kinds!r}, found {ds.dtype.name} {found}".replace("(n, )", "(n,)"))
        declared, stored = math.prod(found) * ds.dtype.itemsize, ds.id.get_storage_size()
        if declared > max(MAX_GZIP_RATIO * stored, MIN_DATASET_BYTES):
            raise refuse(path, f"user {user[:40]!r}: {name!r} declares {declared} bytes but occupies {stored} in the "
                               f"file (more than {MAX_GZIP_RATIO}× compression, or unwritten data); refused unread")
        a = np.asarray(ds[()])
        if n is not None and len(a) != n:
            raise refuse(path, f"user {user[:40]!r}: {name!r} has {len(a)} rows, the others {n}")
        n = len(a)
        out.append(a)
    return out


def read_h5_users(path: Path, group: str, keys: dict[str, tuple[tuple[int, ...], str]], users: int, seed: int,
                  only: list[str] | None = None) -> list[tuple[str, list[np.ndarray]]]:
    """``[(user, arrays), …]`` of ``users`` users chosen under ``group`` (client order), or of the
    users ``only`` (in that order; a user missing from the file contributes nothing)."""
    with _open(path) as fh:
        node = _users_group(fh, path, group)
        if only is not None:
            return [(u, _read_user(node.get(u), path, u, keys)) for u in only if u in node]
        ids = list(node.keys())
        if len(ids) < users:
            raise ScenarioError([f"population.clients = {users}: {path} holds {len(ids)} users under {group!r}"])
        selection = UserSelection(users, seed)
        for user in ids:
            selection.offer(user, lambda u=user: _read_user(node.get(u), path, u, keys))
        return selection.chosen()
