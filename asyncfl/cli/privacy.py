"""``asyncfl privacy SCENARIO --xi … [--gamma …]``: the privacy–utility sweep (DESIGN.md §5).

A thin command over :mod:`analysis.privacy_sweep` (the study code): σ is calibrated once to
the scenario's (ε, δ) and reused for every point; each ξ (or γ) × rule × seed is one run; a
rich progress bar follows the sweep; ``sweep.csv``, ``sweep.md`` and ``sweep.png`` land in
``--out``. Bad input (ξ ≤ σ, no ``[privacy]`` section, …) exits 2 with a message naming the
option or field.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any


def cmd_privacy(args: argparse.Namespace) -> int:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from analysis import privacy_sweep as ps
    from asyncfl.config import scenario as scenario_mod
    from asyncfl.cli.main import console, err_console

    scenario = scenario_mod.load(args.scenario, args.overrides)
    ps.check_scenario(scenario)
    out = Path(args.out) if args.out else Path("runs") / f"privacy-{scenario.name}-{time.strftime('%Y%m%d-%H%M%S')}"
    if (out / "sweep.csv").exists() and not args.overwrite:
        raise ps.SweepError(f"--out {out}: already holds a sweep (sweep.csv); pass --overwrite to replace it")
    budget = ps.resolve_budget(scenario)
    ps.sweep_points(budget, args.xi or (), args.gamma or ())  # validate every point before any run
    if not args.quiet:
        err_console.print(budget.describe(), markup=False)

    progress = Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"), TimeElapsedColumn(),
        console=err_console, disable=args.quiet, transient=False,
    )

    class Bar(ps.SweepCallbacks):
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
        _, rows = ps.run_sweep(scenario, out, args.xi or (), args.gamma or (), args.rules, args.seeds, Bar(), budget)
    if not args.quiet:
        table = Table(title=f"privacy sweep — {budget.describe()}")
        for col in ("ξ", "ξ/C", "γ", "ε spent", "rule", "seed", "accuracy", "bias (W)", "bias (Ŵ)", "update noise", "count noise"):
            table.add_column(col, justify="left" if col == "rule" else "right")
        for r in rows:
            table.add_row(f"{r.xi:.4g}", f"{r.xi_over_C:.3g}", f"{r.gamma:.4g}", f"{r.epsilon_spent:.4g}", r.rule, str(r.seed),
                          f"{r.final_accuracy:.4f}", f"{r.bias_exact:.4f}", f"{r.bias_noisy:.4f}",
                          f"{r.update_noise_std:.3g}", f"{r.count_noise_std:.3g}")
        console.print(table)
        for line in ps.findings(rows, budget):
            console.print(line, markup=False)
        console.print(f"wrote {out / 'sweep.csv'}, {out / 'sweep.md'}, {out / 'sweep.png'}", markup=False)
    return 0


def register(sub: Any) -> None:
    from analysis.privacy_sweep import RULES

    p = sub.add_parser("privacy", help="privacy–utility sweep over ξ (or γ) at the scenario's fixed (ε, δ)")
    p.add_argument("scenario", help="a scenario with an enabled [privacy] section (e.g. scenarios/private_synthetic.toml)")
    p.add_argument("--set", dest="overrides", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="override a scenario key (repeatable)")
    p.add_argument("--xi", type=float, nargs="+", metavar="XI", help="count-noise levels ξ to sweep (each > σ)")
    p.add_argument("--gamma", type=float, nargs="+", metavar="GAMMA", help="payload scales γ to sweep (each > 0)")
    p.add_argument("--rules", nargs="+", choices=RULES, default=list(RULES), help="server rules to run at every point")
    p.add_argument("--seeds", type=int, nargs="+", metavar="SEED", help="seeds (default: the scenario's)")
    p.add_argument("--out", help="output directory (default: runs/privacy-NAME-TIMESTAMP)")
    p.add_argument("--overwrite", action="store_true", help="allow --out to hold an earlier sweep")
    p.add_argument("--quiet", action="store_true", help="no progress bar and no table")
    p.set_defaults(func=cmd_privacy)
