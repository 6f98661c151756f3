"""CIFAR-10 and CIFAR-100 in their python pickles (docs/tasks.md §15).

Each file is a pickled dict (Python 2 pickles: keys read as bytes) with ``b'data'``, a uint8
array of shape ``(n, 3072)`` — per row the 1024 red, then green, then blue pixels of a 32×32
image, row-major — and the labels: ``b'labels'`` (CIFAR-10, ints in ``[0, 10)``) or
``b'fine_labels'`` / ``b'coarse_labels'`` (CIFAR-100, ``[0, 100)`` / ``[0, 20)``). CIFAR-10's
``data_batch_1`` … ``data_batch_5`` (10 000 images each) are the training set and ``test_batch``
the test set; CIFAR-100's are ``train`` (50 000) and ``test`` (10 000).

A pickle can run code, so the files are read by :class:`ArrayUnpickler`, whose ``find_class``
allows only plain builtins (as the FedScale reader does) and what a numpy array needs to be
rebuilt (``numpy.core.multiarray._reconstruct``, ``numpy.ndarray``, ``numpy.dtype``); a pickle
naming any other global is refused before anything runs. Torch-free.
"""

from __future__ import annotations

import builtins
import io
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from asyncfl.datasets.files import read_file, refuse

try:  # numpy ≥ 2 moved numpy.core to numpy._core (pickles name either)
    from numpy._core.multiarray import _reconstruct
except ImportError:  # pragma: no cover - numpy 1.x
    from numpy.core.multiarray import _reconstruct  # type: ignore[no-redef]

CIFAR_PIXELS = 3 * 32 * 32
MAX_CIFAR_BYTES = 1 << 30
SAFE_BUILTINS = frozenset({"dict", "list", "tuple", "int", "float", "str", "bytes", "set", "frozenset"})
NUMPY_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy._core.multiarray", "_reconstruct"): _reconstruct,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
}


class _Refused(pickle.UnpicklingError):
    pass


class ArrayUnpickler(pickle.Unpickler):
    """Unpickles plain data and numpy arrays only; every other global is refused."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in SAFE_BUILTINS:
            return getattr(builtins, name)
        if (module, name) in NUMPY_GLOBALS:
            return NUMPY_GLOBALS[(module, name)]
        raise _Refused(f"refused to load the global {ascii(module)[1:-1][:60]}.{ascii(name)[1:-1][:60]} "
                       "(only plain data and numpy arrays are allowed); the file may try to run code")


def load_array_pickle(path: Path) -> Any:
    """Read ``path`` with :class:`ArrayUnpickler` (byte strings of Python 2 pickles stay bytes)."""
    raw = read_file(path, MAX_CIFAR_BYTES)
    try:
        return ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
    except _Refused as exc:
        raise refuse(path, f"not a CIFAR pickle: {exc}") from None
    except EOFError:
        raise refuse(path, "truncated (the pickle ends early)") from None
    except Exception as exc:  # malformed opcodes raise many types
        raise refuse(path, f"not a valid pickle ({exc.__class__.__name__})") from None


def _get(batch: dict, key: str) -> Any:
    for k in (key.encode(), key):  # bytes keys (Python 2 pickles) or str keys (re-pickled files)
        if k in batch:
            return batch[k]
    raise KeyError(key)


def read_cifar_batch(path: Path, label_key: str, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(x, y)`` of one CIFAR pickle: ``x`` uint8 ``(n, 3072)``, ``y`` int64 ``(n,)`` from
    ``label_key`` (``labels``, ``fine_labels`` or ``coarse_labels``), each in ``[0, classes)``."""
    batch = load_array_pickle(path)
    if not isinstance(batch, dict):
        raise refuse(path, f"expected a dict with b'data' and b'{label_key}', found {type(batch).__name__}")
    try:
        data, labels = _get(batch, "data"), _get(batch, label_key)
    except KeyError as exc:
        raise refuse(path, f"no b'{exc.args[0]}' entry (keys: {', '.join(sorted(map(str, batch))[:6])})") from None
    if not isinstance(data, np.ndarray) or data.dtype != np.uint8 or data.ndim != 2 or data.shape[1] != CIFAR_PIXELS:
        shape = f"{data.dtype.name} {data.shape}" if isinstance(data, np.ndarray) else type(data).__name__
        raise refuse(path, f"b'data' must be a uint8 array of shape (n, {CIFAR_PIXELS}), found {shape}")
    if not isinstance(labels, (list, np.ndarray)) or len(labels) != len(data):
        n = len(labels) if isinstance(labels, (list, np.ndarray)) else type(labels).__name__
        raise refuse(path, f"b'{label_key}' must list one label per image ({len(data)}), found {n}")
    if isinstance(labels, list) and not all(isinstance(v, int) and not isinstance(v, bool) for v in labels):
        raise refuse(path, f"b'{label_key}' must hold integers")
    y = np.asarray(labels, dtype=np.int64)
    if len(y) and (y.min() < 0 or y.max() >= classes):
        raise refuse(path, f"b'{label_key}' ranges over [{y.min()}, {y.max()}]; expected [0, {classes - 1}]")
    return np.ascontiguousarray(data), y


def read_cifar(root: Path, files: list[str], label_key: str, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The files' ``(x, y)`` concatenated in the order given."""
    parts = [read_cifar_batch(root / name, label_key, classes) for name in files]
    return np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])
