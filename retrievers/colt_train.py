"""COLT's two training stages (Qu et al., CIKM 2024; read from the authors' code,
``quchangle1/COLT``: ``train_sbert.py``, ``train.py``, ``utility.py``, ``models/COLT.py``,
``config.yaml``), used by :mod:`retrievers.colt`.

Stage 1 — semantic learning (``train_semantic``)
    The bi-encoder (one shared model for queries and tools) is fine-tuned on the training
    (query, relevant tool) pairs — one pair per relevant tool — with sentence-transformers'
    ``MultipleNegativesRankingLoss`` (in-batch negatives, scale 20), AdamW at 2e-5 (weight decay
    0.01), linear warm-up over the first 10 % of the steps, batch 16: the authors' BEIR
    ``TrainRetriever`` script. Batches never hold the same query or tool text twice (a repeated
    tool would be its own in-batch negative).

Stage 2 — collaborative learning (``train_collaborative``)
    Nodes: the training queries, the *scenes* (a scene is the set of tools a training query
    needs; queries with the same set share one) and the tools (the corpus). Three bipartite
    relations: query–tool ``R_qt``, query–scene ``R_qs``, scene–tool ``R_st``. Each node starts
    from the stage-1 encoder's embedding (queries and tools are trainable free embeddings; a
    scene starts as the mean of its tools, see below).

    *Propagation* (LightGCN style, ``propagate``) over a bipartite view with adjacency
    ``A = [[0, R], [Rᵀ, 0]]``, normalised ``Â = D_r^{-1/2} A D_c^{-1/2}`` (row and column sums;
    1e-8 added to each square root, as the authors do)::

        E = X₀ + Σ_{l=1..L} normalize_rows(Â^l X₀)

    (the authors divide the l-th iterate by l+1 before normalising it, which the row
    normalisation cancels). The *tool view* propagates queries and tools over ``R_qt``; the
    *scene view* propagates queries and scenes over ``R_qs``. Scene embeddings in the tool view
    are the mean of their tools' tool-view embeddings (``R_st`` row-normalised).

    *Loss* per training query q with scene s: a list of ``neg_num`` (10) tools — s's tools
    followed by tools drawn uniformly among those q does not need — scored
    ``cos(q_TV, t_TV) + cos(q_SV, t_TV)``, softmax over the list, and a binary cross-entropy
    against the label vector normalised to sum 1 (the authors' list-wise multi-label loss); plus
    the dual-view contrastive loss: InfoNCE (temperature ``c_temp``, in-batch negatives) between
    a query's tool-view and scene-view embeddings, and likewise between a scene's two views,
    averaged. Total ``multi_label + c_lambda · contrastive``; Adam at 1e-3 with L2 weight 1e-7;
    batch 2048; edge dropout 0.2 on each of the three relations, redrawn every epoch (the
    authors' "ED" augmentation: every stored entry of the block adjacency is dropped
    independently, so the two directions of an edge can differ).

    Validation after each epoch: the validation queries' encoder embeddings against the tools'
    tool-view embeddings over the full training graph. The kept epoch is the authors' rule: the
    validation R@3 *and* Comp@3 both beat the best so far; training stops 20 epochs after the
    last kept one, or after ``epochs``.

Inference (the authors' ``propagate(test=True)`` / ``evaluate``): a query not in the training
graph has no edge, so both its views are its encoder embedding and its score for a tool is
``2·cos(q, t_TV)`` — inner-product scoring of the stage-1 query embedding against the tool's
tool-view embedding over the unperturbed training graph. Those tool embeddings are what the
artifact stores.

A scene's starting embedding: the authors compute ``scenes_feature = mean of its tools`` once,
from the tool parameters at initialisation, and keep that tensor (and its autograd graph) for
the whole run: its value never changes, while gradients still reach the tools through the
mean. ``ColtModel`` reproduces this with a straight-through term.
"""

from __future__ import annotations

import copy
import random
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn.functional as F
from torch import nn

from .fista import _cpu_threads, as_tensor
from .train_step import MnrlSteps, no_duplicate_batches

SMALL_GRAPH = 1 << 22  # nodes × dim below which stage 2 runs on one CPU thread

# ---------------------------------------------------------------------------------------------
# graph


