"""A built diagnostic set: its records, Table-5-style statistics and the atomic writing of its
files."""

from __future__ import annotations

import json
import os
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

BUILDER_VERSION = "1.0"
SET_NAMES = ("antonym", "negation", "exclusion")


@dataclass
class BuiltSet:
    """A built diagnostic set: passages, queries (released CoDeR schema plus provenance) and the
    build parameters."""

    name: str
    corpus: list[dict]
    queries: list[dict]
    params: dict = field(default_factory=dict)

    def stats(self) -> dict:
        """Counts in the style of CoDeR's Table 5, recomputed from the records."""
        grades: Counter[str] = Counter()
        pool_sizes, query_words = [], []
        for q in self.queries:
            for g in q["graded_relevance"].values():
                grades[str(int(g))] += 1
            pool_sizes.append(len(q["graded_relevance"]))
            query_words.append(len(q["query"].split()))
        sources = {d.get("source_doc_id") for d in self.corpus}
        return {
            "set": self.name,
            "source": self.params.get("source", ""),
            "queries": len(self.queries),
            "passages": len(self.corpus),
            "source_documents": len(sources),
            "judged": {g: grades.get(g, 0) for g in ("2", "1", "0")},
            "judged_total": sum(grades.values()),
            "avg_passages_per_query": round(sum(pool_sizes) / len(pool_sizes), 3) if pool_sizes else 0.0,
            "avg_query_words": round(sum(query_words) / len(query_words), 3) if query_words else 0.0,
            "avg_passage_words": (round(sum(len(d["text"].split()) for d in self.corpus) / len(self.corpus), 3)
                                  if self.corpus else 0.0),
            "candidates": self.params.get("candidates", 0),
            "candidate_documents": self.params.get("candidate_documents", 0),
            "rejected": dict(self.params.get("rejected", {})),
        }

    def write(self, out_dir: Path) -> list[Path]:
        """Write ``corpus_<name>.jsonl``, ``queries_<name>.jsonl`` and ``build.json`` (params and
        stats) into ``out_dir``, each atomically (temporary file, then ``os.replace``)."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        files = [
            (out_dir / f"corpus_{self.name}.jsonl", "".join(json.dumps(d, ensure_ascii=False) + "\n" for d in self.corpus)),
            (out_dir / f"queries_{self.name}.jsonl", "".join(json.dumps(q, ensure_ascii=False) + "\n" for q in self.queries)),
            (out_dir / "build.json", json.dumps({"name": self.name, "params": self.params, "stats": self.stats()},
                                                indent=2, ensure_ascii=False) + "\n"),
        ]
        for path, text in files:
            _atomic_write(path, text)
        return [p for p, _ in files]


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
