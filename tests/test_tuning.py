"""``beyondsim tune``: grid search on the validation split only, best point by the measure's
direction, the TOML it writes reads back through ``--config``."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.registry import make_spec
from harness.run.runner import Runner, Settings
from harness.store.results import Store
from harness.run.tuning import grid_search, parse_grid, tuning_split
from tests.test_cli import make_beir


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    root = make_beir(tmp_path / "toy")
    # a validation split over the same corpus
    (root / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td4\t1\nq3\td3\t1\n",
                                           encoding="utf-8")
    return root


def test_parse_grid_and_split_rules() -> None:
    assert parse_grid(["l1=0.01, 0.1", "l2=1"]) == {"l1": ["0.01", "0.1"], "l2": ["1"]}
    for bad in (["l1"], ["=1"], ["l1="], ["a=1", "a=2"], []):
        with pytest.raises(ValueError):
            parse_grid(bad)
    assert tuning_split("toollens") == "toollens:dev"
    assert tuning_split("toollens:dev") == "toollens:dev"
    with pytest.raises(ValueError, match="validation split"):
        tuning_split("toollens:test")
    with pytest.raises(ValueError, match="validation split"):
        tuning_split("toollens", "test")


def test_grid_search_picks_the_best_point(dataset: Path, home: Path) -> None:
    settings = Settings(home=home, bootstrap=0)
    with Store(home / "results.sqlite") as store:
        runner = Runner(settings, store, log=lambda m: None)
        grid = {"k1": ["0.1", "1.2", "3.0"], "b": ["0.0", "1.0"]}
        res = grid_search(runner, "bm25", f"{dataset}:dev", grid, "nDCG@10")
        assert len(res.points) == 6 and res.benchmark.endswith(":dev")
        # each point equals an independent run of the same spec
        bench, _ = runner.load_benchmark(f"{dataset}:dev")
        for p in res.points:
            rec = runner.run_one(make_spec("bm25", p.params), bench, 0)
            assert rec.measures["nDCG@10"].mean == pytest.approx(p.value)
        assert res.best.value == max(p.value for p in res.points)
        assert res.best is next(p for p in res.points if p.value == res.best.value)  # first of ties
        assert store.results() == []  # grid points are not stored as results
    conf = tomllib.loads(res.to_toml("bm25-tuned"))
    table = conf["retrievers"]["bm25-tuned"]
    assert table.pop("retriever") == "bm25"
    assert make_spec("bm25", table).params["k1"] == float(res.best.params["k1"])


def test_cli_tune_writes_config_and_refuses_test(dataset: Path, home: Path, tmp_path: Path) -> None:
    runner = CliRunner()
    out = tmp_path / "best.toml"
    res = runner.invoke(app, ["tune", "bm25", "-b", str(dataset), "-g", "k1=0.5,2.0", "-p", "b=0.5",
                              "-m", "nDCG@10", "-o", str(out)])
    assert res.exit_code == 0, res.output
    table = tomllib.loads(out.read_text())["retrievers"]["bm25"]
    assert table["b"] == 0.5 and table["k1"] in (0.5, 2.0)
    logs = list((home / "tuning").glob("bm25__*.json"))
    assert len(logs) == 1 and len(json.loads(logs[0].read_text())["points"]) == 2
    res = runner.invoke(app, ["run", "bm25", "-b", str(dataset), "--config", str(out)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["tune", "bm25", "-b", f"{dataset}:test", "-g", "k1=1"])
    assert res.exit_code == 2 and "validation split" in res.output
