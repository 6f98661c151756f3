"""The data sets read from disk (docs/tasks.md §13–18): every reader against an independent
reading of the same generated fixture (json / pickle / struct / h5py by hand), the refusals of
missing or malformed files, the splits and their statistics, the models (the hand-written LSTM
against torch's, every model through the batched path), the FEMNIST twin, and `asyncfl run` on
each task from a fixture folder."""

from __future__ import annotations

import gzip
import json
import math
import pickle
import struct
from pathlib import Path

import numpy as np
import pytest
import tomli_w
import torch

from asyncfl.cli.main import main
from asyncfl.config import datasets as ds
from asyncfl.config.scenario import ClientConfig
from asyncfl.compose import local_train, train_batched
from asyncfl.compute.training import LocalJob
from asyncfl.datasets.cifar import read_cifar_batch
from asyncfl.datasets.idx import read_idx, read_idx_images, read_idx_labels
from asyncfl.datasets.leaf import LEAF_CHARACTERS, femnist_arrays, read_leaf, shakespeare_arrays
from asyncfl.datasets.splits import shard_split, split_statistics
from asyncfl.datasets.users import UserSelection, user_key
from asyncfl.errors import ScenarioError
from asyncfl.tasks import build_task
from asyncfl.tasks.femnist_twin import class_frequencies, twin_writers, writer_counts
from asyncfl.tasks.models import CharLSTM, cifar_cnn, leaf_cnn
from fixtures.make_dataset_fixtures import idx_bytes, write_all, write_femnist

try:
    import h5py
except ImportError:  # the optional extra
    h5py = None


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> dict[str, Path]:
    return write_all(tmp_path_factory.mktemp("datasets"))


def _leaf_by_hand(folder: Path) -> dict[str, tuple[list, list]]:
    out = {}
    for f in sorted(folder.glob("*.json")):
        doc = json.loads(f.read_text())
        for u in doc["users"]:
            out[u] = (doc["user_data"][u]["x"], doc["user_data"][u]["y"])
    return out


# -- LEAF ------------------------------------------------------------------------------------
def test_femnist_reader_equals_the_json_read_by_hand(data):
    train, test = _leaf_by_hand(data["femnist"] / "train"), _leaf_by_hand(data["femnist"] / "test")
    clients, (tx, ty) = read_leaf(data["femnist"], femnist_arrays, len(train), seed=0)
    assert sorted(u for u, _ in clients) == sorted(train)  # all 6 users, each once
    for user, (x, y) in clients:
        assert x.dtype == np.float32 and x.shape == (len(train[user][1]), 784)
        np.testing.assert_array_equal(x, np.array(train[user][0], dtype=np.float32))
        np.testing.assert_array_equal(y, np.array(train[user][1]))
    order = [u for u, _ in clients]
    np.testing.assert_array_equal(ty, np.concatenate([test[u][1] for u in order]))
    np.testing.assert_array_equal(tx, np.concatenate([np.array(test[u][0], dtype=np.float32) for u in order]))


def test_shakespeare_codes_are_positions_in_leafs_alphabet(data):
    train = _leaf_by_hand(data["shakespeare"] / "train")
    clients, _ = read_leaf(data["shakespeare"], shakespeare_arrays, 3, seed=5)
    assert len(LEAF_CHARACTERS) == 80
    for user, (x, y) in clients:
        xs, ys = train[user]
        assert x.dtype == np.uint8 and x.shape == (len(xs), 80)
        assert x.tolist() == [[LEAF_CHARACTERS.index(c) for c in s] for s in xs]
        assert y.tolist() == [LEAF_CHARACTERS.index(c) for c in ys]


def test_users_are_the_n_smallest_keys_whatever_the_file_order():
    users = [f"u{i}" for i in range(50)]
    for seed in (0, 1):
        by_sorting = sorted(users, key=lambda u: user_key(seed, u))[:7]  # brute force: sort every key
        for order in (users, users[::-1]):
            sel = UserSelection(7, seed)
            for u in order:
                sel.offer(u, lambda u=u: u.upper())
            assert [u for u, _ in sel.chosen()] == by_sorting
            assert [d for _, d in sel.chosen()] == [u.upper() for u in by_sorting]
    assert sorted(users, key=lambda u: user_key(0, u))[:7] != sorted(users, key=lambda u: user_key(1, u))[:7]


