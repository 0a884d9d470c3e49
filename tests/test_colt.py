"""colt: the graph propagation against a dense-matrix formula (with and without edge dropout, with
an isolated node), the scene mean, the list-wise and contrastive losses against written-out
formulas, the straight-through scene start, candidate lists, and short seeded fits on a tiny
synthetic tool benchmark — inference as the authors do it, the trained-weight cache, the declared
training data and a run through the runner with its leakage check (packaged MiniLM, offline, CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp
import torch

from harness.core.leakage import LeakageError, check_unseen
from harness.protocols import DeclaresTrainingData, RunContext, Trainable
from harness.registry import get_retriever_class, retriever_info
from harness.types import Benchmark, Corpus, Document, Query
from tests.factories import make_benchmark, make_corpus
from harness.models.resolve import model_fingerprint
from retrievers.colt import COLT, ColtParams, artifact_key, declared_training_data, parse_grid
from retrievers.colt_train import (ColtModel, ValSet, bipartite, build_graph, candidate_lists, edge_dropout,
                                   info_nce, laplace, multi_label_loss, propagate, row_mean, to_torch)

# ---------------------------------------------------------------------------------------------
# the propagation against dense matrices


def dense_propagation(A: np.ndarray, X0: np.ndarray, layers: int) -> np.ndarray:
    """The authors' ``one_propagate`` written out with dense matrices: Â = D_r^{-1/2} A D_c^{-1/2}
    (+1e-8 on the roots), X ← ÂX / (l+2) at each layer, and the sum of X₀ and the row-normalised
    iterates."""
    r = 1.0 / (np.sqrt(A.sum(axis=1)) + 1e-8)
    c = 1.0 / (np.sqrt(A.sum(axis=0)) + 1e-8)
    G = r[:, None] * A * c[None, :]
    x, out = X0.copy(), X0.copy()
    for i in range(layers):
        x = G @ x / (i + 2)
        n = np.linalg.norm(x, axis=1, keepdims=True)
        out = out + x / np.maximum(n, 1e-12)
    return out


@pytest.fixture
def small_graph():
    # 5 queries, 4 tools; query 4 and tool 3 have no edge (a new query, an unused tool)
    rel = [[0, 1], [1, 2], [0, 1], [2], []]
    R = np.zeros((5, 4))
    for i, js in enumerate(rel):
        R[i, js] = 1.0
    rng = np.random.default_rng(7)
    return R, rng.normal(size=(5, 6)), rng.normal(size=(4, 6))


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_propagation_matches_the_dense_formula(small_graph, layers: int) -> None:
    R, Q, T = small_graph
    A = np.block([[np.zeros((5, 5)), R], [R.T, np.zeros((4, 4))]])
    want = dense_propagation(A, np.vstack([Q, T]), layers)
    G = to_torch(laplace(bipartite(sp.csr_matrix(R))))
    q, t = propagate(G, torch.tensor(Q, dtype=torch.float32), torch.tensor(T, dtype=torch.float32), layers)
    got = torch.cat([q, t]).numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # a node without an edge keeps its own embedding: a test query is scored with its encoder embedding
    np.testing.assert_allclose(got[4], Q[4], rtol=1e-6)
    np.testing.assert_allclose(got[5 + 3], T[3], rtol=1e-6)
    # and a connected one does not
    assert np.abs(got[0] - Q[0]).max() > 0.1


def test_propagation_with_dropped_edges_matches_the_dense_formula(small_graph) -> None:
    R, Q, T = small_graph
    M = bipartite(sp.csr_matrix(R))
    dropped = edge_dropout(M, 0.4, np.random.default_rng(3))
    assert dropped.nnz == M.nnz and 0 < (dropped.data == 0).sum() < M.nnz  # structure kept, some zeroed
    A = dropped.toarray()
    assert not np.array_equal(A, A.T)  # the two directions of an edge are dropped independently
    want = dense_propagation(A, np.vstack([Q, T]), 2)
    q, t = propagate(to_torch(laplace(dropped)), torch.tensor(Q, dtype=torch.float32),
                     torch.tensor(T, dtype=torch.float32), 2)
    np.testing.assert_allclose(torch.cat([q, t]).numpy(), want, rtol=1e-5, atol=1e-5)


def test_scene_mean_and_graph() -> None:
    g = build_graph(["a", "b", "c", "d"], [[2, 0], [1], [0, 2], [0, 1, 2]], ["t0", "t1", "t2"])
    assert g.scenes == [(0, 2), (1,), (0, 1, 2)] and g.query_scene.tolist() == [0, 1, 0, 2]
    assert g.qt.toarray().tolist() == [[1, 0, 1], [0, 1, 0], [1, 0, 1], [1, 1, 1]]
    assert g.qs.toarray().tolist() == [[1, 0, 0], [0, 1, 0], [1, 0, 0], [0, 0, 1]]
    T = np.arange(12, dtype=np.float64).reshape(3, 4)
    np.testing.assert_allclose(row_mean(g.st) @ T, np.stack([T[[0, 2]].mean(0), T[1], T.mean(0)]), rtol=1e-7)
    with pytest.raises(ValueError):
        build_graph(["a"], [[]], ["t0"])


# ---------------------------------------------------------------------------------------------
# losses


def test_multi_label_loss_matches_the_written_out_formula() -> None:
    g = torch.Generator().manual_seed(0)
    logits, label = torch.randn(3, 5, generator=g), torch.tensor([[1, 1, 0, 0, 0], [1, 0, 0, 0, 0],
                                                                   [1, 1, 1, 0, 0]], dtype=torch.float32)
    x = logits.numpy().astype(np.float64)
    p = np.exp(x) / np.exp(x).sum(1, keepdims=True)
    y = label.numpy() / label.numpy().sum(1, keepdims=True)
    want = np.mean(-(y * np.log(p) + (1 - y) * np.log(1 - p)))
    assert float(multi_label_loss(logits, label)) == pytest.approx(want, rel=1e-5)


def test_info_nce_matches_the_authors_formula() -> None:
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(4, 3, generator=g), torch.randn(4, 3, generator=g)
    an = a.numpy() / np.linalg.norm(a.numpy(), axis=1, keepdims=True)
    bn = b.numpy() / np.linalg.norm(b.numpy(), axis=1, keepdims=True)
    pos = np.exp((an * bn).sum(1) / 0.1)
    ttl = np.exp(an @ bn.T / 0.1).sum(1)
    assert float(info_nce(a, b, 0.1)) == pytest.approx(-np.mean(np.log(pos / ttl)), rel=1e-5)


def test_model_losses_score_candidates_as_the_sum_of_two_cosines() -> None:
    g = build_graph(["a", "b", "c"], [[0, 1], [2], [0, 1]], ["t0", "t1", "t2", "t3", "t4"])
    gen = torch.Generator().manual_seed(2)
    m = ColtModel(g, torch.randn(3, 4, generator=gen), torch.randn(5, 4, generator=gen), layers=1, c_temp=0.2)
    q_idx, cand = torch.tensor([0, 1]), torch.tensor([[0, 1, 3], [2, 4, 0]])
    label = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    ml, cl = m.losses(q_idx, cand, label)
    v = m.views()
    cos = torch.nn.functional.cosine_similarity
    logits = torch.stack([torch.stack([cos(v["q_tool"][i], v["tools"][j], dim=0) + cos(v["q_scene"][i], v["tools"][j], dim=0)
                                       for j in row]) for i, row in zip(q_idx.tolist(), cand.tolist())])
    assert ml.item() == pytest.approx(multi_label_loss(logits, label).item(), rel=1e-5)
    s = torch.as_tensor(g.query_scene)[q_idx]
    want_cl = (info_nce(v["q_tool"][q_idx], v["q_scene"][q_idx], 0.2) + info_nce(v["s_tool"][s], v["s_scene"][s], 0.2)) / 2
    assert cl.item() == pytest.approx(want_cl.item(), rel=1e-5)


def test_scene_start_keeps_its_value_and_passes_gradients_to_the_tools() -> None:
    g = build_graph(["a", "b"], [[0, 1], [2]], ["t0", "t1", "t2"])
    t0 = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    m = ColtModel(g, torch.zeros(2, 2), t0, layers=1, c_temp=0.1)
    with torch.no_grad():
        m.tools.add_(5.0)  # the tools move; the scenes' starting value does not
    s = m.scene_start()
    np.testing.assert_allclose(s.detach().numpy(), [[0.5, 0.5], [1.0, 1.0]])
    s.sum().backward()
    np.testing.assert_allclose(m.tools.grad.numpy(), [[0.5, 0.5], [0.5, 0.5], [1.0, 1.0]], rtol=1e-6)


def test_candidate_lists() -> None:
    g = build_graph(["a", "b"], [[3, 1], [0]], [f"t{i}" for i in range(12)])
    cand, label = candidate_lists(g, np.array([0, 1, 0]), 10, np.random.default_rng(0))
    assert cand.shape == label.shape == (3, 10)
    for row, lab, pos in zip(cand, label, [(1, 3), (0,), (1, 3)]):
        assert tuple(row[:len(pos)]) == pos and lab.tolist() == [1.0] * len(pos) + [0.0] * (10 - len(pos))
        assert len(set(row.tolist())) == 10 and not set(row[len(pos):].tolist()) & set(pos)


def test_validation_scores() -> None:
    tools = np.eye(4, dtype=np.float32)
    val = ValSet(np.array([[0.9, 0.8, 0.1, 0.0], [0.0, 0.1, 0.2, 0.9]], dtype=np.float32),
                 [np.array([0, 1]), np.array([3, 0])])
    # query 0: ranks 0,1,2,3 — both relevant in the top 3; query 1: 3,2,1,0 — tool 0 is 4th
    assert val.scores(tools) == {"R@3": 0.75, "R@5": 1.0, "Comp@3": 0.5, "Comp@5": 1.0}


def test_params() -> None:
    p = ColtParams()
    assert p.grid() == [(1, 0.04), (1, 0.1), (2, 0.04), (2, 0.1)]
    assert (p.lr, p.l2_reg, p.train_batch_size, p.neg_num, p.edge_dropout, p.c_temp) == (1e-3, 1e-7, 2048, 10, 0.2, 0.1)
    assert parse_grid("3, 1,3", int, "layers") == [3, 1]
    for bad in ({"layers": ""}, {"layers": "a"}, {"c_lambda": "-1"}, {"epochs": 0}, {"edge_dropout": 1.0},
                {"neg_num": 1}):
        with pytest.raises(ValueError):
            ColtParams(**bad)


def test_registered() -> None:
    assert get_retriever_class("colt") is COLT
    info = retriever_info(COLT)
    assert info.name == "colt" and "2405.16089" in info.paper and info.trains_on
    assert isinstance(COLT(), Trainable) and isinstance(COLT(), DeclaresTrainingData)


# ---------------------------------------------------------------------------------------------
# fitting on a tiny tool benchmark

TOOLS = {
    "weather": "Weather forecast API: get the temperature and rain forecast for a city.",
    "flights": "Flight search API: find flights between two airports on a date.",
    "hotels": "Hotel booking API: search and book hotel rooms in a city.",
    "currency": "Currency converter: convert an amount between two currencies.",
    "recipes": "Recipe finder: find recipes that use a given ingredient.",
    "groceries": "Grocery delivery: order groceries and ingredients to your home.",
    "news": "News headlines: latest news articles about a topic.",
    "stocks": "Stock quotes: current price of a company's shares.",
    "translate": "Translation API: translate text between languages.",
    "maps": "Maps and directions: route and travel time between two places.",
}
SCENES = [("flights", "hotels"), ("recipes", "groceries"), ("weather", "maps"), ("stocks", "currency"),
          ("news", "translate"), ("flights", "currency")]
TEMPLATES = ["I am planning {}", "help me with {}", "I need {}", "can you sort out {}", "please handle {}"]
TOPICS = {("flights", "hotels"): "a trip to Paris next month", ("recipes", "groceries"): "dinner with salmon tonight",
          ("weather", "maps"): "a weekend hike in the mountains", ("stocks", "currency"): "my investments in Japan",
          ("news", "translate"): "reading what happened in Brazil", ("flights", "currency"): "a holiday in Tokyo"}


def tool_bench(name: str, n: int, start: int, version: str) -> Benchmark:
    corpus = make_corpus(TOOLS)
    queries, rel = [], {}
    for i in range(start, start + n):
        scene = SCENES[i % len(SCENES)]
        queries.append(Query(f"q{i}", TEMPLATES[(i // len(SCENES)) % len(TEMPLATES)].format(TOPICS[scene]) + f" ({i})"))
        rel[f"q{i}"] = {t: 1 for t in scene}
    return make_benchmark(corpus, queries, rel, name=name, version=version, task="completeness",
                          default_measures=("Comp@5",))


FAST = {"layers": "1,2", "c_lambda": "0.04", "epochs": 8, "patience": 3, "train_batch_size": 16}


def test_fit_search_cache_and_declared_data(ctx: RunContext, tmp_path: Path) -> None:
    train, dev, test = (tool_bench("tiny:train", 60, 0, "tr"), tool_bench("tiny:dev", 12, 100, "dv"),
                        tool_bench("tiny", 12, 200, "te"))
    c = RunContext(seed=0, device="cpu", encoders=ctx.encoders, cache_dir=tmp_path / "home" / "cache",
                   validation=dev)
    r = COLT(ColtParams(**FAST))
    r.fit(train, c)
    fit = r.last_stats["fit"]
    assert fit["trained_in_this_run"] and fit["validation"]["source"] == "dev"
    assert [(s["layers"], s["c_lambda"]) for s in fit["sweep"]] == [(1, 0.04), (2, 0.04)]
    best = max(fit["sweep"], key=lambda s: s["val"]["Comp@5"])
    assert fit["chosen"]["val"] == best["val"] and fit["graph"] == {"queries": 60, "scenes": 6, "tools": 10,
                                                                      "query_tool_edges": 120}
    hist = r.last_stats["history"]
    assert hist[0]["epoch"] == 0 and 1 <= fit["chosen"]["best_epoch"] <= len(hist) - 1
    assert all(h["multi_label_loss"] > 0 for h in hist[1:])

    # inference: the encoder's query embedding against the stored tool embeddings, inner product
    r.index(test.corpus, c)
    run = r.search(test.eval_queries, 5, c)
    art = Path(fit["artifact"])
    tools = np.load(art / "tools.npy", allow_pickle=False)
    np.testing.assert_allclose(np.linalg.norm(tools, axis=1), 1.0, rtol=1e-5)
    qe = c.encoders.encode("all-MiniLM-L6-v2", [q.text for q in test.eval_queries], normalize=True)
    card = json.loads((art / "colt_card.json").read_text())
    for i, q in enumerate(test.eval_queries):
        want = tools @ qe[i]
        top = np.argsort(-want, kind="stable")[:5]
        assert [d for d, _ in run[q.id]] == [card["tool_ids"][j] for j in top]
        assert [s for _, s in run[q.id]] == pytest.approx([float(want[j]) for j in top], abs=1e-5)
    assert r.last_stats["index"] == {"documents": 10, "trained_tools": 10, "encoder_only": 0}

    # the cache: a second fit with the same key loads, and ranks the same
    r2 = COLT(ColtParams(**FAST))
    r2.fit(train, c)
    assert not r2.last_stats["fit"]["trained_in_this_run"] and r2.last_stats["fit"]["artifact"] == str(art)
    r2.index(test.corpus, c)
    assert r2.search(test.eval_queries, 5, c) == run
    # the key covers the parameters, the seed, the base model and both splits' versions
    key = art.name
    fp = model_fingerprint("all-MiniLM-L6-v2")
    assert artifact_key(ColtParams(**FAST), 0, fp, "tr", "dv") == key
    assert len({key, artifact_key(ColtParams(**FAST), 1, fp, "tr", "dv"), artifact_key(ColtParams(**FAST), 0, fp, "x", "dv"),
                artifact_key(ColtParams(**FAST), 0, fp, "tr", "x"), artifact_key(ColtParams(**FAST, lr=2e-3), 0, fp, "tr", "dv"),
                artifact_key(ColtParams(**FAST), 0, "other", "tr", "dv")}) == 6

    # a tool the graph never saw (new id, or changed text) gets its encoder embedding
    changed = Corpus([Document("weather", "Weather forecast API, now with pollen counts."),
                      *[Document(t, x) for t, x in TOOLS.items() if t != "weather"], Document("new", "A new tool.")])
    r.index(changed, c)
    assert r.last_stats["index"] == {"documents": 11, "trained_tools": 9, "encoder_only": 2}
    enc = c.encoders.encode("all-MiniLM-L6-v2", [changed.get("new").full_text], normalize=True)[0]
    np.testing.assert_allclose(r.doc_embeddings[changed.row("new")], enc, atol=1e-5)

    # declared training data: the training queries, never the tools; the leakage check uses it
    td = r.training_data(c)
    assert td.query_ids == {"tiny": frozenset(q.id for q in train.eval_queries)} and not td.doc_ids
    check_unseen(td, test, "colt")  # disjoint queries: allowed
    with pytest.raises(LeakageError):
        check_unseen(td, train, "colt")
    assert declared_training_data(train).query_texts == td.query_texts


def test_holdout_validation_without_dev(ctx: RunContext, tmp_path: Path) -> None:
    train = tool_bench("tiny:train", 40, 0, "tr")
    c = RunContext(seed=0, device="cpu", encoders=ctx.encoders, cache_dir=tmp_path / "cache")
    r = COLT(ColtParams(**{**FAST, "layers": "1", "cache": False}))
    r.fit(train, c)
    fit = r.last_stats["fit"]
    assert fit["validation"]["source"] == "holdout" and fit["validation"]["queries"] == 4
    assert fit["graph"]["queries"] == 36  # the held-out queries are not in the graph
    card = json.loads((Path(fit["artifact"]) / "colt_card.json").read_text())
    held_out = {q.id for q in train.eval_queries} - set(card["training_data"]["query_ids"]["tiny"])
    assert len(held_out) == 4


def write_folder(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "qrels").mkdir()
    with open(root / "corpus.jsonl", "w") as f:
        for t, text in TOOLS.items():
            f.write(json.dumps({"_id": t, "title": "", "text": text}) + "\n")
    splits = {"train": tool_bench("x", 30, 0, "a"), "dev": tool_bench("x", 6, 100, "b"), "test": tool_bench("x", 6, 200, "c")}
    with open(root / "queries.jsonl", "w") as f:
        for b in splits.values():
            for q in b.eval_queries:
                f.write(json.dumps({"_id": q.id, "text": q.text}) + "\n")
    for split, b in splits.items():
        with open(root / "qrels" / f"{split}.tsv", "w") as f:
            f.write("query-id\tcorpus-id\tscore\n")
            for q in b.eval_queries:
                for d in sorted(b.judgments.relevant(q.id, 1)):
                    f.write(f"{q.id}\t{d}\t1\n")
    return root


def test_runner_fits_on_train_checks_leakage_and_records_the_fit(tmp_path: Path) -> None:
    from harness.registry import make_spec
    from harness.run.runner import Runner, Settings
    from harness.store.results import Store

    data = write_folder(tmp_path / "tools")
    store = Store(tmp_path / "h" / "results.sqlite")
    runner = Runner(Settings(home=tmp_path / "h", k=5, bootstrap=0), store, log=lambda m: None)
    [out] = runner.run([make_spec("colt", {**FAST, "layers": "1"})], [str(data)], [0])
    rec = store.get(out.key, full=True)
    fit = rec.extra["retriever"]["fit"]
    assert fit["validation"]["source"] == "dev" and fit["graph"]["queries"] == 30
    assert "fit" in rec.phases and rec.extra["counters"]["colt.trained"] == 1
    assert set(rec.rankings) == {f"q{i}" for i in range(200, 206)} and all(len(r) == 5 for r in rec.rankings.values())
    # scored on its own train split, the declared training data stops the run before any work
    with pytest.raises(LeakageError):
        runner.run_one(make_spec("colt", {**FAST, "layers": "1"}), runner.load_benchmark(f"{data}:train")[0], 0)


@pytest.mark.slow
def test_semantic_stage_trains_and_serves_the_encoder(ctx: RunContext, tmp_path: Path) -> None:
    train, dev = tool_bench("tiny:train", 30, 0, "tr"), tool_bench("tiny:dev", 6, 100, "dv")
    c = RunContext(seed=0, device="cpu", encoders=ctx.encoders, cache_dir=tmp_path / "home" / "cache", validation=dev)
    r = COLT(ColtParams(**{**FAST, "layers": "1", "semantic_epochs": 1, "semantic_batch_size": 8}))
    r.fit(train, c)
    sem = r.last_stats["fit"]["semantic"]
    assert sem["pairs"] == 60 and sem["steps"] >= 60 // 8 and len(sem["epoch_loss"]) == 1
    enc_dir = Path(r.last_stats["fit"]["artifact"]) / "encoder"
    assert r.encoder_name == str(enc_dir) and (enc_dir / "config.json").is_file()
    q = dev.eval_queries[:3]
    fine = r.encode_queries(q, c)
    base = c.encoders.encode("all-MiniLM-L6-v2", [x.text for x in q], normalize=True)
    assert np.abs(fine - base).max() > 1e-4  # the query encoder moved
