"""ExcluIR: exclusionary queries ("… apart from X", "… without mentioning Y"; Zhang et al., 2025).

Each ExcluIR query comes with two documents from the corpus: one that answers it while
respecting the exclusion (satisfying, grade 2) and one that answers it by talking about what the
user excluded (violating, grade 0 and listed in ``Judgments.violating``). ``relevance_threshold
= 2``: only the satisfying document is relevant.

Names:

* ``excluir`` (alias ``excluir:test``) — CoDeR's held-out test split (``excluir/coder/test/``:
  ``queries.jsonl``, ``corpus.jsonl``; 691 queries ``excluir_q_2761`` … ``excluir_q_3451`` over the
  1,371 documents they reference). CoDeR trained its compatibility encoder on ExcluIR queries and
  removed every training query from evaluation; this split is what is left. Every query's
  satisfying document is cross-checked against ``excluir/coder/qrels/test.tsv`` (a disagreement
  is a ``DataError``).
* ``excluir:train`` — the train side of CoDeR's split (``excluir/coder/train/``: 2,687 queries,
  5,373 documents in the file). Leakage guard: a train query whose id or text occurs among the
  test queries, and a train document whose id or text occurs in the test corpus, are dropped
  (the counts are in ``notes``). On the released files no query is dropped but 80 documents are:
  the train corpus file still holds the documents of the 74 queries that CoDeR removed from the
  train side because they are test queries, 80 of which are test documents; the split therefore
  has 5,293 documents. The test files are read for this check, so they are required too.
* ``excluir:coder`` — protocol variant: the 691 queries of ``excluir`` scored as CoDeR scores them
  (its Table 3), over the pool of every document of the manual queries CoDeR converted, test and
  train side (``excluir/coder/test/corpus.jsonl`` and ``excluir/coder/train/corpus.jsonl``: 1,371
  + 5,373 documents, 80 in both, 6,664 in the pool). A document id in both files must carry the
  same title and text (a ``DataError`` otherwise). Test queries only; the qrels cross-check is
  that of ``excluir``. A retriever trained on ``excluir:train`` has seen the pool's train side,
  so the leakage guard refuses it there.
* ``excluir:full`` — the official ExcluIR manual test set (3,452 queries) over the full official
  corpus, as released in the ExcluIR repository's data folder: ``corpus.json`` (a JSON list of
  document strings, ~90k) and ``test_manual_final.json`` (a JSON list of ``{question0,
  RQ_rewrite, corpus_sub_index}``); the same records as JSON lines are read from
  ``excluir/excluir_manual.jsonl`` when present. ``RQ_rewrite`` is the query (``ExcluQ`` is
  accepted too, the key of the repository's evaluation script), ``corpus_sub_index`` (or
  ``index``) = ``[violating index, satisfying index]`` into ``corpus.json``. Ids follow CoDeR's
  conversion: ``excluir_q_<record index>`` and ``excluir_doc_<corpus index>``. Note that CoDeR's
  ids ``excluir_q_2916`` … ``excluir_q_2999`` are rotated by one against the record order of the
  manual file (same texts and documents, different ids), so those 84 ids do not name the same
  query in ``excluir`` and ``excluir:full``.

Measures: the CoDeR paper reports ExcluIR (its Table 3) as V@2, V@3, V@5, V@10 and FVR (the rank
of the first violating document, capped at 11, i.e. ``FVR@10``); those are the defaults, with
nDCG@10 (CoDeR's Table 11 uses nDCG) and R@1 / R@10 for the satisfying document (R@1 is
ExcluIR's own headline measure).

There is no automatic download (the official data sits in a Google Drive folder linked from the
repository README); ``online=True`` changes nothing, and absent files raise ``MissingDataError``
saying where to get them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any, ClassVar, Iterator

from harness.data import DataError, MissingDataError, get_field, iter_jsonl, read_qrels_tsv
from harness.registry import UnknownNameError
from harness.types import Benchmark, BenchmarkMeta, Corpus, Document, Judgments, Query

from .loader import IdTracker, LoaderBase, build_corpus, check_doc_refs, get_id_list, require_text
from .loader import item_field, json_list, split_name

EXCLUIR_REPO = "https://github.com/zwh-sdu/ExcluIR"
EXCLUIR_DRIVE = "https://drive.google.com/drive/folders/1O7IHuEHgjAHL6FCb8z5-zTI3YCqcA5J1"
CODER_DATA = "https://github.com/nice-hku-coder/coder_data"
SPLITS = ("test", "train", "full", "coder")
POOL_PROTOCOL = ("CoDeR (arXiv:2606.13204), Table 3: the test queries over the pool of every document of the manual "
                 "queries (test and train side), not the test documents alone")

CODER_FILES = {
    "test": ("coder/test/queries.jsonl", "coder/test/corpus.jsonl", "coder/qrels/test.tsv"),
    "train": ("coder/train/queries.jsonl", "coder/train/corpus.jsonl", "coder/test/queries.jsonl",
              "coder/test/corpus.jsonl"),
    "coder": ("coder/test/queries.jsonl", "coder/test/corpus.jsonl", "coder/qrels/test.tsv",
              "coder/train/corpus.jsonl"),
}
FULL_CORPUS = "corpus.json"
FULL_QUERIES = ("excluir_manual.jsonl", "test_manual_final.json")  # JSON lines first, then the released list

SOURCE_CODER = (
    f"CoDeR data release {CODER_DATA} (ExcluIR train/test split: excluir/coder/...), built from the "
    f"official ExcluIR data ({EXCLUIR_REPO}, Google Drive folder {EXCLUIR_DRIVE}); no automatic download: "
    "put the files under <data_dir>/excluir/coder/"
)
SOURCE_FULL = (
    f"ExcluIR repository {EXCLUIR_REPO}: download corpus.json and test_manual_final.json from the Google Drive "
    f"folder linked in its README ({EXCLUIR_DRIVE}); no automatic download: put corpus.json at "
    "<data_dir>/excluir/corpus.json and the manual test set at <data_dir>/excluir/test_manual_final.json "
    "(or, as JSON lines, <data_dir>/excluir/excluir_manual.jsonl)"
)


def excluir_split(name: str) -> str:
    """``excluir`` / ``excluir:test`` → ``test``; ``excluir:train``; ``excluir:full``; the protocol
    variant ``excluir:coder``."""
    base, sep, split = name.partition(":")
    split = split or ("" if sep else "test")
    if base != "excluir" or split not in SPLITS:
        raise UnknownNameError(f"unknown ExcluIR benchmark {name!r}; use 'excluir', 'excluir:train', 'excluir:full' "
                         "or 'excluir:coder'")
    return split


# ---------------------------------------------------------------------------------------------
# CoDeR's split (BEIR-like corpus + queries with satisfying/violating ids)


def coder_corpus(path: Path) -> Corpus:
    """``{doc_id, title?, text}`` lines."""
    return build_corpus(
        ((line, get_field(o, "doc_id", path, line),
          get_field(o, "title", path, line, kind=(str, type(None)), default="") or "",
          require_text(o, "text", path, line)) for line, o in iter_jsonl(path)),
        path,
    )


def coder_queries(path: Path, corpus: Corpus) -> tuple[list[Query], Judgments, dict[str, int]]:
    """``{query_id, query, constraint_satisfying_doc_ids, constraint_violating_doc_ids,
    graded_relevance, topical_relevant_doc_ids}`` lines → queries, judgments, query id → line."""
    seen = IdTracker(path, "query")
    queries: list[Query] = []
    relevance: dict[str, dict[str, int]] = {}
    violating: dict[str, frozenset[str]] = {}
    lines: dict[str, int] = {}
    for line, obj in iter_jsonl(path):
        qid = get_field(obj, "query_id", path, line)
        seen.add(qid, line)
        text = require_text(obj, "query", path, line)
        sat = get_id_list(obj, "constraint_satisfying_doc_ids", path, line)
        vio = get_id_list(obj, "constraint_violating_doc_ids", path, line)
        for field_name, ids in (("constraint_satisfying_doc_ids", sat), ("constraint_violating_doc_ids", vio)):
            if len(ids) != 1:
                raise DataError(path, line, f"field {field_name!r} must list exactly one document (an ExcluIR "
                                            f"query has one satisfying and one violating document), got {len(ids)}")
            check_doc_refs(ids, corpus, path, line, field_name)
        if sat == vio:
            raise DataError(path, line, f"document {sat[0]!r} is both satisfying and violating")
        topical = get_id_list(obj, "topical_relevant_doc_ids", path, line) if "topical_relevant_doc_ids" in obj else []
        check_doc_refs(topical, corpus, path, line, "topical_relevant_doc_ids")
        graded = get_field(obj, "graded_relevance", path, line, kind=dict, default=None)
        want = {sat[0]: 2, vio[0]: 0}
        if graded is not None:
            got = {}
            for d, g in graded.items():
                if isinstance(g, bool) or not isinstance(g, (int, float)):
                    raise DataError(path, line, f"field 'graded_relevance': grade of {d!r} must be a number, got {g!r}")
                got[d] = g
            if got != want:
                raise DataError(path, line, f"field 'graded_relevance' is {graded!r}, but the satisfying/violating "
                                            f"lists give {want!r}")
        queries.append(Query(qid, text))
        relevance[qid] = want
        violating[qid] = frozenset(vio)
        lines[qid] = line
    if not queries:
        raise DataError(path, None, "no queries found")
    return queries, Judgments(relevance, violating), lines


def check_against_qrels(qrels_path: Path, queries_path: Path, judgments: Judgments, lines: dict[str, int]) -> int:
    """Every query's satisfying document must be what ``qrels_path`` marks relevant for it.
    Returns how many qrels rows name other queries (CoDeR's file covers all 3,452)."""
    qrels: dict[str, dict[str, tuple[int, int]]] = {}
    for line, qid, did, grade in read_qrels_tsv(qrels_path):
        if grade > 0:
            qrels.setdefault(qid, {})[did] = (grade, line)
    for qid, line in lines.items():
        sat = sorted(d for d, g in judgments.relevance[qid].items() if g == 2)
        rel = qrels.get(qid)
        if rel is None:
            raise DataError(queries_path, line, f"query {qid!r} has no relevant document in {qrels_path}")
        if sorted(rel) != sat:
            where = ", ".join(f"{d!r} (line {ln})" for d, (_, ln) in sorted(rel.items()))
            raise DataError(queries_path, line, f"query {qid!r}: satisfying document {sat[0]!r} disagrees with "
                                                f"{qrels_path.name}, which marks {where} relevant")
    return sum(1 for q in qrels if q not in lines)


def leakage_guard(test_queries: Path, test_corpus: Path) -> tuple[set[str], set[str], set[str], set[str]]:
    """Ids and texts of the test split: ``(query ids, query texts, doc ids, doc texts)``."""
    qids, qtexts, dids, dtexts = set(), set(), set(), set()
    for line, obj in iter_jsonl(test_queries):
        qids.add(get_field(obj, "query_id", test_queries, line))
        qtexts.add(get_field(obj, "query", test_queries, line).strip())
    for line, obj in iter_jsonl(test_corpus):
        dids.add(get_field(obj, "doc_id", test_corpus, line))
        dtexts.add(get_field(obj, "text", test_corpus, line).strip())
    return qids, qtexts, dids, dtexts


def pool_corpus(corpus: Corpus, other: Corpus, other_path: Path) -> tuple[Corpus, int]:
    """``corpus`` followed by the documents of ``other`` (read from ``other_path``) it lacks, and how
    many were added; a document of both must have the same title and text."""
    added = []
    for i, d in enumerate(other, 1):
        if d.id not in corpus:
            added.append(d)
        elif corpus.get(d.id) != d:
            raise DataError(other_path, None, f"document {i} (id {d.id!r}): fields 'title'/'text' differ from "
                                              "the test corpus's document of that id")
    return Corpus([*corpus, *added]), len(added)


# ---------------------------------------------------------------------------------------------
# The official release


def full_corpus(path: Path) -> tuple[Corpus, int]:
    """``corpus.json``: a JSON list of document strings → ``excluir_doc_<index>``; also returns
    how many are blank."""
    items = json_list(path)
    blank = 0
    docs: list[Document] = []
    for i, text in enumerate(items):
        if not isinstance(text, str):
            raise DataError(path, None, f"item {i}: expected a document string, got {type(text).__name__}")
        blank += not text.strip()
        docs.append(Document(f"excluir_doc_{i}", text))
    if not docs:
        raise DataError(path, None, "no documents found")
    return Corpus(docs), blank


def full_query_records(path: Path) -> Iterator[tuple[int, str, Any]]:
    """``(record index, where, record)`` of the manual test set, JSON lines or a JSON list."""
    if path.suffix == ".jsonl":
        for i, (line, obj) in enumerate(iter_jsonl(path)):
            yield i, f"line {line}", obj
    else:
        for i, obj in enumerate(json_list(path)):
            yield i, f"item {i}", obj


def full_queries(path: Path, corpus: Corpus) -> tuple[list[Query], Judgments]:
    queries: list[Query] = []
    relevance: dict[str, dict[str, int]] = {}
    violating: dict[str, frozenset[str]] = {}
    n = len(corpus)
    for i, where, obj in full_query_records(path):
        text = item_field(obj, ("RQ_rewrite", "ExcluQ"), path, where, nonempty=True)
        index = item_field(obj, ("corpus_sub_index", "index"), path, where, kind=list)
        key = "corpus_sub_index" if "corpus_sub_index" in obj else "index"
        if len(index) != 2 or any(isinstance(x, bool) or not isinstance(x, int) for x in index):
            raise DataError(path, None, f"{where}: field {key!r} must be [violating index, satisfying index] "
                                        f"(two integers), got {index!r}")
        bad = [x for x in index if not 0 <= x < n]
        if bad:
            raise DataError(path, None, f"{where}: field {key!r} names corpus index {bad[0]} but corpus.json "
                                        f"has {n:,} documents")
        if index[0] == index[1]:
            raise DataError(path, None, f"{where}: field {key!r} gives the same document ({index[0]}) as "
                                        "violating and satisfying")
        vio, sat = (f"excluir_doc_{x}" for x in index)
        original = obj.get("question0")
        qid = f"excluir_q_{i}"
        queries.append(Query(qid, text, {"original_question": original} if isinstance(original, str) else {}))
        relevance[qid] = {sat: 2, vio: 0}
        violating[qid] = frozenset({vio})
    if not queries:
        raise DataError(path, None, "no queries found")
    return queries, Judgments(relevance, violating)


# ---------------------------------------------------------------------------------------------
# Loader


class ExcluIR(LoaderBase):
    """ExcluIR loader (entry point ``excluir``); see the module docstring."""

    task: ClassVar[str] = "constraint"
    default_measures: ClassVar[tuple[str, ...]] = ("Sat@10", "V@2", "V@3", "V@5", "V@10", "FVR@10", "nDCG@10", "R@1", "R@10")
    relevance_threshold: ClassVar[int] = 2
    subdir: ClassVar[str] = "excluir"
    license: ClassVar[str] = "none stated"

    @classmethod
    def variants(cls) -> list[str]:
        return ["excluir", "excluir:train", "excluir:full", "excluir:coder"]

    @classmethod
    def protocol_variants(cls, name: str) -> dict[str, str]:
        return {"excluir:coder": POOL_PROTOCOL} if excluir_split(name) == "test" else {}

    @classmethod
    def info(cls, name: str) -> BenchmarkMeta:
        split = excluir_split(name)
        if split == "full":
            files = [f"{cls.subdir}/{FULL_CORPUS}", f"{cls.subdir}/{FULL_QUERIES[0]}"]
            optional = [f"{cls.subdir}/{FULL_QUERIES[1]}"]
            what = "the official manual test set (3,452 queries) over the full ExcluIR corpus (~90k documents)"
        else:
            files = [f"{cls.subdir}/{f}" for f in CODER_FILES[split]]
            optional = []
            what = {"test": "CoDeR's held-out test split (691 queries)",
                    "train": "the train side of CoDeR's split (2,687 queries)",
                    "coder": f"CoDeR's held-out test split (691 queries) under the protocol of {POOL_PROTOCOL}"}[split]
        return cls.declare(
            name=split_name("excluir", split),
            task=cls.task,
            description=(f"ExcluIR exclusionary queries, {what}: per query one satisfying document (grade 2) and "
                         "one violating document (grade 0)."),
            source=SOURCE_FULL if split == "full" else SOURCE_CODER,
            license=cls.license,
            files=files,
            subdir=cls.subdir,
            optional_files=optional,
        )

    @classmethod
    def full_query_file(cls, data_dir: Path) -> Path | None:
        for f in FULL_QUERIES:
            p = Path(data_dir) / cls.subdir / f
            if p.is_file():
                return p
        return None

    @classmethod
    def missing_files(cls, name: str, data_dir: Path) -> list[str]:
        split = excluir_split(name)
        data_dir = Path(data_dir)
        if split != "full":
            return super().missing_files(name, data_dir)
        missing = [] if (data_dir / cls.subdir / FULL_CORPUS).is_file() else [f"{cls.subdir}/{FULL_CORPUS}"]
        if cls.full_query_file(data_dir) is None:
            missing.append(f"{cls.subdir}/{FULL_QUERIES[0]}")
        return missing

    @classmethod
    def files_in_use(cls, name: str, data_dir: Path) -> list[Path]:
        split = excluir_split(name)
        root = Path(data_dir) / cls.subdir
        if split == "full":
            paths = [root / FULL_CORPUS, cls.full_query_file(data_dir)]
        else:
            paths = [root / f for f in CODER_FILES[split]]
        return [p for p in paths if p is not None and p.is_file()]

    @classmethod
    def load(cls, name: str, data_dir: Path, online: bool = False) -> Benchmark:
        """``online`` changes nothing: there is no automatic download (see ``source``)."""
        split = excluir_split(name)
        bname = split_name("excluir", split)
        missing = cls.missing_files(name, data_dir)
        if missing:
            raise MissingDataError(bname, Path(data_dir), missing, cls.info(name).source)
        root = Path(data_dir) / cls.subdir
        if split == "full":
            return cls._load_full(bname, root)
        return cls._load_coder(bname, split, root)

    @classmethod
    def _load_coder(cls, name: str, split: str, root: Path) -> Benchmark:
        queries_f, corpus_f = root / CODER_FILES[split][0], root / CODER_FILES[split][1]
        corpus = coder_corpus(corpus_f)
        queries, judgments, lines = coder_queries(queries_f, corpus)
        notes: dict[str, object] = {"queries_file": f"excluir/{CODER_FILES[split][0]}",
                                    "corpus_file": f"excluir/{CODER_FILES[split][1]}",
                                    "documents_in_file": len(corpus), "queries_in_file": len(queries)}
        if split in ("test", "coder"):
            qrels_f = root / CODER_FILES["test"][2]
            notes["qrels_checked"] = f"excluir/{CODER_FILES['test'][2]}"
            notes["qrels_other_queries"] = check_against_qrels(qrels_f, queries_f, judgments, lines)
            how = "CoDeR's held-out test split (every query CoDeR trained on removed)"
            if split == "coder":
                pool_f = root / CODER_FILES["coder"][3]
                corpus, added = pool_corpus(corpus, coder_corpus(pool_f), pool_f)
                notes.update({"pool_file": f"excluir/{CODER_FILES['coder'][3]}", "pool_documents_added": added,
                              "protocol": POOL_PROTOCOL})
                how += f", under the protocol of {POOL_PROTOCOL}"
        else:
            t_qids, t_qtexts, t_dids, t_dtexts = leakage_guard(root / CODER_FILES["train"][2],
                                                               root / CODER_FILES["train"][3])
            drop_docs = {d.id for d in corpus if d.id in t_dids or d.text.strip() in t_dtexts}
            drop_q_test = {q.id for q in queries if q.id in t_qids or q.text.strip() in t_qtexts}
            drop_q_docs = {q.id for q in queries if q.id not in drop_q_test
                           and any(d in drop_docs for d in judgments.relevance[q.id])}
            drop_q = drop_q_test | drop_q_docs
            corpus = Corpus(d for d in corpus if d.id not in drop_docs)
            queries = [q for q in queries if q.id not in drop_q]
            judgments = Judgments({q.id: judgments.relevance[q.id] for q in queries},
                                  {q.id: judgments.violating[q.id] for q in queries})
            notes.update({
                "leakage_guard": "excluir/coder/test/queries.jsonl, excluir/coder/test/corpus.jsonl",
                "documents_dropped_in_test": len(drop_docs),
                "queries_dropped_in_test": len(drop_q_test),
                "queries_dropped_judging_test_documents": len(drop_q_docs),
            })
            how = "the train side of CoDeR's split, with every query or document that occurs in the test split removed"
        return cls._finish(name, split, corpus, queries, judgments, notes, how, SOURCE_CODER)

    @classmethod
    def _load_full(cls, name: str, root: Path) -> Benchmark:
        corpus_f = root / FULL_CORPUS
        queries_f = cls.full_query_file(root.parent)
        assert queries_f is not None  # checked by missing_files
        corpus, blank = full_corpus(corpus_f)
        queries, judgments = full_queries(queries_f, corpus)
        notes: dict[str, object] = {"queries_file": f"excluir/{queries_f.name}",
                                    "corpus_file": f"excluir/{FULL_CORPUS}", "blank_documents": blank}
        how = "the official manual test set over the full ExcluIR corpus"
        return cls._finish(name, "full", corpus, queries, judgments, notes, how, SOURCE_FULL)

    @classmethod
    def _finish(cls, name: str, split: str, corpus: Corpus, queries: list[Query], judgments: Judgments,
                notes: dict[str, object], how: str, source: str) -> Benchmark:
        texts = Counter(q.text for q in queries)
        judged_docs = {d for r in judgments.relevance.values() for d in r}
        notes.update({
            "queries": len(queries),
            "documents": len(corpus),
            "judged_documents": len(judged_docs),
            "repeated_query_texts": sum(c - 1 for c in texts.values() if c > 1),
            "repeated_document_texts": len(corpus) - len({d.text for d in corpus}),
        })
        description = (
            f"ExcluIR, {how}: {len(queries):,} exclusionary queries over {len(corpus):,} documents. Per query one "
            "document satisfies the exclusion (grade 2) and one answers it with the excluded information (grade 0, "
            "listed as violating); relevance threshold 2."
        )
        return cls.build(name, corpus, queries, judgments, splits={split: [q.id for q in queries]},
                         description=description, source=source, notes=notes)
