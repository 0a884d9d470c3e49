"""The documents in ``docs/``: the generated reference tables are current, and every ``docs/…`` path
a module, a test or a top-level page cites exists (with the heading its ``#anchor`` names)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from harness.record import docs_tables

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
CODE_DIRS = ("harness", "retrievers", "benchmarks", "reports", "tests")
TOP_PAGES = ("README.md", "ARCHITECTURE.md")
# a cited path: docs/<path> with an optional #anchor (a heading's GitHub slug)
CITED = re.compile(r"(?<![\w./-])(docs/[\w./-]*[\w/-])(#[\w-]+)?")
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
FENCE = re.compile(r"^```.*?^```", re.M | re.S)


def slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(h) for h in HEADING.findall(text)}


def citing_files() -> list[Path]:
    files = [p for d in CODE_DIRS for p in sorted((ROOT / d).rglob("*.py"))]
    return files + [ROOT / p for p in TOP_PAGES if (ROOT / p).exists()]


def citations() -> list[tuple[str, str, str]]:
    """(citing file, cited path, anchor or "") for every ``docs/…`` citation."""
    out = []
    for f in citing_files():
        for m in CITED.finditer(f.read_text(encoding="utf-8")):
            out.append((str(f.relative_to(ROOT)), m.group(1).rstrip("/."), (m.group(2) or "")[1:]))
    return out


def test_the_reference_tables_are_current() -> None:
    stale = [name for name, text in docs_tables.render().items()
             if not (DOCS / "reference" / name).exists()
             or (DOCS / "reference" / name).read_text(encoding="utf-8") != text]
    assert not stale, f"docs/reference/{', '.join(stale)} not what the registry says: run `make docs`"


def test_the_tables_are_deterministic() -> None:
    first, second = docs_tables.render(), docs_tables.render()
    assert first == second
    for text in first.values():
        assert str(ROOT) not in text and str(Path.home()) not in text


def test_the_tables_list_every_registered_name() -> None:
    from harness import measures, registry

    pages = docs_tables.render()
    ours = {ep.name for ep in docs_tables._own_entry_points(registry.RETRIEVER_GROUP)}
    assert ours and all(f"| `{n}` |" in pages["retrievers.md"] for n in ours)
    assert all(f"`{c.family}@k`" in pages["measures.md"] or f"`{c.family}`" in pages["measures.md"]
               for c in measures.families())
    assert "| `nevir` |" in pages["benchmarks.md"]


def test_citations_are_found() -> None:
    cited = citations()
    assert cited, "no docs/ citation found: the pattern is wrong"
    assert ("x", "docs/design/types.md", "") in [("x", p, a) for _, p, a in cited]


@pytest.mark.parametrize("citing,path,anchor", citations(), ids=lambda v: str(v))
def test_every_cited_document_exists(citing: str, path: str, anchor: str) -> None:
    target = ROOT / path
    assert target.exists(), f"{citing} cites {path}, which is not in the repository"
    if anchor:
        assert target.is_file() and anchor in anchors(target), \
            f"{citing} cites {path}#{anchor}, which is no heading of {path}"


def test_no_document_outside_the_repository_is_cited() -> None:
    bad = [str(f.relative_to(ROOT)) for f in ROOT.joinpath("docs").rglob("*.md")
           if re.search(r"DESIGN\.md|METHODS\.md|shared/docs", f.read_text(encoding="utf-8"))]
    bad += [p for p in TOP_PAGES if re.search(r"DESIGN\.md|METHODS\.md|shared/docs",
                                              (ROOT / p).read_text(encoding="utf-8"))]
    bad += [str(f.relative_to(ROOT)) for f in citing_files() if f.name != "test_docs.py"
            and re.search(r"DESIGN\.md|METHODS\.md", f.read_text(encoding="utf-8"))]
    assert not bad, f"cite a page of docs/ instead: {bad}"


def test_links_between_the_pages_resolve() -> None:
    broken = []
    for page in sorted(DOCS.rglob("*.md")):
        text = FENCE.sub("", page.read_text(encoding="utf-8"))
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):
                continue  # a URL
            rel, _, anchor = target.partition("#")
            dest = (page.parent / rel).resolve() if rel else page
            if not dest.exists():
                broken.append(f"{page.relative_to(ROOT)} → {target}")
            elif anchor and dest.is_file() and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(ROOT)} → {target} (no such heading)")
    assert not broken, broken
