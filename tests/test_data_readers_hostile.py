"""The data readers on files as their publishers write them and on hostile files (issue 32 items
3 and 6, docs/tasks.md §13–17).

Publishers' quirks: LEAF Shakespeare's test ``num_samples = len(x) + 79`` (LEAF's split_data.py),
LEAF's by-writer split (``-t user``), MNIST's dotted file names, CIFAR batches re-pickled at
other protocols. Hostile files: each is refused through ``asyncfl run`` with exit 2, one message
naming the file, no traceback and nothing written or changed (the command's ``main`` in this
process; a LEAF entry that is a FIFO through ``python -m asyncfl run`` in a fresh interpreter, which
a timeout can stop if the reader ever opened it), or through the public API with the memory it
takes measured by tracemalloc (small crafted files that would inflate or allocate far more than
the bound if the check were missing)."""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import math
import os
import pickle
import shutil
import struct
import subprocess
import sys
import tracemalloc
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest
import tomli_w

from asyncfl.cli.main import main
from asyncfl.config import datasets as ds
from asyncfl.datasets.cifar import read_cifar_batch
from asyncfl.datasets.files import MAX_GZIP_RATIO, MIN_GZIP_BUDGET, read_file
from asyncfl.datasets.idx import read_idx, read_idx_images
from asyncfl.datasets.leaf import LEAF_CHARACTERS, femnist_arrays, read_leaf, shakespeare_arrays
from asyncfl.datasets.users import user_key
from asyncfl.errors import ScenarioError
from asyncfl.tasks import build_task
from fixtures.make_dataset_fixtures import (LEAF_DROPPED_WINDOWS, idx_bytes, write_cifar10, write_femnist,
                                            write_femnist_by_writer, write_mnist, write_shakespeare)

REPO = Path(__file__).resolve().parents[1]


# -- helpers -----------------------------------------------------------------------------------
def _tree_digest(root: Path) -> dict[str, str]:
    out = {}
    for p in sorted(root.rglob("*")):
        if p.is_file() and not p.is_symlink():
            out[str(p.relative_to(root))] = hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[str(p.relative_to(root))] = "link" if p.is_symlink() else "other"
    return out


def _run_args(tmp_path: Path, task: dict[str, Any], clients: int = 4) -> list[str]:
    """The arguments of ``asyncfl run`` on a two-step scenario of ``task`` written to ``tmp_path``."""
    raw = {"name": "probe", "seed": 1, "population": {"clients": clients}, "task": task,
           "client": {"lr": 0.05, "local_steps": 1, "batch_size": 4},
           "server": {"protocol": "fedbuff", "concurrency": min(2, clients), "buffer": min(2, clients), "rule": "sgd",
                      "lr": 1.0},
           "run": {"steps": 2, "eval_every": 1}}
    scenario = tmp_path / "s.toml"
    scenario.write_text(tomli_w.dumps(raw))
    return ["run", str(scenario), "--out", str(tmp_path / "out"), "--quiet"]


