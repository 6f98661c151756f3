"""The accuracy cost of bf16 arithmetic on LEAF's CNN (issue 34 item 3), measured before offering
a ``run.precision = "bf16"``: a short FedAvg run on the FEMNIST twin (``--users`` writers, cohorts
of ``--cohort`` drawn each round, ``--rounds`` rounds, local SGD at lr 0.05 on batches of 20 for
one epoch, one thread), once in fp32 and once with the forward pass under
``torch.autocast("cpu", torch.bfloat16)`` (fp32 weights and updates; the loss in fp32), with the
same seeds, the cohorts and batches drawn alike. Prints each run's CPU time and test accuracy by
round.

    python -m benchmarks.bf16_accuracy [--users 30] [--cohort 10] [--rounds 12]
"""

from __future__ import annotations

import argparse
import time
from types import SimpleNamespace

import torch

from asyncfl.components.contracts import BuildContext
from asyncfl.compute.training import batch_schedule
from asyncfl.config.datasets import FEMNISTTwinTask
from asyncfl.tasks.base import Task
from asyncfl.tasks.femnist_twin import build_femnist_twin

CFG = SimpleNamespace(lr=0.05, batch_size=20, epochs=1, local_steps=None)


def local(task: Task, theta: torch.Tensor, k: int, seed: int, bf16: bool) -> torch.Tensor:
    """One client's epoch of SGD from ``theta`` (the forward under bf16 autocast when ``bf16``)."""
    data, generator = task.clients[k], torch.Generator().manual_seed(seed)
    params = {n: v.detach().clone().requires_grad_() for n, v in task.unflatten(theta).items()}
    for idx in batch_schedule(len(data), CFG, generator):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = torch.func.functional_call(task.model, params, (data.x[idx],))
        loss = task.loss_fn(out.float(), data.y[idx]).mean()
        grads = torch.autograd.grad(loss, list(params.values()))
        with torch.no_grad():
            for p, g in zip(params.values(), grads):
                p.sub_(CFG.lr * g)
    return torch.cat([p.detach().reshape(-1) for p in params.values()])


def fedavg(task: Task, rounds: int, cohort: int, bf16: bool) -> tuple[list[float], float]:
    """Test accuracy after each round, and the CPU seconds of the whole run."""
    theta, rng, start, accuracy = task.initial_theta.clone(), torch.Generator().manual_seed(1), time.process_time(), []
    for r in range(rounds):
        chosen = torch.randperm(task.num_clients, generator=rng)[:cohort].tolist()
        theta = torch.stack([local(task, theta, k, 1000 * r + k, bf16) for k in chosen]).mean(0)
        accuracy.append(round(task.evaluate(theta)["accuracy"], 4))
    return accuracy, time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=30)
    parser.add_argument("--cohort", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=12)
    args = parser.parse_args()
    torch.set_num_threads(1)
    task = build_femnist_twin(FEMNISTTwinTask(users=args.users), BuildContext(clients=args.users, seed=0))
    for bf16 in (False, True):
        accuracy, cpu = fedavg(task, args.rounds, args.cohort, bf16)
        print(f"{'bf16 autocast' if bf16 else 'fp32':14s} CPU {cpu:.1f} s  test accuracy by round {accuracy}", flush=True)


if __name__ == "__main__":
    main()