def test_leaf_refusals_name_the_file_and_the_problem(tmp_path):
    root = write_femnist(tmp_path / "f")
    bad = next((root / "train").glob("*.json"))
    doc = json.loads(bad.read_text())
    doc["user_data"][doc["users"][0]]["y"].append(0)
    bad.write_text(json.dumps(doc))
    with pytest.raises(ScenarioError, match=rf"{bad.name}: user .*'x' holds \d+ samples and 'y' \d+ labels"):
        read_leaf(root, femnist_arrays, 2, seed=0)
    doc["user_data"][doc["users"][0]]["y"].pop()
    doc["user_data"][doc["users"][0]]["x"][0] = [0.5] * 783
    bad.write_text(json.dumps(doc))
    with pytest.raises(ScenarioError, match=rf"{bad.name}: user .*784"):
        read_leaf(root, femnist_arrays, 6, seed=0)
    bad.write_text("{not json")
    with pytest.raises(ScenarioError, match=rf"{bad.name}: not valid JSON"):
        read_leaf(root, femnist_arrays, 2, seed=0)
    with pytest.raises(ScenarioError, match="character '€' is not in LEAF's 80-character alphabet"):
        shakespeare_arrays(["€" * 80], ["a"], bad, "u")
    with pytest.raises(ScenarioError, match="population.clients = 99: .* holds 6 users"):
        read_leaf(write_femnist(tmp_path / "g"), femnist_arrays, 99, seed=0)


# -- CIFAR -----------------------------------------------------------------------------------
def test_cifar_reader_equals_pickle_read_by_hand(data):
    for root, name, key, classes in ((data["cifar10"], "data_batch_3", "labels", 10),
                                     (data["cifar100"], "train", "fine_labels", 100),
                                     (data["cifar100"], "test", "coarse_labels", 20)):
        with open(root / name, "rb") as fh:
            ref = pickle.load(fh, encoding="bytes")
        x, y = read_cifar_batch(root / name, key, classes)
        np.testing.assert_array_equal(x, ref[b"data"])
        assert y.tolist() == ref[key.encode()]


class _Boom:
    def __reduce__(self):
        return (print, ("this must never run",))


def test_cifar_refuses_code_and_wrong_arrays_naming_the_file(tmp_path, capsys):
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({b"data": _Boom(), b"labels": [0]}))
    with pytest.raises(ScenarioError, match=r"data_batch_1: not a CIFAR pickle: refused to load the global builtins.print"):
        read_cifar_batch(path, "labels", 10)
    assert "must never run" not in capsys.readouterr().out
    path.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.float32), b"labels": [0, 1]}))
    with pytest.raises(ScenarioError, match=r"data_batch_1: b'data' must be a uint8 array of shape \(n, 3072\), found float32"):
        read_cifar_batch(path, "labels", 10)
    path.write_bytes(pickle.dumps({b"data": np.zeros((2, 3000), np.uint8), b"labels": [0, 1]}))
    with pytest.raises(ScenarioError, match=r"data_batch_1: .*found uint8 \(2, 3000\)"):
        read_cifar_batch(path, "labels", 10)
    path.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 10]}))
    with pytest.raises(ScenarioError, match=r"ranges over \[0, 10\]; expected \[0, 9\]"):
        read_cifar_batch(path, "labels", 10)
    path.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": [0, 1]})[:-5])
    with pytest.raises(ScenarioError, match="data_batch_1: (truncated|not a valid pickle)"):
        read_cifar_batch(path, "labels", 10)


# -- IDX -------------------------------------------------------------------------------------
def _idx_by_hand(path: Path) -> np.ndarray:
    raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
    magic = struct.unpack(">I", raw[:4])[0]
    rank = magic & 0xFF
    dims = struct.unpack(f">{rank}I", raw[4:4 + 4 * rank])
    return np.array(list(raw[4 + 4 * rank:]), dtype=np.uint8).reshape(dims), magic