def _run_cli(tmp_path: Path, task: dict[str, Any], clients: int = 4) -> subprocess.CompletedProcess:
    """``python -m asyncfl run`` on ``task`` (:func:`_run_args`) in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "asyncfl", *_run_args(tmp_path, task, clients)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)


def _refused(tmp_path: Path, task: dict[str, Any], data: Path, *needles: str, clients: int = 4,
             capsys: pytest.CaptureFixture | None = None) -> str:
    """Run ``asyncfl run`` on ``task`` — its ``main`` in this process when given ``capsys``, else
    :func:`_run_cli`; assert exit 2, the needles in the one-line message, no traceback, no output
    folder and the data folder unchanged. Returns stderr."""
    before = _tree_digest(data)
    if capsys is None:
        proc = _run_cli(tmp_path, task, clients)
        code, err = proc.returncode, proc.stderr
    else:
        capsys.readouterr()
        code = main(_run_args(tmp_path, task, clients))
        err = capsys.readouterr().err
    assert code == 2, (code, err[-2000:])
    assert "Traceback" not in err
    for needle in needles:
        assert needle in err, (needle, err)
    assert not (tmp_path / "out").exists()
    assert _tree_digest(data) == before
    return err


def _peak(fn: Callable[[], Any]) -> tuple[Any, int]:
    """``(what fn raised or returned, the peak bytes traced while it ran)``."""
    tracemalloc.start()
    try:
        try:
            out: Any = fn()
        except ScenarioError as exc:
            out = exc
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _leaf_by_hand(folder: Path) -> dict[str, tuple[int, list, list]]:
    out = {}
    for f in sorted(folder.glob("*.json")):
        doc = json.loads(f.read_text())
        for u, n in zip(doc["users"], doc["num_samples"]):
            out[u] = (n, doc["user_data"][u]["x"], doc["user_data"][u]["y"])
    return out


# -- LEAF Shakespeare as LEAF writes it ----------------------------------------------------------
def test_the_shakespeare_fixture_has_leafs_count_quirk(tmp_path):
    root = write_shakespeare(tmp_path / "sh")
    train, test = _leaf_by_hand(root / "train"), _leaf_by_hand(root / "test")
    assert set(train) == set(test) and len(train) == 5  # the sixth speaker had no test window: dropped from both
    for user, (n_test, x, y) in test.items():
        n_train = train[user][0]
        assert n_test == len(x) + LEAF_DROPPED_WINDOWS == len(y) + 79
        assert n_train == len(train[user][1]) == int(0.8 * (n_train + n_test))  # LEAF's max(1, int(frac·n))
        # the first test window starts 79 positions after the last training window (split_data.py's range)
        text_end = train[user][1][-1] + train[user][2][-1]  # the last training window and its target
        assert x[0][:1] == text_end[-1:]  # window n_train+79 starts at the last training target


def test_shakespeare_as_leaf_writes_it_loads_with_one_note(tmp_path, caplog):
    root = write_shakespeare(tmp_path / "sh")
    test = _leaf_by_hand(root / "test")
    with caplog.at_level(logging.WARNING, logger="asyncfl.datasets"):
        clients, (tx, ty) = read_leaf(root, shakespeare_arrays, 5, seed=3)
    notes = [r.getMessage() for r in caplog.records if "num_samples" in r.getMessage()]
    assert len(notes) == 1  # once, not per user
    assert notes[0].startswith("note: 5 users in 1 LEAF file have num_samples") and "+79" in notes[0]
    assert "split_data.py" in notes[0] and "the samples listed are used" in notes[0]
    order = [u for u, _ in clients]  # the test set: the listed windows of the chosen users, in client order
    assert ty.tolist() == [LEAF_CHARACTERS.index(c) for u in order for c in test[u][2]]
    assert tx.shape == (sum(len(test[u][1]) for u in order), 80)


def test_another_miscount_is_a_note_naming_a_user(tmp_path, caplog):
    root = write_femnist(tmp_path / "f")
    path = next((root / "train").glob("*.json"))
    doc = json.loads(path.read_text())
    doc["num_samples"][0] += 3
    path.write_text(json.dumps(doc))
    with caplog.at_level(logging.WARNING, logger="asyncfl.datasets"):
        clients, _ = read_leaf(root, femnist_arrays, 6, seed=0)
    first = doc["users"][0]
    assert dict(clients)[first][1].tolist() == doc["user_data"][first]["y"]
    notes = [r.getMessage() for r in caplog.records if "num_samples" in r.getMessage()]
    assert notes == [f"note: 1 user in 1 LEAF file has num_samples different from the samples listed (e.g. "
                     f"{path.name}: user {first!r} says {doc['num_samples'][0]} and lists {doc['num_samples'][0] - 3}); "
                     "the samples listed are used"]


@pytest.mark.slow
def test_asyncfl_run_reads_leafs_shakespeare_and_notes_the_quirk_once(tmp_path):
    root = write_shakespeare(tmp_path / "sh")
    proc = _run_cli(tmp_path, {"name": "shakespeare", "path": str(root), "hidden": 8, "layers": 1})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stderr.count("num_samples different") == 1 and "Traceback" not in proc.stderr
    assert len((tmp_path / "out" / "metrics.csv").read_text().splitlines()) == 4


# -- LEAF's by-writer split --------------------------------------------------------------------------
def test_by_writer_split_tests_on_the_held_out_writers_pooled(tmp_path, caplog):
    root = write_femnist_by_writer(tmp_path / "fw")
    train, test = _leaf_by_hand(root / "train"), _leaf_by_hand(root / "test")
    assert not set(train) & set(test)  # LEAF's -t user: whole writers held out
    with caplog.at_level(logging.WARNING, logger="asyncfl.datasets"):
        clients, (tx, ty) = read_leaf(root, femnist_arrays, 4, seed=2)
    assert {u for u, _ in clients} <= set(train)
    # every held-out writer's samples, in file order (one test file here)
    assert ty.tolist() == [v for u in test for v in test[u][2]]
    np.testing.assert_array_equal(tx, np.array([p for u in test for p in test[u][1]], dtype=np.float32))
    notes = [r.getMessage() for r in caplog.records if "by-writer" in r.getMessage()]
    assert len(notes) == 1 and f"the 3 held-out writers' {len(ty)} samples pooled" in notes[0]


@pytest.mark.slow
def test_asyncfl_run_reads_a_by_writer_split(tmp_path):
    root = write_femnist_by_writer(tmp_path / "fw")
    proc = _run_cli(tmp_path, {"name": "femnist", "path": str(root), "model": "mlp", "hidden": 8})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "LEAF's by-writer split (-t user)" in proc.stderr


def test_mixed_splits_without_a_test_sample_name_the_cause_and_t_sample(tmp_path, capsys):
    root = tmp_path / "mixed"
    users = ["wa", "wb", "wc"]
    chosen = min(users, key=lambda u: user_key(1, u))  # seed 1 picks this writer first
    others = [u for u in users if u != chosen]
    sample = ([[0.5] * 784], [3])
    for part, names in (("train", users), ("test", others)):  # the chosen writer has no test sample
        (root / part).mkdir(parents=True)
        (root / part / "d.json").write_text(json.dumps({"users": names, "num_samples": [1] * len(names),
                                                        "user_data": {u: {"x": sample[0], "y": sample[1]} for u in names}}))
    _refused(tmp_path, {"name": "femnist", "path": str(root), "model": "mlp", "hidden": 4}, root,
             "none of the 1 chosen users has a test sample", "-t sample", clients=1, capsys=capsys)


# -- MNIST's two spellings ----------------------------------------------------------------------------
def test_mnist_reads_the_dotted_names_raw_or_gzipped(tmp_path):
    dashed = write_mnist(tmp_path / "dashed")
    dotted = tmp_path / "dotted"
    dotted.mkdir()
    for i, path in enumerate(sorted(dashed.iterdir())):  # two gzipped, two unzipped, under the dotted names
        name = path.name.replace("-idx", ".idx")
        if i % 2:
            (dotted / name[:-3]).write_bytes(gzip.decompress(path.read_bytes()))
        else:
            shutil.copy(path, dotted / name)
    assert sorted(p.name for p in dotted.iterdir()) == ["t10k-images.idx3-ubyte.gz", "t10k-labels.idx1-ubyte",
                                                        "train-images.idx3-ubyte.gz", "train-labels.idx1-ubyte"]
    a = build_task(ds.MNISTTask(path=str(dashed), hidden=4), 3, seed=0)
    b = build_task(ds.MNISTTask(path=str(dotted), hidden=4), 3, seed=0)
    for ca, cb in zip(a.clients + [a.test], b.clients + [b.test]):
        assert ca.x.equal(cb.x) and ca.y.equal(cb.y)


def test_a_missing_mnist_file_lists_both_spellings(tmp_path, capsys):
    root = write_mnist(tmp_path / "m")
    (root / "train-labels-idx1-ubyte.gz").unlink()
    _refused(tmp_path, {"name": "mnist", "path": str(root), "hidden": 4}, root,
             "train-labels-idx1-ubyte or train-labels-idx1-ubyte.gz or train-labels.idx1-ubyte or "
             "train-labels.idx1-ubyte.gz", capsys=capsys)


# -- compressed files: bounded inflation --------------------------------------------------------------
def test_a_gzip_bomb_is_refused_while_inflating_within_its_budget(tmp_path):
    path = tmp_path / "bomb.json"
    path.write_bytes(gzip.compress(b'{"users": [' + b" " * (200 << 20), 9))  # 200 MiB of spaces, ~0.2 MB zipped
    budget = max(MAX_GZIP_RATIO * path.stat().st_size, MIN_GZIP_BUDGET)
    assert budget < 30 << 20
    err, peak = _peak(lambda: read_file(path))
    assert isinstance(err, ScenarioError) and "unzips to more than" in str(err) and "gunzip -k 'bomb.json'" in str(err)
    assert peak < 2 * budget + (4 << 20), peak  # the bomb would hold 200 MiB
    genuine = tmp_path / "ok.gz"
    content = np.random.default_rng(0).integers(0, 9, 300_000).astype(np.uint8).tobytes()
    genuine.write_bytes(gzip.compress(content))
    assert read_file(genuine) == content  # a real compression ratio passes
    two = tmp_path / "two.gz"
    two.write_bytes(gzip.compress(b"abc") + gzip.compress(b"def"))
    assert read_file(two) == b"abcdef"  # a multi-member gzip file, as gzip(1) concatenates them


def test_a_gzipped_leaf_bomb_through_the_cli(tmp_path, capsys):
    root = write_femnist(tmp_path / "f")
    path = next((root / "train").glob("*.json"))
    path.with_suffix(".json").write_bytes(gzip.compress(b"[" + b"0," * (30 << 20) + b"0]", 9))
    _refused(tmp_path, {"name": "femnist", "path": str(root), "model": "mlp", "hidden": 4}, root,
             path.name, "unzips to more than", "the most asyncfl inflates", capsys=capsys)


def test_an_idx_header_claiming_more_than_the_budget_is_refused_before_inflating(tmp_path):
    path = tmp_path / "train-images-idx3-ubyte.gz"
    header = struct.pack(">BBBBIII", 0, 0, 8, 3, 5_000_000, 28, 28)  # 3.9 GB claimed
    path.write_bytes(gzip.compress(header + bytes(1 << 20)))
    err, peak = _peak(lambda: read_idx(path))
    assert isinstance(err, ScenarioError) and "needs 3920000000 bytes but the file unzips to at most" in str(err)
    assert peak < 1 << 20  # refused from the header: nothing of the body inflated
    bomb = tmp_path / "b.gz"  # a header that tells the truth, over a body of zeros that unzips 1000×
    bomb.write_bytes(gzip.compress(struct.pack(">BBBBIII", 0, 0, 8, 3, 60_000, 28, 28) + bytes(60_000 * 784), 9))
    err, peak = _peak(lambda: read_idx(bomb))
    assert isinstance(err, ScenarioError) and "the most asyncfl inflates" in str(err)
    assert peak < 1 << 20


def test_idx_dimensions_whose_product_wraps_to_zero_are_refused(tmp_path, capsys):
    root = write_mnist(tmp_path / "m")
    dims = (1 << 16, 1 << 16, 1 << 16, 1 << 16)  # Π = 2⁶⁴: int64 arithmetic wraps it to 0
    assert int(np.prod(np.array(dims, dtype=np.int64))) == 0
    (root / "train-images-idx3-ubyte.gz").unlink()
    (root / "train-images-idx3-ubyte").write_bytes(struct.pack(">BBBB4I", 0, 0, 8, 4, *dims))
    _refused(tmp_path, {"name": "mnist", "path": str(root), "hidden": 4}, root, "train-images-idx3-ubyte: IDX header "
             f"says 65536×65536×65536×65536 uint8 elements ({math.prod(dims)} bytes) but the file holds 0 bytes",
             capsys=capsys)


def test_an_empty_idx_set_is_refused(tmp_path):
    path = tmp_path / "x"
    path.write_bytes(idx_bytes(np.zeros((0, 28, 28), np.uint8)))
    with pytest.raises(ScenarioError, match="x: holds no images"):
        read_idx_images(path)


# -- CIFAR pickles ---------------------------------------------------------------------------------------
class _Claim:
    """Pickles as ``numpy.ndarray((500000, 3072), 'u1')``: 1.5 GB claimed by ~100 bytes."""

    def __reduce__(self):
        return (np.ndarray, ((500_000, 3072), "u1"))


def _pending_claim() -> bytes:
    """A pickle of numpy's own form (``_reconstruct`` then ``__setstate__``) whose state claims
    500 000 images over 3 072 bytes."""
    real = pickle.dumps({b"data": np.zeros((1, 3072), np.uint8), b"labels": [0]}, protocol=2)
    return real.replace(b"K\x01M\x00\x0c\x86", b"J\x20\xa1\x07\x00M\x00\x0c\x86")  # shape (1, 3072) → (500000, 3072)


@pytest.mark.parametrize("content", [pickle.dumps({b"data": _Claim(), b"labels": [0]}, protocol=2), _pending_claim()],
                         ids=["ndarray-called", "state-claims-more"])
def test_a_cifar_batch_claiming_more_images_than_it_holds_allocates_nothing(content, tmp_path):
    path = tmp_path / "data_batch_1"
    path.write_bytes(content)
    assert len(content) < 4000
    err, peak = _peak(lambda: read_cifar_batch(path, "labels", 10))
    assert isinstance(err, ScenarioError), err
    assert "numpy.ndarray is called directly" in str(err) or "claims shape (500000, 3072)" in str(err)
    assert peak < 1 << 20


def test_a_cifar_claim_through_the_cli(tmp_path, capsys):
    root = write_cifar10(tmp_path / "c")
    (root / "data_batch_2").write_bytes(pickle.dumps({b"data": _Claim(), b"labels": [0]}, protocol=2))
    _refused(tmp_path, {"name": "cifar10", "path": str(root)}, root, "data_batch_2: not a CIFAR pickle", capsys=capsys)


@pytest.mark.parametrize("labels", [[1.0, 2.0], np.array([1.0, 2.0]), [1, 2.5], [True, 1]])
def test_float_or_bool_cifar_labels_are_refused_not_truncated(labels, tmp_path):
    path = tmp_path / "data_batch_1"
    path.write_bytes(pickle.dumps({b"data": np.zeros((2, 3072), np.uint8), b"labels": labels}))
    with pytest.raises(ScenarioError, match=r"data_batch_1: b'labels' must (hold integers|be a vector of integers)"):
        read_cifar_batch(path, "labels", 10)


@pytest.mark.parametrize("protocol", [0, 1, 2, 4, 5])
def test_cifar_batches_re_pickled_at_any_protocol_read_the_same(protocol, tmp_path):
    root = write_cifar10(tmp_path / "c")
    for name in ("data_batch_1", "test_batch"):
        with open(root / name, "rb") as fh:
            batch = pickle.load(fh, encoding="bytes")
        if name == "test_batch":  # numpy labels and a Fortran-ordered array, as other tools write them
            batch[b"labels"] = np.array(batch[b"labels"], dtype=np.int64)
            batch[b"data"] = np.asfortranarray(batch[b"data"])
        repickled = tmp_path / f"{name}.p{protocol}"
        repickled.write_bytes(pickle.dumps(batch, protocol=protocol))
        x, y = read_cifar_batch(repickled, "labels", 10)
        np.testing.assert_array_equal(x, batch[b"data"])
        assert y.tolist() == list(batch[b"labels"])


@pytest.mark.slow
def test_asyncfl_run_reads_cifar_re_pickled_at_protocol_1(tmp_path):
    root = write_cifar10(tmp_path / "c")
    for path in root.iterdir():
        with open(path, "rb") as fh:
            batch = pickle.load(fh, encoding="bytes")
        path.write_bytes(pickle.dumps(batch, protocol=1))
    proc = _run_cli(tmp_path, {"name": "cifar10", "path": str(root)})
    assert proc.returncode == 0, proc.stderr[-2000:]


@pytest.mark.slow
def test_a_constant_colour_channel_is_centred_and_named_not_a_numerical_fault(tmp_path):
    root = write_cifar10(tmp_path / "c")
    for name in [f"data_batch_{i}" for i in range(1, 6)]:
        with open(root / name, "rb") as fh:
            batch = pickle.load(fh, encoding="bytes")
        batch[b"data"][:, 1024:2048] = 77  # the green channel, every pixel of every training image
        (root / name).write_bytes(pickle.dumps(batch, protocol=3))
    proc = _run_cli(tmp_path, {"name": "cifar10", "path": str(root)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "the green (every pixel 77) channel is constant over all 100 training images" in proc.stderr
    task = build_task(ds.CIFAR10Task(path=str(root)), 2, seed=0)
    x = np.concatenate([c.x.numpy() for c in task.clients])
    assert np.isfinite(x).all() and np.isfinite(task.test.x.numpy()).all()
    assert (x[:, 1024:2048] == 0).all()  # centred: 77/255 − 77/255, divided by 1
    red = x[:, :1024]
    assert abs(float(red.mean())) < 1e-5 and abs(float(red.std()) - 1) < 1e-4  # the other channels as before


# -- LEAF files -------------------------------------------------------------------------------------------
def test_a_huge_leaf_label_is_refused(tmp_path, capsys):
    root = write_femnist(tmp_path / "f")
    path = next((root / "train").glob("*.json"))
    text = path.read_text()
    doc = json.loads(text)
    doc["user_data"][doc["users"][0]]["y"][0] = -10**25
    path.write_text(json.dumps(doc))
    _refused(tmp_path, {"name": "femnist", "path": str(root), "model": "mlp", "hidden": 4}, root,
             path.name, "labels must be integers in [0, 61]", clients=6, capsys=capsys)


def test_a_pixel_beyond_float_range_is_refused(tmp_path):
    with pytest.raises(ScenarioError, match="'x' must be lists of 784 numbers"):
        femnist_arrays([[10**400] * 784], [1], Path("f.json"), "u")


@pytest.mark.parametrize("kind", ["fifo", *(pytest.param(k, marks=pytest.mark.slow) for k in ("devnull", "folder", "broken-link"))])
def test_a_leaf_entry_that_is_not_a_regular_file_is_refused_naming_it(kind, tmp_path):
    root = write_femnist(tmp_path / "f")
    odd = root / "train" / "zz_extra.json"
    if kind == "fifo":
        os.mkfifo(odd)
    elif kind == "devnull":
        odd.symlink_to("/dev/null")
    elif kind == "folder":
        odd.mkdir()
    else:
        odd.symlink_to(root / "nowhere")
    _refused(tmp_path, {"name": "femnist", "path": str(root), "model": "mlp", "hidden": 4}, root,
             "zz_extra.json: not a regular file")


# -- HDF5 ----------------------------------------------------------------------------------------------------
def test_an_hdf5_dataset_declaring_more_than_it_stores_is_refused_unread(tmp_path):
    h5py = pytest.importorskip("h5py")
    from asyncfl.datasets.hdf5 import read_h5_users

    path = tmp_path / "fed_emnist_train.h5"
    with h5py.File(path, "w") as fh:  # never written: HDF5 would read 31 GB of fill values
        g = fh.create_group("examples/w0")
        g.create_dataset("pixels", shape=(10**7, 28, 28), dtype="f4")
        g.create_dataset("label", shape=(10**7,), dtype="i4")
    assert path.stat().st_size < 100_000
    keys = {"pixels": ((28, 28), "f"), "label": ((), "iu")}
    err, peak = _peak(lambda: read_h5_users(path, "examples", keys, 1, 0))
    assert isinstance(err, ScenarioError) and "declares 31360000000 bytes but occupies 0" in str(err)
    assert peak < 1 << 20
