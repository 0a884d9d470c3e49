"""The data manifest: checksums, counts, status and verify — on a small BEIR folder written here
and on the real shared data against the manifest the project ships."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from benchmarks import MANIFEST
from harness.cli import app
from harness.data.manifest import (combined_checksum, describe, file_sha256, load_expected, make_manifest, statuses,
                                   write_json_atomic)
from harness.registry import benchmark_variants, get_benchmark_loader

from tests.test_benchmarks import make_beir

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def data_dir(tmp_path: Path) -> Path:
    root = tmp_path / "data"
    make_beir(root / "beir" / "mini")
    return root


def test_file_sha256_matches_hashlib(tmp_path: Path) -> None:
    p = tmp_path / "f.bin"
    payload = bytes(range(256)) * 5000  # > one read chunk boundary is not needed; content matters
    p.write_bytes(payload)
    assert file_sha256(p, chunk=1000) == hashlib.sha256(payload).hexdigest()


def test_combined_checksum_is_order_independent_and_content_sensitive() -> None:
    a = {"x/a": {"sha256": "1"}, "x/b": {"sha256": "2"}}
    b = {"x/b": {"sha256": "2"}, "x/a": {"sha256": "1"}}
    assert combined_checksum(a) == combined_checksum(b)
    assert combined_checksum(a) != combined_checksum({"x/a": {"sha256": "1"}, "x/b": {"sha256": "3"}})


def test_manifest_roundtrip_then_tamper(data_dir: Path, tmp_path: Path) -> None:
    doc = make_manifest(data_dir, ["beir/mini"])
    entry = doc["benchmarks"]["beir/mini"]
    # counts of make_beir's fixture: 3 docs, 2 judged queries (q3 unjudged is dropped), 3 judged pairs
    assert entry["counts"] == {"queries": 2, "judged_queries": 2, "documents": 3, "judged_pairs": 3,
                               "violating_pairs": 0, "pairs": 0}
    assert set(entry["files"]) == {"beir/mini/corpus.jsonl", "beir/mini/queries.jsonl", "beir/mini/qrels/test.tsv"}
    corpus = data_dir / "beir/mini/corpus.jsonl"
    assert entry["files"]["beir/mini/corpus.jsonl"] == {"sha256": file_sha256(corpus), "bytes": corpus.stat().st_size}

    mpath = tmp_path / "manifest.json"
    write_json_atomic(mpath, doc)
    expected = load_expected([mpath])
    loader, name = get_benchmark_loader("beir/mini")
    st = describe(name, loader, data_dir, expected)
    assert st.state == "present" and st.counts == entry["counts"] and st.counts_from == "manifest"
    assert st.checksum == combined_checksum(entry["files"])

    # a changed byte is caught by the checksum; a changed count by --recount
    corpus.write_text(corpus.read_text().replace("Cats purr.", "Cats purr!"), encoding="utf-8")
    st = describe(name, loader, data_dir, expected)
    assert st.state == "modified" and any("corpus.jsonl" in p for p in st.problems)
    with (data_dir / "beir/mini/qrels/test.tsv").open("a") as f:
        f.write("q1\td2\t1\n")
    st = describe(name, loader, data_dir, expected, recount=True)
    assert st.state == "modified"
    assert any("judged_pairs: 4 ≠ expected 3" in p for p in st.problems)
    assert st.counts["judged_pairs"] == 4 and st.counts_from == "loaded"


def test_missing_and_unlisted(data_dir: Path) -> None:
    loader, name = get_benchmark_loader("beir/absent")
    st = describe(name, loader, data_dir, {})
    assert st.state == "missing" and len(st.missing) == 3 and st.checksum == ""
    loader, name = get_benchmark_loader("beir/mini")
    assert describe(name, loader, data_dir, {}).state == "unlisted"


def test_load_expected_rejects_bad_manifest(tmp_path: Path) -> None:
    bad = tmp_path / "m.json"
    bad.write_text('{"schema": 1, "benchmarks": [', encoding="utf-8")
    with pytest.raises(ValueError, match=r"m.json:1: invalid manifest JSON"):
        load_expected([bad])
    bad.write_text('{"schema": 99, "benchmarks": {}}', encoding="utf-8")
    with pytest.raises(ValueError, match="not a schema-1"):
        load_expected([bad])


def test_cli_verify_exit_codes(data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    mpath = tmp_path / "manifest.json"
    runner = CliRunner()
    res = runner.invoke(app, ["data", "manifest", "beir/mini", "--data-dir", str(data_dir), "--out", str(mpath)])
    assert res.exit_code == 0, res.output
    monkeypatch.setattr("harness.data.manifest.manifest_paths", lambda: [mpath])
    res = runner.invoke(app, ["data", "verify", "beir/mini", "--data-dir", str(data_dir), "--recount"])
    assert res.exit_code == 0, res.output
    assert "1 of 1 verified" in res.output
    (data_dir / "beir/mini/queries.jsonl").write_text('{"_id": "q1", "text": "changed"}\n', encoding="utf-8")
    res = runner.invoke(app, ["data", "verify", "beir/mini", "--data-dir", str(data_dir)])
    assert res.exit_code == 1 and "MODIFIED" in res.output.upper()
    # an explicitly named benchmark that is absent fails too
    res = runner.invoke(app, ["data", "verify", "beir/absent", "--data-dir", str(data_dir)])
    assert res.exit_code == 1 and "MISSING" in res.output


def test_status_json_lists_every_variant(data_dir: Path) -> None:
    res = CliRunner().invoke(app, ["data", "status", "--json", "--data-dir", str(data_dir)])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)["benchmarks"]}
    variants = [n for n, loader, _ in benchmark_variants() if loader is not None]
    assert set(variants) <= set(rows)
    assert rows["beir/scifact"]["state"] == "missing" and rows["beir/scifact"]["license"] == "CC BY-NC 2.0"
    assert {"nevir", "nevir:train", "diag/antonym", "diag/negation", "diag/exclusion"} <= set(rows)


# ---------------------------------------------------------------------------------------------
# the shipped manifest against the real shared data


@pytest.mark.skipif(not DATA.is_dir(), reason=f"shared data not found at {DATA}")
def test_shipped_manifest_matches_shared_data() -> None:
    expected = load_expected([MANIFEST])
    assert expected, "benchmarks/manifest.json lists no benchmark"
    rows = {s.name: s for s in statuses(DATA, expected=expected)}
    for name, entry in expected.items():
        st = rows.get(name)
        if st is None or st.state == "missing":
            continue  # the manifest may list releases this data directory lacks
        assert st.state == "present", (name, st.problems)
        assert st.counts == entry["counts"]
    # the headline counts of the shared data README
    assert expected["nevir"]["counts"]["pairs"] == 1383
    assert expected["negconstraint"]["counts"]["queries"] == 366
    assert expected["negconstraint"]["counts"]["judged_queries"] == 198
    assert expected["beir/scifact"]["counts"]["judged_queries"] == 300
