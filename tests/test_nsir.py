"""NS-IR (retrievers/nsir.py): the optimal-transport alignment against hand-computed plans and an
independent linear program, both embeddings against their direct (m × n × d) formulation, the
reading of logic forms, and the reranker end to end against a local OpenAI-compatible server
(each document translated once per run, a rerun answered by the cache, the ledger's purposes),
plus the audit's per-document cap on projected calls."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("ot")
pytest.importorskip("openai")

from fake_llm import FakeLLMServer  # noqa: E402

from harness.cost import audit as A  # noqa: E402
from harness.cost import tables as T  # noqa: E402
from harness.core.ledger import Ledger  # noqa: E402
from harness.models.llm import LLMClient, LLMSettings  # noqa: E402
from harness.store.results import BenchmarkInfo, Store  # noqa: E402
from harness.types import Corpus, Document, Query  # noqa: E402
from retrievers.nsir import (NSIR, LogicView, NsirParams, align_embedding, connective_embedding,  # noqa: E402
                             connective_signs, cost_matrix, logic_embeddings, normalise_logic, nsir_score,
                             parse_logic, token_states, transport_plan)
from tests.test_audit import call, phases, rec  # noqa: E402
from tests.test_cli import invoke, make_beir  # noqa: E402

# -- optimal transport -----------------------------------------------------------------------------


def test_transport_plan_is_the_hand_computed_one():
    # rows weigh 1/2, columns 1/3. Column 0 is free from row 0, column 2 from row 1; column 1 costs 1
    # from either row, so each row sends it what it has left: 1/2 − 1/3 = 1/6.
    C = np.array([[0.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    P = transport_plan(C)
    np.testing.assert_allclose(P, [[1 / 3, 1 / 6, 0.0], [0.0, 1 / 6, 1 / 3]], atol=1e-12)


def test_cost_and_plan_of_token_states_by_hand():
    e = np.eye(3)
    # text tokens e1 e2 e3, logic tokens e3 e1 e2, no positional prior: similarity (cos + 1)/2 is 1 on
    # the matching pairs and 1/2 elsewhere → min-max scaled 1 and 0 → cost 0 on matches, 1 elsewhere
    T, F = e, e[[2, 0, 1]]
    C = cost_matrix(T, F, 0.0)
    match = np.array([[0, 1, 0], [0, 0, 1], [1, 0, 0]], dtype=float)
    np.testing.assert_allclose(C, 1 - match, atol=1e-9)
    P = transport_plan(C)
    np.testing.assert_allclose(P, match / 3, atol=1e-12)
    # e_align = c ⊙ Σ_ij P_ij T_i ⊙ F_j = e1 ⊙ (1/3)(e1⊙e1 + e2⊙e2 + e3⊙e3) = (1/3, 0, 0)
    np.testing.assert_allclose(align_embedding(T, F, P, T[0]), [1 / 3, 0, 0], atol=1e-12)


def test_the_positional_prior_by_hand():
    e = np.eye(2)
    T, F = e, e[[1, 0]]  # crossed: similarity [[1/2, 1], [1, 1/2]]
    # distortion 0.2: off-diagonal × (1 − 0.2·1²) → [[.5, .8], [.8, .5]] → scaled [[0, 1], [1, 0]]
    np.testing.assert_allclose(cost_matrix(T, F, 0.2), [[1, 0], [0, 1]], atol=1e-9)
    np.testing.assert_allclose(transport_plan(cost_matrix(T, F, 0.2)), [[0, .5], [.5, 0]], atol=1e-12)
    # distortion 1: off-diagonal × 0 → [[.5, 0], [0, .5]] → scaled [[1, 0], [0, 1]]: the plan follows position
    np.testing.assert_allclose(cost_matrix(T, F, 1.0), [[0, 1], [1, 0]], atol=1e-9)
    np.testing.assert_allclose(transport_plan(cost_matrix(T, F, 1.0)), [[.5, 0], [0, .5]], atol=1e-12)


def test_transport_plan_matches_an_independent_linear_program():
    from scipy.optimize import linprog

    rng = np.random.default_rng(3)
    for m, n in ((4, 6), (7, 5), (3, 3)):
        T, F = rng.normal(size=(m, 8)), rng.normal(size=(n, 8))
        C = cost_matrix(T, F, 0.2)
        P = transport_plan(C)
        # min <C, P> s.t. row sums 1/m, column sums 1/n, P ≥ 0 (HiGHS, an independent solver)
        A_eq = np.vstack([np.kron(np.eye(m), np.ones(n)), np.kron(np.ones(m), np.eye(n))])
        b_eq = np.concatenate([np.full(m, 1 / m), np.full(n, 1 / n)])
        lp = linprog(C.ravel(), A_eq=A_eq, b_eq=b_eq, bounds=(0, None), method="highs")
        assert lp.status == 0
        assert float((C * P).sum()) == pytest.approx(lp.fun, abs=1e-9)
        np.testing.assert_allclose(P, lp.x.reshape(m, n), atol=1e-7)  # random costs: one optimum
        np.testing.assert_allclose(P.sum(1), 1 / m, atol=1e-12)
        np.testing.assert_allclose(P.sum(0), 1 / n, atol=1e-12)


# -- the two embeddings against their direct formulation --------------------------------------------


def direct_embeddings(T, F, P, signs):
    """The alignment and connective embeddings written as the authors' tensors: an m × n × d
    X_ij = T_i + s_ij F_j with s_ij = signs_j zeroed where P_ij > 0, attention over text tokens."""
    m, n = P.shape
    c = T[0] / np.linalg.norm(T[0])
    e_align = np.einsum("md,mn,nd,d->d", T, P, F, c)
    S = np.tile(signs, (m, 1))
    S[P > 0] = 0
    X = T[:, None, :] + S[:, :, None] * F[None, :, :]
    logits = np.einsum("nd,mnd->nm", F, X)
    att = np.exp(logits - logits.max(1, keepdims=True))
    att /= att.sum(1, keepdims=True)
    per = np.einsum("nm,mnd->nd", att, X)
    return e_align, per.mean(0)


def test_embeddings_match_the_direct_formulation():
    rng = np.random.default_rng(7)
    for m, n in ((5, 8), (9, 4)):
        T, F = rng.normal(size=(m, 6)), rng.normal(size=(n, 6))
        signs = rng.choice([-1.0, 0.0, 1.0], size=n)
        e_align, e_conn, P = logic_embeddings(T, F, signs, 0.2)
        ref_align, ref_conn = direct_embeddings(T, F, P, signs)
        np.testing.assert_allclose(e_align, ref_align, atol=1e-10)
        np.testing.assert_allclose(e_conn, ref_conn, atol=1e-10)
        # the sign matters where no mass moves: flipping every sign changes the embedding
        assert not np.allclose(connective_embedding(T, F, P, -signs), e_conn)


def released_connective_embedding(T, F, P, signs):
    """The released code's tensor steps (torch, float64): the sign row expanded over the text
    tokens, zeros written in place where the plan moves mass, attention over text tokens."""
    import torch
    import warnings

    T, F, P = (torch.from_numpy(np.asarray(x, dtype=np.float64)) for x in (T, F, P))
    m, n, d = T.shape[0], F.shape[0], F.shape[1]
    tokens = torch.tensor(signs, dtype=torch.float64).unsqueeze(1).expand(-1, m).T
    with warnings.catch_warnings():  # in-place writes into an expanded tensor are deprecated
        warnings.simplefilter("ignore")
        tokens[((tokens == -1) & (P > 0)) | ((tokens == 1) & (P > 0))] = 0
    tokens = tokens.unsqueeze(2).expand(-1, -1, d)
    X = T.unsqueeze(1).expand(-1, n, -1) + tokens * F.unsqueeze(0).expand(m, -1, -1)
    att = torch.softmax(torch.einsum("nd,mnd->nm", F, X), dim=1)
    return torch.einsum("nm,mnd->nd", att, X).mean(0).numpy()


def test_sign_mask_token_is_what_the_released_code_computes():
    rng = np.random.default_rng(11)
    T, F = rng.normal(size=(6, 5)), rng.normal(size=(7, 5))
    signs = np.array([0, -1, 1, 0, 1, -1, 0], dtype=float)
    P = transport_plan(cost_matrix(T, F, 0.2))
    released = released_connective_embedding(T, F, P, signs)
    np.testing.assert_allclose(connective_embedding(T, F, P, signs, "token"), released, atol=1e-10)
    # every logic token gets mass from some text token, so no sign survives there ...
    np.testing.assert_allclose(released, connective_embedding(T, F, P, np.zeros(7)), atol=1e-10)
    # ... while "pair" keeps each sign where the plan moves no mass
    assert not np.allclose(connective_embedding(T, F, P, signs, "pair"), released, atol=1e-6)


def test_a_connective_aligned_with_every_text_token_carries_no_sign():
    rng = np.random.default_rng(1)
    T, F = rng.normal(size=(1, 4)), rng.normal(size=(3, 4))  # one text token: P_1j = 1/3 > 0 for all j
    P = transport_plan(cost_matrix(T, F, 0.2))
    assert (P > 0).all()
    np.testing.assert_allclose(connective_embedding(T, F, P, np.array([-1.0, 1.0, 0.0])),
                               connective_embedding(T, F, P, np.zeros(3)), atol=1e-12)
    # with a single text token every attention weight is 1: e_conn = T_1
    np.testing.assert_allclose(connective_embedding(T, F, P, np.zeros(3)), T[0], atol=1e-12)


def test_score_is_the_sum_of_the_rescaled_cosines():
    q = LogicView("q", "q", "section", np.array([1.0, 0.0]), np.array([1.0, 1.0]))
    d = LogicView("d", "d", "section", np.array([0.0, 2.0]), np.array([-3.0, -3.0]))
    assert nsir_score(q, d) == pytest.approx((0 + 1) / 2 + (-1 + 1) / 2)
    assert nsir_score(q, q) == pytest.approx(2.0)


# -- logic forms -------------------------------------------------------------------------------------


DOC_REPLY = """Predicates:
GrownIn(x, y) ::: x is grown in y
Premises:
¬GrownIn(coffee, iceland) ::: Coffee is not grown in Iceland.
- ∀x (Plant(x) → Light(x)) ::: Plants get light.
"""


@pytest.mark.parametrize("reply,section,expected", [
    (DOC_REPLY, "Premises", ("¬GrownIn(coffee, iceland) ∀x (Plant(x) → Light(x))", "section")),
    ("Predicates:\nTea(x) ::: x is tea\nConclusion: ∃x (Tea(x) ∧ ¬Asia(x)) ::: teas not from Asia",
     "Conclusion", ("∃x (Tea(x) ∧ ¬Asia(x))", "section")),
    ("**Conclusions:**\n`A(x) ∨ B(x)`\n\nPassage: ignored", "conclusion", ("A(x) ∨ B(x)", "section")),
    # no section: the formula-like lines; predicates count as such
    ("Here it is:\nTea(x) ::: x is a tea\n¬Grown(tea) ::: not grown", "Premises", ("Tea(x) ¬Grown(tea)", "lines")),
    # prose that mentions symbols or atoms (an echoed instruction) is not a formula
    ("Use these symbols: ∧ (and), ¬ (not); write Name(x) ::: meaning\nSun(x) ::: the sun\n",
     "Premises", ("Sun(x)", "lines")),
    ("I cannot translate this passage.", "Premises", ("", "none")),
    ("Premises:\n\n", "Premises", ("", "none")),
])
def test_parse_logic(reply, section, expected):
    assert parse_logic(reply, section) == expected


def test_normalise_logic_and_connective_signs():
    assert normalise_logic("∀x (Tea(x) -> ~Grown(x)) & A | B <-> C") == \
        "∀ x (Tea(x) → ¬ Grown(x)) ∧ A ∨ B ↔ C"
    text = "¬ A ∧ B"
    offsets = [(0, 0), (0, 1), (2, 3), (4, 5), (6, 7), (0, 0)]  # [CLS] ¬ A ∧ B [SEP]
    np.testing.assert_array_equal(connective_signs(text, offsets), [0, -1, 0, 1, 0, 0])


def test_token_states_and_signs_with_the_real_tokenizer(pool):
    model = pool.model("all-MiniLM-L6-v2")
    logic = normalise_logic("∀x (Tea(x) → ¬Grown(x, asia)) ∧ ∃y Cup(y)")
    (T, offsets), = token_states(model, [logic])
    tokens = [logic[a:b] for a, b in offsets]
    assert T.shape == (len(offsets), 384) and offsets[0] == (0, 0) and offsets[-1] == (0, 0)
    signs = connective_signs(logic, offsets)
    assert [s for s, t in zip(signs, tokens) if t and t in "¬∧∀∃→"] == [1, 1, -1, 1, 1]
    assert (signs != 0).sum() == 5
    # the same states as the model's own token embeddings (batching and padding change nothing)
    ref = model.encode([logic], output_value="token_embeddings", convert_to_numpy=False)[0].cpu().numpy()
    np.testing.assert_allclose(T, ref, atol=1e-4)
    (T2, _), _ = token_states(model, [logic, "a much longer text " * 5], batch_size=2)
    np.testing.assert_allclose(T2, T, atol=1e-4)


def test_a_prompt_version_names_one_wording():
    """Results and cached translations are keyed by the prompt version in the spec: changing the
    wording of v1 would mix two prompts under one name (add "v2" instead)."""
    import hashlib

    from retrievers.nsir import PROMPTS

    digest = hashlib.sha256(json.dumps(PROMPTS["v1"], ensure_ascii=False).encode()).hexdigest()[:16]
    assert digest == "f1aeca0770cd1089"
    system, query_prompt, doc_prompt, q_section, d_section = PROMPTS["v1"]
    assert "{text}" in query_prompt and "{text}" in doc_prompt and (q_section, d_section) == ("Conclusion", "Premises")


def test_params_are_checked():
    for bad in (dict(top_n=0), dict(distortion=1.5), dict(prompt_version="v0"), dict(temperature=-1),
                dict(sign_mask="row")):
        with pytest.raises(ValueError, match="nsir"):
            NsirParams(**bad)


# -- the reranker against a local server ---------------------------------------------------------


STOP = {"the", "a", "an", "of", "is", "are", "in", "from", "and", "to", "which", "what", "by", "for"}


def translate(body: dict) -> str:
    """A deterministic translator: each content word an atom, ¬ on the word after not/no/without."""
    prompt = body["messages"][-1]["content"]
    kind = "Premises" if "\nPassage: " in prompt else "Conclusion"
    text = prompt.rsplit("\nPassage: " if kind == "Premises" else "\nQuery: ", 1)[1]
    atoms, neg = [], False
    for w in re.findall(r"[A-Za-z]+", text):
        if w.lower() in ("not", "no", "without", "never"):
            neg = True
            continue
        if w.lower() in STOP:
            continue
        atoms.append(("¬" if neg else "") + f"{w.capitalize()}(x)")
        neg = False
    return f"Predicates:\nP(x) ::: x\n{kind}:\n{' ∧ '.join(atoms)} ::: {text}"


DOCS = {
    "d1": "Red wines from Bordeaux in France are blended from Merlot and Cabernet.",
    "d2": "Italian red wines such as Chianti come from Tuscany, not from France.",
    "d3": "Spanish Rioja is a red wine made mostly from Tempranillo grapes.",
    "d4": "The French Alps are popular for skiing in winter.",
    "d5": "Beer brewing uses malted barley and hops.",
    "d6": "White wines from the Loire valley are crisp.",
}
QUERIES = [Query("q1", "red wine not from France"), Query("q2", "red wines but not Bordeaux"),
           Query("q3", "wine regions of Spain")]


@pytest.fixture
def server():
    s = FakeLLMServer(translate).start()
    yield s
    s.stop()


def client(server, tmp_path) -> LLMClient:
    return LLMClient(LLMSettings(base_url=server.base_url, model="gpt-4o-mini"), cache_path=tmp_path / "llm.sqlite")


def doc_requests(server) -> list[str]:
    return [b["messages"][-1]["content"].rsplit("\nPassage: ", 1)[1] for b in server.requests
            if "\nPassage: " in b["messages"][-1]["content"]]


def test_reranks_the_top_n_translating_each_document_once(ctx, server, tmp_path):
    ctx.llm, ctx.ledger = client(server, tmp_path), Ledger()
    r = NSIR(NsirParams(top_n=4))
    r.index(Corpus([Document(i, t) for i, t in DOCS.items()]), ctx)
    run = r.search(QUERIES, 6, ctx)
    # the first stage: dense's ranking
    first = super(NSIR, r).search(QUERIES, 6, ctx)
    heads = {q.id: [d for d, _ in first[q.id][:4]] for q in QUERIES}
    # one request per query, one per distinct candidate document — not one per (query, candidate)
    unique = {d for h in heads.values() for d in h}
    assert sum(map(len, heads.values())) > len(unique)  # some documents are candidates of several queries
    assert sorted(doc_requests(server)) == sorted(DOCS[d] for d in unique)
    assert server.count == len(QUERIES) + len(unique)
    purposes = [c.purpose for c in ctx.ledger.llm_calls]
    assert purposes.count("nsir.query") == 3 and purposes.count("nsir.document" + A.PER_DOCUMENT) == len(unique)
    assert ctx.ledger.counters["nsir.logic.section"] == 3 + len(unique)
    assert ctx.ledger.counters["nsir.candidates"] == 12
    assert server.requests[0]["temperature"] == 0.0 and "seed" not in server.requests[0]
    # the head is the top-4 reordered by the NS-IR score, the tail the dense order below it
    for q in QUERIES:
        ranked = run[q.id]
        assert {d for d, _ in ranked[:4]} == set(heads[q.id])
        direct = {d: nsir_score(r._views[("query", q.text)], r._views[("document", DOCS[d])]) for d in heads[q.id]}
        assert [s for _, s in ranked[:4]] == pytest.approx(sorted(direct.values(), reverse=True))
        assert [d for d, _ in ranked[4:]] == [d for d, _ in first[q.id][4:]]
        assert ranked[4][1] < ranked[3][1]
        assert all(0.0 <= s <= 2.0 for _, s in ranked[:4])
    # scoring documents afterwards asks nothing new for those already translated
    n = server.count
    got = r.score(QUERIES[:1], {"q1": heads["q1"][:2]}, ctx)
    assert server.count == n
    assert got["q1"] == pytest.approx({d: s for d, s in run["q1"][:4] if d in heads["q1"][:2]})
    # a document outside every top-4 is translated when it is scored
    outside = sorted(set(DOCS) - unique)[0]
    r.score(QUERIES[:1], {"q1": [outside]}, ctx)
    assert server.count == n + 1 and doc_requests(server)[-1] == DOCS[outside]
    extra = r.result_extra()
    assert extra["translated"] == {"queries": 3, "documents": len(unique) + 1} and extra["top_n"] == 4
    assert extra["llm_model"] == "gpt-4o-mini" and extra["prompt_version"] == "v1"

    # a new retriever on the same cache: the same rankings and not one request
    ctx.ledger = Ledger()
    again = NSIR(NsirParams(top_n=4))
    again.index(Corpus([Document(i, t) for i, t in DOCS.items()]), ctx)
    assert again.search(QUERIES, 6, ctx) == run
    assert server.count == n + 1
    assert ctx.ledger.llm_calls and all(c.cached for c in ctx.ledger.llm_calls)
    ctx.llm.close()


def test_a_negation_in_the_logic_form_changes_the_connective_embedding(pool):
    """The same text with a logic form with ¬ and one without: the sign reaches the embedding."""
    model = pool.model("all-MiniLM-L6-v2")
    text = "wines from France"
    views = []
    for form in ("Wine(x) ∧ From(x, france)", "Wine(x) ∧ ¬From(x, france)"):
        form = normalise_logic(form)
        (T, _), (F, off) = token_states(model, [text, form])
        views.append(logic_embeddings(T, F, connective_signs(form, off), 0.2))
    assert (connective_signs(normalise_logic("Wine(x) ∧ ¬From(x, france)"), off) == -1).sum() == 1
    assert not np.allclose(views[0][1], views[1][1], atol=1e-4)


def test_cli_run_rerun_and_audit(tmp_path: Path, home: Path, server):
    data = make_beir(tmp_path / "tiny")
    args = ["run", "nsir", "--benchmark", str(data), "--k", "5", "--llm-base-url", server.base_url,
            "--llm-model", "gpt-4o-mini", "-p", "nsir.top_n=3"]
    res = invoke(*args)
    assert res.exit_code == 0, res.output
    first = server.count
    store = Store(home / "results.sqlite")
    rec1 = store.get(store.results()[0].key, full=True)
    nq = rec1.n_queries
    n_docs = len(doc_requests(server))
    assert first == nq + n_docs and len(rec1.llm_calls) == first
    assert all(c["phase"] == "search" and not c["cached"] for c in rec1.llm_calls)
    assert rec1.extra["retriever"]["top_n"] == 3 and rec1.extra["counters"]["nsir.candidates"] == 3 * nq
    assert rec1.spec["params"]["prompt_version"] == "v1" and rec1.spec["params"]["model"] == "all-MiniLM-L6-v2"

    res = invoke(*args, "--force")  # answered from the cache: no request, the same rankings
    assert res.exit_code == 0, res.output
    assert server.count == first
    rec2 = store.get(store.results()[0].key, full=True)
    assert rec2.rankings == rec1.rankings
    assert len(rec2.llm_calls) == first and all(c["cached"] and c["usd"] == 0 for c in rec2.llm_calls)
    rows = {(r["retriever"], r["status"]): r for r in json.loads(invoke("audit", "--format", "json").stdout)}
    stored, replaced = rows[("nsir", "stored")], rows[("nsir", "unfinished run")]  # --force replaced the first
    assert (stored["llm_calls"], stored["cache_hits"], stored["billed_calls"]) == (first, first, 0)
    assert (replaced["llm_calls"], replaced["billed_calls"]) == (first, first)
    store.close()


# -- the audit's projection ------------------------------------------------------------------------


def test_projection_caps_per_document_calls_at_the_corpus_size():
    doc = A.PER_DOCUMENT
    # 10 queries, 40 s of search: 10 query translations and 50 document translations of 0.5 s each
    # (one at a time: 30 s), 10 s of the rest
    calls = [call("gpt-4o-mini", 1000, 200, usd=0.00027) | {"purpose": "nsir.query"} for _ in range(10)]
    calls += [call("gpt-4o-mini", 1000, 200, usd=0.00027) | {"purpose": "nsir.document" + doc} for _ in range(50)]
    r = rec("nsir", "nevir[:10]", "2026-01-10T00:00:00+00:00", phases(index=1.0, docs=100, search=40.0, queries=10),
            calls)
    infos = [BenchmarkInfo("big", "v1", "constraint", [], {"judged_queries": 100, "documents": 200}),
             BenchmarkInfo("wide", "v2", "constraint", [], {"judged_queries": 100, "documents": 1000})]
    p = A.project([r], ["big", "wide"], infos, {"gpt-4o-mini": A.Price(0.15, 0.60)})
    rows = {x["benchmark"]: x for x in p.rows}
    big = rows["big"]  # 100 queries: 100 query calls; 500 document calls by rate, but only 200 documents
    assert big["per_document_capped"] and big["llm_calls"] == 300
    assert big["tokens_k"] == pytest.approx(300 * 1.2)
    assert big["usd"] == pytest.approx(300 * 0.00027)
    # by hand: 100 query calls × 0.5 s + 10 × 10 s of the rest + 200 document calls × 0.5 s
    assert big["online_s"] == pytest.approx(50 + 100 + 100)
    wide = rows["wide"]  # 500 document calls fit in 1000 documents: the plain per-query rate
    assert not wide["per_document_capped"] and wide["llm_calls"] == 600 and wide["online_s"] == pytest.approx(400)
    notes = T.projection_notes(p)
    assert any(n.startswith("nsir: LLM calls made once per document capped at the corpus size on big") for n in notes)
    assert T.projection_csv(p).splitlines()[1].split(",")[11] == "True"
