"""The pooled (centralised) reference of a study's tasks (docs/tasks.md §12): every task's model
trained on all its clients' training data at once, per seed, so that a reader can check that the
federated runs learn the task (sync FedAvg + momentum against the pooled accuracy)."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

from asyncfl.config.files import MAX_TABLE_BYTES, open_text_limited
from asyncfl.errors import UsageError
from analysis.ma_study.design import Study
from asyncfl.tasks import build_task
from asyncfl.tasks.pooled import train_pooled

#: Adam's learning rate and mini-batch of the pooled reference
POOLED_LR, POOLED_BATCH = 1e-2, 100


def _saved(path: Path) -> dict[tuple[str, int, int, int], dict[str, Any]]:
    """Rows of an earlier ``pooled.csv`` by (task, seed, clients, steps): a rerun keeps them."""
    if not path.is_file():
        return {}
    out = {}
    try:
        with open_text_limited(path, MAX_TABLE_BYTES, UsageError) as fh:  # a regular file, bounded
            for row in csv.DictReader(fh):
                try:
                    key = (row["task"], int(row["seed"]), int(row["clients"]), int(row["pooled_steps"]))
                    out[key] = {**row, "seed": key[1], "clients": key[2], "pooled_steps": key[3],
                                "final_accuracy": float(row["final_accuracy"]), "best_accuracy": float(row["best_accuracy"])}
                except (KeyError, ValueError, TypeError):
                    continue
    except (UnicodeDecodeError, csv.Error):  # a damaged table of its own: its rows are computed again
        return {}
    return out


def pooled_reference(study: Study, out: Path) -> list[dict[str, Any]]:
    """One row per task and no-DP seed: the pooled model's final and best test accuracy after
    ``pooled_steps`` Adam steps (mini-batches from a fresh permutation every epoch); none when
    ``pooled_steps`` is 0. Rows of an earlier ``out/pooled.csv`` with the same settings are kept."""
    steps = study.spec.pooled_steps
    if steps == 0:
        return []
    saved = _saved(out / "pooled.csv")
    rows = []
    for task in study.spec.tasks:
        scenario = study.scenario(study.first_point(task.name))
        clients = scenario.population.clients
        for seed in study.spec.seeds:
            key = (task.name, seed, clients, steps)
            if key not in saved:
                built = build_task(scenario.task, clients, seed)
                result = train_pooled(built, steps, POOLED_LR, POOLED_BATCH, shuffle_seed=seed)
                saved[key] = {"task": task.name, "seed": seed, "clients": clients, "pooled_steps": steps,
                              "final_accuracy": result.final, "best_accuracy": result.best}
            rows.append(saved[key])
    return rows
