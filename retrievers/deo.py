"""``deo`` and ``deo-rules``: Direct Embedding Optimization (DEO, arXiv 2603.09185).

1. **Decomposition.** Each query is split into positive sub-queries (expansions that keep the
   query's anchors) and negative sub-queries (the minimal set of explicitly excluded targets and
   close aliases), as JSON ``{"positives": [...], "negatives": [...]}``.
   - ``deo``: by the LLM (``ctx.llm``; temperature 0, JSON mode). A reply that is not such JSON is
     re-asked up to ``max_reasks`` times in the same conversation; after that the documented
     fallback applies — the query alone as the only positive, no negatives. Re-asks and fallbacks
     are counted in the ledger (``deo.reask``, ``deo.fallback``) and kept with the result.
   - ``deo-rules``: by rules on explicit negation/exclusion cues (``retrievers.decompose``) — no
     LLM, zero API cost. This goes beyond the paper.
   Both lists are cleaned the same way (``clean_decomposition``): no empty or duplicate items, the
   query itself never a positive, an item in both lists dropped from the positives, no positives →
   ``[query]`` (docs/methods/deo.md#decomposition).
2. **Optimisation.** The encoder stays frozen; the query embedding ``e`` (initialised at the
   original query embedding ``e_o``) is optimised by Adam (lr 1e-3, 20 steps) on::

       L(e) = λp·mean_i ‖e − p_i‖ − λn·mean_j ‖e − n_j‖ + λo·‖e − e_o‖

   with unsquared L2 norms and ``e`` renormalised to unit length after each step (the authors'
   code; ``squared=True, renormalize=False`` is the paper's Eq. 4). No negatives → the repulsion
   term is 0. Text defaults λp = 1, λn = 1, λo = 0.2. All queries of a batch are optimised together
   in torch (CUDA when the run's device is); the loss is summed over queries, and Adam is
   element-wise, so this equals optimising each query alone.
3. **Search.** Exact inner-product search with the optimised embeddings over the dense index (same
   encoder, prefixes and embedding cache as ``dense``). Sub-queries are embedded as queries.

The DEO paper used gpt-4.1-nano at temperature 0.1; the default here is 0 — ``temperature`` is a
parameter. Its exact prompt is not published; ``DECOMPOSE_PROMPT`` states the published intent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import IO, Any, Sequence

import numpy as np
import torch

from harness.models.resolve import DEFAULT_ENCODER
from harness.models.llm import ChatRequest, LLMClient, extract_json_object
from harness.protocols import RunContext
from harness.registry import register
from harness.types import Benchmark, Query
from . import citations

from .decompose import Decomposition, clean_decomposition, rules_decompose
from .dense import DenseParams, DenseRetriever

DECOMPOSE_SYSTEM = "You rewrite search queries for a retrieval system. You answer with one JSON object only."
DECOMPOSE_PROMPT = """Decompose the search query into positive and negative sub-queries.

- "positives": 1 to 3 short search queries for what the user wants to find. Each keeps the query's \
main entities and topic, rephrased or expanded. Never repeat the query word for word. Never mention \
what the user excludes.
- "negatives": the things the query explicitly excludes or negates (with close aliases), each a \
short phrase, as few as needed. If the query excludes nothing, return [].
- Nothing may appear in both lists.

Example
Query: vegetarian recipes without mushrooms
{{"positives": ["vegetarian recipes", "meatless dishes and their ingredients"], "negatives": ["mushrooms", "fungi"]}}

