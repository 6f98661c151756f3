"""Every scenario key is documented in one place (docs/scenario.md §1): the table lists exactly
the keys of every section and of every variant of the tagged sections, each with its default."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from pydantic_core import PydanticUndefined

from asyncfl.config import scenario as sc

DOC = Path(__file__).resolve().parents[1] / "docs" / "scenario.md"
ROW = re.compile(r"^\| `([\w.]+)` \| ([\w-]+|—) \| (.+?) \| (.+) \|$")


def documented() -> dict[tuple[str, str], str]:
    rows = {}
    for line in DOC.read_text(encoding="utf-8").splitlines():
        m = ROW.match(line)
        if m:
            key, variant, default, meaning = m.groups()
            assert (key, variant) not in rows, f"{key} ({variant}) documented twice"
            assert meaning.strip(), key
            rows[(key, variant)] = default.strip()
    return rows


def actual() -> dict[tuple[str, str], object]:
    keys: dict[tuple[str, str], object] = {("name", "—"): "unnamed", ("seed", "—"): 0}
    for section, cls in sc.SECTIONS.items():
        for key, field in cls.model_fields.items():
            keys[(f"{section}.{key}", "—")] = field.default
    for section, (registry, default) in sc.TAGGED.items():
        tag = registry.field.partition(".")[2]
        keys[(registry.field, "—")] = default
        for entry in registry.entries():
            for key, field in entry.config.model_fields.items():
                if key != tag:
                    keys[(f"{section}.{key}", entry.name)] = field.default
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
