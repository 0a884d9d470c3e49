"""nnn-tr: identity (query adapter) / near-identity (paper variant) at initialisation, gradients
through the unrolled FISTA into the encoder and the corpus adapter, training steps, short seeded
fits on a tiny synthetic benchmark, the validation source, and the Trainable contract (packaged
MiniLM model, offline, CPU)."""

from __future__ import annotations

import json

from dataclasses import replace

import numpy as np
import pytest
import torch

from harness.protocols import RunContext, Trainable
from harness.types import Benchmark, Corpus, Document, Query
from tests.factories import make_benchmark, make_corpus
from retrievers.nnn import NNNFix, NNNParams
from retrievers.nnn_tr import NNNTr, NNNTrParams, completeness_loss, unrolled_fista

QA = {"variant": "query-adapter"}

TOPICS = {
    "numpy": ["Reshape a numpy array into a matrix.", "Compute the mean of a numpy array.",
              "Stack two numpy arrays vertically.", "Sort the values of a numpy array."],
    "pandas": ["Group a pandas dataframe by a column and sum.", "Read a CSV file into a pandas dataframe.",
               "Merge two pandas dataframes on a key.", "Drop missing values from a dataframe."],
    "plot": ["Plot a histogram with matplotlib.", "Draw a scatter plot of two variables.",
             "Save a matplotlib figure to a PNG file.", "Add a legend and axis labels to a plot."],
    "pets": ["The cat sat on the mat with another cat.", "A dog barked at the mailman all morning long.",
             "Feed the goldfish twice a day.", "Brush the dog's fur every week."],
}
DOCS = [t for texts in TOPICS.values() for t in texts]
QUERIES = [
    Query("q0", "reshape a numpy array and plot a histogram of it"),
    Query("q1", "load a csv with pandas and group it"),
    Query("q2", "a cat on a mat and a barking dog"),
]


@pytest.fixture
def one_thread():
    """Encoder training steps are many small ops: on a busy 2-core machine, two intra-op threads
    make them several times slower and erratic (waits for the second thread), so one."""
    prev = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(prev)


@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return make_corpus(DOCS)


def synthetic_benchmark(corpus: Corpus, n_queries: int = 60) -> Benchmark:
    """Queries built from one document's text whose relevant set also holds a second, unrelated
    document, so the frozen model leaves the completeness loss positive."""
    g = torch.Generator().manual_seed(1)
    queries, rel = [], {}
    for i in range(n_queries):
        a, b = torch.randperm(len(DOCS), generator=g)[:2].tolist()
        queries.append(Query(f"t{i}", f"please: {DOCS[a].lower()}"))
        rel[f"t{i}"] = {f"d{a}": 1, f"d{b}": 1}
    return make_benchmark(corpus, queries, rel, name="synthetic:train", version="0", task="completeness",
                          default_measures=("Comp@5",))


def test_trainable_contract() -> None:
    assert isinstance(NNNTr(), Trainable)
    p = NNNTrParams()
    assert p.l1 == 0.1 and p.l2 == 0.1 and p.variant == "paper" and p.unroll == 50 and p.mode == "tol"
    assert p.encoder_lr == 2e-5 and p.weight_decay == 0.01 and p.train_batch_size == 64 and p.patience == 3
    for bad in ({"patience": 0}, {"variant": "encoder"}, {"unroll": 0}, {"encoder_lr": 0.0}):
        with pytest.raises(ValueError):
            NNNTrParams(**bad)


def test_untrained_adapter_ranks_like_nnn_fix(corpus: Corpus, ctx: RunContext) -> None:
    fix = NNNFix(NNNParams(l1=0.05, l2=0.1))
    fix.index(corpus, ctx)
    tr = NNNTr(NNNTrParams(l1=0.05, l2=0.1, **QA))
    tr.index(corpus, ctx)
    tr.init_adapter(tr.doc_embeddings.shape[1], seed=3)  # α = 0, random MLP weights
    assert float(tr.adapter.alpha.detach()) == 0.0
    a, b = fix.search(QUERIES, 8, ctx), tr.search(QUERIES, 8, ctx)
    for q in QUERIES:
        assert [d for d, _ in a[q.id]] == [d for d, _ in b[q.id]]


