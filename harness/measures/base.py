"""What a measure is: one class per measure family, registered by name, parsed ir_measures-style
(``nDCG@10`` → ``NDCG(cutoff=10)``).

A measure carries everything the rest of the project needs to know about it — its name and
cutoff, whether higher is better, what it is averaged over, what a benchmark must have for it,
how many decimals it is shown with — and computes its per-query values from an
:class:`EvalInput`, which holds what several measures share (the rank matrix, pytrec_eval's
input), built once per evaluation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, ClassVar, Iterable, Mapping, Sequence

import numpy as np

from ..types import Judgments, Pair, Run

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
    """One evaluation's inputs, with what several measures share computed once, on first use."""

    run: Run
    judgments: Judgments
    qids: list[str]
    threshold: int = 1
    pairs: Sequence[Pair] | None = None
    pair_scores: Mapping[str, Mapping[str, float]] | None = None
    depth: int = 0  # the deepest cutoff asked for among the measures that read the rank matrix
    _sets: dict[str, Any] = field(default_factory=dict, repr=False)

    @cached_property
    def relevant(self) -> dict[str, set[str]]:
        return {q: self.judgments.relevant(q, self.threshold) for q in self.qids}

    @cached_property
    def with_violating(self) -> list[str]:
        return [q for q in self.qids if self.judgments.violating.get(q)]

    @cached_property
    def with_relevant(self) -> list[str]:
        return [q for q in self.qids if self.relevant[q]]

    def membership(self, which: str) -> np.ndarray:
        """Boolean (queries × depth) matrix for ``which`` ("violating" over :attr:`with_violating`,
        "relevant" over :attr:`with_relevant`): ``M[i, j]`` = rank j+1 of query i is in its set."""
        if which not in self._sets:
            qids, sets = ((self.with_violating, self.judgments.violating) if which == "violating"
                          else (self.with_relevant, self.relevant))
            mat = np.zeros((len(qids), self.depth), dtype=bool)
            for i, q in enumerate(qids):
                s = sets.get(q)
                if not s:
                    continue
                for j, (d, _) in enumerate(self.run.get(q, [])[: self.depth]):
                    if d in s:
                        mat[i, j] = True
            self._sets[which] = mat
        return self._sets[which]

    @cached_property
    def rank_scored(self) -> dict[str, dict[str, float]]:
        """The run as pytrec_eval reads it, with rank-derived scores (``depth − rank``) so that its
        re-sort by score cannot reorder ties."""
        out: dict[str, dict[str, float]] = {}
        for q in self.qids:
            ranking = self.run.get(q)
            if ranking:
                depth = len(ranking)
                out[q] = {d: float(depth - i) for i, (d, _) in enumerate(ranking)}
        return out


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
    has_cutoff: ClassVar[bool] = True
    # whether the measure reads the rank matrix up to its cutoff (EvalInput.depth)
    uses_rank_matrix: ClassVar[bool] = False

    def __init__(self, cutoff: int | None = None):
        if self.has_cutoff and (cutoff is None or cutoff < 1):
            raise ValueError(f"measure {self.family}@k: the cutoff k must be ≥ 1")
        if not self.has_cutoff and cutoff is not None:
            raise ValueError(f"measure {self.family} takes no cutoff")
        self.k = cutoff

    # the measure as a value: equal, hashable, printed by its name
    @property
    def name(self) -> str:
        return self.family if self.k is None else f"{self.family}@{self.k}"

    @property
    def base(self) -> str:
        return self.family

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Measure) and (self.family, self.k) == (other.family, other.k)

    def __hash__(self) -> int:
        return hash((self.family, self.k))

    def __repr__(self) -> str:
        return f"{type(self).__name__}(cutoff={self.k})" if self.has_cutoff else f"{type(self).__name__}()"

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
_NAME_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)(?:@(\d+))?$")


def register(cls: type[Measure]) -> type[Measure]:
    """Class decorator: makes ``cls.family`` a measure name. Families are listed (and the pages
    order their columns) in the order they are registered."""
    if cls.family in _FAMILIES:
        raise ValueError(f"measure family {cls.family!r} registered twice")
    _FAMILIES[cls.family] = cls
    return cls


def families() -> list[type[Measure]]:
    return list(_FAMILIES.values())


def parse_measure(name: "str | Measure") -> Measure:
    """``"nDCG@10"`` → ``NDCG(cutoff=10)``; a :class:`Measure` passes through."""
    if isinstance(name, Measure):
        return name
    m = _NAME_RE.match(name.strip())
    cls = _FAMILIES.get(m.group(1)) if m else None
    if cls is None:
        known = ", ".join(f"{c.family}@k" if c.has_cutoff else c.family for c in _FAMILIES.values())
        raise ValueError(f"unknown measure {name!r}; use {known}")
    k = m.group(2)  # type: ignore[union-attr]
    if cls.has_cutoff and k is None:
        raise ValueError(f"measure {name!r} needs a cutoff: {cls.family}@k")
    try:
        return cls(int(k) if k is not None else None)
    except ValueError as e:
        raise ValueError(f"measure {name!r}: {e}") from None


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
