"""MultiHop-RAG loader on the shipped fixture (invented articles in the official format), its
seeded split, strictness, missing files, the online path with a fake ``datasets`` module and the
registry. The real files are not in the shared data."""

from __future__ import annotations

import json
import re
import shutil
import sys
import types
from pathlib import Path

import pytest

from benchmarks.multihop import MultiHopRAG
from harness.data import DataError, MissingDataError
from harness.types import Benchmark

FIXTURES = Path(__file__).resolve().parent / "fixtures"
FIXTURE = FIXTURES / "multihop-rag"
DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
ARTICLE_KEYS = {"title", "author", "source", "published_at", "category", "url", "body"}
EVIDENCE_KEYS = {"title", "author", "url", "source", "category", "published_at", "fact"}


def check_common(b: Benchmark) -> None:
    qids = {q.id for q in b.queries}
    assert len(qids) == len(b.queries) and set(b.judgments.relevance) == qids
    for docs in b.judgments.relevance.values():
        assert docs and all(d in b.corpus for d in docs) and set(docs.values()) == {1}
    assert b.judgments.violating == {}
    assert re.fullmatch(r"[0-9a-f]{16}", b.version)
    assert b.source and b.license and b.description
    assert b.task == "completeness" and b.relevance_threshold == 1
    assert b.default_measures == ("Comp@3", "Comp@5", "R@3", "R@5", "nDCG@10")
    (_, ids), = b.splits.items()
    assert ids == [q.id for q in b.queries]


def load_fixture(name: str = "multihop-rag") -> Benchmark:
    return MultiHopRAG.load(name, FIXTURES)


def copy_fixture(tmp_path: Path) -> tuple[Path, list[dict], list[dict]]:
    root = tmp_path / "multihop-rag"
    shutil.copytree(FIXTURE, root)
    return root, json.loads((root / "corpus.json").read_text()), json.loads((root / "MultiHopRAG.json").read_text())


def write(root: Path, corpus: object, questions: object) -> None:
    (root / "corpus.json").write_text(json.dumps(corpus), encoding="utf-8")
    (root / "MultiHopRAG.json").write_text(json.dumps(questions), encoding="utf-8")


def test_fixture_is_in_the_official_format() -> None:
    corpus = json.loads((FIXTURE / "corpus.json").read_text(encoding="utf-8"))
    questions = json.loads((FIXTURE / "MultiHopRAG.json").read_text(encoding="utf-8"))
    assert all(set(a) == ARTICLE_KEYS for a in corpus)
    assert all(set(q) == {"query", "answer", "question_type", "evidence_list"} for q in questions)
    assert all(set(e) == EVIDENCE_KEYS for q in questions for e in q["evidence_list"])


def test_fixture_counts_and_split() -> None:
    parts = {s: load_fixture(n) for s, n in
             (("test", "multihop-rag"), ("dev", "multihop-rag:dev"), ("train", "multihop-rag:train"))}
    for split, b in parts.items():
        check_common(b)
        assert list(b.splits) == [split] and len(b.corpus) == 6
        assert b.notes["questions_in_source"] == 13 and b.notes["null_queries_dropped"] == 2
        assert b.notes["questions_with_evidence"] == 11
        assert b.notes["split_seed"] == 0 and b.notes["split_sizes"] == {"test": 1, "dev": 1, "train": 9}
        assert "seeded (seed 0) random 80/10/10" in b.description and "null_query" in b.description
    assert parts["test"].name == "multihop-rag" and parts["dev"].name == "multihop-rag:dev"
    ids = {s: {q.id for q in b.queries} for s, b in parts.items()}
    assert not ids["test"] & ids["dev"] and not ids["test"] & ids["train"] and not ids["dev"] & ids["train"]
    # the null queries (records 11 and 12) are in no split
    assert set.union(*ids.values()) == {f"multihop_q_{i}" for i in range(11)}
    assert len({b.version for b in parts.values()}) == 3


