"""Benchmark loaders: real counts on the shared data, strictness on small fixtures in the real
formats, the online paths with fake modules (no network), and the registry wiring."""

from __future__ import annotations

import json
import re
import sys
import types
from collections import Counter, namedtuple
from pathlib import Path

import pytest

from benchmarks.beir import BeirBenchmark, BeirFolder
from benchmarks.diagnostics import AntonymDiagnostic
from benchmarks.negconstraint import NegConstraint
from benchmarks.nevir import NevIR
from benchmarks.suites import SUITES
from harness.data import DataError, MissingDataError
from harness.types import Benchmark

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _need(*files: str) -> pytest.MarkDecorator:
    missing = [f for f in files if not (DATA / f).exists()]
    where = ", ".join(str(DATA / f) for f in missing)
    return pytest.mark.skipif(bool(missing), reason=f"shared data not found: {where}")


NEVIR = _need("nevir/test.jsonl")
NEGC = _need("negconstraint/corpus.jsonl", "negconstraint/queries.jsonl", "negconstraint/qrels/test.tsv")
ANTONYM = _need("diag/antonym/corpus_antonym.jsonl", "diag/antonym/queries_antonym.jsonl")
SCIFACT = _need("beir/scifact/corpus.jsonl", "beir/scifact/queries.jsonl", "beir/scifact/qrels/test.tsv")


# ---------------------------------------------------------------------------------------------
# helpers


