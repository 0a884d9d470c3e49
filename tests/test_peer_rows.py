"""Published rows from a peer harness (``[[harness]]`` in the reproduction matrix; MTEB's results
repository in the shipped one): they parse into ``published`` rows that name their file, version and
remaining differences, ``--only`` selects them, a bad table is one line naming harness, result and
field; and the configurations they name run as MTEB runs: dense over MTEB's text (title and text
joined by a space, ``title_join = " "``) and MTEB's BM25 baseline (bm25s's tokens, the English
stemmer, whatever joins title and text), on tiny corpora."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np
import pytest

from harness.protocols import RunContext
from harness.record.matrix import PUBLISHED, MatrixError, read_matrix, select
from harness.registry import make_spec
from harness.types import Corpus, Document, Query

EXPECTED = Path(__file__).resolve().parents[1] / "benchmarks" / "reference" / "expected.toml"
MTEB = "MTEB (embeddings-benchmark/results)"
MINILM_FILE = "results/sentence-transformers__all-MiniLM-L6-v2/8b3219a92973c328a8e22fadcfa821b5dc75636a/SciFact.json"
BM25_FILE = "results/mteb__baseline-bm25s/0_1_10/SciFact.json"

PEER = '''
[[paper]]
name = "BEIR (Thakur et al.)"

[[paper.table]]
name = "Table 2"

[[paper.table.condition]]
kind = "published"
retriever = "bm25"
benchmark = "beir/scifact"
tolerance = 0.01
reason = "a paper's row"
scores = { "nDCG@10" = 0.665 }

[[harness]]
name = "MTEB"
package = "mteb"
repository = "embeddings-benchmark/results"

[[harness.result]]
label = "dense (MTEB text)"
retriever = "dense"
params = { title_join = " " }
benchmark = "beir/scifact"
file = "results/m/rev/SciFact.json"
version = "1.12.75"
commit = "f4cc6c8b365a3c779dbc708d6affe0b0355b2ddf"
differences = ["the corpus is rebuilt", "the model package"]
tolerance = 0.01
reason = "why 0.01"
scores = { "nDCG@10" = 0.64508, "R@100" = { expected = 0.925, tolerance = 0.02 } }

[[harness.result]]
label = "bm25 (MTEB bm25s)"
retriever = "bm25"
params = { stemmer = "english" }
benchmark = "beir/scifact"
file = "results/mteb__baseline-bm25s/0_1_10/SciFact.json"
version = "1.20.0"
differences = ["bm25s 0.1.10 there"]
tolerance = 0.005
reason = "why 0.005"
scores = { "nDCG@10" = 0.68736 }
'''


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "expected.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_peer_rows_parse_with_their_file_version_and_differences(tmp_path: Path) -> None:
    rows = read_matrix(write(tmp_path, PEER))
    paper, *peer = rows
    assert paper.source == "BEIR (Thakur et al.), Table 2" and not paper.peer and not paper.differences
    assert [(r.index, r.kind, r.label, r.measure, r.expected, r.tolerance) for r in peer] == [
        (2, PUBLISHED, "dense (MTEB text)", "nDCG@10", 0.64508, 0.01),
        (3, PUBLISHED, "dense (MTEB text)", "R@100", 0.925, 0.02),
        (4, PUBLISHED, "bm25 (MTEB bm25s)", "nDCG@10", 0.68736, 0.005)]
    dense = peer[0]
    assert dense.source == f"{MTEB}, results/m/rev/SciFact.json (mteb 1.12.75)"
    # the reproduction page groups a published row by "<paper>, <table>": here the harness, then the file
    assert (dense.paper, dense.table) == (MTEB, "results/m/rev/SciFact.json (mteb 1.12.75)")
    assert dense.source.rpartition(", ") == (dense.paper, ", ", dense.table)
    assert (dense.peer, dense.repository, dense.file, dense.peer_version, dense.commit) == (
        "MTEB", "embeddings-benchmark/results", "results/m/rev/SciFact.json", "mteb 1.12.75",
        "f4cc6c8b365a3c779dbc708d6affe0b0355b2ddf")
    assert dense.differences == ("the corpus is rebuilt", "the model package")
    assert dense.reason == "why 0.01" and dense.where == "harness 'MTEB', result 1, nDCG@10"
    # the configuration is the one `run` builds from the same parameters (the label names it only)
    assert dense.spec.hash == make_spec("dense", {"title_join": " "}).hash != make_spec("dense").hash
    assert dense.spec.params["title_join"] == " "
    bm25 = peer[2]
    assert bm25.spec.hash == make_spec("bm25", {"stemmer": "english"}).hash and bm25.commit == ""


def test_peer_rows_are_selected_by_label_key_or_benchmark(tmp_path: Path) -> None:
    rows = read_matrix(write(tmp_path, PEER))
    assert [r.index for r in select(rows, only=["dense (MTEB*"])] == [2, 3]
    assert [r.index for r in select(rows, only=["bm25:beir/scifact:nDCG@10"])] == [1, 4]
    assert [r.index for r in select(rows, only=["bm25 (MTEB bm25s)"])] == [4]
    assert [r.index for r in select(rows, only=["R@100"])] == [3]
    assert select(rows, quick=True) == []


@pytest.mark.parametrize("change, problem", [
    (('differences = ["the corpus is rebuilt", "the model package"]\n', ""),
     "harness 'MTEB', result 1 (dense on beir/scifact): differences: missing"),
    (('differences = ["the corpus is rebuilt", "the model package"]', 'differences = []'),
     "harness 'MTEB', result 1 (dense on beir/scifact): differences: List should have at least 1 item"),
    (('file = "results/m/rev/SciFact.json"', 'file = "results/a, b.json"'),
     "harness 'MTEB', result 1 (dense on beir/scifact): file: no ', ' here"),
    (('version = "1.20.0"', 'version = ""'), "harness 'MTEB', result 2 (bm25 on beir/scifact): version:"),
    (('commit = "f4cc', 'sha = "f4cc'), "harness 'MTEB', result 1 (dense on beir/scifact): sha: unknown field"),
    (('params = { stemmer = "english" }', 'params = { stemmer = "klingon" }'),
     "harness 'MTEB', result 2 (bm25 on beir/scifact): params:"),
    (('package = "mteb"\n', ""), "harness 'MTEB': package: missing"),
])
def test_a_bad_harness_table_is_one_line_naming_harness_result_and_field(tmp_path: Path, change: tuple[str, str],
                                                                         problem: str) -> None:
    old, new = change
    assert old in PEER
    path = write(tmp_path, PEER.replace(old, new, 1))
    with pytest.raises(MatrixError) as e:
        read_matrix(path)
    assert str(e.value).startswith(f"{path}: {problem}"), str(e.value)
    assert "\n" not in str(e.value)


def test_a_matrix_of_peer_rows_only_is_a_matrix(tmp_path: Path) -> None:
    only = PEER[PEER.index("[[harness]]"):]
    assert len(read_matrix(write(tmp_path, only))) == 3
    with pytest.raises(MatrixError, match=r"\[\[harness\]\] tables"):
        read_matrix(write(tmp_path, only.replace("[[harness]]", "[[harnesses]]").replace("[[harness.", "[[harnesses.")))


def test_the_shipped_matrix_holds_mtebs_scifact_rows() -> None:
    rows = [r for r in read_matrix(EXPECTED) if r.peer == "MTEB"]
    figures = {(r.label, r.measure): r.expected for r in rows}
    assert figures[("dense (MTEB text)", "nDCG@10")] == 0.64508
    assert figures[("dense (mpnet, MTEB text)", "nDCG@10")] == 0.6557
    assert figures[("bm25 (MTEB bm25s)", "nDCG@10")] == 0.68736
    assert figures[("bm25 (MTEB bm25s)", "R@100")] == 0.91267
    assert {r.benchmark for r in rows} == {"beir/scifact"} and {r.kind for r in rows} == {PUBLISHED}
    assert {r.file for r in rows} == {MINILM_FILE, BM25_FILE,
                                      MINILM_FILE.replace("all-MiniLM-L6-v2/8b3219a92973c328a8e22fadcfa821b5dc75636a",
                                                          "all-mpnet-base-v2/84f2bcc00d77236f9e89c8a360a00fb1139bf47d")}
    assert {r.peer_version for r in rows} == {"mteb 1.12.75", "mteb 1.20.0"}
    assert all(r.repository == "embeddings-benchmark/results" and r.differences and r.reason and r.tolerance > 0
               and len(r.commit) == 40 for r in rows)
    specs = {r.label: r.spec for r in rows}
    assert specs["dense (MTEB text)"].hash == make_spec("dense", {"title_join": " "}).hash
    assert specs["dense (mpnet, MTEB text)"].hash == make_spec(
        "dense", {"model": "all-mpnet-base-v2", "title_join": " "}).hash
    assert specs["bm25 (MTEB bm25s)"].hash == make_spec("bm25", {"stemmer": "english"}).hash
    assert [r.key for r in select(rows, only=["dense (MTEB text)"])] == [
        "dense:beir/scifact:nDCG@10", "dense:beir/scifact:MAP@10", "dense:beir/scifact:R@100"]


# ---------------------------------------------------------------------------------------------
# the text joining, on tiny corpora

TINY = Corpus([Document("d1", "Vitamin D lowers the risk of fractures.", "Vitamin D and bones"),
               Document("d2", "Statins reduce cholesterol in adults.", "Statins"),
               Document("d3", "No title here, only text.", "")])


def mteb_dense_text(d: Document) -> str:
    """What MTEB 1.12's dense retrieval encodes of a document (its ``corpus_to_str``)."""
    return (d.title + " " + d.text).strip()


