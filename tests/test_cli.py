"""End to end through the CLI: run, skip-on-rerun, --force, export, audit, list, leaderboard —
on a BEIR-format folder given by path, with the network blocked."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.store.results import Store

DOCS = {
    "d1": "Aspirin reduces the risk of heart attack in adults.",
    "d2": "Aspirin does not reduce the risk of stroke in children.",
    "d3": "Vitamin D supplements improve bone density in older women.",
    "d4": "Regular exercise lowers blood pressure and improves heart health.",
    "d5": "Smoking increases the risk of lung cancer significantly.",
    "d6": "Green tea consumption is linked to lower cholesterol levels.",
}
QUERIES = {"q1": "aspirin against heart attack", "q2": "exercise and blood pressure",
           "q3": "vitamin D and bones", "q4": "an unjudged query"}
QRELS = [("q1", "d1", 1), ("q2", "d4", 1), ("q3", "d3", 1), ("q3", "d4", 0)]


def make_beir(root: Path) -> Path:
    root.mkdir(parents=True)
    with open(root / "corpus.jsonl", "w") as f:
        for i, t in DOCS.items():
            f.write(json.dumps({"_id": i, "title": "", "text": t}) + "\n")
    with open(root / "queries.jsonl", "w") as f:
        for i, t in QUERIES.items():
            f.write(json.dumps({"_id": i, "text": t}) + "\n")
    (root / "qrels").mkdir()
    with open(root / "qrels" / "test.tsv", "w") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q, d, r in QRELS:
            f.write(f"{q}\t{d}\t{r}\n")
    return root


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    return make_beir(tmp_path / "tiny-med")


def invoke(*args: str):
    res = CliRunner().invoke(app, list(args), catch_exceptions=False)
    return res


def test_run_skip_force_export_audit_leaderboard(dataset: Path, home: Path, tmp_path: Path, no_network) -> None:
    res = invoke("run", "bm25", "dense", "--benchmark", str(dataset), "--k", "5")
    assert res.exit_code == 0, res.output
    store = Store(home / "results.sqlite")
    recs = store.results()
    assert sorted(r.retriever for r in recs) == ["bm25", "dense"]
    bm25 = next(r for r in recs if r.retriever == "bm25")
    assert bm25.n_queries == 3  # only judged queries are scored
    assert bm25.measures["P@1"].mean == pytest.approx(1.0)  # lexical matches are unambiguous here
    assert set(bm25.phases) >= {"load", "index", "search", "evaluate"}
    assert bm25.phases["search"]["items"] == 3
    assert bm25.provenance["class"] == "retrievers.bm25:BM25Retriever"

    res2 = invoke("run", "bm25", "dense", "--benchmark", str(dataset), "--k", "5")
    assert res2.exit_code == 0 and res2.output.count("result exists") == 2
    assert len(store.results()) == 2

    res3 = invoke("run", "bm25", "--benchmark", str(dataset), "--k", "5", "--force")
    assert res3.exit_code == 0 and "result exists" not in res3.output
    assert len(store.results()) == 2
    assert store.results(retriever="bm25")[0].created_at >= bm25.created_at

    res4 = invoke("run", "bm25", "--benchmark", str(dataset), "--k", "5", "-p", "bm25.k1=0.9", "--seeds", "2")
    assert res4.exit_code == 0
    assert len(store.results(retriever="bm25")) == 3  # a new spec hash, seeds 0 and 1

    exp = invoke("export", "-")
    lines = [json.loads(line) for line in exp.stdout.splitlines() if line.strip()]
    assert [d.get("kind") for d in lines] == ["benchmark_content"] + [None] * 4  # one benchmark version
    first = lines[1]
    assert first["schema"] == 2 and "per_query" in first and first["per_query"]["nDCG@10"]
    assert first["rankings"] and first["benchmark_info"]["task"] == "topical"

    audit = invoke("audit", "--format", "json")
    rows = json.loads(audit.stdout)
    assert {r["retriever"] for r in rows} == {"bm25", "dense"}
    assert all(r["llm_calls"] == 0 and r["billed_calls"] == 0 and r["usd"] == 0 and r["usd_unknown_calls"] == 0
               for r in rows)
    bm25_row = next(r for r in rows if r["retriever"] == "bm25")
    assert bm25_row["results"] == 3 and bm25_row["queries"] == 9  # 3 bm25 results × 3 judged queries
    # projecting the measured benchmark onto itself gives back the measured search time
    proj = json.loads(invoke("audit", "--project", str(dataset), "-r", "bm25", "--format", "json").stdout)
    [row] = proj["rows"]
    assert (row["queries"], row["documents"], row["counts_from"]) == (3, 6, "store")
    assert row["online_s"] == pytest.approx(bm25_row["online_s"] / 3, abs=1e-3)
    assert row["offline_basis"] == f"measured on {dataset} (3 results)" and row["usd"] == 0

    out = tmp_path / "site"
    lb = invoke("leaderboard", "--out", str(out))
    assert lb.exit_code == 0
    html = (out / "index.html").read_text()
    assert "bm25" in html and "dense" in html and "tiny-med" in html
    assert no_network == []


def test_import_roundtrip_and_version_refusal(dataset: Path, home: Path, tmp_path: Path) -> None:
    assert invoke("run", "bm25", "--benchmark", str(dataset), "--k", "5").exit_code == 0
    dump = tmp_path / "dump.jsonl"
    assert invoke("export", str(dump)).exit_code == 0
    other = tmp_path / "other-home"
    res = CliRunner().invoke(app, ["import", str(dump), "--home", str(other)])
    assert res.exit_code == 0 and "imported 1" in res.output
    src, dst = Store(home / "results.sqlite").results(full=True)[0], Store(other / "results.sqlite").results(full=True)[0]
    assert dst.key == src.key and dst.per_query == src.per_query and dst.rankings == src.rankings
    res = CliRunner().invoke(app, ["import", str(dump), "--home", str(other)])
    assert "1 already present" in res.output
    # a result computed on another version of the benchmark is refused
    rec = next(d for d in map(json.loads, dump.read_text().splitlines()) if "kind" not in d)
    rec["benchmark_version"], rec["key"] = "0" * 16, "x" * 24
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rec) + "\n")
    res = CliRunner().invoke(app, ["import", str(bad)])
    assert res.exit_code == 2 and "refusing to mix" in res.output


def test_clear_errors(dataset: Path, home: Path, tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["run", "nosuch", "--benchmark", str(dataset)])
    assert res.exit_code == 2 and "unknown retriever 'nosuch'" in res.output
    res = CliRunner().invoke(app, ["run", "bm25", "--benchmark", str(dataset), "-p", "bm25.k3=1"])
    assert res.exit_code == 2 and "unknown parameter(s) k3" in res.output
    res = CliRunner().invoke(app, ["run", "bm25", "--benchmark", "no-such-benchmark"])
    assert res.exit_code == 2 and "unknown benchmark" in res.output
    bad = tmp_path / "bad"
    make_beir(bad)
    with open(bad / "qrels" / "test.tsv", "a") as f:
        f.write("q1\tnot-a-doc\t1\n")
    res = CliRunner().invoke(app, ["run", "bm25", "--benchmark", str(bad)])
    assert res.exit_code == 2 and "test.tsv:6" in res.output and "not-a-doc" in res.output


def test_list_commands(home: Path) -> None:
    res = invoke("list", "retrievers")
    assert res.exit_code == 0 and "bm25" in res.stdout and "dense" in res.stdout
    assert "lexical" in res.stdout and "Robertson" in res.stdout  # the declared family and paper
    assert "retrievers.bm25:BM25Retriever" in res.stdout
    res = invoke("list", "suites")
    assert res.exit_code == 0 and "demo" in res.stdout
    res = invoke("list", "benchmarks")
    assert res.exit_code == 0 and "nevir" in res.stdout and "negconstraint" in res.stdout


def test_export_trec_runs_reproduce_measures(dataset: Path, home: Path, tmp_path: Path) -> None:
    import pytrec_eval

    from harness.types import Run

    assert invoke("run", "bm25", "--benchmark", str(dataset), "--k", "5").exit_code == 0
    res = invoke("export", str(tmp_path / "runs"), "--format", "trec")
    assert res.exit_code == 0
    [path] = list((tmp_path / "runs").glob("*.trec"))
    assert "bm25" in path.name and path.name.endswith("seed0.trec")
    run = Run.from_trec(path)
    rec = Store(home / "results.sqlite").results(full=True)[0]
    assert [d for d, _ in run["q1"]] == [d for d, _ in rec.rankings["q1"]]
    qrels = {"q1": {"d1": 1}, "q2": {"d4": 1}, "q3": {"d3": 1, "d4": 0}}
    ref = pytrec_eval.RelevanceEvaluator(qrels, {"ndcg_cut.10"}).evaluate(
        {q: {d: s for d, s in r} for q, r in run.items()})
    assert rec.measures["nDCG@10"].mean == pytest.approx(sum(v["ndcg_cut_10"] for v in ref.values()) / 3)
    assert invoke("export", "-", "--format", "trec").exit_code == 2
    # beside the run, its ir_metadata: the software version, the parameters, the cost, never a local path
    import yaml

    from harness import __version__
    from harness.cost.figures import Costs

    meta_path = path.with_name(path.name[:-len(".trec")] + ".ir-metadata.yml")
    text = meta_path.read_text()
    assert str(tmp_path) not in text and str(dataset) not in text and str(home) not in text
    meta = yaml.safe_load(text)
    assert meta["tag"] == "bm25" and f"beyondsim {__version__}" in meta["platform"]["software"]["retrieval toolkit"]
    assert any(lib.startswith("python ") for lib in meta["platform"]["software"]["libraries"])
    [method] = meta["method"]["retrieval"]
    assert method["name"] == "bm25" and method["params"] == rec.spec["params"] and method["k"] == 5
    assert method["reference"] == "robertson2009bm25" and method["bibtex"].startswith("@book{robertson2009bm25,")
    cmd = meta["implementation"]["executable"]["cmd"]
    assert cmd.startswith("beyondsim run bm25 -p bm25.") and cmd.endswith(f" -b ./{dataset.name} --seeds 1 --k 5")
    assert all(f"bm25.{k}=" in cmd for k in rec.spec["params"])
    assert meta["data"]["test collection"] == {"name": f"./{dataset.name}", "version": rec.benchmark_version,
                                               "queries": 3}
    cold = Costs([rec]).of(rec)
    assert meta["resources"]["cold"]["offline s"] == pytest.approx(cold.offline_s)
    assert meta["resources"]["cold"]["total s"] == pytest.approx(cold.total_s) and cold.total_s > 0
    assert meta["resources"]["this run"]["online s"] == pytest.approx(cold.run_online_s)
    assert meta["resources"]["llm"]["calls"] == 0 and meta["resources"]["cold"]["usd"] == 0


@pytest.mark.skipif(not (Path(__file__).resolve().parents[1].parent / "shared/data/negconstraint/labels").is_dir(),
                    reason="NegConstraint labels not found in the shared data")
def test_breakdown_by_negconstraint_category(home: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["run", "bm25", "--benchmark", "negconstraint"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["breakdown", "negconstraint", "--by", "category", "-m", "R@5", "-f", "json"])
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    by_group = {r["group"]: r for r in rows}
    assert set(by_group) == {"A - a", "(A - a) ∪ B", "(A - a) ∪ (B - b)"}
    assert sum(r["n"] for r in rows) == 198  # the judged queries, each in exactly one category
    with Store(home / "results.sqlite") as store:
        rec = store.results(benchmark="negconstraint")[0]
        overall = rec.measures["R@5"].mean
    weighted = sum(r["mean"] * r["n"] for r in rows) / 198
    assert weighted == pytest.approx(overall)
    res = runner.invoke(app, ["breakdown", "negconstraint", "--by", "nope"])
    assert res.exit_code == 2 and "stored keys" in res.output


@pytest.mark.skipif(not (Path(__file__).resolve().parents[1].parent / "shared/data/beir/scifact").is_dir(),
                    reason="SciFact not found in the shared data")
def test_build_diagnostics_then_run_by_name(home: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["data", "build-diagnostics", "--corpus", "beir/scifact", "--set", "exclusion",
                              "--max-queries", "12"])
    assert res.exit_code == 0, res.output
    folder = home / "diagnostics" / "exclusion"
    build = json.loads((folder / "build.json").read_text())
    assert build["stats"]["queries"] == 12 and build["stats"]["judged"] == {"2": 12, "1": 12, "0": 12}
    assert build["params"]["source"].startswith("beir/scifact (version ")
    res = runner.invoke(app, ["run", "bm25", "-b", "diag/exclusion"])
    assert res.exit_code == 0, res.output
    with Store(home / "results.sqlite") as store:
        rec = store.results(benchmark="diag/exclusion")[0]
    assert rec.n_queries == 12 and rec.measures["V@2"].n == 12
    res = runner.invoke(app, ["data", "build-diagnostics", "--set", "sarcasm"])
    assert res.exit_code == 2 and "unknown diagnostic builder 'sarcasm'" in res.output


def test_a_folder_is_named_the_same_way_by_every_command(tmp_path: Path, home: Path, monkeypatch) -> None:
    make_beir(tmp_path / "tiny-med")
    monkeypatch.chdir(tmp_path)
    assert invoke("run", "bm25", "-b", "./tiny-med", "--k", "5").exit_code == 0
    for given in ("tiny-med/", str(tmp_path / "tiny-med"), "../" + tmp_path.name + "/tiny-med"):
        res = invoke("audit", "-b", given, "--format", "json")
        assert res.exit_code == 0, res.output
        [row] = [r for r in json.loads(res.output) if r.get("retriever") == "bm25"]
        assert row["benchmark"] == str((tmp_path / "tiny-med").resolve())
        res = invoke("breakdown", given)
        assert "no query groups stored" in res.output  # found the results; a folder has no groups
        res = invoke("export", "-", "-b", given)
        assert res.exit_code == 0 and '"retriever": "bm25"' in res.output


@pytest.mark.parametrize("given", [None, "ACTIVE"])
def test_the_cli_waits_passively_in_openmp_unless_told(given: str | None) -> None:
    """The command line sets OMP_WAIT_POLICY=PASSIVE before torch (and its libgomp) is loaded, which is when
    libgomp reads it; a value the user gave is kept. Checked in a fresh interpreter: the variable as the
    process has it once the app is imported, and that torch was not loaded before that."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    code = ("import sys; import harness.cli, os; print(os.environ.get('OMP_WAIT_POLICY')); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    policy, torch_loaded = out.stdout.split()
    assert policy == (given or "PASSIVE")
    assert torch_loaded == "False"  # so libgomp, loaded with torch later, reads the value set


@pytest.mark.parametrize("args, choices", [
    (["audit", "--format", "xml"], "table, json, csv"),
    (["audit", "--view", "xml"], "full, paper"),
    (["breakdown", "nevir", "--format", "xml"], "table, json"),
    (["export", "-", "--format", "xml"], "jsonl, trec"),
    (["leaderboard", "--out", "-", "--format", "xml"], "html, md, latex, json"),
    (["evaluate", "no-such-run.trec", "-b", "nevir", "--format", "xml"], "table, json, csv"),
    (["reproduce", "--format", "xml"], "table, json, csv"),
])
def test_a_bad_choice_is_one_line_naming_the_flag_the_choices_and_the_value(args, choices, home: Path) -> None:
    res = invoke(*args)
    flag = args[-2]
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines()[-1].endswith(f"{flag} must be one of {choices} (got 'xml')"), res.output
    assert "Traceback" not in res.output
