"""The figure process of ``asyncfl run`` / ``resume`` (asyncfl/figures/process.py, docs/guide.md §7
"Start-up"): started in a process without matplotlib, it draws the run's ``metrics.png`` itself —
the same bytes as drawing in place — while the parent never imports matplotlib; let go without a
run directory, it draws nothing."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from asyncfl.figures.metrics import plot_metrics
from asyncfl.run.runner import run_to_dir_blocking
from tests.conftest import make_scenario

REPO = Path(__file__).resolve().parents[1]

DRIVER = """
import json, sys
from pathlib import Path
from asyncfl.figures.process import FigureProcess
run, fmt, draw = Path(sys.argv[1]), sys.argv[2], sys.argv[3] == "draw"
with FigureProcess() as figures:
    if draw:
        figures.draw(run, fmt)
print(json.dumps({"matplotlib_here": "matplotlib" in sys.modules}))
"""


def _drive(run: Path, fmt: str, draw: bool) -> dict:
    proc = subprocess.run([sys.executable, "-c", DRIVER, str(run), fmt, "draw" if draw else "go"], cwd=REPO,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_figure_process_draws_the_in_place_figure_and_the_parent_never_loads_matplotlib(tmp_path):
    run = tmp_path / "run"
    run_to_dir_blocking(make_scenario(), run)
    assert not (run / "metrics.png").exists()  # library runs draw no figure
    assert _drive(run, "png", draw=True) == {"matplotlib_here": False}
    drawn = (run / "metrics.png").read_bytes()
    plot_metrics([run], tmp_path / "in_place.png", fmt="png")
    assert drawn == (tmp_path / "in_place.png").read_bytes()


def test_a_figure_process_let_go_draws_nothing(tmp_path):
    run = tmp_path / "run"
    run_to_dir_blocking(make_scenario(), run)
    assert _drive(run, "svg", draw=False) == {"matplotlib_here": False}
    assert not any((run / f"metrics.{fmt}").exists() for fmt in ("png", "pdf", "svg"))