class Recording:
    """An encoder pool that records what it is asked to encode and returns fixed unit vectors."""

    def __init__(self) -> None:
        self.texts: list[list[str]] = []

    def encode(self, model: str, texts: Sequence[str], **kw: Any) -> np.ndarray:
        self.texts.append(list(texts))
        rng = np.random.default_rng(len(texts))
        x = rng.normal(size=(len(texts), 8)).astype(np.float32)
        return x / np.linalg.norm(x, axis=1, keepdims=True)


def dense_documents(params: dict[str, Any]) -> list[str]:
    from retrievers.dense import DenseRetriever, PooledDenseParams

    pool = Recording()
    DenseRetriever(PooledDenseParams(**params)).index(TINY, RunContext(seed=0, device="cpu", encoders=pool))
    [texts] = pool.texts
    return texts


def test_dense_reads_mtebs_text_with_title_join_space_and_ours_by_default() -> None:
    assert dense_documents({}) == TINY.texts() == ["Vitamin D and bones. Vitamin D lowers the risk of fractures.",
                                                   "Statins. Statins reduce cholesterol in adults.",
                                                   "No title here, only text."]
    assert dense_documents({"title_join": " "}) == [mteb_dense_text(d) for d in TINY]
    # the default is left out of the spec: the results stored before the parameter keep their key
    assert "title_join" not in make_spec("dense").params and make_spec("dense").hash == "55e4d29d04ba2636"
    assert make_spec("dense", {"title_join": ". "}).hash == make_spec("dense").hash
    assert make_spec("contriever", {"title_join": " "}).params["title_join"] == " "


