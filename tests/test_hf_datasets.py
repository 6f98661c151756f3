"""``hf-images`` (docs/tasks.md §20): FEMNIST- and CIFAR-10-shaped data sets written by
``datasets`` itself in the hub's parquet layout and as ``save_to_disk`` folders, partitioned by
Flower Datasets' partitioners. Checked against a partition computed by hand (IID, natural id, the
held-out cut), against Flower's own ``FederatedDataset`` with the same seed (Dirichlet,
pathological, shard), end to end through ``asyncfl run`` with five partitioners, and for lazy
imports (the CLI's start-up and ``validate`` never import ``datasets``)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import tomli_w

from asyncfl.cli.main import main
from asyncfl.config import datasets as ds
from asyncfl.datasets.users import user_key
from asyncfl.errors import ScenarioError
from asyncfl.tasks import build_task
from fixtures.make_dataset_fixtures import write_hf_cifar10, write_hf_femnist

datasets = pytest.importorskip("datasets")
pytest.importorskip("flwr_datasets")

REPO = Path(__file__).resolve().parents[1]
FEMNIST = {"label": "character", "classes": 62, "model": "mlp", "hidden": 8}
CIFAR = {"image": "img", "classes": 10, "side": 32, "channels": 3}


@pytest.fixture(scope="module")
def hf(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("hf")
    return {"femnist-parquet": write_hf_femnist(out / "fp", "parquet"), "femnist-disk": write_hf_femnist(out / "fd", "disk"),
            "cifar-parquet": write_hf_cifar10(out / "cp", "parquet"), "cifar-disk": write_hf_cifar10(out / "cd", "disk")}


def _cfg(path: Path, **keys) -> ds.HFImagesTask:
    return ds.HFImagesTask(path=str(path), **keys)


def _labels(task) -> list[list[int]]:
    return [c.y.tolist() for c in task.clients]


def test_the_fixtures_have_the_hubs_layouts(hf):
    assert sorted(p.name for p in (hf["cifar-parquet"] / "plain_text").iterdir()) == [
        "test-00000-of-00001.parquet", "train-00000-of-00001.parquet"]
    assert (hf["femnist-parquet"] / "data" / "train-00000-of-00001.parquet").is_file()
    assert (hf["femnist-disk"] / "dataset_dict.json").is_file() and (hf["femnist-disk"] / "train" / "state.json").is_file()
    cifar = datasets.load_from_disk(str(hf["cifar-disk"]))
    assert set(cifar) == {"train", "test"} and cifar["train"].features["label"].names[0] == "airplane"


def test_both_layouts_read_the_same_data(hf):
    keys = dict(FEMNIST, partitioner="iid")
    a, b = build_task(_cfg(hf["femnist-parquet"], **keys), 3, seed=0), build_task(_cfg(hf["femnist-disk"], **keys), 3, seed=0)
    for ca, cb in zip(a.clients + [a.test], b.clients + [b.test]):
        assert ca.x.equal(cb.x) and ca.y.equal(cb.y)


def test_iid_is_the_shuffled_split_cut_in_equal_shards_by_hand(hf):
    raw = datasets.load_from_disk(str(hf["cifar-disk"]))
    images = np.stack([np.asarray(im) for im in raw["train"]["img"]])
    labels = np.array(raw["train"]["label"])
    perm = np.random.default_rng(7).permutation(len(labels))  # datasets' shuffle(seed=7)
    hand = np.array_split(perm, 4)  # contiguous shards, the first n mod N one longer
    task = build_task(_cfg(hf["cifar-disk"], **CIFAR, partitioner="iid", partition_seed=7, model="mlp", hidden=4), 4, seed=0)
    assert _labels(task) == [labels[rows].tolist() for rows in hand]
    first = task.clients[0].x.numpy()[0].reshape(3, 32, 32)  # channel-major, standardised
    x = images.transpose(0, 3, 1, 2).astype(np.float64) / 255  # float64 by hand; the task sums in float32
    mean, std = x.mean(axis=(0, 2, 3)), x.std(axis=(0, 2, 3))
    np.testing.assert_allclose(first, (x[hand[0][0]] - mean[:, None, None]) / std[:, None, None], rtol=0, atol=1e-4)
    assert task.test.y.tolist() == list(raw["test"]["label"])  # the data set's own test split


def test_natural_id_clients_are_writers_chosen_by_asyncfls_key_and_hold_out_by_hand(hf):
    raw = datasets.load_from_disk(str(hf["femnist-disk"]))["train"]
    writers, labels = np.array(raw["writer_id"]), np.array(raw["character"])
    chosen = sorted(set(writers), key=lambda w: user_key(3, w))[:4]  # seed 3's four smallest keys, in key order
    task = build_task(_cfg(hf["femnist-disk"], **FEMNIST, partitioner="natural-id", partition_by="writer_id",
                           test_fraction=0.25, partition_seed=5), 4, seed=3)
    test = []
    for client, w in zip(task.clients, chosen):
        shuffled = np.random.default_rng(5).permutation(len(writers))  # FederatedDataset's shuffle(seed) first
        rows = shuffled[writers[shuffled] == w]  # the writer's samples, in the shuffled order
        perm = np.random.default_rng(5).permutation(len(rows))  # datasets' train_test_split(test_size, seed)
        n_test = math.ceil(0.25 * len(rows))
        assert client.y.tolist() == labels[rows[perm[n_test:]]].tolist()
        test += labels[rows[perm[:n_test]]].tolist()
    assert task.test.y.tolist() == test


@pytest.mark.parametrize("partitioner, keys", [
    ("dirichlet", {"alpha": 0.3, "min_partition_size": 2}),
    ("pathological", {"classes_per_partition": 2}),
    ("shard", {"shards_per_partition": 2}),
])
def test_partitions_equal_flowers_federated_dataset_with_the_same_seed(partitioner, keys, hf, tmp_path):
    from flwr_datasets import FederatedDataset
    from flwr_datasets import partitioner as fp

    made = {"dirichlet": lambda: fp.DirichletPartitioner(4, "label", alpha=0.3, min_partition_size=2, seed=11),
            "pathological": lambda: fp.PathologicalPartitioner(4, "label", num_classes_per_partition=2, seed=11),
            "shard": lambda: fp.ShardPartitioner(4, "label", num_shards_per_partition=2, seed=11)}[partitioner]()
    files = {part: str(hf["cifar-parquet"] / "plain_text" / f"{part}-00000-of-00001.parquet") for part in ("train", "test")}
    fds = FederatedDataset(dataset="parquet", data_files=files, partitioners={"train": made}, seed=11, shuffle=True,
                           cache_dir=str(tmp_path / "cache"))
    flower = [fds.load_partition(k, "train")["label"] for k in range(4)]
    task = build_task(_cfg(hf["cifar-parquet"], **CIFAR, partitioner=partitioner, partition_seed=11, **keys), 4, seed=0)
    assert _labels(task) == flower
    assert len({tuple(y) for y in flower}) == 4  # four different partitions


@pytest.mark.parametrize("key, partitioner, keys", [
    ("femnist-disk", "natural-id", dict(FEMNIST, partition_by="writer_id")),
    ("femnist-parquet", "shard", FEMNIST),
    ("cifar-parquet", "dirichlet", dict(CIFAR, min_partition_size=2)),
    ("cifar-disk", "pathological", CIFAR),
    ("cifar-parquet", "iid", dict(CIFAR, model="mlp", hidden=8)),
])
def test_asyncfl_run_on_each_partitioner(key, partitioner, keys, hf, tmp_path, capsys):
    raw = {"name": key, "seed": 1, "population": {"clients": 4},
           "task": dict(keys, name="hf-images", path=str(hf[key]), partitioner=partitioner),
           "client": {"lr": 0.05, "local_steps": 1, "batch_size": 4},
           "server": {"protocol": "fedbuff", "concurrency": 3, "buffer": 2, "rule": "sgd", "lr": 1.0},
           "run": {"steps": 2, "eval_every": 1}}
    scenario = tmp_path / "s.toml"
    scenario.write_text(tomli_w.dumps(raw))
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--quiet"]) == 0, capsys.readouterr().err
    rows = (tmp_path / "out" / "metrics.csv").read_text().splitlines()
    assert len(rows) == 4


def test_refusals_name_the_key(hf, tmp_path):
    with pytest.raises(ScenarioError, match=r"task.label = 'label': no such column .*character"):
        build_task(_cfg(hf["femnist-disk"], classes=62, partitioner="iid"), 2, seed=0)
    with pytest.raises(ScenarioError, match=r"task.train_split = 'training': .* holds the splits test, train"):
        build_task(_cfg(hf["cifar-disk"], **CIFAR, train_split="training"), 2, seed=0)
    with pytest.raises(ScenarioError, match=r"population.clients = 99: column 'writer_id' .* names 6 users"):
        build_task(_cfg(hf["femnist-disk"], **FEMNIST, partitioner="natural-id", partition_by="writer_id"), 99, seed=0)
    with pytest.raises(ScenarioError, match=r"expected uint8 images of shape \(28, 28\)"):
        build_task(_cfg(hf["cifar-disk"], image="img", classes=10, model="mlp"), 2, seed=0)
    with pytest.raises(ScenarioError, match=r"labels range over \[0, \d\]; task.classes = 3"):
        build_task(_cfg(hf["cifar-disk"], **dict(CIFAR, classes=3)), 2, seed=0)
    with pytest.raises(ScenarioError, match="not found there"):
        build_task(_cfg(tmp_path, **CIFAR), 2, seed=0)
    no_classes = _cfg(hf["cifar-disk"], image="img", side=32, channels=3, model="mlp", hidden=4)
    assert no_classes.model_params() == 0  # unknown before the data are read
    assert build_task(no_classes, 2, seed=0).dim == _cfg(hf["cifar-disk"], **dict(CIFAR, model="mlp", hidden=4)).model_params()
    with pytest.raises(ValueError, match="needs task.partition_by"):
        ds.HFImagesTask(path=".", classes=3, partitioner="natural-id")


def test_without_the_extra_the_task_names_it(hf, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_hf(name, *args, **kwargs):
        if name.split(".")[0] in ("datasets", "flwr_datasets"):
            raise ImportError(name)
        return real(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_hf)
    with pytest.raises(ScenarioError, match=r"pip install 'asyncfl\[hf\]'"):
        build_task(_cfg(hf["cifar-disk"], **CIFAR), 2, seed=0)


def test_the_cli_and_validate_never_import_datasets(hf, tmp_path):
    raw = {"name": "v", "population": {"clients": 4}, "client": {"lr": 0.05, "local_steps": 1},
           "task": dict(CIFAR, name="hf-images", path=str(hf["cifar-disk"]), partitioner="shard")}
    scenario = tmp_path / "s.toml"
    scenario.write_text(tomli_w.dumps(raw))
    code = ("import sys; from asyncfl.cli.main import main; rc = main(['validate', sys.argv[1]]); "
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('datasets', 'flwr_datasets', 'pyarrow')); "
            "print(rc, heavy)")
    done = subprocess.run([sys.executable, "-c", code, str(scenario)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.strip().splitlines()[-1] == "0 []", done.stdout + done.stderr


def test_every_offered_partitioner_has_a_builder():
    """The partitioners ``task.partitioner`` accepts (config) are exactly those the reader builds."""
    from asyncfl.config.datasets import HF_PARTITIONERS
    from asyncfl.datasets.hf import _PARTITIONERS

    assert set(_PARTITIONERS) == set(HF_PARTITIONERS)