def test_gradients_flow_through_unrolled_fista() -> None:
    g = torch.Generator().manual_seed(0)
    D = torch.nn.functional.normalize(torch.randn(7, 4, generator=g, dtype=torch.float64), dim=1)
    Q = torch.nn.functional.normalize(torch.randn(3, 4, generator=g, dtype=torch.float64), dim=1)
    Q.requires_grad_(True)
    pos = torch.zeros(3, 7, dtype=torch.bool)
    pos[0, [0, 1]] = pos[1, 2] = pos[2, [3, 5]] = True
    L = 1.01 * (float(torch.linalg.eigvalsh(D.T @ D)[-1]) + 0.1)

    def f(q: torch.Tensor) -> torch.Tensor:
        X = unrolled_fista(D, q, 0.05, 0.1, L, 10)
        return completeness_loss(X, pos, 1.5, 0.1).sum() + (X * X).sum()

    assert torch.autograd.gradcheck(f, (Q,), eps=1e-6, atol=1e-5)
    f(Q).backward()
    assert Q.grad is not None and float(Q.grad.abs().sum()) > 0


def test_short_fit_lowers_loss_and_is_deterministic(corpus: Corpus, ctx: RunContext, one_thread: None) -> None:
    bench = synthetic_benchmark(corpus)
    params = NNNTrParams(l1=0.05, l2=0.1, epochs=3, patience=3, train_batch_size=16, adapter_lr=3e-3,
                         max_train_queries=50, unroll=20, **QA)
    runs, histories = [], []
    for _ in range(2):
        r = NNNTr(params)
        r.fit(bench, ctx)
        r.index(corpus, ctx)
        runs.append(r.search(QUERIES, 5, ctx))
        histories.append(r.history)
    h = histories[0]
    assert h[0]["epoch"] == 0 and len(h) >= 2
    losses = [e["train_loss"] for e in h[1:]]
    assert losses[-1] < losses[0]
    assert histories[0] == histories[1]
    assert runs[0] == runs[1]
    assert max(e["val_comp5"] for e in h) >= h[0]["val_comp5"]


def test_margin_makes_the_zero_solution_costly() -> None:
    from retrievers.nnn_tr import completeness_loss

    pos = torch.tensor([[True, True, False, False]])
    zero = torch.zeros(1, 4)
    assert completeness_loss(zero, pos, 1.5, 0.1).item() == 0.0  # the degenerate optimum without a margin
    assert completeness_loss(zero, pos, 1.5, 0.1, margin=0.05).item() == pytest.approx(0.05)
    good = torch.tensor([[0.5, 0.4, 0.0, 0.01]])  # relevant well above the irrelevant: no loss
    assert completeness_loss(good, pos, 1.5, 0.1, margin=0.05).item() == 0.0
    bad = torch.tensor([[0.0, 0.4, 0.5, 0.0]])  # a relevant coefficient at 0, an irrelevant one high
    assert completeness_loss(bad, pos, 1.5, 0.1, margin=0.05).item() > 0.05


# -- paper variant: fine-tuned query encoder + corpus adapter ------------------------------------

PAPER = {"variant": "paper", "l1": 0.05, "l2": 0.1}


def _constructed_batch(n_docs: int) -> tuple[list[str], torch.Tensor]:
    """Queries taken from one document each whose relevant set adds an unrelated document (other
    topic), so the frozen model leaves the completeness loss well above 0."""
    pairs = [(0, 12), (5, 14), (9, 2), (13, 6), (3, 10), (7, 15)]
    texts = [f"please: {DOCS[a].lower()}" for a, _ in pairs]
    pos = torch.zeros(len(pairs), n_docs, dtype=torch.bool)
    for i, (a, b) in enumerate(pairs):
        pos[i, [a, b]] = True
    return texts, pos


