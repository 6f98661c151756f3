"""How many rows one evaluation forward pass takes (docs/tasks.md §1, "Evaluation in pieces").

``evaluate`` and ``train_loss`` sum their losses in chunks of ``EVAL_CHUNK`` rows; inside a chunk
the model's forward pass runs on pieces of at most :func:`forward_rows` rows, and the pieces'
outputs are concatenated before the loss, so the sums are taken exactly as before.

Why: a forward pass over 8192 rows of LEAF's FEMNIST CNN makes an 822 MB activation (32 × 28 × 28
floats a row). glibc serves a block above its mmap threshold (at most 32 MiB) with a fresh
``mmap`` and returns it on ``free``, so every such forward faulted its activations in page by
page: a run's ``train_loss`` on 20 611 samples took 12.5 s of user and 7.9 s of system time (3 M
minor page faults). Pieces whose largest activation stays under :data:`ACTIVATION_BUDGET` are
reused from the heap (no faults) and stay nearer the caches.

The rows of a piece do not change the numbers: each output row depends on its own input row
only (a model with batch normalisation, whose rows share the batch's statistics, is not split:
``Task._forward_rows``), and the kernels (oneDNN's convolutions, MKL's matrix products, torch's LSTM) compute a row
the same way for any batch of at least a few rows (``tests/test_forward_rows.py`` checks LEAF's
CNN, the CIFAR CNN and the character LSTM bit for bit against one pass; a batch of 1 or 2 rows
can take another kernel). So a piece is never shorter than ``min(rows, chunk)`` rows: the
last piece of a chunk takes its remainder. A model whose largest activation fits the budget
at ``EVAL_CHUNK`` rows (the MLPs, logistic regressions, quadratics) runs one pass per chunk, as
it always did.
"""

from __future__ import annotations

from typing import Callable

import torch

#: bytes of the largest single activation of one forward piece (module doc): a quarter of glibc's
#: largest mmap threshold (32 MiB), so that neither it nor a kernel's workspace beside it is mapped
ACTIVATION_BUDGET = 8 << 20


def largest_activation(forward: Callable[[torch.Tensor], torch.Tensor], model: torch.nn.Module, x: torch.Tensor) -> int:
    """Bytes of the largest tensor any submodule of ``model`` (or ``forward`` itself) returns on
    the input ``x``, found with forward hooks during one call of ``forward(x)``."""
    largest = 0

    def record(value: object) -> None:
        nonlocal largest
        if isinstance(value, torch.Tensor):
            largest = max(largest, value.numel() * value.element_size())
        elif isinstance(value, (tuple, list)):
            for v in value:
                record(v)

    hooks = [m.register_forward_hook(lambda _m, _i, out: record(out)) for m in model.modules()]
    try:
        with torch.no_grad():
            record(forward(x))
    finally:
        for h in hooks:
            h.remove()
    return largest


def forward_rows(bytes_per_row: int, chunk: int, budget: int = ACTIVATION_BUDGET) -> int:
    """Rows per forward piece: ``⌊budget / bytes_per_row⌋`` clamped to ``[1, chunk]``."""
    return max(1, min(chunk, budget // max(bytes_per_row, 1)))


def pieces(n: int, rows: int) -> list[tuple[int, int]]:
    """``[(start, stop), …]`` covering ``0 … n−1`` in pieces of ``rows`` rows, the last piece
    taking the remainder (so between ``rows`` and ``2·rows − 1`` rows) unless ``n < rows``."""
    if n <= rows:
        return [(0, n)] if n else []
    starts = list(range(0, n - rows + 1, rows))
    return [(s, s + rows) for s in starts[:-1]] + [(starts[-1], n)]
