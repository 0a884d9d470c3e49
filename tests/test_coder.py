"""CoDeR: the Seq and Union policies against an independent pure-Python formulation, the MNRL loss
against a hand-written one, a small real training run (card, data hashes, no leakage, the margin
it learns), the runner's refusal to score a trained encoder on data it saw, and the CLI end to end
(run, train, sweep)."""

from __future__ import annotations

import json
import math
import random
from pathlib import Path

import numpy as np
import pytest

from harness.core.leakage import LeakageError, TrainingData, check_unseen, overlap, text_digest
from harness.registry import load_benchmark, make_spec
from harness.store.results import Store
from harness.run.tuning import expand_range, parse_grid
from harness.types import Benchmark
from tests.factories import make_benchmark, make_corpus
from retrievers.coder import reciprocal_ranks, seq_policy, strictly_decreasing, union_policy
from retrievers.coder_train import (CoderTrainConfig, batches, mnrl_reference, read_card, stage2_triplets,
                                    train_coder, Triplet)

from conftest import SHARED_DATA
from test_cli import invoke

NEED_DATA = pytest.mark.skipif(not (SHARED_DATA / "nevir" / "coder").is_dir() or
                               not (SHARED_DATA / "excluir" / "coder" / "train").is_dir() or
                               not (SHARED_DATA / "coder_train").is_dir(),
                               reason=f"CoDeR training data not found under {SHARED_DATA}")


# --- the policies ------------------------------------------------------------------------------

def _seq_reference(s_t, s_c, alpha, tau, k, fill="topical"):
    """CoDeR-Seq written out with Python sorting: the candidates with s_C ≥ τ by fused, s_C, s_T,
    position; then (``fill="topical"``) the others by s_T, s_C, position."""
    items = [(alpha * t + (1 - alpha) * c, c, t, i) for i, (t, c) in enumerate(zip(s_t, s_c)) if c >= tau]
    items.sort(key=lambda x: (-x[0], -x[1], -x[2], x[3]))
    rest = sorted((i for i, c in enumerate(s_c) if c < tau), key=lambda i: (-s_t[i], -s_c[i], i))
    return ([i for *_, i in items] + (rest if fill == "topical" else []))[:k]


