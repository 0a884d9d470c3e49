"""Cold-equivalent cost (harness/cost/figures.py): a result that reuses cached embeddings and a model it did
not load is charged what they cost to compute, so its cold offline cost does not depend on what ran
before it, while its this-run figure shows the cache hit. Real runs of dense and nnn-fix on the
CoDeR antonym diagnostic (210 passages) with all-MiniLM-L6-v2 on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.cost.figures import Costs, Money, derive_cold, result_cost
from harness.store.results import Store
from tests.factories import make_record
from tests.test_cli import invoke

BENCH = "diag/antonym"
ROOT = Path(__file__).resolve().parent.parent


def run(home: Path, monkeypatch: pytest.MonkeyPatch, data: Path, *retrievers: str) -> None:
    """``beyondsim run R -b diag/antonym`` for each retriever, each in a process of its own (as on the
    command line: nothing loaded by an earlier command)."""
    env = {**os.environ, "BEYONDSIM_HOME": str(home), "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    for r in retrievers:
        res = subprocess.run([sys.executable, "-c", "from harness.cli import app; app()", "run", r, "--benchmark",
                              BENCH, "--data-dir", str(data)], env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, res.stdout + res.stderr


def dense(home: Path):
    return next(r for r in Store(home / "results.sqlite").results() if r.retriever == "dense")


def test_dense_after_nnn_fix_costs_what_it_costs_in_a_fresh_home(tmp_path: Path, shared_data: Path,
                                                                  monkeypatch: pytest.MonkeyPatch, no_network) -> None:
    fresh, warm = tmp_path / "fresh", tmp_path / "warm"
    run(fresh, monkeypatch, shared_data, "dense")
    run(warm, monkeypatch, shared_data, "nnn-fix", "dense")
    a, b = result_cost(dense(fresh)), result_cost(dense(warm))
    print(f"\nfresh home: cold offline {a.offline_s:.3f} s (this run {a.run_offline_s:.3f} s, model {a.model_s:.3f} s), "
          f"cached: {a.cached or '-'}\nafter nnn-fix: cold offline {b.offline_s:.3f} s (this run {b.run_offline_s:.3f} s, "
          f"model {b.model_s:.3f} s), cached: {b.cached}; ratio {b.offline_s / a.offline_s:.2f}")
    # the fresh run encoded the corpus and loaded the model itself: nothing came from a cache
    assert a.cached == () and a.reused_unknown == 0
    assert a.offline_s == pytest.approx(a.run_offline_s + a.model_s)
    # after nnn-fix, dense read the corpus embeddings and skipped loading the model: this run is cheap ...
    assert set(b.cached) == {"embeddings", "model"} and b.reused_unknown == 0
    assert b.run_offline_s < 0.25 * a.run_offline_s
    # ... and its cold cost is what nnn-fix paid to encode the corpus and load the model (within noise)
    assert 0.6 < b.offline_s / a.offline_s < 1.6
    assert b.offline_s > 3 * b.run_offline_s
    # the audit shows the cold figures by default and the this-run ones beside them
    monkeypatch.setenv("BEYONDSIM_HOME", str(warm))
    rows = json.loads(invoke("audit", "-f", "json", "-r", "dense").stdout)
    assert len(rows) == 1
    assert rows[0]["offline_s"] == pytest.approx(b.offline_s, abs=1e-3)
    assert rows[0]["run_offline_s"] == pytest.approx(b.run_offline_s, abs=1e-3)
    assert rows[0]["cached"] == "embeddings;model"


def rec(key: str, label: str, bench: str, model: str, index_s: float, docs: int, fit: bool = False,
        model_s: float | None = None):
    phases = {"index": {"wall_s": index_s, "cpu_s": index_s, "items": docs},
              "search": {"wall_s": 1.0, "cpu_s": 1.0, "items": 10}}
    if fit:
        phases["fit"] = {"wall_s": 100.0, "cpu_s": 100.0, "items": 0}
    if model_s is not None:
        phases["model"] = {"wall_s": model_s, "cpu_s": model_s, "items": 0}
    return make_record(label, key=key, spec_hash=key, spec={"params": {"model": model}}, benchmark=bench,
                       benchmark_version="v", k=10, harness_version="0", n_queries=10, phases=phases)


def test_results_stored_before_costs_were_recorded_are_derived_from_their_neighbours() -> None:
    recs = [rec("d1", "dense", "a", "m", 20.0, 1000, model_s=4.0), rec("n1", "nnn", "a", "m", 0.01, 1000),
            rec("c1", "coder", "a", "m", 0.02, 1000, fit=True),
            rec("d2", "dense", "b", "m", 0.01, 500), rec("n2", "nnn", "b", "m", 0.02, 500),
            rec("d3", "dense", "c", "m", 60.0, 2000)]
    costs = Costs(recs)
    nnn = costs.of(recs[1])
    # nnn on a: dense's 20 s index + the 4 s model load dense recorded, not its own 0.01 s
    assert nnn.offline_s == pytest.approx(24.0) and nnn.run_offline_s == pytest.approx(0.01)
    assert "dense's index time on a" in nnn.cold_basis and set(nnn.cached) == {"embeddings", "model"}
    # coder trained (fit 100 s) and read the corpus from the cache: fit + dense's encoding + model
    assert costs.of(recs[2]).offline_s == pytest.approx(124.0)
    # on b every result read the cache: the encoder's median rate (20/1000, 60/2000 → 0.025 s/doc) × 500
    d2 = costs.of(recs[3])
    assert d2.offline_s == pytest.approx(0.025 * 500 + 4.0) and "s/document" in d2.cold_basis
    # dense on a loaded the model itself: its own figures, nothing derived
    assert costs.of(recs[0]).offline_s == pytest.approx(24.0) and costs.of(recs[0]).cached == ()
    assert set(derive_cold(recs)) == {r.key for r in recs}


def test_money_prints_one_way() -> None:
    assert Money(0.0).text() == "$0" and Money(0.0011).text() == "$0.0011" and Money(12.345).text() == "$12.35"
    assert Money(0.0011, 1).text() == "≥ $0.0011" and Money(0.0, 2).text() == "unknown"
    assert (Money.of([0.001, None]) + Money.of([0.002])).fields("usd") == {
        "usd": None, "usd_known": 0.003, "usd_unknown_calls": 1}
