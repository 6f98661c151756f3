"""The f-DP trade-off of private runs: an attacker's best true positive rate against its false
positive rate (docs/privacy.md §15), for the run's releases and for its busiest client, read from
``summary.json``'s ``privacy.tradeoff.curve`` (``asyncfl plot --tradeoff``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from asyncfl.config.files import open_limited
from asyncfl.errors import RunDirError
from asyncfl.figures.style import figure, save, title

MAX_SUMMARY_BYTES = 64 << 20


def read_curve(run_dir: Path) -> dict[str, Any]:
    """``privacy.tradeoff.curve`` of ``run_dir/summary.json``; a RunDirError naming the file when
    the run is not private, or the file is not a run summary with a curve."""
    path = run_dir / "summary.json"
    with open_limited(path, MAX_SUMMARY_BYTES, RunDirError) as fh:
        try:
            summary = json.loads(fh.read().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError):
            raise RunDirError(f"{path}: not a JSON run summary") from None
    privacy = summary.get("privacy") if isinstance(summary, dict) else None
    curve = privacy.get("tradeoff", {}).get("curve") if isinstance(privacy, dict) else None
    if not isinstance(curve, dict) or not isinstance(curve.get("fpr"), list) or not isinstance(curve.get("run"), list):
        raise RunDirError(f"{path}: no f-DP trade-off (privacy.tradeoff.curve): not a private run, or an older one")
    return curve


def plot_tradeoff(run_dirs: Sequence[str | Path], path: str | Path, labels: Sequence[str] | None = None,
                  fmt: str | None = None) -> Path:
    """TPR against FPR (log-log), one solid line per run (its releases) and one dashed line per
    run for its busiest client, with the diagonal of a blind guess."""
    runs = [Path(r) for r in run_dirs]
    if labels and len(labels) != len(runs):
        raise RunDirError(f"--label given {len(labels)} time(s) for {len(runs)} run(s): give one label per run, in order")
    curves = [read_curve(r) for r in runs]
    shown = [text.replace("$", r"\$") for text in (labels or [r.name for r in runs])]
    fig = figure(5.5, 4.6)
    ax = fig.subplots()
    for curve, label in zip(curves, shown):
        (line,) = ax.plot(curve["fpr"], curve["run"], lw=1.6, label=f"{label}: the run")
        if curve.get("busiest_client"):
            ax.plot(curve["fpr"], curve["busiest_client"], lw=1.2, ls="--", color=line.get_color(),
                    label=f"{label}: busiest client (no amplification)")
    lo = min(min(c["fpr"]) for c in curves)
    ax.plot([lo, 1.0], [lo, 1.0], color="0.6", lw=0.8, ls=":", label="blind guess (TPR = FPR)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("attacker's false positive rate α")
    ax.set_ylabel("best true positive rate 1 − β(α)")
    ax.legend(fontsize="small")
    title(fig, runs[0].name if len(runs) == 1 else "", "f-DP trade-off")
    return save(fig, path, fmt)
