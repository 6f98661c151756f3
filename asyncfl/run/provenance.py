"""What ran and where it came from: ``components.json`` (docs/run-directory.md §2).

A run directory names every component the run was built from — kind, name, and origin (built
into asyncfl; an installed package and its version; a module) — and the content fingerprint of
the task it trained on: a SHA-256 of every client's and the test set's tensors (``data``) and of
the model's architecture, its modules' classes and its parameters' and buffers' names, shapes and
dtypes (``model``). ``asyncfl resume`` rebuilds the run from ``scenario.toml`` and first checks it
against this record (:func:`problems`): a component that is no longer registered, a plug-in
package at another version, or a task whose data or model differ is refused, naming what
changed, before any file is touched. A run never continues on other data or code.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from asyncfl.components.core import KINDS
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
                                 "origin": component.origin.to_dict() if component.origin else {}}
        if kind == "task":
            entry["fingerprint"] = {"data": data_fingerprint(task), "model": model_fingerprint(task)}
        if component.links:  # a chain's links, each with its origin (docs/server-rules.md §10)
            field = f"{KINDS[kind].section}.{component.traits.links}"
            entry["links"] = [{"field": field, "name": link.name, "origin": link.origin.to_dict() if link.origin else {}}
                              for link in component.links]
        components.append(entry)
    return {"version": VERSION, "components": components}


def write(path: Path, scenario: Scenario, task: Task) -> None:
    write_json(path / FILE, record(scenario, task))


def read(path: Path) -> dict[str, Any] | None:
    """The record of a run directory, None for a run written before it existed."""
    file = path / FILE
    if not file.exists():
        return None
    data = read_json(file)
    if not isinstance(data, dict) or data.get("version") != VERSION or not isinstance(data.get("components"), list):
        raise RunDirError(f"{file}: not a components record of version {VERSION}")
    return data


def _origin_text(origin: dict[str, Any]) -> str:
    if origin.get("source") == "builtin":
        return "built into asyncfl"
    if origin.get("package"):
        return f"package {origin['package']} {origin.get('version', '')}".rstrip()
    return f"module {origin.get('module', '?')}"


def missing(recorded: dict[str, Any] | None) -> list[str]:
    """The recorded components that are not registered now, each named with where it came from
    (for a ``scenario.toml`` that no longer validates)."""
    out = []
    for entry in (recorded or {}).get("components", []):
        for one in (entry, *_recorded_links(entry)):
            try:
                found = REGISTRY.find(entry["kind"], one["name"])
            except UnknownComponent:
                found = None
            if found is None:
                what = f"{one['field']} = {one['name']!r}" if one is entry else f"{one['field']} link {one['name']!r}"
                out.append(f"{what} came from {_origin_text(one.get('origin', {}))}, which is not installed or registered now")
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


def problems(recorded: dict[str, Any] | None, scenario: Scenario, task: Task | None) -> list[str]:
    """What differs between the record and the run rebuilt now: a component's origin (another
    source, package or version) and the task's data or model fingerprint."""
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
        if [link.get("name") for link in links] != [link.name for link in component.links] and links:
            out.append(f"{links[0].get('field')}: the run linked {[link.get('name') for link in links]}, "
                       f"the scenario now links {[link.name for link in component.links]}")
        else:
            for was_link, link in zip(links, component.links):
                out.extend(_origin_problems(f"{was_link.get('field')} link {link.name!r}", was_link.get("origin", {}), link))
        fingerprint = entry.get("fingerprint")
        if fingerprint and task is not None:
            if fingerprint.get("data") != data_fingerprint(task):
                out.append(f"task.name = {name!r}: its data differ from the data the run started on "
                           "(the clients' or the test set's tensors changed)")
            if fingerprint.get("model") != model_fingerprint(task):
                out.append(f"task.name = {name!r}: its model architecture differs from the one the run started with")
    return list(dict.fromkeys(out))
