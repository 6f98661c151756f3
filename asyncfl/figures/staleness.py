"""Staleness of one run (issue 9 item 5; docs/run-directory.md): ``staleness.png`` with three
panels, and the numbers behind them.

* the histogram of the staleness ``τ = t − s`` of accepted updates (``updates.csv``);
* the number of clients in flight over virtual time: ``+1`` at each ``dispatch_time``, ``−1``
  at each ``arrival_time``. Dispatches still in flight when the run ended have no row; those
  numbered before the last recorded dispatch (gaps in the ``dispatch`` column) are counted from
  their successor's dispatch time (at the latest), and the curve stops at the last recorded dispatch;
* the weight matrix ``W[t, s] = (t−s+1)^(−p) C_{t,s} / C`` (docs/protocol.md) from ``counts.npz``, via
  :func:`asyncfl.server.aggregation.weight_matrix` with ``p`` and ``C`` from ``scenario.toml``.

``python -m analysis.staleness RUN_DIR`` draws it and prints a summary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from asyncfl.run.bias_report import load_run
from asyncfl.run.rundir import read_csv
from asyncfl.server.aggregation import weight_matrix


def staleness_stats(run_dir: str | Path) -> dict[str, Any]:
    """Histogram (``counts[τ]``), mean and max staleness of accepted updates, and drops."""
    rows = read_csv(Path(run_dir) / "updates.csv")
    taus = np.array([int(r["staleness"]) for r in rows if r["accepted"] == "true"], dtype=np.int64)
    reasons: dict[str, int] = {}
    for r in rows:
        if r["accepted"] != "true":
            reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
    return {
        "accepted": int(taus.size),
        "mean": float(taus.mean()) if taus.size else float("nan"),
        "median": float(np.median(taus)) if taus.size else float("nan"),
        "p95": float(np.percentile(taus, 95)) if taus.size else float("nan"),
        "max": int(taus.max()) if taus.size else 0,
        "counts": np.bincount(taus).tolist() if taus.size else [],
        "not_accepted": reasons,
    }


def in_flight(run_dir: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Step function ``(times, level)``: clients in flight just after each event time."""
    rows = read_csv(Path(run_dir) / "updates.csv")
    events = [(float(r["dispatch_time"]), 1) for r in rows] + [(float(r["arrival_time"]), -1) for r in rows]
    end = max(float(r["dispatch_time"]) for r in rows)
    if rows and "dispatch" in rows[0]:
        by_seq = {int(r["dispatch"]): float(r["dispatch_time"]) for r in rows}
        following = end
        for seq in range(max(by_seq), 0, -1):
            if seq in by_seq:
                following = by_seq[seq]
            else:  # in flight at the end: dispatched at the latest with its successor
                events.append((following, 1))
    events = sorted((e for e in events if e[0] <= end), key=lambda e: (e[0], e[1]))
    times = np.array([e[0] for e in events])
    level = np.cumsum([e[1] for e in events])
    return times, level


def run_w(run_dir: str | Path) -> np.ndarray:
    """The run's exact ``W`` from ``counts.npz`` with its ``p`` and ``C``."""
    scenario, arrays = load_run(run_dir)  # checked, read within bounds
    return weight_matrix(arrays["by_staleness"], scenario.server.staleness_exponent, scenario.server.buffer)


def plot_staleness(run_dir: str | Path, path: str | Path | None = None) -> Path:
    """Draw the three panels into ``path`` (default ``RUN_DIR/staleness.png``)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    stats = staleness_stats(run_dir)
    times, level = in_flight(run_dir)
    W = run_w(run_dir)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    ax = axes[0]
    ax.bar(np.arange(len(stats["counts"])), stats["counts"], width=0.9)
    ax.set(xlabel="staleness τ = t − s", ylabel="accepted updates",
           title=f"staleness: mean {stats['mean']:.2f}, max {stats['max']}")
    ax = axes[1]
    ax.step(times, level, where="post")
    ax.set(xlabel="virtual time", ylabel="clients in flight", title="in flight over virtual time")
    ax = axes[2]
    shown = np.ma.masked_where(W == 0, W)
    im = ax.imshow(shown, cmap="viridis", interpolation="nearest", aspect="auto")
    ax.set(xlabel="model version s", ylabel="server step t", title="W[t, s]")
    fig.colorbar(im, ax=ax)
    fig.suptitle(run_dir.name)
    fig.tight_layout()
    out = Path(path) if path is not None else run_dir / "staleness.png"
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
