"""Frozen candidate pools: a first stage's top ``depth`` for every evaluated query of one benchmark
version, named by its content hash (docs/design/pools.md).

A pool is what second-stage methods are compared on: every reranker of a pool reorders the same
candidates, so two rerankers differ only in what they do with them. It is

* **canonical**: each query's candidates in trec_eval's order of their scores as the results store
  keeps them (rounded to 7 decimals; ties by document id, descending), so a pool made from a run in
  memory, from its stored result, or from a pool file read back is the same pool, ties included;
* **named by its content**: :func:`pool_hash` covers the benchmark version and each query's ordered
  document ids (not the scores' last digits), so the same candidates in the same order are the same
  pool wherever they were computed;
* **described** by its manifest (:func:`describe`): benchmark and version, the first stage (spec,
  label, spec hash), depth, its own figures, and its **ceiling**: the share of queries with a
  satisfying document in the pool, and the figures of its oracle order — the best Sat@10 or
  nDCG@10 any reordering of it reaches.

Three reference rows come with a pool (:func:`reference_run`), shown beside its rerankers and never
ranked: the pool in its own order (the first stage), the pool shuffled (seeded: the level of a
method that finds the topic and is blind to the constraint) and the oracle order (satisfying
documents first by grade, violating ones last: the ceiling). The oracle reads the judgments; it is
computed here from the pool and the benchmark, never by a retriever.

On disk a pool is a TREC file (``qid Q0 docid rank score tag``) and its manifest beside it,
``<file>.manifest.json``; :func:`read_pool` recomputes the hash from the TREC file and refuses a
file whose content is not the pool its manifest names.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from .. import __version__ as HARNESS_VERSION
from ..core.errors import UserError
from ..core.registry import POOL_REFERENCE_NAMES, RetrieverSpec, check_label
from ..core.types import Benchmark, Run, RunError
from ..data.runs import POOL_FORMAT, RunFileError, pool_hash, read_run, trec_order

MANIFEST_SUFFIX = ".manifest.json"
POOL_KEY = "pool"  # a result's extra: the pool it reranked ({hash, name, depth, first_stage, ...})
REFERENCE_KEY = "pool_reference"  # a result's extra: which reference row of its pool it is
# the reference rows of a pool: kind → (retriever name, how the label calls it)
REFERENCES = {"order": ("pool-order", "pool order"), "shuffled": ("pool-shuffled", "pool shuffled"),
              "oracle": ("pool-oracle", "pool oracle")}
REFERENCE_RETRIEVERS = frozenset(name for name, _ in REFERENCES.values())
assert REFERENCE_RETRIEVERS == POOL_REFERENCE_NAMES
CEILING_MEASURES = ("Sat@10", "nDCG@10")
_NAME = re.compile(r"^(?P<spec>.+)@(?P<depth>[0-9]+)$")


class PoolError(UserError, ValueError):
    """A pool that cannot be used: a bad name or file, another benchmark's pool, a ranking outside it."""


def parse_pool_name(text: str) -> tuple[str, int] | None:
    """``("bm25", 100)`` for ``"bm25@100"`` (a first stage's spec, ``@``, a depth); ``None`` for
    anything else (a file)."""
    m = _NAME.match(text.strip())
    if not m or "/" in m["spec"] or "\\" in m["spec"]:
        return None
    depth = int(m["depth"])
    if depth < 1:
        raise PoolError(f"pool {text!r}: the depth must be ≥ 1")
    return m["spec"], depth


SCORE_DECIMALS = 7  # as the results store keeps a ranking's scores (harness/store/results.py)


def _written(score: float) -> float:
    """A score as a pool keeps it: as the results store keeps it (rounded to 7 decimals), which
    rounding again, or writing exactly to a file and reading back, leaves as it is."""
    return round(float(score), SCORE_DECIMALS)


def canonical(ranking: Iterable[tuple[str, float]], depth: int) -> list[tuple[str, float]]:
    """A first stage's ranking as a pool of ``depth`` holds it (see the module docstring): its top
    ``depth``, the scores as the store keeps them, in trec_eval's order."""
    top = list(ranking)[:depth]
    return trec_order((d, _written(s)) for d, s in top)


