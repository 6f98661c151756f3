"""What ran and where it came from: ``components.json`` (docs/run-directory.md §1.1).

A run directory names every component the run was built from — kind, name, origin (built into
asyncfl; an installed package and its version; a module) and the digest of each file of the code
that defines it (:mod:`asyncfl.components.fingerprint`) — and the content fingerprint of the task
it trained on: a SHA-256 of every client's and the test set's tensors (``data``) and of the
model's architecture, its modules' classes and its parameters' and buffers' names, shapes and
dtypes (``model``). ``asyncfl resume`` rebuilds the run from ``scenario.toml`` and first checks it
against this record: a component that is no longer registered or comes from another package or
version (:func:`origin_problems`), code that changed (:func:`code_changes`; accepted only with
``--accept-changed-code``, which :func:`record_acceptance` writes down), or a task whose data or
model differ (:func:`data_problems`) is refused, naming what changed, before any file is touched.
A run never continues on other data or code without saying so.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from asyncfl.components.core import KINDS
from asyncfl.components.fingerprint import changed_files, code_record
from asyncfl.components.registry import REGISTRY, UnknownComponent
from asyncfl.errors import RunDirError
from asyncfl.run.rundir import read_json, write_json

if TYPE_CHECKING:
    from asyncfl.config.scenario import Scenario
    from asyncfl.tasks.base import Task

FILE = "components.json"
VERSION = 1


def _feed_tensor(digest: Any, tensor: torch.Tensor) -> None:
    t = tensor.detach().contiguous().cpu()
    digest.update(f"{t.dtype}{tuple(t.shape)}".encode())
    digest.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")


def data_fingerprint(task: Task) -> str:
    """SHA-256 of every client's ``x`` and ``y`` (in client order) and of the test set."""
    digest = hashlib.sha256()
    digest.update(f"{task.num_clients}".encode())
    for data in (*task.clients, task.test):
        _feed_tensor(digest, data.x)
        _feed_tensor(digest, data.y)
    return digest.hexdigest()


def model_fingerprint(task: Task) -> str:
    """SHA-256 of the architecture: each module's name and class, each parameter's and buffer's
    name, shape and dtype (not their values: the initial model is part of the data of the run)."""
    digest = hashlib.sha256()
    for name, module in task.model.named_modules():
        digest.update(f"{name}:{type(module).__module__}.{type(module).__qualname__};".encode())
    for kind, items in (("p", task.model.named_parameters()), ("b", task.model.named_buffers())):
        for name, tensor in items:
            digest.update(f"{kind}:{name}:{tuple(tensor.shape)}:{tensor.dtype};".encode())
    digest.update(f"initial:{tuple(task.initial_theta.shape)}:{task.initial_theta.dtype}".encode())
    return digest.hexdigest()


def record(scenario: Scenario, task: Task) -> dict[str, Any]:
    """The ``components.json`` content of a run of ``scenario`` on ``task``."""
    components = []
    for kind, component in scenario.components().items():
        entry: dict[str, Any] = {"kind": kind, "field": KINDS[kind].field, "name": component.name,
                                 "origin": component.origin.to_dict() if component.origin else {},
                                 "code": code_record(component.origin)}
        if kind == "task":
            entry["fingerprint"] = {"data": data_fingerprint(task), "model": model_fingerprint(task)}
        if component.links:  # a chain's links, each with its origin and code (docs/server-rules.md §10)
            field = f"{KINDS[kind].section}.{component.traits.links}"
            entry["links"] = [{"field": field, "name": link.name, "origin": link.origin.to_dict() if link.origin else {},
                               "code": code_record(link.origin)} for link in component.links]
        components.append(entry)
    return {"version": VERSION, "components": components}


def write(path: Path, scenario: Scenario, task: Task) -> None:
    write_json(path / FILE, record(scenario, task))


