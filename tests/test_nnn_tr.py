"""nnn-tr: identity at initialisation, gradients through the unrolled FISTA, a short seeded fit on a
tiny synthetic benchmark, and the Trainable contract (packaged MiniLM model, offline, CPU)."""

from __future__ import annotations

import pytest
import torch

from harness.protocols import RunContext, Trainable
from harness.types import Benchmark, Corpus, Document, Judgments, Query
from retrievers.nnn import NNNFix, NNNParams
from retrievers.nnn_tr import NNNTr, NNNTrParams, completeness_loss, unrolled_fista

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



@pytest.fixture(scope="module")
def corpus() -> Corpus:
    return Corpus(Document(f"d{i}", t) for i, t in enumerate(DOCS))


def synthetic_benchmark(corpus: Corpus, n_queries: int = 60) -> Benchmark:
    """Queries built from one document's text whose relevant set also holds a second, unrelated
    document, so the frozen model leaves the completeness loss positive."""
    g = torch.Generator().manual_seed(1)
    queries, rel = [], {}
    for i in range(n_queries):
        a, b = torch.randperm(len(DOCS), generator=g)[:2].tolist()
        queries.append(Query(f"t{i}", f"please: {DOCS[a].lower()}"))
        rel[f"t{i}"] = {f"d{a}": 1, f"d{b}": 1}
    return Benchmark(name="synthetic:train", version="0", corpus=corpus, queries=queries,
                     judgments=Judgments(rel), task="completeness", default_measures=("Comp@5",))


def test_trainable_contract() -> None:
    assert isinstance(NNNTr(), Trainable)
    assert NNNTrParams().l1 == 0.1 and NNNTrParams().l2 == 0.1 and NNNTrParams().iters == 20
    with pytest.raises(ValueError):
        NNNTrParams(patience=0)


def test_untrained_adapter_ranks_like_nnn_fix(corpus: Corpus, ctx: RunContext) -> None:
    fix = NNNFix(NNNParams(l1=0.05, l2=0.1))
    fix.index(corpus, ctx)
    tr = NNNTr(NNNTrParams(l1=0.05, l2=0.1))
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


def test_short_fit_lowers_loss_and_is_deterministic(corpus: Corpus, ctx: RunContext) -> None:
    bench = synthetic_benchmark(corpus)
    params = NNNTrParams(l1=0.05, l2=0.1, epochs=3, patience=3, train_batch_size=16, adapter_lr=3e-3,
                         max_train_queries=50)
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