def test_paper_init_ranks_like_nnn_fix(corpus: Corpus, ctx: RunContext, pool) -> None:
    fix = NNNFix(NNNParams(l1=0.05, l2=0.1))
    fix.index(corpus, ctx)
    tr = NNNTr(NNNTrParams(**PAPER))
    tr.index(corpus, ctx)
    D0 = torch.as_tensor(np.array(tr.doc_embeddings))
    enc, adapter = tr.init_paper(ctx, D0.shape[1], seed=3)
    assert float(adapter.a.detach()) == -5.0
    base = pool.model(NNNTrParams().model)
    assert enc is not base  # a copy: the shared model is never trained
    for (name, w), (_, w0) in zip(enc.state_dict().items(), base.state_dict().items()):
        assert torch.equal(w, w0), name
    with torch.no_grad():
        m = adapter.mlp(D0)
        contrib = (adapter.residual(D0) - D0).norm(dim=1)
        adapted = adapter(D0)
    s5 = torch.sigmoid(torch.tensor(-5.0))
    assert bool((contrib <= s5 * m.norm(dim=1) + 1e-6).all())
    assert bool(((adapted - D0).norm(dim=1) <= 2 * s5 * m.norm(dim=1) + 1e-6).all())
    assert float((adapted - D0).abs().max()) > 0  # the adapter is applied, just small
    tr.index(corpus, ctx)  # now through the adapter
    assert np.allclose(tr.doc_embeddings, adapted.numpy(), atol=1e-6)
    q_ft, q_pool = tr.encode_queries(QUERIES, ctx), fix.encode_queries(QUERIES, ctx)
    assert np.allclose(q_ft, q_pool, atol=1e-5)
    a, b = fix.search(QUERIES, 8, ctx), tr.search(QUERIES, 8, ctx)
    for q in QUERIES:
        assert [d for d, _ in a[q.id]] == [d for d, _ in b[q.id]]


def test_paper_gradients_reach_encoder_and_corpus_adapter(corpus: Corpus, ctx: RunContext, one_thread: None) -> None:
    tr = NNNTr(NNNTrParams(**PAPER, unroll=10))
    tr.index(corpus, ctx)
    D0 = torch.as_tensor(np.array(tr.doc_embeddings))
    enc, adapter = tr.init_paper(ctx, D0.shape[1], seed=0)
    texts, pos = _constructed_batch(len(corpus))
    loss, X = tr.batch_loss(texts, pos, D0, train=False)
    assert float(loss.detach()) > 0.05 and X.shape == pos.shape
    loss.backward()
    assert adapter.a.grad is not None and float(adapter.a.grad.abs()) > 0
    assert all(float(w.grad.abs().sum()) > 0 for w in adapter.mlp.parameters())
    # every encoder weight but BERT's pooler head (unused by mean pooling) gets a gradient
    enc_grads = {n: w.grad for n, w in enc.named_parameters() if ".pooler." not in n}
    assert all(g is not None and float(g.abs().sum()) > 0 for g in enc_grads.values())
    layer0 = [g for n, g in enc_grads.items() if "layer.0." in n]
    assert layer0 and all(float(g.abs().sum()) > 0 for g in layer0)  # through all six layers


def test_paper_train_steps_move_encoder_and_gate_and_lower_the_loss(corpus: Corpus, ctx: RunContext, one_thread: None) -> None:
    tr = NNNTr(NNNTrParams(**PAPER, unroll=10, encoder_lr=1e-4, adapter_lr=1e-2))
    tr.index(corpus, ctx)
    D0 = torch.as_tensor(np.array(tr.doc_embeddings))
    enc, adapter = tr.init_paper(ctx, D0.shape[1], seed=0)
    texts, pos = _constructed_batch(len(corpus))
    opt = tr.make_optimizer()
    w0 = {n: w.detach().clone() for n, w in enc.named_parameters() if ".pooler." not in n}
    with torch.no_grad():
        before = float(tr.batch_loss(texts, pos, D0, train=False)[0])
    tr.train_step(texts, pos, D0, opt)
    assert float(adapter.a.detach()) != -5.0
    changed = [n for n, w in enc.named_parameters() if n in w0 and not torch.equal(w.detach(), w0[n])]
    assert len(changed) == len(w0)  # every encoder weight moved (but the unused pooler head)
    for _ in range(3):
        tr.train_step(texts, pos, D0, opt)
    with torch.no_grad():
        after = float(tr.batch_loss(texts, pos, D0, train=False)[0])
    assert after < before
    enc.eval()
    fix = NNNFix(NNNParams(l1=0.05, l2=0.1))
    assert not np.allclose(tr.encode_queries(QUERIES, ctx), fix.encode_queries(QUERIES, ctx), atol=1e-4)