Query: {query}
Answer with JSON only: {{"positives": [...], "negatives": [...]}}"""
# Bounds the reply of a grammar-constrained local model (llama.cpp), which otherwise can run on
# until max_tokens and cut its JSON short.
DECOMPOSE_SCHEMA = json.dumps({
    "type": "object",
    "properties": {
        "positives": {"type": "array", "items": {"type": "string", "maxLength": 100}, "minItems": 1, "maxItems": 3},
        "negatives": {"type": "array", "items": {"type": "string", "maxLength": 60}, "maxItems": 4},
    },
    "required": ["positives", "negatives"],
}, sort_keys=True)
REASK = ('That was not a valid answer. Reply with exactly one JSON object of the form '
         '{"positives": ["..."], "negatives": ["..."]} and nothing else.')


@dataclass(frozen=True)
class DeoParams(DenseParams):
    """Dense fields (``model``, prefixes, …) plus the decomposition and optimisation settings."""

    model: str = DEFAULT_ENCODER
    decomposer: str = "llm"  # "llm" | "rules"
    lambda_p: float = 1.0
    lambda_n: float = 1.0
    lambda_o: float = 0.2
    lr: float = 1e-3
    steps: int = 20
    squared: bool = False  # the paper's Eq. 4 squares the norms; the authors' code does not
    renormalize: bool = True  # unit length after each step (the code); Eq. 4 does not
    temperature: float = 0.0
    max_tokens: int = 256
    json_mode: bool = True
    # "auto": a JSON schema (bounded lists and strings) for the embedded llama.cpp server, plain JSON
    # mode elsewhere; "on" always sends it (llama.cpp-based servers); "off" never
    json_schema: str = "auto"
    max_reasks: int = 2
    prompt: str = ""  # custom decomposition prompt with {query}; empty = DECOMPOSE_PROMPT

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.decomposer not in ("llm", "rules"):
            raise ValueError(f"deo: decomposer must be 'llm' or 'rules', not {self.decomposer!r}")
        if self.steps < 0 or self.lr <= 0 or self.max_reasks < 0:
            raise ValueError("deo: steps ≥ 0, lr > 0, max_reasks ≥ 0")
        if min(self.lambda_p, self.lambda_n, self.lambda_o) < 0:
            raise ValueError("deo: λp, λn, λo must be ≥ 0")
        if self.prompt and "{query}" not in self.prompt:
            raise ValueError("deo: a custom prompt needs a {query} placeholder")
        if self.json_schema not in ("auto", "on", "off"):
            raise ValueError("deo: json_schema must be auto, on or off")


@dataclass(frozen=True)
class DeoRulesParams(DeoParams):
    decomposer: str = "rules"


def parse_decomposition(query: str, text: str) -> Decomposition | None:
    """A cleaned decomposition from an LLM reply, or None when the reply is not the JSON asked for
    (no object, no list of positives, or non-string items)."""
    obj = extract_json_object(text)
    if obj is None:
        return None
    keys = {k.lower().strip(): v for k, v in obj.items() if isinstance(k, str)}
    pos = next((keys[k] for k in ("positives", "positive", "positive_queries") if k in keys), None)
    neg = next((keys[k] for k in ("negatives", "negative", "negative_queries") if k in keys), [])
    if isinstance(neg, str):
        neg = [neg]
    if not isinstance(pos, list) or not isinstance(neg, list):
        return None
    # small models nest lists (["a", ["b", "c"]]): one level of nesting is flattened
    pos, neg = ([y for x in v for y in (x if isinstance(x, list) else [x])] for v in (pos, neg))
    if not all(isinstance(x, str) for x in pos + neg):
        return None
    return clean_decomposition(query, pos, neg, source="llm")


def _dist(a: torch.Tensor, b: torch.Tensor, squared: bool) -> torch.Tensor:
    sq = ((a - b) ** 2).sum(-1)
    return sq if squared else torch.sqrt(sq + 1e-12)


def deo_loss(E: torch.Tensor, E0: torch.Tensor, P: torch.Tensor, pmask: torch.Tensor, N: torch.Tensor,
             nmask: torch.Tensor, lambda_p: float, lambda_n: float, lambda_o: float,
             squared: bool = False) -> torch.Tensor:
    """Per-query DEO loss (B,). ``P``: B × Pm × d with boolean ``pmask`` (B × Pm); same for N. A
    query with no positives has no attraction term, one with no negatives no repulsion term."""
    e = E.unsqueeze(1)
    dp = _dist(e, P, squared) * pmask
    dn = _dist(e, N, squared) * nmask
    attract = dp.sum(1) / pmask.sum(1).clamp(min=1)
    repel = dn.sum(1) / nmask.sum(1).clamp(min=1)
    return lambda_p * attract - lambda_n * repel + lambda_o * _dist(E, E0, squared)


def optimise_embeddings(e0: np.ndarray, positives: Sequence[np.ndarray], negatives: Sequence[np.ndarray], *,
                        lambda_p: float = 1.0, lambda_n: float = 1.0, lambda_o: float = 0.2, lr: float = 1e-3,
                        steps: int = 20, squared: bool = False, renormalize: bool = True,
                        device: str = "cpu") -> tuple[np.ndarray, list[np.ndarray]]:
    """DEO's optimisation for a batch: ``e0`` (B × d), ``positives[i]`` / ``negatives[i]`` (k × d,
    k may be 0). Returns the optimised embeddings and the per-query loss before each step and
    after the last (``steps + 1`` arrays of shape (B,))."""
    B, d = e0.shape
    dev = torch.device(device)

    def pad(groups: Sequence[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
        m = max([len(g) for g in groups] + [1])
        T = torch.zeros(B, m, d, dtype=torch.float32, device=dev)
        M = torch.zeros(B, m, dtype=torch.float32, device=dev)
        for i, g in enumerate(groups):
            if len(g):
                T[i, :len(g)] = torch.as_tensor(np.asarray(g, dtype=np.float32), device=dev)
                M[i, :len(g)] = 1.0
        return T, M

    P, pm = pad(positives)
    N, nm = pad(negatives)
    E0 = torch.tensor(np.array(e0, dtype=np.float32), device=dev)
    E = torch.nn.Parameter(E0.clone())
    opt = torch.optim.Adam([E], lr=lr)
    history: list[np.ndarray] = []
    args = (E0, P, pm, N, nm, lambda_p, lambda_n, lambda_o, squared)
    for _ in range(steps):
        opt.zero_grad()
        per_query = deo_loss(E, *args)
        history.append(per_query.detach().cpu().numpy())
        per_query.sum().backward()
        opt.step()
        if renormalize:
            with torch.no_grad():
                E.copy_(torch.nn.functional.normalize(E, dim=-1))
    with torch.no_grad():
        history.append(deo_loss(E, *args).cpu().numpy())
    return E.detach().cpu().numpy().astype(np.float32), history


@register("deo", params=DeoParams, family="embedding optimisation", citation=citations.DEO, uses_llm=lambda p: p.decomposer == "llm",
          description="The query embedding optimised towards LLM-written positive and away from negative sub-queries",
          paper="Lee, Park, Hwang & Jang 2026, arXiv:2603.09185")
class DEO(DenseRetriever):
    """DEO with LLM decomposition (``decomposer="rules"`` switches to the rule-based splitter)."""

    def __init__(self, params: DeoParams | None = None):
        super().__init__(params or DeoParams())
        self.last_decompositions: dict[str, Decomposition] = {}
        self.last_loss: list[np.ndarray] = []

    # -- decomposition --

    def decompose(self, queries: Sequence[Query], ctx: RunContext) -> list[Decomposition]:
        p: DeoParams = self.params
        if p.decomposer == "rules":
            return [rules_decompose(q.text) for q in queries]
        llm: LLMClient = ctx.require_llm("deo")
        template = p.prompt or DECOMPOSE_PROMPT
        use_schema = p.json_schema == "on" or (p.json_schema == "auto" and bool(getattr(llm, "embedded", False)))
        schema = DECOMPOSE_SCHEMA if (p.json_mode and use_schema) else ""
        convs: list[list[dict[str, str]]] = [
            [{"role": "system", "content": DECOMPOSE_SYSTEM}, {"role": "user", "content": template.format(query=q.text)}]
            for q in queries]
        out: list[Decomposition | None] = [None] * len(queries)
        pending = list(range(len(queries)))
        with ctx.progress.track(len(queries), "deo: decomposing queries") as advance:
            for attempt in range(p.max_reasks + 1):
                if not pending:
                    break
                reqs = [ChatRequest.of(convs[i], temperature=p.temperature, max_tokens=p.max_tokens,
                                       json_mode=p.json_mode, json_schema=schema, purpose="deo.decompose" if attempt == 0 else "deo.reask")
                        for i in pending]
                replies = llm.chat_many(reqs, ctx.ledger)
                still: list[int] = []
                for i, reply in zip(pending, replies):
                    text = reply.texts[0] if reply.texts else ""
                    parsed = parse_decomposition(queries[i].text, text)
                    if parsed is not None:
                        out[i] = parsed
                        advance(1)
                    else:
                        still.append(i)
                        convs[i] = convs[i] + [{"role": "assistant", "content": text}, {"role": "user", "content": REASK}]
                if still and attempt < p.max_reasks and ctx.ledger is not None:
                    ctx.ledger.count("deo.reask", len(still))
                pending = still
            for i in pending:  # the documented fallback: the query as the only positive
                out[i] = clean_decomposition(queries[i].text, [], [], source="fallback")
                advance(1)
        if ctx.ledger is not None:
            ctx.ledger.count("deo.fallback", len(pending))
            ctx.ledger.count("deo.with_negatives", sum(1 for d in out if d is not None and d.negatives))
        return out  # type: ignore[return-value]

    # -- optimisation --

    def encode_queries(self, queries: Sequence[Query], ctx: RunContext) -> np.ndarray:
        p: DeoParams = self.params
        e0 = super().encode_queries(queries, ctx)
        decs = self.decompose(queries, ctx)
        self.last_decompositions = {q.id: d for q, d in zip(queries, decs)}
        texts = sorted({t for d in decs for t in (*d.positives, *d.negatives)})
        emb: dict[str, np.ndarray] = {}
        if texts:
            vecs = self._pool(ctx).encode(p.model, texts, prefix=p.query_prefix, normalize=p.normalize,
                                          batch_size=p.batch_size, max_length=p.max_length,
                                          description="encoding sub-queries", backend=p.backend)
            emb = dict(zip(texts, np.asarray(vecs, dtype=np.float32)))
        dim = e0.shape[1]

        def stack(items: Sequence[str]) -> np.ndarray:
            return np.stack([emb[t] for t in items]) if items else np.zeros((0, dim), np.float32)

        opt, self.last_loss = optimise_embeddings(
            e0, [stack(d.positives) for d in decs], [stack(d.negatives) for d in decs], lambda_p=p.lambda_p,
            lambda_n=p.lambda_n, lambda_o=p.lambda_o, lr=p.lr, steps=p.steps, squared=p.squared,
            renormalize=p.renormalize, device=ctx.device)
        return opt

    def decompositions(self) -> list[dict[str, Any]]:
        return [{"query_id": qid, **d.to_dict()} for qid, d in self.last_decompositions.items()]


@register("deo-rules", params=DeoRulesParams, family="embedding optimisation", citation=citations.DEO,
          uses_llm=lambda p: p.decomposer == "llm",
          description="DEO with a rule-based decomposer for explicit negation and exclusion cues: no LLM call",
          paper="Lee, Park, Hwang & Jang 2026, arXiv:2603.09185")
class DEORules(DEO):
    """DEO with the rule-based decomposer: no LLM call, zero API cost."""

    def __init__(self, params: DeoRulesParams | None = None):
        super().__init__(params or DeoRulesParams())


def compare_decomposers(queries: Sequence[Query], ctx: RunContext, params: DeoParams | None = None) -> dict[str, Any]:
    """How often the rule-based decomposer agrees with the LLM's on ``queries`` (the LLM replies come
    from the shared cache when a ``deo`` run already asked them): the rates of
    :func:`retrievers.decompose.agreement_summary` plus per-query rows."""
    from .decompose import agreement, agreement_summary

    p = params or DeoParams()
    llm_decs = DEO(p).decompose(queries, ctx)
    rule_decs = [rules_decompose(q.text) for q in queries]
    rows = [{"query_id": q.id, "query": q.text, "llm": a.to_dict(), "rules": b.to_dict(), **agreement(b, a)}
            for q, a, b in zip(queries, llm_decs, rule_decs)]
    summary = agreement_summary(zip(rule_decs, llm_decs))
    summary["llm_fallbacks"] = sum(d.source == "fallback" for d in llm_decs)
    return {"summary": summary, "queries": rows}


def decomposer_agreement(benchmarks: Sequence[Benchmark], llm: LLMClient, params: DeoParams | None = None,
                         rows: IO[str] | None = None) -> dict[str, Any]:
    """``beyondsim deo agreement``: per benchmark, the agreement of ``deo-rules`` with the LLM
    decomposition of its evaluated queries (:func:`compare_decomposers`, through the shared LLM
    cache) and the LLM calls that took; each query's row goes to ``rows`` as a JSON line."""
    from harness.core.ledger import Ledger, call_totals

    out: dict[str, Any] = {}
    for bench in benchmarks:
        ledger = Ledger()
        ctx = RunContext(llm=llm, ledger=ledger, benchmark_name=bench.name)
        res = compare_decomposers(bench.eval_queries, ctx, params)
        res["summary"]["llm"] = call_totals([vars(c) for c in ledger.llm_calls])
        out[bench.name] = res["summary"]
        if rows is not None:
            for r in res["queries"]:
                rows.write(json.dumps({"benchmark": bench.name, **r}, ensure_ascii=False) + "\n")
    return out
