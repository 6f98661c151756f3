"""Every scenario key is documented in one place (docs/scenario.md §1): the table lists exactly
the keys of every section and of every built-in component, each with its default. A row's
"component" cell names the component(s) that own the key (``momentum, nesterov``), or — for a
base key of the section."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from pydantic_core import PydanticUndefined

from asyncfl.components.core import KINDS
from asyncfl.components.registry import REGISTRY
from asyncfl.config import scenario as sc

DOC = Path(__file__).resolve().parents[1] / "docs" / "scenario.md"
ROW = re.compile(r"^\| `([\w.]+)` \| ([\w-]+(?:, [\w-]+)*|—) \| (.+?) \| (.+) \|$")


def documented() -> dict[tuple[str, str], str]:
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if m:
            key, variants, default, meaning = m.groups()
            assert meaning.strip(), key
            for variant in variants.split(", "):
                assert (key, variant) not in rows, f"{key} ({variant}) documented twice"
                rows[(key, variant)] = default.strip()
    return rows


def actual() -> dict[tuple[str, str], object]:
    keys: dict[tuple[str, str], object] = {("name", "—"): "unnamed", ("seed", "—"): 0}
    for section, cls in sc.SECTIONS.items():
        for key, field in cls.model_fields.items():
            keys[(f"{section}.{key}", "—")] = field.default
    for kind in KINDS.values():
        if kind.whole_section:
            keys[(kind.field, "—")] = kind.default
        for component in REGISTRY.components(kind.name):
            if component.origin.source != "builtin" or component.config is None:
                continue
            for key, field in component.config.model_fields.items():
                if kind.many:  # its own table: run.tracker.mlflow.experiment
                    keys[(f"{kind.section}.{kind.keys_table}.{component.name}.{key}", component.name)] = field.default
                elif not (kind.whole_section and key == kind.key):
                    keys[(f"{kind.section}.{key}", component.name)] = field.default
    return keys


def test_every_key_of_every_section_and_variant_is_documented_once():
    docs, code = documented(), actual()
    assert set(docs) == set(code), {"undocumented": sorted(set(code) - set(docs)), "stale": sorted(set(docs) - set(code))}


def test_the_documented_defaults_are_the_codes():
    for (key, variant), text in documented().items():
        default = actual()[(key, variant)]
        if default is None:
            assert text == "—", (key, variant, text)
        elif default is PydanticUndefined:
            assert text == "required", (key, variant, text)
        else:
            assert text.startswith("`") and text.endswith("`"), (key, text)
            assert tomllib.loads(f"v = {text.strip('`')}")["v"] == default, (key, variant, text, default)


def test_the_keys_the_issue_named_are_there():
    keys = {key for key, _ in documented()}
    assert {"server.adam_beta2", "server.adam_eps", "task.noise", "task.heterogeneity", "run.tensorboard"} <= keys
