"""CIFAR-10 and CIFAR-100 in their python pickles (docs/tasks.md §15).

Each file is a pickled dict (Python 2 pickles: keys read as bytes) with ``b'data'``, a uint8
array of shape ``(n, 3072)`` — per row the 1024 red, then green, then blue pixels of a 32×32
image, row-major — and the labels: ``b'labels'`` (CIFAR-10, ints in ``[0, 10)``) or
``b'fine_labels'`` / ``b'coarse_labels'`` (CIFAR-100, ``[0, 100)`` / ``[0, 20)``). CIFAR-10's
``data_batch_1`` … ``data_batch_5`` (10 000 images each) are the training set and ``test_batch``
the test set; CIFAR-100's are ``train`` (50 000) and ``test`` (10 000).

A pickle can run code, so the files are read by :class:`ArrayUnpickler`, whose ``find_class``
allows only plain builtins (as the FedScale reader does) and stand-ins for the few globals that
pickles of numpy arrays name at protocols 0 to 5: ``_codecs.encode`` (protocols 0–2 write bytes
through it; only ``(str, "latin1")`` is accepted), ``numpy.dtype`` (of a type string),
``numpy…multiarray._reconstruct`` with the array's state set by ``__setstate__`` (protocols 0–4),
``numpy…numeric._frombuffer`` (protocol 5) and ``numpy…multiarray.scalar``. None of them
allocates what the file merely claims: ``_reconstruct`` returns a :class:`PendingArray` that only
records the state it is given, and an array is built (:func:`build_array`) only once its claimed
shape times its element size, in exact integer arithmetic, equals the bytes the file actually
holds — so memory stays within the file's size. Object arrays are refused. A pickle naming any
other global is refused before anything runs. Torch-free.
"""

from __future__ import annotations

import builtins
import io
import math
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from asyncfl.datasets.files import read_file, refuse

CIFAR_PIXELS = 3 * 32 * 32
MAX_CIFAR_BYTES = 1 << 30
SAFE_BUILTINS = frozenset({"dict", "list", "tuple", "int", "float", "str", "bytes", "set", "frozenset"})


class _Refused(pickle.UnpicklingError):
    pass


def build_array(buffer: Any, dtype: Any, shape: Any, fortran: bool = False) -> np.ndarray:
    """The array of ``shape`` and ``dtype`` over ``buffer`` (bytes the file holds), after checking
    that the sizes agree exactly; a read-only view, no copy."""
    if not isinstance(dtype, np.dtype) or dtype.kind not in "biufc" or dtype.fields or dtype.shape:
        raise _Refused("an array must have a plain numeric dtype (object and structured arrays are refused)")
    if not isinstance(shape, tuple) or not all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in shape):
        raise _Refused("an array's shape must be a tuple of non-negative integers")
    if not isinstance(buffer, (bytes, bytearray, pickle.PickleBuffer)):
        raise _Refused(f"an array's data must be bytes, found {type(buffer).__name__}")
    size = memoryview(buffer).nbytes
    claimed = math.prod(shape) * dtype.itemsize  # exact: a claimed size cannot wrap around
    if claimed != size:
        raise _Refused(f"an array claims shape {shape[:4]} of {dtype.name} ({claimed} bytes) but holds {size} bytes")
    return np.frombuffer(memoryview(buffer), dtype=dtype).reshape(shape, order="F" if fortran else "C")


class PendingArray:
    """What ``numpy.core.multiarray._reconstruct`` returns here: the state ``__setstate__`` is
    given, turned into an array only by :func:`build_array`."""

    def __init__(self) -> None:
        self.state: Any = None

    def __setstate__(self, state: Any) -> None:
        self.state = state

    def build(self) -> np.ndarray:
        state = self.state
        if isinstance(state, tuple) and len(state) == 5:
            state = state[1:]  # (version, shape, dtype, is_fortran, data)
        if not isinstance(state, tuple) or len(state) != 4:
            raise _Refused("a numpy array's pickled state is not (shape, dtype, is_fortran, data)")
        shape, dtype, fortran, data = state
        return build_array(data, dtype, shape, bool(fortran))


class _NDArrayName:
    """Stands for ``numpy.ndarray`` in a pickle: it can be named (``_reconstruct``'s first
    argument) but not called, so a pickle cannot allocate an array of a size it merely claims."""

    def __new__(cls, *args: Any, **kwargs: Any) -> "_NDArrayName":
        raise _Refused("numpy.ndarray is called directly (an array of a claimed size, not one the file holds)")


