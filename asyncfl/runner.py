"""Run a scenario into a run directory (the I/O edge around :class:`~asyncfl.engine.Simulation`).

:func:`run_to_dir` is what ``asyncfl run`` calls: it writes the resolved scenario first, streams
rows while the simulation runs, and writes the arrays, the summary and the final model at the
end — also when the run diverges or is interrupted, so nothing already computed is lost.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, Callable

import numpy as np

from asyncfl import run_bias, rundir
from asyncfl.engine import Simulation, StepEvent
from asyncfl.errors import NumericalFault
from asyncfl.plots import plot_metrics
from asyncfl.scenario import Scenario


def _arrays(sim: Simulation) -> dict[str, np.ndarray]:
    arrays = {"by_staleness": sim.by_staleness(), "step_time": np.asarray(sim.records.step_times, dtype=np.float64)}
    private = sim.private_by_staleness()
    if private is not None:
        arrays["private_by_staleness"] = private
    coefficients = sim.coefficients()
    if coefficients is not None:
        arrays["coefficients"] = coefficients
    return arrays


def finalize(sim: Simulation, writer: rundir.RunWriter, status: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write counts, model and summary for whatever state the run reached."""
    writer.write_counts(_arrays(sim))
    writer.write_model({k: v.detach().clone() for k, v in sim.task.unflatten(sim.theta).items()})
    summary = {**sim.summary(), "status": status, **(extra or {})}
    writer.write_summary(summary)
    run_bias.finish_hook(sim, writer.path)
    plot_metrics([writer.path], writer.path / "metrics.png")
    return summary


async def run_to_dir(
    scenario: Scenario,
    out: str | Path,
    *,
    overwrite: bool = False,
    on_event: Callable[[StepEvent], None] | None = None,
    simulation: Simulation | None = None,
) -> dict[str, Any]:
    """Run ``scenario`` and write its run directory ``out``; returns the summary."""
    path = rundir.prepare(out, overwrite=overwrite)
    writer = rundir.RunWriter(path)
    writer.write_scenario(scenario.to_toml())
    sim = simulation if simulation is not None else Simulation(scenario, sink=writer)
    sim.sink = writer
    writer.write_summary({"name": scenario.name, "status": "running", "steps": 0})
    try:
        async for event in sim.events():
            if event.metrics is not None:
                writer.write_counts(_arrays(sim))
            if on_event is not None:
                on_event(event)
    except NumericalFault as exc:
        finalize(sim, writer, "diverged", {"error": str(exc)})
        raise
    except (KeyboardInterrupt, asyncio.CancelledError):
        finalize(sim, writer, "interrupted")
        raise
    finally:
        writer.close()
    return finalize(sim, writer, "completed")


def run_to_dir_blocking(scenario: Scenario, out: str | Path, **kwargs: Any) -> dict[str, Any]:
    return asyncio.run(run_to_dir(scenario, out, **kwargs))