@dataclass
class ColtGraph:
    """The training graph: queries (rows of ``qt``/``qs``), scenes and tools (columns of ``qt``)."""

    query_ids: list[str]
    tool_ids: list[str]
    scenes: list[tuple[int, ...]]  # tool columns of each scene
    query_scene: np.ndarray  # scene of each query
    qt: sp.csr_matrix = field(repr=False)
    qs: sp.csr_matrix = field(repr=False)
    st: sp.csr_matrix = field(repr=False)

    @property
    def sizes(self) -> dict[str, int]:
        return {"queries": len(self.query_ids), "scenes": len(self.scenes), "tools": len(self.tool_ids),
                "query_tool_edges": int(self.qt.nnz)}


def build_graph(query_ids: Sequence[str], relevant: Sequence[Sequence[int]], tool_ids: Sequence[str]) -> ColtGraph:
    """``relevant[i]``: the tool columns query i needs (non-empty). Scenes are the distinct sets,
    numbered in order of first appearance."""
    scene_of: dict[tuple[int, ...], int] = {}
    qs_col = np.empty(len(query_ids), dtype=np.int64)
    rows, cols = [], []
    for i, rel in enumerate(relevant):
        key = tuple(sorted(set(int(j) for j in rel)))
        if not key:
            raise ValueError(f"query {query_ids[i]!r} needs no tool")
        qs_col[i] = scene_of.setdefault(key, len(scene_of))
        rows += [i] * len(key)
        cols += list(key)
    nq, nt, scenes = len(query_ids), len(tool_ids), list(scene_of)
    ones = np.ones(len(rows), dtype=np.float32)
    qt = sp.csr_matrix((ones, (rows, cols)), shape=(nq, nt))
    qs = sp.csr_matrix((np.ones(nq, dtype=np.float32), (np.arange(nq), qs_col)), shape=(nq, len(scenes)))
    s_rows = [s for s, key in enumerate(scenes) for _ in key]
    s_cols = [j for key in scenes for j in key]
    st = sp.csr_matrix((np.ones(len(s_rows), dtype=np.float32), (s_rows, s_cols)), shape=(len(scenes), nt))
    return ColtGraph(list(query_ids), list(tool_ids), scenes, qs_col, qt, qs, st)


def bipartite(R: sp.spmatrix) -> sp.csr_matrix:
    """``[[0, R], [Rᵀ, 0]]``."""
    n, m = R.shape
    return sp.bmat([[sp.csr_matrix((n, n)), R], [R.T, sp.csr_matrix((m, m))]]).tocsr()


def edge_dropout(M: sp.spmatrix, ratio: float, rng: np.random.Generator) -> sp.csr_matrix:
    """Each stored entry zeroed with probability ``ratio`` (the structure is kept)."""
    coo = M.tocoo()
    if ratio <= 0:
        return coo.tocsr()
    keep = (rng.random(len(coo.data)) >= ratio).astype(coo.data.dtype)
    return sp.csr_matrix((coo.data * keep, (coo.row, coo.col)), shape=coo.shape)


def laplace(M: sp.spmatrix) -> sp.csr_matrix:
    """``D_r^{-1/2} M D_c^{-1/2}`` with row sums D_r and column sums D_c (+1e-8 on each root)."""
    r = 1.0 / (np.sqrt(np.asarray(M.sum(axis=1)).ravel()) + 1e-8)
    c = 1.0 / (np.sqrt(np.asarray(M.sum(axis=0)).ravel()) + 1e-8)
    return (sp.diags(r) @ M @ sp.diags(c)).tocsr()


def row_mean(M: sp.spmatrix) -> sp.csr_matrix:
    """Rows divided by their sums (+1e-8): the mean over a scene's tools."""
    s = np.asarray(M.sum(axis=1)).ravel() + 1e-8
    return (sp.diags(1.0 / s) @ M).tocsr()


def to_torch(M: sp.spmatrix, device: torch.device | str = "cpu") -> torch.Tensor:
    """A torch sparse CSR tensor (float32) of ``M`` (CSR multiplies about twice as fast as COO on CPU)."""
    csr = sp.csr_matrix(M)
    csr.sort_indices()
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Sparse CSR tensor support is in beta")
        return torch.sparse_csr_tensor(torch.as_tensor(csr.indptr.astype(np.int64)),
                                       torch.as_tensor(csr.indices.astype(np.int64)),
                                       torch.as_tensor(csr.data.astype(np.float32)), csr.shape, device=device,
                                       check_invariants=False)


