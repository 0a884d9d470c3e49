"""`beyondsim verify`: a results file's measures recomputed from its rankings against the benchmark
as it loads here. Real results (bm25 and a small trained retriever, run by the runner on a BEIR
folder, and bm25 on a NevIR-format set) are exported, then verified as they are and after hand
edits: an edited mean, per-query value or interval, an unknown document, a ranking deeper than k,
a missing judged query and a trained retriever whose training split is the scored one or shares
its queries are each refused (exit 1, the line, the result and the field named, nothing stored);
rankings cut short verify what they determine and list the rest as not recomputable; a ranking
changed together with its figures verifies with the hand-computed values."""

from __future__ import annotations

import copy
import gzip
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from harness import registry
from harness.cli import app
from harness.store.exchange import read_export
from harness.registry import load_benchmark
from harness.store.results import Store, result_key
from harness.store.trust import trust_of
from harness.types import Run
from harness.record.verify import verify_items
from reports.compare import compare
from tests.test_cli import make_beir

K = 3
EXTRA = ("R@2", "nDCG@2")  # measures with a cutoff within the top 2, for the cut-rankings case
SHALLOW = {"P@1", "R@2", "nDCG@2"}
DEEP = {"nDCG@10", "MAP@10", "R@10", "R@100", "RR@10"}


def invoke(*args: str):
    return CliRunner().invoke(app, list(args))


def flat(output: str) -> str:
    return " ".join(output.split())


