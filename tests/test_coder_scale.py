"""CoDeR-Seq's threshold against the compatibility encoder's score scale, on real SciFact text:
the paper's topical default τ = 0.9 under an encoder whose scores stay below it demotes nothing
away (the ranking is the topical one, never empty), the result says which τ was used and on which
scale, and ``tau_quantile`` calibrates τ on a held-out split's candidates (never on judgments).

The fast tests use a SciFact slice written as a BEIR folder (the path a user's own data takes) and
the untrained MiniLM as the compatibility encoder (the paper's Table 8 stand-in); the slow test
runs the full benchmark with the trained encoder."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.registry import load_benchmark, make_spec
from harness.run.runner import Runner, Settings
from harness.store.results import Store

from conftest import SHARED_DATA

SCIFACT = SHARED_DATA / "beir" / "scifact"
pytestmark = pytest.mark.skipif(not (SCIFACT / "qrels" / "train.tsv").is_file(),
                                reason=f"BEIR SciFact not found under {SCIFACT}")
STAND_IN = {"compat_model": "all-MiniLM-L6-v2"}


def _write_slice(root: Path, n_queries: int = 30, n_other: int = 250) -> Path:
    """The first ``n_queries`` judged test and train queries of SciFact, their judged documents and
    ``n_other`` further documents, as a BEIR folder with ``qrels/test.tsv`` and ``qrels/train.tsv``."""
    test, train = (load_benchmark(n, SHARED_DATA) for n in ("beir/scifact", "beir/scifact:train"))
    queries = {s: b.eval_queries[:n_queries] for s, b in (("test", test), ("train", train))}
    judged = {d for qs, b in ((queries["test"], test), (queries["train"], train))
              for q in qs for d in b.judgments.relevance[q.id]}
    docs = [d for d in test.corpus if d.id in judged] + [d for d in test.corpus if d.id not in judged][:n_other]
    root.mkdir(parents=True)
    with open(root / "corpus.jsonl", "w") as f:
        for d in docs:
            f.write(json.dumps({"_id": d.id, "title": d.title, "text": d.text}) + "\n")
    with open(root / "queries.jsonl", "w") as f:
        for q in queries["test"] + queries["train"]:
            f.write(json.dumps({"_id": q.id, "text": q.text}) + "\n")
    (root / "qrels").mkdir()
    for split, b in (("test", test), ("train", train)):
        rows = [f"{q.id}\t{d}\t{r}" for q in queries[split] for d, r in b.judgments.relevance[q.id].items()]
        (root / "qrels" / f"{split}.tsv").write_text("query-id\tcorpus-id\tscore\n" + "\n".join(rows) + "\n")
    return root


@pytest.fixture(scope="module")
def scifact_slice(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _write_slice(tmp_path_factory.mktemp("data") / "scifact-slice")


@pytest.fixture(scope="module")
def run_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One results store and embedding cache for the module (each text is encoded once)."""
    return tmp_path_factory.mktemp("home")


def _run(home: Path, specs, bench: str, log: list[str] | None = None) -> dict:
    store = Store(home / "results.sqlite")
    runner = Runner(Settings(home=home, data_dir=SHARED_DATA, bootstrap=0), store,
                    log=(log.append if log is not None else lambda m: None))
    return {o.spec.display: o.record for o in runner.run(specs, [bench], [0])}


def _minilm_scores(bench, home: Path) -> tuple[np.ndarray, np.ndarray]:
    """All query-document cosines under MiniLM (``(queries, documents)``) and each query's top 100
    documents by them: the candidates and s_T (and, with MiniLM standing in, s_C). The embeddings
    come from the runs' cache; the ranking is computed here."""
    from harness.models.pool import EncoderPool

    pool = EncoderPool(home / "cache", "cpu")
    d = pool.encode("all-MiniLM-L6-v2", bench.corpus.texts())
    q = pool.encode("all-MiniLM-L6-v2", [x.text for x in bench.eval_queries])
    sims = q @ d.T
    return sims, np.argsort(-sims, axis=1, kind="stable")[:, :100]


def test_default_tau_under_another_scale_keeps_the_topical_ranking(scifact_slice: Path, run_home: Path) -> None:
    log: list[str] = []
    recs = _run(run_home, [make_spec("coder-seq", STAND_IN), make_spec("dense")], str(scifact_slice), log)
    seq, dense = recs["coder-seq"], recs["dense"]
    bench = load_benchmark(str(scifact_slice), SHARED_DATA)
    # no MiniLM cosine between a SciFact query and its top-100 candidates reaches τ = 0.9: the filter
    # keeps nothing, and the ranking is the topical one instead of an empty one
    sims, top = _minilm_scores(bench, run_home)
    best = np.take_along_axis(sims, top, 1)
    assert best.max() < 0.9
    assert seq.measures["nDCG@10"].mean > 0.5
    assert seq.measures["nDCG@10"].mean == pytest.approx(dense.measures["nDCG@10"].mean, abs=0.01)
    for q in bench.eval_queries:  # position by position the dense scores (near-ties may swap)
        assert [s for _, s in seq.rankings[q.id]] == pytest.approx([s for _, s in dense.rankings[q.id]], abs=1e-5)
    ex = seq.extra["retriever"]
    assert ex["tau"] == 0.9 and ex["fill"] == "topical"
    src = ex["tau_source"]
    assert (src["from"], src["task_family"], src["encoder"]) == ("paper default", "topical", "all-MiniLM-L6-v2")
    assert "bge-large-en-v1.5" in src["scale"]
    assert ex["search"]["kept"] == {"mean": 0.0, "min": 0, "max": 0}
    assert ex["search"]["none_kept"] == ex["search"]["queries"] == 30 and ex["search"]["short_rankings"] == 0
    assert seq.extra["counters"]["coder.seq.none_kept"] == 30
    assert any("coder-seq: tau = 0.9 (the paper's default for topical tasks" in m and "kept no candidate for 30 of 30 queries" in m
               and "topical order" in m for m in log), log


