"""The ``blob-cnn`` task: a user's data set on disk and a CNN (docs/extending.md §4)."""

from pathlib import Path

import numpy as np
import torch

from asyncfl import ClientData, ScenarioError, Task


class SmallCNN(torch.nn.Module):
    def __init__(self, channels: int, classes: int) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(1, channels, 3)
        self.head = torch.nn.Linear(channels * 6 * 6, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(torch.relu(self.conv(x)).flatten(-3))


def build(cfg, ctx) -> Task:
    """One client per writer of the file (the first ``ctx.clients`` writers), a CNN seeded by ``ctx.seed``."""
    num_clients, seed = ctx.clients, ctx.seed
    path = Path(cfg.path)
    if not path.is_file():
        raise ScenarioError([f"task.path = {cfg.path!r}: no such file (make one with make_data.py)"])
    data = np.load(path)
    x, y, writer = data["x"].astype(np.float32), data["y"].astype(np.int64), data["writer"]
    if x.ndim != 4 or x.shape[1:] != (1, 8, 8):
        raise ScenarioError([f"task.path = {cfg.path!r}: x has shape {x.shape}, expected (n, 1, 8, 8)"])
    writers = np.unique(writer)
    if len(writers) < num_clients:
        raise ScenarioError([f"population.clients = {num_clients}: {cfg.path} has only {len(writers)} writers"])
    clients = [ClientData(torch.from_numpy(x[writer == w]), torch.from_numpy(y[writer == w])) for w in writers[:num_clients]]
    test = ClientData(torch.from_numpy(data["test_x"].astype(np.float32)), torch.from_numpy(data["test_y"].astype(np.int64)))
    torch.manual_seed(seed)
    model = SmallCNN(cfg.channels, int(y.max()) + 1)
    return Task(name="blob-cnn", model=model, clients=clients, test=test,
                loss_fn=torch.nn.CrossEntropyLoss(reduction="none"), classification=True)
