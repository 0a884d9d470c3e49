"""``rerank``: a cross-encoder second stage over any registered retriever (CoDeR, Table 11).

The first stage is a retriever spec, given as the ``first_stage`` parameter in one of three forms:

* ``"bm25"`` — a registered name with its default parameters;
* ``"dense:model=all-mpnet-base-v2,pooling=mean"`` — a name, a colon and ``KEY=VALUE`` pairs
  separated by commas (values are read as on the command line; a value holding a comma needs the
  JSON form);
* ``'{"retriever": "dense", "params": {"model": "…"}}'`` — JSON (or the same table in a TOML config).

It is resolved with the registry like any spec (unknown names and parameters are errors, defaults
are filled in) and stored in canonical JSON, so ``rerank``'s spec hash covers every first-stage
parameter and a result is keyed by both stages. ``module:Class`` first stages are refused: a stored
result names its stages by registered name, so reading it back never imports code.

The second stage is a ``sentence_transformers.CrossEncoder`` (``model``: a hub name —
``BAAI/bge-reranker-large``, the default, is the reranker of CoDeR's Table 11 — or a local
directory). Each query's first-stage top ``top_n`` is rescored with ``CrossEncoder.predict`` on the
``(query text, document title + text)`` pairs and sorted by that score (stable: ties keep the
first-stage order). With ``keep_rest`` (default) the first stage's deeper documents follow in their
first-stage order, their scores shifted to lie below every reranked score; without it a ranking
ends after ``top_n``.

On a pool (``beyondsim run rerank --pool bm25@100``) ``rerank`` is a reranker (:meth:`Rerank.rerank`):
the pool's top ``top_n`` candidates are rescored by the cross-encoder in place of the first stage's
top ``top_n``, and the first stage is neither searched nor indexed. ``first_stage`` stays in the spec
(and its hash) there, so two configurations that differ only in it rank a pool alike.

The first stage is indexed on first use: ``index`` loads the cross-encoder and keeps the corpus; the first
stage's own ``index`` runs on first use, at the start of the first ``search``, inside the ledger's
``index`` phase (:func:`retrievers.dense.offline_phase`: a phase opened inside another is counted
once, in itself), so it is still offline time and the ``search`` phase does not count it. The runner
calls ``index`` before it knows whether ``search`` or ``rerank`` follows; deferring the first stage's
index is what keeps a run on a pool from encoding (or BM25-indexing) the whole corpus for a stage it
never uses. A caller that times ``search`` itself, outside the ledger, sees the first call include it.
The first stage's ``prepare``, ``training_data`` and ``fit`` (below) are still passed through on a pool:
the runner calls them before ``index`` (a trained first stage is prepared, and checked for leakage,
for nothing there).

Costs: the first stage's ``index`` and the cross-encoder's loading run in the ledger's ``index``
phase (offline; loading weights in its ``model`` phase where the ledger has one), the first stage's
``search`` and the pair scoring in its ``search`` phase (online); LLM calls of the first stage are
recorded as usual. ``extra.retriever.stages`` splits each phase between the two stages
(``{phase: {"first_stage" | "reranker": {wall_s, cpu_s, items}}}``), and the ledger counts the
scored pairs (``rerank.pairs``). The first stage's ``prepare``, ``training_data`` and ``fit`` are passed through, so
a trained first stage (``coder-seq``) is prepared and checked for leakage as on its own.

The label names both stages: ``rerank(bm25 → BAAI/bge-reranker-large)``.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from harness.models.resolve import EncoderError, default_device, hub_offline_uncached, one_line, resolve_model
from harness.core.ledger import PHASES
from harness.protocols import (DeclaresTrainingData, HasResultExtra, Preparable, RunContext, Trainable)
from harness.registry import (MAX_LABEL_CHARS, RegistryError, RetrieverSpec, get_retriever_class, instantiate,
                              make_spec, params_class, register, retriever_info, spec_object)
from harness.types import Candidate, Corpus, Query, Run, as_run
from . import citations
from .dense import distinct, follow_below, offline_phase

DEFAULT_RERANKER = "BAAI/bge-reranker-large"
MODEL_PHASE = "model"  # the ledger phase that times model loading, where the ledger has one
NAME = "rerank"


def parse_stage(text: str | Mapping[str, Any]) -> RetrieverSpec:
    """The retriever spec a ``first_stage`` value names (see the module docstring for the forms);
    a ValueError naming the problem when it names none."""
    obj = spec_object(text, "first_stage")
    name = obj["retriever"]
    if ":" in name:
        raise ValueError(f"first_stage {name!r}: expected NAME or NAME:KEY=VALUE,…; the name must be registered "
                         "(an entry point of beyondsim.retrievers), not module:Class, so a stored result never "
                         "names code to import")
    try:
        return make_spec(name, obj.get("params", {}))
    except RegistryError as e:
        raise ValueError(f"first_stage: {str(e).split('; or give a class', 1)[0]}") from None


def _value(v: Any) -> str:
    return json.dumps(v) if isinstance(v, str) and (not v or any(c in v for c in ",=() ")) else str(v)


def stage_label(spec: RetrieverSpec) -> str:
    """A short name for a first stage: its name, with the parameters that differ from the defaults
    (``dense(model=all-mpnet-base-v2)``); a stage that names itself (``default_label``) does."""
    cls = get_retriever_class(spec.name)
    own = getattr(cls, "default_label", None)
    if callable(own):
        return own(params_class(cls)(**spec.params))
    defaults = make_spec(spec.name).params
    changed = {k: v for k, v in sorted(spec.params.items()) if defaults.get(k) != v}
    return spec.name + (f"({', '.join(f'{k}={_value(v)}' for k, v in changed.items())})" if changed else "")


def _model_label(model: str) -> str:
    p = Path(model).expanduser()
    return p.name if p.is_dir() or model.startswith((".", "/", "~")) else model


def _first_stage_calls_llm(params: "RerankParams") -> bool:
    spec = params.first_stage_spec()
    cls = get_retriever_class(spec.name)
    return retriever_info(cls).calls_llm(params_class(cls)(**spec.params))


@dataclass(frozen=True)
class RerankParams:
    first_stage: str = "bm25"  # a retriever spec: NAME, NAME:KEY=VALUE,… or JSON (stored as canonical JSON)
    model: str = DEFAULT_RERANKER  # a sentence-transformers CrossEncoder: hub name or local directory
    top_n: int = 100  # first-stage documents rescored per query
    keep_rest: bool = True  # the first stage's deeper documents follow the reranked ones
    batch_size: int = 32
    max_length: int | None = None  # the cross-encoder's input limit in tokens (None: the model's)

    def __post_init__(self) -> None:
        if self.top_n < 1 or self.batch_size < 1:
            raise ValueError("rerank: top_n and batch_size must be ≥ 1")
        if self.max_length is not None and self.max_length < 1:
            raise ValueError("rerank: max_length must be ≥ 1 (or unset)")
        if not self.model:
            raise ValueError("rerank: model must name a cross-encoder")
        object.__setattr__(self, "first_stage", self.first_stage_spec().canonical())

    def first_stage_spec(self) -> RetrieverSpec:
        return parse_stage(self.first_stage)


_MODELS: dict[tuple[str, str, int | None], Any] = {}
_MODELS_LOCK = threading.Lock()


def cross_encoder_loaded(name: str, device: str | None = None, max_length: int | None = None) -> bool:
    """Whether :func:`load_cross_encoder` has this model in memory already."""
    return (resolve_model(name).load_target, device or default_device(), max_length) in _MODELS


def load_cross_encoder(name: str, device: str | None = None, max_length: int | None = None) -> Any:
    """A ``sentence_transformers.CrossEncoder`` for ``name`` (a local directory, a packaged model or
    a hub name), loaded once per process; local and packaged models never touch the network. A
    model that cannot be loaded is an :class:`~harness.models.resolve.EncoderError` of one line."""
    rm = resolve_model(name)
    where = ("the Hugging Face hub (offline, give a local directory: rerank.model=PATH)"
             if rm.source == "hub" else f"{rm.source} directory {rm.path}")
    if rm.source == "hub" and hub_offline_uncached(name):
        raise EncoderError(f"cannot load cross-encoder {name!r} from {where}: HF_HUB_OFFLINE is set and the model "
                           "is not in the local hub cache")
    from sentence_transformers import CrossEncoder
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    dev = device or default_device()
    key = (rm.load_target, dev, max_length)
    with _MODELS_LOCK:
        if key not in _MODELS:
            try:
                _MODELS[key] = CrossEncoder(rm.load_target, device=dev, max_length=max_length,
                                            local_files_only=rm.source != "hub")
            except Exception as e:  # noqa: BLE001 - say which model and where it was looked for
                raise EncoderError(f"cannot load cross-encoder {name!r} from {where}: {one_line(e)}") from e
        return _MODELS[key]


@dataclass
class _StageTime:
    wall_s: float = 0.0
    cpu_s: float = 0.0
    items: int = 0


@register(NAME, params=RerankParams, family="reranking", citation=citations.MONOBERT,
          description="A cross-encoder (sentence-transformers; default BAAI/bge-reranker-large) rescoring the top N "
                      "of any first-stage retriever",
          paper="Nogueira & Cho 2019, arXiv:1901.04085; as in CoDeR Table 11 (Yin, Tang & Du 2026, "
                    "arXiv:2606.13204)",
          uses_llm=_first_stage_calls_llm)
class Rerank:
    """A cross-encoder rescoring a first-stage retriever's top N (CoDeR Table 11)."""

    def __init__(self, params: RerankParams | None = None):
        self.params = params or RerankParams()
        self.first_spec = self.params.first_stage_spec()
        self.first = instantiate(self.first_spec)
        self.model: Any = None
        self._corpus: Corpus | None = None
        self._stages: dict[str, dict[str, _StageTime]] = {}
        self._pairs = 0
        self._first_indexed = False  # the first stage's index is built on first search (see the module docstring)
        self._first_lock = threading.Lock()
        # What the first stage needs before it indexes, the runner finds on this object too.
        if isinstance(self.first, Preparable):
            self.prepare = self.first.prepare
        if isinstance(self.first, DeclaresTrainingData):
            self.training_data = self.first.training_data
        if isinstance(self.first, Trainable):
            self.fit = self.first.fit

    @staticmethod
    def default_label(params: RerankParams) -> str:
        """``rerank(<first stage> → <cross-encoder>)``, at most the label limit."""
        label = f"{NAME}({stage_label(params.first_stage_spec())} → {_model_label(params.model)})"
        return label if len(label) <= MAX_LABEL_CHARS else label[:MAX_LABEL_CHARS - 4] + "...)"

    @contextlib.contextmanager
    def _timed(self, ctx: RunContext, default_phase: str, stage: str, items: int = 0) -> Iterator[None]:
        """Wall and CPU seconds of one stage's share of the ledger phase that is running. A phase
        the ledger times inside it (loading a model, where the ledger has such a phase) is counted
        as that phase's share, as the ledger counts it."""
        ledger = ctx.ledger
        phase = (ledger.current_phase if ledger is not None else "") or default_phase
        before = {n: (t.wall_s, t.cpu_s) for n, t in ledger.phases.items()} if ledger is not None else {}
        w0, c0 = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            for name, t in (ledger.phases.items() if ledger is not None else ()):
                dw, dc = t.wall_s - before.get(name, (0.0, 0.0))[0], t.cpu_s - before.get(name, (0.0, 0.0))[1]
                if name != phase and dw > 0:  # closed inside this stage: that phase's time, not this one's
                    inner = self._stages.setdefault(name, {}).setdefault(stage, _StageTime())
                    inner.wall_s, inner.cpu_s = inner.wall_s + dw, inner.cpu_s + dc
                    wall, cpu = wall - dw, cpu - dc
            rec = self._stages.setdefault(phase, {}).setdefault(stage, _StageTime())
            rec.wall_s += max(wall, 0.0)
            rec.cpu_s += max(cpu, 0.0)
            rec.items += items

    def index(self, corpus: Corpus, ctx: RunContext) -> None:
        """Load the cross-encoder and keep the corpus; the first stage indexes it on first
        ``search`` (:meth:`_index_first_stage`), so a run on a pool never indexes it."""
        self._corpus = corpus
        self._first_indexed = False
        self._load_model(ctx, "index")

    def _load_model(self, ctx: RunContext, default_phase: str) -> None:
        with self._timed(ctx, default_phase, "reranker"):
            loads = not cross_encoder_loaded(self.params.model, ctx.device, self.params.max_length)
            timer = (ctx.ledger.phase(MODEL_PHASE) if loads and ctx.ledger is not None and MODEL_PHASE in PHASES
                     else contextlib.nullcontext())
            with timer:  # where the ledger times model loading apart, the cross-encoder's is there too
                self.model = load_cross_encoder(self.params.model, ctx.device, self.params.max_length)

    def _index_first_stage(self, ctx: RunContext) -> None:
        """The first stage's ``index`` over the corpus ``index`` was given, once, timed as the
        ledger's offline ``index`` phase though ``search`` runs it."""
        assert self._corpus is not None, "index() must run before search()"
        with self._first_lock:
            if self._first_indexed:
                return
            with offline_phase(ctx), self._timed(ctx, "index", "first_stage", len(self._corpus)):
                self.first.index(self._corpus, ctx)
            self._first_indexed = True

    def _predict(self, pairs: list[tuple[str, str]], ctx: RunContext) -> np.ndarray:
        """Cross-encoder scores of ``(query, document)`` text pairs, float64, in order."""
        assert self.model is not None, "index() must run before search()"
        out = np.empty(len(pairs), dtype=np.float64)
        chunk = max(self.params.batch_size * 8, 256)
        with ctx.progress.track(len(pairs), "rerank: scoring pairs") as advance:
            for s in range(0, len(pairs), chunk):
                batch = pairs[s:s + chunk]
                scores = self.model.predict(batch, batch_size=self.params.batch_size, show_progress_bar=False,
                                            convert_to_numpy=True)
                out[s:s + len(batch)] = np.asarray(scores, dtype=np.float64).reshape(len(batch))
                advance(len(batch))
        self._pairs += len(pairs)
        if ctx.ledger is not None:
            ctx.ledger.count("rerank.pairs", len(pairs))
        return out

    def _text(self, doc_id: str) -> str:
        assert self._corpus is not None
        return self._corpus.get(doc_id).full_text

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run:
        p = self.params
        depth = max(k, p.top_n) if p.keep_rest else p.top_n
        self._index_first_stage(ctx)
        with self._timed(ctx, "search", "first_stage", len(queries)):
            first = as_run(self.first.search(queries, depth, ctx), f"first stage {type(self.first).__name__}: search")
        lists = {q.id: list(first.get(q.id, ())) for q in queries}
        heads = {qid: [(d, self._text(d)) for d, _ in r[:p.top_n]] for qid, r in lists.items()}
        tails = {qid: [(d, float(x)) for d, x in r[p.top_n:]] if p.keep_rest else [] for qid, r in lists.items()}
        run = self._rescore(queries, heads, tails, ctx)
        return Run({qid: ranking[:k] for qid, ranking in run.items()})

    def rerank(self, queries: Sequence[Query], candidates: Mapping[str, Sequence[Candidate]],
               ctx: RunContext) -> Run:
        """On a pool: the pool's top ``top_n`` candidates (in pool order) take the place of the
        first stage's top ``top_n`` and are rescored by the cross-encoder on ``(query text, title +
        text)`` pairs, sorted by that score (stable: ties keep the pool order); with ``keep_rest``
        the pool's deeper candidates follow in pool order, their pool scores shifted below every
        reranked score (gaps kept), without it the ranking ends after ``top_n``. The first stage is
        not searched — nor indexed, since ``index`` leaves that to the first ``search`` — so what
        differs from ``search`` is only where the list comes from: the pool (its documents, order
        and scores) instead of the ``first_stage`` retriever. A query without candidates gets an
        empty ranking."""
        p = self.params
        if self.model is None:  # index() loads it; a caller that skipped index loads it here
            self._load_model(ctx, "search")
        heads: dict[str, list[tuple[str, str]]] = {}
        tails: dict[str, list[tuple[str, float]]] = {}
        for q in queries:
            pool = distinct(candidates.get(q.id, ()))
            heads[q.id] = [(c.id, c.doc.full_text) for c in pool[:p.top_n]]
            tails[q.id] = [(c.id, float(c.score)) for c in pool[p.top_n:]] if p.keep_rest else []
        return self._rescore(queries, heads, tails, ctx)

    def _rescore(self, queries: Sequence[Query], heads: Mapping[str, list[tuple[str, str]]],
                 tails: Mapping[str, list[tuple[str, float]]], ctx: RunContext) -> Run:
        """Each query's ``heads`` (``(doc id, text)``) scored by the cross-encoder and sorted by it
        (stable), then its ``tails`` in their order, below every reranked score, gaps kept."""
        pairs = [(q.text, text) for q in queries for _, text in heads[q.id]]
        with self._timed(ctx, "search", "reranker", len(pairs)):
            scores = self._predict(pairs, ctx)
        run, at = Run(), 0
        for q in queries:
            head = heads[q.id]
            s = scores[at:at + len(head)]
            at += len(head)
            order = sorted(range(len(head)), key=lambda i: -s[i])  # stable: ties keep the first-stage order
            ranked = [(head[i][0], float(s[i])) for i in order]
            tail = tails[q.id]
            if tail and ranked:  # below every reranked score, first-stage gaps kept
                tail = list(zip((d for d, _ in tail), follow_below(ranked[-1][1], [x for _, x in tail])))
            run[q.id] = ranked + tail
        return run

    def score(self, queries: Sequence[Query], doc_ids: Mapping[str, Sequence[str]],
              ctx: RunContext) -> dict[str, dict[str, float]]:
        """The cross-encoder's scores of the named documents (PairAcc), on the scale of the reranked
        part of ``search``'s rankings."""
        wanted = [(q, d) for q in queries for d in doc_ids.get(q.id, ())]
        with self._timed(ctx, "search", "reranker", len(wanted)):
            scores = self._predict([(q.text, self._text(d)) for q, d in wanted], ctx)
        out: dict[str, dict[str, float]] = {q.id: {} for q in queries}
        for (q, d), s in zip(wanted, scores):
            out[q.id][d] = float(s)
        return out

    def result_extra(self) -> dict[str, Any]:
        """Both stages (the first stage's spec and its own extra; the cross-encoder and where it was
        loaded from) and each stage's share of the ``index`` and ``search`` phases."""
        rm = resolve_model(self.params.model)
        out: dict[str, Any] = {
            "first_stage": {"retriever": self.first_spec.name, "params": json.loads(self.params.first_stage)["params"],
                            "label": stage_label(self.first_spec), "indexed": self._first_indexed},
            "reranker": {"model": self.params.model, "source": rm.source, "top_n": self.params.top_n,
                         "keep_rest": self.params.keep_rest, "pairs_scored": self._pairs},
            "stages": {phase: {stage: vars(t).copy() for stage, t in stages.items()}
                       for phase, stages in self._stages.items()},
        }
        if isinstance(self.first, HasResultExtra):
            out["first_stage"]["extra"] = self.first.result_extra()
        return json.loads(json.dumps(out, default=float))
