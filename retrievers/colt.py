"""``colt``: completeness-oriented tool retrieval (Qu et al., CIKM 2024, arXiv:2405.16089), the
NNN paper's collaborative-learning baseline on ToolLens and ToolBank.

Training (``fit``, on the benchmark's ``:train`` split; :mod:`retrievers.colt_train` has the
details read from the authors' code, ``quchangle1/COLT``):

1. *Semantic learning* (``semantic_epochs`` > 0): the bi-encoder ``model`` is fine-tuned on the
   training (query, relevant tool) pairs with in-batch-negative MNRL (the authors: 5 epochs,
   batch 16, lr 2e-5).
2. *Collaborative learning*: a graph of the training queries, their scenes (the distinct tool
   sets the queries need) and the tools; query and tool embeddings start from the encoder's and
   are trained through LightGCN propagation over the query–tool and query–scene views with the
   authors' list-wise multi-label loss plus ``c_lambda`` × the dual-view contrastive loss.

The NNN paper (appendix B.4) initialises the collaborative stage from its ``dense`` checkpoint and
sweeps the GNN depth and the loss balance ``c_lambda``, keeping the best validation Comp@5; here
``layers`` and ``c_lambda`` are comma-separated grids (one value: no sweep), every grid point is
trained with the same seed, and the one with the best validation Comp@5 at its kept epoch wins
(ties: the earlier grid point). Epochs are kept by the authors' rule (validation R@3 and Comp@3
both improve) with their patience of 20 epochs. Validation is the ``:dev`` split the runner
hands over (``ctx.validation``), else a seeded 10 % of the training queries held out of both
stages.

Retrieval is inner-product scoring, as the authors evaluate it: a query (never in the training
graph) is embedded by the stage-1 encoder — through the shared pool and its embedding cache —
and scored against each tool's propagated tool-view embedding (unit norm) with faiss
``IndexFlatIP``. A corpus tool that was not a node of the training graph (another id, or the
same id with another text) gets its encoder embedding.

Defaults and how they differ from the authors' configuration (``config.yaml``, ToolLens). As
released: Adam lr 1e-3, L2 1e-7, batch 2048, a list of 10 tools per query, contrastive
temperature 0.1 (their ToolBench setting is 0.05), edge dropout 0.2 redrawn every epoch, and the
epoch rule (validation R@3 and Comp@3 both improve). Changed for a 2-core CPU: at most
``epochs`` = 40 epochs with ``patience`` = 10 (the authors: 200 and 20). Measured: ToolLens
kept epochs 4–16 and stopped by epoch 27, NumpyBank kept 4–10 and stopped by epoch 21. The
40-epoch cap never bound, but the shorter patience ended every run, so a better epoch between 10
and 20 epochs after the kept one would have been missed. Grid: ``layers`` 1,2 × ``c_lambda`` 0.04,0.1, which holds the authors' best
point (1, 0.04); the NNN paper sweeps both, but its grid values are not in our copy of it.
``semantic_epochs`` is 0 by default. This project's ``dense`` is the frozen pretrained encoder,
so "initialised from the dense checkpoint" means the frozen model here. Stage-1 fine-tuning
also takes hours on a 2-core CPU (≈ 36k ToolLens pairs whose tool descriptions run to ~170
tokens). Set ``semantic_epochs=5`` on a GPU for the authors' two-stage model. The embeddings
are the encoder's unit-norm ones (the authors' contriever embeddings are not normalised), and
their size is the encoder's (no projection, as in theirs). A training split smaller than the
batch makes one batch per epoch (the authors drop the last incomplete batch, which would leave
nothing to train on a split of under 2048 queries).

Trained weights are cached: ``$BEYONDSIM_HOME/models/colt/<hash>/`` holds ``colt_card.json``
(configuration, seed, base-model fingerprint, the versions of the training and validation
splits, the sweep with per-epoch history, wall times and the training data), ``tools.npy`` (the
tool embeddings, read with ``allow_pickle=False``) and, after stage 1, ``encoder/`` (a
sentence-transformers directory). The hash covers every parameter, the seed, the base model's
fingerprint and both split versions, so a rerun with the same key loads instead of training.
Artifacts are written to a temporary directory and renamed (:func:`harness.core.files.replacing_folder`).

Leakage: ``training_data`` declares the training split's version, query ids and query texts,
so the runner refuses to score ``colt`` on a split sharing any of them. Tools are not declared:
they are the corpus being ranked, the same in every split of these benchmarks, and only their
descriptions (no judgment) enter training apart from the training queries' pairs.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from harness.data import default_data_dir
from harness.models.resolve import model_fingerprint
from harness.core.files import replacing_folder
from harness.core.leakage import TrainingData, digests, family, text_digest
from harness.protocols import RunContext
from harness.store.provenance import environment
from harness.registry import load_benchmark, register, spec_params
from harness.types import Benchmark, Corpus, Query
from . import citations

from .colt_train import (CollabConfig, ValSet, build_graph, copy_encoder, train_collaborative,
                         train_semantic)
from .dense import DenseParams, DenseRetriever

CARD = "colt_card.json"
CARD_FORMAT = "beyondsim.colt-card/1"
VAL_FRACTION = 0.1


def parse_grid(text: str, kind: type, name: str) -> list[Any]:
    """``"1,2,3"`` → ``[1, 2, 3]`` (order kept, repeats dropped)."""
    try:
        vals = [kind(x.strip()) for x in str(text).split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{name} must be comma-separated {kind.__name__} values, got {text!r}") from None
    if not vals:
        raise ValueError(f"{name} needs at least one value")
    return list(dict.fromkeys(vals))


@dataclass(frozen=True)
class ColtParams(DenseParams):
    """``model`` (and prefixes, ``max_length``): the dense checkpoint COLT starts from.

    Stage 1: ``semantic_epochs`` (0 = none; the authors 5), ``semantic_batch_size``,
    ``semantic_lr``, ``semantic_max_length`` (tokens per text while training; the authors 350),
    ``semantic_max_pairs`` (a seeded sample; None = all). Stage 2: grids ``layers`` and
    ``c_lambda`` (comma-separated), ``c_temp``, ``lr``, ``l2_reg``, ``train_batch_size``,
    ``neg_num`` (tools per query list), ``edge_dropout``, ``epochs``, ``patience``;
    ``max_train_queries`` caps the training queries (seeded sample). ``cache``: reuse a stored
    artifact with the same key."""

    semantic_epochs: int = 0
    semantic_batch_size: int = 16
    semantic_lr: float = 2e-5
    semantic_max_length: int | None = 128
    semantic_max_pairs: int | None = None
    layers: str = "1,2"
    c_lambda: str = "0.04,0.1"
    c_temp: float = 0.1
    lr: float = 1e-3
    l2_reg: float = 1e-7
    train_batch_size: int = 2048
    neg_num: int = 10
    edge_dropout: float = 0.2
    epochs: int = 40
    patience: int = 10
    max_train_queries: int | None = None
    cache: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()
        layers = parse_grid(self.layers, int, "layers")
        lambdas = parse_grid(self.c_lambda, float, "c_lambda")
        if min(layers) < 0 or min(lambdas) < 0:
            raise ValueError("layers and c_lambda must be ≥ 0")
        if self.semantic_epochs < 0 or self.epochs < 1 or self.patience < 1:
            raise ValueError("semantic_epochs ≥ 0, epochs ≥ 1, patience ≥ 1")
        if self.semantic_batch_size < 2 or self.train_batch_size < 2 or self.neg_num < 2:
            raise ValueError("semantic_batch_size, train_batch_size and neg_num must be ≥ 2")
        if not (self.lr > 0 and self.semantic_lr > 0 and self.c_temp > 0 and self.l2_reg >= 0
                and 0 <= self.edge_dropout < 1):
            raise ValueError("lr, semantic_lr, c_temp > 0; l2_reg ≥ 0; edge_dropout in [0, 1)")
        if self.max_train_queries is not None and self.max_train_queries < 2:
            raise ValueError("max_train_queries must be ≥ 2 (or None)")
        if self.semantic_max_pairs is not None and self.semantic_max_pairs < 2:
            raise ValueError("semantic_max_pairs must be ≥ 2 (or None)")

    def grid(self) -> list[tuple[int, float]]:
        return [(n, lam) for n in parse_grid(self.layers, int, "layers")
                for lam in parse_grid(self.c_lambda, float, "c_lambda")]

    def collab(self, layers: int, c_lambda: float) -> CollabConfig:
        return CollabConfig(layers=layers, c_lambda=c_lambda, c_temp=self.c_temp, lr=self.lr, l2_reg=self.l2_reg,
                            batch_size=self.train_batch_size, neg_num=self.neg_num, edge_dropout=self.edge_dropout,
                            epochs=self.epochs, patience=self.patience)


def usable_queries(bench: Benchmark, tool_col: dict[str, int]) -> tuple[list[Query], list[list[int]]]:
    """Judged queries with at least one relevant tool in ``tool_col``, with those tools' columns."""
    out_q, out_r = [], []
    for q in bench.eval_queries:
        rel = sorted({tool_col[d] for d in bench.judgments.relevant(q.id, bench.relevance_threshold) if d in tool_col})
        if rel:
            out_q.append(q)
            out_r.append(rel)
    return out_q, out_r