def test_idx_reader_equals_struct_by_hand(data):
    images, magic = _idx_by_hand(data["mnist"] / "train-images-idx3-ubyte.gz")
    assert magic == 2051
    x = read_idx_images(data["mnist"] / "train-images-idx3-ubyte.gz")
    np.testing.assert_allclose(x, images.reshape(len(images), -1) / 255.0, rtol=1e-7)
    labels, magic = _idx_by_hand(data["mnist"] / "train-labels-idx1-ubyte.gz")
    assert magic == 2049
    assert read_idx_labels(data["mnist"] / "train-labels-idx1-ubyte.gz", 10).tolist() == labels.tolist()
    # EMNIST: raw files, images stored transposed, letters labelled 1–26
    e_images, _ = _idx_by_hand(data["emnist-letters"] / "emnist-letters-test-images-idx3-ubyte")
    xe = read_idx_images(data["emnist-letters"] / "emnist-letters-test-images-idx3-ubyte", transposed=True)
    np.testing.assert_allclose(xe[3].reshape(28, 28), e_images[3].T / 255.0, rtol=1e-7)
    e_labels, _ = _idx_by_hand(data["emnist-letters"] / "emnist-letters-test-labels-idx1-ubyte")
    ye = read_idx_labels(data["emnist-letters"] / "emnist-letters-test-labels-idx1-ubyte", 26, offset=1)
    assert ye.tolist() == (e_labels.astype(int) - 1).tolist() and ye.min() >= 0