def propagate(G: torch.Tensor, A: torch.Tensor, B: torch.Tensor, layers: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``E = X₀ + Σ_{l=1..layers} normalize_rows(Gˡ X₀)`` with ``X₀ = [A; B]`` and G the normalised
    bipartite adjacency (sparse); returns E split back into A's and B's rows."""
    x = torch.cat([A, B], 0)
    out = x
    for _ in range(layers):
        x = torch.sparse.mm(G, x)
        out = out + F.normalize(x, p=2, dim=1)
    return out[:A.shape[0]], out[A.shape[0]:]


# ---------------------------------------------------------------------------------------------
# model and losses


def multi_label_loss(pred_logits: torch.Tensor, label: torch.Tensor) -> torch.Tensor:
    """The authors' list-wise loss: softmax over each row's candidate list, binary cross-entropy
    against the row's labels normalised to sum 1, averaged over all entries."""
    pred = torch.softmax(pred_logits, dim=1)
    target = label / label.sum(dim=1, keepdim=True)
    return -(target * torch.log(pred) + (1 - target) * torch.log(1 - pred)).mean()


def info_nce(a: torch.Tensor, b: torch.Tensor, temp: float) -> torch.Tensor:
    """InfoNCE between matching rows of ``a`` and ``b`` (cosine / temp; the other rows of ``b``
    are the negatives)."""
    a, b = F.normalize(a, dim=1), F.normalize(b, dim=1)
    logits = a @ b.T / temp
    return F.cross_entropy(logits, torch.arange(len(a), device=a.device))


class ColtModel(nn.Module):
    """Free query and tool embeddings over the training graph (the authors' ``COLT`` module)."""

    def __init__(self, graph: ColtGraph, queries0: torch.Tensor, tools0: torch.Tensor, layers: int,
                 c_temp: float):
        super().__init__()
        self.graph, self.layers, self.c_temp = graph, int(layers), float(c_temp)
        self.queries = nn.Parameter(queries0.detach().clone())
        self.tools = nn.Parameter(tools0.detach().clone())
        self.agg_ori = to_torch(row_mean(graph.st), tools0.device)
        self.register_buffer("scenes0", torch.sparse.mm(self.agg_ori, tools0.detach()))
        self.tl_ori = to_torch(laplace(bipartite(graph.qt)), tools0.device)
        self.sl_ori = to_torch(laplace(bipartite(graph.qs)), tools0.device)
        self.tl, self.sl, self.agg = self.tl_ori, self.sl_ori, self.agg_ori

    def drop_edges(self, ratio: float, rng: np.random.Generator) -> None:
        """Fresh edge-dropped views for training (the authors' "ED" augmentation)."""
        dev = self.tools.device
        g = self.graph
        self.tl = to_torch(laplace(edge_dropout(bipartite(g.qt), ratio, rng)), dev)
        self.sl = to_torch(laplace(edge_dropout(bipartite(g.qs), ratio, rng)), dev)
        self.agg = to_torch(row_mean(edge_dropout(g.st, ratio, rng)), dev)

    def scene_start(self) -> torch.Tensor:
        """The scenes' starting embeddings: the value of the mean of the *initial* tools, with the
        gradient of the mean of the current tools (see the module docstring)."""
        live = torch.sparse.mm(self.agg_ori, self.tools)
        return live - (live.detach() - self.scenes0)

    def views(self, test: bool = False) -> dict[str, torch.Tensor]:
        tl, sl, agg = (self.tl_ori, self.sl_ori, self.agg_ori) if test else (self.tl, self.sl, self.agg)
        tq, tt = propagate(tl, self.queries, self.tools, self.layers)
        sq, ss = propagate(sl, self.queries, self.scene_start(), self.layers)
        return {"q_tool": tq, "tools": tt, "s_tool": torch.sparse.mm(agg, tt), "q_scene": sq, "s_scene": ss}

    def losses(self, q_idx: torch.Tensor, cand: torch.Tensor, label: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(multi-label loss, contrastive loss) of a batch: query rows ``q_idx`` (B), candidate
        tool columns ``cand`` (B × W) and their 0/1 labels."""
        v = self.views()
        t = F.normalize(v["tools"], dim=1)
        qt = F.normalize(v["q_tool"][q_idx], dim=1)
        qs = F.normalize(v["q_scene"][q_idx], dim=1)
        # cos(q_TV, t) + cos(q_SV, t) against every tool, then each row's candidates
        logits = torch.gather(qt @ t.T + qs @ t.T, 1, cand)
        ml = multi_label_loss(logits, label)
        s_idx = torch.as_tensor(self.graph.query_scene, device=q_idx.device)[q_idx]
        cl = (info_nce(v["q_tool"][q_idx], v["q_scene"][q_idx], self.c_temp)
              + info_nce(v["s_tool"][s_idx], v["s_scene"][s_idx], self.c_temp)) / 2
        return ml, cl

    @torch.no_grad()
    def tool_embeddings(self) -> torch.Tensor:
        """Unit-norm tool-view tool embeddings over the full training graph (inference)."""
        return F.normalize(self.views(test=True)["tools"], dim=1)


def candidate_lists(graph: ColtGraph, q_idx: np.ndarray, width: int, rng: np.random.Generator
                    ) -> tuple[np.ndarray, np.ndarray]:
    """Per query: its scene's tools, then tools it does not need drawn uniformly without
    repetition, ``width`` in all (the authors' ``neg_num``). Returns (B × width) columns and labels."""
    nt = len(graph.tool_ids)
    B = len(q_idx)
    pos = [graph.scenes[graph.query_scene[i]] for i in q_idx]
    noise = rng.random((B, nt))
    for r, p in enumerate(pos):
        noise[r, list(p)] = 2.0  # never drawn as a negative
    negs = np.argsort(noise, axis=1, kind="stable")[:, :width]
    cand = np.empty((B, width), dtype=np.int64)
    label = np.zeros((B, width), dtype=np.float32)
    for r, p in enumerate(pos):
        k = len(p)
        cand[r, :k] = p
        cand[r, k:] = negs[r, :width - k]
        label[r, :k] = 1.0
    return cand, label


# ---------------------------------------------------------------------------------------------
# validation


@dataclass
class ValSet:
    """Validation queries' encoder embeddings (unit norm), their relevant tool columns."""

    embeddings: np.ndarray
    relevant: list[np.ndarray]

    def scores(self, tools: np.ndarray) -> dict[str, float]:
        """Mean R@3, R@5, Comp@3, Comp@5 of inner-product rankings against ``tools`` (unit rows)."""
        s = self.embeddings @ tools.T
        rank = np.argsort(np.argsort(-s, axis=1, kind="stable"), axis=1, kind="stable")  # 0 = best
        out: dict[str, float] = {}
        for k in (3, 5):
            hits = np.array([(rank[i, rel] < k).sum() for i, rel in enumerate(self.relevant)], dtype=np.float64)
            sizes = np.array([len(rel) for rel in self.relevant], dtype=np.float64)
            out[f"R@{k}"] = float(np.mean(hits / sizes)) if len(sizes) else 0.0
            out[f"Comp@{k}"] = float(np.mean(hits == sizes)) if len(sizes) else 0.0
        return {k: out[k] for k in ("R@3", "R@5", "Comp@3", "Comp@5")}


# ---------------------------------------------------------------------------------------------
# stage 2


@dataclass(frozen=True)
class CollabConfig:
    layers: int = 1
    c_lambda: float = 0.04
    c_temp: float = 0.1
    lr: float = 1e-3
    l2_reg: float = 1e-7
    batch_size: int = 2048
    neg_num: int = 10
    edge_dropout: float = 0.2
    epochs: int = 200
    patience: int = 20


def train_collaborative(graph: ColtGraph, queries0: np.ndarray, tools0: np.ndarray, val: ValSet,
                        cfg: CollabConfig, seed: int, device: str = "cpu",
                        log: Callable[[str], None] = lambda m: None) -> dict[str, Any]:
    """One stage-2 run. Returns ``{"tools": kept tool embeddings (numpy, unit rows), "best_epoch",
    "best": validation scores at that epoch, "history": per epoch, "epochs_run", "wall_s"}``."""
    t0 = time.perf_counter()
    dev = torch.device(device)
    nodes = len(graph.query_ids) + len(graph.tool_ids) + len(graph.scenes)
    # a small graph is many tiny tensor operations: one CPU thread runs them far faster
    threads = 1 if nodes * queries0.shape[1] < SMALL_GRAPH else torch.get_num_threads()
    with _cpu_threads(dev, threads):
        return _train_collaborative(graph, queries0, tools0, val, cfg, seed, dev, log, t0)


def _train_collaborative(graph: ColtGraph, queries0: np.ndarray, tools0: np.ndarray, val: ValSet,
                         cfg: CollabConfig, seed: int, dev: torch.device, log: Callable[[str], None],
                         t0: float) -> dict[str, Any]:
    torch.manual_seed(seed)
    rng = np.random.default_rng(seed)
    model = ColtModel(graph, as_tensor(queries0, dev), as_tensor(tools0, dev), cfg.layers, cfg.c_temp)
    opt = torch.optim.Adam(model.parameters(), lr=cfg.lr, weight_decay=cfg.l2_reg)
    nq = len(graph.query_ids)
    width = max(cfg.neg_num, max(len(s) for s in graph.scenes) + 1)
    bs = min(cfg.batch_size, nq)
    history = [{"epoch": 0, **val.scores(model.tool_embeddings().cpu().numpy())}]
    best = {"R@3": -1.0, "Comp@3": -1.0}
    best_epoch, best_tools = 0, None
    for epoch in range(1, cfg.epochs + 1):
        model.train()
        model.drop_edges(cfg.edge_dropout, rng)
        perm = rng.permutation(nq)
        n_batches = nq // bs  # the authors drop the last incomplete batch
        tot_ml = tot_cl = 0.0
        for b in range(n_batches):
            q = perm[b * bs:(b + 1) * bs]
            cand, label = candidate_lists(graph, q, width, rng)
            ml, cl = model.losses(torch.as_tensor(q, device=dev), torch.as_tensor(cand, device=dev),
                                  torch.as_tensor(label, device=dev))
            loss = ml + cfg.c_lambda * cl
            opt.zero_grad()
            loss.backward()
            opt.step()
            tot_ml += float(ml.detach())
            tot_cl += float(cl.detach())
        model.eval()
        tools = model.tool_embeddings().cpu().numpy()
        sc = val.scores(tools)
        history.append({"epoch": epoch, "multi_label_loss": tot_ml / n_batches, "contrastive_loss": tot_cl / n_batches,
                        **sc})
        if sc["R@3"] > best["R@3"] and sc["Comp@3"] > best["Comp@3"]:
            best, best_epoch, best_tools = sc, epoch, tools.copy()
        elif epoch - best_epoch > cfg.patience:
            break
    if best_tools is None:  # pragma: no cover - the first epoch always passes the rule
        best_tools = model.tool_embeddings().cpu().numpy()
    wall = time.perf_counter() - t0
    log(f"colt: layers {cfg.layers}, c_lambda {cfg.c_lambda:g}: kept epoch {best_epoch} of {len(history) - 1} "
        f"(validation Comp@5 {best.get('Comp@5', 0):.4f}), {wall:.0f} s")
    return {"tools": np.ascontiguousarray(best_tools, dtype=np.float32), "best_epoch": best_epoch, "best": best,
            "history": history, "epochs_run": len(history) - 1, "wall_s": round(wall, 3)}


# ---------------------------------------------------------------------------------------------
# stage 1


def pair_batches(pairs: Sequence[tuple[str, str]], batch_size: int, rng: random.Random) -> list[list[int]]:
    """Shuffled batches in which no query text and no tool text appears twice (a pair that
    clashes with the current batch waits for a later one:
    :func:`retrievers.train_step.no_duplicate_batches`)."""
    out = no_duplicate_batches(pairs, batch_size, rng)
    return [b for b in out if len(b) > 1]  # a lone pair has no in-batch negative


def train_semantic(model: Any, pairs: Sequence[tuple[str, str]], *, epochs: int, batch_size: int, lr: float,
                   seed: int, device: str = "cpu", warmup: float = 0.1, scale: float = 20.0,
                   progress: Any = None) -> dict[str, Any]:
    """Stage 1: ``epochs`` epochs of MNRL over (query, tool) text pairs (the texts already carry
    their prefixes), updating ``model`` (a SentenceTransformer) in place
    (:class:`retrievers.train_step.MnrlSteps`, weight decay 0.01, in-batch negatives only)."""
    from harness.protocols import NullProgress

    rng = random.Random(seed)
    torch.manual_seed(seed)
    plans = [pair_batches(pairs, batch_size, rng) for _ in range(epochs)]
    steps = sum(len(p) for p in plans)
    mnrl = MnrlSteps(model, steps, lr=lr, weight_decay=0.01, warmup=warmup, scale=scale, device=device)
    model.train()
    curve: list[float] = []
    t0 = time.perf_counter()
    with (progress or NullProgress()).track(steps, "COLT semantic learning") as advance:
        for plan in plans:
            total, n = 0.0, 0
            for b in plan:
                total += mnrl.step(([pairs[i][0] for i in b], [pairs[i][1] for i in b]))
                n += 1
                advance(1)
            curve.append(round(total / max(n, 1), 5))
    model.eval()
    return {"pairs": len(pairs), "epochs": epochs, "steps": steps, "epoch_loss": curve,
            "wall_s": round(time.perf_counter() - t0, 3)}


def copy_encoder(model: Any) -> Any:
    """A trainable copy of a (shared, cached) SentenceTransformer."""
    m = copy.deepcopy(model)
    for prm in m.parameters():
        prm.requires_grad_(True)
    return m
