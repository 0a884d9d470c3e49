"""``nsir``: Neural-Symbolic Information Retrieval (NS-IR; Xu et al., Findings of ACL 2025,
arXiv:2505.22299), a reranker of a dense top-N (default 100).

1. **First stage.** Exact inner-product search with a sentence-transformers encoder (``dense``: the
   same encoder, prefixes and embedding cache); its top ``top_n`` are the candidates.
2. **Translation.** The LLM (``ctx.llm``: cache, ledger, budget) writes each query and each
   candidate document in first-order logic, in the Logic-LM line format the authors used:
   ``Predicates:`` then ``Premises:`` (a document) or ``Conclusion:`` (a query), one
   ``formula ::: text`` per line; the logic form is the formulas of that section joined by spaces
   (:func:`parse_logic`). A reply without the section falls back to its formula-like lines, and a
   reply with none to the text itself (counted in the ledger: ``nsir.logic.*``). A document is
   translated once per text: within a run whatever number of queries retrieve it, and across runs
   by the response cache (the request is the same, so the cache answers it). Those calls carry the
   purpose suffix :data:`harness.cost.audit.PER_DOCUMENT`, so ``beyondsim audit --project`` caps their
   projected number at the corpus size.
3. **Logic alignment.** The token states ``T`` (m × d) of the text and ``F`` (n × d) of its logic
   form (the last layer of the same encoder, special tokens included; ``c`` the unit-length state of
   the first token) are aligned by exact optimal transport (POT's ``ot.emd``) with uniform weights
   and the cost of the authors' code (:func:`cost_matrix`: rescaled cosine similarity × a positional
   prior ``1 − distortion·(j/(n−1) − i/(m−1))²``, min-max scaled, ``1 −``). With the plan ``P``::

       e_align = c ⊙ Σ_ij P_ij (T_i ⊙ F_j)

4. **Connective constraint.** Each logic token gets a sign ``s_j``: −1 for ``¬``, +1 for ``∧ ∨ ⊕ →
   ↔ ∀ ∃``, 0 otherwise; as the authors' code intends it applies to a text token ``i`` only where the
   plan moves no mass (``s_ij = s_j`` if ``P_ij = 0``, else 0; ``sign_mask="pair"``). With
   ``X_ij = T_i + s_ij F_j``::

       a_j = softmax_i(F_j · X_ij),   e_conn = mean_j Σ_i a_ji X_ij

   The released code writes those zeros into a tensor expanded from one row of signs, so a zero
   written for one pair reaches the whole column: a logic token aligned with any text token loses
   its sign for all of them, and since an exact plan gives every logic token some mass, no sign is
   left. ``sign_mask="token"`` reproduces that behaviour (tested against the released tensor code).

5. **Score.** ``(cos(e_align_q, e_align_d) + 1)/2 + (cos(e_conn_q, e_conn_d) + 1)/2`` (0 to 2: twice
   the mean of the two rescaled cosines, the authors' sum); the top ``top_n`` are reranked by it
   (ties keep the dense order) and any deeper dense results follow, below them, in dense order.

On a pool (``beyondsim run nsir --pool bm25@100``) ``nsir`` is a reranker (:meth:`NSIR.rerank`): the
pool's top ``top_n`` candidates take the place of the dense top ``top_n``. The dense first stage is
indexed on first use: ``index`` keeps the corpus's texts, and the first ``search`` encodes the corpus
and builds the dense index inside the ledger's ``index`` phase (offline, as before; the ``search``
phase does not count it), so a run on a pool never encodes the corpus for a first stage it does not use.

Differences from the authors' setting (bge-large-en-v1.5 for both stages, GPT-4o at its default
temperature, precomputed corpus translations) are parameters or documented choices: the encoder
(default the offline MiniLM), the LLM (the run's: the embedded Gemma-3-270M offline, any
OpenAI-compatible server otherwise), temperature 0, our own prompt wording (``prompt_version``),
connective symbols spaced apart (and ASCII forms such as ``->`` or ``~`` mapped to them) before
tokenising so each is a token of its own, and the document's title included in what is translated
(what the encoders index).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from harness.cost.audit import PER_DOCUMENT
from harness.models.resolve import DEFAULT_ENCODER
from harness.models.llm import ChatRequest, LLMClient
from harness.protocols import RunContext
from harness.registry import register
from harness.types import Candidate, Corpus, Query, Run
from . import citations

from .dense import DenseParams, DenseRetriever, distinct, follow_below, offline_phase

# -- prompts ---------------------------------------------------------------------------------------

SYSTEM = ("You translate English into first-order logic. You follow the requested output format "
          "exactly and add nothing else.")
_SYMBOLS_HELP = ("Use these symbols: ∧ (and), ∨ (or), ⊕ (either ... or, not both), ¬ (not), "
                 "→ (implies), ↔ (if and only if), ∀x (for every x), ∃x (there is an x).")
DOCUMENT_PROMPT = f"""Translate the passage into first-order logic.
{_SYMBOLS_HELP}
Write two sections. Under "Predicates:" list each predicate you use, one per line, as `Name(x) ::: what it means`. \
Under "Premises:" write one formula per statement of the passage, one per line, as `formula ::: the statement`. \
Keep every negation of the passage as ¬.

