"""Run a scenario into a run directory (the I/O edge around :class:`~asyncfl.sim.engine.Simulation`).

:func:`run_to_dir` is what ``asyncfl run`` calls: it writes the resolved scenario first, streams
rows while the simulation runs, and writes the arrays, the summary and the final model at the
end — also when the run diverges or is interrupted, so nothing already computed is lost.

Checkpoints (``asyncfl.run.checkpoint``): every ``[run] checkpoint_every`` steps, and a final one when
the run is stopped between events (``should_stop``: SIGINT in the CLI) or diverges.
:func:`resume_dir` (``asyncfl resume RUN_DIR``) checks the directory, cuts the CSV files back to
the rows the checkpoint saw and continues; the finished directory equals an uninterrupted run's
(``metrics.csv`` apart from ``wall_time``). A directory without a checkpoint restarts from
scratch in place (``scenario.toml`` is kept, the outputs are rewritten).
"""

from __future__ import annotations

import asyncio
import importlib
import reprlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

from asyncfl.compose import build_simulation
from asyncfl.config import scenario as scenario_mod
from asyncfl.config.scenario import Scenario
from asyncfl.config.stop import FINISHED_STATUSES
from asyncfl.errors import CheckpointError, NumericalFault, RunDirError, RunInterrupted, ScenarioError, SimulationStalled
from asyncfl.records import METRIC_FIELDS, UPDATE_FIELDS, StepEvent
from asyncfl.privacy import per_client
from asyncfl.run import checkpoint, counts_file, provenance, rundir, stops, tracking
from asyncfl.run.checkpoint import CHECKPOINT_NAME
from asyncfl.sim.engine import Simulation

#: the bias report's runner hook (``bias.json``), imported when a run first finishes: it loads
#: scipy (about 0.4 s), which a run's start need not wait for and which the CLI's figure process
#: overlaps with drawing ``metrics.png`` (docs/performance.md, "Start-up")
BIAS_REPORT_HOOK = "asyncfl.run.bias_report:finish_hook"


class AlreadyCompleted(RunDirError):
    """``asyncfl resume`` on a completed run: nothing to do (the CLI exits 0)."""


def _arrays(sim: Simulation) -> dict[str, np.ndarray | counts_file.RowStream]:
    """The arrays of ``counts.npz`` besides the staleness counts (docs/run-directory.md §5); the
    per-step rows are streamed into the file, never stacked in memory."""
    records = sim.records
    arrays: dict[str, np.ndarray | counts_file.RowStream] = {"step_time": np.asarray(records.step_times, dtype=np.float64)}
    if records.private_by_staleness:
        arrays["private_by_staleness"] = counts_file.padded_rows(records.private_by_staleness, np.float64)
    if records.coefficients:
        arrays["coefficients"] = counts_file.padded_rows(records.coefficients, np.float64)
    return arrays


def write_counts(sim: Simulation, writer: rundir.RunWriter) -> None:
    """``counts.npz`` of the run so far."""
    writer.write_counts(sim.records.by_staleness, _arrays(sim))


def metric_fields(sim: Simulation) -> tuple[str, ...]:
    """The columns of ``metrics.csv``: :data:`METRIC_FIELDS` and the task's own metrics."""
    return (*METRIC_FIELDS, *(m for m in sim.task.metric_names if m not in METRIC_FIELDS))


