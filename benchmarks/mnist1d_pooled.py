"""Pooled (centralised) test accuracy of the mnist1d task's models next to the figures published
with MNIST-1D (docs/tasks.md §6).

Run on demand (not collected by pytest)::

    python -m benchmarks.mnist1d_pooled              # 8000 Adam steps per model, seeds 0 1 2
    python -m benchmarks.mnist1d_pooled --quick      # 300 steps, one seed: a smoke run

Each model of the task (``logreg``, ``mlp``, ``cnn``; :func:`asyncfl.tasks.mnist1d.mnist1d_model`,
initialised from the task's model stream) is trained on all 4000 training signals pooled — no
federation — with the training protocol of the MNIST-1D reference code: Adam, learning rate
1e-2, mini-batches of 100 taken in order, 8000 steps, then evaluated on the 1000 test signals
(``Task.evaluate``). Printed: the mean ± std over seeds of the final test accuracy and of the best
one seen at the evaluations every 250 steps, and the published accuracy.

The published figures are those of the MNIST-1D README's table "Comparing MNIST and MNIST-1D"
(Greydanus & Kobak, "Scaling down deep learning with MNIST-1D", 2020): logistic regression 32 %,
MLP 68 %, CNN 94 % (GRU 91 %, human expert 96 %). The reference MLP has two hidden layers of 100
with a residual connection, and its CNN three strided convolutions of 25 channels; the task's
models (docs/tasks.md §6) are close but not identical, so the comparison checks the data and the
ranking rather than the last percent.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import torch

from asyncfl.config.tasks import MNIST1DTask
from asyncfl.tasks import build_task
from asyncfl.tasks.pooled import train_pooled

#: the MNIST-1D README's test accuracies (table "Comparing MNIST and MNIST-1D")
PUBLISHED = {"logreg": 0.32, "mlp": 0.68, "cnn": 0.94}
LABELS = {"logreg": "logistic regression", "mlp": "MLP", "cnn": "CNN"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mnist1d_pooled", description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--quick", action="store_true", help="300 steps, seed 0")
    args = parser.parse_args(argv)
    steps, seeds = (300, [0]) if args.quick else (args.steps, args.seeds)
    torch.set_num_threads(1)
    print(f"pooled MNIST-1D (4000 train / 1000 test), Adam lr 1e-2, batch 100, {steps} steps, seeds {seeds}")
    print(f"{'model':22s} {'final test acc':>16s} {'best test acc':>16s} {'published':>10s} {'time/seed':>10s}")
    for kind in ("logreg", "mlp", "cnn"):
        finals, bests = [], []
        t0 = time.perf_counter()
        for seed in seeds:
            final, best = train_pooled(build_task(MNIST1DTask(model=kind), 1, seed), steps)
            finals.append(final)
            bests.append(best)
        dt = (time.perf_counter() - t0) / len(seeds)
        print(f"{LABELS[kind]:22s} {np.mean(finals):9.1%} ± {np.std(finals):4.1%} {np.mean(bests):9.1%} ± {np.std(bests):4.1%}"
              f" {PUBLISHED[kind]:>10.0%} {dt:9.1f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