def test_dense_title_join_is_what_the_encoder_and_its_cache_key_see(tmp_path: Path) -> None:
    from harness.models.pool import EncoderPool

    pool = EncoderPool(tmp_path / "cache", "cpu")
    keys = {join: pool.cache_key("all-MiniLM-L6-v2", dense_documents({"title_join": join}), prefix="",
                                 normalize=True, max_length=None, pooling=None) for join in (". ", " ")}
    assert keys[". "] != keys[" "]  # two joins never share cached embeddings


def mteb_bm25_scores(texts: list[str], queries: list[str]) -> np.ndarray:
    """MTEB's BM25 baseline (``mteb/models/bm25.py``): bm25s's tokens with the English stopwords and
    PyStemmer's English stemmer, ``bm25s.BM25()`` (Lucene, k1 1.5, b 0.75); every document's score."""
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    model = bm25s.BM25()
    model.index(bm25s.tokenize(texts, stopwords="en", stemmer=stemmer, show_progress=False), show_progress=False)
    qtok = bm25s.tokenize(queries, stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    return np.stack([model.get_scores(q) for q in qtok])


def test_bm25_with_the_english_stemmer_is_mtebs_bm25_baseline() -> None:
    from retrievers.bm25 import BM25Params, BM25Retriever

    queries = [Query("q1", "Do vitamins lower fracture risks?"), Query("q2", "statin reducing cholesterol"),
               Query("q3", "titles and texts")]
    ours = BM25Retriever(BM25Params(stemmer="english"))
    ours.index(TINY, RunContext(seed=0, device="cpu"))
    mine = np.stack([ours.scores(t) for t in ours.tokenize([q.text for q in queries])])
    # MTEB joins title and text with a line break, ours with ". ": neither is in a token, so both index the same
    mteb_texts = ["\n".join([d.title, d.text]) for d in TINY]
    assert ours.tokenize(mteb_texts) == ours.tokenize(TINY.texts())
    np.testing.assert_array_equal(mine, mteb_bm25_scores(mteb_texts, [q.text for q in queries]).astype(np.float32))
    assert (mine[0] > 0).sum() == 1 and mine[0].argmax() == 0  # "vitamins"/"fracture" stem to the first document's
    # without the stemmer (our default) "vitamins" and "fracture" miss "Vitamin" and "fractures"
    plain = BM25Retriever()
    plain.index(TINY, RunContext(seed=0, device="cpu"))
    assert plain.scores(plain.tokenize([queries[0].text])[0]).max() == 0