@dataclass
class Pool:
    """A frozen candidate pool (see the module docstring); :attr:`manifest` as :func:`describe` made it."""

    name: str
    benchmark: str
    benchmark_version: str
    depth: int
    first_stage: dict[str, Any]  # the first stage's spec ({"retriever", "params"})
    first_stage_label: str
    rankings: dict[str, list[tuple[str, float]]]
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def hash(self) -> str:
        return pool_hash(self.benchmark_version, self.rankings)

    def ref(self) -> dict[str, Any]:
        """What a result reranked on the pool records of it (``extra["pool"]``)."""
        return {"hash": self.hash, "name": self.name, "depth": self.depth, "first_stage": self.first_stage,
                "first_stage_label": self.first_stage_label}

    def members(self) -> dict[str, frozenset[str]]:
        return {q: frozenset(d for d, _ in r) for q, r in self.rankings.items()}


SCORE_AGREEMENT = 1e-5
"""How far a first stage's scores recomputed elsewhere may be from a pinned pool's and still be
that pool: float rounding of another CPU, thread count or BLAS (an encoder's scores move by a few 1e-7),
never a changed model or text, which moves them by far more."""


@dataclass(frozen=True)
class Agreement:
    """How a pool computed here compares with a pinned one of the same name and benchmark version."""

    same_candidates: bool  # every query has the same candidate set
    max_score_diff: float  # over the candidates of every query (inf when the sets differ)
    reordered: int  # queries whose order differs (near-ties broken the other way)

    @property
    def same_pool(self) -> bool:
        """The same candidates, every score within :data:`SCORE_AGREEMENT`: the pinned pool itself."""
        return self.same_candidates and self.max_score_diff <= SCORE_AGREEMENT

    def describe(self) -> str:
        if not self.same_candidates:
            return "its candidates differ from the pinned pool's"
        return (f"the same candidates as the pinned pool, every score within {self.max_score_diff:.1g} of it"
                + (f", {self.reordered} quer{'y' if self.reordered == 1 else 'ies'} ordered otherwise at a near-tie"
                   if self.reordered else ""))


def agreement(here: "Pool", pinned: "Pool") -> Agreement:
    """Compare a pool computed here with a pinned one (:class:`Agreement`)."""
    if here.benchmark_version != pinned.benchmark_version or set(here.rankings) != set(pinned.rankings):
        return Agreement(False, float("inf"), 0)
    worst, reordered = 0.0, 0
    for q, mine in here.rankings.items():
        theirs = dict(pinned.rankings[q])
        if len(mine) != len(theirs) or any(d not in theirs for d, _ in mine):
            return Agreement(False, float("inf"), 0)
        worst = max([worst, *(abs(s - theirs[d]) for d, s in mine)])
        reordered += [d for d, _ in mine] != [d for d, _ in pinned.rankings[q]]
    return Agreement(True, worst, reordered)


def build_pool(bench: Benchmark, first_stage: Run | Mapping[str, Sequence[tuple[str, float]]], spec: RetrieverSpec,
               depth: int, name: str = "") -> Pool:
    """The pool of ``first_stage``'s rankings (computed by ``spec``) on ``bench``: the top ``depth``
    of every evaluated query (an empty list for a query it did not rank)."""
    rankings = {q.id: canonical(first_stage.get(q.id, ()), depth) for q in bench.eval_queries}
    return Pool(name or f"{spec.display}@{depth}", bench.name, bench.version, depth,
                {"retriever": spec.name, "params": dict(spec.params)}, spec.display, rankings)


def reference_run(pool: Pool, bench: Benchmark, kind: str, seed: int = 0) -> Run:
    """The pool's reference row ``kind`` (``order``, ``shuffled``, ``oracle``) as a ranking."""
    run = Run()
    grades, violating, threshold = bench.judgments.relevance, bench.judgments.violating, bench.relevance_threshold
    for q, ranking in pool.rankings.items():
        ids = [d for d, _ in ranking]
        if kind == "order":
            run[q] = list(ranking)
            continue
        if kind == "shuffled":
            digest = hashlib.sha256(q.encode("utf-8")).digest()
            rng = np.random.default_rng([int(seed), int.from_bytes(digest[:8], "little")])
            ids = [ids[i] for i in rng.permutation(len(ids))]
        elif kind == "oracle":
            g, v = grades.get(q) or {}, violating.get(q) or frozenset()
            rank = {d: i for i, d in enumerate(ids)}
            ids = sorted(ids, key=lambda d: (-(g.get(d, 0) >= threshold), -g.get(d, 0), d in v, rank[d]))
        else:
            raise ValueError(f"unknown reference row {kind!r}; one of {', '.join(REFERENCES)}")
        run[q] = [(d, float(len(ids) - i)) for i, d in enumerate(ids)]
    return run


