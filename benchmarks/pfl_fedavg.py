"""pfl-research's FedAvg on a given torch model and per-user data: the reference the throughput
benchmarks compare with (``benchmarks/throughput.py``, ``benchmarks/femnist_throughput.py``).

pfl (``pip install pfl``) is not a dependency; :func:`run_fedavg` returns None without it.
"""

from __future__ import annotations

import asyncio
import time
from typing import NamedTuple

import torch


class PflTiming(NamedTuple):
    """Marks of the run's start, the end of its first central iteration and its end: wall
    (``perf_counter``) and the process's CPU time (``process_time``)."""

    start: float
    first: float
    end: float
    start_cpu: float
    first_cpu: float
    end_cpu: float


def run_fedavg(module: torch.nn.Module, data: list[tuple[torch.Tensor, torch.Tensor]], cohort: int, iterations: int,
               lr: float, batch: int, epochs: int, sampler: str = "random") -> PflTiming | None:
    """``iterations`` central iterations of pfl's ``FederatedAveraging`` on ``SimulatedBackend``
    (cohorts of ``cohort`` users drawn by pfl's ``sampler``, local SGD at ``lr`` on batches of
    ``batch`` for ``epochs``, server SGD at 1.0, cross entropy, no evaluation); None when pfl is
    not installed."""
    try:
        from pfl.aggregate.simulate import SimulatedBackend
        from pfl.algorithm import FederatedAveraging, NNAlgorithmParams
        from pfl.callback.base import TrainingProcessCallback
        from pfl.data.dataset import Dataset
        from pfl.data.federated_dataset import FederatedDataset
        from pfl.data.sampling import get_user_sampler
        from pfl.hyperparam import NNEvalHyperParams, NNTrainHyperParams
        from pfl.metrics import Metrics, Weighted
        from pfl.model.pytorch import PyTorchModel
    except ImportError:
        return None

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.net = module

        def forward(self, x):
            return self.net(x)

        def loss(self, x, y, eval=False):
            self.eval() if eval else self.train()
            return torch.nn.functional.cross_entropy(self(x), y)

        @torch.no_grad()
        def metrics(self, x, y, eval=False):
            return {"loss": Weighted(torch.nn.functional.cross_entropy(self(x), y, reduction="sum").item(), len(x))}

    net = Net()
    dataset = FederatedDataset(lambda uid: Dataset(raw_data=list(data[uid]), user_id=uid),
                               get_user_sampler(sampler, list(range(len(data)))))
    backend = SimulatedBackend(training_data=dataset, val_data=None, postprocessors=[])
    model = PyTorchModel(net, local_optimizer_create=torch.optim.SGD, central_optimizer=torch.optim.SGD(net.parameters(), lr=1.0))
    params = NNAlgorithmParams(central_num_iterations=iterations, evaluation_frequency=10**9, train_cohort_size=cohort,
                               val_cohort_size=0)
    train = NNTrainHyperParams(local_learning_rate=lr, local_num_epochs=epochs, local_batch_size=batch)
    marks: list[tuple[float, float]] = []

    class Clock(TrainingProcessCallback):
        def after_central_iteration(self, aggregate_metrics, model, *, central_iteration):
            marks.append((time.perf_counter(), time.process_time()))
            return False, Metrics()

    # pfl drives its loop with asyncio.get_event_loop(), which fails once an asyncio.run()
    # (an asyncfl measurement) has ended: give it a loop of its own
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    start, start_cpu = time.perf_counter(), time.process_time()
    FederatedAveraging().run(algorithm_params=params, backend=backend, model=model, model_train_params=train,
                             model_eval_params=NNEvalHyperParams(local_batch_size=None), callbacks=[Clock()],
                             send_metrics_to_platform=False)
    end, end_cpu = time.perf_counter(), time.process_time()
    asyncio.set_event_loop(None)
    loop.close()
    return PflTiming(start, marks[0][0], end, start_cpu, marks[0][1], end_cpu)