def _dev_benchmark(corpus: Corpus, own_corpus: bool) -> Benchmark:
    """A validation split: other query ids; optionally its own (smaller) corpus."""
    docs = Corpus(Document(d.id, d.text) for d in list(corpus)[:12]) if own_corpus else corpus
    queries = [Query(f"v{i}", f"how to: {DOCS[i].lower()}") for i in range(8)]
    rel = {f"v{i}": {f"d{i}": 1, f"d{(i + 4) % 12}": 1} for i in range(8)}
    return make_benchmark(docs, queries, rel, name="synthetic:dev", version="1", task="completeness",
                          default_measures=("Comp@5",))


def _comp5(run, bench: Benchmark) -> float:
    hits = [bench.judgments.relevant(q.id) <= {d for d, _ in run[q.id][:5]} for q in bench.queries]
    return sum(hits) / len(hits)


def test_validation_uses_the_dev_split_else_a_holdout(corpus: Corpus, ctx: RunContext, one_thread: None) -> None:
    bench = synthetic_benchmark(corpus, n_queries=20)
    dev = _dev_benchmark(corpus, own_corpus=True)
    qa = NNNTrParams(l1=0.05, l2=0.1, epochs=1, unroll=10, train_batch_size=8, **QA)

    r = NNNTr(qa)  # query adapter: at epoch 0 (α = 0) validation is nnn-fix on the dev corpus
    r.fit(bench, replace(ctx, validation=dev))
    assert r.last_stats["validation"] == "dev" and r.last_stats["val_queries"] == 8
    assert r.last_stats["train_queries"] == 20  # nothing held out of train
    fix = NNNFix(NNNParams(l1=0.05, l2=0.1))
    fix.index(dev.corpus, ctx)
    assert r.history[0]["val_comp5"] == pytest.approx(_comp5(fix.search(dev.queries, 5, ctx), dev))
    assert r._doc_ids == corpus.ids  # the training corpus is indexed again after fit

    r = NNNTr(qa)
    r.fit(bench, ctx)
    assert r.last_stats["validation"] == "holdout"
    assert r.last_stats["val_queries"] == 2 and r.last_stats["train_queries"] == 18

    p = NNNTr(NNNTrParams(**PAPER, epochs=1, unroll=10, train_batch_size=10))
    p.fit(bench, replace(ctx, validation=dev))
    st = p.last_stats
    assert st["validation"] == "dev" and st["variant"] == "paper" and st["val_queries"] == 8
    assert [e["epoch"] for e in p.history] == [0, 1] and p.history[1]["train_loss"] > 0
    assert st["best_val_comp5"] == max(e["val_comp5"] for e in p.history)  # untrained state included
    assert st["sigma_a"] == pytest.approx(p.history[st["best_epoch"]]["sigma_a"])
    p.index(corpus, ctx)
    run = p.search(QUERIES, 5, ctx)
    assert p.last_stats["fit"]["validation"] == "dev" and all(len(run[q.id]) == 5 for q in QUERIES)
    kept = p.result_extra()  # what the runner stores with the result: JSON, history included
    assert json.loads(json.dumps(kept)) == kept
    assert kept["history"] == p.history and kept["fit"]["best_epoch"] == st["best_epoch"]
    assert kept["queries"] == len(QUERIES)
