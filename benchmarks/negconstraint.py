"""NegConstraint (NS-IR): queries with negative constraints ("… but don't mention Moses").

BEIR format under ``<data_dir>/negconstraint/``: ``corpus.jsonl``, ``queries.jsonl`` and
``qrels/test.tsv`` (with or without a header line).

Conventions:

* task ``constraint``; a qrels grade >= 1 is relevant (``relevance_threshold = 1``). The dataset
  labels no violating documents, so ``violating`` is empty and V@k / FVR do not apply.
* Every query of ``queries.jsonl`` is loaded (366), but only the queries the qrels judge are
  scored: this release judges 198 of them (other releases judge all 366). The judged count is in
  ``notes["judged_queries"]`` and in the description; ``splits["test"]`` lists the judged ids.
* Optional per-query labels (``labels/query_labels_combined.jsonl``, from CoDeR's data release)
  go into ``Query.meta``: ``category`` = the paper-count-aligned formulation (``A - a``,
  ``(A - a) ∪ B``, ``(A - a) ∪ (B - b)``), ``category_textual`` = the textual-semantic one.
  Without the file the benchmark loads with no categories.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import ClassVar

from harness.data import DataError, get_field, iter_jsonl
from harness.types import Benchmark, BenchmarkMeta, Judgments, Query

from .loader import IdTracker, LoaderBase, beir_files, load_beir_folder

LABELS_FILE = "labels/query_labels_combined.jsonl"
LABEL_FIELDS = {
    "category": "paper_count_aligned_best_fit_formulation",
    "category_textual": "textual_semantic_formulation",
}


def read_query_labels(path: Path, query_ids: set[str]) -> dict[str, dict[str, str]]:
    """``{query_id: {"category": …, "category_textual": …}}``; unknown or repeated ids raise."""
    seen = IdTracker(path, "query")
    labels: dict[str, dict[str, str]] = {}
    for line, obj in iter_jsonl(path):
        qid = get_field(obj, "query_id", path, line)
        if qid not in query_ids:
            raise DataError(path, line, f"label for unknown query {qid!r}")
        seen.add(qid, line)
        labels[qid] = {key: get_field(obj, src, path, line) for key, src in LABEL_FIELDS.items()}
    return labels


class NegConstraint(LoaderBase):
    """NegConstraint loader (entry point ``negconstraint``); see the module docstring."""

    task: ClassVar[str] = "constraint"
    # MAP@100 (DEO's Table 1) and nDCG@5 (CoDeR's Table 6) are what the papers report on it
    default_measures: ClassVar[tuple[str, ...]] = ("Sat@10", "nDCG@10", "R@5", "MAP@10", "R@10", "MAP@100", "nDCG@5")
    relevance_threshold: ClassVar[int] = 1
    subdir: ClassVar[str] = "negconstraint"
    files: ClassVar[tuple[str, ...]] = beir_files("test")
    description: ClassVar[str] = (
        "NegConstraint (NS-IR): queries with negative constraints; BEIR format, a qrels grade >= 1 "
        "is relevant, no violating labels; only judged queries are scored."
    )
    source: ClassVar[str] = (
        "NS-IR repository https://github.com/xgl-git/NS-IR-main (NegConstraint.zip; no automatic "
        "download: unzip it into <data_dir>/negconstraint/); query category labels from "
        "https://github.com/nice-hku-coder/coder_data"
    )
    license: ClassVar[str] = "none stated"

    @classmethod
    def info(cls, name: str) -> BenchmarkMeta:
        return replace(super().info(name), optional_files=[f"{cls.subdir}/{LABELS_FILE}"])

    @classmethod
    def load(cls, name: str, data_dir: Path, online: bool = False) -> Benchmark:
        """``online`` changes nothing: there is no automatic download (see ``source``)."""
        root = cls.require(name, data_dir)
        data = load_beir_folder(root, "test", keep_unjudged_queries=True)
        notes = dict(data.notes)

        labels_path = root / LABELS_FILE
        queries = data.queries
        if labels_path.exists():
            labels = read_query_labels(labels_path, {q.id for q in queries})
            queries = [Query(q.id, q.text, {**q.meta, **labels.get(q.id, {})}) for q in queries]
            notes["labelled_queries"] = len(labels)
            for key in LABEL_FIELDS:
                notes[f"{key}_counts"] = dict(Counter(labels[q.id][key] for q in queries if q.id in labels))
                notes[f"judged_{key}_counts"] = dict(
                    Counter(labels[q.id][key] for q in queries if q.id in labels and q.id in data.relevance))
        else:
            notes["labelled_queries"] = 0

        judged, total = len(data.relevance), len(queries)
        description = (
            f"NegConstraint (NS-IR): {total:,} queries with negative constraints over "
            f"{len(data.corpus):,} documents; this release judges {judged} of {total} queries; only "
            "judged queries are scored. A qrels grade >= 1 is relevant; the dataset labels no "
            "violating documents."
        )
        return cls.build(name, data.corpus, queries, Judgments(relevance=data.relevance),
                         description=description, notes=notes)