def describe(pool: Pool, bench: Benchmark, measures: Sequence[str]) -> dict[str, Any]:
    """The pool's manifest (see the module docstring): its figures in its own order (``measures``),
    and its ceiling."""
    from ..measures import evaluate

    qids = [q.id for q in bench.eval_queries]
    kw = dict(relevance_threshold=bench.relevance_threshold, pairs=bench.pairs, query_ids=qids)
    own = evaluate(Run(pool.rankings), bench.judgments, measures, **kw)
    best = evaluate(reference_run(pool, bench, "oracle"), bench.judgments,
                    [m for m in CEILING_MEASURES if m in measures or m == "nDCG@10"], **kw)
    relevant = {q: bench.judgments.relevant(q, bench.relevance_threshold) for q in qids}
    with_relevant = [q for q in qids if relevant[q]]
    reachable = sum(1 for q in with_relevant if any(d in relevant[q] for d, _ in pool.rankings.get(q, ())))
    figures = {m: own.means[m] for m in measures if own.means[m] == own.means[m]}
    return {
        "format": POOL_FORMAT, "hash": pool.hash, "name": pool.name, "benchmark": pool.benchmark,
        "benchmark_version": pool.benchmark_version, "depth": pool.depth,
        "first_stage": pool.first_stage, "first_stage_label": pool.first_stage_label,
        "first_stage_spec_hash": RetrieverSpec.of(pool.first_stage).hash,
        "queries": len(pool.rankings), "candidates": sum(len(r) for r in pool.rankings.values()),
        "figures": figures,
        "ceiling": {"satisfiable": reachable / len(with_relevant) if with_relevant else None,
                    "queries_with_relevant": len(with_relevant),
                    **{m: best.means[m] for m in best.means if best.means[m] == best.means[m]}},
        "harness_version": HARNESS_VERSION,
    }


def outside(run: Mapping[str, Sequence[tuple[str, float]]], pool: Pool) -> tuple[str, str, int, int] | None:
    """The first ranked document of ``run`` that its query's pool does not hold, as ``(query,
    document, rank, how many such documents)``; ``None`` when the run is a reordering of the pool."""
    members = pool.members()
    first: tuple[str, str, int] | None = None
    n = 0
    for q, ranking in run.items():
        allowed = members.get(q, frozenset())
        for rank, (d, _) in enumerate(ranking, 1):
            if d not in allowed:
                n += 1
                first = first or (q, d, rank)
    return None if first is None else (*first, n)


def check_reordering(run: Mapping[str, Sequence[tuple[str, float]]], pool: Pool, where: str) -> None:
    """A :class:`~harness.types.RunError` naming the first document of ``run`` outside ``pool``."""
    bad = outside(run, pool)
    if bad:
        q, d, rank, n = bad
        raise RunError(f"{where}: document {d!r} at rank {rank} of query {q!r} is not among its candidates in pool "
                       f"{pool.name} ({pool.hash}): a reranker reorders its pool ({n} such document(s) in all)")


# -- files -------------------------------------------------------------------------------------------


def manifest_path(path: Path) -> Path:
    return path.with_name(path.name + MANIFEST_SUFFIX)


