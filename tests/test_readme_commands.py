"""Every command shown in the README and the user's guide runs as written (issue 14 item 10).

The README is the five-minute tour; the reference and the performance log moved to
docs/guide.md and docs/performance.md (issue 35 item 7), and their commands are checked the same
way, each page in a scratch directory of its own. The ``bash`` blocks of each page are read and
split into commands (continuation lines joined,
comments dropped, ``&&`` chains split). ``asyncfl`` commands run in order, as written, in a
scratch working directory that holds the repository's ``scenarios/`` and ``analysis/``, so
``runs/...`` lands there and later commands find what earlier ones wrote (``asyncfl resume
runs/q`` resumes the run the line before made). The few that take minutes (the privacy sweep,
the studies) are checked as far as they go without running: arguments parsed, scenario or spec
validated. The privacy sweep (``python -m analysis.privacy_sweep``) is checked as far as it goes
without running; the momentum-approximation study's (``python -m analysis.ma_review``) specs are
validated with ``--check`` and its report is regenerated from the committed CSVs.
Installation, benchmark and the other analysis
commands (network, minutes) are listed and skipped by name.
"""

from __future__ import annotations

import argparse
import re
import shlex
import shutil
from pathlib import Path

import pytest

from analysis.ma_review.__main__ import main as review_main
from analysis.privacy_sweep.__main__ import privacy_args
from analysis.privacy_sweep.plan import check_scenario, resolve_budget, sweep_points
from asyncfl.cli.main import build_parser, main
from asyncfl.config import scenario as sc
from asyncfl.config.memory import check_memory
from asyncfl.studies.sweep.grid import Grid, parse_grid, parse_seeds

REPO = Path(__file__).resolve().parents[1]
#: the privacy sweep on the library, checked like a long asyncfl command
PRIVACY = "python -m analysis.privacy_sweep "
#: the review (issue 28): its specs are validated with --check; its report is regenerated from the committed CSVs
REVIEW = "python -m analysis.ma_review "
#: commands that set up a machine or measure it (network, minutes): not run
NOT_RUN = ("python3 -m venv", "pip install", ".venv/bin/pip", ".venv/bin/python -m pytest", "python -m pytest",
           "python -m benchmarks.")
#: commands that take minutes (the sweeps, the studies without --check): checked without running
LONG = (PRIVACY, "asyncfl sweep ")


#: the pages whose commands are checked: the tour, the user's guide, the performance log
PAGES = ("README.md", "docs/guide.md", "docs/performance.md")


def readme_commands(page: str = "README.md") -> list[str]:
    text = (REPO / page).read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split("  #")[0].strip() if not line.lstrip().startswith("#") else ""
            for part in line.split("&&"):
                part = part.strip()
                if part:
                    commands.append(re.sub(r"^\.venv/bin/asyncfl ", "asyncfl ", part))
    return commands


def test_the_readme_shows_commands():
    commands = readme_commands()
    assert any(c.startswith("asyncfl run scenarios/quickstart.toml") for c in commands)
    assert 'python -m pytest -q -m "not slow" -n 2' in commands  # the contributors' fast subset, on both cores
    guide = readme_commands("docs/guide.md")
    known = ("asyncfl ", PRIVACY, REVIEW, *NOT_RUN)
    for page in PAGES:
        commands = readme_commands(page)
        assert all(c.startswith(known) for c in commands), [c for c in commands if not c.startswith(known)]
    assert any(c.startswith(REVIEW) for c in guide) and any(c.startswith(PRIVACY) for c in guide)
    assert any(c.startswith("python -m benchmarks.") for c in readme_commands("docs/performance.md"))


def test_the_readme_is_a_tour():
    """The README stays short enough to read in five minutes (issue 35 item 7)."""
    assert len((REPO / "README.md").read_text(encoding="utf-8").splitlines()) <= 250


def _words(command: str) -> list[str]:
    """The arguments after the command's name (``asyncfl`` or ``python -m analysis.…``)."""
    words = shlex.split(command)
    return words[3:] if command.startswith("python -m ") else words[1:]


def _script_parser(add_arguments) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    return parser


def _check_long(command: str, argv: list[str]) -> None:
    """What a long command does before its first run: parse, validate everything it names."""
    if command.startswith(PRIVACY):
        args = _script_parser(privacy_args).parse_args(argv)
        args.command = "privacy"
    else:
        args = build_parser().parse_args(argv)
    if args.command == "sweep":
        axes = tuple(parse_grid(g) for g in args.grid)
        Grid(Path(args.scenario), tuple(args.overrides), axes, parse_seeds(args.seeds) if args.seeds else (0,)).scenarios()
    elif args.command == "privacy":
        scenario = sc.load(args.scenario, args.overrides)
        check_memory(scenario)
        check_scenario(scenario)
        sweep_points(resolve_budget(scenario), args.xi or (), args.gamma or ())


@pytest.mark.slow
@pytest.mark.parametrize("page", PAGES)
def test_every_readme_command_runs_as_written(page, tmp_path, monkeypatch, capsys):
    for folder in ("scenarios", "analysis"):
        shutil.copytree(REPO / folder, tmp_path / folder, ignore=shutil.ignore_patterns("results", "__pycache__"))
    monkeypatch.chdir(tmp_path)
    ran = []
    for command in readme_commands(page):
        if command.startswith(NOT_RUN):
            continue
        argv = _words(command)
        if command.startswith(REVIEW):
            if argv[0] == "report":  # the committed results (the scratch copy leaves results/ out)
                results = tmp_path / argv[argv.index("--out") + 1]
                shutil.copytree(REPO / argv[argv.index("--out") + 1], results)
            else:  # the study takes minutes even CI-sized: its spec is validated as the command would
                argv = [*argv, "--check"]
            assert review_main(argv) == 0, command
            ran.append(command)
            continue
        if command.startswith(LONG):
            _check_long(command, argv)
            continue
        code = main(argv)
        out, err = capsys.readouterr()
        assert code == 0, f"{command}\n{err}"
        assert "Traceback" not in out + err
        ran.append(command)
    if page == "docs/performance.md":
        return
    assert any(c.startswith("asyncfl resume runs/q") for c in ran) and any(c.startswith("asyncfl bias") for c in ran)
    assert (tmp_path / "runs" / "k20" / "summary.json").is_file() and (tmp_path / "runs" / "q" / "bias.json").is_file()
    if page == "README.md":
        return
    assert any(c.startswith(REVIEW + "analysis/") for c in ran)  # a study spec validated
    assert any(c.startswith(REVIEW + "report") for c in ran) and (tmp_path / "analysis/results/ma_review/report.md").is_file()
