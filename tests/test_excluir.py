"""ExcluIR loader: CoDeR's test/train split on the shared data (counts, qrels cross-check, no
leakage), the official release format (``excluir:full``) on fixtures and on the real manual test
set with a stand-in corpus, strictness, missing files and the registry."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path

import pytest

from benchmarks.excluir import ExcluIR
from harness.data import DataError, MissingDataError
from harness.types import Benchmark

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def _need(*files: str) -> pytest.MarkDecorator:
    missing = [f for f in files if not (DATA / f).exists()]
    where = ", ".join(str(DATA / f) for f in missing)
    return pytest.mark.skipif(bool(missing), reason=f"shared data not found: {where}")


TEST = _need("excluir/coder/test/queries.jsonl", "excluir/coder/test/corpus.jsonl", "excluir/coder/qrels/test.tsv")
TRAIN = _need("excluir/coder/train/queries.jsonl", "excluir/coder/train/corpus.jsonl",
              "excluir/coder/test/queries.jsonl", "excluir/coder/test/corpus.jsonl")
MANUAL = _need("excluir/excluir_manual.jsonl")


def check_common(b: Benchmark) -> None:
    """Invariants of every ExcluIR benchmark: one satisfying (2) and one violating (0) document per
    query, the violating one listed in ``violating``; every judged document exists."""
    qids = {q.id for q in b.queries}
    assert len(qids) == len(b.queries) and set(b.judgments.relevance) == qids
    for q in b.queries:
        rel = b.judgments.relevance[q.id]
        assert sorted(rel.values()) == [0, 2] and all(d in b.corpus for d in rel)
        assert b.judgments.violating[q.id] == {d for d, g in rel.items() if g == 0}
    assert re.fullmatch(r"[0-9a-f]{16}", b.version)
    assert b.source and b.license and b.description
    assert b.task == "constraint" and b.relevance_threshold == 2
    assert b.default_measures == ("Sat@10", "V@2", "V@3", "V@5", "V@10", "FVR@10", "nDCG@10", "R@1", "R@10")
    (_, ids), = b.splits.items()
    assert ids == [q.id for q in b.queries]


def write_jsonl(path: Path, rows: list[dict | str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(ln) for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]


# ---------------------------------------------------------------------------------------------
# CoDeR's split on the shared data


@pytest.fixture(scope="module")
def test_split() -> Benchmark:
    return ExcluIR.load("excluir", DATA)


@pytest.fixture(scope="module")
def train_split() -> Benchmark:
    return ExcluIR.load("excluir:train", DATA)


@TEST
def test_excluir_test_counts(test_split: Benchmark) -> None:
    b = test_split
    check_common(b)
    assert b.name == "excluir" and list(b.splits) == ["test"]
    assert len(b.queries) == 691 and len(b.corpus) == 1371
    assert b.judgments.n_judged_pairs() == 1382 and b.judgments.n_violating_pairs() == 691
    ids = sorted(int(q.id.rsplit("_", 1)[1]) for q in b.queries)
    assert ids == list(range(2761, 3452))  # q_2761 … q_3451
    # the qrels file covers all 3,452 ExcluIR queries; the other 2,761 are not this split's
    assert b.notes["qrels_other_queries"] == 2761
    assert b.notes["judged_documents"] == 1371  # the corpus is exactly the judged documents
    assert "691 exclusionary queries over 1,371 documents" in b.description
    assert "coder_data" in b.source and "zwh-sdu/ExcluIR" in b.source
    assert ExcluIR.load("excluir:test", DATA).version == b.version  # alias, same content


@TRAIN
def test_excluir_train_counts_and_no_leakage(train_split: Benchmark, test_split: Benchmark) -> None:
    b = train_split
    check_common(b)
    assert b.name == "excluir:train" and list(b.splits) == ["train"]
    assert len(b.queries) == 2687 and b.notes["queries_in_file"] == 2687
    # train/corpus.jsonl has 5,373 documents; 80 of them are test documents (they belonged to the
    # 74 train-side queries that CoDeR removed because they are test queries) and are dropped
    assert b.notes["documents_in_file"] == 5373 and b.notes["documents_dropped_in_test"] == 80
    assert len(b.corpus) == 5293
    assert b.notes["queries_dropped_in_test"] == 0 and b.notes["queries_dropped_judging_test_documents"] == 0
    # no train query id or text, no train document id or text occurs in the test split
    test_q = read_jsonl(DATA / "excluir/coder/test/queries.jsonl")
    test_d = read_jsonl(DATA / "excluir/coder/test/corpus.jsonl")
    assert not {q.id for q in b.queries} & {r["query_id"] for r in test_q}
    assert not {q.text for q in b.queries} & {r["query"] for r in test_q}
    assert not {d.text for d in b.corpus} & {r["text"] for r in test_d}
    assert not set(b.corpus.ids) & {r["doc_id"] for r in test_d}
    assert not set(b.corpus.ids) & set(test_split.corpus.ids)
    assert max(int(q.id.rsplit("_", 1)[1]) for q in b.queries) <= 2760
    # two texts are each carried by two train queries: in the official manual set, records 1867
    # and 1877 repeat the RQ_rewrite of records 1863 and 1876 although their original questions
    # and documents differ (apparently copy slips in the release)
    assert b.notes["repeated_query_texts"] == 2
    assert b.version != test_split.version


@TEST
def test_excluir_is_deterministic(test_split: Benchmark) -> None:
    again = ExcluIR.load("excluir", DATA)
    assert again.version == test_split.version and [q.id for q in again.queries] == [q.id for q in test_split.queries]


# ---------------------------------------------------------------------------------------------
# CoDeR's format on fixtures


def coder_query(i: int, sat: str, vio: str, text: str | None = None) -> dict:
    return {"query_id": f"excluir_q_{i}", "query": text or f"What else did band {i} release, apart from its debut?",
            "constraint_satisfying_doc_ids": [sat], "constraint_violating_doc_ids": [vio],
            "graded_relevance": {sat: 2.0, vio: 0.0}, "topical_relevant_doc_ids": [vio, sat]}


def coder_doc(i: int, text: str | None = None) -> dict:
    return {"doc_id": f"excluir_doc_{i}", "title": "", "text": text or f"Band {i}\nBand {i} released record {i}."}


def make_coder(root: Path, queries: list | None = None, qrels: list[str] | None = None,
               train_queries: list | None = None, train_docs: list | None = None) -> Path:
    write_jsonl(root / "coder/test/corpus.jsonl", [coder_doc(i) for i in range(10, 14)])
    write_jsonl(root / "coder/test/queries.jsonl", queries if queries is not None else [
        coder_query(5, "excluir_doc_11", "excluir_doc_10"), coder_query(6, "excluir_doc_12", "excluir_doc_13")])
    rows = qrels if qrels is not None else ["excluir_q_0\texcluir_doc_1\t1", "excluir_q_5\texcluir_doc_11\t1",
                                            "excluir_q_6\texcluir_doc_12\t1"]
    (root / "coder/qrels").mkdir(parents=True, exist_ok=True)
    (root / "coder/qrels/test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n",
                                               encoding="utf-8")
    write_jsonl(root / "coder/train/corpus.jsonl", train_docs if train_docs is not None else
                [coder_doc(i) for i in range(4)] + [coder_doc(12)])
    write_jsonl(root / "coder/train/queries.jsonl", train_queries if train_queries is not None else [
        coder_query(0, "excluir_doc_1", "excluir_doc_0"), coder_query(1, "excluir_doc_3", "excluir_doc_2")])
    return root


def test_coder_fixture(tmp_path: Path) -> None:
    make_coder(tmp_path / "excluir")
    b = ExcluIR.load("excluir", tmp_path)
    check_common(b)
    assert b.judgments.relevance == {"excluir_q_5": {"excluir_doc_11": 2, "excluir_doc_10": 0},
                                     "excluir_q_6": {"excluir_doc_12": 2, "excluir_doc_13": 0}}
    assert b.notes["qrels_other_queries"] == 1
    t = ExcluIR.load("excluir:train", tmp_path)
    check_common(t)
    # excluir_doc_12 is a test document: dropped from the train corpus
    assert t.corpus.ids == ["excluir_doc_0", "excluir_doc_1", "excluir_doc_2", "excluir_doc_3"]
    assert t.notes["documents_dropped_in_test"] == 1


def test_coder_train_leakage_guard_drops_queries(tmp_path: Path) -> None:
    make_coder(tmp_path / "excluir", train_queries=[
        coder_query(0, "excluir_doc_1", "excluir_doc_0"),
        coder_query(1, "excluir_doc_3", "excluir_doc_2", text="What else did band 5 release, apart from its debut?"),
        coder_query(2, "excluir_doc_12", "excluir_doc_2"),  # judges a test document
    ])
    t = ExcluIR.load("excluir:train", tmp_path)
    assert [q.id for q in t.queries] == ["excluir_q_0"]
    assert t.notes["queries_dropped_in_test"] == 1 and t.notes["queries_dropped_judging_test_documents"] == 1


def test_coder_version_is_a_content_hash(tmp_path: Path) -> None:
    make_coder(tmp_path / "excluir")
    a = ExcluIR.load("excluir", tmp_path)
    assert ExcluIR.load("excluir", tmp_path).version == a.version
    make_coder(tmp_path / "excluir", queries=[coder_query(5, "excluir_doc_11", "excluir_doc_10", text="Changed?"),
                                              coder_query(6, "excluir_doc_12", "excluir_doc_13")])
    assert ExcluIR.load("excluir", tmp_path).version != a.version


@pytest.mark.parametrize("case, file, pattern", [
    ("qrels_disagree", "queries.jsonl",
     r"queries\.jsonl:2: query 'excluir_q_6': satisfying document 'excluir_doc_12' disagrees with test\.tsv, "
     r"which marks 'excluir_doc_13' \(line 3\) relevant"),
    ("qrels_missing", "queries.jsonl", r"queries\.jsonl:2: query 'excluir_q_6' has no relevant document"),
    ("unknown_doc", "queries.jsonl",
     r"queries\.jsonl:1: field 'constraint_violating_doc_ids' names unknown document 'excluir_doc_99'"),
    ("two_satisfying", "queries.jsonl",
     r"queries\.jsonl:1: field 'constraint_satisfying_doc_ids' must list exactly one document"),
    ("graded_mismatch", "queries.jsonl", r"queries\.jsonl:1: field 'graded_relevance' is .*but the satisfying"),
    ("missing_query", "queries.jsonl", r"queries\.jsonl:1: missing field 'query'"),
    ("dup_query", "queries.jsonl", r"queries\.jsonl:2: duplicate query id 'excluir_q_5' \(first seen on line 1\)"),
    ("same_doc", "queries.jsonl", r"queries\.jsonl:1: document 'excluir_doc_11' is both satisfying and violating"),
    ("bad_json", "queries.jsonl", r"queries\.jsonl:2: invalid JSON"),
    ("bad_qrels", "test.tsv", r"test\.tsv:2: expected 3 tab-separated fields"),
])
def test_coder_malformed(tmp_path: Path, case: str, file: str, pattern: str) -> None:
    q5, q6 = coder_query(5, "excluir_doc_11", "excluir_doc_10"), coder_query(6, "excluir_doc_12", "excluir_doc_13")
    qrels = None
    if case == "qrels_disagree":
        qrels = ["excluir_q_5\texcluir_doc_11\t1", "excluir_q_6\texcluir_doc_13\t1"]
    elif case == "qrels_missing":
        qrels = ["excluir_q_5\texcluir_doc_11\t1"]
    elif case == "unknown_doc":
        q5 = coder_query(5, "excluir_doc_11", "excluir_doc_99")
    elif case == "two_satisfying":
        q5["constraint_satisfying_doc_ids"] = ["excluir_doc_11", "excluir_doc_12"]
    elif case == "graded_mismatch":
        q5["graded_relevance"] = {"excluir_doc_11": 0.0, "excluir_doc_10": 2.0}
    elif case == "missing_query":
        del q5["query"]
    elif case == "dup_query":
        q6["query_id"] = "excluir_q_5"
    elif case == "same_doc":
        q5 = coder_query(5, "excluir_doc_11", "excluir_doc_11")
    elif case == "bad_qrels":
        qrels = ["excluir_q_5 excluir_doc_11"]
    queries: list = [q5, "{broken" if case == "bad_json" else q6]
    make_coder(tmp_path / "excluir", queries=queries, qrels=qrels)
    with pytest.raises(DataError, match=pattern) as e:
        ExcluIR.load("excluir", tmp_path)
    assert e.value.path.endswith(file)


def test_coder_missing(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError) as e:
        ExcluIR.load("excluir", tmp_path, online=True)  # no automatic download
    assert e.value.missing == ["excluir/coder/test/queries.jsonl", "excluir/coder/test/corpus.jsonl",
                               "excluir/coder/qrels/test.tsv"]
    assert "nice-hku-coder/coder_data" in str(e.value) and "no automatic download" in str(e.value)
    write_jsonl(tmp_path / "excluir/coder/train/queries.jsonl", [])
    write_jsonl(tmp_path / "excluir/coder/train/corpus.jsonl", [])
    with pytest.raises(MissingDataError) as e:  # the train split needs the test files for its leakage guard
        ExcluIR.load("excluir:train", tmp_path)
    assert e.value.missing == ["excluir/coder/test/queries.jsonl", "excluir/coder/test/corpus.jsonl"]


# ---------------------------------------------------------------------------------------------
# The official release: excluir:full

DOCS = [
    "Annie (1982 film)\nAnnie is a 1982 American musical comedy-drama film.",
    "Annie (2014 film)\nAnnie is a 2014 American musical comedy-drama film directed by Will Gluck.",
    "Harvey Korman\nHarvey Korman starred in 'Leo & Liz in Beverly Hills'.",
    "Harvey Korman\nHarvey Korman is best known for The Carol Burnett Show.",
    "48th Primetime Emmy Awards\nThe ceremony was hosted by Michael J. Fox.",
    "48th Primetime Emmy Awards\nThe 48th Primetime Emmy Awards honored television programming.",
]


def manual_row(q: str, vio: int, sat: int) -> dict:
    return {"question0": f"Original question about {q}?", "RQ_rewrite": f"Apart from the obvious, what about {q}?",
            "corpus_sub_index": [vio, sat]}


def make_full(root: Path, rows: list | None = None, docs: list | None = None, jsonl: bool = True) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "corpus.json").write_text(json.dumps(DOCS if docs is None else docs), encoding="utf-8")
    rows = rows if rows is not None else [manual_row("Annie", 0, 1), manual_row("Korman", 2, 3),
                                          manual_row("the Emmys", 4, 5)]
    if jsonl:
        write_jsonl(root / "excluir_manual.jsonl", rows)
    else:
        (root / "test_manual_final.json").write_text(json.dumps(rows, indent=2), encoding="utf-8")
    return root


def test_full_fixture(tmp_path: Path) -> None:
    make_full(tmp_path / "excluir")
    b = ExcluIR.load("excluir:full", tmp_path)
    check_common(b)
    assert b.name == "excluir:full" and list(b.splits) == ["full"]
    assert b.corpus.ids == [f"excluir_doc_{i}" for i in range(6)] and b.corpus.get("excluir_doc_1").text == DOCS[1]
    assert [q.id for q in b.queries] == ["excluir_q_0", "excluir_q_1", "excluir_q_2"]
    assert b.judgments.relevance["excluir_q_1"] == {"excluir_doc_3": 2, "excluir_doc_2": 0}
    assert b.judgments.violating["excluir_q_1"] == {"excluir_doc_2"}
    assert b.queries[0].text == "Apart from the obvious, what about Annie?"
    assert b.queries[0].meta == {"original_question": "Original question about Annie?"}
    assert "Google Drive" in b.source and b.notes["queries_file"] == "excluir/excluir_manual.jsonl"
    assert [p.name for p in ExcluIR.files_in_use("excluir:full", tmp_path)] == ["corpus.json", "excluir_manual.jsonl"]


def test_full_released_json_list_and_eval_keys(tmp_path: Path) -> None:
    """``test_manual_final.json`` as released (a JSON list), and the keys of the repository's
    evaluation script (``ExcluQ``, ``index``)."""
    rows = [manual_row("Annie", 0, 1), {"ExcluQ": "Who hosted, not Michael J. Fox?", "index": [4, 5]}]
    make_full(tmp_path / "excluir", rows=rows, jsonl=False)
    b = ExcluIR.load("excluir:full", tmp_path)
    check_common(b)
    assert b.judgments.relevance["excluir_q_1"] == {"excluir_doc_5": 2, "excluir_doc_4": 0}
    assert b.notes["queries_file"] == "excluir/test_manual_final.json"
    assert ExcluIR.missing_files("excluir:full", tmp_path) == []


@pytest.mark.parametrize("case, file, pattern", [
    ("out_of_range", "excluir_manual.jsonl",
     r"excluir_manual\.jsonl: line 2: field 'corpus_sub_index' names corpus index 6 but corpus\.json has 6 documents"),
    ("one_index", "excluir_manual.jsonl", r"excluir_manual\.jsonl: line 1: field 'corpus_sub_index' must be "
                                          r"\[violating index, satisfying index\]"),
    ("same_index", "excluir_manual.jsonl", r"excluir_manual\.jsonl: line 1: .*same document \(0\)"),
    ("no_query", "excluir_manual.jsonl", r"excluir_manual\.jsonl: line 3: missing field 'RQ_rewrite' or 'ExcluQ'"),
    ("empty_query", "excluir_manual.jsonl", r"excluir_manual\.jsonl: line 1: field 'RQ_rewrite' is empty"),
    ("bad_json", "excluir_manual.jsonl", r"excluir_manual\.jsonl:2: invalid JSON"),
    ("corpus_item", "corpus.json", r"corpus\.json: item 2: expected a document string, got dict"),
    ("corpus_not_list", "corpus.json", r"corpus\.json: expected a JSON list, got dict"),
])
def test_full_malformed(tmp_path: Path, case: str, file: str, pattern: str) -> None:
    rows: list = [manual_row("Annie", 0, 1), manual_row("Korman", 2, 3), manual_row("the Emmys", 4, 5)]
    docs: object = list(DOCS)
    if case == "out_of_range":
        rows[1]["corpus_sub_index"] = [2, 6]
    elif case == "one_index":
        rows[0]["corpus_sub_index"] = [1]
    elif case == "same_index":
        rows[0]["corpus_sub_index"] = [0, 0]
    elif case == "no_query":
        del rows[2]["RQ_rewrite"]
    elif case == "empty_query":
        rows[0]["RQ_rewrite"] = "  "
    elif case == "bad_json":
        rows[1] = '{"RQ_rewrite": '
    elif case == "corpus_item":
        docs[2] = {"text": "x"}  # type: ignore[index]
    elif case == "corpus_not_list":
        docs = {"0": "x"}
    make_full(tmp_path / "excluir", rows=rows, docs=docs)  # type: ignore[arg-type]
    with pytest.raises(DataError, match=pattern) as e:
        ExcluIR.load("excluir:full", tmp_path)
    assert e.value.path.endswith(file)


@MANUAL
def test_full_needs_the_official_corpus() -> None:
    # the manual test set is on disk, the ~90k-document corpus is not
    assert ExcluIR.missing_files("excluir:full", DATA) == ["excluir/corpus.json"]
    for online in (False, True):
        with pytest.raises(MissingDataError) as e:
            ExcluIR.load("excluir:full", DATA, online=online)
        msg = str(e.value)
        assert "excluir/corpus.json" in msg and "zwh-sdu/ExcluIR" in msg and "drive.google.com" in msg
        assert "test_manual_final.json" in msg and "no automatic download" in msg


@MANUAL
def test_full_real_manual_set_with_stand_in_corpus(tmp_path: Path) -> None:
    """The real manual test set parses (3,452 queries); the corpus is a stand-in of the right size.
    Cross-check with CoDeR's test split: same texts and documents, and the same ids except for
    84 queries that CoDeR's ids rotate by one."""
    rows = read_jsonl(DATA / "excluir/excluir_manual.jsonl")
    n_docs = max(i for r in rows for i in r["corpus_sub_index"]) + 1
    root = tmp_path / "excluir"
    root.mkdir()
    (root / "corpus.json").write_text(json.dumps([f"document {i}" for i in range(n_docs)]), encoding="utf-8")
    (root / "excluir_manual.jsonl").symlink_to(DATA / "excluir/excluir_manual.jsonl")
    b = ExcluIR.load("excluir:full", tmp_path)
    check_common(b)
    assert len(b.queries) == 3452 and n_docs == 90400
    assert len({d for r in b.judgments.relevance.values() for d in r}) == 6664
    assert b.notes["repeated_query_texts"] == 2  # records 1863/1867 and 1876/1877 repeat a text
    if (DATA / "excluir/coder/test/queries.jsonl").exists():
        coder = read_jsonl(DATA / "excluir/coder/test/queries.jsonl")
        by_text = {q.text: q for q in b.queries}
        moved = []
        for r in coder:
            q = by_text[r["query"]]
            assert b.judgments.relevance[q.id] == {r["constraint_satisfying_doc_ids"][0]: 2,
                                                  r["constraint_violating_doc_ids"][0]: 0}
            if q.id != r["query_id"]:
                moved.append(int(r["query_id"].rsplit("_", 1)[1]))
        assert sorted(moved) == list(range(2916, 3000))


