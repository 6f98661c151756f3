"""The figure process of ``asyncfl run`` / ``resume`` (asyncfl/figures/process.py, docs/guide.md §7
"Start-up"): started in a process without matplotlib, it draws the run's ``metrics.png`` itself —
the same bytes as drawing in place — while the parent never imports matplotlib, also when the
parent asks for the figure early (``start``) and waits for it later (``draw``); let go without a
run directory, it draws nothing. The runner asks for the figure once ``metrics.csv`` is complete,
before it writes the bias report and the summary."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

from asyncfl.figures.metrics import plot_metrics
from asyncfl.run.runner import run_to_dir, run_to_dir_blocking
from tests.conftest import make_scenario

REPO = Path(__file__).resolve().parents[1]

DRIVER = """
import json, sys
from pathlib import Path
from asyncfl.figures.process import FigureProcess
run, fmt, mode = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
with FigureProcess() as figures:
    if mode == "start":  # asked early, waited for later
        figures.start(run, fmt)
    if mode in ("start", "draw"):
        figures.draw(run, fmt)
print(json.dumps({"matplotlib_here": "matplotlib" in sys.modules}))
"""


def _drive(run: Path, fmt: str, mode: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(run), fmt, mode], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_figure_process_draws_the_in_place_figure_and_the_parent_never_loads_matplotlib(tmp_path):
    run = tmp_path / "run"
    run_to_dir_blocking(make_scenario(), run)
    assert not (run / "metrics.png").exists()  # library runs draw no figure
    assert _drive(run, "png", "draw") == {"matplotlib_here": False}
    drawn = (run / "metrics.png").read_bytes()
    plot_metrics([run], tmp_path / "in_place.png", fmt="png")
    assert drawn == (tmp_path / "in_place.png").read_bytes()


def test_a_figure_process_let_go_draws_nothing(tmp_path):
    run = tmp_path / "run"
    run_to_dir_blocking(make_scenario(), run)
    assert _drive(run, "svg", "go") == {"matplotlib_here": False}
    assert not any((run / f"metrics.{fmt}").exists() for fmt in ("png", "pdf", "svg"))


def test_a_figure_asked_for_early_is_the_in_place_figure(tmp_path):
    run = tmp_path / "run"
    run_to_dir_blocking(make_scenario(), run)
    assert _drive(run, "png", "start") == {"matplotlib_here": False}
    plot_metrics([run], tmp_path / "in_place.png", fmt="png")
    assert (run / "metrics.png").read_bytes() == (tmp_path / "in_place.png").read_bytes()


def test_the_run_asks_for_its_figure_once_metrics_csv_is_complete_and_before_its_reports(tmp_path):
    run, seen = tmp_path / "run", []

    def asked() -> None:
        status = json.loads((run / "summary.json").read_text())["status"]
        seen.append(((run / "metrics.csv").read_bytes(), (run / "bias.json").exists(), status))

    summary = asyncio.run(run_to_dir(make_scenario(), run, on_metrics_written=asked))
    assert len(seen) == 1
    metrics, bias_then, status_then = seen[0]
    assert metrics == (run / "metrics.csv").read_bytes()  # not a row added after
    assert not bias_then and (run / "bias.json").is_file()  # the report is written after the ask
    assert status_then == "running" and summary["status"] == "completed"
