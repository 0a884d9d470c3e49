"""The per-query downloads of a real board: bm25 and the chance retriever (two seeds) run through the
CLI on a BEIR folder, the site rendered from the store. Each result's values are written as
gzip-compressed CSV and JSON whose parsed figures equal the store's bit for bit; every page links
files that exist; a render into the same folder removes the downloads of a result no longer shown.
The size of a full board per result is measured by ``python -m tests.perf.site``."""

from __future__ import annotations

import csv
import datetime
import gzip
import io
import json
import struct
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from harness.store.results import Store
from reports import render_site
from reports.compare import compare
from reports.pages import downloads
from reports.pages.page import Site
from reports.text import slugify
from tests.dom import parse
from tests.test_cli import invoke, make_beir


@pytest.fixture
def board(tmp_path: Path, home: Path) -> tuple[Path, Store]:
    data = make_beir(tmp_path / "tiny-med")
    assert invoke("run", "bm25", "--benchmark", str(data), "--k", "5").exit_code == 0
    assert invoke("run", "random", "--benchmark", str(data), "--k", "5", "--seeds", "2").exit_code == 0
    store = Store(home / "results.sqlite")
    out = tmp_path / "site"
    render_site(store, out)
    yield out, store
    store.close()


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


def links_of(out: Path, page: Path) -> list[str]:
    root = parse(page.read_text(encoding="utf-8"))
    return [a.attrs["href"] for a in root.iter("a") if "download" in a.classes
            and a.attrs.get("data-format") in ("csv", "json")]


def test_per_query_downloads_equal_the_store_bit_for_bit(board) -> None:
    out, store = board
    recs = store.results()
    assert len(recs) == 3
    site = Site(out, store, compare(store), "board", datetime.datetime.now(datetime.timezone.utc))  # its page names
    for rec in recs:
        stored = store.per_query(int(rec.id))
        assert stored and all(stored.values())
        links = downloads.query_links(site, rec)
        assert links["csv"].endswith("-queries.csv.gz") and links["json"].endswith("-queries.json.gz")
        raw_csv, raw_json = ((out / links[k]).read_bytes() for k in ("csv", "json"))
        assert raw_csv[:2] == raw_json[:2] == b"\x1f\x8b"  # gzip
        rows = list(csv.DictReader(io.StringIO(gzip.decompress(raw_csv).decode("utf-8"))))
        data = json.loads(gzip.decompress(raw_json))
        qids = sorted({q for col in stored.values() for q in col})
        assert [r["query"] for r in rows] == [r["query"] for r in data["rows"]] == qids
        assert data["columns"] == ["query", *sorted(stored)] == list(rows[0])
        assert "unrounded" in data["values"]  # the precision the file declares
        assert data["result"]["seed"] == rec.seed and data["result"]["retriever"] == rec.label
        assert data["result"]["means"] == {m: rec.measures[m].mean for m in stored if m in rec.measures}
        for m, col in stored.items():
            for row, jrow in zip(rows, data["rows"]):
                want = col.get(row["query"])
                if want is None:
                    assert row[m] == "" and jrow[m] is None
                else:
                    assert bits(float(row[m])) == bits(want) and bits(jrow[m]) == bits(want), (m, row["query"])


def test_every_page_links_files_that_exist(board) -> None:
    out, store = board
    pages = sorted(out.rglob("*.html"))
    seen: set[Path] = set()
    for page in pages:
        root = parse(page.read_text(encoding="utf-8"))
        for node in root.iter():
            for attr in ("href", "src"):
                ref = node.attrs.get(attr)
                if not ref or urlsplit(ref).scheme or ref.startswith("#"):
                    continue
                target = (page.parent / unquote(urlsplit(ref).path)).resolve()
                assert target.is_file(), f"{page.relative_to(out)} links {ref}, which is not there"
                seen.add(target)
    written = {p.resolve() for p in out.rglob("*-queries.*.gz")}
    assert len(written) == 2 * len(store.results())
    assert written <= seen  # every per-query download is linked from a page
    # each result's files are linked from its drill-down, its retriever page and its benchmark page
    for rec in store.results():
        pages_linking = [p for p in pages if any(h.endswith(f"seed{rec.seed}-queries.csv.gz")
                                                 and f"/{_slug(rec.label)}/" in f"/{h}" for h in links_of(out, p))]
        assert len(pages_linking) >= 3, rec.label


def _slug(label: str) -> str:
    return slugify(label, set())


def test_a_later_render_removes_the_downloads_of_a_result_no_longer_shown(board, tmp_path: Path) -> None:
    out, store = board
    gone = next(r for r in store.results() if r.label == "random" and r.seed == 1)
    before = sorted(p.relative_to(out) for p in out.rglob("*-queries.*.gz"))
    render_site(store, out, include=lambda r: r.key != gone.key)
    after = sorted(p.relative_to(out) for p in out.rglob("*-queries.*.gz"))
    assert len(after) == len(before) - 2
    assert [p for p in before if p not in after] and all("seed1" in str(p) for p in before if p not in after)
