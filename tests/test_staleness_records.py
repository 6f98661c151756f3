"""Per-step records whose size follows what happened (docs/run-directory.md §5, docs/architecture.md §8).

* :class:`StalenessCounts` is the dense ``by_staleness`` it replaces: a brute-force recount of
  random steps (bounded and unbounded) equals its :meth:`dense`, row blocks, column sums and both
  file layouts; inconsistent entries are named.
* A run at ``max_staleness = 100000`` (200 clients, dimension-2 quadratic) keeps the entries its
  uploads produced — exactly those of the same run without a bound — and its counts equal a
  recount of ``updates.csv``; written sparse, read back, analysed (``bias.json``) as the dense
  file would be.
* ``counts.npz`` keeps the dense layout, the same npy bytes as ``np.savez_compressed``, whenever it
  fits 1 GiB; files written that way by earlier versions are read a block at a time; the reader's
  bound follows the file (what deflate can expand it to, what its npy headers say).
* Checkpoints round-trip the counts; a checkpoint holding the earlier list of dense rows is read
  into the same counts.
* The memory estimate counts the records by what a step can produce (not ``max_staleness``),
  covers what a run measures, and warns where records stay large (private runs' dense noisy
  counts).
"""

from __future__ import annotations

import csv
import io
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from asyncfl import staleness_counts
from asyncfl.cli.main import main
from asyncfl.config import memory
from asyncfl.errors import RunDirError
from asyncfl.results import load_run
from asyncfl.run import checkpoint, counts_file
from asyncfl.run.runner import run_to_dir_blocking
from asyncfl.compose import build_simulation, run_blocking
from asyncfl.staleness_counts import StalenessCounts

from conftest import make_scenario, through_file, whole_and_resumed

#: the issue's configuration at a test's length: 200 clients, dimension-2 quadratic, no real bound
HUGE = {"population.clients": 200, "task.dim": 2, "server.concurrency": 100, "server.buffer": 10,
        "server.max_staleness": 100000, "server.rule": "sgd", "run.steps": 120, "run.eval_every": 40}


def recount(steps: list[np.ndarray], columns: int) -> np.ndarray:
    """``by_staleness`` by a loop over every upload: ``[t-1, τ] += 1``, ``max(columns, τ+1)`` wide."""
    width = max([columns] + [int(tau) + 1 for taus in steps for tau in taus])
    out = np.zeros((len(steps), width), dtype=np.int64)
    for t, taus in enumerate(steps):
        for tau in taus:
            out[t, tau] += 1
    return out


def recount_updates(path: Path, shape: tuple[int, int]) -> np.ndarray:
    """``by_staleness`` from the accepted rows of ``updates.csv``, one row at a time."""
    out = np.zeros(shape, dtype=np.int64)
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            if row["accepted"] == "true":
                out[int(row["step"]) - 1, int(row["staleness"])] += 1
    return out


def npy_members(path: Path | io.BytesIO) -> dict[str, bytes]:
    with zipfile.ZipFile(path) as archive:
        return {name: archive.read(name) for name in archive.namelist()}


@pytest.mark.parametrize("columns", [1, 7])  # unbounded (grows to what is seen); max_staleness = 6
def test_the_counts_are_a_recount_of_every_step(columns):
    rng = np.random.default_rng(5)
    counts, steps = StalenessCounts(columns), []
    for t in range(1, 41):
        taus = rng.integers(0, columns if columns > 1 else 3 * t, rng.integers(0, 6))  # some steps accept nothing
        counts.add(taus)
        steps.append(taus)
    want = recount(steps, columns)
    np.testing.assert_array_equal(counts.dense(), want)
    assert counts.shape == want.shape and counts.total() == sum(len(s) for s in steps) == int(want.sum())
    assert counts.used == np.count_nonzero(want)  # one entry per non-zero count, nothing for the zeros
    np.testing.assert_array_equal(np.concatenate(list(counts.blocks(3 * 8 * want.shape[1]))), want)  # 3 rows a block
    np.testing.assert_array_equal(counts.dense(5, 9, 4), want[5:9, :4])
    hist = counts.histogram(10, 20, columns)
    np.testing.assert_array_equal(hist, want[10:20].sum(axis=0)[: len(hist)])
    assert len(hist) == max([columns] + [int(tau) + 1 for s in steps[10:20] for tau in s])
    again = StalenessCounts.from_dense(want)
    np.testing.assert_array_equal(again.used_entries, counts.used_entries)
    sparse = counts.sparse_arrays()
    back = StalenessCounts.from_entries(sparse["by_staleness_entries"], tuple(sparse["by_staleness_shape"]))
    np.testing.assert_array_equal(back.dense(), want)
    assert StalenessCounts(columns).dense().shape == (0, 1)  # before the first step, as the stacked rows were