def test_tau_quantile_calibrates_on_the_train_split(scifact_slice: Path, run_home: Path) -> None:
    recs = _run(run_home, [make_spec("coder-seq", {**STAND_IN, "tau_quantile": 0.9})], str(scifact_slice))
    ex = recs["coder-seq"].extra["retriever"]
    # τ: the 0.9-quantile of s_C over the top-100 topical candidates of the 30 train queries
    train = load_benchmark(f"{scifact_slice}:train", SHARED_DATA)
    sims, top = _minilm_scores(train, run_home)
    tau = float(np.quantile(np.take_along_axis(sims, top, 1), 0.9))
    assert ex["tau"] == pytest.approx(tau, abs=1e-4)
    src = ex["tau_source"]
    assert (src["from"], src["quantile"], src["split"], src["held_out"], src["queries"], src["scores"]) == (
        "calibrated", 0.9, f"{scifact_slice.resolve()}:train", True, 30, 3000)
    assert "not_used" not in src
    # what the filter kept on the test queries, counted from the same scores
    test = load_benchmark(str(scifact_slice), SHARED_DATA)
    sims, top = _minilm_scores(test, run_home)
    kept = (np.take_along_axis(sims, top, 1) >= ex["tau"]).sum(1)  # a score at τ itself may fall either way
    assert ex["search"]["kept"]["mean"] == pytest.approx(kept.mean(), abs=0.05)
    assert abs(ex["search"]["kept"]["min"] - kept.min()) <= 1 and abs(ex["search"]["kept"]["max"] - kept.max()) <= 1
    assert abs(ex["search"]["none_kept"] - int((kept == 0).sum())) <= 1
    assert 0 < kept.mean() < 100 and recs["coder-seq"].measures["nDCG@10"].mean > 0.5


def test_tau_quantile_never_reads_a_split_that_shares_the_queries(scifact_slice: Path, run_home: Path,
                                                                   tmp_path: Path) -> None:
    """A ``:train`` split holding the evaluated queries is not held out: τ comes from the evaluated
    queries' own candidates (their texts only), and the result says so."""
    folder = tmp_path / "same"
    shutil.copytree(scifact_slice, folder)
    shutil.copy(folder / "qrels" / "test.tsv", folder / "qrels" / "train.tsv")
    recs = _run(run_home, [make_spec("coder-seq", {**STAND_IN, "tau_quantile": 0.5})], str(folder))
    ex = recs["coder-seq"].extra["retriever"]
    sims, top = _minilm_scores(load_benchmark(str(folder), SHARED_DATA), run_home)
    assert ex["tau"] == pytest.approx(float(np.quantile(np.take_along_axis(sims, top, 1), 0.5)), abs=1e-4)
    src = ex["tau_source"]
    assert (src["split"], src["held_out"], src["queries"], src["scores"]) == (str(folder.resolve()), False, 30, 3000)
    assert src["not_used"] == f"{folder.resolve()}:train shares queries with the evaluated split"


@pytest.mark.slow
def test_coder_on_scifact_stays_near_dense(tmp_path: Path, share_embeddings) -> None:
    """Full BEIR SciFact with a trained compatibility encoder: trained here by the path
    ``beyondsim train coder`` takes, on a shorter schedule than the paper's (2,000 of the released
    lexical triplets and 200 queries per stage-2 source: about two minutes on a CPU instead of
    eleven; the reference bundle's ``coder*`` rows use the whole schedule)."""
    from retrievers.coder_train import CoderTrainConfig, read_card, train_coder

    home = share_embeddings(tmp_path / "home")
    encoder = train_coder(CoderTrainConfig(stage1_max=2000, stage2_per_source=200), home=home, data_dir=SHARED_DATA,
                          load_benchmark=lambda n: load_benchmark(n, SHARED_DATA), device="cpu", log=lambda m: None)
    card = read_card(encoder)
    assert [(s["name"], s["triplets"]) for s in card["stages"]] == [("stage1", 2000), ("stage2", 400)]
    compat = {"compat_model": str(encoder)}
    recs = _run(home, [make_spec("coder-seq", compat), make_spec("coder-union", compat), make_spec("dense")],
                "beir/scifact")
    ndcg = {name: r.measures["nDCG@10"].mean for name, r in recs.items()}
    assert ndcg["dense"] == pytest.approx(0.648, abs=0.005), ndcg  # MiniLM on the SciFact files here: 0.6484
    assert ndcg["coder-seq"] >= ndcg["dense"] - 0.05, ndcg
    assert ndcg["coder-union"] >= ndcg["dense"] - 0.05, ndcg
    # the trained encoder is not the topical one: CoDeR-Union's ranking moves
    assert ndcg["coder-union"] != ndcg["dense"], ndcg
    seq = recs["coder-seq"].extra["retriever"]
    assert seq["tau_source"]["from"] == "paper default" and seq["search"]["short_rankings"] == 0
