"""What a measure is: one class per measure family, registered by name, parsed ir_measures-style
(``nDCG@10`` → ``NDCG(cutoff=10)``).

A measure carries everything the rest of the project needs to know about it — its name and
cutoff, whether higher is better, what it is averaged over, what a benchmark must have for it,
how many decimals it is shown with — and computes its per-query values from an
:class:`EvalInput`, which holds what several measures share (the rank matrix, pytrec_eval's
input), built once per evaluation.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import cached_property, partial
from itertools import compress, count
from operator import itemgetter, le
from typing import Any, ClassVar, Container, Iterable, Mapping, Sequence

import numpy as np

from ..core.errors import UserError
from ..core.types import Judgments, Pair, Run

_doc_of = itemgetter(0)
_NONE: dict[str, int] = {}

# What a measure can need from a benchmark, and how a benchmark without it is described.
NEEDS = {
    "violating": "it has no violating documents (see the README on constraint benchmarks)",
    "pairs": "it has no query pairs",
}

# What a measure's mean is taken over (shown beside a figure when it is not every query).
ALL_QUERIES = "queries"
VIOLATING_QUERIES = "queries with a violating document"
RELEVANT_QUERIES = "queries with a relevant document"
PAIRS = "pairs"


@dataclass
class EvalInput:
    """One evaluation's inputs, with what several measures share computed once, on first use.

    Every measure that reads ranks reads them through one scan of each query's top :attr:`depth`
    documents (:attr:`found`: the ranks of its judged, violating and pair documents), so no
    measure walks a ranking, or builds a mapping of it, again. A ranking lists each document once
    (:meth:`Run.validate`); where one does not, a document counts at its first rank.
    """

    run: Run
    judgments: Judgments
    qids: list[str]
    threshold: int = 1
    pairs: Sequence[Pair] | None = None
    pair_scores: Mapping[str, Mapping[str, float]] | None = None
    depth: int = 0  # the deepest cutoff among the measures that read ranks (0: the whole ranking)
    _sets: dict[str, Any] = field(default_factory=dict, repr=False)
    _pair_ranks: dict[str, tuple[frozenset[str], dict[str, int]]] = field(default_factory=dict, repr=False)
    _judged_hits: dict[str, list[tuple[int, str]]] = field(default_factory=dict, repr=False)

    @cached_property
    def n_relevant(self) -> dict[str, int]:
        """How many relevant documents each query has (grade ≥ the threshold)."""
        rel, at_least = self.judgments.relevance, partial(le, self.threshold)
        return {q: sum(map(at_least, (rel.get(q) or _NONE).values())) for q in self.qids}

    @cached_property
    def with_violating(self) -> list[str]:
        return [q for q in self.qids if self.judgments.violating.get(q)]

    @cached_property
    def with_relevant(self) -> list[str]:
        return [q for q, n in self.n_relevant.items() if n]

    @cached_property
    def found(self) -> dict[str, dict[str, int]]:
        """For each query with a ranking: the 0-based rank of each of its judged, violating and
        pair documents found in its top :attr:`depth` (the first, should one be listed twice), in
        rank order. The same scan fills the "relevant" and "violating" :meth:`membership`."""
        out: dict[str, dict[str, int]] = {}
        rel, viol, run, top, thr = self.judgments.relevance, self.judgments.violating, self.run, self.depth, self.threshold
        paired = self._pair_documents
        vrow = {q: i for i, q in enumerate(self.with_violating)}
        rrow = {q: i for i, q in enumerate(self.with_relevant)}
        vr: list[int] = []
        vc: list[int] = []
        rr: list[int] = []
        rc: list[int] = []
        hits = self._judged_hits
        longest = 0
        for q in self.qids:
            ranking = run.get(q)
            if not ranking:
                continue
            judged = rel.get(q) or _NONE
            v, pd = viol.get(q), paired.get(q)
            wanted: Container[str] = judged
            if (v and not judged.keys() >= v) or (pd and not judged.keys() >= pd):
                wanted = set(judged).union(v or (), pd or ())
            cut = ranking if not top or len(ranking) <= top else ranking[:top]
            if len(cut) > longest:
                longest = len(cut)
            ranks: dict[str, int] = {}
            ids = next(zip(*cut))  # the document ids, one tuple built in C (faster than an itemgetter map)
            for p in compress(count(), map(wanted.__contains__, ids)):  # (in C)
                ranks.setdefault(ids[p], p)
            out[q] = ranks
            if not ranks:
                continue
            hits[q] = list(zip(ranks.values(), ranks)) if wanted is judged else [
                (p, d) for d, p in ranks.items() if d in judged]
            i = rrow.get(q)
            if i is not None:
                for d, p in ranks.items():
                    if judged.get(d, thr - 1) >= thr:
                        rr.append(i)
                        rc.append(p)
            if v:
                i = vrow[q]
                for d, p in ranks.items():
                    if d in v:
                        vr.append(i)
                        vc.append(p)
        width = top or longest  # the whole ranking when no depth
        for which, n, rows, cols in (("violating", len(vrow), vr, vc), ("relevant", len(rrow), rr, rc)):
            mat = np.zeros((n, width), dtype=bool)
            mat[rows, cols] = True
            self._sets[which] = mat
        return out

    @property
    def judged_hits(self) -> dict[str, list[tuple[int, str]]]:
        """For each query with a judged document in its top :attr:`depth`: (rank, document) of
        each such document, in rank order (from the scan of :attr:`found`)."""
        self.found  # noqa: B018 - fills them
        return self._judged_hits

    def ranks(self, q: str, docs: Iterable[str]) -> list[int]:
        """The 0-based ranks (< :attr:`depth`) of those of ``docs`` — judged or violating documents
        of ``q`` — that its ranking lists there."""
        found = self.found.get(q)
        return [found[d] for d in docs if d in found] if found else []

    def raw_score(self, q: str, d: str) -> float:
        """Query ``q``'s own score of document ``d`` in its ranking (−∞ when it is not ranked)."""
        ranking = self.run.get(q)
        if not ranking:
            return -math.inf
        p = self.found[q].get(d)
        if p is None:
            if (not self.depth or len(ranking) <= self.depth) and (
                    d in self._pair_documents.get(q, ()) or d in (self.judgments.relevance.get(q) or ())
                    or d in self.judgments.violating.get(q, ())):
                return -math.inf  # the scan of :attr:`found` covered the whole ranking
            wanted, ranks = self._pair_ranks.get(q, (frozenset(), {}))
            if d not in wanted:  # one scan of the whole ranking for the query's pair documents
                wanted = self._pair_documents.get(q, frozenset()) | {d}
                ranks = {}
                for i in compress(count(), map(wanted.__contains__, map(_doc_of, ranking))):
                    ranks.setdefault(ranking[i][0], i)
                self._pair_ranks[q] = (wanted, ranks)
            p = ranks.get(d)
            if p is None:
                return -math.inf
        return float(ranking[p][1])

    @cached_property
    def _pair_documents(self) -> dict[str, frozenset[str]]:
        out: dict[str, set[str]] = {}
        for pr in self.pairs or ():
            for q in (pr.q1, pr.q2):
                out.setdefault(q, set()).update((pr.d1, pr.d2))
        return {q: frozenset(v) for q, v in out.items()}

    def membership(self, which: str) -> np.ndarray:
        """Boolean (queries × depth) matrix for ``which`` ("violating" over :attr:`with_violating`,
        "relevant" over :attr:`with_relevant`): ``M[i, j]`` = rank j+1 of query i is in its set."""
        self.found  # noqa: B018 - fills both matrices
        return self._sets[which][:, : self.depth]


