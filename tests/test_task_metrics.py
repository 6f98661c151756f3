"""A task's own metrics everywhere (issue 35 item 5): the sweep's ``results.csv`` and
``summary.csv`` (mean and Student-t 95 % half-width recomputed here with scipy), ``asyncfl compare
--metric NAME`` (table, CSV, figure) and the figures' default panels."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path
from typing import Literal

import numpy as np
import pytest
import torch
from scipy import stats
from sklearn.metrics import f1_score

from asyncfl.cli.main import main
from asyncfl.components.core import Component
from asyncfl.components.registry import register, unregister
from asyncfl.config.tasks import TaskSection
from asyncfl.figures.metrics import series
from asyncfl.tasks.base import ClientData, Task
from conftest import make_raw


class MacroF1Task(Task):
    """A three-class toy whose evaluation also reports the macro-averaged F1 score."""

    def evaluate(self, theta, data=None):
        data = self.test if data is None else data
        out = super().evaluate(theta, data)
        with self.evaluating(), torch.no_grad():
            predicted = self.outputs(theta, data.x).argmax(dim=-1)
        out["macro_f1"] = float(f1_score(data.y.numpy(), predicted.numpy(), average="macro", zero_division=0))
        return out


class MacroConfig(TaskSection):
    name: Literal["macro-toy"] = "macro-toy"


def build(cfg, ctx):
    num_clients = ctx.clients
    torch.manual_seed(ctx.seed)
    g = torch.Generator().manual_seed(0)
    clients = [ClientData(torch.randn(32, 6, generator=g), torch.randint(0, 3, (32,), generator=g)) for _ in range(num_clients)]
    test = ClientData(torch.randn(64, 6, generator=g), torch.randint(0, 3, (64,), generator=g))
    return MacroF1Task("macro-toy", torch.nn.Linear(6, 3), clients, test, torch.nn.CrossEntropyLoss(reduction="none"), True,
                       metric_names=("macro_f1",))


@pytest.fixture
def macro_task():
    register(Component("task", "macro-toy", build, MacroConfig))
    yield
    unregister("task", "macro-toy")


def rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def write_scenario(tmp_path: Path) -> Path:
    from asyncfl.config import scenario as sc

    raw = make_raw(**{"task": {"name": "macro-toy"}, "population.clients": 6, "server.concurrency": 4, "server.buffer": 2,
                      "client.lr": 0.3, "run.steps": 8, "run.eval_every": 4})
    path = tmp_path / "s.toml"
    path.write_text(sc.validate(raw).to_toml())
    return path


@pytest.mark.slow
def test_a_tasks_metric_reaches_the_sweep_tables_compare_and_figures(macro_task, tmp_path, capsys):
    path = write_scenario(tmp_path)
    out = tmp_path / "sw"
    assert main(["sweep", str(path), "--grid", "server.lr=0.5,0.25", "--seeds", "0-2", "--workers", "1",
                 "--out", str(out), "--quiet"]) == 0
    results = rows(out / "results.csv")
    header = list(results[0])
    assert header[header.index("accuracy") + 1] == "macro_f1"
    for r in results:  # each row's value is its run's final macro F1
        final = json.loads((out / r["run_dir"] / "summary.json").read_text())["final"]
        assert float(r["macro_f1"]) == final["macro_f1"]
    for s in rows(out / "summary.csv"):
        values = np.array([float(r["macro_f1"]) for r in results if r["server.lr"] == s["server.lr"]])
        assert len(values) == 3
        assert float(s["macro_f1_mean"]) == pytest.approx(values.mean())
        half = stats.t.ppf(0.975, len(values) - 1) * values.std(ddof=1) / math.sqrt(len(values))
        assert float(s["macro_f1_ci95"]) == pytest.approx(half)

    runs = [str(out / r["run_dir"]) for r in results[:2]]
    capsys.readouterr()
    assert main(["compare", *runs, "--metric", "macro_f1", "--out", str(tmp_path / "c.png"), "--csv", str(tmp_path / "c.csv")]) == 0
    assert "final macro_f1" in capsys.readouterr().out
    table = rows(tmp_path / "c.csv")
    assert [float(t["macro_f1"]) for t in table] == [float(r["macro_f1"]) for r in results[:2]]
    assert (tmp_path / "c.png").stat().st_size > 0
    assert main(["compare", *runs, "--metric", "macro_f2"]) == 2
    err = capsys.readouterr().err
    assert "--metric 'macro_f2': no run records it; allowed: loss, accuracy, gap, train_loss, staleness_mean, staleness_max, macro_f1" in err
    assert series(Path(runs[0]))["macro_f1"] == [float(r["macro_f1"]) for r in rows(Path(runs[0]) / "metrics.csv")]
