"""MultiHop-RAG (Tang & Yang, 2024): news questions whose evidence spans several articles.

Official files (GitHub ``yixuantt/MultiHop-RAG`` and the Hugging Face dataset
``yixuantt/MultiHopRAG``, configs ``corpus`` and ``MultiHopRAG``, split ``train`` each), read from
``<data_dir>/multihop-rag/``:

* ``corpus.json`` — a JSON list of 609 articles ``{title, author, source, published_at, category,
  url, body}``;
* ``MultiHopRAG.json`` — a JSON list of 2,556 questions ``{query, answer, question_type,
  evidence_list}``, each evidence ``{title, author, url, source, category, published_at, fact}``.

Conventions:

* task ``completeness``: a question needs every article its evidence comes from, all graded 1
  (``relevance_threshold = 1``).
* Document ids come from the position in ``corpus.json``: ``multihop_doc_<index>`` (0-based);
  title = the article title, text = its body. Query ids likewise: ``multihop_q_<index>`` over all
  questions of ``MultiHopRAG.json``, so an id does not change when questions are dropped.
* Evidence is matched to an article by URL; when no article has that URL (or several do), by
  title among the candidates. Evidence that matches no article, or several, is a ``DataError``.
  Several facts from the same article count once.
* ``null_query`` questions (no evidence: the corpus cannot answer them; 301 of 2,556) are dropped
  and counted in ``notes["null_queries_dropped"]``; a question of another type without evidence
  is a ``DataError``.
* MultiHop-RAG releases no train/validation/test split. As in the NNN paper, the 2,255 remaining
  questions are split at random (seed 0; ids sorted, then shuffled): 10 % test, 10 % dev, the
  rest train (225 / 225 / 1,805). ``multihop-rag`` is the test part, ``multihop-rag:dev`` and
  ``multihop-rag:train`` the others; all three share the whole corpus.
* ``Query.meta`` keeps ``question_type`` (inference / comparison / temporal) and ``answer``.

``online=True`` reads the hub dataset when the local files are absent (through ``datasets``,
imported only then).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, ClassVar, Iterable

from harness.data import DataError
from harness.types import Benchmark, BenchmarkMeta, Corpus, Document, Judgments, Query

from .loader import LoaderBase, Origin
from .loader import item_field, json_list, seeded_partition, set_size_stats, split_name, split_of, with_set_size

GITHUB = "https://github.com/yixuantt/MultiHop-RAG"
HF_DATASET = "yixuantt/MultiHopRAG"
CORPUS_FILE, QUERIES_FILE = "corpus.json", "MultiHopRAG.json"
HF_CONFIGS = {CORPUS_FILE: "corpus", QUERIES_FILE: "MultiHopRAG"}
SPLITS = ("test", "dev", "train")
FRACTIONS = (("test", 0.1), ("dev", 0.1))  # the rest is train
SEED = 0
NULL_TYPE = "null_query"


def articles(rows: Iterable[tuple[int, Any]], origin: Origin) -> tuple[Corpus, list[tuple[str, str]]]:
    """Corpus records → corpus and the ``(url, title)`` of each document, in order."""
    docs: list[Document] = []
    keys: list[tuple[str, str]] = []
    for i, obj in rows:
        where = f"item {i}"
        title = item_field(obj, "title", origin, where, nonempty=True)
        url = item_field(obj, "url", origin, where)
        body = item_field(obj, "body", origin, where, nonempty=True)
        docs.append(Document(f"multihop_doc_{i}", body, title))
        keys.append((url.strip(), title.strip()))
    if not docs:
        raise DataError(origin, None, "no articles found")
    return Corpus(docs), keys


class ArticleIndex:
    """Evidence → document: by URL, then by title among the URL's articles (or all of them)."""

    def __init__(self, corpus: Corpus, keys: list[tuple[str, str]]):
        self.by_url: dict[str, list[int]] = {}
        self.by_title: dict[str, list[int]] = {}
        for row, (url, title) in enumerate(keys):
            if url:
                self.by_url.setdefault(url, []).append(row)
            self.by_title.setdefault(title, []).append(row)
        self.ids = corpus.ids
        self.keys = keys
        self.by_title_matches = 0

    def find(self, url: str, title: str) -> int | None | list[int]:
        """The document row, ``None`` when nothing matches, or the candidates when ambiguous."""
        cands = self.by_url.get(url.strip(), []) if url else []
        if len(cands) == 1:
            return cands[0]
        if cands:  # several articles share the URL: the title decides
            narrowed = [r for r in cands if self.keys[r][1] == title.strip()]
            return narrowed[0] if len(narrowed) == 1 else cands
        by_title = self.by_title.get(title.strip(), [])
        if len(by_title) == 1:
            self.by_title_matches += 1
            return by_title[0]
        return by_title or None

    @property
    def repeated_urls(self) -> int:
        return sum(len(v) - 1 for v in self.by_url.values() if len(v) > 1)