def test_fixture_judgments() -> None:
    parts = [load_fixture(n) for n in MultiHopRAG.variants()]
    rel = {q: r for b in parts for q, r in b.judgments.relevance.items()}
    queries = {q.id: q for b in parts for q in b.queries}
    # record 3 cites article 1 twice: the article counts once
    assert rel["multihop_q_3"] == {"multihop_doc_1": 1, "multihop_doc_2": 1}
    # record 7's first evidence has a URL with a tracking suffix: matched by title
    assert rel["multihop_q_7"] == {"multihop_doc_2": 1, "multihop_doc_1": 1}
    assert parts[0].notes["evidence_matched_by_title"] == 1 and parts[0].notes["evidence_items"] == 27
    assert rel["multihop_q_10"] == {f"multihop_doc_{i}": 1 for i in (1, 2, 3, 4)}
    assert queries["multihop_q_10"].meta == {"question_type": "inference_query",
                                             "answer": "three years; 2-1", "set_size": "4"}
    assert {q.meta["question_type"] for q in queries.values()} == {"inference_query", "comparison_query",
                                                                    "temporal_query"}
    doc = parts[0].corpus.get("multihop_doc_0")
    assert doc.title == "Harbor City opens floating library" and doc.text.startswith("Harbor City opened")


def test_split_is_deterministic_and_version_is_a_content_hash(tmp_path: Path) -> None:
    a, b = load_fixture("multihop-rag:train"), load_fixture("multihop-rag:train")
    assert [q.id for q in a.queries] == [q.id for q in b.queries] and a.version == b.version
    root, corpus, questions = copy_fixture(tmp_path)
    assert MultiHopRAG.load("multihop-rag:train", tmp_path).version == a.version  # same content, same version
    corpus[0]["body"] += " A correction was added later."
    write(root, corpus, questions)
    assert MultiHopRAG.load("multihop-rag:train", tmp_path).version != a.version


@pytest.mark.parametrize("case, file, pattern", [
    ("unmatched", "MultiHopRAG.json",
     r"MultiHopRAG\.json: item 0, evidence 1: no article of the corpus has url 'https://nowhere\.example/x' "
     r"or title 'Unknown'"),
    ("ambiguous", "MultiHopRAG.json", r"MultiHopRAG\.json: item 1, evidence 0: .*match 2 articles"),
    ("no_evidence", "MultiHopRAG.json",
     r"MultiHopRAG\.json: item 2: field 'evidence_list' is empty but question_type is 'temporal_query'"),
    ("evidence_without_keys", "MultiHopRAG.json", r"MultiHopRAG\.json: item 0, evidence 0: neither 'url' nor 'title'"),
    ("missing_query", "MultiHopRAG.json", r"MultiHopRAG\.json: item 4: missing field 'query'"),
    ("missing_body", "corpus.json", r"corpus\.json: item 3: missing field 'body'"),
    ("empty_title", "corpus.json", r"corpus\.json: item 0: field 'title' is empty"),
    ("not_a_list", "corpus.json", r"corpus\.json: expected a JSON list, got dict"),
    ("bad_json", "MultiHopRAG.json", r"MultiHopRAG\.json:1: invalid JSON"),
])
def test_malformed(tmp_path: Path, case: str, file: str, pattern: str) -> None:
    root, corpus, questions = copy_fixture(tmp_path)
    if case == "unmatched":
        questions[0]["evidence_list"][1].update(url="https://nowhere.example/x", title="Unknown")
    elif case == "ambiguous":  # a second article with the same URL and title as article 3
        corpus.append(dict(corpus[3], body="A copy of the cup report."))
    elif case == "no_evidence":
        questions[2]["evidence_list"] = []
    elif case == "evidence_without_keys":
        questions[0]["evidence_list"][0] = {"fact": "a fact"}
    elif case == "missing_query":
        del questions[4]["query"]
    elif case == "missing_body":
        del corpus[3]["body"]
    elif case == "empty_title":
        corpus[0]["title"] = ""
    elif case == "not_a_list":
        corpus = {"0": corpus[0]}
    write(root, corpus, questions)
    if case == "bad_json":
        (root / "MultiHopRAG.json").write_text("[{\"query\": ", encoding="utf-8")
    with pytest.raises(DataError, match=pattern) as e:
        MultiHopRAG.load("multihop-rag", tmp_path)
    assert e.value.path.endswith(file)


