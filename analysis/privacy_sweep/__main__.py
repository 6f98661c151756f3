"""``python -m analysis.privacy_sweep SCENARIO --xi … [--gamma …]``: the privacy–utility sweep
(docs/privacy.md, "What a run reports"), run from the repository root.

A thin command line over :mod:`analysis.privacy_sweep` and the library's experiment engine: σ is calibrated once to the scenario's
(ε, δ) and reused for every point; each ξ (or γ) × rule × seed is one run; a rich progress bar
follows the sweep (its runs go through the parallel runner: ``--workers``, ``--ray``; rerunning
the same command resumes it); ``sweep.csv``, ``sweep.md`` and ``sweep.png`` land in ``--out``. Bad input
(ξ ≤ σ, no ``[privacy]`` section, …) exits 2 with a message naming the option or field; the exit
codes are those of ``asyncfl`` (:func:`asyncfl.cli.main.run_script`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from rich.table import Table

from asyncfl.cli.commands import changes_args, format_arg, overwrite_arg, placement_args, quiet_arg, seeds_arg
from asyncfl.cli.console import RunsDisplay, command_line, console, say, warn
from asyncfl.cli.exit_codes import of_runs
from asyncfl.cli.main import run_script
from asyncfl.cli.scenario_input import scenario_from_args
from asyncfl.run.rundir import default_run_dir
from analysis.privacy_sweep.plan import check_scenario, resolve_budget, sweep_points
from asyncfl.run.parallel import Progress, RunOutcome, make_backend
from analysis.privacy_sweep.run import COMMAND, check_choices, run_sweep
from analysis.privacy_sweep.spec import RULES
from asyncfl.studies.sweep.grid import parse_seeds
from analysis.privacy_sweep.tables import findings

COLUMNS = ("ξ", "ξ/C", "γ", "ε spent", "claim", "rule", "seed", "status", "part. max", "accuracy", "bias (W)", "bias (Ŵ)",
           "update noise", "count noise")


def privacy_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("scenario", help="a scenario with an enabled [privacy] section (e.g. scenarios/private_synthetic.toml)")
    changes_args(p)
    p.add_argument("--xi", type=float, nargs="+", metavar="XI", help="count-noise levels ξ to sweep (each > σ)")
    p.add_argument("--gamma", type=float, nargs="+", metavar="GAMMA", help="payload scales γ to sweep (each > 0)")
    p.add_argument("--rules", nargs="+", choices=RULES, default=list(RULES), help="server rules to run at every point")
    seeds_arg(p)
    p.add_argument("--out", help="output directory (default: runs/privacy-NAME-TIMESTAMP)")
    overwrite_arg(p)
    placement_args(p)
    format_arg(p)
    quiet_arg(p, "no progress bar and no table")


def cmd_privacy(args: argparse.Namespace) -> int:
    scenario = scenario_from_args(args)
    check_scenario(scenario)
    seeds = list(parse_seeds(args.seeds, option="--seeds")) if args.seeds else [scenario.seed]
    check_choices(args.rules, seeds)
    out = Path(args.out) if args.out else default_run_dir(scenario.name, prefix="privacy-")
    budget = resolve_budget(scenario)
    sweep_points(budget, args.xi or (), args.gamma or ())  # validate every point before any run
    if not args.quiet:
        warn(budget.describe())
    display = RunsDisplay("privacy sweep", quiet=args.quiet)
    backend = make_backend(args.workers, args.ray)

    def on_run(outcome: RunOutcome, progress: Progress) -> None:
        display.finished(outcome.name, outcome.status, outcome.wall, outcome.reused, progress.eta(backend.slots))

    try:
        _, rows = run_sweep(scenario, out, args.xi or (), args.gamma or (), args.rules, seeds, backend=backend,
                            on_outcome=on_run, on_start=display.start, budget=budget, fmt=args.format or "png",
                            overwrite=args.overwrite, command=command_line(args))
    finally:
        display.close()
        backend.close()
    if not args.quiet:
        table = Table(title=f"privacy sweep — {budget.describe()}")
        for col in COLUMNS:
            table.add_column(col, justify="left" if col in ("rule", "status") else "right")
        for r in rows:
            table.add_row(f"{r.xi:.4g}", f"{r.xi_over_C:.3g}", f"{r.gamma:.4g}", f"{r.epsilon_spent:.4g}", r.claim, r.rule,
                          str(r.seed), r.status, f"{r.participations_max:.0f}", f"{r.final_accuracy:.4f}", f"{r.bias_exact:.4f}",
                          f"{r.bias_noisy:.4f}", f"{r.update_noise_std:.3g}", f"{r.count_noise_std:.3g}")
        console.print(table)
        for line in findings(rows, budget):
            say(line)
        say(f"wrote {out / 'sweep.csv'}, {out / 'sweep.md'}, {out / ('sweep.' + (args.format or 'png'))}")
    failed = [r for r in rows if r.status != "completed"]
    for r in failed:  # always said: the exit code is not 0 because of them
        warn(f"{r.status}: {r.run_dir}: {r.message or 'no message'}")
    if failed:
        warn(f"{len(failed)} of {len(rows)} runs did not complete (sweep.csv has each status and message)")
    return of_runs([r.status for r in rows])


def main(argv: list[str] | None = None) -> int:
    return run_script(COMMAND, "Privacy–utility sweep over ξ (or γ) at the scenario's fixed (ε, δ).", privacy_args, cmd_privacy, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
