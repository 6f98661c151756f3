"""The scenario library (issue 9 item 4): ``asyncfl scenarios`` lists the scenario files users
start from, one line each: the file's name and the first line of its leading comment (what it
models)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from asyncfl.errors import AsyncFLError


def default_dir() -> Path:
    """``scenarios/`` of the source checkout (beside the package), else of the working directory."""
    here = Path(__file__).resolve().parent.parent / "scenarios"
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
    from asyncfl.cli.main import console

    entries = library(Path(args.dir) if args.dir else None)
    width = max((len(n) for n in entries), default=0)
    for name, path in entries.items():
        console.print(f"{name:<{width}}  {describe(path)}", markup=False, soft_wrap=True)
    return 0


def register(sub: Any) -> None:
    p = sub.add_parser("scenarios", help="list the scenario library, one line each")
    p.add_argument("--dir", help="directory of scenario files (default: the library's scenarios/)")
    p.set_defaults(func=cmd_scenarios)