class Measure:
    """One measure family; an instance is the family at one cutoff (``None`` for a measure
    without one). Subclasses set the class attributes and implement :meth:`compute` (or, to share
    one computation among several measures, :meth:`compute_batch`)."""

    family: ClassVar[str]
    description: ClassVar[str]
    higher_is_better: ClassVar[bool] = True
    averaged_over: ClassVar[str] = ALL_QUERIES
    needs: ClassVar[frozenset[str]] = frozenset()
    decimals: ClassVar[int] = 3
    # the expected value of a ranking that ignores the query, where it follows from the measure's
    # definition alone (PairAcc: 0.25), with why; None where it depends on the benchmark (the
    # `random` retriever's row on the board measures it there)
    chance: ClassVar[float | None] = None
    chance_why: ClassVar[str] = ""
    has_cutoff: ClassVar[bool] = True
    # whether the measure reads nothing of a ranking below its cutoff: the rank lookups of
    # EvalInput (found, ranks, membership) then reach the deepest such cutoff, EvalInput.depth
    uses_rank_matrix: ClassVar[bool] = False
    # whether its value depends on which grades count as relevant (V@k and FVR read only the
    # violating documents, PairAcc the pair documents): only such a measure takes ``rel``
    reads_relevance: ClassVar[bool] = True

    def __init__(self, cutoff: int | None = None, *, rel: int | None = None):
        if self.has_cutoff and (cutoff is None or cutoff < 1):
            raise ValueError(f"measure {self.family}@k: the cutoff k must be ≥ 1")
        if not self.has_cutoff and cutoff is not None:
            raise ValueError(f"measure {self.family} takes no cutoff")
        if rel is not None and not self.reads_relevance:
            raise ValueError(f"measure {self.family} does not read relevance grades: it takes no rel=")
        if rel is not None and rel < 1:
            raise ValueError(f"measure {self.family}: rel, the lowest grade that counts as relevant, must be ≥ 1")
        self.k = cutoff
        self.rel = rel
        """The lowest grade that counts as relevant, when the measure names it (``nDCG(rel=1)@10``);
        ``None``: the benchmark's own threshold (``relevance_threshold`` of its meta), which the
        plain name means (docs/design/measures.md#relevance-thresholds)."""

    # the measure as a value: equal, hashable, printed by its name
    @property
    def name(self) -> str:
        rel = "" if self.rel is None else f"(rel={self.rel})"
        return f"{self.family}{rel}" if self.k is None else f"{self.family}{rel}@{self.k}"

    @property
    def base(self) -> str:
        return self.family

    def threshold(self, default: int) -> int:
        """The lowest relevant grade this measure scores with: its own ``rel``, else ``default``
        (the benchmark's)."""
        return default if self.rel is None else self.rel

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Measure) and (self.family, self.k, self.rel) == (other.family, other.k, other.rel)

    def __hash__(self) -> int:
        return hash((self.family, self.k, self.rel))

    def __repr__(self) -> str:
        args = [f"cutoff={self.k}"] if self.has_cutoff else []
        args += [] if self.rel is None else [f"rel={self.rel}"]
        return f"{type(self).__name__}({', '.join(args)})"

    def __str__(self) -> str:
        return self.name

    @property
    def counted(self) -> bool:
        """Whether its mean is over a subset of the queries (the count is shown beside it)."""
        return self.averaged_over in (VIOLATING_QUERIES, RELEVANT_QUERIES)

    def format(self, value: float | None) -> str:
        """The value as the CLI and the pages show it; "–" for an unknown one."""
        if value is None or value != value:
            return "–"
        return f"{value:.{self.decimals}f}"

    def unsupported(self, has_violating: bool, has_pairs: bool) -> str:
        """Why a benchmark cannot support the measure ("" when it can)."""
        have = {"violating": has_violating, "pairs": has_pairs}
        return next((NEEDS[n] for n in sorted(self.needs) if not have[n]), "")

    def compute(self, inp: EvalInput) -> dict[str, float]:
        raise NotImplementedError

    @classmethod
    def compute_batch(cls, measures: Sequence["Measure"], inp: EvalInput) -> dict[str, dict[str, float]]:
        """Per-query values of several measures of this family; one :meth:`compute` each unless a
        family shares work among them."""
        return {m.name: m.compute(inp) for m in measures}


