"""``confirm.json``: which plan a design's folder was run under (docs/confirm.md §2).

Written once, when the design's first run is about to start, and never rewritten: the design's
digest (:meth:`analysis.confirm.plan.LoadedPlan.design_digest`), the plan's revision and the time.
A later start in the same folder compares the recorded digest with the plan's now; a difference
means the design changed after its runs began, and its results can only be exploratory.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

from asyncfl.errors import UsageError
from analysis.confirm.plan import LoadedPlan

RECORD = "confirm.json"


def read_record(folder: Path) -> dict[str, Any] | None:
    """The folder's record, or None when it has none (a malformed one is refused by name)."""
    path = folder / RECORD
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UsageError(f"{path}: not a readable record ({exc})") from None
    if not isinstance(record, dict) or not isinstance(record.get("design_digest"), str):
        raise UsageError(f"{path}: has no design_digest")
    return record


def claim_design(out: Path, loaded: LoadedPlan, design_id: str, exploratory: bool = False) -> Callable[[Path], None]:
    """Check ``out``'s record against the plan (refusing a changed design unless ``exploratory``)
    and return the writer that records it once the folder is claimed."""
    digest = loaded.design_digest(design_id)
    previous = read_record(out) if out.is_dir() else None
    if previous is not None and previous["design_digest"] != digest and not exploratory:
        raise UsageError(f"--out {out}: its runs started under another version of design {design_id} "
                         f"(recorded digest {previous['design_digest'][:12]}, the plan's now {digest[:12]}); its results can "
                         "only be exploratory: pass --exploratory to go on, or choose another --out")

    def write(folder: Path) -> None:
        if previous is not None:
            if previous["design_digest"] != digest and not previous.get("exploratory"):
                (folder / RECORD).write_text(json.dumps({**previous, "exploratory": True}, indent=1) + "\n", encoding="utf-8")
            return
        record = {"design": design_id, "design_digest": digest, "plan_revision": loaded.plan.revision,
                  "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "exploratory": False}
        (folder / RECORD).write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")

    return write