def read(path: Path) -> dict[str, Any] | None:
    """The record of a run directory, None for a run written before it existed. A record that is
    not one (damaged JSON, another layout) is a :class:`RunDirError` naming the file."""
    file = path / FILE
    if not file.exists() and not file.is_symlink():
        return None
    data = read_json(file)
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("components"), list) \
            or not all(isinstance(e, dict) and isinstance(e.get("kind"), str) and isinstance(e.get("name"), str)
                       and isinstance(e.get("field"), str) and isinstance(e.get("origin", {}), dict)
                       and isinstance(e.get("code", {}), dict) for e in data["components"]):
        raise RunDirError(f"{file}: not a components record of version {VERSION} (damaged?); nothing was changed")
    return data


def _origin_text(origin: dict[str, Any]) -> str:
    if origin.get("source") == "builtin":
        return "built into asyncfl"
    if origin.get("package"):
        return f"package {origin['package']} {origin.get('version', '')}".rstrip()
    return f"module {origin.get('module', '?')}"


def missing(recorded: dict[str, Any] | None) -> list[str]:
    """The recorded components that are not registered now, each named with where it came from
    and why it cannot be found (for a ``scenario.toml`` that no longer validates)."""
    out = []
    for entry in (recorded or {}).get("components", []):
        if entry["kind"] not in KINDS:
            out.append(f"{entry['field']} = {entry['name']!r}: a kind of component this asyncfl does not have ({entry['kind']!r})")
            continue
        for one in (entry, *_recorded_links(entry)):
            why = "which is not installed or registered now"
            try:
                found = REGISTRY.find(entry["kind"], one["name"])
            except UnknownComponent as exc:
                found, why = None, f"and cannot be used now: {exc}"
            if found is None:
                what = f"{one['field']} = {one['name']!r}" if one is entry else f"{one['field']} link {one['name']!r}"
                out.append(f"{what} came from {_origin_text(one.get('origin', {}))}, {why}")
    return out


def _recorded_links(entry: dict[str, Any]) -> list[dict[str, Any]]:
    """A record entry's links (a chain's), each a table with a name; anything else is ignored."""
    links = entry.get("links")
    return [link for link in links if isinstance(link, dict) and isinstance(link.get("name"), str)] if isinstance(links, list) else []


def _origin_problems(what: str, was: dict[str, Any], component: Any) -> list[str]:
    """A component's origin now against the recorded one (a package's version too)."""
    is_ = component.origin.to_dict() if component.origin else {}
    keys = ("source", "package", "version") if was.get("source") != "builtin" else ("source",)
    if any(was.get(k) != is_.get(k) for k in keys):
        return [f"{what}: the run used it from {_origin_text(was)}, now it comes from {_origin_text(is_)}"]
    return []


def origin_problems(recorded: dict[str, Any] | None, scenario: Scenario) -> list[str]:
    """What differs between the record and the components the scenario names now: a component
    gone, another name, another origin (source, package or version)."""
    if recorded is None:
        return []
    out = missing(recorded)
    now = scenario.components()
    for entry in recorded.get("components", []):
        kind, name = entry.get("kind"), entry.get("name")
        component = now.get(kind)
        if component is None or component.name != name:
            out.append(f"{entry.get('field')}: the run used {name!r}, the scenario now names "
                       f"{component.name if component else None!r}")
            continue
        out.extend(_origin_problems(f"{entry['field']} = {name!r}", entry.get("origin", {}), component))
        links = _recorded_links(entry)
        if links and [link.get("name") for link in links] != [link.name for link in component.links]:
            out.append(f"{links[0].get('field')}: the run linked {[link.get('name') for link in links]}, "
                       f"the scenario now links {[link.name for link in component.links]}")
        else:
            for was_link, link in zip(links, component.links):
                out.extend(_origin_problems(f"{was_link.get('field')} link {link.name!r}", was_link.get("origin", {}), link))
    return list(dict.fromkeys(out))