_FAMILIES: dict[str, type[Measure]] = {}
_NAME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)(?:\(rel=(\d+)\))?(?:@(\d+))?$")


def register(cls: type[Measure]) -> type[Measure]:
    """Class decorator: makes ``cls.family`` a measure name. Families are listed (and the pages
    order their columns) in the order they are registered."""
    if cls.family in _FAMILIES:
        raise ValueError(f"measure family {cls.family!r} registered twice")
    _FAMILIES[cls.family] = cls
    return cls


def families() -> list[type[Measure]]:
    return list(_FAMILIES.values())


class MeasureError(UserError, ValueError):
    """A measure name that does not parse, or a measure a benchmark cannot support."""


def parse_measure(name: "str | Measure") -> Measure:
    """``"nDCG@10"`` → ``NDCG(cutoff=10)``, ``"nDCG(rel=2)@10"`` → ``NDCG(cutoff=10, rel=2)`` (as
    ir_measures writes a relevance level); a :class:`Measure` passes through."""
    if isinstance(name, Measure):
        return name
    m = _NAME_RE.match(name.strip())
    cls = _FAMILIES.get(m.group(1)) if m else None
    if cls is None:
        known = ", ".join(f"{c.family}@k" if c.has_cutoff else c.family for c in _FAMILIES.values())
        raise MeasureError(f"unknown measure {name!r}; use {known} (a relevance level as in nDCG(rel=2)@10)")
    rel, k = m.group(2), m.group(3)  # type: ignore[union-attr]
    if cls.has_cutoff and k is None:
        raise MeasureError(f"measure {name!r} needs a cutoff: {cls.family}@k")
    try:
        return cls(int(k) if k is not None else None, rel=int(rel) if rel is not None else None)
    except ValueError as e:
        raise MeasureError(f"measure {name!r}: {e}") from None


def sort_key(name: str) -> tuple[int, int, str]:
    """Column order on the pages: by family (registration order), then cutoff; unknown names last."""
    order = list(_FAMILIES)
    try:
        m = parse_measure(name)
    except ValueError:
        return (len(order), 0, name)
    return (order.index(m.family), m.k or 0, name)


def mean(values: Iterable[float]) -> float:
    vals = list(values)
    return float(np.mean(vals)) if vals else float("nan")