Example
Passage: Coffee is not grown in Iceland. Every plant kept in a greenhouse gets light.
Predicates:
GrownIn(x, y) ::: x is grown in y
Plant(x) ::: x is a plant
InGreenhouse(x) ::: x is kept in a greenhouse
GetsLight(x) ::: x gets light
Premises:
¬GrownIn(coffee, iceland) ::: Coffee is not grown in Iceland.
∀x ((Plant(x) ∧ InGreenhouse(x)) → GetsLight(x)) ::: Every plant kept in a greenhouse gets light.

Passage: {{text}}"""
QUERY_PROMPT = f"""Translate the search query into first-order logic: the statement that a passage \
answering it must make true.
{_SYMBOLS_HELP}
Write two sections. Under "Predicates:" list each predicate you use, one per line, as `Name(x) ::: what it means`. \
Under "Conclusion:" write one formula for the query as `formula ::: the query`. Keep every negation or exclusion \
of the query as ¬.

Example
Query: which teas are not grown in Asia
Predicates:
Tea(x) ::: x is a tea
GrownIn(x, y) ::: x is grown in y
Conclusion:
∃x (Tea(x) ∧ ¬GrownIn(x, asia)) ::: which teas are not grown in Asia

Query: {{text}}"""
# version → (system message, query prompt, document prompt, the query's section, the document's)
PROMPTS: dict[str, tuple[str, str, str, str, str]] = {
    "v1": (SYSTEM, QUERY_PROMPT, DOCUMENT_PROMPT, "Conclusion", "Premises"),
}
PROMPT_VERSION = "v1"

# -- logic forms -----------------------------------------------------------------------------------

NEGATION = "¬"
CONNECTIVES = "∧∨⊕→↔∀∃"
SYMBOLS = NEGATION + CONNECTIVES
# ASCII spellings a model may use instead of the symbols (longest first)
ASCII_FORMS = (("<->", "↔"), ("<=>", "↔"), ("->", "→"), ("=>", "→"), ("~", "¬"), ("&", "∧"), ("|", "∨"))
_HEADER = re.compile(r"^\W*(predicates|premises|conclusions?|passage|query|example)\W*:", re.IGNORECASE)
_FORMULA_START = re.compile(rf"^(?:[{SYMBOLS}(]|[A-Za-z_]\w*\()")


def _formula(line: str) -> str:
    """The formula of one ``formula ::: text`` line, without list markers, backticks or bold marks."""
    line = line.split(":::", 1)[0].strip().strip("`*").strip()
    return re.sub(r"^(?:[-*•]|\d+[.)])\s+", "", line).strip()


def parse_logic(reply: str, section: str) -> tuple[str, str]:
    """``(logic form, how)`` from a translation reply: the formulas of the last ``section:`` block
    (up to the next header) joined by spaces (``how="section"``); without such a block, every line
    that starts like a formula (a connective or quantifier, a parenthesis, or an atom such as
    ``P(x)``: not prose) outside the header lines (``"lines"``); else ``("", "none")``."""
    lines = reply.replace("\r", "").split("\n")
    start = None
    for i, line in enumerate(lines):
        m = _HEADER.match(line)
        if m and m.group(1).lower().rstrip("s") == section.lower().rstrip("s"):
            start = i
    if start is not None:
        rest = lines[start].split(":", 1)[1]
        block = [rest] if rest.strip() else []
        for line in lines[start + 1:]:
            if _HEADER.match(line):
                break
            block.append(line)
        forms = [f for f in map(_formula, block) if f]
        if forms:
            return " ".join(forms), "section"
    forms = [f for line in lines if not _HEADER.match(line) and (f := _formula(line))
             and _FORMULA_START.match(f)]
    if forms:
        return " ".join(forms), "lines"
    return "", "none"


def normalise_logic(logic: str) -> str:
    """ASCII connectives mapped to the symbols, each symbol spaced apart (so a tokenizer gives it a
    token of its own: ``¬P(x)`` → ``¬ P(x)``), whitespace collapsed."""
    for ascii_form, symbol in ASCII_FORMS:
        logic = logic.replace(ascii_form, symbol)
    logic = re.sub(f"([{SYMBOLS}])", r" \1 ", logic)
    return " ".join(logic.split())


def connective_signs(text: str, offsets: Sequence[tuple[int, int]]) -> np.ndarray:
    """Per token (character ``offsets`` into ``text``): −1 for a token that is ``¬``, +1 for one that
    is another connective or quantifier, 0 otherwise (special tokens have empty spans)."""
    out = np.zeros(len(offsets), dtype=np.float64)
    for t, (a, b) in enumerate(offsets):
        span = text[a:b].strip()
        if span == NEGATION:
            out[t] = -1.0
        elif len(span) == 1 and span in CONNECTIVES:
            out[t] = 1.0
    return out


# -- the alignment ---------------------------------------------------------------------------------


def _unit(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    return x / np.maximum(np.linalg.norm(x, axis=-1, keepdims=True), eps)


def cost_matrix(T: np.ndarray, F: np.ndarray, distortion: float) -> np.ndarray:
    """The transport cost between text tokens ``T`` (m × d) and logic tokens ``F`` (n × d), as in the
    authors' code: similarity ``(cos + 1)/2`` times the positional prior
    ``1 − distortion·(j/(n−1) − i/(m−1))²`` (not applied when m or n < 2 or distortion = 0), min-max
    scaled to [0, 1], then ``1 −`` it."""
    S = (_unit(T) @ _unit(F).T + 1.0) / 2.0
    m, n = S.shape
    if distortion and m >= 2 and n >= 2:
        pos = np.arange(n)[None, :] / (n - 1) - np.arange(m)[:, None] / (m - 1)
        S = S * (1.0 - distortion * pos ** 2)
    eps = 1e-10
    S = (S - S.min() + eps) / (S.max() - S.min() + eps)
    return 1.0 - S


def transport_plan(C: np.ndarray) -> np.ndarray:
    """Exact optimal transport (POT's network simplex, ``ot.emd``) between uniform weights."""
    import ot

    m, n = C.shape
    return ot.emd(np.full(m, 1.0 / m), np.full(n, 1.0 / n), np.ascontiguousarray(C, dtype=np.float64))


def align_embedding(T: np.ndarray, F: np.ndarray, P: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``c ⊙ Σ_ij P_ij (T_i ⊙ F_j)``."""
    return c * (T * (P @ F)).sum(axis=0)


SIGN_MASKS = ("pair", "token")


def connective_embedding(T: np.ndarray, F: np.ndarray, P: np.ndarray, signs: np.ndarray,
                         sign_mask: str = "pair") -> np.ndarray:
    """``mean_j Σ_i a_ji X_ij`` with ``X_ij = T_i + s_ij F_j``, ``s_ij = signs_j`` where ``P_ij = 0``
    (else 0) and ``a_j = softmax_i(F_j · X_ij)``; computed without forming X (m × n × d).
    ``sign_mask="token"``: ``s_ij = 0`` for every i once any ``P_ij > 0`` (the released code)."""
    aligned = P > 0 if sign_mask == "pair" else np.broadcast_to((P > 0).any(axis=0), P.shape)
    S = np.where(aligned, 0.0, signs[None, :])  # m × n
    logits = F @ T.T + S.T * (F * F).sum(axis=1)[:, None]  # n × m: F_j·T_i + s_ij‖F_j‖²
    logits -= logits.max(axis=1, keepdims=True)
    A = np.exp(logits)
    A /= A.sum(axis=1, keepdims=True)
    per_logic_token = A @ T + (A * S.T).sum(axis=1, keepdims=True) * F  # n × d
    return per_logic_token.mean(axis=0)


@dataclass(frozen=True)
class LogicView:
    """A text with its logic form and the two NS-IR embeddings."""

    text: str
    logic: str
    how: str  # how the logic form was read from the reply: section, lines, none (the text itself)
    align: np.ndarray
    conn: np.ndarray


def logic_embeddings(T: np.ndarray, F: np.ndarray, signs: np.ndarray, distortion: float,
                     sign_mask: str = "pair") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(e_align, e_conn, P)`` of a text's token states ``T`` (its first row the first token) and
    its logic form's ``F`` with per-token ``signs``."""
    T, F = np.asarray(T, dtype=np.float64), np.asarray(F, dtype=np.float64)
    P = transport_plan(cost_matrix(T, F, distortion))
    return align_embedding(T, F, P, _unit(T[0])), connective_embedding(T, F, P, signs, sign_mask), P


def _cos(a: np.ndarray, b: np.ndarray, eps: float = 1e-6) -> float:
    return float(a @ b / (max(float(np.linalg.norm(a)), eps) * max(float(np.linalg.norm(b)), eps)))


def nsir_score(q: LogicView, d: LogicView) -> float:
    """``(cos_align + 1)/2 + (cos_conn + 1)/2``."""
    return (_cos(q.align, d.align) + 1.0) / 2.0 + (_cos(q.conn, d.conn) + 1.0) / 2.0


def token_states(model: Any, texts: Sequence[str],
                 batch_size: int = 32) -> list[tuple[np.ndarray, list[tuple[int, int]]]]:
    """For each text, the last-layer state of every token (special tokens included) of the
    transformer inside a sentence-transformers ``model``, and each token's character span, truncated
    at the model's ``max_seq_length``."""
    import torch

    module = model[0]
    tok, net = module.tokenizer, module.auto_model
    device = next(net.parameters()).device
    max_len = int(getattr(model, "max_seq_length", None) or tok.model_max_length)
    out: list[tuple[np.ndarray, list[tuple[int, int]]]] = [None] * len(texts)  # type: ignore[list-item]
    order = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    net.eval()
    for s in range(0, len(order), batch_size):
        idx = order[s:s + batch_size]
        enc = tok([texts[i] for i in idx], padding=True, truncation=True, max_length=max_len,
                  return_offsets_mapping=True, return_tensors="pt")
        offsets = enc.pop("offset_mapping")
        with torch.no_grad():
            hidden = net(**{k: v.to(device) for k, v in enc.items()})[0].float().cpu().numpy()
        mask = enc["attention_mask"].numpy().astype(bool)
        for row, i in enumerate(idx):
            out[i] = (hidden[row][mask[row]], [tuple(map(int, o)) for o in offsets[row][mask[row]].tolist()])
    return out


# -- the retriever ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class NsirParams(DenseParams):
    """Dense fields (the first stage: ``model``, prefixes, …) plus the reranking settings."""

    model: str = DEFAULT_ENCODER  # the first-stage encoder; the authors: BAAI/bge-large-en-v1.5
    token_model: str = ""  # the encoder whose token states are aligned; "" = model (the authors: the same)
    top_n: int = 100  # candidates reranked per query
    distortion: float = 0.2  # the positional prior's weight in the transport cost (the authors' default)
    sign_mask: str = "pair"  # "pair": the sign is dropped where P_ij > 0; "token": as the released code runs
    prompt_version: str = PROMPT_VERSION
    temperature: float = 0.0  # the authors left GPT-4o at its default (1.0)
    max_tokens: int = 512

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.top_n < 1 or self.max_tokens < 1 or self.batch_size < 1:
            raise ValueError("nsir: top_n ≥ 1, max_tokens ≥ 1 and batch_size ≥ 1")
        if not 0.0 <= self.distortion <= 1.0:
            raise ValueError(f"nsir: distortion must be in [0, 1], not {self.distortion}")
        if self.temperature < 0:
            raise ValueError("nsir: temperature must be ≥ 0")
        if self.sign_mask not in SIGN_MASKS:
            raise ValueError(f"nsir: sign_mask must be one of {', '.join(SIGN_MASKS)}, not {self.sign_mask!r}")
        if self.prompt_version not in PROMPTS:
            raise ValueError(f"nsir: unknown prompt_version {self.prompt_version!r}; known: {', '.join(PROMPTS)}")


@register("nsir", params=NsirParams, family="neural-symbolic reranking", citation=citations.NSIR, uses_llm=True,
          description="Reranks a dense top-100 by aligning each text with its LLM-written first-order logic "
                      "(optimal transport, negation sign)",
          paper="Xu, Zhang, Mei et al., Findings of ACL 2025, arXiv:2505.22299")
class NSIR(DenseRetriever):
    """NS-IR: dense top-N reranked by logic alignment and the connective constraint."""

    def __init__(self, params: NsirParams | None = None):
        super().__init__(params or NsirParams())
        self._texts: dict[str, str] = {}
        self._corpus: Corpus | None = None
        self._views: dict[tuple[str, str], LogicView] = {}  # ("query" | "document", text) → view
        self._stats = {"queries": 0, "documents": 0, "candidates": 0}
        self._llm_model = ""

    def index(self, corpus: Corpus, ctx: RunContext) -> None:
        """Keep the corpus's texts (what is translated); the dense first stage is indexed by the
        first ``search`` (:meth:`_first_stage`), so reranking a pool never encodes the corpus."""
        self._texts = {d.id: d.full_text for d in corpus}
        self._corpus = corpus
        self._index = None

    def _first_stage(self, ctx: RunContext) -> None:
        """The dense index over the corpus ``index`` was given, built once, timed as the ledger's
        offline ``index`` phase even when ``search`` builds it (:func:`retrievers.dense.offline_phase`)."""
        if self._index is None:
            assert self._corpus is not None, "index() must run before search()"
            with offline_phase(ctx):
                super().index(self._corpus, ctx)

    # -- translation and embeddings --

    def _requests(self, kind: str, texts: Sequence[str], seed: int) -> list[ChatRequest]:
        p: NsirParams = self.params
        system, q_prompt, d_prompt, _, _ = PROMPTS[p.prompt_version]
        template = q_prompt if kind == "query" else d_prompt
        purpose = "nsir.query" if kind == "query" else "nsir.document" + PER_DOCUMENT
        # a seed only where it changes the answer, so a second seed reuses greedy translations
        seed_kw = {"seed": seed} if p.temperature > 0 else {}
        return [ChatRequest.of([{"role": "system", "content": system},
                                {"role": "user", "content": template.replace("{text}", t)}],
                               temperature=p.temperature, max_tokens=p.max_tokens, purpose=purpose, **seed_kw)
                for t in texts]

    def prepare_views(self, query_texts: Sequence[str], doc_texts: Sequence[str], ctx: RunContext) -> None:
        """Translate (one request per distinct text not seen yet) and embed the given texts."""
        p: NsirParams = self.params
        todo = [("query", t) for t in dict.fromkeys(query_texts) if ("query", t) not in self._views]
        todo += [("document", t) for t in dict.fromkeys(doc_texts) if ("document", t) not in self._views]
        if not todo:
            return
        llm: LLMClient = ctx.require_llm("nsir")
        self._llm_model = llm.model
        reqs = self._requests("query", [t for k, t in todo if k == "query"], ctx.seed) + \
            self._requests("document", [t for k, t in todo if k == "document"], ctx.seed)
        with ctx.progress.track(len(reqs), "nsir: translating into first-order logic") as advance:
            replies = llm.chat_many(reqs, ctx.ledger, on_done=advance)
        section = {"query": PROMPTS[p.prompt_version][3], "document": PROMPTS[p.prompt_version][4]}
        logic: list[tuple[str, str]] = []
        for (kind, text), reply in zip(todo, replies):
            form, how = parse_logic(reply.texts[0] if reply.texts else "", section[kind])
            logic.append((normalise_logic(form) if form else text, how))
            if ctx.ledger is not None:
                ctx.ledger.count(f"nsir.logic.{'fallback' if how == 'none' else how}")
        n_q = sum(1 for k, _ in todo if k == "query")
        self._stats["queries"] += n_q
        self._stats["documents"] += len(todo) - n_q
        name = p.token_model or p.model
        model = self._pool(ctx).model(name, p.max_length)
        chunk = 256  # token states of a chunk at a time: a few MB each, not the whole run's
        with ctx.progress.track(len(todo), "nsir: aligning texts with their logic forms") as advance:
            for s in range(0, len(todo), chunk):
                part, forms = todo[s:s + chunk], logic[s:s + chunk]
                try:
                    states = token_states(model, [t for _, t in part] + [f for f, _ in forms], p.batch_size)
                except NotImplementedError as e:  # a slow tokenizer gives no character offsets
                    raise ValueError(f"nsir: the token encoder {name!r} needs a fast tokenizer (character offsets "
                                     f"mark the connective tokens): {e}") from None
                for i, ((kind, text), (form, how)) in enumerate(zip(part, forms)):
                    T, _ = states[i]
                    F, offsets = states[len(part) + i]
                    e_align, e_conn, _ = logic_embeddings(T, F, connective_signs(form, offsets), p.distortion,
                                                          p.sign_mask)
                    self._views[(kind, text)] = LogicView(text, form, how, e_align, e_conn)
                advance(len(part))

    def _score(self, query: Query, doc_id: str) -> float:
        return nsir_score(self._views[("query", query.text)], self._views[("document", self._texts[doc_id])])

    # -- the protocol --

    def search(self, queries: Sequence[Query], k: int, ctx: RunContext) -> Run:
        p: NsirParams = self.params
        self._first_stage(ctx)
        first = super().search(queries, max(k, p.top_n), ctx)
        heads = {q.id: [d for d, _ in first.get(q.id, [])[:p.top_n]] for q in queries}
        tails = {q.id: first.get(q.id, [])[p.top_n:] for q in queries}
        run = self._rerank_heads(queries, heads, tails, ctx)
        return Run({qid: ranking[:k] for qid, ranking in run.items()})

    def rerank(self, queries: Sequence[Query], candidates: Mapping[str, Sequence[Candidate]],
               ctx: RunContext) -> Run:
        """On a pool: NS-IR's second stage with the pool's top ``top_n`` candidates (in pool order)
        in place of the dense top ``top_n``: each translated into logic, aligned and scored as in
        ``search``, sorted by the NS-IR score (ties keep the pool order); the pool's deeper
        candidates follow in pool order, their pool scores shifted below every reranked score (gaps
        kept). The dense first stage is not run (nor, as ``index`` defers it, indexed); the
        candidates' own texts are what is translated. What differs from ``search``: which documents
        are reranked (the pool's top ``top_n`` rather than the encoder's) and the tail (the pool's
        order rather than dense's). A query without candidates gets an empty ranking."""
        p: NsirParams = self.params
        heads: dict[str, list[str]] = {}
        tails: dict[str, list[tuple[str, float]]] = {}
        for q in queries:
            pool = distinct(candidates.get(q.id, ()))
            for c in pool[:p.top_n]:
                self._texts.setdefault(c.id, c.doc.full_text)
            heads[q.id] = [c.id for c in pool[:p.top_n]]
            tails[q.id] = [(c.id, float(c.score)) for c in pool[p.top_n:]]
        return self._rerank_heads(queries, heads, tails, ctx)

    def _rerank_heads(self, queries: Sequence[Query], heads: Mapping[str, list[str]],
                      tails: Mapping[str, list[tuple[str, float]]], ctx: RunContext) -> Run:
        """Each query's ``heads`` (document ids) sorted by the NS-IR score (stable: ties keep their
        order), then its ``tails`` in their order, below every reranked score (:func:`follow_below`)."""
        asked = [q for q in queries if heads[q.id]]
        n = sum(len(heads[q.id]) for q in asked)
        self._stats["candidates"] += n
        if asked:
            self.prepare_views([q.text for q in asked], [self._texts[d] for q in asked for d in heads[q.id]], ctx)
        if ctx.ledger is not None:
            ctx.ledger.count("nsir.candidates", n)
        run = Run()
        for q in queries:
            scored = [(d, self._score(q, d)) for d in heads[q.id]]
            scored.sort(key=lambda x: -x[1])  # stable: ties keep the first stage's order
            tail = tails[q.id]
            if tail and scored:  # deeper results follow, below every reranked score
                tail = list(zip((d for d, _ in tail), follow_below(scored[-1][1], [s for _, s in tail])))
            run[q.id] = scored + tail
        return run

    def score(self, queries: Sequence[Query], doc_ids: Mapping[str, Sequence[str]],
              ctx: RunContext) -> dict[str, dict[str, float]]:
        """NS-IR scores of the named documents (translated first where a search has not)."""
        self.prepare_views([q.text for q in queries], [self._texts[d] for q in queries for d in doc_ids.get(q.id, ())],
                           ctx)
        return {q.id: {d: self._score(q, d) for d in doc_ids.get(q.id, ())} for q in queries}

    def result_extra(self) -> dict[str, Any]:
        p: NsirParams = self.params
        hows: dict[str, int] = {}
        for v in self._views.values():
            hows[v.how] = hows.get(v.how, 0) + 1
        base = getattr(super(), "result_extra", None)  # what dense reports of its encoder, when it does
        return {**(base() if callable(base) else {}),
                "first_stage": p.model, "token_encoder": p.token_model or p.model, "top_n": p.top_n,
                "prompt_version": p.prompt_version, "llm_model": self._llm_model,
                "translated": {"queries": self._stats["queries"], "documents": self._stats["documents"]},
                "candidates": self._stats["candidates"], "logic_read_as": dict(sorted(hows.items()))}
