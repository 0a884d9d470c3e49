"""NevIR: negation pairs (Weller et al., 2024).

Each row ``{id, WorkerId?, q1, doc1, q2, doc2}`` is one pair: ``doc1`` answers ``q1`` and
``doc2`` answers ``q2``; the two documents differ by a negation and so do the queries.

Conventions:

* Ids follow CoDeR's conversion: queries ``nevir_q_{id}_1`` / ``nevir_q_{id}_2`` and documents
  ``nevir_doc_{id}_1`` / ``nevir_doc_{id}_2``.
* For ``q1``: ``doc1`` is satisfying (grade 2), ``doc2`` is violating (grade 0 and listed in
  ``violating``); for ``q2`` the other way round. ``relevance_threshold = 2``: only the
  satisfying document is relevant.
* The same passage is reused across pairs (681 texts of the test split occur in more than one
  pair). Left as is, those copies would tie with the judged copy, so by default (``dedup =
  True``) documents are de-duplicated by exact text: a text's canonical id is the first id that
  carries it in file order, and judgments and pairs point at canonical ids (test: 2,766 → 2,081
  documents). A pair whose two documents have the same text is an error.
* ``pairs`` holds one :class:`~harness.types.Pair` per row for PairAcc.

Names: ``nevir`` (the test split; ``nevir:test`` is accepted as an alias), ``nevir:train``,
``nevir:dev``. Each split is its own benchmark with its own corpus.

Protocol variant ``nevir:coder``: the test split as CoDeR evaluates it (its Table 3), every
passage kept (2,766 documents, no de-duplication), so the other pair's copy of a judged text is
a separate, unjudged document that can rank above the violating one. It reads the same file as
``nevir`` and is a benchmark version of its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, ClassVar, Iterable

from harness.data import DataError, get_field, iter_jsonl
from harness.registry import UnknownNameError
from harness.types import Benchmark, BenchmarkMeta, Corpus, Document, Judgments, Pair, Query

from .loader import IdTracker, LoaderBase, Origin, dedup_by_text, require_text

HF_DATASET = "orionweller/NevIR"
SOURCE = f"Hugging Face dataset {HF_DATASET} (https://huggingface.co/datasets/{HF_DATASET}); code https://github.com/orionw/NevIR"

# benchmark-name split → (file under nevir/, HF split name)
SPLITS = {"test": ("test.jsonl", "test"), "train": ("train.jsonl", "train"), "dev": ("dev.jsonl", "validation"),
          "coder": ("test.jsonl", "test")}
# protocol variants: variant → (the split it evaluates, de-duplicate?, how it differs, whose protocol)
VARIANTS = {"coder": ("test", False, "every passage kept (no de-duplication), as CoDeR's conversion does",
                      "CoDeR (arXiv:2606.13204), Table 3")}


def nevir_split(name: str) -> str:
    """``nevir`` / ``nevir:test`` → ``test``; ``nevir:train`` → ``train``; ``nevir:dev`` → ``dev``;
    the protocol variant ``nevir:coder`` → ``coder``."""
    base, _, split = name.partition(":")
    split = split or "test"
    if base != "nevir" or split not in SPLITS:
        raise UnknownNameError(f"unknown NevIR benchmark {name!r}; use 'nevir', 'nevir:train', 'nevir:dev' or "
                         "'nevir:coder'")
    return split


class NevIR(LoaderBase):
    """NevIR loader (entry point ``nevir``); see the module docstring for its conventions."""

    task: ClassVar[str] = "constraint"
    default_measures: ClassVar[tuple[str, ...]] = ("Sat@10", "PairAcc", "V@2", "FVR@10", "nDCG@10", "R@10", "TR@5")
    relevance_threshold: ClassVar[int] = 2
    source: ClassVar[str] = SOURCE
    license: ClassVar[str] = "MIT"
    subdir: ClassVar[str] = "nevir"
    dedup: ClassVar[bool] = True

    @classmethod
    def variants(cls) -> list[str]:
        return ["nevir", "nevir:train", "nevir:dev", *(f"nevir:{v}" for v in VARIANTS)]

    @classmethod
    def protocol_variants(cls, name: str) -> dict[str, str]:
        if nevir_split(name) != "test":
            return {}
        return {f"nevir:{v}": f"{how} ({paper})" for v, (of, _, how, paper) in VARIANTS.items() if of == "test"}

    @classmethod
    def canonical_name(cls, name: str) -> str:
        split = nevir_split(name)
        return "nevir" if split == "test" else f"nevir:{split}"

    @classmethod
    def info(cls, name: str) -> BenchmarkMeta:
        split = nevir_split(name)
        what = f"NevIR {split} split"
        if split in VARIANTS:
            of, _, how, paper = VARIANTS[split]
            what = f"NevIR {of} split under the protocol of {paper}: {how}"
        return cls.declare(
            name=cls.canonical_name(name),
            task=cls.task,
            description=(f"{what}: paired negation queries; per query one satisfying "
                         "document (grade 2) and one violating document (grade 0)."),
            source=SOURCE,
            license=cls.license,
            files=[f"{cls.subdir}/{SPLITS[split][0]}"],
            subdir=cls.subdir,
        )

    @classmethod
    def load(cls, name: str, data_dir: Path, online: bool = False, dedup: bool | None = None) -> Benchmark:
        split = nevir_split(name)
        bname = cls.canonical_name(name)
        if online and cls.missing_files(name, data_dir):
            rows, origin = cls._hf_rows(SPLITS[split][1])
        else:
            path = cls.require(name, data_dir) / SPLITS[split][0]
            rows, origin = iter_jsonl(path), path
        if split in VARIANTS:
            of, variant_dedup, how, paper = VARIANTS[split]
            return cls.from_rows(bname, of, rows, origin, variant_dedup if dedup is None else dedup,
                                 protocol=f"the protocol of {paper}: {how}")
        return cls.from_rows(bname, split, rows, origin, cls.dedup if dedup is None else dedup)

    @staticmethod
    def _hf_rows(hf_split: str) -> tuple[Iterable[tuple[int, dict[str, Any]]], str]:
        """Rows from the Hugging Face hub (imported here: the only network path of this loader)."""
        try:
            from datasets import load_dataset
        except ImportError as e:  # pragma: no cover - depends on the environment
            raise ImportError("online NevIR loading needs the 'datasets' package: pip install datasets") from e
        ds = load_dataset(HF_DATASET, split=hf_split)
        return ((i, dict(row)) for i, row in enumerate(ds, 1)), f"hf:{HF_DATASET}[{hf_split}]"

    @classmethod
    def from_rows(cls, name: str, split: str, rows: Iterable[tuple[int, dict[str, Any]]],
                  origin: Origin, dedup: bool = True, protocol: str = "") -> Benchmark:
        """Build the benchmark from ``(line, row)`` records in the official schema; ``protocol``
        (a protocol variant's) says whose evaluation it follows and how it differs."""
        pair_ids = IdTracker(origin, "pair")
        raw_docs: list[Document] = []
        queries: list[Query] = []
        raw_pairs: list[tuple[int, Pair]] = []
        identical_queries: list[str] = []
        for line, row in rows:
            pid = get_field(row, "id", origin, line)
            pair_ids.add(pid, line)
            q1, q2 = require_text(row, "q1", origin, line), require_text(row, "q2", origin, line)
            doc1, doc2 = require_text(row, "doc1", origin, line), require_text(row, "doc2", origin, line)
            if doc1 == doc2:
                raise DataError(origin, line, f"pair {pid!r}: doc1 and doc2 have the same text "
                                              "(they would be one document after de-duplication)")
            worker = get_field(row, "WorkerId", origin, line, kind=(int, str), default=None)
            qid1, qid2 = f"nevir_q_{pid}_1", f"nevir_q_{pid}_2"
            did1, did2 = f"nevir_doc_{pid}_1", f"nevir_doc_{pid}_2"
            if q1 == q2:
                identical_queries.append(pid)
            meta: dict[str, object] = {"pair_id": pid}
            if worker is not None:
                meta["worker_id"] = worker
            queries += [Query(qid1, q1, {**meta, "position": 1}), Query(qid2, q2, {**meta, "position": 2})]
            raw_docs += [Document(did1, doc1), Document(did2, doc2)]
            raw_pairs.append((line, Pair(qid1, did1, qid2, did2, pid)))

        shared_texts = 0
        if dedup:
            result = dedup_by_text(raw_docs)
            docs, canon, shared_texts = result.documents, result.canonical, result.shared_texts
        else:
            docs, canon = raw_docs, {d.id: d.id for d in raw_docs}

        relevance: dict[str, dict[str, int]] = {}
        violating: dict[str, frozenset[str]] = {}
        pairs: list[Pair] = []
        for line, p in raw_pairs:
            d1, d2 = canon[p.d1], canon[p.d2]
            if d1 == d2:
                raise DataError(origin, line, f"pair {p.id!r}: doc1 and doc2 have the same text "
                                              f"(both become document {d1!r})")
            relevance[p.q1] = {d1: 2, d2: 0}
            relevance[p.q2] = {d2: 2, d1: 0}
            violating[p.q1] = frozenset({d2})
            violating[p.q2] = frozenset({d1})
            pairs.append(Pair(p.q1, d1, p.q2, d2, p.id))
        if not pairs:
            raise DataError(origin, None, "no NevIR pairs found")

        merged = len(raw_docs) - len(docs)
        notes: dict[str, object] = {
            "pairs": len(pairs),
            "documents_raw": len(raw_docs),
            "documents": len(docs),
            "dedup": dedup,
            "documents_merged": merged,
            "identical_query_pairs": identical_queries,
        }
        if dedup:
            notes["shared_texts"] = shared_texts
        if protocol:
            notes["protocol"] = protocol
        dedup_text = (f"documents de-duplicated by exact text: {len(raw_docs):,} → {len(docs):,} "
                      f"({merged:,} copies merged onto the first id carrying each text)"
                      if dedup else f"{len(docs):,} documents, not de-duplicated")
        description = (
            f"NevIR {split} split: {len(pairs):,} pairs of negation-contrasted queries "
            f"({len(queries):,} queries). For each query one document satisfies it (grade 2) and its "
            f"pair partner violates it (grade 0, listed as violating); relevance threshold 2; "
            f"{dedup_text}." + (f" Evaluated under {protocol}." if protocol else "")
        )
        splits = {split: [q.id for q in queries]}
        return cls.build(name, Corpus(docs), queries, Judgments(relevance, violating), splits=splits,
                         pairs=pairs, description=description, notes=notes)