def artifact_key(params: ColtParams, seed: int, base_fingerprint: str, train_version: str,
                 validation: str) -> str:
    blob = json.dumps({"params": spec_params(params), "seed": seed, "base": base_fingerprint,
                       "train": train_version, "validation": validation, "format": CARD_FORMAT},
                      sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def read_card(path: Path) -> dict[str, Any] | None:
    f = Path(path) / CARD
    if not f.is_file() or not (Path(path) / "tools.npy").is_file():
        return None
    card = json.loads(f.read_text(encoding="utf-8"))
    if card.get("format") != CARD_FORMAT:
        raise ValueError(f"{f}: unknown card format {card.get('format')!r} (expected {CARD_FORMAT})")
    return card


def declared_training_data(bench: Benchmark, queries: Sequence[Query] | None = None) -> TrainingData:
    """The training split's version, query ids and query texts (``queries``: those used; all judged
    queries by default). Tools are not declared (see the module docstring)."""
    qs = list(bench.eval_queries if queries is None else queries)
    fam = family(bench.name)
    return TrainingData(({"benchmark": bench.name, "version": bench.version, "queries": len(qs)},),
                        {fam: frozenset(q.id for q in qs)}, {}, digests(q.text for q in qs), frozenset())


@register("colt", params=ColtParams, family="dense", citation=citations.COLT,
          description="COLT: a bi-encoder whose tool embeddings are refined by graph collaborative learning over "
                      "queries, scenes and tools (inner-product search)",
          paper="Qu et al. 2024, Towards Completeness-Oriented Tool Retrieval for LLMs (CIKM), arXiv:2405.16089",
          trains_on="the benchmark's train split (query-tool pairs and scenes), model selection on its dev split")
class COLT(DenseRetriever):
    """COLT: stage-1 encoder for queries, collaboratively trained tool embeddings, inner product."""

    def __init__(self, params: ColtParams | None = None):
        super().__init__(params or ColtParams())
        self.encoder_name = ""
        self.card: dict[str, Any] | None = None
        self.artifact: Path | None = None
        self.trained_here = False
        self._tools: np.ndarray | None = None  # trained tool embeddings (unit rows)
        self._tool_row: dict[str, int] = {}
        self._tool_digest: list[str] = []
        self.last_stats: dict[str, Any] = {}

    # -- the protocol ------------------------------------------------------------------------------

    def training_data(self, ctx: RunContext) -> TrainingData | None:
        """What the model is (or, before ``fit``, will be) trained on: the card's record after
        ``fit``, else ``<benchmark>:train`` as the runner will hand it over."""
        if self.card is not None:
            return TrainingData.from_dict(self.card["training_data"])
        if not ctx.benchmark_name:
            return None
        name = family(ctx.benchmark_name) + ":train"
        try:
            bench = load_benchmark(name, default_data_dir(ctx.data_dir), ctx.online)
        except (LookupError, FileNotFoundError, ValueError):
            return None  # no train split: the runner refuses to fit anyway
        return declared_training_data(bench)

    def encode_queries(self, queries: Sequence[Query], ctx: RunContext) -> np.ndarray:
        if not self.encoder_name:
            raise RuntimeError("colt: fit() must run before search()")
        p = self.params
        return self._pool(ctx).encode(self.encoder_name, [q.text for q in queries], prefix=p.query_prefix,
                                      normalize=True, batch_size=p.batch_size, max_length=p.max_length,
                                      description="encoding queries", backend=p.backend)

    def tool_matrix(self, corpus: Corpus, ctx: RunContext) -> tuple[np.ndarray, int]:
        """Unit-norm embeddings of ``corpus``: the trained one for each tool of the training graph
        (same id and text), the encoder's otherwise. Returns them and how many were trained."""
        if not self.encoder_name or self._tools is None:
            raise RuntimeError("colt: fit() must run before index()")
        p = self.params
        emb = np.array(self._pool(ctx).encode(self.encoder_name, corpus.texts(), prefix=p.doc_prefix, normalize=True,
                                              batch_size=p.batch_size, max_length=p.max_length,
                                              description="encoding documents", backend=p.backend),
                       dtype=np.float32)
        trained = 0
        for i, d in enumerate(corpus):
            r = self._tool_row.get(d.id)
            if r is not None and self._tool_digest[r] == text_digest(p.doc_prefix + d.full_text):
                emb[i] = self._tools[r]
                trained += 1
        return np.ascontiguousarray(emb), trained

    def index(self, corpus: Corpus, ctx: RunContext) -> None:
        import faiss

        emb, trained = self.tool_matrix(corpus, ctx)
        self.doc_embeddings = emb
        self._index = faiss.IndexFlatIP(emb.shape[1])
        self._index.add(emb)
        self._doc_ids = corpus.ids
        self._rows = {d: i for i, d in enumerate(self._doc_ids)}
        self.last_stats["index"] = {"documents": len(corpus), "trained_tools": trained,
                                    "encoder_only": len(corpus) - trained}

    def result_extra(self) -> dict[str, Any]:
        """The fit record (stage 1, the sweep with the chosen point, cache use) and the chosen run's
        per-epoch history."""
        out = {k: v for k, v in self.last_stats.items() if k != "history"}
        out["history"] = self.last_stats.get("history", [])
        return out

    # -- training ----------------------------------------------------------------------------------

    def fit(self, benchmark: Benchmark, ctx: RunContext) -> None:
        p: ColtParams = self.params
        rng = np.random.default_rng(ctx.seed)
        tool_ids = benchmark.corpus.ids
        tool_col = {d: j for j, d in enumerate(tool_ids)}
        queries, rels = usable_queries(benchmark, tool_col)
        if len(queries) < 2:
            raise ValueError(f"colt: {benchmark.name} has fewer than 2 training queries with a tool in the corpus")
        order = rng.permutation(len(queries))
        if p.max_train_queries is not None:
            order = order[:p.max_train_queries]
        val_bench = ctx.validation
        if val_bench is not None:
            source, val_version = "dev", val_bench.version
            tr_idx = np.sort(order)
            vq, vr = usable_queries(val_bench, tool_col)
            if not vq:
                raise ValueError(f"colt: validation split {val_bench.name} has no query with a tool in the corpus")
        else:
            source, val_version = "holdout", f"holdout-{VAL_FRACTION}"
            n_val = max(1, int(round(VAL_FRACTION * len(order))))
            val_idx, tr_idx = np.sort(order[:n_val]), np.sort(order[n_val:])
            vq, vr = [queries[i] for i in val_idx], [rels[i] for i in val_idx]
        train_q, train_r = [queries[i] for i in tr_idx], [rels[i] for i in tr_idx]

        home = Path(ctx.cache_dir).parent
        key = artifact_key(p, ctx.seed, model_fingerprint(p.model), benchmark.version, val_version)
        path = home / "models" / "colt" / key
        card = read_card(path) if p.cache else None
        self.trained_here = card is None
        if card is None:
            card = self._train(benchmark, train_q, train_r, vq, vr, tool_ids, source, ctx, path)
            if ctx.ledger is not None:
                ctx.ledger.count("colt.trained")
        elif ctx.ledger is not None:
            ctx.ledger.count("colt.cache_hit")
            ctx.ledger.reuse("trained encoder", card.get("wall_s"), card.get("cpu_s"))
        self._load(path, card, p.model)
        stats = {k: card[k] for k in ("validation", "chosen", "sweep", "graph", "semantic", "wall_s", "device")}
        self.last_stats = {"fit": {**stats, "artifact": str(path), "trained_in_this_run": self.trained_here},
                           "history": card["history"]}

    def _load(self, path: Path, card: dict[str, Any], base: str) -> None:
        self.card, self.artifact = card, path
        self._tools = np.load(path / "tools.npy", allow_pickle=False).astype(np.float32)
        self._tool_row = {d: i for i, d in enumerate(card["tool_ids"])}
        self._tool_digest = list(card["tool_digests"])
        self.encoder_name = str(path / "encoder") if card["semantic"] else base

    def _train(self, bench: Benchmark, train_q: list[Query], train_r: list[list[int]], val_q: list[Query],
               val_r: list[list[int]], tool_ids: list[str], source: str, ctx: RunContext, path: Path) -> dict[str, Any]:
        p: ColtParams = self.params
        t0 = time.perf_counter()
        pool = self._pool(ctx)
        texts = bench.corpus.texts()
        tool_texts = [p.doc_prefix + t for t in texts]
        semantic: dict[str, Any] | None = None
        model: Any = None  # the fine-tuned encoder, after stage 1
        if p.semantic_epochs > 0:
            model = copy_encoder(pool.model(p.model, p.max_length))
            keep_len = model.max_seq_length
            if p.semantic_max_length is not None:
                model.max_seq_length = p.semantic_max_length
            pairs = [(p.query_prefix + q.text, tool_texts[j]) for q, rel in zip(train_q, train_r) for j in rel]
            if p.semantic_max_pairs is not None and len(pairs) > p.semantic_max_pairs:
                pick = np.sort(np.random.default_rng(ctx.seed + 1).permutation(len(pairs))[:p.semantic_max_pairs])
                pairs = [pairs[i] for i in pick]
            ctx.log(f"colt: semantic learning on {len(pairs):,} query-tool pairs of {bench.name}, "
                    f"{p.semantic_epochs} epoch(s)")
            semantic = train_semantic(model, pairs, epochs=p.semantic_epochs, batch_size=p.semantic_batch_size,
                                      lr=p.semantic_lr, seed=ctx.seed, device=ctx.device, progress=ctx.progress)
            model.max_seq_length = keep_len

            def encode(texts: list[str], prefix: str) -> np.ndarray:
                return np.asarray(model.encode([prefix + t for t in texts], batch_size=p.batch_size,
                                               convert_to_numpy=True, normalize_embeddings=True,
                                               show_progress_bar=False), dtype=np.float32)
        else:
            def encode(texts: list[str], prefix: str) -> np.ndarray:  # the frozen dense checkpoint, cached
                return pool.encode(p.model, texts, prefix=prefix, normalize=True, batch_size=p.batch_size,
                                   max_length=p.max_length, description="colt: encoding", backend=p.backend)

        q0 = encode([q.text for q in train_q], p.query_prefix)
        t_emb = encode(texts, p.doc_prefix)
        val = ValSet(encode([q.text for q in val_q], p.query_prefix), [np.asarray(r) for r in val_r])
        graph = build_graph([q.id for q in train_q], train_r, tool_ids)
        ctx.log(f"colt: collaborative learning on {bench.name} ({graph.sizes['queries']:,} queries, "
                f"{graph.sizes['scenes']:,} scenes, {graph.sizes['tools']:,} tools), grid {p.grid()}, "
                f"validation on {source} ({len(val_q):,} queries)")
        sweep, runs = [], []
        for layers, lam in p.grid():
            res = train_collaborative(graph, q0, t_emb, val, p.collab(layers, lam), seed=ctx.seed, device=ctx.device,
                                      log=ctx.log)
            runs.append(res)
            sweep.append({"layers": layers, "c_lambda": lam, "best_epoch": res["best_epoch"],
                          "epochs_run": res["epochs_run"], "val": res["best"], "wall_s": res["wall_s"]})
            if ctx.ledger is not None:
                ctx.ledger.count("colt.epochs", res["epochs_run"])
        best = max(range(len(runs)), key=lambda i: (runs[i]["best"]["Comp@5"], -i))
        card = {
            "format": CARD_FORMAT, "params": spec_params(p), "seed": ctx.seed, "base_model": p.model,
            "base_fingerprint": model_fingerprint(p.model), "train": {"benchmark": bench.name, "version": bench.version},
            "validation": {"source": source, "benchmark": ctx.validation.name if ctx.validation else bench.name,
                           "queries": len(val_q), "epoch0": runs[best]["history"][0]},
            "chosen": {"layers": sweep[best]["layers"], "c_lambda": sweep[best]["c_lambda"],
                       "best_epoch": sweep[best]["best_epoch"], "val": sweep[best]["val"]},
            "sweep": sweep, "history": runs[best]["history"], "graph": graph.sizes, "semantic": semantic,
            "tool_ids": list(tool_ids), "tool_digests": [text_digest(t) for t in tool_texts],
            "training_data": declared_training_data(bench, train_q).to_dict(),
            "wall_s": round(time.perf_counter() - t0, 3), "device": ctx.device, "versions": environment(ctx.device),
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        with replacing_folder(path) as tmp:
            if model is not None:
                model.save(str(tmp / "encoder"), create_model_card=False)
            np.save(tmp / "tools.npy", runs[best]["tools"], allow_pickle=False)
            (tmp / CARD).write_text(json.dumps(card, indent=1, sort_keys=True), encoding="utf-8")
        ctx.log(f"colt: chose layers {sweep[best]['layers']}, c_lambda {sweep[best]['c_lambda']:g} (validation Comp@5 "
                f"{sweep[best]['val']['Comp@5']:.4f}); written to {path} ({card['wall_s']:.0f} s)")
        return card
