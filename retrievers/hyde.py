"""``hyde``: Hypothetical Document Embeddings (Gao et al., ACL 2023).

For each query the LLM writes ``n`` passages that would answer it (temperature 0.7, top_p 1,
max_tokens 512, the paper's settings); the search vector is the mean of the query embedding and the
``n`` passage embeddings (``n + 1`` equal weights, as in the authors' code), and retrieval is exact
inner-product search over the dense index (the same encoder, prefixes and embedding cache as
``dense``). Generated passages are embedded as documents (``doc_prefix``), the query with
``query_prefix``.

Prompts are the paper's task-specific instructions (``PROMPTS``). ``task="auto"`` picks one from
the benchmark name (``beir/scifact`` → the SciFact prompt, …) and falls back to the web-search
prompt; a custom ``prompt`` with a ``{query}`` placeholder overrides both. The instruction is sent
as the single user message of a chat request (the paper used a completion model; a chat model is
what every current server offers).

All LLM traffic goes through ``ctx.llm`` (cache, retries, budget, ledger): a rerun is answered from
the cache, so HyDE's rankings are reproduced exactly. Sampling is seeded with the run's seed, so
``--seeds 3`` draws three different sets of passages.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from harness.models.resolve import DEFAULT_ENCODER
from harness.models.llm import ChatRequest, LLMClient
from harness.protocols import RunContext
from harness.registry import register
from harness.types import Query
from . import citations

from .dense import DenseParams, DenseRetriever

# Gao et al. 2023, the authors' promptor (web search and the BEIR / Mr.TyDi task variants).
PROMPTS: dict[str, str] = {
    "web search": "Please write a passage to answer the question.\nQuestion: {query}\nPassage:",
    "scifact": "Please write a scientific paper passage to support/refute the claim.\nClaim: {query}\nPassage:",
    "arguana": "Please write a counter argument for the passage.\nPassage: {query}\nCounter Argument:",
    "trec-covid": "Please write a scientific paper passage to answer the question.\nQuestion: {query}\nPassage:",
    "fiqa": "Please write a financial article passage to answer the question.\nQuestion: {query}\nPassage:",
    "dbpedia-entity": "Please write a passage to answer the question.\nQuestion: {query}\nPassage:",
    "trec-news": "Please write a news passage about the topic.\nTopic: {query}\nPassage:",
}
# benchmark-name fragments → prompt
AUTO_TASK = {"scifact": "scifact", "arguana": "arguana", "trec-covid": "trec-covid", "fiqa": "fiqa",
             "dbpedia": "dbpedia-entity", "trec-news": "trec-news"}


@dataclass(frozen=True)
class HydeParams(DenseParams):
    """Dense fields (``model``, prefixes, …) plus the generation settings."""

    model: str = DEFAULT_ENCODER
    task: str = "auto"  # a key of PROMPTS, or "auto" (from the benchmark name)
    prompt: str = ""  # custom template with {query}; overrides task
    n: int = 8
    temperature: float = 0.7
    max_tokens: int = 512
    top_p: float = 1.0
    include_query: bool = True  # the query embedding is one of the averaged vectors (the paper: yes)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.n < 1 or self.max_tokens < 1:
            raise ValueError("hyde: n ≥ 1 and max_tokens ≥ 1")
        if self.task != "auto" and self.task not in PROMPTS:
            raise ValueError(f"hyde: unknown task {self.task!r}; known: auto, {', '.join(PROMPTS)}")
        if self.prompt and "{query}" not in self.prompt:
            raise ValueError("hyde: a custom prompt needs a {query} placeholder")


def prompt_for(params: HydeParams, benchmark: str) -> str:
    if params.prompt:
        return params.prompt
    if params.task != "auto":
        return PROMPTS[params.task]
    name = benchmark.lower()
    for frag, task in AUTO_TASK.items():
        if frag in name:
            return PROMPTS[task]
    return PROMPTS["web search"]


@register("hyde", params=HydeParams, family="LLM expansion", citation=citations.HYDE, uses_llm=True,
          description="Search by the mean embedding of the query and LLM-written passages that answer it",
          paper="Gao, Ma, Lin & Callan, ACL 2023, arXiv:2212.10496")
class HyDE(DenseRetriever):
    def __init__(self, params: HydeParams | None = None):
        super().__init__(params or HydeParams())
        self.last_passages: dict[str, list[str]] = {}

    def generate(self, queries: Sequence[Query], ctx: RunContext) -> list[list[str]]:
        """The ``n`` hypothetical passages of each query (cached by the LLM client)."""
        p: HydeParams = self.params
        llm: LLMClient = ctx.require_llm("hyde")
        template = prompt_for(p, ctx.benchmark_name)
        reqs = [ChatRequest.of(template.format(query=q.text), n=p.n, temperature=p.temperature,
                               max_tokens=p.max_tokens, top_p=p.top_p, seed=ctx.seed, purpose="hyde.generate")
                for q in queries]
        with ctx.progress.track(len(reqs), "hyde: generating passages") as advance:
            outs = llm.chat_many(reqs, ctx.ledger, on_done=advance)
        return [o.texts for o in outs]

    def encode_queries(self, queries: Sequence[Query], ctx: RunContext) -> np.ndarray:
        p: HydeParams = self.params
        q_emb = super().encode_queries(queries, ctx)
        passages = self.generate(queries, ctx)
        self.last_passages = {q.id: ps for q, ps in zip(queries, passages)}
        flat = [t for ps in passages for t in ps]
        p_emb = self._pool(ctx).encode(p.model, flat, prefix=p.doc_prefix, normalize=p.normalize,
                                       batch_size=p.batch_size, max_length=p.max_length,
                                       description="encoding hypothetical passages",
                                       backend=p.backend) if flat else None
        out = np.empty_like(q_emb)
        row = 0
        for i, ps in enumerate(passages):
            vecs = ([q_emb[i]] if p.include_query else []) + ([p_emb[row:row + len(ps)]] if ps else [])
            row += len(ps)
            stacked = np.vstack(vecs) if vecs else q_emb[i:i + 1]
            out[i] = stacked.mean(axis=0)
        return out
