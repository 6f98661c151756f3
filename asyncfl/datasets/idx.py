"""MNIST and EMNIST in the IDX format (docs/tasks.md §16), raw or gzipped.

An IDX file is a header then the array, big-endian:

* bytes 0–1: zero; byte 2: the element type (``0x08`` uint8, ``0x09`` int8, ``0x0B`` int16,
  ``0x0C`` int32, ``0x0D`` float32, ``0x0E`` float64); byte 3: the number of dimensions ``r``;
* then ``r`` unsigned 32-bit sizes, then ``Π sizes`` elements in row-major order.

So MNIST's images begin ``00 00 08 03`` (magic 2051) and its labels ``00 00 08 01`` (2049). A file
is refused, naming it, when its magic, element type, rank, dimensions or length is not what the
caller expects. EMNIST stores every image transposed relative to MNIST (its images are read
column by column); :func:`read_idx_images` turns them back when asked. Torch-free.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

import numpy as np

from asyncfl.datasets.files import MAX_FILE_BYTES, DataStream, refuse

#: IDX element type code → numpy big-endian dtype
IDX_TYPES: dict[int, np.dtype] = {0x08: np.dtype(">u1"), 0x09: np.dtype(">i1"), 0x0B: np.dtype(">i2"), 0x0C: np.dtype(">i4"),
             0x0D: np.dtype(">f4"), 0x0E: np.dtype(">f8")}


def read_idx(path: Path, limit: int = MAX_FILE_BYTES) -> np.ndarray:
    """The array the IDX file ``path`` holds (native byte order), raw or gzipped.

    The header is read first; the size it declares (``Π sizes × element size``, in exact integer
    arithmetic, so dimensions whose product would wrap around 2⁶⁴ cannot pass as small) is
    checked against what the file can hold — its length when plain, the inflation budget of
    :class:`~asyncfl.datasets.files.DataStream` when gzipped — before the body is read, and the
    body must end exactly where the header says."""
    with DataStream(path, limit) as stream:
        head = stream.read(4)
        if len(head) < 4 or head[:2] != b"\x00\x00":
            raise refuse(path, "not an IDX file (it must start with two zero bytes, a type byte and a rank byte)")
        code, rank = head[2], head[3]
        if code not in IDX_TYPES:
            raise refuse(path, f"IDX element type 0x{code:02x} is not one of "
                               f"{', '.join(f'0x{c:02x}' for c in IDX_TYPES)}")
        sizes = stream.read(4 * rank) if 1 <= rank <= 4 else b""
        if not 1 <= rank <= 4 or len(sizes) < 4 * rank:
            raise refuse(path, f"IDX header: rank {rank} (expected 1 to 4 dimensions and their sizes)")
        dims = struct.unpack(f">{rank}I", sizes)
        dtype = IDX_TYPES[code]
        expected = math.prod(dims) * dtype.itemsize  # Python integers: no wrap-around
        shape = f"{'×'.join(map(str, dims))} {dtype.name} elements ({expected} bytes)"
        if not stream.gzipped and stream.size - stream.delivered != expected:
            raise refuse(path, f"IDX header says {shape} but the file holds {stream.size - stream.delivered} bytes "
                               "after the header")
        body = stream.read_exact(expected, f"the IDX header's {shape}")
        if not stream.at_end():
            raise refuse(path, f"IDX header says {shape} but the unzipped file holds more bytes after them")
    return np.frombuffer(body, dtype=dtype).reshape(dims).astype(dtype.newbyteorder("="))


def read_idx_images(path: Path, side: int = 28, transposed: bool = False) -> np.ndarray:
    """``(n, side·side)`` float32 pixels in ``[0, 1]`` (÷255) from an IDX file of ``n × side × side``
    uint8 images (``transposed``: EMNIST's column-major images, turned to row-major)."""
    images = read_idx(path)
    if images.dtype != np.uint8 or images.ndim != 3 or images.shape[1:] != (side, side):
        raise refuse(path, f"expected uint8 images of {side}×{side} (IDX magic 2051), found {images.dtype.name} "
                           f"of shape {images.shape}")
    if len(images) == 0:
        raise refuse(path, "holds no images")
    if transposed:
        images = images.transpose(0, 2, 1)
    return (images.reshape(len(images), side * side).astype(np.float32) / np.float32(255.0))


def read_idx_labels(path: Path, classes: int, offset: int = 0) -> np.ndarray:
    """``(n,)`` int64 labels ``value − offset`` from an IDX file of uint8 labels, each in
    ``[0, classes)`` after the offset (EMNIST letters count from 1: ``offset = 1``)."""
    labels = read_idx(path)
    if labels.dtype != np.uint8 or labels.ndim != 1:
        raise refuse(path, f"expected a vector of uint8 labels (IDX magic 2049), found {labels.dtype.name} "
                           f"of shape {labels.shape}")
    if len(labels) == 0:
        raise refuse(path, "holds no labels")
    out = labels.astype(np.int64) - offset
    if len(out) and (out.min() < 0 or out.max() >= classes):
        raise refuse(path, f"labels range over [{out.min() + offset}, {out.max() + offset}]; expected "
                           f"[{offset}, {classes + offset - 1}] for {classes} classes")
    return out