def _reconstruct(subtype: Any, shape: Any, dtype: Any) -> PendingArray:
    if subtype is not _NDArrayName:
        raise _Refused("only plain numpy arrays can be rebuilt")
    return PendingArray()


def _frombuffer(buffer: Any, dtype: Any, shape: Any, order: Any) -> np.ndarray:
    return build_array(buffer, dtype, shape, order == "F")


def _dtype(spec: Any, align: Any = False, copy: Any = False) -> np.dtype:
    if not isinstance(spec, str) or len(spec) > 4 or spec.lstrip("<>|=")[:1] not in tuple("?bBhHiIlLqQefdgFDGu"):
        raise _Refused("a pickled dtype must be a numeric type string")
    try:
        return np.dtype(spec, copy=True)  # a copy, as numpy's own pickles ask: its __setstate__ never touches numpy's
    except TypeError:
        raise _Refused(f"unknown dtype {spec[:4]!r}") from None


def _scalar(dtype: Any, data: Any = b"") -> Any:
    return build_array(data, dtype, ())[()]


def _encode(text: Any, encoding: Any = "utf-8") -> bytes:
    if not isinstance(text, str) or encoding != "latin1":
        raise _Refused("_codecs.encode is allowed only as protocols 0–2 write bytes: (str, 'latin1')")
    return text.encode("latin1")


SAFE_GLOBALS = {
    ("_codecs", "encode"): _encode,
    ("numpy", "dtype"): _dtype,
    ("numpy", "ndarray"): _NDArrayName,
    **{(f"numpy.{core}.multiarray", "_reconstruct"): _reconstruct for core in ("core", "_core")},
    **{(f"numpy.{core}.multiarray", "scalar"): _scalar for core in ("core", "_core")},
    **{(f"numpy.{core}.numeric", "_frombuffer"): _frombuffer for core in ("core", "_core")},
}


class ArrayUnpickler(pickle.Unpickler):
    """Unpickles plain data and numpy arrays only (module doc); every other global is refused."""

    def find_class(self, module: str, name: str) -> Any:
        if module == "builtins" and name in SAFE_BUILTINS:
            return getattr(builtins, name)
        if (module, name) in SAFE_GLOBALS:
            return SAFE_GLOBALS[(module, name)]
        raise _Refused(f"refused to load the global {ascii(module)[1:-1][:60]}.{ascii(name)[1:-1][:60]} "
                       "(only plain data and numpy arrays are allowed); the file may try to run code")


def _built(value: Any) -> Any:
    if isinstance(value, PendingArray):
        return value.build()
    if isinstance(value, list) and any(isinstance(v, PendingArray) for v in value):
        return [_built(v) for v in value]
    return value


def load_array_pickle(path: Path) -> Any:
    """Read ``path`` with :class:`ArrayUnpickler` (byte strings of Python 2 pickles stay bytes);
    the arrays a top-level dict holds are built (:func:`build_array`)."""
    raw = read_file(path, MAX_CIFAR_BYTES)
    try:
        out = ArrayUnpickler(io.BytesIO(raw), encoding="bytes").load()
        return {k: _built(v) for k, v in out.items()} if isinstance(out, dict) else _built(out)
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
    if isinstance(labels, np.ndarray) and (labels.ndim != 1 or labels.dtype.kind not in "iu"):
        raise refuse(path, f"b'{label_key}' must be a vector of integers, found {labels.dtype.name} {labels.shape}")
    if isinstance(labels, list) and not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in labels):
        bad = next(v for v in labels if not isinstance(v, (int, np.integer)) or isinstance(v, bool))
        raise refuse(path, f"b'{label_key}' must hold integers, found {type(bad).__name__} {str(bad)[:20]}")
    if isinstance(labels, list) and any(not -2**63 <= int(v) < 2**63 for v in labels):
        raise refuse(path, f"b'{label_key}' ranges beyond [0, {classes - 1}]")
    y = np.asarray(labels, dtype=np.int64) if isinstance(labels, list) else labels.astype(np.int64)
    if len(y) and (y.min() < 0 or y.max() >= classes):
        raise refuse(path, f"b'{label_key}' ranges over [{y.min()}, {y.max()}]; expected [0, {classes - 1}]")
    return np.ascontiguousarray(data), y


def read_cifar(root: Path, files: list[str], label_key: str, classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The files' ``(x, y)`` concatenated in the order given."""
    parts = [read_cifar_batch(root / name, label_key, classes) for name in files]
    return np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])
