"""Pooled (centralised) test accuracy of the data-set tasks' models (docs/tasks.md §19).

Run on demand (not collected by pytest)::

    python -m benchmarks.datasets_pooled                    # the twin (CNN, MLP) and MNIST-1D's CNN
    python -m benchmarks.datasets_pooled --cifar10 PATH     # also CIFAR-10's CNN on the real data
    python -m benchmarks.datasets_pooled --quick            # a smoke run

Every model is trained on its task's training data pooled over all clients — no federation —
with Adam from the task's initial model (:func:`asyncfl.tasks.pooled.train_pooled`, batches from
a fresh seeded permutation every epoch), then scored on the task's test set. Printed: the final
and the best test accuracy (evaluations every ``steps/8``), the wall time, and the published
figure where one exists: MNIST-1D's CNN 94 % (the MNIST-1D README's table, Greydanus & Kobak,
2020; this is the ``mnist1d`` task's ``cnn``, trained by ``benchmarks/mnist1d_pooled.py``'s
protocol: Adam 1e-2, batches of 100 in order); TensorFlow's CNN tutorial reports about 70 % for
the CIFAR CNN on CIFAR-10. The twin has no published figure: it shows that the FEMNIST-shaped
workload is learnable and not saturated (chance is 1/62 ≈ 1.6 %, the largest class 4.2 %).
"""

from __future__ import annotations

import argparse
import time

import torch

from asyncfl.config.datasets import CIFAR10Task, FEMNISTTwinTask
from asyncfl.config.tasks import MNIST1DTask
from asyncfl.tasks import build_task
from asyncfl.tasks.pooled import train_pooled

PUBLISHED = {"mnist1d cnn": 0.94, "cifar10 cnn": 0.70}
MNIST1D_STEPS = 8000  # the MNIST-1D reference protocol's (benchmarks/mnist1d_pooled.py)


def workloads(args: argparse.Namespace) -> dict[str, tuple[object, int, float, int, bool]]:
    """name → (task config, clients, Adam learning rate, batch, shuffled)."""
    twin = {"users": args.users, "data_seed": 0}
    out = {
        "twin cnn": (FEMNISTTwinTask(**twin, model="cnn"), args.users, 1e-3, 64, True),
        "twin mlp": (FEMNISTTwinTask(**twin, model="mlp"), args.users, 1e-3, 64, True),
        "mnist1d cnn": (MNIST1DTask(model="cnn"), 1, 1e-2, 100, False),
    }
    if args.cifar10:
        out["cifar10 cnn"] = (CIFAR10Task(path=args.cifar10), 1, 1e-3, 64, True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=200, help="writers of the twin (all pooled)")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cifar10", default=None, help="the cifar-10-batches-py folder")
    parser.add_argument("--quick", action="store_true", help="60 writers, 150 steps")
    args = parser.parse_args()
    if args.quick:
        args.users, args.steps = 60, 150
    torch.set_num_threads(1)
    print(f"{args.steps} Adam steps per model (MNIST-1D's CNN: its protocol's {MNIST1D_STEPS}), seed {args.seed}, torch threads 1")
    print(f"{'model':12} {'train':>7} {'test':>6} {'final':>6} {'best':>6} {'published':>9} {'seconds':>8}")
    for name, (cfg, clients, lr, batch, shuffled) in workloads(args).items():
        task = build_task(cfg, clients, args.seed)
        start = time.perf_counter()
        steps = MNIST1D_STEPS if name == "mnist1d cnn" and not args.quick else args.steps
        result = train_pooled(task, steps, lr=lr, batch=batch, eval_every=max(steps // 8, 1),
                              shuffle_seed=args.seed if shuffled else None)
        seconds = time.perf_counter() - start
        published = f"{PUBLISHED[name]:.0%}" if name in PUBLISHED else "—"
        print(f"{name:12} {len(task.pooled_training_data()):7d} {len(task.test):6d} {result.final:6.1%} {result.best:6.1%} "
              f"{published:>9} {seconds:8.1f}", flush=True)


if __name__ == "__main__":
    main()
