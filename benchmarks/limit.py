"""LIMIT (Weller et al. 2025, "On the Theoretical Limitations of Embedding-based Retrieval",
arXiv:2508.21038): ``limit-small`` (46 documents) and ``limit`` (50,000 documents).

What it tests: 1,000 queries "Who likes X?" over documents "NAME likes A, B, C, …", each query
with exactly 2 relevant documents (the people who like X). The 1,000 queries cover 1,000 of the
C(46, 2) = 1,035 pairs of the 46 relevant people, so a retriever must be able to put almost any
pair of them together in its top 2. The paper proves that a single-vector embedding of dimension d
can do that only for a number of documents bounded by d, and finds state-of-the-art embedding
models under 20 % recall@100 on the full set, while BM25 (the query names the attribute a document
lists) is near perfect. ``limit`` adds 49,954 people who like none of the queried attributes.

Official files (google-deepmind/limit, folders ``data/limit-small/`` and ``data/limit/``; the Hugging
Face datasets ``orionweller/LIMIT-small`` and ``orionweller/LIMIT``), in MTEB's JSON-lines layout,
read from ``<data_dir>/limit/limit-small/`` and ``<data_dir>/limit/limit/``:

* ``corpus.jsonl``: ``{"_id", "title", "text"}`` (the title is empty; the id is the person's name);
* ``queries.jsonl``: ``{"_id", "text"}``;
* ``qrels.jsonl``: ``{"query-id", "corpus-id", "score"}`` — JSON lines, not BEIR's TSV.

Conventions: task ``completeness`` (a query needs its whole pair: ``Comp@2``), a grade >= 1 is
relevant; only judged queries are kept (all 1,000 are); each query's ``meta["set_size"]`` is the
number of documents it needs. R@2, R@10 and R@100 are the paper's measures (R@20 besides, which the
paper also plots for the small set); on the 46 documents of ``limit-small`` any ranking of the
whole corpus has R@100 = 1. The version is the content hash of what loaded.

``online=True`` reads the hub dataset when the local files are absent (through ``datasets``,
imported only then), at the revision MTEB's LIMIT tasks pin: configs ``corpus`` (split ``corpus``),
``queries`` (split ``queries``) and ``default`` (split ``test``: the qrels).

Every malformed input is a ``DataError`` naming the file (or the hub config), the line (the row)
and the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Iterable, Iterator

from harness.data import DataError, get_field, iter_jsonl, parse_grade
from harness.registry import UnknownNameError
from harness.types import Benchmark, BenchmarkMeta, Judgments

from .loader import LoaderBase, Origin, build_corpus, build_queries, build_relevance, set_size_stats, with_set_size

PAPER = "Weller et al. 2025, 'On the Theoretical Limitations of Embedding-based Retrieval', arXiv:2508.21038"
PAPER_URL = "https://arxiv.org/abs/2508.21038"
REPO = "https://github.com/google-deepmind/limit"
CITATION = """@article{weller2025theoretical,
  title={On the Theoretical Limitations of Embedding-Based Retrieval},
  author={Weller, Orion and Boratko, Michael and Naim, Iftekhar and Lee, Jinhyuk},
  journal={arXiv preprint arXiv:2508.21038},
  year={2025}
}"""
LICENSE = "CC BY 4.0 (the data; the code of google-deepmind/limit is Apache-2.0)"
FILES = ("corpus.jsonl", "queries.jsonl", "qrels.jsonl")
# the hub configs and splits of each file (MTEB's retrieval layout)
HF_PARTS = {"corpus.jsonl": ("corpus", "corpus"), "queries.jsonl": ("queries", "queries"),
            "qrels.jsonl": ("default", "test")}


class Variant:
    """One of the two sets: its folder, hub dataset (at the revision MTEB's task pins) and documents."""

    def __init__(self, title: str, folder: str, hf: str, revision: str, documents: int, what: str):
        self.title, self.folder, self.hf, self.revision, self.documents, self.what = (
            title, folder, hf, revision, documents, what)


VARIANTS = {
    "limit-small": Variant("LIMIT-small", "limit-small", "orionweller/LIMIT-small",
                           "ff4a8f2476ae77476c1912f1f3cb5bb5f2d766d4", 46,
                           "only the 46 people the queries judge"),
    "limit": Variant("LIMIT", "limit", "orionweller/LIMIT", "48142cc741b04d0b4af370ade7e8b42430382670", 50_000,
                     "the 46 people the queries judge among 50,000; the others like none of the queried attributes"),
}


def variant_name(name: str) -> str:
    """``limit-small`` / ``limit-small:test`` → ``limit-small``; any other name is an error."""
    base, sep, split = name.partition(":")
    if base not in VARIANTS or (sep and split != "test"):
        raise UnknownNameError(f"unknown LIMIT benchmark {name!r}; use 'limit-small' or 'limit' (one test split each)")
    return base


# ---------------------------------------------------------------------------------------------
# records: one reader for a local file and a hub split, so both are checked the same way

Rows = Iterable[tuple[int, Any]]


def _objects(rows: Rows, origin: Origin) -> Iterator[tuple[int, dict[str, Any]]]:
    for line, obj in rows:
        if not isinstance(obj, dict):
            raise DataError(origin, line, f"expected a JSON object, got {type(obj).__name__}")
        yield line, obj


def corpus_records(rows: Rows, origin: Origin) -> Iterator[tuple[int, str, str, str]]:
    """``{"_id", "title"?, "text"}`` rows as ``(line, id, title, text)``; a missing or null title is ``""``."""
    for line, obj in _objects(rows, origin):
        doc_id = get_field(obj, "_id", origin, line)  # type: ignore[arg-type]
        title = get_field(obj, "title", origin, line, kind=(str, type(None)), default="") or ""  # type: ignore[arg-type]
        yield line, doc_id, title, get_field(obj, "text", origin, line)  # type: ignore[arg-type]


def query_records(rows: Rows, origin: Origin) -> Iterator[tuple[int, str, str]]:
    """``{"_id", "text"}`` rows as ``(line, id, text)``."""
    for line, obj in _objects(rows, origin):
        yield line, get_field(obj, "_id", origin, line), get_field(obj, "text", origin, line)  # type: ignore[arg-type]


def qrel_records(rows: Rows, origin: Origin) -> Iterator[tuple[int, str, str, int]]:
    """``{"query-id", "corpus-id", "score"}`` rows as ``(line, query id, document id, grade)``; the
    score is a whole number (``1``, ``1.0`` or ``"1"``)."""
    for line, obj in _objects(rows, origin):
        qid = get_field(obj, "query-id", origin, line)  # type: ignore[arg-type]
        did = get_field(obj, "corpus-id", origin, line)  # type: ignore[arg-type]
        for key, value in (("query-id", qid), ("corpus-id", did)):
            if not value.strip():
                raise DataError(origin, line, f"field {key!r} is empty")
        score = get_field(obj, "score", origin, line, kind=(int, float, str))  # type: ignore[arg-type]
        if isinstance(score, bool):
            raise DataError(origin, line, f"field 'score' must be a whole number, got {score!r}")
        yield line, qid, did, parse_grade(str(score), origin, line, "score")


def file_rows(path: Path) -> Rows:
    """The JSON objects of a JSON-lines file with their line numbers (strict: :func:`harness.data.iter_jsonl`)."""
    return iter_jsonl(path)


class Limit(LoaderBase):
    """LIMIT loader (entry points ``limit-small`` and ``limit``); see the module docstring."""

    task: ClassVar[str] = "completeness"
    default_measures: ClassVar[tuple[str, ...]] = ("R@2", "R@10", "R@20", "R@100", "Comp@2", "Comp@10", "nDCG@10")
    relevance_threshold: ClassVar[int] = 1
    license: ClassVar[str] = LICENSE

    @classmethod
    def variants(cls) -> list[str]:
        return list(VARIANTS)

    @classmethod
    def source_of(cls, v: Variant) -> str:
        return (f"{REPO} (folder data/{v.folder}/: corpus.jsonl, queries.jsonl, qrels.jsonl; copy it to "
                f"<data_dir>/limit/{v.folder}/), or the Hugging Face dataset {v.hf} "
                f"(https://huggingface.co/datasets/{v.hf}, revision {v.revision[:7]}) with --online; paper: {PAPER} "
                f"({PAPER_URL})")

    @classmethod
    def info(cls, name: str) -> BenchmarkMeta:
        base = variant_name(name)
        v = VARIANTS[base]
        subdir = f"limit/{v.folder}"
        return cls.declare(
            name=base,
            description=(f"{v.title} ({PAPER}, {PAPER_URL}): 1,000 'Who likes X?' queries, each with exactly 2 "
                         f"relevant people among documents 'NAME likes A, B, …'; the queries cover almost every "
                         f"pair of the 46 relevant people, so a retriever must be able to return any pair together "
                         f"(a single embedding of bounded dimension provably cannot); {v.what}. The paper's measures "
                         "are recall@2, @10 and @100; Comp@2: both people in the top 2."),
            source=cls.source_of(v),
            files=[f"{subdir}/{f}" for f in FILES],
            subdir=subdir,
        )

    @classmethod
    def load(cls, name: str, data_dir: Path, online: bool = False) -> Benchmark:
        base = variant_name(name)
        v = VARIANTS[base]
        notes: dict[str, object] = {"paper": PAPER_URL, "citation": CITATION, "repository": REPO}
        if online and cls.missing_files(base, data_dir):
            parts = {f: cls._hf_rows(v, f) for f in FILES}
            notes["online_source"] = f"hf:{v.hf}@{v.revision}"
            source = f"Hugging Face dataset {v.hf} at revision {v.revision} (https://huggingface.co/datasets/{v.hf})"
        else:
            root = cls.require(base, data_dir)
            parts = {f: (file_rows(root / f), root / f) for f in FILES}
            source = cls.info(base).source
        (corpus_rows, corpus_origin), (query_rows, query_origin), (qrel_rows, qrel_origin) = (
            parts[f] for f in FILES)
        corpus = build_corpus(corpus_records(corpus_rows, corpus_origin), corpus_origin)
        all_queries = build_queries(query_records(query_rows, query_origin), query_origin)
        relevance = build_relevance(qrel_records(qrel_rows, qrel_origin), qrel_origin, corpus,
                                    {q.id for q in all_queries}, cls.relevance_threshold)
        queries = with_set_size((q for q in all_queries if q.id in relevance), relevance)
        stats = set_size_stats(relevance, cls.relevance_threshold)
        relevant_docs = {d for docs in relevance.values() for d, g in docs.items() if g >= cls.relevance_threshold}
        pairs = {tuple(sorted(d for d, g in docs.items() if g >= cls.relevance_threshold))
                 for docs in relevance.values()}
        notes.update({
            "documents": len(corpus),
            "queries_in_source": len(all_queries),
            "judged_queries": len(relevance),
            "qrels_rows": sum(len(d) for d in relevance.values()),
            "relevant_documents": len(relevant_docs),
            "distinct_relevant_sets": len(pairs),
            "items_per_query": stats,
        })
        need = (f"exactly {stats['min']}" if stats["min"] == stats["max"] else f"{stats['min']}-{stats['max']}")
        description = (
            f"{v.title} ({PAPER}, {PAPER_URL}): {len(queries):,} 'Who likes X?' queries over {len(corpus):,} "
            f"documents 'NAME likes A, B, …' ({v.what}), each needing {need} people, those who like X "
            f"({len(relevant_docs):,} people are relevant to some query, in {len(pairs):,} distinct sets). "
            "The queries cover almost every pair of the relevant people, so a retriever must be able to "
            "return any pair together, which a single embedding of bounded dimension provably cannot; the paper "
            "finds state-of-the-art embedding models under 20% recall@100 on the full set, BM25 near perfect. "
            "Measures: the paper's recall@2, @10 and @100 (R@k), Comp@2 (both people in the top 2), nDCG@10."
        )
        return cls.build(base, corpus, queries, Judgments(relevance), splits={"test": [q.id for q in queries]},
                         description=description, source=source, notes=notes)

    @staticmethod
    def _hf_rows(v: Variant, file: str) -> tuple[Rows, str]:
        """Rows of one hub config (imported here: the only network path of this loader)."""
        try:
            from datasets import load_dataset
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("online LIMIT loading needs the 'datasets' package: pip install 'beyondsim[online]'") from e
        config, split = HF_PARTS[file]
        ds = load_dataset(v.hf, config, split=split, revision=v.revision)
        return ((i, dict(row)) for i, row in enumerate(ds, 1)), f"hf:{v.hf}@{v.revision[:7]}[{config}/{split}]"
