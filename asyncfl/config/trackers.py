"""Experiment trackers a run logs to (``run.trackers``; docs/run-directory.md §15). Torch-free.

``run.trackers = ["tensorboard", "mlflow", "wandb"]`` names the trackers; each one's own keys sit
in ``run.tracker.NAME`` (``[run.tracker.mlflow] tracking_uri = "file:./mlruns"``), validated by
its config class below. A name of the form ``"package.module:attribute"`` names a tracker class
of the user's (imported when the run starts; it takes no keys). The implementations live in
:data:`asyncfl.run.tracking.TRACKERS` and are imported only by a run that names them (their packages are
optional: ``asyncfl[tensorboard]``, ``asyncfl[mlflow]``, ``asyncfl[wandb]``).
"""

from __future__ import annotations

import difflib
from typing import Any, Literal

from pydantic import ValidationError

from asyncfl.config.base import Section


class NoKeys(Section):
    """A tracker without keys of its own."""


class MLflowKeys(Section):
    """``tracking_uri``: the store (absent: ``MLFLOW_TRACKING_URI``, else MLflow's default
    ``./mlruns``); ``experiment``: the experiment's name; ``run_name``: the MLflow run's name
    (absent: the run directory's name)."""

    tracking_uri: str | None = None
    experiment: str = "asyncfl"
    run_name: str | None = None


class WandbKeys(Section):
    """``project``, ``entity``; ``dir``: where W&B writes its files (absent: W&B's default, the
    working directory's ``wandb/``); ``mode``: ``"offline"`` (default: nothing leaves the
    machine; ``wandb sync`` uploads later) or ``"online"``."""

    project: str = "asyncfl"
    entity: str | None = None
    dir: str | None = None
    mode: Literal["offline", "online"] = "offline"


#: the trackers that ship and the class of each one's own keys (their implementations:
#: :data:`asyncfl.run.tracking.TRACKERS`)
KEYS: dict[str, type[Section]] = {"tensorboard": NoKeys, "mlflow": MLflowKeys, "wandb": WandbKeys}


def unknown(name: str) -> str:
    close = difflib.get_close_matches(name, list(KEYS), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else "."
    return f"run.trackers = {name!r}: unknown tracker{hint} Allowed: {', '.join(KEYS)}"


def is_user_tracker(name: str) -> bool:
    """``"package.module:attribute"``: a tracker class of the user's."""
    module, _, attribute = name.partition(":")
    return bool(module) and bool(attribute) and all(p.isidentifier() for p in (*module.split("."), *attribute.split(".")))


def problems(trackers: list[str], keys: dict[str, Any] | None) -> list[str]:
    """What is wrong with ``run.trackers`` and ``run.tracker``, each naming the field."""
    out = []
    for name in trackers:
        if name not in KEYS and not is_user_tracker(name):
            out.append(unknown(name) + " (or 'package.module:attribute')")
    if len(set(trackers)) != len(trackers):
        out.append(f"run.trackers = {trackers}: a tracker is named twice")
    for name, table in (keys or {}).items():
        if name not in trackers:
            out.append(f"run.tracker.{name}: keys of a tracker run.trackers does not name ({', '.join(trackers) or 'none'})")
            continue
        if name not in KEYS:
            out.append(f"run.tracker.{name}: a tracker named by 'module:attribute' takes no keys")
            continue
        try:
            KEYS[name].model_validate(table)
        except ValidationError as exc:
            for err in exc.errors():
                where = ".".join(str(p) for p in ("run.tracker", name, *err["loc"]))
                if err["type"] == "extra_forbidden":
                    allowed = ", ".join(KEYS[name].model_fields)
                    out.append(f"{where}: unknown key. Allowed: {allowed}")
                else:
                    out.append(f"{where} = {err.get('input')!r}: {err['msg'].replace('Input should be', 'must be')}")
    return out


def keys_of(name: str, keys: dict[str, Any] | None) -> Section:
    """The validated own keys of tracker ``name`` (its defaults where absent)."""
    cls = KEYS.get(name, NoKeys)
    return cls.model_validate((keys or {}).get(name, {}))
