"""One description of a benchmark (docs/design/types.md#what-a-benchmark-is-benchmarkmeta): the
``BenchmarkMeta`` a loader declares is what the loaded benchmark gives back and what the store
keeps, relevance threshold included, through a store upgrade and an export/import."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest

from benchmarks.diagnostics import DiagnosticSet
from benchmarks.loader import LoaderBase
from benchmarks.nevir import NevIR
from harness.core.registry import get_benchmark_loader, load_benchmark
from harness.data import DatasetInfo
from harness.store.results import BenchmarkInfo, Store
from harness.types import BenchmarkMeta
from tests.factories import make_benchmark, make_corpus

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"


class Toy(LoaderBase):
    task = "constraint"
    description = "a toy"
    source = "nowhere"
    license = "CC0"
    subdir = "toy"
    files = ("corpus.jsonl",)
    default_measures = ("V@2",)
    relevance_threshold = 2


def test_the_loader_declares_one_meta_from_its_class_attributes() -> None:
    meta = Toy.info("toy")
    assert meta == BenchmarkMeta("toy", "constraint", "a toy", "nowhere", "CC0", files=["toy/corpus.jsonl"],
                                 subdir="toy", default_measures=("V@2",), relevance_threshold=2)
    assert DatasetInfo is BenchmarkMeta
    changed = Toy.declare("toy:x", description="other")
    assert (changed.name, changed.description, changed.relevance_threshold, changed.files) == ("toy:x", "other", 2, [])
    with pytest.raises(dataclasses.FrozenInstanceError):
        meta.task = "topical"  # type: ignore[misc]


@pytest.mark.parametrize("loader, name, threshold", [(NevIR, "nevir", 2), (DiagnosticSet, "diag/antonym", 2)])
def test_our_loaders_declare_their_threshold_and_measures(loader: type, name: str, threshold: int) -> None:
    meta = loader.info(name)
    assert meta.relevance_threshold == loader.relevance_threshold == threshold
    assert meta.default_measures == tuple(loader.default_measures)


@pytest.mark.skipif(not (DATA / "nevir").exists(), reason="needs ../shared/data/nevir")
def test_a_loaded_benchmark_gives_back_its_loaders_meta_and_the_store_keeps_it(tmp_path: Path) -> None:
    bench = load_benchmark("nevir", DATA)
    loader, bname = get_benchmark_loader("nevir")
    declared = loader.info(bname)
    # the loader may describe the loaded data more closely (its counts); everything else is as declared
    assert bench.meta == dataclasses.replace(declared, files=[], subdir="", optional_files=[],
                                             description=bench.description)
    assert bench.description.startswith("NevIR test split") and "grade 2" in bench.description
    with Store(tmp_path / "results.sqlite") as store:
        store.save_benchmark(BenchmarkInfo.of(bench))
        (kept,) = store.benchmarks()
    assert kept.relevance_threshold == 2 and kept.meta == bench.meta and kept.version == bench.version


def test_an_older_store_gains_the_threshold_column_as_not_recorded(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    with Store(path) as store:
        store.save_benchmark(BenchmarkInfo("old", "v1", "topical", ["nDCG@10"], {}, "d", "s", "l", 2))
    db = sqlite3.connect(path)
    db.execute("ALTER TABLE benchmarks DROP COLUMN relevance_threshold")  # as a store made before it was kept
    db.commit()
    db.close()
    with Store(path) as store:
        (old,) = store.benchmarks()
        assert old.relevance_threshold is None and old.meta.relevance_threshold == 1
        store.save_benchmark(BenchmarkInfo("new", "v2", "constraint", [], {}, relevance_threshold=2))
        assert {b.name: b.relevance_threshold for b in store.benchmarks()} == {"old": None, "new": 2}


def _bench_line(threshold: object) -> dict:
    info = {"name": "toy", "version": "v1", "task": "topical", "default_measures": ["nDCG@10"], "stats": {}}
    if threshold is not ...:
        info["relevance_threshold"] = threshold
    return info


def test_an_export_carries_the_threshold_and_a_bad_one_is_refused() -> None:
    from harness.store.exchange import BenchmarkInfoLine
    from pydantic import ValidationError

    assert BenchmarkInfoLine(**_bench_line(2)).relevance_threshold == 2
    assert BenchmarkInfoLine(**_bench_line(...)).relevance_threshold is None  # a file from before it was kept
    for bad in (0, -1, "2", 2.0, True):
        with pytest.raises(ValidationError):
            BenchmarkInfoLine(**_bench_line(bad))
    bench = make_benchmark(make_corpus(["a", "b"]), {"q": "a"}, {"q": {"d0": 2}}, name="toy", relevance_threshold=2)
    info = BenchmarkInfo.of(bench)
    assert json.loads(json.dumps(info.__dict__))["relevance_threshold"] == 2  # as export writes it