# ---------------------------------------------------------------------------------------------
# names, info and the registry


def test_excluir_names_and_registry() -> None:
    from harness.registry import get_benchmark_loader

    assert get_benchmark_loader("excluir") == (ExcluIR, "excluir")
    assert get_benchmark_loader("excluir:train") == (ExcluIR, "excluir:train")
    assert get_benchmark_loader("excluir:full")[0] is ExcluIR
    for n in ExcluIR.variants():
        info = ExcluIR.info(n)
        assert info.name == n and info.task == "constraint" and info.source and info.files
    assert ExcluIR.info("excluir:full").files == ["excluir/corpus.json", "excluir/excluir_manual.jsonl"]
    assert ExcluIR.info("excluir:full").optional_files == ["excluir/test_manual_final.json"]
    assert ExcluIR.info("excluir:test").name == "excluir"
    for bad in ("excluir:dev", "excluir:", "excluir/full", "excluir:train:x"):
        with pytest.raises(ValueError):
            ExcluIR.info(bad)


@TEST
def test_excluir_grade_counts(test_split: Benchmark) -> None:
    assert Counter(g for r in test_split.judgments.relevance.values() for g in r.values()) == {2: 691, 0: 691}


# ---------------------------------------------------------------------------------------------
# the protocol variant excluir:coder: the test queries over the manual queries' document pool