def write_pool(pool: Pool, path: Path) -> tuple[Path, Path]:
    """The pool as a TREC file at ``path`` and its manifest beside it (each through a temporary file);
    both paths. An id holding white space cannot be a TREC field: a :class:`PoolError`."""
    tag = re.sub(r"[^A-Za-z0-9._@-]+", "_", pool.name).strip("_") or "pool"
    lines = []
    for q, ranking in pool.rankings.items():
        for rank, (d, s) in enumerate(ranking, 1):
            if not q or not d or any(c.isspace() for c in q + d):
                raise PoolError(f"pool {pool.name}: query {q!r} / document {d!r} holds white space, which a TREC "
                                "file cannot carry")
            lines.append(f"{q} Q0 {d} {rank} {s!r} {tag}\n")
    path.parent.mkdir(parents=True, exist_ok=True)
    meta = manifest_path(path)
    for target, text in ((path, "".join(lines)), (meta, json.dumps(pool.manifest, indent=1, sort_keys=True) + "\n")):
        tmp = target.with_name(f".{target.name}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, target)
    return path, meta


def read_pool(path: str | Path, bench: Benchmark | None = None) -> Pool:
    """The pool in the TREC file ``path`` (or named by its manifest ``<file>.manifest.json``), checked:
    its content hash is the one its manifest names, and, given ``bench``, it is a pool of that
    benchmark version over its corpus."""
    p = Path(path)
    if p.name.endswith(MANIFEST_SUFFIX):
        p = p.with_name(p.name[: -len(MANIFEST_SUFFIX)])
    meta = manifest_path(p)
    if not p.is_file():
        raise PoolError(f"{p}: no such pool file (a pool is a TREC file and {meta.name} beside it; "
                        "`beyondsim pool export` writes both)")
    try:
        manifest = json.loads(meta.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise PoolError(f"{meta}: the pool's manifest is missing (`beyondsim pool export` writes it beside the TREC file)") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PoolError(f"{meta}: not a pool manifest: {e}") from None
    need = {"format": str, "hash": str, "name": str, "benchmark": str, "benchmark_version": str, "depth": int,
            "first_stage": dict, "first_stage_label": str}
    for key, typ in need.items():
        if not isinstance(manifest, dict) or not isinstance(manifest.get(key), typ) or isinstance(manifest.get(key), bool):
            raise PoolError(f"{meta}: field {key}: missing or not a {typ.__name__}")
    if manifest["format"] != POOL_FORMAT:
        raise PoolError(f"{meta}: field format: {manifest['format']!r}, expected {POOL_FORMAT!r}")
    manifest["name"] = check_label(manifest["name"], "pool name", normal_form=True)
    if bench is not None and (manifest["benchmark"], manifest["benchmark_version"]) != (bench.name, bench.version):
        raise PoolError(f"{meta}: a pool of {manifest['benchmark']} version {manifest['benchmark_version']}, not of "
                        f"{bench.name} version {bench.version} (the benchmark here)")
    ids = {q.id for q in bench.queries} if bench is not None else None
    try:
        rf = read_run(p, queries=ids, documents=bench.corpus if bench is not None else None)
    except RunFileError as e:
        raise PoolError(str(e)) from None
    depth = manifest["depth"]
    rankings = {q: canonical(r, depth) if len(r) <= depth else list(r) for q, r in rf.run.items()}
    if bench is not None:
        rankings = {q.id: rankings.get(q.id, []) for q in bench.eval_queries}
    deepest = max((len(r) for r in rankings.values()), default=0)
    if deepest > depth:
        raise PoolError(f"{p}: a query has {deepest} candidates; the manifest's depth is {depth}")
    got = pool_hash(manifest["benchmark_version"], rankings)
    if got != manifest["hash"]:
        raise PoolError(f"{p}: its content hashes to {got}, its manifest names pool {manifest['hash']}: the file is not "
                        "the pool its manifest describes")
    return Pool(manifest["name"], manifest["benchmark"], manifest["benchmark_version"], depth,
                dict(manifest["first_stage"]), manifest["first_stage_label"], rankings, manifest)


def reference_record_spec(pool: Pool, kind: str) -> RetrieverSpec:
    """The spec of the pool's reference row ``kind``: its retriever name, on the pool."""
    name, shown = REFERENCES[kind]
    return RetrieverSpec(name, {}, f"{shown} [{pool.name}]", pool.hash, pool.name)


# -- pools beside an export (the reference bundle's) ---------------------------------------------------


def pools_file(bundle: Path) -> Path:
    """The file of pools that goes with an export file: ``<name>.pools.jsonl.gz`` beside it."""
    name = bundle.name
    for ext in (".jsonl.gz", ".jsonl", ".gz"):
        if name.endswith(ext):
            name = name[: -len(ext)]
            break
    return bundle.with_name(name + ".pools.jsonl.gz")


def write_pool_lines(pools: Iterable[Pool], path: Path) -> int:
    """The pools as gzip-compressed JSON lines (``{"manifest", "rankings"}``, by hash; no time stamp,
    so the same pools give the same bytes), through a temporary file; how many."""
    import gzip

    rows = sorted(pools, key=lambda p: (p.benchmark, p.name, p.hash))
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as gz:
        for p in rows:
            line = {"manifest": p.manifest, "rankings": {q: [[d, s] for d, s in r] for q, r in p.rankings.items() if r}}
            gz.write((json.dumps(line, sort_keys=True, allow_nan=False) + "\n").encode("utf-8"))
    os.replace(tmp, path)
    return len(rows)


def read_pool_lines(path: Path, max_bytes: int = 512 * 1024 ** 2) -> list[Pool]:
    """The pools of a file :func:`write_pool_lines` wrote, each checked: the identity fields of its
    manifest, its candidates (ids, finite scores, no document twice, at most ``depth``), and its
    content hash recomputed. The figures and ceiling of a manifest are a file's claim: the caller
    recomputes them (:func:`describe`) where the benchmark loads. A problem is a :class:`PoolError`
    naming the file, the line and the field."""
    import gzip
    import math

    out: list[Pool] = []
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            text = f.read(max_bytes + 1)
    except (OSError, EOFError, UnicodeDecodeError) as e:
        raise PoolError(f"{path}: cannot read the pools file: {e}") from None
    if len(text) > max_bytes:
        raise PoolError(f"{path}: decompresses to more than {max_bytes:,} bytes; not read")
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"{path}:{lineno}"
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as e:
            raise PoolError(f"{where}: not JSON: {e.msg}") from None
        m = obj.get("manifest") if isinstance(obj, dict) else None
        r = obj.get("rankings") if isinstance(obj, dict) else None
        if not isinstance(m, dict) or not isinstance(r, dict):
            raise PoolError(f"{where}: expected {{\"manifest\": {{…}}, \"rankings\": {{qid: [[docid, score], …]}}}}")
        for key, typ in (("hash", str), ("name", str), ("benchmark", str), ("benchmark_version", str), ("depth", int),
                         ("first_stage", dict), ("first_stage_label", str)):
            if not isinstance(m.get(key), typ) or isinstance(m.get(key), bool) or m.get(key) in ("", 0):
                raise PoolError(f"{where}: field manifest.{key}: missing or not a {typ.__name__}")
        check_label(m["name"], "pool name", normal_form=True)
        check_label(m["first_stage_label"], "pool first stage label", normal_form=True)
        rankings: dict[str, list[tuple[str, float]]] = {}
        for q, ranking in r.items():
            if not isinstance(ranking, list) or len(ranking) > m["depth"]:
                raise PoolError(f"{where}: field rankings[{q!r}]: not a list of at most {m['depth']} candidates")
            seen: set[str] = set()
            items = []
            for pair in ranking:
                if (not isinstance(pair, list) or len(pair) != 2 or not isinstance(pair[0], str) or not pair[0]
                        or isinstance(pair[1], bool) or not isinstance(pair[1], (int, float))
                        or not math.isfinite(pair[1]) or pair[0] in seen):
                    raise PoolError(f"{where}: field rankings[{q!r}]: {str(pair)[:60]} is not a [docid, finite score] "
                                    "pair of a document not listed before")
                seen.add(pair[0])
                items.append((pair[0], float(pair[1])))
            rankings[q] = items
        if pool_hash(m["benchmark_version"], rankings) != m["hash"]:
            raise PoolError(f"{where}: field rankings: they hash to {pool_hash(m['benchmark_version'], rankings)}, not "
                            f"to the pool's hash {m['hash']}")
        ident = {k: m[k] for k in ("format", "hash", "name", "benchmark", "benchmark_version", "depth", "first_stage",
                                   "first_stage_label") if k in m}
        out.append(Pool(m["name"], m["benchmark"], m["benchmark_version"], m["depth"], dict(m["first_stage"]),
                        m["first_stage_label"], rankings, ident))
    return out


def pool_from_store(store: Any, pool_hash_: str) -> Pool | None:
    """A stored pool (``store.pool``) as a :class:`Pool`, or ``None``."""
    got = store.pool(pool_hash_)
    if got is None:
        return None
    m, rankings = got
    return Pool(m["name"], m["benchmark"], m["benchmark_version"], int(m["depth"]), dict(m["first_stage"]),
                m["first_stage_label"], rankings, m)
