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

import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from asyncfl.components import allow
from asyncfl.components.core import KINDS
from asyncfl.config.files import MAX_SCENARIO_BYTES, read_text_limited
from asyncfl.errors import RunDirError
from asyncfl.components.registry import REGISTRY, UnknownComponent
from asyncfl.figures.style import TIME_LABEL, colorbar, figure, integer_ticks, save, styled, title
from asyncfl.run.bias_report import leading_counts, read_run_counts
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
    scenario, counts, _ = read_run_counts(run_dir)  # checked, read within bounds
    return weight_matrix(leading_counts(counts, counts.steps), scenario.server.staleness_exponent, scenario.server.buffer)


def in_flight_bands(times: np.ndarray, level: np.ndarray, bins: int = 120) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The step function ``(times, level)`` summarised on ``bins`` equal bins of virtual time:
    ``(centres, time-weighted mean, min, max)`` of the level in each bin. A FedBuff run's level
    flips between K − 1 and K at every arrival, which drawn raw over thousands of events is a
    solid band; the bins show its level and its range legibly."""
    if len(times) == 0:
        empty = np.zeros(0)
        return empty, empty, empty, empty
    start, end = float(times[0]), float(times[-1])
    if end <= start:
        return np.array([start]), np.array([float(level[-1])]), np.array([float(level.min())]), np.array([float(level.max())])
    edges = np.linspace(start, end, bins + 1)
    # the level holds from times[i] to times[i+1]; cut every piece at the bin edges
    cuts = np.union1d(times, edges)
    held = level[np.clip(np.searchsorted(times, cuts[:-1], side="right") - 1, 0, len(level) - 1)]
    width = np.diff(cuts)
    which = np.clip(np.searchsorted(edges, cuts[:-1], side="right") - 1, 0, bins - 1)
    total = np.bincount(which, weights=width, minlength=bins)
    mean = np.bincount(which, weights=width * held, minlength=bins) / np.where(total > 0, total, 1)
    lo = np.full(bins, np.inf)
    hi = np.full(bins, -np.inf)
    np.minimum.at(lo, which, held)
    np.maximum.at(hi, which, held)
    return 0.5 * (edges[:-1] + edges[1:]), mean, lo, hi


@styled
def plot_staleness(run_dir: str | Path, path: str | Path | None = None, fmt: str | None = None) -> Path:
    """Draw the three panels into ``path`` (default ``RUN_DIR/staleness.png``; ``fmt`` png, pdf
    or svg), titled with the scenario's name (docs/run-directory.md §11)."""
    run_dir = Path(run_dir)
    try:  # a regular file, bounded: a FIFO in its place is refused, never waited on
        raw = tomllib.loads(read_text_limited(run_dir / "scenario.toml", MAX_SCENARIO_BYTES, RunDirError))
    except (tomllib.TOMLDecodeError, RecursionError) as exc:
        raise RunDirError(f"{run_dir / 'scenario.toml'}: not valid TOML ({exc.__class__.__name__})") from None
    server = raw.get("server", {})
    stats = staleness_stats(run_dir)
    times, level = in_flight(run_dir)
    W = run_w(run_dir)
    fig = figure(15, 4.4)
    axes = fig.subplots(1, 3, width_ratios=[1, 1.25, 1.1])
    ax = axes[0]
    ax.bar(np.arange(len(stats["counts"])), stats["counts"], width=0.85, color="tab:blue")
    ax.set(xlabel="staleness τ = t − s [server steps]", ylabel="accepted updates",
           title=f"staleness: mean {stats['mean']:.2f}, median {stats['median']:g}, max {stats['max']}")
    integer_ticks(ax.xaxis)
    integer_ticks(ax.yaxis)
    ax = axes[1]
    centres, mean, lo, hi = in_flight_bands(times, level)
    ax.fill_between(centres, lo, hi, step="mid", color="tab:blue", alpha=0.25, lw=0, label="range within a time bin")
    ax.plot(centres, mean, color="tab:blue", lw=1.4, label="time-weighted mean")
    key = in_flight_key(server)
    cap = server.get(key) if key else None
    if cap:
        ax.axhline(cap, color="k", ls="--", lw=0.9, label=f"server.{key} = {cap}")
    top = max(float(hi.max()) if len(hi) else 0.0, float(cap or 0))
    ax.set_ylim(0, top * 1.15 + 1)
    ax.set(xlabel=TIME_LABEL, ylabel="clients in flight", title="clients in flight over virtual time")
    integer_ticks(ax.yaxis)
    ax.legend(loc="lower right")
    ax = axes[2]
    shown = np.ma.masked_where(W == 0, W)
    T = W.shape[0]
    im = ax.imshow(shown, cmap="viridis", interpolation="nearest", aspect="auto", origin="upper",
                   extent=(0.5, T + 0.5, T + 0.5, 0.5))
    ax.set(xlabel="model version s", ylabel="server step t", title="weight matrix W (zeros blank)")
    ax.grid(False)
    integer_ticks(ax.xaxis)
    integer_ticks(ax.yaxis)
    colorbar(fig, im, ax, "W[t, s]: weight of version s in step t")
    title(fig, str(raw.get("name") or run_dir.name), "staleness")
    return save(fig, Path(path) if path is not None else run_dir / "staleness.png", fmt)


def in_flight_key(server: dict[str, Any]) -> str | None:
    """The ``[server]`` key of a run's protocol that counts its clients in flight (its
    ``in_flight_key`` trait: FedBuff's ``concurrency``, sync's ``cohort``); None for a protocol
    that is not registered now."""
    try:
        with allow.reading():  # a run directory names it: never imported
            protocol = REGISTRY.find("protocol", server.get("protocol", KINDS["protocol"].default))
    except UnknownComponent:
        return None
    return protocol.traits.in_flight_key if protocol is not None else None
