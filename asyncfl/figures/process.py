"""``metrics.png`` of a run the CLI drives, drawn in a separate process (docs/performance.md,
"Start-up"; issue 34 item 4).

matplotlib's import and the drawing are most of a short run's start-up after torch. So
``asyncfl run`` and ``asyncfl resume`` start a figure process before they import torch: it imports
matplotlib and the figure module on the machine's other core while the parent imports torch and
simulates, then waits. As soon as the run's ``metrics.csv`` is complete the parent sends it the run
directory and the format (:meth:`FigureProcess.start`) and goes on writing the run's last files
and its bias report (which loads scipy) while the child draws; then it waits for the figure
(:meth:`FigureProcess.draw`) and returns: the figure exists when the command ends, as before,
with the same content. The protocol on the child's stdin is one line, ``FORMAT<TAB>RUN_DIR``; an empty
stdin (the run never reached its end) makes it exit without drawing.

Where a separate process would cost more than it saves it is not used: a process that has
matplotlib imported already (tests, notebooks driving the CLI) draws in place. If the child cannot
start, or fails, the figure is drawn in place, so a figure error reads as it always did.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from asyncfl.lifecycle import leave, loading
from asyncfl.figures.metrics import _percent, plot_metrics
from asyncfl.figures.style import figure, integer_ticks, styled


class FigureProcess:
    """A child process ready to draw one run's metrics figure (see the module doc)."""

    def __init__(self, start: bool = True) -> None:
        """``start``: start the child now (False: draw in place, as a process holding matplotlib
        already does)."""
        self._child: subprocess.Popen[str] | None = None
        self._sent: tuple[Path, str] | None = None  # what the child was asked to draw (start)
        if not start or "matplotlib" in sys.modules:  # already paid for here: nothing to overlap
            return
        package_root = str(Path(__file__).resolve().parents[2])  # this asyncfl, whatever the child's sys.path
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (package_root, os.environ.get("PYTHONPATH")))))
        try:
            self._child = subprocess.Popen([sys.executable, "-m", "asyncfl.figures.process"], stdin=subprocess.PIPE,
                                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
        except OSError:
            self._child = None

    def start(self, run_dir: Path, fmt: str) -> None:
        """Ask the child to draw ``run_dir/metrics.FMT`` now, without waiting for it (:meth:`draw`
        waits): the run's ``metrics.csv`` and ``scenario.toml`` must be complete. Without a child
        (or once it is gone) this does nothing and :meth:`draw` draws in place."""
        child = self._child
        if child is None or child.stdin is None or self._sent is not None:
            return
        try:
            child.stdin.write(f"{fmt}\t{run_dir.resolve()}\n")
            child.stdin.flush()
            self._sent = (run_dir, fmt)
        except (OSError, ValueError):  # the child is gone: draw() finds out and draws in place
            pass

    def draw(self, run_dir: Path, fmt: str) -> None:
        """``run_dir/metrics.FMT``, drawn by the child (in place when there is none or it fails),
        once the child has drawn what :meth:`start` asked for, or asked now."""
        sent, self._sent = self._sent, None
        child, self._child = self._child, None
        if child is not None:
            try:
                child.communicate(None if sent is not None else f"{fmt}\t{run_dir.resolve()}\n", timeout=120)
                if child.returncode == 0 and sent in (None, (run_dir, fmt)):
                    return
            except (OSError, subprocess.TimeoutExpired):
                child.kill()
                child.wait()
        _draw(run_dir, fmt)

    def close(self) -> None:
        """Let the child go without drawing, or after drawing what :meth:`start` asked for (idempotent)."""
        child, self._child, self._sent = self._child, None, None
        if child is not None:
            child.communicate(None, timeout=60)

    def __enter__(self) -> FigureProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _draw(run_dir: Path, fmt: str) -> None:
    plot_metrics([run_dir], run_dir / f"metrics.{fmt}", fmt=fmt)


def _warm_up() -> None:
    """Draw and encode a throw-away figure of the same kind (log axis, percent axis, constrained
    layout, PNG), so that the fonts, tick machinery and encoder a first figure loads are loaded
    while the run still runs: about a third of a first figure's time."""
    import io

    @styled
    def draw() -> None:
        fig = figure(10, 7.2)
        axes = fig.subplots(2, 2, squeeze=False, sharex="col")
        for row in axes:
            for ax in row:
                ax.plot([0.0, 1.0, 2.0], [1.0, 0.1, 0.01], lw=1.4, marker="o", ms=3)
                ax.set_xlabel("x")
                ax.set_ylabel("y")
        axes[0][0].set_yscale("log")
        axes[1][0].yaxis.set_major_formatter(_percent())
        integer_ticks(axes[1][0].xaxis)
        fig.suptitle("warm-up")
        fig.savefig(io.BytesIO(), format="png", dpi=20)

    draw()


def _child() -> int:
    """The child: import what drawing needs, wait for one ``FORMAT<TAB>RUN_DIR`` line, draw. Ctrl-C
    is the parent's to handle (it then sends the line of an interrupted run's figure)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with loading():  # the collector paused while matplotlib loads and warms up (asyncfl.lifecycle)
        import matplotlib.backends.backend_agg  # noqa: F401  (the import this process exists to overlap)

        _warm_up()
    line = sys.stdin.readline().rstrip("\n")
    if not line:
        return 0
    fmt, run_dir = line.split("\t", 1)
    _draw(Path(run_dir), fmt)
    return 0


if __name__ == "__main__":
    leave(_child())  # as the command it draws for: without the interpreter's teardown, which the parent would wait for