def test_duplicate_urls_resolved_by_title(tmp_path: Path) -> None:
    root, corpus, questions = copy_fixture(tmp_path)
    corpus[4]["url"] = corpus[3]["url"]  # two articles share a URL; their titles differ
    write(root, corpus, questions)
    b = MultiHopRAG.load("multihop-rag:train", tmp_path)
    assert b.notes["repeated_article_urls"] == 1
    assert load_fixture("multihop-rag:train").judgments.relevance == b.judgments.relevance


def test_missing_files(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError) as e:
        MultiHopRAG.load("multihop-rag:dev", tmp_path)
    assert e.value.missing == ["multihop-rag/corpus.json", "multihop-rag/MultiHopRAG.json"]
    assert "yixuantt/MultiHopRAG" in str(e.value) and "yixuantt/MultiHop-RAG" in str(e.value)


@pytest.mark.skipif(not (DATA / "multihop-rag").is_dir(), reason="MultiHop-RAG is not in the shared data")
def test_real_counts() -> None:  # pragma: no cover - the shared data does not hold MultiHop-RAG
    parts = {n: MultiHopRAG.load(n, DATA) for n in MultiHopRAG.variants()}
    assert {n: len(b.queries) for n, b in parts.items()} == {
        "multihop-rag": 225, "multihop-rag:train": 1805, "multihop-rag:dev": 225}  # the NNN paper's Table 3
    assert all(len(b.corpus) == 609 for b in parts.values())
    assert parts["multihop-rag"].notes["null_queries_dropped"] == 301


def test_online_with_fake_datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    corpus = json.loads((FIXTURE / "corpus.json").read_text(encoding="utf-8"))
    questions = json.loads((FIXTURE / "MultiHopRAG.json").read_text(encoding="utf-8"))
    calls: list[tuple] = []

    def load_dataset(name: str, config: str, split: str) -> list[dict]:
        calls.append((name, config, split))
        return {"corpus": corpus, "MultiHopRAG": questions}[config]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    b = MultiHopRAG.load("multihop-rag:train", tmp_path, online=True)
    check_common(b)
    assert calls == [("yixuantt/MultiHopRAG", "corpus", "train"), ("yixuantt/MultiHopRAG", "MultiHopRAG", "train")]
    assert b.notes["online_source"] == "hf:yixuantt/MultiHopRAG"
    assert b.version == load_fixture("multihop-rag:train").version  # the same content as the local files
    calls.clear()
    assert MultiHopRAG.load("multihop-rag:train", FIXTURES, online=True).version == b.version
    assert calls == []  # local files present: the hub is not asked

    questions[0]["evidence_list"][0]["url"] = "https://elsewhere.example"
    questions[0]["evidence_list"][0]["title"] = "Elsewhere"
    with pytest.raises(DataError, match=r"hf:yixuantt/MultiHopRAG\[MultiHopRAG\]: item 0, evidence 0"):
        MultiHopRAG.load("multihop-rag", tmp_path, online=True)


def test_names_info_and_registry() -> None:
    from harness.registry import get_benchmark_loader

    assert get_benchmark_loader("multihop-rag") == (MultiHopRAG, "multihop-rag")
    assert get_benchmark_loader("multihop-rag:dev") == (MultiHopRAG, "multihop-rag:dev")
    for n in MultiHopRAG.variants():
        info = MultiHopRAG.info(n)
        assert info.name == n and info.files == ["multihop-rag/corpus.json", "multihop-rag/MultiHopRAG.json"]
        assert info.license == "ODC-BY 1.0" and "completeness" == info.task
    assert MultiHopRAG.info("multihop-rag:test").name == "multihop-rag"
    for bad in ("multihop-rag:val", "multihop", "multihop-rag:"):
        with pytest.raises(ValueError):
            MultiHopRAG.info(bad)
    loader, name = get_benchmark_loader("multihop-rag:dev")
    assert loader.load(name, FIXTURES).name == "multihop-rag:dev"
