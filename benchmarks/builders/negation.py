"""The negation set: query pairs "Find evidence that S." / "... that not-S.", built from any
corpus or from CoDeR's released negation passages."""

from __future__ import annotations

import difflib
import json
from collections import Counter, defaultdict
from pathlib import Path

from harness.types import Corpus

from .built import BUILDER_VERSION, BuiltSet
from .clauses import CaseModel, make_query
from .construction import _PairCandidate, _clause_sentences, _first_word, _pair_set, _prepare, _wordnet
from .wordnet_lookups import _WN
from .negation_rules import negate
from .text import _Doc, split_sentences


def _negation_candidates(d: _Doc, wn: _WN, rejected: Counter[str]) -> list[_PairCandidate]:
    out = []
    for k, passage, si, sentence, s_start in _clause_sentences(d, wn, rejected):
        negated, rule = negate(sentence, wn)
        if negated is None:
            rejected[f"negation_{rule}"] += 1
            continue
        new_passage = passage[:s_start] + negated + passage[s_start + len(sentence):]
        out.append(_PairCandidate(d.id, k, si, sentence, negated, new_passage,
                                  (("negation_rule", rule),)))
    return out


def build_negation(corpus: Corpus, *, seed: int = 0, max_queries: int | None = 104, source: str = "",
                   wordnet=None, data_dir: Path | None = None, online: bool = False) -> BuiltSet:
    """Negation diagnostic: pairs of queries "Find evidence that S." / "... that not-S." over
    the passages of one document plus the negated copy of the passage holding S."""
    wn = _wordnet(wordnet, data_dir, online)
    rejected: Counter[str] = Counter()
    docs = _prepare(corpus, rejected)
    by_doc = {}
    for d in docs:
        cands = _negation_candidates(d, wn, rejected)
        if cands:
            by_doc[d.id] = cands
    return _pair_set("negation", "neg", {d.id: d for d in docs}, by_doc, wn,
                     CaseModel(d.full_text for d in docs), seed, max_queries, source,
                     rejected, ("affirmed", "negated"))


def negation_from_released(corpus_path: Path) -> BuiltSet:
    """Queries for CoDeR's released negation passages (``diag/negation/corpus.jsonl``).

    Passages ``<paper>-1 … -n`` belong to one document; the highest-numbered one is the negated
    copy of one of the others (the one it is most similar to by ``difflib``). The sentence that
    differs gives the pair of queries "Find evidence that S." / "Find evidence that not-S.",
    graded as the built sets (own passage 2, the other member of the pair 0, the rest 1).
    Passage ids are kept as released. No WordNet is needed (first words are lower-cased unless
    they look like names or acronyms)."""
    corpus_path = Path(corpus_path)
    records = []
    with open(corpus_path, encoding="utf-8") as f:
        for line in f:
            if line.strip():
                records.append(json.loads(line))
    groups: dict[str, list[tuple[int, str, str]]] = defaultdict(list)
    for r in records:
        prefix, _, num = r["doc_id"].rpartition("-")
        if not prefix or not num.isdigit():
            raise ValueError(f"{corpus_path}: unexpected passage id {r['doc_id']!r}")
        groups[prefix].append((int(num), r["doc_id"], r["text"]))
    case = CaseModel(r["text"] for r in records)
    case.prepare(_first_word(r["text"]) for r in records)
    corpus: list[dict] = []
    queries: list[dict] = []
    unpaired: list[str] = []
    sizes: Counter[int] = Counter()
    for prefix in sorted(groups):
        members = sorted(groups[prefix])
        sizes[len(members)] += 1
        for _, pid, text in members:
            corpus.append({"doc_id": pid, "text": text, "source_doc_id": prefix})
        pair = _released_pair(members)
        if pair is None:
            unpaired.append(prefix)
            continue
        orig_id, neg_id, sent, neg_sent, ratio = pair
        pool = [pid for _, pid, _ in members]
        pair_id = f"negation-pair{len(queries) // 2}"
        for s, good, bad, pol in ((sent, orig_id, neg_id, "affirmed"), (neg_sent, neg_id, orig_id, "negated")):
            graded = {pid: 1.0 for pid in pool}
            graded[good], graded[bad] = 2.0, 0.0
            queries.append({
                "query_id": f"negation-q{len(queries)}",
                "query": make_query(s, None, case),
                "category": "negation",
                "topical_relevant_doc_ids": list(pool),
                "constraint_satisfying_doc_ids": [good],
                "constraint_violating_doc_ids": [bad],
                "graded_relevance": graded,
                "source_doc_id": prefix,
                "pair_id": pair_id,
                "polarity": pol,
                "sentence": s,
                "similarity": round(ratio, 4),
            })
    params = {
        "builder": "negation",
        "version": BUILDER_VERSION,
        "from_released": str(corpus_path),
        "source": "CoDeR released negation passages (SciDocs)",
        "seed": None,
        "max_queries": None,
        "groups": len(groups),
        "group_sizes": {str(k): v for k, v in sorted(sizes.items())},
        "candidate_documents": len(groups),
        "candidates": len(groups) - len(unpaired),
        "unpaired_groups": unpaired,
        "rejected": {"unpaired_group": len(unpaired)} if unpaired else {},
    }
    return BuiltSet(name="negation", corpus=corpus, queries=queries, params=params)


def _released_pair(members: list[tuple[int, str, str]]):
    """``(original_id, negated_id, sentence, negated_sentence, ratio)`` for a released group,
    or ``None`` when no passage pairs with the last one."""
    if len(members) < 2:
        return None
    _, neg_id, neg_text = members[-1]
    best = max(members[:-1], key=lambda m: difflib.SequenceMatcher(None, m[2].split(), neg_text.split()).ratio())
    ratio = difflib.SequenceMatcher(None, best[2].split(), neg_text.split()).ratio()
    if ratio < 0.8:
        return None
    s_orig, s_neg = split_sentences(best[2]), split_sentences(neg_text)
    if len(s_orig) != len(s_neg):
        return None
    diffs = [(a, b) for a, b in zip(s_orig, s_neg) if a != b]
    if len(diffs) != 1:
        return None
    a, b = diffs[0]
    added = _inserted_words(a, b)
    if not added & {"not", "no", "cannot", "never", "non", "nor"} and "n't" not in b:
        return None
    return best[1], neg_id, a, b, ratio


def _inserted_words(a: str, b: str) -> set[str]:
    sm = difflib.SequenceMatcher(None, a.lower().split(), b.lower().split())
    out: set[str] = set()
    bw = b.lower().split()
    for op, _, _, j1, j2 in sm.get_opcodes():
        if op in ("insert", "replace"):
            out |= {w.strip(".,;:") for w in bw[j1:j2]}
    return out