@pytest.mark.parametrize("entries,message", [
    ([[1, 0, 2], [1, 0, 1]], "not sorted by (step, staleness) without repeats"),
    ([[2, 1, 1], [1, 0, 1]], "not sorted"),
    ([[4, 0, 1]], "names step 4, outside 1 … 3"),
    ([[0, 0, 1]], "names step 0"),
    ([[1, 5, 1]], "staleness outside 0 … 4"),
    ([[1, 0, 0]], "fewer than one upload"),
])
def test_inconsistent_entries_are_named(entries, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        StalenessCounts.from_entries(np.array(entries), (3, 5))


@pytest.mark.slow
def test_a_run_at_max_staleness_100000_records_what_its_uploads_did(tmp_path, monkeypatch):
    bounded, unbounded = make_scenario(HUGE), make_scenario({**HUGE, "server.max_staleness": None})
    a, b = run_blocking(bounded).records.by_staleness, run_blocking(unbounded).records.by_staleness
    # the same uploads, the same entries: the bound of 100000 costs nothing in memory
    np.testing.assert_array_equal(a.used_entries, b.used_entries)
    assert a.nbytes == b.nbytes <= 2 * 24 * max(64, a.total())  # ≤ 2 entries of 24 bytes (capacity) per upload
    assert a.shape == (120, 100_001) and b.shape[1] < 200  # what the dense array would be: 96 MB vs 20 kB

    monkeypatch.setattr(staleness_counts, "DENSE_LIMIT_BYTES", 1 << 20)  # 120 × 100001 × 8 bytes > 1 MiB: sparse
    run_to_dir_blocking(bounded, tmp_path / "bounded")
    run_to_dir_blocking(unbounded, tmp_path / "unbounded")
    path = tmp_path / "bounded" / "counts.npz"
    assert sorted(npy_members(path)) == ["by_staleness_entries.npy", "by_staleness_shape.npy", "step_time.npy"]
    assert path.stat().st_size < 64 << 10
    run = load_run(tmp_path / "bounded")
    assert run.staleness.shape == (120, 100_001)
    width = 200  # every staleness seen is below it (checked: the recount below would fail otherwise)
    np.testing.assert_array_equal(run.counts(width), recount_updates(tmp_path / "bounded" / "updates.csv", (120, width)))
    np.testing.assert_array_equal(run.counts(width)[:, : b.width], load_run(tmp_path / "unbounded").counts())
    np.testing.assert_array_equal(run.W(), load_run(tmp_path / "unbounded").W())
    assert run.bias == load_run(tmp_path / "unbounded").bias  # bias.json: read back from either layout, the same report


def test_the_dense_layout_is_the_file_savez_compressed_wrote(tmp_path):
    counts = StalenessCounts(100_001)  # 30 × 100001 × 8 = 24 MB: written in six blocks of at most 4 MiB
    rng = np.random.default_rng(2)
    for _ in range(30):
        counts.add(rng.integers(0, 40, 10))
    times = np.arange(30, dtype=np.float64)
    ours, theirs = tmp_path / "ours.npz", tmp_path / "theirs.npz"
    counts_file.write_npz(ours, {**counts_file.counts_members(counts), "step_time": times})
    np.savez_compressed(theirs, by_staleness=counts.dense(), step_time=times)
    assert npy_members(ours) == npy_members(theirs)  # every npy byte (only the zip's timestamps differ)
    read, arrays = counts_file.read_counts(theirs)
    np.testing.assert_array_equal(read.used_entries, counts.used_entries)
    assert read.shape == counts.shape and list(arrays) == ["step_time"]


def test_files_of_earlier_versions_are_read_a_block_at_a_time(tmp_path, monkeypatch):
    scenario = make_scenario({"run.steps": 30})
    run_to_dir_blocking(scenario, tmp_path / "run")
    dense = recount_updates(tmp_path / "run" / "updates.csv", (30, 7))  # max_staleness = 6
    np.savez_compressed(tmp_path / "old.npz", by_staleness=dense.astype(np.uint32), step_time=np.zeros(30))
    monkeypatch.setattr(counts_file, "READ_BLOCK_BYTES", 1)  # one row a block
    counts, arrays = counts_file.read_counts(tmp_path / "old.npz")
    np.testing.assert_array_equal(counts.dense(), dense)
    assert set(arrays) == {"step_time"}


def test_the_bound_read_follows_what_the_file_says_it_holds(tmp_path):
    # a member claiming more than deflate can expand its compressed bytes to: refused from the directory
    np.savez_compressed(tmp_path / "bomb.npz", by_staleness=np.zeros((3, 2), dtype=np.int64))
    data = bytearray((tmp_path / "bomb.npz").read_bytes())
    entry = data.rindex(b"PK\x01\x02")
    data[entry + 24: entry + 28] = (0xD0000000).to_bytes(4, "little")  # uncompressed size: 3.5 GB
    (tmp_path / "bomb.npz").write_bytes(bytes(data))
    with pytest.raises(RunDirError, match=r"bomb\.npz: its arrays claim \d+ bytes uncompressed from \d+ compressed, more than deflate"):
        counts_file.read_counts(tmp_path / "bomb.npz")
    # an npy header claiming 10¹⁴ counts in a member of a few bytes: refused before anything is allocated
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, {"descr": "<i8", "fortran_order": False, "shape": (10**9, 100_001)})
    with zipfile.ZipFile(tmp_path / "liar.npz", "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("by_staleness.npy", header.getvalue() + bytes(48))
    tracemalloc.start()
    with pytest.raises(RunDirError, match=r"liar\.npz: by_staleness's header says shape \(1000000000, 100001\)"):
        counts_file.read_counts(tmp_path / "liar.npz")
    assert tracemalloc.get_traced_memory()[1] < 1 << 20
    tracemalloc.stop()
    # a sparse file whose entries contradict its shape
    np.savez_compressed(tmp_path / "bad.npz", by_staleness_entries=np.array([[3, 0, 1]]), by_staleness_shape=np.array([2, 4]))
    with pytest.raises(RunDirError, match=r"bad\.npz: by_staleness_entries: an entry names step 3, outside 1 … 2"):
        counts_file.read_counts(tmp_path / "bad.npz")
    np.savez_compressed(tmp_path / "none.npz", step_time=np.zeros(2))
    with pytest.raises(RunDirError, match=r"none\.npz: has no by_staleness array"):
        counts_file.read_counts(tmp_path / "none.npz")


def test_a_resumed_sparse_run_ends_with_the_same_counts(tmp_path, monkeypatch):
    monkeypatch.setattr(staleness_counts, "DENSE_LIMIT_BYTES", 1 << 10)  # sparse from the first step
    scenario = make_scenario({**HUGE, "run.steps": 40, "run.eval_every": 10, "run.checkpoint_every": 20})
    whole, cut = whole_and_resumed(scenario, tmp_path)
    a, _ = counts_file.read_counts(whole / "counts.npz")
    b, _ = counts_file.read_counts(cut / "counts.npz")
    np.testing.assert_array_equal(a.used_entries, b.used_entries)
    assert a.shape == b.shape == (40, 100_001)
    assert "by_staleness_entries.npy" in npy_members(cut / "counts.npz")


def test_a_checkpoint_of_the_earlier_dense_rows_is_refused_naming_the_field():
    """Before issue 27 a checkpoint held one dense row of counts a step; checkpoint format 5 (issue
    33) reads no earlier format, so such a state is refused, naming the field, not upgraded."""
    scenario = make_scenario({"run.steps": 30})
    sim = build_simulation(scenario)
    run = run_blocking(scenario)  # the whole run: its state is a checkpoint at the last step
    state = run.state()
    rows = [row.copy() for row in run.by_staleness()]  # before: one dense row of max_staleness + 1 counts a step
    old = state._replace(records=type(state.records)(rows, [], [], list(state.records.step_times)))
    back = through_file(old)
    csv_rows = {"updates.csv": state.counters.rows, "metrics.csv": 1 + 30 // scenario.run.eval_every}
    ck = checkpoint.Checkpoint(None, scenario.to_toml(), back, csv_rows, {})  # type: ignore[arg-type]
    assert any(p.startswith("state.records.by_staleness: a list") for p in checkpoint.validate(ck, sim.state(), scenario, sim.protocol))
    # and inconsistent counts are named
    bad = state._replace(records=type(state.records)(StalenessCounts(7, 30, np.array([[31, 0, 1]]), 1), [], [],
                                                     list(state.records.step_times)))
    ck = checkpoint.Checkpoint(None, scenario.to_toml(), bad, csv_rows, {})  # type: ignore[arg-type]
    assert any("state.records.by_staleness: an entry names step 31, outside 1 … 30" in p
               for p in checkpoint.validate(ck, sim.state(), scenario, sim.protocol))


def _parts(scenario) -> dict[str, int]:
    return {p.what: p.bytes for p in memory.estimate(scenario).parts}


def test_the_memory_estimate_counts_what_a_step_can_record(capsys):
    full = make_scenario({**HUGE, "run.steps": 2000, "run.eval_every": 100})
    counted = _parts(full)["per-step staleness counts (non-zero entries)"]
    assert counted == _parts(make_scenario({**HUGE, "run.steps": 2000, "server.max_staleness": 10}))[
        "per-step staleness counts (non-zero entries)"] == 4 * 24 * 2000 * 10  # not max_staleness: 1.9 MB
    assert memory.COUNT_ENTRY_BYTES == staleness_counts.ENTRY_BYTES == StalenessCounts().entries.itemsize * 3
    records = sum(p.bytes for p in memory.estimate(full).parts if p.record)
    assert records < 400e6 and memory.record_warning(full, memory.estimate(full)) is None  # the bias report's 384 MB the most
    # what a run holds is within the estimate: its entries (capacity included) and step times
    short = make_scenario(HUGE)
    sim = run_blocking(short)
    assert sim.records.by_staleness.nbytes <= _parts(short)["per-step staleness counts (non-zero entries)"] / 2
    # the records that stay dense warn: a private run's noisy counts, max_staleness + 1 floats a step
    private = make_scenario({**HUGE, "run.steps": 2000, "privacy.enabled": True, "privacy.noise_multiplier": 0.5, "privacy.xi": 1.0})
    note = memory.record_warning(private, memory.estimate(private))
    assert note is not None and "per-step noisy staleness counts (privacy): 3.2 GB" in note and "server.max_staleness = 100000" in note
    assert _parts(private)["per-step noisy staleness counts (privacy)"] == 2 * 8 * 2000 * 100_001


def test_validate_prints_the_records_warning(tmp_path, capsys):
    path = tmp_path / "s.toml"
    path.write_text(make_scenario({**HUGE, "run.steps": 2000, "privacy.enabled": True,
                                   "privacy.noise_multiplier": 0.5, "privacy.xi": 1.0}).to_toml())
    code = main(["validate", str(path)])
    err = capsys.readouterr().err
    assert code == 0 and "warning: the run's per-step records need about" in err, err
