"""Docs that cannot drift from the code (issue 33 item 6).

* The tables of components in docs/architecture.md §4 and docs/extending.md §2 are the
  registry's (``python -m asyncfl.components.doc_tables --check``); a stale one fails, naming
  the file and the command that rewrites it.
* docs/scenario.md names, for every key that selects a component, exactly the built-in
  components of that kind (its key table is checked by tests/test_scenario_docs.py).
* Every ``§N`` cross-reference — in docs/, the README and the package's docstrings and comments
  — names a section its target file has: ``[privacy](privacy.md) §5–6``, ``docs/tasks.md §8``,
  ``privacy.md §3``, a bare ``§4`` (the file itself), and ``§4, §4.1`` after one of these (the
  same file).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from asyncfl.components import doc_tables
from asyncfl.components.core import KINDS

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"

HEADING = re.compile(r"^#+\s+(\d+(?:\.\d+)*)\.?\s", re.M)
FILE = r"\[[^\]]*\]\((?P<link>[\w./-]+\.md)(?:#[\w-]*)?\)|(?P<path>(?:docs/)?[\w-]+\.md)|(?P<code>`[^`]+`)"
REF = re.compile(rf"(?:(?:{FILE})\s*)?§\s?(?P<num>\d+(?:\.\d+)*)(?:\s*[–-]\s*(?P<end>\d+(?:\.\d+)*))?")
CONTINUES = re.compile(r"^(?:,|;|\s|and|or)*$")  # "§4, §4.1", "§5 and §7": the same file


def sections(path: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.S)
    return set(HEADING.findall(text))


def references(path: Path) -> list[tuple[int, Path | None, str, str]]:
    """``(line, target file, section, text)`` of every ``§`` reference in ``path``; the target is
    None for a section of something that is not a doc (`` `benchmarks.parallel` §5``)."""
    out = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        previous: tuple[int, Path | None] | None = None
        for m in REF.finditer(line):
            named = m.group("link") or m.group("path")
            if named:
                target: Path | None = DOCS / Path(named).name
            elif m.group("code"):
                target = None
            elif previous is not None and CONTINUES.match(line[previous[0]:m.start()]):
                target = previous[1]
            else:
                target = None if path.suffix == ".py" else path  # a bare § in code has no file of its own
            for section in filter(None, (m.group("num"), m.group("end"))):
                out.append((number, target, section, m.group(0).strip()))
            previous = (m.end(), target)
    return out


def _documents() -> list[Path]:
    return [*sorted(DOCS.glob("*.md")), ROOT / "README.md", *sorted((ROOT / "asyncfl").rglob("*.py"))]


def test_every_section_reference_names_a_section_of_its_target():
    wrong = []
    for path in _documents():
        for line, target, section, text in references(path):
            if target is None:
                continue
            if not target.is_file():
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {text!r}: no file {target.relative_to(ROOT)}")
            elif section not in sections(target):
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {text!r}: {target.name} has no §{section}")
    assert not wrong, "\n".join(wrong)


def test_the_reference_reader_reads_the_forms_the_docs_use(tmp_path):
    doc = tmp_path / "a.md"
    doc.write_text("see [p](privacy.md) §5–6, §12 and docs/tasks.md §8; here §2; `bench` §5; b.md §1 or §3\n")
    got = [(t.name if t else None, s) for _, t, s, _ in references(doc)]
    assert got == [("privacy.md", "5"), ("privacy.md", "6"), ("privacy.md", "12"), ("tasks.md", "8"), ("a.md", "2"),
                   (None, "5"), ("b.md", "1"), ("b.md", "3")]


def test_the_component_tables_are_the_registrys(capsys):
    """A table that differs is named; ``python -m asyncfl.components.doc_tables`` rewrites it."""
    assert doc_tables.main(["--check", "--root", str(ROOT)]) == 0, capsys.readouterr().err


def test_a_stale_table_is_found_and_rewritten(tmp_path, capsys):
    for relative in doc_tables.TABLES:
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text((ROOT / relative).read_text(encoding="utf-8").replace("`momentum`, ", "", 1))
    assert doc_tables.main(["--check", "--root", str(tmp_path)]) == 1
    assert "docs/architecture.md: differs from the registry" in capsys.readouterr().err
    assert doc_tables.main(["--root", str(tmp_path)]) == 0
    assert doc_tables.main(["--check", "--root", str(tmp_path)]) == 0
    for relative in doc_tables.TABLES:
        assert (tmp_path / relative).read_text() == (ROOT / relative).read_text()


def test_the_tables_list_every_kind_and_its_builtins():
    table = doc_tables.builtin_table()
    for kind in KINDS.values():
        row = next(line for line in table.splitlines() if line.startswith(f"| `{kind.name}` |"))
        assert all(f"`{name}`" in row for name in doc_tables.builtin_names(kind.name)), row
    assert "`chain`" in table and "`hook`" in table and "`noise`" in table


@pytest.mark.parametrize("kind", [k for k in KINDS.values() if not k.whole_section], ids=lambda k: k.field)
def test_scenario_md_names_exactly_the_builtin_components_of_each_kind(kind):
    """The row of ``kind.field`` lists its alternatives as `` `a` \\| `b` (…) \\| `c` ``: the first
    name in each alternative, together, are the built-ins."""
    rows = [line for line in (DOCS / "scenario.md").read_text(encoding="utf-8").splitlines()
            if line.startswith(f"| `{kind.field}` |")]
    assert len(rows) == 1, kind.field
    meaning = rows[0].split(" | ")[3]
    named = [re.search(r"`([\w-]+)`", part).group(1) for part in meaning.split("\\|")]
    assert named == doc_tables.builtin_names(kind.name), (kind.field, named)