def rows_of(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def results_in(home: Path) -> list:
    path = home / "results.sqlite"
    if not path.exists():
        return []
    with Store(path) as store:
        return store.results(full=True)


def refused(res, *fragments: str) -> str:
    """The output of a refused verify: exit 1, and every fragment on one line of it."""
    assert res.exit_code == 1, res.output
    lines = [" ".join(x.split()) for x in res.output.splitlines()]
    for frag in fragments:
        assert any(frag in x for x in lines), (frag, res.output)
    return flat(res.output)


@dataclass
class Bundle:
    data: Path  # the benchmark's folder, <root>/beir/tiny-med
    dump: Path
    rows: list[dict]  # the export's lines: a content line, then one result line per seed

    @property
    def root(self) -> Path:
        """The data folder (BEYONDSIM_DATA): verify reads a benchmark by its name there, never a
        folder path named by a file."""
        return self.data.parent.parent

    def result(self, i: int = 0) -> dict:
        return [r for r in self.rows if "kind" not in r][i]


@pytest.fixture
def bundle(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> Bundle:
    """bm25 on a BEIR dataset of its own (beir/tiny-med, under the data folder) at k = 3, seeds 0
    and 1, with R@2 and nDCG@2, exported. The dataset also has a train split (q4 only, disjoint
    from the scored q1–q3) and a dev split judging q1."""
    data = make_beir(tmp_path / "data" / "beir" / "tiny-med")
    monkeypatch.setenv("BEYONDSIM_DATA", str(tmp_path / "data"))
    (data / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nq4\td5\t1\n")
    (data / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td2\t1\n")
    res = invoke("run", "bm25", "--benchmark", "beir/tiny-med", "--k", str(K), "--seeds", "2",
                 *[x for m in EXTRA for x in ("--measure", m)])
    assert res.exit_code == 0, res.output
    dump = tmp_path / "bundle.jsonl"
    res = invoke("export", str(dump))
    assert res.exit_code == 0 and "exported 2 result(s)" in res.output, res.output
    rows = rows_of(dump)
    assert [r.get("kind") for r in rows] == ["benchmark_content", None, None]
    return Bundle(data, dump, rows)


def edited(b: Bundle, tmp_path: Path, name: str, edit) -> Path:
    """The bundle with ``edit(first result line)`` applied, as ``name``."""
    rows = copy.deepcopy(b.rows)
    edit([r for r in rows if "kind" not in r][0])
    return write_rows(tmp_path / name, rows)


def head(name: str, row: dict, line: int = 2) -> str:
    """How a problem of ``row`` (line ``line`` of file ``name``) starts: file, line, result key,
    label, benchmark, seed."""
    return f"{name}:{line}: result {row['key']} ({row['label']} on {row['benchmark']}, seed {row['seed']})"


def test_intact_bundle_verifies_and_imports_as_verified(bundle: Bundle, tmp_path: Path) -> None:
    first = bundle.result(0)
    assert max(len(r) for r in first["rankings"].values()) == K  # as deep as the run: every cutoff determined
    res = invoke("verify", str(bundle.dump))
    assert res.exit_code == 0, res.output
    assert "all 2 result(s) verified" in res.output and "not recomputable:" not in res.output
    assert results_in(tmp_path / "other") == []  # without --import nothing is stored
    # a gzip-compressed bundle (how the reference results ship) is read by its suffix
    gz = tmp_path / "bundle.jsonl.gz"
    gz.write_bytes(gzip.compress(bundle.dump.read_bytes()))
    res = invoke("verify", str(gz))
    assert res.exit_code == 0 and "all 2 result(s) verified" in res.output, res.output

    other = tmp_path / "other"
    res = invoke("verify", str(bundle.dump), "--import", "--home", str(other))
    assert res.exit_code == 0, res.output
    assert "imported 2 as verified, 0 already present" in flat(res.output)
    recs = results_in(other)
    assert sorted(r.key for r in recs) == sorted(r["key"] for r in bundle.rows[1:])
    every = set(first["measures"])
    assert every == SHALLOW | DEEP
    for rec in recs:
        origin = rec.extra["origin"]
        assert origin["kind"] == "import" and origin["source"] == str(bundle.dump)
        assert origin["verified"]["benchmark_version"] == first["benchmark_version"]
        assert set(origin["verified"]["measures"]) == every and origin["verified"]["not_recomputable"] == []
        assert trust_of(rec.extra) == "verified"
        # the figures are stored as submitted
        exported = next(r for r in bundle.rows[1:] if r["key"] == rec.key)
        assert {m: v.mean for m, v in rec.measures.items()} == {m: v["mean"] for m, v in exported["measures"].items()}
    # the drill-down content comes from the benchmark as loaded here
    with Store(other / "results.sqlite") as store:
        assert [q["qid"] for q in store.queries_of(first["benchmark_version"])] == ["q1", "q2", "q3"]
    # plain `import` of the same file records no verification: those rows are "reported"
    res = invoke("import", str(bundle.dump), "--home", str(tmp_path / "plain"))
    assert res.exit_code == 0, res.output
    assert {trust_of(r.extra) for r in results_in(tmp_path / "plain")} == {"reported"}
    # the board ranks the verified row and shows the reported one apart, unranked
    for where, trust, ranked in ((other, "verified", True), (tmp_path / "plain", "reported", False)):
        with Store(where / "results.sqlite") as store:
            board = compare(store, n_resamples=100)
        assert [(r.label, r.trust, r.ranked) for s in board.suites for r in s.rows] == [("bm25", trust, ranked)]


def test_verify_items_marks_only_what_verifies(bundle: Bundle) -> None:
    with open(bundle.dump, encoding="utf-8") as f:
        items = read_export(f, bundle.dump.name)
    report = verify_items(items, bundle.root)
    assert report.ok and [r.ok for r in report.lines] == [True, True]
    assert all(it.verified_here for it in report.verified)
    assert set(report.lines[0].recomputed) == SHALLOW | DEEP
    assert [(c.benchmark, len(c.queries)) for c in report.content] == [(bundle.result()["benchmark"], 3)]


def test_a_mean_edited_by_hand_is_refused_and_nothing_is_stored(bundle: Bundle, tmp_path: Path) -> None:
    first = bundle.result(0)
    stored = first["measures"]["nDCG@10"]["mean"]

    def edit(row: dict) -> None:
        row["measures"]["nDCG@10"]["mean"] = stored - 0.05

    path = edited(bundle, tmp_path, "mean.jsonl", edit)
    other = tmp_path / "other"
    res = invoke("verify", str(path), "--import", "--home", str(other))
    out = refused(res, head("mean.jsonl", first) + ": measure nDCG@10: mean "
                  f"{stored - 0.05:.10g} in the file, {stored:.10g} recomputed from its rankings")
    assert "1 of 2 result(s) in" in out and "nothing was stored" in out
    assert results_in(other) == []  # the other result verified, but nothing is stored unless all do
    # the mean is checked to 1e-9: a change below it is no mismatch, one above it is
    for delta, ok in ((stored * 1e-12, True), (2e-9, False)):
        def nudge(row: dict, delta: float = delta) -> None:
            row["measures"]["nDCG@10"]["mean"] = stored - delta

        res = invoke("verify", str(edited(bundle, tmp_path, "nudged.jsonl", nudge)))
        assert (res.exit_code == 0) is ok, res.output


def test_an_edited_per_query_value_or_interval_is_refused(bundle: Bundle, tmp_path: Path) -> None:
    first = bundle.result(0)
    q, v = next((q, v) for q, v in first["per_query"]["R@2"].items() if v == 1.0)

    def per_query(row: dict) -> None:
        row["per_query"]["R@2"][q] = 0.5

    res = invoke("verify", str(edited(bundle, tmp_path, "pq.jsonl", per_query)))
    refused(res, head("pq.jsonl", first) + f": measure R@2: 1 per-query value(s) differ from its rankings: "
            f"{q}: 0.5 in the file, 1 recomputed")

    lo = first["measures"]["P@1"]["ci_low"]
    assert lo is not None  # `run` stores a bootstrap interval

    def interval(row: dict) -> None:
        row["measures"]["P@1"]["ci_low"] = lo - 0.1

    res = invoke("verify", str(edited(bundle, tmp_path, "ci.jsonl", interval)))
    refused(res, head("ci.jsonl", first) + ": measure P@1: 95% interval [")


def test_unknown_document_deeper_ranking_and_missing_query_are_refused(bundle: Bundle, tmp_path: Path) -> None:
    first = bundle.result(0)

    def unknown(row: dict) -> None:
        row["rankings"]["q2"][0][0] = "d99"

    res = invoke("verify", str(edited(bundle, tmp_path, "unknown.jsonl", unknown)), "--import",
                 "--home", str(tmp_path / "h1"))
    refused(res, head("unknown.jsonl", first) + ": 1 ranked document id(s) are not in the corpus of "
            f"{first['benchmark']} here: d99 (query q2)")
    assert results_in(tmp_path / "h1") == []

    def deeper(row: dict) -> None:
        ranked = {d for d, _ in row["rankings"]["q1"]}
        low = row["rankings"]["q1"][-1][1]
        row["rankings"]["q1"] += [[d, low - 1.0] for d in ("d3", "d5", "d6") if d not in ranked]

    res = invoke("verify", str(edited(bundle, tmp_path, "deep.jsonl", deeper)))
    refused(res, head("deep.jsonl", first) + f": depth not honoured: 1 ranking(s) longer than k = {K}: q1 (")

    def missing(row: dict) -> None:
        row["rankings"].pop("q2")
        for col in row["per_query"].values():
            col.pop("q2", None)

    res = invoke("verify", str(edited(bundle, tmp_path, "missing.jsonl", missing)))
    refused(res, head("missing.jsonl", first) + ": 1 of the 3 judged queries of")
    assert "are neither in its rankings nor in its per-query values: q2" in flat(res.output)

    def without(row: dict) -> None:
        row["rankings"] = {}

    res = invoke("verify", str(edited(bundle, tmp_path, "bare.jsonl", without)))
    refused(res, head("bare.jsonl", first) + ": no rankings: can only be imported as reported")


def cut(rows: list[dict], depth: int) -> list[dict]:
    rows = copy.deepcopy(rows)
    for r in rows:
        if "kind" not in r:
            r["rankings"] = {q: rk[:depth] for q, rk in r["rankings"].items()}
            r["extra"]["rankings_cut_at"] = depth  # as `export` says of rankings it cut
    return rows


HEADLINE = {"nDCG@10", "MAP@10"}  # the topical table's headline, beir/tiny-med's overview figures


def without_headline(rows: list[dict]) -> list[dict]:
    """The lines without their headline figures (so that what is left can be verified from cut rankings)."""
    rows = copy.deepcopy(rows)
    for r in rows:
        if "kind" not in r:
            for m in HEADLINE:
                r["measures"].pop(m)
                r["per_query"].pop(m, None)
    return rows


def test_rankings_cut_to_top_2_verify_what_they_determine(bundle: Bundle, tmp_path: Path) -> None:
    path = write_rows(tmp_path / "top2.jsonl", without_headline(cut(bundle.rows, 2)))
    res = invoke("verify", str(path))
    assert res.exit_code == 0, res.output
    out = flat(res.output)
    for m in DEEP - HEADLINE:
        cutoff = m.split("@")[1]
        assert (f"not recomputable: {m}: cutoff {cutoff} is deeper than the longest submitted ranking (2) of a run "
                f"with k = {K}") in out
    for m in SHALLOW:
        assert f"not recomputable: {m}:" not in out
    other = tmp_path / "other"
    res = invoke("verify", str(path), "--import", "--home", str(other))
    assert res.exit_code == 0, res.output
    for rec in results_in(other):
        verified = rec.extra["origin"]["verified"]
        assert set(verified["measures"]) == SHALLOW and set(verified["not_recomputable"]) == DEEP - HEADLINE
        assert trust_of(rec.extra) == "verified"

    # what the cut rankings determine is still checked; what they do not is left alone
    def shallow(rows: list[dict]) -> None:
        rows[1]["measures"]["nDCG@2"]["mean"] += 0.1

    def deep(rows: list[dict]) -> None:
        rows[1]["measures"]["R@10"]["mean"] += 0.1

    for edit, ok in ((shallow, False), (deep, True)):
        rows = without_headline(cut(bundle.rows, 2))
        edit(rows)
        res = invoke("verify", str(write_rows(tmp_path / "edited.jsonl", rows)))
        assert (res.exit_code == 0) is ok, res.output


def test_rankings_too_shallow_for_a_headline_figure_do_not_verify(bundle: Bundle, tmp_path: Path) -> None:
    """Forging class 4: rankings cut below a headline figure's cutoff used to verify (its figure "not
    recomputable") and be ranked as verified with any value typed in. Now the line fails, says which
    headline figure, and --import stores nothing; trust_of calls a verified mark without that figure
    reported."""
    rows = cut(bundle.rows, 2)
    rows[1]["measures"]["nDCG@10"]["mean"] = 0.999  # a figure nobody can check from top-2 rankings
    path = write_rows(tmp_path / "shallow.jsonl", rows)
    res = invoke("verify", str(path), "--import", "--home", str(tmp_path / "other"))
    refused(res, head("shallow.jsonl", bundle.result(0)) + ": headline measure nDCG@10 cannot be recomputed: "
            "cutoff 10 is deeper than the longest submitted ranking (2)", "did not verify; nothing was stored")
    assert "all 2 result(s) verified" not in res.output and results_in(tmp_path / "other") == []
    mark = {"origin": {"kind": "import", "verified": {"measures": sorted(SHALLOW), "not_recomputable": []}}}
    assert trust_of(mark, headline=["nDCG@2"]) == "verified"
    assert trust_of(mark, headline=["nDCG@10"]) == "reported"
    assert trust_of(mark, reproduced=True, headline=["nDCG@10"]) == "reported"


def test_a_changed_ranking_verifies_with_the_hand_computed_figures(bundle: Bundle, tmp_path: Path) -> None:
    """q3 judges d3 relevant (1) and d4 not (0). Its ranking becomes [d4, d3]: P@1 = 0, R@2 = 1,
    nDCG@2 = (1 / log2 3) / 1. With those figures (and no interval) the line verifies; with the
    old ones it does not."""
    rows = without_headline(cut(bundle.rows, 2))
    row = rows[1]
    row["rankings"]["q3"] = [["d4", 2.0], ["d3", 1.0]]
    hand = {"P@1": 0.0, "R@2": 1.0, "nDCG@2": 1 / math.log2(3)}
    old = {m: row["per_query"][m]["q3"] for m in hand}
    assert old["P@1"] == 1.0  # bm25 ranked d3 first
    res = invoke("verify", str(write_rows(tmp_path / "changed.jsonl", rows)))
    refused(res, head("changed.jsonl", row) + ": measure P@1: 1 per-query value(s) differ from its rankings: q3: 1 "
            "in the file, 0 recomputed")
    assert res.output.count("FAILED") == 1 and "1 of 2 result(s)" in res.output  # the second is untouched
    for m, v in hand.items():
        row["per_query"][m]["q3"] = v
        vals = list(row["per_query"][m].values())
        row["measures"][m].update(mean=sum(vals) / len(vals), ci_low=None, ci_high=None)
    res = invoke("verify", str(write_rows(tmp_path / "changed.jsonl", rows)))
    assert res.exit_code == 0 and "all 2 result(s) verified" in res.output, res.output
    # one hand figure off by 0.01 and the line is refused again
    row["per_query"]["nDCG@2"]["q3"] = hand["nDCG@2"] - 0.01
    res = invoke("verify", str(write_rows(tmp_path / "changed.jsonl", rows)))
    refused(res, head("changed.jsonl", row) + f": measure nDCG@2: 1 per-query value(s) differ from its rankings: "
            f"q3: {hand['nDCG@2'] - 0.01:.10g} in the file, {hand['nDCG@2']:.10g} recomputed")


@dataclass(frozen=True)
class ToyParams:
    pass


class ToyTrained:
    """Word-overlap ranking whose "model" is fitted on the benchmark's :train split."""

    def __init__(self, params: ToyParams | None = None):
        self.docs: list[tuple[str, set[str]]] = []
        self.fitted_on = 0

    def fit(self, benchmark: Any, ctx: Any) -> None:
        self.fitted_on = len(benchmark.eval_queries)

    def index(self, corpus: Any, ctx: Any) -> None:
        self.docs = [(d.id, set(d.text.lower().split())) for d in corpus]

    def search(self, queries: Any, k: int, ctx: Any) -> Run:
        run = Run()
        for q in queries:
            words = set(q.text.lower().split())
            ranked = sorted(((len(words & w), d) for d, w in self.docs), key=lambda t: (-t[0], t[1]))
            run[q.id] = [(d, float(s)) for s, d in ranked[:k]]
        return run


@pytest.fixture
def toy_trained(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(registry, "_retrievers", dict(registry._retrievers))
    registry.register("toy-trained", params=ToyParams, family="lexical",
                      trains_on="the benchmark's train split")(ToyTrained)
    return "toy-trained"


def test_a_trained_retriever_must_declare_training_data_disjoint_from_the_scored_split(
        bundle: Bundle, tmp_path: Path, toy_trained: str) -> None:
    res = invoke("run", toy_trained, "--benchmark", "beir/tiny-med", "--k", str(K))
    assert res.exit_code == 0, res.output
    dump = tmp_path / "trained.jsonl"
    res = invoke("export", str(dump), "--retriever", toy_trained)
    assert res.exit_code == 0, res.output
    rows = rows_of(dump)
    row = rows[-1]
    train = load_benchmark("beir/tiny-med:train", bundle.root)
    # the runner records the split the model learnt from
    assert row["extra"]["training"] == {"benchmark": train.name, "benchmark_version": train.version, "queries": 1}
    res = invoke("verify", str(dump))
    assert res.exit_code == 0 and "all 1 result(s) verified" in res.output, res.output

    what = f"trained.jsonl:{len(rows)}: result {row['key']} (toy-trained on {row['benchmark']}, seed 0)"
    undeclared = copy.deepcopy(rows)
    del undeclared[-1]["extra"]["training"]
    res = invoke("verify", str(write_rows(dump, undeclared)))
    refused(res, what + ": retriever toy-trained trains a model (the benchmark's train split) but the result "
            "records no extra.training")

    itself = copy.deepcopy(rows)
    itself[-1]["extra"]["training"] = {"benchmark": row["benchmark"], "benchmark_version": row["benchmark_version"],
                                       "queries": 3}
    res = invoke("verify", str(write_rows(dump, itself)), "--import", "--home", str(tmp_path / "h"))
    refused(res, what + f": extra.training: trained on {row['benchmark']} version {row['benchmark_version']}, the "
            "split it is scored on")
    assert results_in(tmp_path / "h") == []

    # a retriever that is not trained here but whose result records training: checked the same way
    first = bundle.result(0)
    dev = load_benchmark("beir/tiny-med:dev", bundle.root)
    shares = copy.deepcopy(bundle.rows)
    shares[1]["extra"]["training"] = [{"benchmark": dev.name, "benchmark_version": dev.version, "queries": 1}]
    res = invoke("verify", str(write_rows(tmp_path / "bundle.jsonl", shares)))
    refused(res, head("bundle.jsonl", first) + f": extra.training[0]: the training split {dev.name} shares 1 query "
            f"id(s) with {first['benchmark']}: q1")
    shares[1]["extra"]["training"] = [{"benchmark": train.name, "benchmark_version": "0" * 16}]
    res = invoke("verify", str(write_rows(tmp_path / "bundle.jsonl", shares)))
    refused(res, head("bundle.jsonl", first) + f": extra.training[0]: trained on {train.name} version {'0' * 16}, but "
            f"{train.name} here is version {train.version}")
    shares[1]["extra"]["training"] = [{"benchmark": train.name, "benchmark_version": train.version}]
    res = invoke("verify", str(write_rows(tmp_path / "bundle.jsonl", shares)))
    assert res.exit_code == 0, res.output


# every query shares a word ("study") with every document, so bm25 ranks the whole corpus
NEVIR_ROWS = [
    {"id": 1, "q1": "study: aspirin reduces heart attack risk", "doc1": "A study: aspirin reduces the risk of heart "
     "attack.", "q2": "study: aspirin does not reduce heart attack risk",
     "doc2": "A study: aspirin does not reduce the risk of heart attack."},
    {"id": 2, "q1": "study: green tea lowers cholesterol", "doc1": "A study: green tea lowers cholesterol in adults.",
     "q2": "study: green tea does not lower cholesterol", "doc2": "A study: green tea does not lower cholesterol."},
]


def test_pair_accuracy_is_recomputed_only_when_every_pair_document_is_ranked(tmp_path: Path, home: Path) -> None:
    data = tmp_path / "data"
    (data / "nevir").mkdir(parents=True)
    (data / "nevir" / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in NEVIR_ROWS))
    res = invoke("run", "bm25", "--benchmark", "nevir", "--data-dir", str(data), "--k", "4")
    assert res.exit_code == 0, res.output
    dump = tmp_path / "nevir.jsonl"
    assert invoke("export", str(dump)).exit_code == 0
    rows = rows_of(dump)
    row = rows[-1]
    assert set(row["per_query"]["PairAcc"]) == {"1", "2"}  # per pair
    assert all(len(r) == 4 for r in row["rankings"].values())  # every pair document is ranked
    res = invoke("verify", str(dump), "--data-dir", str(data))
    assert res.exit_code == 0 and "not recomputable: PairAcc" not in res.output, res.output

    flipped = copy.deepcopy(rows)
    flipped[-1]["per_query"]["PairAcc"]["1"] = 1.0 - row["per_query"]["PairAcc"]["1"]
    res = invoke("verify", str(write_rows(tmp_path / "flipped.jsonl", flipped)), "--data-dir", str(data))
    refused(res, f"flipped.jsonl:{len(rows)}: result {row['key']} (bm25 on nevir, seed 0): measure PairAcc: 1 "
            "per-query value(s) differ from its rankings: 1:")

    # top-1 rankings of a k = 4 run cannot give the constraint table's Sat@10, V@2, FVR@10 and nDCG@10
    top1 = cut(rows, 1)
    res = invoke("verify", str(write_rows(tmp_path / "top1.jsonl", top1)), "--data-dir", str(data))
    refused(res, *(f"top1.jsonl:{len(rows)}: result {row['key']} (bm25 on nevir, seed 0): headline measure {m} "
                   "cannot be recomputed" for m in ("Sat@10", "V@2", "FVR@10", "nDCG@10")))
    assert ("not recomputable: PairAcc: the pair documents are scored directly, and 4 of the 4 pair queries lack "
            "one in their ranking") in flat(res.output)
    # without those figures the line verifies what top-1 rankings determine; PairAcc is left alone
    for m in ("Sat@10", "V@2", "FVR@10", "nDCG@10"):
        del top1[-1]["measures"][m], top1[-1]["per_query"][m]
    res = invoke("verify", str(write_rows(tmp_path / "top1.jsonl", top1)), "--data-dir", str(data))
    assert res.exit_code == 0, res.output
    top1[-1]["measures"]["PairAcc"]["mean"] = 0.123  # not determined by top-1 rankings: left alone
    res = invoke("verify", str(write_rows(tmp_path / "top1.jsonl", top1)), "--data-dir", str(data))
    assert res.exit_code == 0, res.output


def test_version_mismatch_and_unreadable_files(bundle: Bundle, tmp_path: Path) -> None:
    first = bundle.result(0)

    def other_version(row: dict) -> None:
        row["benchmark_version"] = "0" * 16

    res = invoke("verify", str(edited(bundle, tmp_path, "v.jsonl", other_version)))
    # the key is derived from the line's spec and version, never taken from the file
    rekeyed = dict(first, key=result_key(first["spec_hash"], "0" * 16, first["seed"], first["k"],
                                         first["harness_version"]))
    refused(res, head("v.jsonl", rekeyed) + f": computed on version {'0' * 16} of "
            f"{first['benchmark']}, but the copy here is version {first['benchmark_version']}")
    bad = tmp_path / "bad.jsonl"
    bad.write_text(bundle.dump.read_text().replace('"seed": 0', '"seed": "zero"', 1))
    res = invoke("verify", str(bad))
    assert res.exit_code == 2 and "bad.jsonl:2: seed:" in flat(res.output), res.output
    res = invoke("verify", str(tmp_path / "absent.jsonl"))
    assert res.exit_code == 2 and "cannot read" in res.output
    empty = tmp_path / "content-only.jsonl"
    write_rows(empty, bundle.rows[:1])
    res = invoke("verify", str(empty))
    assert res.exit_code == 1 and "holds no result line" in res.output


def test_the_per_query_comparison_is_the_scalar_one_on_every_kind_of_value() -> None:
    """``_differing`` (every shared query at once) names exactly the queries ``_same`` (one pair at a
    time, math.isclose within TOLERANCE, None matching NaN) calls different, on values near the
    tolerance, at zero, infinite, undefined, and on queries only one side has."""
    import random

    from harness.record.verify import TOLERANCE, _differing, _same

    rng = random.Random(3)
    specials = [None, math.nan, math.inf, -math.inf, 0.0, -0.0, 1.0, 1e-300, 5e-10, -5e-10, 1e12]
    stored: dict[str, Any] = {}
    here: dict[str, Any] = {}
    for i in range(4000):
        base = rng.choice(specials + [rng.uniform(-2, 2) for _ in range(4)])
        kind = rng.randrange(6)
        if kind == 0:
            other = base
        elif kind == 1 and isinstance(base, float) and math.isfinite(base):
            other = base * (1 + rng.choice([0.5, 0.999, 1.001, 2]) * TOLERANCE) + rng.choice([0, 0.9, 1.1]) * TOLERANCE
        else:
            other = rng.choice(specials)
        stored[f"q{i}"], here[f"q{i}"] = base, other
    stored["only-stored"], here["only-here"] = 1.0, 2.0
    expected = [q for q in here if q in stored and not _same(stored[q], here[q])]
    assert _differing(stored, here) == expected
    assert 500 < len(expected) < 3500  # both outcomes are well represented
    assert _differing({"a": None}, {"a": math.nan}) == [] and _differing({"a": math.inf}, {"a": math.inf}) == []
    assert _differing({"a": 1.0}, {"a": 1.0 + 2e-9}) == ["a"] and _differing({"a": 0.0}, {"a": 9e-10}) == []