def questions(rows: Iterable[tuple[int, Any]], origin: Origin, index: ArticleIndex
              ) -> tuple[list[Query], dict[str, dict[str, int]], Counter[str], int]:
    """Question records → kept queries, judgments, question-type counts (all questions) and the
    number of evidence items."""
    queries: list[Query] = []
    relevance: dict[str, dict[str, int]] = {}
    types: Counter[str] = Counter()
    n_evidence = 0
    for i, obj in rows:
        where = f"item {i}"
        text = item_field(obj, "query", origin, where, nonempty=True)
        qtype = item_field(obj, "question_type", origin, where, nonempty=True)
        answer = item_field(obj, "answer", origin, where, kind=(str, type(None)), default=None)
        evidence = item_field(obj, "evidence_list", origin, where, kind=(list, type(None)), default=None) or []
        types[qtype] += 1
        if qtype == NULL_TYPE:
            continue
        if not evidence:
            raise DataError(origin, None, f"{where}: field 'evidence_list' is empty but question_type is {qtype!r} "
                                          f"(only {NULL_TYPE!r} questions have no evidence)")
        grades: dict[str, int] = {}
        for j, ev in enumerate(evidence):
            ewhere = f"{where}, evidence {j}"
            url = item_field(ev, "url", origin, ewhere, kind=(str, type(None)), default=None) or ""
            title = item_field(ev, "title", origin, ewhere, kind=(str, type(None)), default=None) or ""
            if not url.strip() and not title.strip():
                raise DataError(origin, None, f"{ewhere}: neither 'url' nor 'title' is given")
            found = index.find(url, title)
            if found is None:
                raise DataError(origin, None, f"{ewhere}: no article of the corpus has url {url!r} or title {title!r}")
            if isinstance(found, list):
                raise DataError(origin, None, f"{ewhere}: url {url!r} / title {title!r} match "
                                              f"{len(found)} articles ({', '.join(index.ids[r] for r in found)})")
            grades[index.ids[found]] = 1
            n_evidence += 1
        qid = f"multihop_q_{i}"
        meta: dict[str, object] = {"question_type": qtype}
        if answer is not None:
            meta["answer"] = answer
        queries.append(Query(qid, text, meta))
        relevance[qid] = grades
    return queries, relevance, types, n_evidence