@TRAIN
@TEST
def test_coder_protocol_variant_pools_the_test_and_train_documents() -> None:
    test, pool = ExcluIR.load("excluir", DATA), ExcluIR.load("excluir:coder", DATA)
    check_common(pool)
    assert pool.name == "excluir:coder" and pool.version != test.version
    assert [q.id for q in pool.queries] == [q.id for q in test.queries]
    assert pool.judgments.relevance == test.judgments.relevance and pool.judgments.violating == test.judgments.violating
    # 1,371 test documents, then the 5,373 train ones of which 80 are test documents already
    assert len(pool.corpus) == 6664 and pool.notes["pool_documents_added"] == 6664 - 1371
    assert pool.corpus.ids[:1371] == test.corpus.ids
    assert "CoDeR" in pool.description and "6,664 documents" in pool.description
    assert "excluir:coder" in ExcluIR.variants()
    assert "excluir/coder/train/corpus.jsonl" in ExcluIR.info("excluir:coder").files


def test_a_pooled_document_that_differs_from_the_test_corpus_names_file_and_document(tmp_path: Path) -> None:
    root = tmp_path / "excluir" / "coder"
    for d in ("test", "train", "qrels"):
        (root / d).mkdir(parents=True)
    (root / "test" / "corpus.jsonl").write_text(
        json.dumps({"doc_id": "d1", "title": "", "text": "kept"}) + "\n" +
        json.dumps({"doc_id": "d2", "title": "", "text": "violating"}) + "\n")
    (root / "test" / "queries.jsonl").write_text(json.dumps({
        "query_id": "q1", "query": "anything but violating", "constraint_satisfying_doc_ids": ["d1"],
        "constraint_violating_doc_ids": ["d2"]}) + "\n")
    (root / "qrels" / "test.tsv").write_text("q1\td1\t1\n")
    (root / "train" / "corpus.jsonl").write_text(
        json.dumps({"doc_id": "d3", "title": "", "text": "other"}) + "\n" +
        json.dumps({"doc_id": "d1", "title": "", "text": "changed"}) + "\n")
    with pytest.raises(DataError) as e:
        ExcluIR.load("excluir:coder", tmp_path)
    msg = str(e.value)
    assert "train/corpus.jsonl" in msg and "document 2 (id 'd1')" in msg and "'text'" in msg and "\n" not in msg
    (root / "train" / "corpus.jsonl").write_text(json.dumps({"doc_id": "d1", "title": "", "text": "kept"}) + "\n" +
                                                 json.dumps({"doc_id": "d3", "title": "", "text": "other"}) + "\n")
    b = ExcluIR.load("excluir:coder", tmp_path)
    assert b.corpus.ids == ["d1", "d2", "d3"]
