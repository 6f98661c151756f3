"""Per-step records at ``max_staleness = 100000`` (issue 27, item 1): a 2000-step FedBuff run of 200
clients on a dimension-2 quadratic (concurrency 100, buffer 10), written to a run directory as
``asyncfl run`` writes it, in a child process per measurement so each peak RSS is its own.

Printed, against the target (records < 100 MB):

* the records the run holds (the staleness counts' entries, spare capacity included, and the step
  times) and ``counts.npz`` on disk, beside what the dense ``steps × (max_staleness + 1)`` int64
  counts of asyncfl before this change took (1.6 GB);
* the run's peak RSS beside that of the same run without a staleness bound (identical uploads:
  no upload is 100000 steps stale, so the difference is what the bound costs), and the part of
  it that is ``bias.json``'s analysis of the first 2000 steps (recomputed alone);
* reading back a dense ``counts.npz`` of that size (what the earlier writer wrote and could not
  read: "its arrays take 1600032256 bytes uncompressed, more than the 1073741824 read at most"):
  its peak RSS and time (``--skip-old-file`` skips writing the 1.6 GB of zeros, ~20 s).

    python -m benchmarks.records [--steps 2000 --eval-every 100 --skip-old-file]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TARGET_BYTES = 100e6


def scenario_raw(steps: int, eval_every: int, bounded: bool) -> dict[str, Any]:
    server = {"protocol": "fedbuff", "concurrency": 100, "buffer": 10, "rule": "sgd", "lr": 0.5}
    if bounded:
        server["max_staleness"] = 100_000
    return {
        "name": "records-bench", "seed": 0,
        "population": {"clients": 200, "speed_sigma": 0.5},
        "latency": {"dist": "exponential", "mean": 1.0},
        "task": {"name": "quadratic", "problem": "random", "dim": 2, "samples_per_client": 20},
        "client": {"solver": "sgd", "lr": 0.01, "local_steps": 2, "batch_size": 10},
        "server": server,
        "run": {"steps": steps, "eval_every": eval_every},
    }


def peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def worker_run(out: Path, steps: int, eval_every: int, bounded: bool) -> dict[str, Any]:
    """Run the scenario into ``out``; the records it held and its peak RSS."""
    from asyncfl.config import scenario as sc
    from asyncfl.run.runner import run_to_dir_blocking
    from asyncfl.compose import build_simulation

    scenario = sc.validate(scenario_raw(steps, eval_every, bounded))
    baseline = peak_rss()
    sim = build_simulation(scenario)
    start = time.perf_counter()
    run_to_dir_blocking(scenario, out, simulation=sim)
    wall = time.perf_counter() - start
    counts = sim.records.by_staleness
    times = sys.getsizeof(sim.records.step_times) + 24 * len(sim.records.step_times)  # list slots and float objects
    return {"wall": wall, "baseline": baseline, "peak": peak_rss(), "entries": counts.used, "entries_bytes": counts.nbytes,
            "times_bytes": times, "shape": list(counts.shape), "file": (out / "counts.npz").stat().st_size}


def worker_old_file(out: Path, run_dir: Path) -> dict[str, Any]:
    """The run's counts written dense, as the earlier writer did, into ``out`` (streamed)."""
    from asyncfl import staleness_counts
    from asyncfl.run import counts_file

    counts, arrays = counts_file.read_counts(run_dir / "counts.npz")
    staleness_counts.DENSE_LIMIT_BYTES = 1 << 62
    start = time.perf_counter()
    counts_file.write_npz(out, {**counts_file.counts_members(counts), **arrays})
    return {"wall": time.perf_counter() - start, "file": out.stat().st_size, "shape": list(counts.shape)}


def worker_read(path: Path) -> dict[str, Any]:
    """Read a ``counts.npz`` back: peak RSS and time."""
    from asyncfl.run import counts_file

    baseline = peak_rss()
    start = time.perf_counter()
    counts, _ = counts_file.read_counts(path)
    return {"wall": time.perf_counter() - start, "baseline": baseline, "peak": peak_rss(), "entries": counts.used,
            "shape": list(counts.shape), "total": counts.total()}


