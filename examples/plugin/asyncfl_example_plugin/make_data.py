"""Write a small ``blob-cnn`` data set: ``python -m asyncfl_example_plugin.make_data OUT.npz``.

Each of ``writers`` writers draws 8×8 images of ``classes`` blobs (a class is a bright 3×3 patch
at its own place) with a writer-specific shift and noise: a natural per-writer split."""

import sys

import numpy as np


def make(path: str, writers: int = 40, per_writer: int = 30, test: int = 400, classes: int = 4, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    centres = [(2 + 4 * (c % 2), 2 + 4 * (c // 2 % 2)) for c in range(classes)]

    def images(n: int, shift: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        y = rng.integers(0, classes, size=n)
        x = rng.normal(0.0, 0.6, size=(n, 1, 8, 8))
        for i, c in enumerate(y):
            r, q = centres[c]
            r, q = int(np.clip(r + shift[0], 1, 6)), int(np.clip(q + shift[1], 1, 6))
            x[i, 0, r - 1:r + 2, q - 1:q + 2] += 1.5
        return x.astype(np.float32), y

    xs, ys, ws = [], [], []
    for w in range(writers):
        x, y = images(per_writer, rng.integers(-1, 2, size=2))
        xs.append(x), ys.append(y), ws.append(np.full(per_writer, w))
    test_x, test_y = images(test, np.zeros(2, dtype=int))
    np.savez(path, x=np.concatenate(xs), y=np.concatenate(ys), writer=np.concatenate(ws), test_x=test_x, test_y=test_y)


if __name__ == "__main__":
    make(sys.argv[1])