def finalize(sim: Simulation, writer: rundir.RunWriter, status: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """Write counts, model, bias and summary for whatever state the run reached. The summary
    comes last: a ``summary.json`` with a final status means every other file is written (a run
    killed before it is resumed, not read back)."""
    write_counts(sim, writer)
    if sim.privacy_setup is not None:
        writer.write_privacy(sim.privacy_curve())
        setup, spent = sim.privacy_setup, sim.participation.spent  # type: ignore[union-attr]
        writer.write_privacy_clients(per_client.client_rows(spent, setup.sigma, setup.delta, setup.accountant,
                                                            release=setup.client_release))
    writer.write_model({k: v.detach().cpu().clone() for k, v in sim.task.unflatten(sim.theta).items()})  # from the CPU, any device
    _load(BIAS_REPORT_HOOK)(sim, writer.path)
    summary = {**sim.summary(), "status": status, **(extra or {})}
    writer.write_summary(summary)
    return summary


def _load(target: str) -> Any:
    """The attribute ``target`` (``"package.module:attribute"``) names, its module imported on first use."""
    module, _, attribute = target.partition(":")
    return getattr(importlib.import_module(module), attribute)


async def run_to_dir(
    scenario: Scenario,
    out: str | Path,
    *,
    overwrite: bool = False,
    on_event: Callable[[StepEvent], None] | None = None,
    simulation: Simulation | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_metrics_written: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run ``scenario`` and write its run directory ``out``; returns the summary. The directory
    is locked for the whole run (:class:`~asyncfl.run.rundir.RunLock`). ``on_metrics_written``
    is called once ``metrics.csv`` is complete, before the final files and the bias report are
    written, when the run completes or a stop fires (the CLI's figure process starts drawing
    ``metrics.png`` then, alongside them: docs/performance.md, "Start-up")."""
    trackers = tracking.build(scenario)  # their optional packages checked before anything is written
    rundir.check_out(out, overwrite=overwrite)
    # built first: a scenario refused while building (memory, traces) leaves no directory behind
    sim = simulation if simulation is not None else build_simulation(scenario)
    stops.check_metric(scenario.run.stop, metric_fields(sim))
    path, lock = rundir.prepare(out, overwrite=overwrite)
    with lock:
        writer = rundir.RunWriter(path, metric_fields=metric_fields(sim))
        writer.write_scenario(scenario.to_toml())
        provenance.write(path, scenario, sim.task)
        return await _drive(sim, scenario, writer, on_event, should_stop, trackers, on_metrics_written)


async def _drive(
    sim: Simulation,
    scenario: Scenario,
    writer: rundir.RunWriter,
    on_event: Callable[[StepEvent], None] | None,
    should_stop: Callable[[], bool] | None,
    trackers: dict[str, tracking.Tracker],
    on_metrics_written: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Drive ``sim`` into ``writer``'s directory: periodic checkpoints, and a final one when the
    run is stopped (``should_stop``, i.e. SIGINT) or diverges; the summary says which
    (``scenario``: what the checkpoints store). The trackers log as it goes and are closed
    whatever happens (:mod:`asyncfl.run.tracking`)."""
    sim.sink = writer
    sim.should_stop = should_stop
    every = scenario.run.checkpoint_every
    writer.write_summary({"name": scenario.name, "status": "running", "steps": sim.steps_done})
    board = tracking.TrackerSet.open(scenario, writer.path, sim.steps_done, trackers)
    watch, stopped = stops.StopWatch(scenario.run.stop), None
    try:  # the trackers are closed however the run ends
        events = sim.events()
        try:
            async for event in events:
                if event.metrics is not None:
                    write_counts(sim, writer)
                    board.on_event(sim, event)
                stopped = watch.check(sim, event)
                if every and event.step % every == 0 and event.step < event.total_steps and stopped is None:
                    save_checkpoint(sim, scenario, writer)
                if on_event is not None:
                    on_event(event)
                if stopped is not None:
                    break
            if stopped is not None:  # a stop fired (docs/run-directory.md §14): the jobs in flight are cancelled
                await events.aclose()
                await sim.aclose()
        except NumericalFault as exc:
            # marked with the fault: a driver killed before the summary below is resumed by
            # finalizing this state as diverged, never by running on past the fault
            save_checkpoint(sim, scenario, writer, fault=str(exc))
            finalize(sim, writer, "diverged", {"error": str(exc), "checkpoint": CHECKPOINT_NAME})
            raise
        except SimulationStalled as exc:
            finalize(sim, writer, "stalled", {"error": str(exc)})
            raise
        except RunInterrupted:
            save_checkpoint(sim, scenario, writer)
            await sim.aclose()
            finalize(sim, writer, "interrupted", {"checkpoint": CHECKPOINT_NAME})
            raise
        except (KeyboardInterrupt, asyncio.CancelledError):
            finalize(sim, writer, "interrupted")  # mid-event: the last checkpoint (if any) stays valid
            raise
        except rundir.WriteError as exc:  # a full disk: nothing more can be written, the files so far stay
            ck = writer.path / CHECKPOINT_NAME
            last = "" if writer.checkpoint_step is None else f" of server step {writer.checkpoint_step}"
            kept = (f"its last checkpoint{last} ({ck}) is intact: make room, then 'asyncfl resume {writer.path}'"
                    if ck.exists() else f"it has no checkpoint yet: make room, then 'asyncfl resume {writer.path}' restarts it")
            raise rundir.WriteError(f"{exc}; the run stopped after server step {sim.steps_done}, {kept}") from None
        finally:
            writer.close()
    except BaseException:
        _close_trackers(board, writer)
        raise
    if on_metrics_written is not None:  # metrics.csv is closed: the figure needs nothing finalize writes
        on_metrics_written()
    summary = finalize(sim, writer, stops.STOPPED, {"stop": stopped}) if stopped is not None else finalize(sim, writer, "completed")
    return _close_trackers(board, writer, summary)


def _close_trackers(board: tracking.TrackerSet, writer: rundir.RunWriter, summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """Close the run's trackers with its status (the summary written last, else the one on
    disk) and record in ``summary.json`` any that failed (``tracker_errors``)."""
    if not board.trackers:
        return summary or {}
    if summary is None:
        try:
            summary = rundir.read_json(writer.path / "summary.json")
        except RunDirError:
            summary = {}
    errors = {name: result for name, result in board.close(str(summary.get("status", "failed"))).items() if result != "ok"}
    if errors and summary:
        summary = {**summary, "tracker_errors": errors}
        writer.write_summary(summary)
    return summary


def save_checkpoint(sim: Simulation, scenario: Scenario, writer: rundir.RunWriter, fault: str | None = None) -> None:
    """``checkpoint.pt``: the simulation's state, the scenario it runs, and the CSV files' row
    counts and digests (written after the rows it counts); ``fault``: the message of the numerical fault the run
    stopped on, when it is the checkpoint taken then."""
    run_dir: dict[str, Any] = {"csv_rows": writer.rows(), "csv_sha256": writer.digests()}
    if fault is not None:
        run_dir["fault"] = fault
    checkpoint.save(writer.path / CHECKPOINT_NAME, scenario, sim.state(), run_dir)
    writer.checkpoint_step = sim.steps_done


def run_to_dir_blocking(scenario: Scenario, out: str | Path, **kwargs: Any) -> dict[str, Any]:
    return asyncio.run(run_to_dir(scenario, out, **kwargs))


# ---------------------------------------------------------------------------------------------
# resume
OUTPUTS = ("updates.csv", "metrics.csv", "counts.npz", "privacy.csv", "privacy_clients.csv", "summary.json", "model.pt", CHECKPOINT_NAME)


@dataclass
class ResumePlan:
    """What :func:`inspect_run_dir` found: the scenario, the status, and the checkpoint (None:
    the run restarts from scratch in the same directory)."""

    path: Path
    scenario: Scenario
    status: str | None
    checkpoint: checkpoint.Checkpoint | None
    components: dict[str, Any] | None = None  # components.json: what the run was built from

    @property
    def step(self) -> int:
        return 0 if self.checkpoint is None else self.checkpoint.step


def inspect_run_dir(path: str | Path) -> ResumePlan:
    """Check that ``path`` is a run directory that can be resumed, touching nothing.
    Every problem is a :class:`RunDirError` (exit 2)."""
    path = Path(path)
    if not path.is_dir():
        raise RunDirError(f"{path}: no such run directory")
    toml_path = path / "scenario.toml"
    if not toml_path.is_file():
        raise RunDirError(f"{path}: not a run directory (no scenario.toml); a run killed before writing it has nothing to resume: start it again with 'asyncfl run'")
    status = None
    summary_path = path / "summary.json"
    if summary_path.exists() or summary_path.is_symlink():
        summary = rundir.read_json(summary_path)
        if not isinstance(summary, dict):
            raise RunDirError(f"{summary_path}: not a run summary")
        version = summary.get("format_version")
        if version != rundir.FORMAT_VERSION:
            raise RunDirError(f"{path}: run directory format_version {reprlib.repr(version)}; this asyncfl reads format_version {rundir.FORMAT_VERSION}")
        status = summary.get("status")
    recorded = provenance.read(path)
    try:
        scenario = scenario_mod.load(toml_path, run_dir=True, resume=True)
    except ScenarioError as exc:
        gone = provenance.missing(recorded)
        if gone:
            raise RunDirError(f"{path}: cannot be rebuilt, nothing was changed:\n" + "\n".join(f"  - {p}" for p in gone)) from None
        raise RunDirError(f"{path}: its scenario.toml is not valid:\n" + "\n".join(f"  - {p}" for p in exc.problems)) from None
    state = None
    if status not in ("completed", stops.STOPPED, "diverged", "stalled") and (path / CHECKPOINT_NAME).exists():
        state = checkpoint.read(path / CHECKPOINT_NAME)
        if state.scenario_toml != scenario.to_toml():
            raise CheckpointError(f"{path / CHECKPOINT_NAME}: written for another scenario than {toml_path} (edited after the run started?)")
    return ResumePlan(path, scenario, status, state, recorded)


@dataclass
class ResumeReady:
    """A resume that passed every check (:func:`prepare_resume`): the plan, the simulation built
    and restored-to-be, the CSV prefixes to keep, and the code changes the user accepted."""

    plan: ResumePlan
    sim: Simulation
    prefixes: dict[str, rundir.CsvPrefix]
    accepted: list[provenance.CodeChange]
    trackers: dict[str, tracking.Tracker]


def prepare_resume(
    path: str | Path,
    *,
    accept_changed_code: bool = False,
    overrides: dict[str, Any] | None = None,
) -> ResumeReady:
    """Every check of ``asyncfl resume``, touching nothing: no lock file, no output, no temporary
    is created, changed or removed (docs/run-directory.md §4). In order: the directory and its
    files (:func:`inspect_run_dir`), that nobody holds its lock, the status, the components'
    origins and code against ``components.json`` (before any of their code builds anything; code
    that changed is refused unless ``accept_changed_code``), the simulation (memory, traces), the
    task's data and model fingerprints, the checkpoint against the simulation and both CSV files.
    Every refusal is a :class:`RunDirError` (exit 2); a completed run is :class:`AlreadyCompleted`."""
    if not Path(path).is_dir():
        inspect_run_dir(path)  # the message for a missing directory
    plan = inspect_run_dir(path)
    rundir.RunLock.check(plan.path)  # in use by another process: said before anything else
    if plan.status in FINISHED_STATUSES:  # completed, or a stop fired: nothing to do
        raise AlreadyCompleted(f"{plan.path}: the run is already {plan.status}; nothing to resume")
    if plan.status in ("diverged", "stalled"):
        raise RunDirError(f"{plan.path}: the run {plan.status} (see summary.json); resuming would do so again. Its last checkpoint is kept for inspection")
    trackers = tracking.build(plan.scenario)  # their optional packages checked before anything is touched
    _refuse(plan, provenance.origin_problems(plan.components, plan.scenario))
    changes = provenance.code_changes(plan.components, plan.scenario)
    if changes and not accept_changed_code:
        _refuse(plan, [c.describe() for c in changes],
                "if you changed it on purpose, resume with --accept-changed-code (recorded in components.json)")
    sim = build_simulation(plan.scenario, **(overrides or {}))  # refused (memory, traces) before a file is touched
    _refuse(plan, provenance.data_problems(plan.components, plan.scenario, sim.task))
    stops.check_metric(plan.scenario.run.stop, metric_fields(sim))
    prefixes: dict[str, rundir.CsvPrefix] = {}
    ck = plan.checkpoint
    if ck is not None:
        problems = checkpoint.validate(ck, sim.state(), plan.scenario, sim.protocol)
        if not problems:  # both CSV files checked before either is cut
            fields = {"updates.csv": UPDATE_FIELDS, "metrics.csv": metric_fields(sim)}
            for name in fields:
                prefixes[name] = rundir.csv_prefix(plan.path / name, fields[name], ck.csv_rows[name])
            problems = checkpoint.file_problems(ck, {name: prefix.sha256() for name, prefix in prefixes.items()})
        if problems:
            listed = "\n".join(f"  - {p}" for p in problems)
            raise CheckpointError(f"{ck.path}: does not fit {plan.path / 'scenario.toml'} and its run directory; nothing was changed:\n{listed}")
    return ResumeReady(plan, sim, prefixes, changes, trackers)


async def resume_prepared(
    ready: ResumeReady,
    *,
    on_event: Callable[[StepEvent], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    on_metrics_written: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Continue a run :func:`prepare_resume` checked: take the lock (held until the resumed run
    ends), make sure nothing changed since the checks, record accepted code changes, then cut
    ``updates.csv`` and ``metrics.csv`` back to the checkpoint's rows and continue (or, without a
    checkpoint, rewrite the outputs from scratch, ``scenario.toml`` kept). ``on_metrics_written``:
    as in :func:`run_to_dir`."""
    plan, sim = ready.plan, ready.sim
    with rundir.RunLock.acquire(plan.path):
        again = inspect_run_dir(plan.path)
        if again.status != plan.status or again.step != plan.step or (again.checkpoint is None) != (plan.checkpoint is None):
            raise RunDirError(f"{plan.path}: changed while it was being checked (another resume?); nothing was changed")
        if ready.accepted:
            provenance.record_acceptance(plan.path, plan.components or {}, ready.accepted)
        if plan.checkpoint is None:
            _remove_temporaries(plan.path)
            for name in OUTPUTS:
                (plan.path / name).unlink(missing_ok=True)
            writer = rundir.RunWriter(plan.path, metric_fields=metric_fields(sim))
            return await _drive(sim, plan.scenario, writer, on_event, should_stop, ready.trackers, on_metrics_written)
        ck = plan.checkpoint
        sim.restore(ck.state)
        _remove_temporaries(plan.path)
        resumed_from = ck.step
        for name, prefix in ready.prefixes.items():
            rundir.truncate(plan.path / name, prefix.size)
        writer = rundir.RunWriter(plan.path, append=True, rows=ck.csv_rows, prefixes=ready.prefixes,
                                  metric_fields=metric_fields(sim))
        writer.checkpoint_step = resumed_from
        sim.sink = writer
        if ck.fault is not None:  # killed between the divergence checkpoint and its summary
            sim.start_wall_clock()
            try:
                finalize(sim, writer, "diverged", {"error": ck.fault, "checkpoint": CHECKPOINT_NAME})
            finally:
                writer.close()
            raise NumericalFault(ck.fault)
        return await _drive(sim, plan.scenario, writer, on_event, should_stop, ready.trackers, on_metrics_written)


async def resume_dir(
    path: str | Path,
    *,
    on_event: Callable[[StepEvent], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    overrides: dict[str, Any] | None = None,
    accept_changed_code: bool = False,
) -> dict[str, Any]:
    """Continue the run in ``path`` from its checkpoint (``asyncfl resume``): every check first,
    touching nothing (:func:`prepare_resume`), then the resume (:func:`resume_prepared`). Without
    a checkpoint (killed before the first one) the run restarts from scratch in the same
    directory: its outputs are rewritten, ``scenario.toml`` is kept. A completed run is left
    untouched; a diverged one is refused. ``accept_changed_code``: continue although a plug-in's
    code changed since the run started (recorded in ``components.json``).
    """
    ready = prepare_resume(path, accept_changed_code=accept_changed_code, overrides=overrides)
    return await resume_prepared(ready, on_event=on_event, should_stop=should_stop)


def _refuse(plan: ResumePlan, problems: list[str], hint: str = "") -> None:
    """Refuse to continue on other components, plug-in versions, code, data or model than the
    run started with (``components.json``, :mod:`asyncfl.run.provenance`)."""
    if problems:
        raise RunDirError(f"{plan.path}: the run cannot continue on what is installed now; nothing was changed:\n"
                          + "\n".join(f"  - {p}" for p in problems) + (f"\n{hint}" if hint else ""))


def _remove_temporaries(path: Path) -> None:
    """Temporary files of an atomic write interrupted by a kill (``.NAME.XXXXXXXX``)."""
    for child in path.iterdir():
        if child.is_file() and rundir.is_temporary(child.name):
            child.unlink()


def resume_dir_blocking(path: str | Path, **kwargs: Any) -> dict[str, Any]:
    return asyncio.run(resume_dir(path, **kwargs))