@dataclass(frozen=True)
class CodeChange:
    """A component whose code differs from the code the run started with: the record's entry
    index (and the link's, for a chain's link), the files that changed and the code record of now."""

    index: int
    link: int | None
    field: str
    name: str
    files: tuple[str, ...]
    now: dict[str, Any]

    def describe(self) -> str:
        shown = ", ".join(self.files[:8]) + (f" and {len(self.files) - 8} more" if len(self.files) > 8 else "")
        return f"{self.field} = {self.name!r}: its code differs from the code the run started with: {shown}"


def code_changes(recorded: dict[str, Any] | None, scenario: Scenario) -> list[CodeChange]:
    """The components whose code (per-file digests, :func:`asyncfl.components.fingerprint.code_record`)
    differs from the record's. A record without digests (asyncfl ≤ 0.2.0) compares nothing."""
    if recorded is None:
        return []
    now = scenario.components()
    out = []
    for i, entry in enumerate(recorded.get("components", [])):
        component = now.get(entry["kind"])
        if component is None or component.name != entry["name"]:
            continue
        links = _recorded_links(entry)
        pairs = [(None, entry, component)]
        if [link.get("name") for link in links] == [link.name for link in component.links]:
            pairs += [(j, was_link, link) for j, (was_link, link) in enumerate(zip(links, component.links))]
        for j, one, part in pairs:
            was = one.get("code")
            if not isinstance(was, dict):
                continue
            current = code_record(part.origin)
            files = changed_files(was, current)
            if files:
                out.append(CodeChange(i, j, one["field"], one["name"], tuple(files), current))
    return out


def data_problems(recorded: dict[str, Any] | None, scenario: Scenario, task: Task) -> list[str]:
    """The task's data or model fingerprint, if it differs from the record's."""
    out = []
    for entry in (recorded or {}).get("components", []):
        fingerprint = entry.get("fingerprint")
        if entry.get("kind") != "task" or not isinstance(fingerprint, dict):
            continue
        name = entry.get("name")
        if fingerprint.get("data") != data_fingerprint(task):
            out.append(f"task.name = {name!r}: its data differ from the data the run started on "
                       "(the clients' or the test set's tensors changed)")
        if fingerprint.get("model") != model_fingerprint(task):
            out.append(f"task.name = {name!r}: its model architecture differs from the one the run started with")
    return out


def problems(recorded: dict[str, Any] | None, scenario: Scenario, task: Task | None) -> list[str]:
    """Every difference between the record and the run rebuilt now (:func:`origin_problems`, the
    code of :func:`code_changes`, :func:`data_problems`), one line each."""
    out = origin_problems(recorded, scenario)
    if recorded is not None and not out:
        out += [c.describe() for c in code_changes(recorded, scenario)]
    if task is not None:
        out += data_problems(recorded, scenario, task)
    return list(dict.fromkeys(out))


def record_acceptance(path: Path, recorded: dict[str, Any], changes: list[CodeChange]) -> None:
    """Write down, in ``components.json``, that the user resumed on changed code
    (``--accept-changed-code``): each component's record takes the code of now, and
    ``accepted_code_changes`` keeps, per resume, when, which component and which files (and the
    digests the run started with)."""
    when = datetime.now(timezone.utc).isoformat(timespec="seconds")
    data = dict(recorded)
    components = [dict(e) for e in data["components"]]
    log = list(data.get("accepted_code_changes", []))
    for change in changes:
        entry = components[change.index]
        if change.link is not None:  # a chain's link: its own record inside the entry
            entry["links"] = links = [dict(link) for link in entry["links"]]
            entry = links[change.link]
        log.append({"when": when, "field": change.field, "name": change.name, "files": list(change.files),
                    "was": entry.get("code")})
        entry["code"] = change.now
    data["components"], data["accepted_code_changes"] = components, log
    write_json(path / FILE, data)
