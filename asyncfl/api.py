"""The one-call entry points of the public API (docs/extending.md §8): build a scenario from a file
or a table, and run it into a run directory."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

from asyncfl.config import scenario as scenario_mod
from asyncfl.config.scenario import Scenario
from asyncfl.results import Run, load_run
from asyncfl.run.rundir import default_run_dir
from asyncfl.run.runner import run_to_dir_blocking


def load_scenario(path: str | Path, overrides: Sequence[str] = (), unset: Sequence[str] = ()) -> Scenario:
    """The scenario file ``path`` with ``--set``-style ``overrides`` (``"server.rule=momentum"``)
    and ``--unset`` keys, validated (:class:`asyncfl.ScenarioError` lists every problem)."""
    return scenario_mod.load(path, tuple(overrides), tuple(unset))


def scenario_from_dict(raw: Mapping[str, Any], **overrides: Any) -> Scenario:
    """A scenario from a table shaped like a scenario file (``{"server": {"rule": "momentum"}}``),
    with dotted-key ``overrides`` (``**{"server.lr": 0.5}``), validated."""
    table = {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in raw.items()}
    scenario_mod.apply_values(table, list(overrides.items()))
    return scenario_mod.validate(table)


def simulate(scenario: Scenario | str | Path | Mapping[str, Any], out: str | Path | None = None, *,
             overwrite: bool = False) -> Run:
    """Run ``scenario`` (a :class:`Scenario`, a scenario file, or a table) into the run directory
    ``out`` (default ``runs/NAME-TIMESTAMP``) exactly as ``asyncfl run`` does, and return it as a
    :class:`asyncfl.results.Run`. A diverged run raises after its directory is written."""
    if isinstance(scenario, (str, Path)):
        scenario = load_scenario(scenario)
    elif not isinstance(scenario, Scenario):
        scenario = scenario_from_dict(scenario)
    target = Path(out) if out is not None else default_run_dir(scenario.name)
    run_to_dir_blocking(scenario, target, overwrite=overwrite)
    return load_run(target)