class MultiHopRAG(LoaderBase):
    """MultiHop-RAG loader (entry point ``multihop-rag``); see the module docstring."""

    task: ClassVar[str] = "completeness"
    default_measures: ClassVar[tuple[str, ...]] = ("Comp@3", "Comp@5", "R@3", "R@5", "nDCG@10")
    relevance_threshold: ClassVar[int] = 1
    subdir: ClassVar[str] = "multihop-rag"
    files: ClassVar[tuple[str, ...]] = (CORPUS_FILE, QUERIES_FILE)
    source: ClassVar[str] = (
        f"Hugging Face dataset {HF_DATASET} (https://huggingface.co/datasets/{HF_DATASET}; configs 'corpus' and "
        f"'MultiHopRAG'), files corpus.json and MultiHopRAG.json; code {GITHUB}"
    )
    license: ClassVar[str] = "ODC-BY 1.0"

    @classmethod
    def variants(cls) -> list[str]:
        return ["multihop-rag", "multihop-rag:train", "multihop-rag:dev"]

    @classmethod
    def info(cls, name: str) -> BenchmarkMeta:
        split = split_of(name, "multihop-rag", SPLITS)
        return replace(super().info(split_name("multihop-rag", split)), description=(
            f"MultiHop-RAG, the {split} part of a seeded (seed {SEED}) random 80/10/10 train/dev/test split of the "
            "2,255 questions with evidence: news questions that need every article their evidence comes from "
            "(2-4 of 609)."
        ))

    @classmethod
    def load(cls, name: str, data_dir: Path, online: bool = False) -> Benchmark:
        split = split_of(name, "multihop-rag", SPLITS)
        bname = split_name("multihop-rag", split)
        notes: dict[str, object] = {}
        if online and cls.missing_files(name, data_dir):
            corpus_rows, corpus_origin = cls._hf_rows(HF_CONFIGS[CORPUS_FILE])
            query_rows, query_origin = cls._hf_rows(HF_CONFIGS[QUERIES_FILE])
            notes["online_source"] = f"hf:{HF_DATASET}"
        else:
            root = cls.require(name, data_dir)
            corpus_origin, query_origin = root / CORPUS_FILE, root / QUERIES_FILE
            corpus_rows = enumerate(json_list(corpus_origin))
            query_rows = enumerate(json_list(query_origin))
        corpus, keys = articles(corpus_rows, corpus_origin)
        index = ArticleIndex(corpus, keys)
        all_queries, relevance, types, n_evidence = questions(query_rows, query_origin, index)
        if not all_queries:
            raise DataError(query_origin, None, "no questions with evidence found")
        parts = seeded_partition(relevance, FRACTIONS, rest="train", seed=SEED)
        keep = parts[split]
        queries = with_set_size((q for q in all_queries if q.id in keep), relevance)
        relevance = {q.id: relevance[q.id] for q in queries}
        if not queries:
            raise DataError(query_origin, None, f"the {split} part is empty: {len(all_queries)} questions are too few")
        stats = set_size_stats(relevance)
        notes.update({
            "questions_in_source": sum(types.values()),
            "question_types_in_source": dict(types),
            "null_queries_dropped": types.get(NULL_TYPE, 0),
            "questions_with_evidence": len(all_queries),
            "evidence_items": n_evidence,
            "evidence_matched_by_title": index.by_title_matches,
            "repeated_article_urls": index.repeated_urls,
            "split_seed": SEED,
            "split_fractions": {"train": 0.8, "dev": 0.1, "test": 0.1},
            "split_sizes": {k: len(v) for k, v in parts.items()},
            "articles": len(corpus),
            "queries": len(queries),
            "items_per_query": stats,
            "question_types": dict(Counter(str(q.meta["question_type"]) for q in queries)),
        })
        description = (
            f"MultiHop-RAG, the {split} part ({len(queries):,} of {len(all_queries):,} questions with evidence; "
            f"{types.get(NULL_TYPE, 0):,} null_query questions dropped) of a seeded (seed {SEED}) random 80/10/10 "
            f"train/dev/test split, over {len(corpus):,} news articles; each question needs the "
            f"{stats['min']}-{stats['max']} articles its evidence comes from (mean {stats['mean']:.2f}), all graded 1."
        )
        return cls.build(bname, corpus, queries, Judgments(relevance), splits={split: [q.id for q in queries]},
                         description=description, notes=notes)

    @staticmethod
    def _hf_rows(config: str) -> tuple[Iterable[tuple[int, Any]], str]:
        """Rows of one config from the Hugging Face hub (imported here: the only network path)."""
        try:
            from datasets import load_dataset
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("online MultiHop-RAG loading needs the 'datasets' package: pip install datasets") from e
        ds = load_dataset(HF_DATASET, config, split="train")
        return ((i, dict(row)) for i, row in enumerate(ds)), f"hf:{HF_DATASET}[{config}]"