def test_idx_refuses_a_bad_magic_type_or_length(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte"
    good = idx_bytes(np.zeros((2, 28, 28), np.uint8))
    for content, message in ((b"\x01" + good[1:], "not an IDX file"),
                             (good[:2] + b"\x07" + good[3:], "IDX element type 0x07"),
                             (good[:-1], r"IDX header says 2×28×28 uint8 elements \(1568 bytes\) but the file holds 1567")):
        path.write_bytes(content)
        with pytest.raises(ScenarioError, match=rf"{path.name}: {message}"):
            read_idx(path)
    path.write_bytes(idx_bytes(np.zeros((2, 27, 27), np.uint8)))
    with pytest.raises(ScenarioError, match=r"expected uint8 images of 28×28 .* shape \(2, 27, 27\)"):
        read_idx_images(path)
    path.write_bytes(idx_bytes(np.array([0, 11], np.uint8)))
    with pytest.raises(ScenarioError, match=r"labels range over \[0, 11\]; expected \[0, 9\]"):
        read_idx_labels(path, 10)
    path.write_bytes(gzip.compress(good)[:-12])
    with pytest.raises(ScenarioError, match="truncated gzip|not a valid gzip"):
        read_idx_images(path)


# -- HDF5 ------------------------------------------------------------------------------------
@pytest.mark.skipif(h5py is None, reason="the optional h5py is not installed")
def test_tff_emnist_task_equals_h5py_by_hand(data):
    cfg = ds.TFFEMNISTTask(path=str(data["tff-emnist"]))
    task = build_task(cfg, 5, seed=2)
    with h5py.File(data["tff-emnist"] / "fed_emnist_train.h5") as fh:
        by_hand = {w: (fh["examples"][w]["pixels"][()].reshape(-1, 784), fh["examples"][w]["label"][()]) for w in fh["examples"]}
    got = sorted((c.y.tolist(), c.x.numpy().tobytes()) for c in task.clients)
    want = sorted((y.astype(int).tolist(), x.astype(np.float32).tobytes()) for x, y in by_hand.values())
    assert got == want


def test_without_h5py_the_task_names_the_extra(data, monkeypatch, tmp_path):
    monkeypatch.setitem(__import__("sys").modules, "h5py", None)
    with pytest.raises(ScenarioError, match=r"needs the optional package h5py: pip install 'asyncfl\[h5\]'"):
        build_task(ds.TFFEMNISTTask(path=str(tmp_path)), 2, seed=0)


# -- refusing a path before anything is built ----------------------------------------------------
@pytest.mark.parametrize("cfg,missing,source", [
    (ds.FEMNISTTask(path="{d}"), "train/\\*.json; test/\\*.json", "LEAF"),
    (ds.CIFAR10Task(path="{d}"), "data_batch_1; data_batch_2", "cs.toronto.edu/~kriz/cifar.html"),
    (ds.MNISTTask(path="{d}", variant="emnist-digits"), "emnist-digits-train-images-idx3-ubyte or emnist-digits-train-images-idx3-ubyte.gz",
     "nist.gov"),
    (ds.TFFEMNISTTask(path="{d}", only_digits=True), "fed_emnist_digitsonly_train.h5", "tff-datasets-public"),
])
def test_a_wrong_folder_is_refused_naming_the_files_and_where_to_get_them(cfg, missing, source, tmp_path):
    cfg = cfg.model_copy(update={"path": str(tmp_path)})
    problems = cfg.file_problems()
    assert len(problems) == 1 and f"task.path = {str(tmp_path)!r}: not found there: " in problems[0]
    assert __import__("re").search(missing, problems[0]) and source in problems[0] and "nothing is downloaded" in problems[0]
    assert "no such folder" in cfg.model_copy(update={"path": str(tmp_path / "nope")}).file_problems()[0]


# -- splits ----------------------------------------------------------------------------------
def test_shard_split_deals_every_client_its_shards_of_sorted_labels():
    labels = np.repeat(np.arange(10), 100)  # 10 classes × 100: shards of 50 are single-label
    parts = shard_split(labels, 10, 2, np.random.default_rng(0))
    assert sorted(np.concatenate(parts).tolist()) == list(range(1000))  # every sample once
    assert all(len(p) == 100 and len(np.unique(labels[p])) <= 2 for p in parts)
    with pytest.raises(ScenarioError, match="population.clients = 600 × task.shards_per_client = 2"):
        shard_split(labels, 600, 2, np.random.default_rng(0))


def test_split_statistics_by_hand():
    stats = split_statistics([np.array([0, 0, 1, 1]), np.array([2]), np.array([0, 1, 2, 2, 2, 2])], 3)
    assert (stats.clients, stats.samples_min, stats.samples_median, stats.samples_max) == (3, 1, 4.0, 6)
    assert stats.labels_per_client == pytest.approx((2 + 1 + 3) / 3)
    third = -(2 * (1 / 6) * math.log(1 / 6) + (4 / 6) * math.log(4 / 6))
    assert stats.label_entropy == pytest.approx((math.log(2) + 0 + third) / 3)
    pooled = np.array([3, 3, 5]) / 11  # labels 0, 1, 2 over all 11 samples
    assert stats.pooled_entropy == pytest.approx(-(pooled * np.log(pooled)).sum())


# -- models ----------------------------------------------------------------------------------
def test_the_char_lstm_computes_the_lstm_equations():
    torch.manual_seed(0)
    model = CharLSTM(vocab=80, embed=8, hidden=16, layers=2)
    x = torch.randint(0, 80, (3, 11), dtype=torch.uint8)
    p = dict(model.named_parameters())
    h_in = p["embedding.weight"][x.long()]  # (3, 11, 8)
    for layer in range(2):  # c_t = σ(f) c_{t−1} + σ(i) tanh(g), h_t = σ(o) tanh(c_t), gates i, f, g, o
        W, U = p[f"lstm.weight_ih_l{layer}"], p[f"lstm.weight_hh_l{layer}"]
        b = p[f"lstm.bias_ih_l{layer}"] + p[f"lstm.bias_hh_l{layer}"]
        h, c, outs = torch.zeros(3, 16), torch.zeros(3, 16), []
        for t in range(11):
            i, f, g, o = (h_in[:, t] @ W.T + h @ U.T + b).split(16, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            outs.append(h)
        h_in = torch.stack(outs, dim=1)
    by_hand = h_in[:, -1] @ p["out.weight"].T + p["out.bias"]
    torch.testing.assert_close(model(x), by_hand, rtol=1e-5, atol=1e-6)


def test_the_models_have_the_papers_sizes():
    count = lambda m: sum(p.numel() for p in m.parameters())  # noqa: E731
    # LEAF CNN: 5·5·32+32, 5·5·32·64+64, 3136·2048+2048, 2048·62+62
    assert count(leaf_cnn(62)) == 832 + 51_264 + 6_424_576 + 127_038 == ds.leaf_cnn_params(62)
    assert count(cifar_cnn(10)) == 896 + 18_496 + 36_928 + 65_600 + 650 == ds.cifar_cnn_params(10)
    lstm = 640 + (8 * 1024 + 256 * 1024 + 2 * 1024) + (2 * 256 * 1024 + 2 * 1024) + (256 * 80 + 80)
    assert count(CharLSTM()) == lstm == ds.char_lstm_params(80, 8, 256, 2)
    assert CharLSTM()(torch.zeros(4, 80, dtype=torch.uint8)).shape == (4, 80)


def _jobs_agree(task, forced: bool | None = None) -> None:
    if forced is not None:
        task.batched_training = forced
    client = ClientConfig(lr=0.1, local_steps=2, batch_size=3)
    start = task.initial_theta
    jobs = [LocalJob(k, start, start, 0.0, seed=10 + k) for k in range(task.num_clients)]
    for job, theta in zip(jobs, train_batched(task, client, jobs)):
        torch.testing.assert_close(theta, local_train(task, client, job), rtol=1e-4, atol=1e-5)
        assert not torch.equal(theta, start)


@pytest.mark.parametrize("name", ["femnist", "cifar10"])
def test_the_cnns_train_through_vmap_as_per_client_when_asked(name, data):
    cfg = {"femnist": ds.FEMNISTTask(path=str(data["femnist"])), "cifar10": ds.CIFAR10Task(path=str(data["cifar10"]))}[name]
    task = build_task(cfg, 2, seed=0)
    assert task.batched_training is False  # slower through vmap on CPU (asyncfl/tasks/models.py): the loop by default
    _jobs_agree(task, forced=True)


def test_only_the_mlps_are_batched_and_the_others_train_job_by_job(data):
    assert build_task(ds.FEMNISTTask(path=str(data["femnist"]), model="mlp", hidden=8), 2, seed=0).batched_training
    assert build_task(ds.MNISTTask(path=str(data["mnist"]), hidden=8), 2, seed=0).batched_training
    shakespeare = build_task(ds.ShakespeareTask(path=str(data["shakespeare"]), hidden=8), 2, seed=0)
    assert shakespeare.batched_training is False  # torch's LSTM has no vmap batching rule
    _jobs_agree(shakespeare)


# -- the sizes known before building -----------------------------------------------------------------
@pytest.mark.parametrize("key", ["femnist", "shakespeare", "cifar10", "cifar100", "mnist", "emnist-letters"])
def test_the_config_knows_d_and_the_bytes_per_sample_of_the_built_task(key, data):
    cfg = {"femnist": ds.FEMNISTTask(path=str(data["femnist"]), model="mlp"),
           "shakespeare": ds.ShakespeareTask(path=str(data["shakespeare"]), hidden=16),
           "cifar10": ds.CIFAR10Task(path=str(data["cifar10"])),
           "cifar100": ds.CIFAR100Task(path=str(data["cifar100"]), labels="coarse", split="shards"),
           "mnist": ds.MNISTTask(path=str(data["mnist"])),
           "emnist-letters": ds.MNISTTask(path=str(data["emnist-letters"]), variant="emnist-letters")}[key]
    task = build_task(cfg, 3, seed=1)
    assert task.dim == cfg.model_params()
    c = task.clients[0]
    assert (c.x.element_size() * c.x[0].numel() + c.y.element_size()) == cfg.sample_bytes()


# -- the FEMNIST twin ---------------------------------------------------------------------------
def test_twin_counts_have_femnists_mean_and_spread():
    n = writer_counts(ds.FEMNIST_USERS, data_seed=0)
    assert len(n) == 3550 and n.min() >= 10
    assert abs(n.mean() - ds.FEMNIST_MEAN) < 0.03 * ds.FEMNIST_MEAN  # 226.83 (LEAF), standard error ~1.5
    assert abs(n.std() - ds.FEMNIST_STD) < 0.06 * ds.FEMNIST_STD  # 88.94
    p = class_frequencies()
    assert len(p) == 62 and p.sum() == pytest.approx(1) and p[:10].sum() == pytest.approx(0.42)


def test_twin_data_depend_on_the_data_seed_and_the_run_seed_picks_writers():
    cfg = ds.FEMNISTTwinTask(users=12)
    a, _ = twin_writers(cfg, 12, seed=0)  # every writer, in the order of seed 0's keys
    b, _ = twin_writers(cfg, 12, seed=1)
    key = lambda xy: xy[0].tobytes()  # noqa: E731
    assert sorted(map(key, a)) == sorted(map(key, b))  # the same writers' data, another order
    assert [key(c) for c in a] != [key(c) for c in b]
    c, _ = twin_writers(cfg.model_copy(update={"data_seed": 1}), 12, seed=0)
    assert sorted(map(key, c)) != sorted(map(key, a))
    x, y = a[0]
    assert x.dtype == np.float32 and x.shape[1] == 784 and 0 <= x.min() and x.max() <= 1 and y.max() < 62
    with pytest.raises(ScenarioError, match="population.clients = 13: the twin has task.users = 12 writers"):
        twin_writers(cfg, 13, seed=0)


# -- asyncfl run from a fixture folder -------------------------------------------------------------
RUNS = {
    "femnist": {"name": "femnist", "model": "mlp", "hidden": 16},
    "shakespeare": {"name": "shakespeare", "hidden": 16, "layers": 1},
    "cifar10": {"name": "cifar10", "dirichlet_alpha": 0.5},
    "cifar100": {"name": "cifar100", "split": "shards"},
    "mnist": {"name": "mnist", "hidden": 16},
    "emnist-letters": {"name": "mnist", "variant": "emnist-letters", "split": "shards", "shards_per_client": 3},
    "tff-emnist": {"name": "tff-emnist", "model": "mlp", "hidden": 16},
    "femnist-twin": {"name": "femnist-twin", "users": 20, "model": "mlp", "hidden": 16},
}


@pytest.mark.parametrize("key", list(RUNS))
def test_asyncfl_run_reads_each_data_set_from_a_fixture_folder(key, data, tmp_path, capsys):
    if key not in data and key != "femnist-twin":
        pytest.skip("the optional h5py is not installed")
    task = dict(RUNS[key], **({"path": str(data[key])} if key in data else {}))
    raw = {"name": key, "seed": 1, "population": {"clients": 4}, "task": task,
           "client": {"lr": 0.05, "local_steps": 1, "batch_size": 4},
           "server": {"protocol": "fedbuff", "concurrency": 3, "buffer": 2, "rule": "sgd", "lr": 1.0},
           "run": {"steps": 2, "eval_every": 1, "batched": True}}
    scenario = tmp_path / "s.toml"
    scenario.write_text(tomli_w.dumps(raw))
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--quiet"]) == 0, capsys.readouterr().err
    rows = (tmp_path / "out" / "metrics.csv").read_text().splitlines()
    assert len(rows) == 4  # header, steps 0, 1, 2
    accuracy = [float(r.split(",")[4]) for r in rows[1:]]
    assert all(0 <= a <= 1 for a in accuracy)


def test_asyncfl_run_refuses_a_missing_folder_with_exit_2_and_writes_nothing(tmp_path, capsys):
    raw = {"name": "x", "population": {"clients": 4}, "task": {"name": "cifar10", "path": "data/cifar"},
           "client": {"lr": 0.05, "local_steps": 1}}
    scenario = tmp_path / "s.toml"
    scenario.write_text(tomli_w.dumps(raw))
    assert main(["run", str(scenario), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"task.path = '{tmp_path / 'data' / 'cifar'}': no such folder" in err  # relative to the scenario file
    assert "cifar-10-python.tar.gz" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_a_run_on_a_folder_does_not_resume_on_changed_files(tmp_path):
    from asyncfl.config import scenario as sc
    from asyncfl.errors import AsyncFLError, RunInterrupted
    from asyncfl.run.runner import resume_dir_blocking, run_to_dir_blocking

    root = write_femnist(tmp_path / "femnist")
    scenario = sc.validate({"name": "resume", "seed": 1, "population": {"clients": 6},
                            "task": {"name": "femnist", "path": str(root), "model": "mlp", "hidden": 8},
                            "client": {"lr": 0.05, "local_steps": 1, "batch_size": 4},
                            "server": {"protocol": "fedbuff", "concurrency": 3, "buffer": 2, "rule": "sgd", "lr": 1.0},
                            "run": {"steps": 6, "eval_every": 2, "checkpoint_every": 2}})
    cut = tmp_path / "run"
    with pytest.raises(RunInterrupted):
        run_to_dir_blocking(scenario, cut, should_stop=lambda: (cut / "checkpoint.pt").exists())
    for path in (root / "train").glob("*.json"):  # one pixel of every writer's first image changes
        doc = json.loads(path.read_text())
        for user in doc["users"]:
            doc["user_data"][user]["x"][0][0] = 0.5 if doc["user_data"][user]["x"][0][0] != 0.5 else 0.25
        path.write_text(json.dumps(doc))
    before = {p.name: p.read_bytes() for p in cut.iterdir() if p.is_file()}
    with pytest.raises(AsyncFLError, match="task.name = 'femnist': its data differ from the data the run started on"):
        resume_dir_blocking(cut)
    assert {p.name: p.read_bytes() for p in cut.iterdir() if p.is_file()} == before  # nothing touched
