"""``python -m analysis.confirm``: the confirmatory study (docs/confirm.md).

* ``check`` — validate the plan and every design spec it names (each comparison's cells must be
  evaluated cells of its design's spec, each width's cells tuned ones; a spec that stops its evaluation runs at the target may have no
  ``final_accuracy`` comparison); runs nothing;
* ``run DESIGN --out DIR`` — run one design through the review-study engine (resumable); the
  design's digest is recorded in ``DIR/confirm.json`` when its first run starts, and a folder
  whose recorded digest differs from the plan's now is refused unless ``--exploratory`` (its
  results are then reported as exploratory);
* ``report ROOT`` — ``ROOT/report.md`` from the CSVs of the design folders ``ROOT/<design>/``
  alone.

Exit codes as ``asyncfl``'s (2 bad input, 3 a run diverged in evaluation, 130 interrupted).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from asyncfl.cli.commands import placement_args, quiet_arg
from asyncfl.cli.console import say
from asyncfl.cli.exit_codes import EXIT_OK
from asyncfl.cli.main import run_script
from asyncfl.errors import UsageError
from analysis.confirm.plan import PLAN, Design, load_plan
from analysis.confirm.record import claim_design
from analysis.confirm.report import write_report
from analysis.ma_review.design import ReviewStudy, load_review
from analysis.ma_review.__main__ import run_with_progress

COMMAND = "python -m analysis.confirm"


def confirm_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("action", choices=("check", "run", "report"), help="check the plan, run a design, or write the report")
    p.add_argument("target", nargs="?", help="run: the design's id (d1, …); report: the folder holding one folder per design")
    p.add_argument("--out", help="run: the design's folder (resumable)")
    p.add_argument("--plan", default=str(PLAN), help="the plan file (default: analysis/confirm/plan.toml)")
    p.add_argument("--exploratory", action="store_true",
                   help="run: go on in a folder started under another version of the design (its results become exploratory)")
    placement_args(p)
    quiet_arg(p, "no progress bar")


def check_stops(design: Design, study: ReviewStudy) -> None:
    """Refuse a design whose spec stops its evaluation runs at the target
    (``evaluation.stop_at_target``, docs/studies.md §2.1) while the plan compares their final
    accuracy: a stopped run does not measure it, so the planned comparison could never be made."""
    if not study.review.evaluation.stop_at_target:
        return
    finals = [c.label() for c in design.comparisons + design.secondary if c.metric == "final_accuracy"]
    if finals:
        raise UsageError(f"designs ({design.id}): {design.spec} sets evaluation.stop_at_target, but the plan compares the "
                         f"final accuracy of its evaluation runs ({'; '.join(finals)}), which a run stopped at its target "
                         "does not measure: remove the stop, or plan log_time comparisons only")


def check_cells(design: Design, study: ReviewStudy) -> None:
    """Refuse a plan naming a cell its design's spec does not have: each comparison's rule and base
    (the base at every task of ``base_tasks``) must be evaluated cells, each width's rule and base
    tuned cells (at ``task``, or at every task of ``beta_tasks``)."""
    cells = study.cells()
    evaluated = {(c.task, c.privacy, c.K, c.method) for c in cells if c.evaluate}
    tuned = {(c.task, c.privacy, c.K, c.method) for c in cells if c.tuned}
    wanted: list[tuple[str, set, tuple[str, str, int, str]]] = []
    for comp in design.comparisons + design.secondary:
        wanted.append((comp.label(), evaluated, (comp.task, comp.privacy, comp.K, comp.rule)))
        wanted += [(comp.label(), evaluated, (task, comp.privacy, comp.K, comp.base)) for task in comp.base_tasks or [comp.task]]
    for w in design.widths or []:
        tasks = [w.task] if w.task is not None else list(w.beta_tasks or {})
        wanted += [(w.label(), tuned, (task, w.privacy, w.K, method)) for task in tasks for method in (w.rule, w.base)]
    for label, have, (task, privacy, K, method) in wanted:
        if (task, privacy, K, method) not in have:
            kind = "an evaluated" if have is evaluated else "a tuned"
            raise UsageError(f"designs ({design.id}): {label}: {method} at {task}, {privacy}, K = {K} is not {kind} cell of "
                             f"{design.spec}")


def cmd_confirm(args: argparse.Namespace) -> int:
    loaded = load_plan(args.plan)
    if args.action == "check":
        for design in loaded.plan.designs:
            spec = loaded.spec_path(design)
            if spec is None:
                say(f"{design.id}: planned, no spec yet ({design.title}; about {design.cost:g} core-minutes)")
                continue
            study = load_review(spec)
            check_stops(design, study)
            check_cells(design, study)
            say(f"{design.id}: {design.spec} valid ({len(study.cells())} cells; digest {loaded.design_digest(design.id)[:12]})")
        say(f"plan {loaded.path} valid; digest {loaded.plan_digest()}")
        return EXIT_OK
    if args.action == "report":
        if not args.target:
            raise UsageError("report: name the folder that holds the design folders (e.g. runs/confirm)")
        path = write_report(Path(args.target), loaded)
        say(f"wrote {path}")
        return EXIT_OK
    if not args.target or not args.out:
        raise UsageError("run: name the design (d1, …) and its folder with --out")
    design = loaded.plan.design(args.target)
    spec = loaded.spec_path(design)
    if spec is None:
        raise UsageError(f"design {design.id}: has no spec file yet (planned only); add it in a plan revision first")
    study = load_review(spec)
    check_stops(design, study)
    check_cells(design, study)
    out = Path(args.out)
    record = claim_design(out, loaded, design.id, exploratory=args.exploratory)
    _, code = run_with_progress(design.id, study, out, args, extend=True, on_claimed=record)
    return code


def main(argv: list[str] | None = None) -> int:
    return run_script(COMMAND, "The confirmatory study: a pre-registered plan, its designs, and the report.", confirm_args,
                      cmd_confirm, argv)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