def write_jsonl(path: Path, rows: list[dict | str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def make_beir(root: Path, corpus: list | None = None, queries: list | None = None,
              qrels: list[str] | None = None, header: bool = True) -> Path:
    corpus = corpus if corpus is not None else [
        {"_id": "d1", "title": "Cats", "text": "Cats purr."},
        {"_id": "d2", "title": "Dogs", "text": "Dogs bark."},
        {"_id": "d3", "text": "Birds sing."},
    ]
    queries = queries if queries is not None else [
        {"_id": "q1", "text": "purring animals"},
        {"_id": "q2", "text": "barking animals"},
        {"_id": "q3", "text": "an unjudged query"},
    ]
    qrels = qrels if qrels is not None else ["q1\td1\t1", "q2\td2\t2", "q2\td3\t0"]
    write_jsonl(root / "corpus.jsonl", corpus)
    write_jsonl(root / "queries.jsonl", queries)
    (root / "qrels").mkdir(parents=True, exist_ok=True)
    lines = (["query-id\tcorpus-id\tscore"] if header else []) + qrels
    (root / "qrels" / "test.tsv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def nevir_row(pid: str, q1: str = "Who liked it?", d1: str = "He liked it.",
              q2: str = "Who did not like it?", d2: str = "He did not like it.") -> dict:
    return {"id": pid, "WorkerId": 1, "q1": q1, "doc1": d1, "q2": q2, "doc2": d2}


def label_row(qid: str, category: str = "A - a") -> dict:
    return {"query_id": qid, "textual_semantic_formulation": category,
            "paper_count_aligned_best_fit_formulation": category}


def check_common(b: Benchmark) -> None:
    """Invariants every loaded benchmark must satisfy."""
    qids = {q.id for q in b.queries}
    assert len(qids) == len(b.queries)
    assert set(b.judgments.relevance) <= qids
    for docs in b.judgments.relevance.values():
        assert all(d in b.corpus for d in docs)
    for qid, docs in b.judgments.violating.items():
        assert all(d in b.corpus and b.judgments.relevance[qid][d] < b.relevance_threshold for d in docs)
    assert re.fullmatch(r"[0-9a-f]{16}", b.version)
    assert b.source and b.license and b.description
    eval_ids = [q.id for q in b.eval_queries]
    assert sorted(sum(b.splits.values(), [])) == sorted(eval_ids)


# ---------------------------------------------------------------------------------------------
# NevIR


@pytest.fixture(scope="module")
def nevir() -> Benchmark:
    return NevIR.load("nevir", DATA)


@NEVIR
def test_nevir_counts(nevir: Benchmark) -> None:
    check_common(nevir)
    assert nevir.name == "nevir" and nevir.task == "constraint" and nevir.relevance_threshold == 2
    assert len(nevir.pairs) == 1383
    assert len(nevir.queries) == 2766
    assert len(nevir.corpus) == 2081
    assert nevir.notes["documents_raw"] == 2766 and nevir.notes["documents_merged"] == 685
    assert nevir.notes["shared_texts"] == 681
    assert "2,766 → 2,081" in nevir.description
    assert list(nevir.splits) == ["test"] and len(nevir.splits["test"]) == 2766
    assert nevir.default_measures == ("Sat@10", "PairAcc", "V@2", "FVR@10", "nDCG@10", "R@10", "TR@5")
    # no two documents share a text any more
    assert len({d.text for d in nevir.corpus}) == len(nevir.corpus)


@NEVIR
def test_nevir_judgments_and_pairs(nevir: Benchmark) -> None:
    rel, vio = nevir.judgments.relevance, nevir.judgments.violating
    for q in nevir.queries:
        grades = sorted(rel[q.id].values())
        assert grades == [0, 2], q.id
        bad = [d for d, g in rel[q.id].items() if g == 0]
        assert vio[q.id] == frozenset(bad)
    seen: set[str] = set()
    for p in nevir.pairs:
        assert p.d1 != p.d2
        assert rel[p.q1] == {p.d1: 2, p.d2: 0} and rel[p.q2] == {p.d2: 2, p.d1: 0}
        assert vio[p.q1] == {p.d2} and vio[p.q2] == {p.d1}
        assert (p.q1, p.q2) == (f"nevir_q_{p.id}_1", f"nevir_q_{p.id}_2")
        seen |= {p.q1, p.q2}
    assert seen == {q.id for q in nevir.queries}
    metas = {q.id: q.meta for q in nevir.queries}
    assert metas["nevir_q_1230-2_2"]["pair_id"] == "1230-2" and metas["nevir_q_1230-2_2"]["position"] == 2


@NEVIR
def test_nevir_canonical_ids_are_first_in_file_order(nevir: Benchmark) -> None:
    first: dict[str, str] = {}
    with open(DATA / "nevir/test.jsonl", encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            for k in ("1", "2"):
                first.setdefault(row[f"doc{k}"], f"nevir_doc_{row['id']}_{k}")
    for p in nevir.pairs:
        assert nevir.corpus.get(p.d1).id == first[nevir.corpus.get(p.d1).text]
        assert nevir.corpus.get(p.d2).id == first[nevir.corpus.get(p.d2).text]
    assert nevir.corpus.ids == list(dict.fromkeys(first.values()))


@NEVIR
@pytest.mark.skipif(not (DATA / "nevir/coder/pairs/test.json").exists(), reason="CoDeR pair file absent")
def test_nevir_ids_match_coder_scheme(nevir: Benchmark) -> None:
    coder = json.loads((DATA / "nevir/coder/pairs/test.json").read_text(encoding="utf-8"))
    assert {(c["q1_id"], c["q2_id"]) for c in coder} == {(p.q1, p.q2) for p in nevir.pairs}


@NEVIR
def test_nevir_without_dedup_and_version(nevir: Benchmark) -> None:
    raw = NevIR.load("nevir", DATA, dedup=False)
    assert len(raw.corpus) == 2766 and raw.version != nevir.version
    assert NevIR.load("nevir:test", DATA).version == nevir.version  # alias, same content hash
    assert NevIR.load("nevir", DATA).name == "nevir"


@_need("nevir/train.jsonl")
def test_nevir_train_split() -> None:
    b = NevIR.load("nevir:train", DATA)
    check_common(b)
    assert b.name == "nevir:train" and list(b.splits) == ["train"]
    assert len(b.pairs) == 948 and len(b.queries) == 1896 and len(b.corpus) == 1421


def test_nevir_missing_split_and_bad_name(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError) as e:
        NevIR.load("nevir:dev", tmp_path)
    assert "nevir/dev.jsonl" in str(e.value) and "orionweller/NevIR" in str(e.value)
    with pytest.raises(ValueError):
        NevIR.info("nevir:bogus")


def test_nevir_malformed(tmp_path: Path) -> None:
    path = tmp_path / "nevir" / "test.jsonl"
    write_jsonl(path, [nevir_row("1"), "{broken", nevir_row("3")])
    with pytest.raises(DataError, match=r"test\.jsonl:2: invalid JSON"):
        NevIR.load("nevir", tmp_path)

    bad = nevir_row("2")
    del bad["doc2"]
    write_jsonl(path, [nevir_row("1"), bad])
    with pytest.raises(DataError, match=r"test\.jsonl:2: missing field 'doc2'"):
        NevIR.load("nevir", tmp_path)

    write_jsonl(path, [nevir_row("1"), nevir_row("1", d1="Other.", d2="Other, not.")])
    with pytest.raises(DataError, match=r"test\.jsonl:2: duplicate pair id '1' \(first seen on line 1\)"):
        NevIR.load("nevir", tmp_path)

    write_jsonl(path, [nevir_row("1"), nevir_row("2", d1="Same text.", d2="Same text.")])
    with pytest.raises(DataError, match=r"test\.jsonl:2: pair '2': doc1 and doc2 have the same text"):
        NevIR.load("nevir", tmp_path)


def test_nevir_dedup_on_fixture(tmp_path: Path) -> None:
    # pair 2 reuses pair 1's doc2 as its doc1: the copy folds onto nevir_doc_1_2
    write_jsonl(tmp_path / "nevir" / "test.jsonl", [
        nevir_row("1"), nevir_row("2", d1="He did not like it.", d2="He hated it."),
    ])
    b = NevIR.load("nevir", tmp_path)
    assert b.corpus.ids == ["nevir_doc_1_1", "nevir_doc_1_2", "nevir_doc_2_2"]
    assert b.pairs[1].d1 == "nevir_doc_1_2"
    assert b.judgments.relevance["nevir_q_2_1"] == {"nevir_doc_1_2": 2, "nevir_doc_2_2": 0}
    assert b.notes["documents_merged"] == 1


def test_nevir_online_with_fake_datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple] = []

    def load_dataset(name: str, split: str) -> list[dict]:
        calls.append((name, split))
        return [nevir_row("7"), nevir_row("8", d1="She came.", d2="She did not come.")]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    b = NevIR.load("nevir:dev", tmp_path, online=True)
    assert calls == [("orionweller/NevIR", "validation")]
    assert b.name == "nevir:dev" and len(b.pairs) == 2 and len(b.corpus) == 4


# ---------------------------------------------------------------------------------------------
# NegConstraint


@pytest.fixture(scope="module")
def negc() -> Benchmark:
    return NegConstraint.load("negconstraint", DATA)


@NEGC
def test_negconstraint_counts(negc: Benchmark) -> None:
    check_common(negc)
    assert negc.task == "constraint" and negc.relevance_threshold == 1
    assert len(negc.queries) == 366 and len(negc.corpus) == 3946
    assert len(negc.eval_queries) == 198 and negc.notes["judged_queries"] == 198
    assert len(negc.splits["test"]) == 198
    assert "judges 198 of 366 queries" in negc.description
    assert negc.judgments.violating == {}
    # every judged query has exactly one relevant document in this release
    assert Counter(len(v) for v in negc.judgments.relevance.values()) == {1: 198}
    # 39 documents repeat an earlier document's text (queries 156/157 have a tie at the top)
    assert negc.notes["duplicate_document_texts"] == 39


@NEGC
@pytest.mark.skipif(not (DATA / "negconstraint/labels/query_labels_combined.jsonl").exists(), reason="labels absent")
def test_negconstraint_categories(negc: Benchmark) -> None:
    assert all("category" in q.meta and "category_textual" in q.meta for q in negc.queries)
    paper = Counter(q.meta["category"] for q in negc.queries)
    textual = Counter(q.meta["category_textual"] for q in negc.queries)
    assert paper == {"A - a": 136, "(A - a) ∪ B": 123, "(A - a) ∪ (B - b)": 107}
    assert textual == {"A - a": 132, "(A - a) ∪ B": 90, "(A - a) ∪ (B - b)": 144}
    judged = Counter(q.meta["category"] for q in negc.eval_queries)
    assert judged == {"A - a": 71, "(A - a) ∪ B": 83, "(A - a) ∪ (B - b)": 44}
    assert negc.notes["category_counts"] == dict(paper)

    summary = DATA / "negconstraint/labels/label_summary.md"
    if summary.exists():  # cross-check: section 1 = textual reading, section 2 = paper-aligned
        stated = re.findall(r"^- (.+?): (\d+) queries$", summary.read_text(encoding="utf-8"), re.M)
        assert len(stated) == 6
        assert {k: int(n) for k, n in stated[:3]} == textual
        assert {k: int(n) for k, n in stated[3:]} == paper


def test_negconstraint_fixture_header_and_labels(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "negconstraint", header=False)
    b = NegConstraint.load("negconstraint", tmp_path)
    assert len(b.queries) == 3 and len(b.eval_queries) == 2  # unjudged q3 kept, not scored
    assert b.notes["labelled_queries"] == 0 and all(not q.meta for q in b.queries)

    write_jsonl(root / "labels" / "query_labels_combined.jsonl", [label_row("q1")])
    b = NegConstraint.load("negconstraint", tmp_path)
    assert b.queries[0].meta == {"category": "A - a", "category_textual": "A - a"}
    assert b.queries[1].meta == {}

    write_jsonl(root / "labels" / "query_labels_combined.jsonl", [label_row("q9")])
    with pytest.raises(DataError, match=r"query_labels_combined\.jsonl:1: label for unknown query 'q9'"):
        NegConstraint.load("negconstraint", tmp_path)


def test_negconstraint_missing(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError) as e:
        NegConstraint.load("negconstraint", tmp_path, online=True)
    msg = str(e.value)
    assert "negconstraint/qrels/test.tsv" in msg and "NS-IR-main" in msg


# ---------------------------------------------------------------------------------------------
# diag/antonym


@ANTONYM
def test_antonym_counts() -> None:
    b = AntonymDiagnostic.load("diag/antonym", DATA)
    check_common(b)
    assert b.task == "constraint" and b.relevance_threshold == 2
    # 90 queries (q-0 … q-89); `wc -l` says 89 because the last line has no newline
    assert len(b.queries) == 90 and len(b.corpus) == 210
    rel = b.judgments.relevance
    assert Counter(g for r in rel.values() for g in r.values()) == {2: 90, 1: 240, 0: 90}
    assert all(len(b.judgments.relevant(q.id, 2)) == 1 for q in b.queries)
    assert all(len(b.judgments.violating[q.id]) == 1 for q in b.queries)
    assert b.judgments.n_violating_pairs() == 90
    assert {q.meta["category"] for q in b.queries} == {"antonym"}


def _antonym_fixture(root: Path, violating: list[str]) -> None:
    write_jsonl(root / "corpus_antonym.jsonl", [{"doc_id": "doc-0", "text": "A."}, {"doc_id": "doc-1", "text": "B."}])
    write_jsonl(root / "queries_antonym.jsonl", [{
        "query_id": "q-0", "query": "Find A.", "category": "antonym",
        "topical_relevant_doc_ids": ["doc-0", "doc-1"], "constraint_satisfying_doc_ids": ["doc-0"],
        "constraint_violating_doc_ids": violating, "graded_relevance": {"doc-0": 2.0, "doc-1": 0.0},
    }])


def test_antonym_malformed(tmp_path: Path) -> None:
    root = tmp_path / "diag" / "antonym"
    _antonym_fixture(root, ["doc-1"])
    b = AntonymDiagnostic.load("diag/antonym", tmp_path)
    assert b.judgments.relevance == {"q-0": {"doc-0": 2, "doc-1": 0}} and b.judgments.violating["q-0"] == {"doc-1"}

    _antonym_fixture(root, ["doc-9"])
    with pytest.raises(DataError, match=r"queries_antonym\.jsonl:1: field 'constraint_violating_doc_ids' "
                                        r"names unknown document 'doc-9'"):
        AntonymDiagnostic.load("diag/antonym", tmp_path)

    _antonym_fixture(root, ["doc-0"])  # listed as violating but graded 2
    with pytest.raises(DataError, match=r"queries_antonym\.jsonl:1: .*'doc-0'"):
        AntonymDiagnostic.load("diag/antonym", tmp_path)


# ---------------------------------------------------------------------------------------------
# BEIR


@SCIFACT
def test_scifact_counts() -> None:
    b = BeirBenchmark.load("beir/scifact", DATA)
    check_common(b)
    assert b.name == "beir/scifact" and b.task == "topical" and b.relevance_threshold == 1
    assert b.default_measures == ("nDCG@10", "MAP@10", "R@100")
    assert len(b.corpus) == 5183 and len(b.queries) == 300
    qrels_lines = [ln for ln in (DATA / "beir/scifact/qrels/test.tsv").read_text().splitlines()[1:] if ln.strip()]
    assert len(qrels_lines) == 339 and b.judgments.n_judged_pairs() == 339
    assert b.notes["queries_in_source"] == 1409
    assert b.license == "CC BY-NC 2.0" and "beir/scifact/test" in b.source
    assert b.corpus.get("4983").title.startswith("Microstructural development")
    # online=True does not fetch when the local files are there
    assert "online_source" not in BeirBenchmark.load("beir/scifact", DATA, online=True).notes


def test_beir_info_and_names() -> None:
    info = BeirBenchmark.info("beir/cqadupstack/android")
    assert info.files == ["beir/cqadupstack/android/corpus.jsonl", "beir/cqadupstack/android/queries.jsonl",
                          "beir/cqadupstack/android/qrels/test.tsv"]
    assert "'beir/cqadupstack/android'" in info.source and "cqadupstack.zip" in info.source
    assert "'beir/scifact/test'" in BeirBenchmark.info("beir/scifact").source
    assert "'beir/arguana'" in BeirBenchmark.info("beir/arguana").source
    assert BeirBenchmark.info("beir/scifact:train").files[-1] == "beir/scifact/qrels/train.tsv"
    assert "'beir/scifact/train'" in BeirBenchmark.info("beir/scifact:train").source
    for bad in ("beir/", "beir/../x", "scifact", "beir/a//b", "beir/a:b:c", "beir/a:"):
        with pytest.raises(ValueError):
            BeirBenchmark.info(bad)


def test_beir_local_fixture_and_version(tmp_path: Path) -> None:
    make_beir(tmp_path / "beir" / "toy")
    a = BeirBenchmark.load("beir/toy", tmp_path)
    b = BeirBenchmark.load("beir/toy", tmp_path)
    check_common(a)
    assert [q.id for q in a.queries] == ["q1", "q2"]  # unjudged q3 dropped, as in BEIR
    assert a.judgments.relevance == {"q1": {"d1": 1}, "q2": {"d2": 2, "d3": 0}}
    assert a.corpus.get("d3").title == ""
    assert a.version == b.version
    make_beir(tmp_path / "beir" / "toy", corpus=[
        {"_id": "d1", "title": "Cats", "text": "Cats purr loudly."},
        {"_id": "d2", "title": "Dogs", "text": "Dogs bark."},
        {"_id": "d3", "text": "Birds sing."},
    ])
    assert BeirBenchmark.load("beir/toy", tmp_path).version != a.version


@pytest.mark.parametrize("case, file, pattern", [
    ("bad_json", "corpus.jsonl", r"corpus\.jsonl:2: invalid JSON"),
    ("dup_doc", "corpus.jsonl", r"corpus\.jsonl:2: duplicate document id 'd1' \(first seen on line 1\)"),
    ("dup_query", "queries.jsonl", r"queries\.jsonl:2: duplicate query id 'q1'"),
    ("missing_field", "corpus.jsonl", r"corpus\.jsonl:2: missing field 'text'"),
    ("unknown_doc", "test.tsv", r"test\.tsv:3: qrel of query 'q2' names unknown document 'nope'"),
    ("unknown_query", "test.tsv", r"test\.tsv:2: qrel names unknown query 'qx'"),
    ("bad_score", "test.tsv", r"test\.tsv:2: field 'score' is not a number"),
    ("conflict", "test.tsv", r"test\.tsv:3: conflicting grades"),
])
def test_beir_malformed(tmp_path: Path, case: str, file: str, pattern: str) -> None:
    root = tmp_path / "beir" / "bad"
    docs = [{"_id": "d1", "text": "a"}, {"_id": "d2", "text": "b"}]
    queries = [{"_id": "q1", "text": "x"}, {"_id": "q2", "text": "y"}]
    qrels = ["q1\td1\t1", "q2\td2\t1"]
    if case == "bad_json":
        docs[1] = '{"_id": "d2", "text": '
    elif case == "dup_doc":
        docs[1] = {"_id": "d1", "text": "b"}
    elif case == "dup_query":
        queries[1] = {"_id": "q1", "text": "y"}
    elif case == "missing_field":
        docs[1] = {"_id": "d2", "body": "b"}
    elif case == "unknown_doc":
        qrels[1] = "q2\tnope\t1"
    elif case == "unknown_query":
        qrels[0] = "qx\td1\t1"
    elif case == "bad_score":
        qrels[0] = "q1\td1\thigh"
    elif case == "conflict":
        qrels[1] = "q1\td1\t2"
    make_beir(root, docs, queries, qrels)
    with pytest.raises(DataError, match=pattern) as e:
        BeirBenchmark.load("beir/bad", tmp_path)
    assert e.value.path.endswith(file) and str(root) in e.value.path


def test_beir_missing_files(tmp_path: Path) -> None:
    (tmp_path / "beir" / "nfcorpus").mkdir(parents=True)
    (tmp_path / "beir" / "nfcorpus" / "corpus.jsonl").write_text("")
    with pytest.raises(MissingDataError) as e:
        BeirBenchmark.load("beir/nfcorpus", tmp_path)
    msg = str(e.value)
    assert "beir/nfcorpus/queries.jsonl" in msg and "beir/nfcorpus/qrels/test.tsv" in msg
    assert "beir/nfcorpus/test" in msg and "nfcorpus.zip" in msg
    assert e.value.missing == ["beir/nfcorpus/queries.jsonl", "beir/nfcorpus/qrels/test.tsv"]


Doc = namedtuple("Doc", "doc_id text title")
GenericDoc = namedtuple("GenericDoc", "doc_id text")
GenericQuery = namedtuple("GenericQuery", "query_id text")
TrecQrel = namedtuple("TrecQrel", "query_id doc_id relevance iteration")


class FakeDataset:
    def __init__(self, docs: list, queries: list, qrels: list):
        self._d, self._q, self._r = docs, queries, qrels

    def docs_iter(self):
        return iter(self._d)

    def queries_iter(self):
        return iter(self._q)

    def qrels_iter(self):
        return iter(self._r)


def fake_ir_datasets(known: dict[str, FakeDataset], calls: list[str]) -> types.ModuleType:
    mod = types.ModuleType("ir_datasets")

    def load(ds_id: str) -> FakeDataset:
        calls.append(ds_id)
        if ds_id not in known:
            raise KeyError(ds_id)
        return known[ds_id]

    mod.load = load  # type: ignore[attr-defined]
    return mod


def test_beir_online_converts_ir_datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scifact = FakeDataset(
        [Doc("10", "Alpha text.", "Alpha"), Doc("11", "Beta text.", "Beta"), Doc("12", "Gamma.", "")],
        [GenericQuery("1", "alpha?"), GenericQuery("2", "beta?"), GenericQuery("3", "never judged")],
        [TrecQrel("1", "10", 1, "0"), TrecQrel("2", "11", 1, "0"), TrecQrel("2", "12", 0, "0")],
    )
    arguana = FakeDataset([GenericDoc("a", "arg")], [GenericQuery("qa", "q")], [TrecQrel("qa", "a", 1, "0")])
    calls: list[str] = []
    monkeypatch.setitem(sys.modules, "ir_datasets",
                        fake_ir_datasets({"beir/scifact/test": scifact, "beir/arguana": arguana}, calls))

    b = BeirBenchmark.load("beir/scifact", tmp_path, online=True)
    check_common(b)
    assert calls == ["beir/scifact/test"]
    assert b.corpus.ids == ["10", "11", "12"] and b.corpus.get("10").title == "Alpha"
    assert b.corpus.get("10").full_text == "Alpha. Alpha text."
    assert [(q.id, q.text) for q in b.queries] == [("1", "alpha?"), ("2", "beta?")]
    assert b.judgments.relevance == {"1": {"10": 1}, "2": {"11": 1, "12": 0}}
    assert b.notes["online_source"] == "ir_datasets:beir/scifact/test" and "ir_datasets" in b.source
    assert b.name == "beir/scifact" and b.splits == {"test": ["1", "2"]}

    calls.clear()
    a = BeirBenchmark.load("beir/arguana", tmp_path, online=True)  # no split subset: beir/arguana
    assert calls == ["beir/arguana"] and a.corpus.get("a").title == "" and len(a.queries) == 1

    with pytest.raises(MissingDataError):  # offline: never touches ir_datasets
        BeirBenchmark.load("beir/fiqa", tmp_path)
    with pytest.raises(MissingDataError, match="ir_datasets knows none"):
        BeirBenchmark.load("beir/nfcorpus", tmp_path, online=True)
    calls.clear()
    with pytest.raises(LookupError, match="unknown BEIR dataset 'nosuch'"):  # not asked for a name BEIR lacks
        BeirBenchmark.load("beir/nosuch", tmp_path, online=True)
    assert calls == []

    broken = FakeDataset([Doc("10", "x", "")], [GenericQuery("1", "q")], [TrecQrel("1", "99", 1, "0")])
    monkeypatch.setitem(sys.modules, "ir_datasets", fake_ir_datasets({"beir/scifact/test": broken}, []))
    with pytest.raises(DataError, match=r"ir_datasets:beir/scifact/test qrels:1: .*unknown document '99'"):
        BeirBenchmark.load("beir/scifact", tmp_path, online=True)


def test_beir_folder(tmp_path: Path) -> None:
    root = make_beir(tmp_path / "my-dataset", header=False)
    b = BeirFolder.load(str(root), tmp_path / "ignored")
    check_common(b)
    assert b.name == str(root.resolve()) and b.notes["folder_name"] == "my-dataset"
    assert len(b.corpus) == 3 and len(b.queries) == 2 and b.task == "topical"
    assert b.splits == {"test": ["q1", "q2"]}
    # the version is a content hash: the same files under beir/<name> give the same version
    make_beir(tmp_path / "beir" / "copy", header=True)
    assert BeirBenchmark.load("beir/copy", tmp_path).version == b.version
    info = BeirFolder.info(str(root))
    assert info.name == str(root.resolve()) and all(Path(f).is_absolute() for f in info.files)

    # <path>:<split> reads qrels/<split>.tsv over the same corpus
    (root / "qrels" / "train.tsv").write_text("q3\td3\t1\n", encoding="utf-8")
    t = BeirFolder.load(f"{root}:train")
    assert t.name == f"{root.resolve()}:train" and t.splits == {"train": ["q3"]}
    assert t.corpus.ids == b.corpus.ids and t.version != b.version

    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(MissingDataError) as e:
        BeirFolder.load(str(empty))
    assert str(empty / "corpus.jsonl") in str(e.value) and str(empty / "qrels" / "test.tsv") in str(e.value)
    with pytest.raises(MissingDataError, match=r"qrels/dev\.tsv"):
        BeirFolder.load(f"{root}:dev")


@SCIFACT
def test_scifact_train_split() -> None:
    b = BeirBenchmark.load("beir/scifact:train", DATA)
    check_common(b)
    assert b.name == "beir/scifact:train" and list(b.splits) == ["train"]
    assert len(b.queries) == 809 and b.judgments.n_judged_pairs() == 919 and len(b.corpus) == 5183
    test_ids = {q.id for q in BeirBenchmark.load("beir/scifact", DATA).queries}
    assert not test_ids & {q.id for q in b.queries}


# ---------------------------------------------------------------------------------------------
# info(), suites and the registry


@pytest.mark.skipif(not DATA.is_dir(), reason=f"shared data not found at {DATA}")
@pytest.mark.parametrize("cls, name", [(NevIR, "nevir"), (NegConstraint, "negconstraint"),
                                       (AntonymDiagnostic, "diag/antonym"), (BeirBenchmark, "beir/scifact")])
def test_info_files_exist(cls: type, name: str) -> None:
    info = cls.info(name)
    assert info.name == name and info.source and info.license and info.files
    assert cls.missing_files(name, DATA) == []


def test_suites() -> None:
    assert set(SUITES) == {"demo", "constraint", "topical", "completeness", "all"}
    assert SUITES["demo"]["benchmarks"] == ["nevir", "diag/antonym", "diag/negation", "toolbank/numpy", "limit-small"]
    assert "excluir" in SUITES["constraint"]["benchmarks"] and "toollens" in SUITES["completeness"]["benchmarks"]
    assert SUITES["demo"]["retrievers"] == ["bm25", "dense", "random"]  # random: the chance level
    union = {b for k, s in SUITES.items() if k != "all" for b in s["benchmarks"]}
    assert set(SUITES["all"]["benchmarks"]) == union
    assert all(s["description"] and s["retrievers"] for s in SUITES.values())


def test_registry_resolves_loaders(tmp_path: Path) -> None:
    from harness.registry import get_benchmark_loader, get_suite

    assert get_benchmark_loader("nevir") == (NevIR, "nevir")
    assert get_benchmark_loader("negconstraint")[0] is NegConstraint
    assert get_benchmark_loader("diag/antonym")[0] is AntonymDiagnostic
    assert get_benchmark_loader("beir/scifact") == (BeirBenchmark, "beir/scifact")
    assert get_suite("demo") == SUITES["demo"]
    for name in SUITES["all"]["benchmarks"]:
        get_benchmark_loader(name)
    root = make_beir(tmp_path / "toy")
    assert get_benchmark_loader(str(root)) == (BeirFolder, str(root))
    # a folder benchmark's name resolves back to the folder loader
    assert get_benchmark_loader(BeirFolder.load(str(root)).name)[0] is BeirFolder
    assert get_benchmark_loader("beir/scifact:train")[0] is BeirBenchmark


def test_registry_resolves_nevir_splits() -> None:
    from harness.registry import get_benchmark_loader

    assert get_benchmark_loader("nevir:train")[0] is NevIR


@NEVIR
def test_nevir_coder_protocol_variant_keeps_every_passage(nevir: Benchmark) -> None:
    """CoDeR's NevIR: the same queries, pairs and file, no passage merged (2,766 documents)."""
    coder = NevIR.load("nevir:coder", DATA)
    check_common(coder)
    assert coder.name == "nevir:coder" and coder.version != nevir.version
    assert len(coder.corpus) == 2766 and len(nevir.corpus) == 2081 and len(coder.pairs) == 1383
    assert [q.id for q in coder.queries] == [q.id for q in nevir.queries]
    # every query's judged documents are its own pair's, by CoDeR's ids
    for p in coder.pairs:
        assert coder.judgments.relevance[p.q1] == {p.d1: 2, p.d2: 0}
        assert p.d1 == f"nevir_doc_{p.id}_1" and p.d2 == f"nevir_doc_{p.id}_2"
    assert coder.notes["dedup"] is False and "CoDeR" in coder.notes["protocol"]
    assert "not de-duplicated" in coder.description and "CoDeR" in coder.description
    assert "nevir:coder" in NevIR.variants() and "CoDeR" in NevIR.info("nevir:coder").description


def test_protocol_variants_are_named_for_the_benchmark_pages() -> None:
    """A benchmark page names the papers' protocol variant of its queries (nevir → nevir:coder,
    excluir → excluir:coder) with how it differs; splits, folders and slices name none."""
    from reports.pages.benchmark import protocol_variants

    (nevir,) = protocol_variants("nevir")
    assert nevir["name"] == "nevir:coder" and "no de-duplication" in nevir["how"] and "CoDeR" in nevir["how"]
    (excluir,) = protocol_variants("excluir")
    assert excluir["name"] == "excluir:coder" and "pool" in excluir["how"]
    assert protocol_variants("nevir:train") == protocol_variants("nevir:coder") == []
    assert protocol_variants("nevir[:25]") == protocol_variants("/tmp/x") == protocol_variants("no-such") == []
