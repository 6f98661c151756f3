"""The scenario library (issue 9 item 4): ``asyncfl scenarios`` lists the scenario files users
start from, one line each: the file's name and the first line of its leading comment (what it
models). Torch-free (docs/architecture.md, "Package layout")."""

from __future__ import annotations

import argparse
from pathlib import Path

from asyncfl.cli.console import say
from asyncfl.cli.exit_codes import EXIT_OK
from asyncfl.errors import AsyncFLError


def default_dir() -> Path:
    """``scenarios/`` of the source checkout (beside the package), else of the working directory."""
    here = Path(__file__).resolve().parents[2] / "scenarios"
    return here if here.is_dir() else Path("scenarios")


def describe(path: Path) -> str:
    """The first line of the file's leading ``#`` comment (empty when it has none)."""
    for line in path.read_text(encoding="utf-8").splitlines():
        text = line.strip()
        if not text:
            continue
        return text.lstrip("#").strip() if text.startswith("#") else ""
    return ""


def library(directory: Path | None = None) -> dict[str, Path]:
    """Scenario name (file stem) → path, sorted by name."""
    directory = default_dir() if directory is None else Path(directory)
    if not directory.is_dir():
        raise AsyncFLError(f"--dir {directory}: no such directory of scenario files")
    return {p.stem: p for p in sorted(directory.glob("*.toml"))}


def cmd_scenarios(args: argparse.Namespace) -> int:
    entries = library(Path(args.dir) if args.dir else None)
    width = max((len(n) for n in entries), default=0)
    for name, path in entries.items():
        say(f"{name:<{width}}  {describe(path)}")
    return EXIT_OK