def _quantile(values, q):
    """Linear-interpolation quantile (numpy's default), written out."""
    v = sorted(values)
    pos = q * (len(v) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def _union_reference(s_t, s_c, alpha, p, k, direction):
    n = len(s_t)
    by_t = sorted(range(n), key=lambda i: (-s_t[i], -s_c[i], i))
    by_c = sorted(range(n), key=lambda i: (-s_c[i], -s_t[i], i))
    rt = {i: 1.0 / (r + 1) for r, i in enumerate(by_t)}
    rc = {i: 1.0 / (r + 1) for r, i in enumerate(by_c)}
    gamma = _quantile(list(rc.values()), p if direction == "drop" else 1 - p)
    keep = [i for i in range(n) if rc[i] >= gamma - 1e-12] or list(range(n))
    items = sorted(keep, key=lambda i: (-(alpha * rt[i] + (1 - alpha) * rc[i]), -s_c[i], -s_t[i], i))
    return items[:k], len(keep)


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("fill", ["topical", "none"])
def test_seq_policy_matches_reference(seed: int, fill: str) -> None:
    rng = np.random.default_rng(seed)
    s_t = np.round(rng.uniform(-0.2, 1, 60), 2)  # rounded: ties in both scores happen
    s_c = np.round(rng.uniform(-0.2, 1, 60), 2)
    for alpha, tau in ((0.2, 0.3), (0.5, 0.9), (0.0, -1.0), (1.0, 0.5), (0.5, 1.5)):
        for k in (25, 60):
            ranked, scores, passed = seq_policy(s_t, s_c, alpha, tau, k, fill)
            assert list(ranked) == _seq_reference(s_t, s_c, alpha, tau, k, fill)
            assert passed == int((s_c >= tau).sum())
            assert np.all(np.diff(scores) < 0)


def test_seq_policy_never_empties_a_ranking() -> None:
    """No s_C reaches τ (the topical default τ = 0.9 under an encoder whose scores stay lower):
    the ranking is the topical one — every candidate, by s_T, scored by s_T."""
    rng = np.random.default_rng(7)
    s_t = rng.permutation(np.linspace(0.9, 0.1, 100))
    s_c = rng.uniform(0.0, 0.85, 100)
    ranked, scores, passed = seq_policy(s_t, s_c, 0.5, 0.9, 100)
    topical = sorted(range(100), key=lambda i: -s_t[i])
    assert passed == 0 and list(ranked) == topical
    assert scores == pytest.approx([s_t[i] for i in topical])
    assert list(seq_policy(s_t, s_c, 0.5, 0.9, 10)[0]) == topical[:10]
    # Eq. 7 read literally drops them all
    assert len(seq_policy(s_t, s_c, 0.5, 0.9, 100, fill="none")[0]) == 0


def test_seq_policy_hand_case() -> None:
    # s_T favours d0, s_C vetoes it; α = 0.2: fused d1 = .2·.8 + .8·.9 = .88, d2 = .2·.7 + .8·.4 = .46;
    # d0 follows, just below the last kept one
    ranked, scores, passed = seq_policy([0.9, 0.8, 0.7], [0.1, 0.9, 0.4], 0.2, 0.3, 10)
    assert list(ranked) == [1, 2, 0] and passed == 2
    assert scores == pytest.approx([0.88, 0.46, 0.46 - 1e-6], abs=1e-9)
    ranked, scores, _ = seq_policy([0.9, 0.8, 0.7], [0.1, 0.9, 0.4], 0.2, 0.3, 10, fill="none")
    assert list(ranked) == [1, 2] and scores == pytest.approx([0.88, 0.46])
    # α = 0.5, τ = 0.9: only d3 passes. The others follow in topical order (d0, d1, d2), not by the
    # fused score (d1 .65, d0 .5, d2 .45), keeping their s_T gaps (.1) below d3's fused .775
    ranked, scores, passed = seq_policy([0.9, 0.8, 0.7, 0.6], [0.1, 0.5, 0.2, 0.95], 0.5, 0.9, 10)
    assert list(ranked) == [3, 0, 1, 2] and passed == 1
    assert scores == pytest.approx([0.775, 0.775 - 1e-6, 0.675 - 1e-6, 0.575 - 1e-6], abs=1e-9)
    # k cuts the list after the kept ones are placed
    assert list(seq_policy([0.9, 0.8, 0.7, 0.6], [0.1, 0.5, 0.2, 0.95], 0.5, 0.9, 2)[0]) == [3, 0]


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("direction", ["drop", "keep"])
def test_union_policy_matches_reference(seed: int, direction: str) -> None:
    rng = np.random.default_rng(100 + seed)
    n = int(rng.integers(5, 150))
    s_t = np.round(rng.uniform(0, 1, n), 2)
    s_c = np.round(rng.uniform(0, 1, n), 2)
    for alpha, p in ((0.3, 0.1), (0.8, 0.8), (0.5, 0.0), (0.5, 1.0)):
        ranked, scores, passed = union_policy(s_t, s_c, alpha, p, 20, direction)
        ref, n_keep = _union_reference(list(s_t), list(s_c), alpha, p, 20, direction)
        assert list(ranked) == ref
        assert passed == n_keep
        assert np.all(np.diff(scores) < 0)


def test_union_directions_keep_the_documented_share() -> None:
    s = np.linspace(1, 0, 200)
    t = np.random.default_rng(0).permutation(s)
    assert union_policy(t, s, 0.3, 0.1, 1000, "drop")[2] == 180  # p = share dropped: ~90 % kept
    assert union_policy(t, s, 0.3, 0.1, 1000, "keep")[2] == 20  # p = share kept
    assert union_policy(t, s, 0.8, 0.8, 1000, "drop")[2] == 40
    assert union_policy(t, s, 0.8, 0.8, 1000, "keep")[2] == 160


def test_reciprocal_ranks_and_strictly_decreasing() -> None:
    assert list(reciprocal_ranks(np.array([0.1, 0.5, 0.5]), np.array([0.0, 0.2, 0.9]))) == [1 / 3, 1 / 2, 1.0]
    out = strictly_decreasing(np.array([1.0, 1.0, 0.5, 0.5, 0.5]), eps=1e-3)
    assert out == pytest.approx([1.0, 0.999, 0.5, 0.499, 0.498])


def test_grid_ranges() -> None:
    assert expand_range("0:1:0.25") == ["0.0", "0.25", "0.5", "0.75", "1.0"]
    assert len(expand_range("0:1:0.1")) == 11 and expand_range("0:1:0.1")[3] == "0.3"
    assert parse_grid(["alpha=0:1:0.5", "tau=0.1,0.3"]) == {"alpha": ["0.0", "0.5", "1.0"], "tau": ["0.1", "0.3"]}
    for bad in ("1:0:0.1", "0:1:0", "a:b:c", "0:1"):
        with pytest.raises(ValueError):
            expand_range(bad)


# --- the leakage check -------------------------------------------------------------------------

def _bench(name: str, queries: dict[str, str], docs: dict[str, str]) -> Benchmark:
    rel = {q: {next(iter(docs)): 2} for q in queries}
    return make_benchmark(make_corpus(docs), queries, rel, name=name, version=f"v-{name}", task="constraint")


def test_check_unseen_catches_versions_ids_and_texts() -> None:
    td = TrainingData(({"benchmark": "toy:train", "version": "v-toy:train"},), {"toy": frozenset({"q1"})},
                      {"toy": frozenset({"d1"})}, frozenset({text_digest("Which mayor vetoed more?")}),
                      frozenset({text_digest("A passage  about mayors.")}))
    clean = _bench("toy", {"q9": "another query"}, {"d9": "another passage"})
    check_unseen(td, clean, "coder-seq")  # nothing shared: no error
    assert overlap(td, _bench("toy:train", {"q9": "x"}, {"d9": "y"})) == {"version": ["toy:train"]}
    assert overlap(td, _bench("toy", {"q1": "x"}, {"d9": "y"})) == {"query ids": ["q1"]}
    assert overlap(td, _bench("other", {"q1": "x"}, {"d1": "y"})) == {}  # ids are per benchmark family
    # the same texts under other ids, in another benchmark: normalised case and spacing
    found = overlap(td, _bench("other", {"z": "which MAYOR vetoed   more?"}, {"w": "a passage about mayors."}))
    assert found == {"query texts": ["z"], "document texts": ["w"]}
    with pytest.raises(LeakageError, match=r"refusing to score on other: .*1 query texts \(e\.g\. z\)"):
        check_unseen(td, _bench("other", {"z": "Which mayor vetoed more?"}, {"w": "fresh"}), "coder-seq")
    assert TrainingData.from_dict(td.to_dict()) == td


# --- the loss and the batches ------------------------------------------------------------------

def test_library_mnrl_equals_the_written_out_loss() -> None:
    import torch

    from harness.models.pool import load_encoder
    from retrievers.train_step import mnrl_class

    MultipleNegativesRankingLoss = mnrl_class()

    model = load_encoder("all-MiniLM-L6-v2", "cpu")
    q = ["not hot", "a city without cars", "cold"]
    p = ["cold weather", "car-free town", "chilly"]
    n = ["hot weather", "a city full of cars", "warm"]
    feats = [model.preprocess(x) if hasattr(model, "preprocess") else model.tokenize(x) for x in (q, p, n)]
    with torch.no_grad():
        lib = float(MultipleNegativesRankingLoss(model, scale=20.0)(feats, None))
    emb = [model.encode(x, convert_to_numpy=True, normalize_embeddings=False) for x in (q, p, n)]
    assert lib == pytest.approx(mnrl_reference(*emb, scale=20.0), abs=1e-4)


def test_no_duplicate_batches() -> None:
    trips = [Triplet(f"w{i % 7}", f"p{i}", f"n{i % 5}") for i in range(60)]
    plan = batches(trips, 4, random.Random(0), True)
    assert sorted(i for b in plan for i in b) == list(range(60))
    for b in plan:
        texts = [t for i in b for t in (trips[i].query, trips[i].positive, trips[i].negative)]
        assert len(texts) == len(set(texts))
        assert len(b) <= 4


# --- a real (small) training run ----------------------------------------------------------------

def _loader(name: str):
    return load_benchmark(name, SHARED_DATA)


@pytest.fixture(scope="module")
def artifact(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not (SHARED_DATA / "coder_train").is_dir():
        pytest.skip(f"CoDeR training data not found under {SHARED_DATA}")
    home = tmp_path_factory.mktemp("coder-home")
    cfg = CoderTrainConfig(stage1_max=96, stage2_per_source=48, lr=1e-4, seed=0)
    return train_coder(cfg, home=home, data_dir=SHARED_DATA, load_benchmark=_loader, device="cpu", log=lambda m: None)


@NEED_DATA
def test_card_records_the_training(artifact: Path) -> None:
    card = read_card(artifact)
    assert card["base_model"] == "all-MiniLM-L6-v2" and card["pooling"] == "mean" and card["seed"] == 0
    s1, s2 = card["stages"]
    assert (s1["name"], s1["triplets"], s1["steps"]) == ("stage1", 96, 6)
    assert s2["triplets"] == 96 and s2["steps"] >= 6  # 48 + 48; no-duplicates batches may add one
    assert [s["benchmark"] for s in s2["sources"]] == ["nevir:train", "excluir:train"]
    assert all(len(s["sha256"]) == 64 for s in (s1, s2))
    assert all(isinstance(x, float) for x in s1["loss_curve"]) and card["wall_s"] > 0
    td = card["training_data"]
    assert len(td["query_ids"]["nevir"]) == 48 and len(td["query_ids"]["excluir"]) == 48
    # a satisfying and a violating document per query; both queries of a NevIR pair share theirs
    assert 48 < len(td["doc_ids"]["nevir"]) <= 96 and len(td["doc_ids"]["excluir"]) > 48
    # the same configuration is found, not retrained
    again = train_coder(CoderTrainConfig(stage1_max=96, stage2_per_source=48, lr=1e-4, seed=0),
                        home=artifact.parents[2], data_dir=SHARED_DATA, load_benchmark=_loader, device="cpu",
                        log=lambda m: pytest.fail("retrained"))
    assert again == artifact


@NEED_DATA
@pytest.mark.parametrize("bench", ["nevir", "excluir", "diag/antonym"])
def test_no_training_data_in_any_evaluation_split(artifact: Path, bench: str) -> None:
    td = TrainingData.from_dict(read_card(artifact)["training_data"])
    b = _loader(bench)
    assert overlap(td, b) == {}
    check_unseen(td, b, "coder-seq")


@NEED_DATA
def test_full_sampling_never_touches_the_test_splits() -> None:
    """All 1,600 stage-2 queries of the paper's recipe (and their documents) against the test splits."""
    _, td, facts = stage2_triplets(CoderTrainConfig(seed=0), _loader)
    assert [f["queries"] for f in facts] == [800, 800]
    # two NevIR train pairs hold a document whose text is also in the NevIR test split: left out
    assert [f["excluded_queries"] for f in facts] == [4, 0]
    assert [f["usable_queries"] for f in facts] == [1892, 2687]
    for name in ("nevir", "excluir", "diag/antonym"):
        assert overlap(td, _loader(name)) == {}, name
    # without the exclusion the check finds that document
    _, td_all, _ = stage2_triplets(CoderTrainConfig(seed=0, stage2_exclude="", stage2_per_source=None), _loader)
    assert overlap(td_all, _loader("nevir")) == {"document texts": ["nevir_doc_1015-2_1"]}
    assert set(overlap(td, _loader("nevir:train"))) == {"version", "query ids", "document ids", "query texts",
                                                        "document texts"}


@NEED_DATA
def test_training_raises_the_margin_on_what_it_saw(artifact: Path) -> None:
    """The satisfying-minus-violating margin on the stage-2 training triplets grows with training."""
    from harness.models.pool import load_encoder

    trips, _, _ = stage2_triplets(CoderTrainConfig(stage2_per_source=48, seed=0), _loader)

    def margin(model) -> float:
        q, p, n = (model.encode(x, normalize_embeddings=True) for x in (
            [t.query for t in trips], [t.positive for t in trips], [t.negative for t in trips]))
        return float(np.mean(np.sum(q * p, 1) - np.sum(q * n, 1)))

    base, trained = margin(load_encoder("all-MiniLM-L6-v2", "cpu")), margin(load_encoder(str(artifact), "cpu"))
    assert trained > base + 0.01, (base, trained)


@NEED_DATA
def test_runner_refuses_a_split_the_encoder_saw(artifact: Path, home: Path) -> None:
    res = invoke("run", "coder-seq", "-p", f"coder-seq.compat_model={artifact}", "-b", "nevir:train",
                 "--max-queries", "10")
    assert res.exit_code != 0
    assert "refusing to score on nevir:train" in res.output and "query ids" in res.output


# --- end to end through the CLI -----------------------------------------------------------------

@NEED_DATA
def test_cli_run_train_and_sweep(artifact: Path, home: Path, tmp_path: Path) -> None:
    res = invoke("run", "coder-seq", "coder-union", "-p", f"coder-seq.compat_model={artifact}",
                 "-p", f"coder-union.compat_model={artifact}", "-b", "diag/antonym")
    assert res.exit_code == 0, res.output
    store = Store(home / "results.sqlite")
    recs = {r.retriever: store.get(r.key, full=True) for r in store.results()}
    seq, union = recs["coder-seq"], recs["coder-union"]
    for rec in (seq, union):
        assert rec.llm_calls == [] and set(rec.phases) >= {"fit", "index", "search", "evaluate"}
        ex = rec.extra["retriever"]
        assert ex["compat"]["trained"] and ex["compat"]["card"]["steps"] == read_card(artifact)["steps"]
        sep = rec.extra["analysis"]["score_separation"]
        assert sep["compat"]["queries"] == sep["base"]["queries"] > 50
        assert len(sep["compat"]["margins"]) == sep["compat"]["queries"]
        assert sep["base"]["model"] == "all-MiniLM-L6-v2"
        m = np.array(list(sep["compat"]["margins"].values()))
        assert sep["compat"]["margin_mean"] == pytest.approx(m.mean())
    # the paper's constraint-task defaults were resolved
    assert (seq.extra["retriever"]["alpha"], seq.extra["retriever"]["tau"]) == (0.2, 0.3)
    assert (union.extra["retriever"]["alpha"], union.extra["retriever"]["percentile"]) == (0.3, 0.1)
    src = seq.extra["retriever"]["tau_source"]
    assert (src["from"], src["task_family"], src["encoder"]) == ("paper default", "constraint", str(artifact))
    assert "bge-large-en-v1.5" in src["scale"]
    search = seq.extra["retriever"]["search"]
    assert search["queries"] == seq.n_queries and search["kept"]["min"] <= search["kept"]["mean"] <= 100
    # Seq's rankings: the candidates that pass the filter first, then the others in topical order;
    # check one against the encoders
    from harness.models.pool import load_encoder

    bench = _loader("diag/antonym")
    q = bench.eval_queries[0]
    ranked = [d for d, _ in store.rankings(store.results(retriever="coder-seq")[0].id, [q.id])[q.id]]
    texts = [bench.corpus.get(d).full_text for d in ranked]
    comp, topical = load_encoder(str(artifact), "cpu"), load_encoder("all-MiniLM-L6-v2", "cpu")
    s_c = comp.encode(texts, normalize_embeddings=True) @ comp.encode([q.text], normalize_embeddings=True)[0]
    s_t = topical.encode(texts, normalize_embeddings=True) @ topical.encode([q.text], normalize_embeddings=True)[0]
    n_kept = int((s_c >= 0.3).sum())
    assert np.all(s_c[:n_kept] >= 0.3 - 1e-4) and np.all(s_c[n_kept:] < 0.3 + 1e-4)
    assert np.all(np.diff(s_t[n_kept:]) <= 1e-5)

    # an untrained compatibility encoder is the ablation, with no card and no base comparison
    res = invoke("run", "coder-seq", "-p", "coder-seq.compat_model=all-MiniLM-L6-v2", "-b", "diag/antonym")
    assert res.exit_code == 0, res.output
    plain = [r for r in store.results(retriever="coder-seq") if r.spec["params"]["compat_model"] == "all-MiniLM-L6-v2"]
    plain = store.get(plain[0].key, full=True)
    assert not plain.extra["retriever"]["compat"]["trained"] and "base" not in plain.extra["analysis"]["score_separation"]

    # the sweep: every grid point's measures, stored for the reports
    res = invoke("sweep", "coder-union", "-b", "diag/antonym", "-p", f"compat_model={artifact}",
                 "-g", "alpha=0:1:0.5", "-g", "percentile=0.1,0.8", "-o", str(tmp_path / "sweep.json"))
    assert res.exit_code == 0, res.output
    (sw,) = store.sweeps(retriever="coder-union")
    assert sw["axes"] == {"alpha": [0.0, 0.5, 1.0], "percentile": [0.1, 0.8]} and len(sw["points"]) == 6
    # a grid point scored as an ordinary run gives the same figures
    res = invoke("run", "coder-union", "-p", f"coder-union.compat_model={artifact}", "-p", "coder-union.alpha=0.5",
                 "-p", "coder-union.percentile=0.8", "-b", "diag/antonym")
    assert res.exit_code == 0, res.output
    rec = next(store.get(r.key) for r in store.results(retriever="coder-union") if r.spec["params"]["alpha"] == 0.5)
    p = next(p for p in sw["points"] if p["params"] == {"alpha": 0.5, "percentile": 0.8})
    for m in ("R@10", "FVR@10", "V@2", "nDCG@10"):
        assert p["measures"][m] == pytest.approx(rec.measures[m].mean)
    assert json.loads((tmp_path / "sweep.json").read_text())["points"] == sw["points"]


@NEED_DATA
def test_compat_alone_ranks_by_the_trained_encoder(artifact: Path, home: Path) -> None:
    """coder-compat (Table 10's middle row) against the artifact's embeddings ranked by numpy, and
    with an untrained MiniLM as E_C, against dense: the same rankings and the same figures."""
    from harness.models.pool import load_encoder

    res = invoke("run", "coder-compat", "-p", f"coder-compat.compat_model={artifact}", "-b", "diag/antonym")
    assert res.exit_code == 0, res.output
    store = Store(home / "results.sqlite")
    (row,) = store.results(retriever="coder-compat")
    rec = store.get(row.key, full=True)
    assert rec.extra["retriever"]["compat"]["trained"] and rec.extra["analysis"]["score_separation"]["base"]
    bench = _loader("diag/antonym")
    ids = bench.corpus.ids
    comp = load_encoder(str(artifact), "cpu")
    dc = comp.encode(bench.corpus.texts(), normalize_embeddings=True)
    qs = bench.eval_queries[:5]
    qc = comp.encode([q.text for q in qs], normalize_embeddings=True)
    stored = store.rankings(row.id, [q.id for q in qs])
    for q, e in zip(qs, qc):
        s = dc @ e
        got = [d for d, _ in stored[q.id][:10]]
        want = [ids[i] for i in np.argsort(-s, kind="stable")[:10]]
        # the same documents in the same order, up to ties within float32 noise
        assert [round(float(s[ids.index(d)]), 4) for d in got] == [round(float(s[ids.index(d)]), 4) for d in want]
    # an untrained compatibility encoder alone is dense retrieval with that encoder
    for args in (("coder-compat", "-p", "coder-compat.compat_model=all-MiniLM-L6-v2"), ("dense",)):
        res = invoke("run", *args, "-b", "diag/antonym")
        assert res.exit_code == 0, res.output
    plain = next(store.get(r.key) for r in store.results(retriever="coder-compat")
                 if r.spec["params"].get("compat_model") == "all-MiniLM-L6-v2")
    dense = store.get(store.results(retriever="dense")[0].key)
    for m in ("V@2", "FVR@10", "nDCG@10", "Sat@10"):
        assert plain.measures[m].mean == pytest.approx(dense.measures[m].mean, abs=1e-6), m
    qids = [q.id for q in bench.eval_queries]
    trained_runs, plain_runs = store.rankings(row.id, qids), store.rankings(plain.id, qids)
    assert any(trained_runs[q] != plain_runs[q] for q in qids)  # training moved the rankings


def test_make_spec_rejects_bad_policy_params() -> None:
    from harness.registry import instantiate

    with pytest.raises(ValueError, match="direction"):
        instantiate(make_spec("coder-union", {"direction": "up"}))
    with pytest.raises(ValueError, match="alpha"):
        instantiate(make_spec("coder-seq", {"alpha": 1.5}))
    with pytest.raises(ValueError, match="fill"):
        instantiate(make_spec("coder-seq", {"fill": "append"}))
    with pytest.raises(ValueError, match="not both"):
        instantiate(make_spec("coder-seq", {"tau": 0.5, "tau_quantile": 0.5}))
    with pytest.raises(ValueError, match="tau_quantile"):
        instantiate(make_spec("coder-seq", {"tau_quantile": 1.5}))
    with pytest.raises(ValueError, match="unknown parameter"):
        make_spec("coder-seq", {"percentile": 0.1})


@NEED_DATA
def test_cli_train_writes_an_artifact_and_lists_trainers(home: Path, tmp_path: Path) -> None:
    res = invoke("list", "trainers")
    assert res.exit_code == 0 and "coder" in res.output and "stage2_per_source" in res.output
    res = invoke("train", "coder", "-p", "stage1_max=16", "-p", "stage2_per_source=8", "-p", "seed=3",
                 "--out", str(tmp_path / "enc"))
    assert res.exit_code == 0, res.output
    card = read_card(tmp_path / "enc")
    assert card["seed"] == 3 and [s["triplets"] for s in card["stages"]] == [16, 16]
    assert "compat_model=" in res.output
    res = invoke("train", "coder", "-p", "stage1_max=16", "-p", "nope=1")
    assert res.exit_code == 2 and "unknown parameter(s) nope" in res.output
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"query": "hot", "positive": "warm"}\n')
    res = invoke("train", "coder", "-p", f"stage1={bad}", "-p", "stage2=")
    assert res.exit_code == 2 and f"{bad}:1" in res.output and "hard_negative" in res.output