def worker_bias(run_dir: Path) -> dict[str, Any]:
    """``bias.json`` of the finished run recomputed (read back, then the ``T'×T'`` analysis of its
    first 2000 steps): the share of the run's peak that is the report, not the records."""
    from asyncfl.run.bias_report import bias_of_run

    baseline = peak_rss()
    start = time.perf_counter()
    bias_of_run(run_dir)
    return {"wall": time.perf_counter() - start, "baseline": baseline, "peak": peak_rss()}


def child(*args: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-m", "benchmarks.records", "--worker", *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"worker {args[0]} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--skip-old-file", action="store_true")
    p.add_argument("--worker", nargs="+", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        kind, *rest = args.worker
        if kind == "run":
            result = worker_run(Path(rest[0]), int(rest[1]), int(rest[2]), rest[3] == "bounded")
        elif kind == "old-file":
            result = worker_old_file(Path(rest[0]), Path(rest[1]))
        elif kind == "bias":
            result = worker_bias(Path(rest[0]))
        else:
            result = worker_read(Path(rest[0]))
        print(json.dumps(result))
        return

    with tempfile.TemporaryDirectory(prefix="records-bench-") as tmp:
        root = Path(tmp)
        runs = {kind: child("run", str(root / kind), str(args.steps), str(args.eval_every), kind) for kind in ("bounded", "unbounded")}
        b, u = runs["bounded"], runs["unbounded"]
        T, L = b["shape"]
        records = b["entries_bytes"] + b["times_bytes"]
        print(f"{args.steps} steps, 200 clients, quadratic d = 2, K = 100, C = 10, max_staleness = 100000, eval_every = {args.eval_every}")
        print(f"records held: {mb(records)} (staleness counts: {b['entries']:,} entries, {mb(b['entries_bytes'])} with spare "
              f"capacity; step times {mb(b['times_bytes'])}); counts.npz {mb(b['file'])}; target < {mb(TARGET_BYTES)}: "
              f"{'met' if records + b['file'] < TARGET_BYTES else 'NOT met'}")
        print(f"before: dense by_staleness {T} × {L} int64 = {mb(8 * T * L)} in memory (and as much again stacked to write it)")
        print(f"peak RSS: {mb(b['peak'])} bounded vs {mb(u['peak'])} without a bound (same uploads): the bound costs "
              f"{mb(b['peak'] - u['peak'])}; above the interpreter and torch ({mb(b['baseline'])}): {mb(b['peak'] - b['baseline'])}")
        bias = child("bias", str(root / "bounded"))
        print(f"of which bias.json (read back + the {min(T, 2000)}² analysis, recomputed alone): {mb(bias['peak'] - bias['baseline'])} "
              f"above the interpreter, {bias['wall']:.1f} s")
        print(f"wall: {b['wall']:.1f} s bounded, {u['wall']:.1f} s without a bound (the difference: counts.npz written dense, "
              f"as before, at each evaluation while 8·T·L ≤ 1 GiB, T ≤ {(1 << 30) // (8 * L)})")
        if not args.skip_old_file:
            old = child("old-file", str(root / "old.npz"), str(root / "bounded"))
            read = child("read", str(root / "old.npz"))
            print(f"a dense counts.npz of {old['shape'][0]} × {old['shape'][1]} int64 ({mb(8 * old['shape'][0] * old['shape'][1])} "
                  f"uncompressed, {mb(old['file'])} on disk, written in {old['wall']:.1f} s): read back in {read['wall']:.1f} s, "
                  f"peak RSS {mb(read['peak'])} ({mb(read['peak'] - read['baseline'])} above the interpreter); "
                  f"{read['entries']:,} entries, {read['total']:,} uploads")


if __name__ == "__main__":
    main()
