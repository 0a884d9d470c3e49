"""The demo suite end to end (slow: encodes NevIR's ~4.8k passages and the smaller benchmarks' with MiniLM on
the CPU), offline."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.registry import reference_files
from harness.store.results import Store
from harness.store.trust import is_reference, trust_of

pytestmark = pytest.mark.slow


def test_demo_suite_offline_and_rerun_is_free(home: Path, shared_data: Path, tmp_path: Path, no_network,
                                              share_embeddings, with_reference) -> None:
    share_embeddings(home)  # (NevIR may be encoded already by another slow test)
    res = CliRunner().invoke(app, ["run", "--suite", "demo", "--data-dir", str(shared_data),
                                   "--leaderboard", str(tmp_path / "lb")], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    store = Store(home / "results.sqlite")
    # the demo's own runs (the leaderboard also brought in the reference results, when shipped)
    got = {(r.retriever, r.benchmark): r for r in store.results() if not is_reference(r.extra)}
    assert len(got) == 15  # bm25, dense and random (the chance level) on the five benchmarks
    m = {k: {n: v.mean for n, v in r.measures.items()} for k, r in got.items()}
    # completeness: BM25 finds more of each NumPy task's tools than MiniLM does, and LIMIT-small's point: a
    # 384-d dense encoder cannot put both relevant documents of a query in its top 2, term matching can
    assert m["bm25", "toolbank/numpy"]["Comp@10"] > m["dense", "toolbank/numpy"]["Comp@10"] > 0.1
    assert m["random", "toolbank/numpy"]["Comp@10"] < 0.02
    assert m["bm25", "limit-small"]["R@2"] > 0.95 and m["dense", "limit-small"]["R@2"] < 0.3
    assert got["dense", "limit-small"].n_queries == 1000
    # dense retrieval puts fewer violating NevIR passages in the top 2 than BM25 does, and both are
    # far from solving NevIR (paired accuracy well under its 25% chance level for 2-doc ranking)
    assert m["dense", "nevir"]["V@2"] < m["bm25", "nevir"]["V@2"]
    assert m["bm25", "nevir"]["PairAcc"] < 0.25 and m["dense", "nevir"]["PairAcc"] < 0.25
    assert got["dense", "nevir"].measures["PairAcc"].n == 1383
    # the chance row: no violations to speak of, PairAcc at its chance level, and nothing satisfied
    assert m["random", "nevir"]["V@2"] < 0.01 and abs(m["random", "nevir"]["PairAcc"] - 0.25) < 0.03
    assert m["random", "nevir"]["Sat@10"] < 0.02 < m["bm25", "nevir"]["Sat@10"]
    assert got["bm25", "toolbank/numpy"].n_queries == 399
    html = (tmp_path / "lb" / "index.html").read_text()
    assert "toolbank/numpy" in html and "limit-small" in html
    # the demo's rows were computed here; the reference rows of every other method sit beside them
    assert all(trust_of(r.extra) == "reproduced" for r in got.values())
    bundle = reference_files().get("bundle")
    if bundle is not None and bundle.exists():
        ref = [r for r in store.results() if is_reference(r.extra)]
        assert ref and {r.retriever for r in ref} - {"bm25", "dense"}
        assert 'trust-verified' in html and 'trust-reproduced' in html

    res2 = CliRunner().invoke(app, ["run", "--suite", "demo", "--data-dir", str(shared_data)],
                              catch_exceptions=False)
    assert res2.exit_code == 0 and res2.output.count("result exists") == 15
    res3 = CliRunner().invoke(app, ["run", "dense", "-b", "nevir", "--data-dir", str(shared_data), "--force",
                                    "--seed", "0"], catch_exceptions=False)
    assert res3.exit_code == 0
    # the store also holds the bundle's reference copy of the same configuration: the own result is the one
    again, = [r for r in Store(home / "results.sqlite").results(retriever="dense", benchmark="nevir")
              if not is_reference(r.extra) and r.spec_hash == got["dense", "nevir"].spec_hash]
    assert again.extra["encoder_stats"]["encoded"] == 0  # every embedding came from the cache
    assert again.measures["V@2"].mean == pytest.approx(m["dense", "nevir"]["V@2"])
    assert no_network == []
