"""``asyncfl privacy SCENARIO --xi … [--gamma …]``: the privacy–utility sweep (docs/privacy.md;
docs/privacy.md, "What a run reports").

A thin command over :mod:`asyncfl.studies.privacy_sweep`: σ is calibrated once to the scenario's
(ε, δ) and reused for every point; each ξ (or γ) × rule × seed is one run; a rich progress bar
follows the sweep; ``sweep.csv``, ``sweep.md`` and ``sweep.png`` land in ``--out``. Bad input
(ξ ≤ σ, no ``[privacy]`` section, …) exits 2 with a message naming the option or field.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from asyncfl.cli.console import console, err_console, say, warn
from asyncfl.cli.exit_codes import EXIT_OK
from asyncfl.config import scenario as scenario_mod
from asyncfl.studies.privacy_sweep.plan import check_scenario, resolve_budget, sweep_points
from asyncfl.studies.privacy_sweep.run import SweepCallbacks, run_sweep
from asyncfl.studies.privacy_sweep.spec import SweepError
from asyncfl.studies.privacy_sweep.tables import findings

COLUMNS = ("ξ", "ξ/C", "γ", "ε spent", "claim", "rule", "seed", "part. max", "accuracy", "bias (W)", "bias (Ŵ)",
           "update noise", "count noise")


def cmd_privacy(args: argparse.Namespace) -> int:
    scenario = scenario_mod.load(args.scenario, args.overrides)
    check_scenario(scenario)
    out = Path(args.out) if args.out else Path("runs") / f"privacy-{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if (out / "sweep.csv").exists() and not args.overwrite:
        raise SweepError(f"--out {out}: already holds a sweep (sweep.csv); pass --overwrite to replace it")
    budget = resolve_budget(scenario)
    sweep_points(budget, args.xi or (), args.gamma or ())  # validate every point before any run
    if not args.quiet:
        warn(budget.describe())

    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[info]}", markup=False), TimeElapsedColumn(),
        console=err_console, disable=args.quiet, transient=False,
    )

    class Bar(SweepCallbacks):
        def __init__(self) -> None:
            self.sweep = progress.add_task("sweep", total=None, info="")
            self.run = progress.add_task("  run", total=1, info="")

        def run_started(self, index: int, total: int, point: Any, rule: str, seed: int, steps: int) -> None:
            progress.update(self.sweep, total=total, completed=index, info=f"ξ={point.xi:.4g} {rule} seed {seed}")
            progress.reset(self.run, total=steps, info="")

        def step(self, event: Any) -> None:
            info = f"loss={event.metrics['loss']:.4g}" if event.metrics is not None else None
            progress.update(self.run, completed=event.step, **({"info": info} if info else {}))

        def run_finished(self, row: Any) -> None:
            progress.advance(self.sweep)
            progress.update(self.sweep, info=f"last: acc={row.final_accuracy:.3f} bias={row.bias_exact:.3f} ({row.status})")

    with progress:
        _, rows = run_sweep(scenario, out, args.xi or (), args.gamma or (), args.rules, args.seeds, Bar(), budget)
    if not args.quiet:
        table = Table(title=f"privacy sweep — {budget.describe()}")
        for col in COLUMNS:
            table.add_column(col, justify="left" if col == "rule" else "right")
        for r in rows:
            table.add_row(f"{r.xi:.4g}", f"{r.xi_over_C:.3g}", f"{r.gamma:.4g}", f"{r.epsilon_spent:.4g}", r.claim, r.rule,
                          str(r.seed), f"{r.participations_max:.0f}", f"{r.final_accuracy:.4f}", f"{r.bias_exact:.4f}", f"{r.bias_noisy:.4f}",
                          f"{r.update_noise_std:.3g}", f"{r.count_noise_std:.3g}")
        console.print(table)
        for line in findings(rows, budget):
            say(line)
        say(f"wrote {out / 'sweep.csv'}, {out / 'sweep.md'}, {out / 'sweep.png'}")
    return EXIT_OK
