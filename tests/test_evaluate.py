"""Run files in, pools out (docs/design/runfiles.md, docs/design/pools.md): ``beyondsim evaluate`` and
``harness.evaluate`` score a run file as pytrec_eval does on the same file (ties, unsorted lines,
gzip, numeric ids), refuse every bad input in one line, and store it as a *verified* own result;
``beyondsim pool export`` writes a pool whose hash a file read back recomputes; a reranker on a pool
is refused a document outside it, by the runner, by ``evaluate --pool`` and by ``verify``."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import pytrec_eval
from typer.testing import CliRunner

import harness
from harness.cli import app
from harness.core.types import Run
from harness.data.runs import RunFileError, read_run, trec_order
from harness.run.pools import (PoolError, build_pool, describe, pool_hash, read_pool, reference_run,
                               write_pool)
from harness.store.results import Store
from harness.store.trust import VERIFIED, trust_of

from factories import make_benchmark, make_corpus

TREC_MEASURES = {"nDCG@10": "ndcg_cut_10", "MAP@10": "map_cut_10", "R@5": "recall_5", "P@1": "P_1"}


def invoke(*args: str):
    return CliRunner().invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture
def bench():
    """Numeric document ids, so that trec_eval's descending-id tie break ("9" before "10") shows."""
    corpus = make_corpus({str(i): f"text {i}" for i in range(1, 13)})
    rel = {"1": {"10": 2, "9": 1, "3": 0}, "2": {"4": 1, "11": 1}, "3": {"12": 1}}
    return make_benchmark(corpus, {"1": "a", "2": "b", "3": "c", "4": "no judgments"}, rel)


# qid Q0 doc rank score tag: lines out of order, rank column wrong, ties between ids "9"/"10"/"1"
TREC = """\
1 Q0 3 1 0.5 t
1 Q0 10 2 2.0 t
1 Q0 9 3 2.0 t
1 Q0 1 4 2.0 t
2 Q0 4 9 1e0 t
2 Q0 11 1 1.0 t
2 Q0 5 1 3 t
3 Q0 7 1 0.1 t
"""


def _pytrec(bench, text: str) -> dict[str, dict[str, float]]:
    run: dict[str, dict[str, float]] = {}
    for line in text.splitlines():
        q, _, d, _, s, _ = line.split()
        run.setdefault(q, {})[d] = float(s)
    ev = pytrec_eval.RelevanceEvaluator(bench.judgments.relevance, {"ndcg_cut.10", "map_cut.10", "recall.5", "P.1"})
    return ev.evaluate(run)


@pytest.mark.parametrize("as_gzip", [False, True])
def test_a_trec_file_scores_as_pytrec_eval_scores_it(bench, tmp_path: Path, as_gzip: bool) -> None:
    path = tmp_path / ("run.txt" if as_gzip else "run.trec")  # gzip is told by content, not by name
    path.write_bytes(gzip.compress(TREC.encode()) if as_gzip else TREC.encode())
    got = harness.evaluate(path, bench, list(TREC_MEASURES), bootstrap=0)
    want = _pytrec(bench, TREC)
    for ours, theirs in TREC_MEASURES.items():
        for q in ("1", "2", "3"):
            assert got.per_query[ours][q] == pytest.approx(want[q][theirs], abs=1e-12), (ours, q)
    # the ties of query 1 in trec_eval's order: by id descending ("9" > "10" > "1" as strings)
    assert [d for d, _ in got.run["1"]] == ["9", "10", "1", "3"]
    assert got.run_file.format == "trec" and got.run_file.tag == "t" and got.run_file.lines == 8


def test_json_runs_of_both_shapes_score_as_the_trec_file(bench, tmp_path: Path) -> None:
    trec = tmp_path / "run.trec"
    trec.write_text(TREC)
    rows: dict[str, dict[str, float]] = {}
    for line in TREC.splitlines():
        q, _, d, _, s, _ = line.split()
        rows.setdefault(q, {})[d] = float(s)
    (tmp_path / "a.json").write_text(json.dumps(rows))
    (tmp_path / "b.json").write_text(json.dumps({q: [[d, s] for d, s in r.items()] for q, r in rows.items()}))
    want = harness.evaluate(trec, bench, bootstrap=0).means
    for name in ("a.json", "b.json"):
        got = harness.evaluate(tmp_path / name, bench, bootstrap=0)
        assert got.run_file.format == "json"
        assert got.means == want
    in_memory = harness.evaluate(rows, bench.judgments.relevance, ["nDCG@10"], bootstrap=0)
    assert in_memory.means["nDCG@10"] == pytest.approx(want["nDCG@10"])


def test_missing_queries_are_empty_rankings_and_said_so(bench, tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    path.write_text("1 Q0 10 1 1 t\n4 Q0 2 1 1 t\n")
    got = harness.evaluate(path, bench, ["nDCG@10"], bootstrap=0)
    assert got.n_missing == 2 and got.per_query["nDCG@10"]["2"] == 0.0
    assert any("2 of 3 judged queries have no ranking" in n for n in got.notes)
    assert any("no judgments" in n for n in got.notes)  # query 4: known, not judged, not scored


@pytest.mark.parametrize("text, where", [
    ("1 Q0 10 1 1.0\n", "run.trec:1: fields: expected 6"),
    ("1 Q0 10 1 1.0 t\n1 Q0 9 1 nan t\n", "run.trec:2: score: 'nan' is not a finite number"),
    ("1 Q0 10 1 inf t\n", "run.trec:1: score: 'inf' is not a finite number"),
    ("1 Q0 10 1 x t\n", "run.trec:1: score: 'x' is not a number"),
    ("1 Q0 10 one 1 t\n", "run.trec:1: rank: 'one' is not an integer"),
    ("1 Q0 10 1 1 t\n1 Q0 10 2 0.5 t\n", "run.trec:2: docid: document '10' is listed twice for query '1' (first at line 1)"),
    ("1 Q0 10 1 1 t\n9 Q0 10 1 1 t\n", "run.trec:2: qid: unknown query '9'"),
    ("1 Q0 99 1 1 t\n", "run.trec:1: docid: unknown document '99'"),
])
def test_each_bad_input_is_one_line_exit_2_nothing_stored(bench, tmp_path: Path, text: str, where: str,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "run.trec"
    path.write_text(text)
    with pytest.raises(RunFileError) as e:
        harness.evaluate(path, bench, bootstrap=0)
    assert str(e.value).endswith(str(e.value).splitlines()[0]) and where in str(e.value)
    # through the command line: one line, exit 2, nothing stored
    import harness.cli.cmd_evaluate as cmd

    monkeypatch.setattr(cmd, "score_run", lambda run, b, *a, **kw: harness.evaluate(run, bench, *a, **kw))
    home = tmp_path / "home"
    res = invoke("evaluate", path, "-b", "b", "--store", "--label", "mine", "--home", home)
    assert res.exit_code == 2
    assert len(res.output.strip().splitlines()) == 1 and where in res.output
    assert not (home / "results.sqlite").exists() or not Store(home / "results.sqlite").results()


def test_skip_unknown_drops_and_counts(bench, tmp_path: Path) -> None:
    path = tmp_path / "run.trec"
    path.write_text("1 Q0 10 1 1 t\n1 Q0 99 2 0.5 t\n9 Q0 10 1 1 t\n9 Q0 2 2 1 t\n")
    got = harness.evaluate(path, bench, ["nDCG@10"], skip_unknown=True, bootstrap=0)
    assert got.run_file.skipped_documents == 1 and got.run_file.skipped_queries == {"9": 2}
    assert [d for d, _ in got.run["1"]] == ["10"]
    assert any("dropped 2 line(s)" in n for n in got.notes) and any("dropped 1 line(s)" in n for n in got.notes)


def test_written_trec_keeps_the_stored_order_of_tied_scores(tmp_path: Path) -> None:
    """``Run.to_trec`` writes tied scores one float step apart, so that trec_eval (which breaks ties
    by id, descending) reads the list order: an exported run evaluates to the stored figures."""
    run = Run({"q": [("a", 1.0), ("b", 1.0), ("c", 0.5), ("d", 0.5), ("e", 0.25)]})
    path = tmp_path / "r.trec"
    run.to_trec(path)
    back = read_run(path).run
    assert [d for d, _ in back["q"]] == ["a", "b", "c", "d", "e"]
    assert trec_order(run["q"]) != run["q"]  # (trec_eval would have reordered the ties of the list as given)
    assert all(abs(s - t) < 1e-15 for (_, s), (_, t) in zip(back["q"], run["q"]))


def test_export_trec_evaluates_to_the_stored_figures(shared_data: Path, home: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BEYONDSIM_DATA", str(shared_data))
    assert invoke("run", "bm25", "random", "-b", "diag/negation").exit_code == 0
    out = tmp_path / "trec"
    assert invoke("export", out, "--format", "trec").exit_code == 0
    store = Store(home / "results.sqlite")
    for rec in store.results():
        f = next(out.glob(f"*__{rec.spec_hash}__seed0.trec"))
        got = harness.evaluate(f, "diag/negation", list(rec.measures), bootstrap=0)
        for m, v in rec.measures.items():
            assert got.measures[m].mean == pytest.approx(v.mean, abs=1e-12), (rec.label, m)
    # stored as a run file: the user's own result, verified (not reproduced), ranked like any other
    f = next(out.glob("*__bm25__*.trec"))
    res = invoke("evaluate", f, "-b", "diag/negation", "--store", "--label", "bm25 run file", "-m", "Sat@10")
    assert res.exit_code == 0, res.output
    stored = next(r for r in Store(home / "results.sqlite").results() if r.label == "bm25 run file")
    assert stored.retriever == "run-file" and trust_of(stored.extra) == VERIFIED
    assert stored.extra["run_file"]["sha256"] and stored.provenance["tag"] == "bm25"
    assert stored.extra["ir_metadata"]["tag"] == "bm25"  # the export's ir_metadata file beside it was read
    assert invoke("evaluate", f, "-b", "diag/negation", "--store", "--label", "bm25 run file").exit_code == 0
    assert sum(r.label == "bm25 run file" for r in Store(home / "results.sqlite").results()) == 1


def test_declared_metadata_is_checked(bench, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.run.scoring import run_file_record

    path = tmp_path / "mine.trec"
    path.write_text(TREC)
    scores = harness.evaluate(path, bench, bootstrap=0)
    meta = tmp_path / "mine.ir-metadata.yml"
    meta.write_text("tag: t\nresources:\n  cold:\n    offline s: .nan\n")
    with pytest.raises(Exception, match="resources.cold.offline s"):
        run_file_record(scores, "mine")
    meta.write_text("tag: t\ndata:\n  training data:\n    - name: b\n      version: '0'\n")
    with pytest.raises(Exception, match="training on b, the split it is scored on"):
        run_file_record(scores, "mine")
    meta.write_text("tag: t\nresources:\n  cold:\n    offline s: 12.5\n    online s: 0.5\n")
    rec = run_file_record(scores, "mine")
    assert rec.phases["index"]["wall_s"] == 12.5 and rec.phases["search"]["wall_s"] == 0.5
    meta.unlink()
    assert run_file_record(scores, "mine").phases == {}  # cost unknown unless declared


# -- pools -----------------------------------------------------------------------------------------


def _constraint_bench():
    corpus = make_corpus({f"d{i}": f"text {i}" for i in range(8)})
    rel = {"q1": {"d1": 2, "d2": 1, "d3": 0}, "q2": {"d4": 2}}
    b = make_benchmark(corpus, {"q1": "x", "q2": "y"}, rel, task="constraint", default_measures=("Sat@10",))
    b.judgments.violating = {"q1": frozenset({"d3"}), "q2": frozenset({"d5"})}
    b.relevance_threshold = 2
    return b


def test_a_pool_is_canonical_and_its_reference_rows_are_what_they_say(tmp_path: Path) -> None:
    from harness.core.registry import RetrieverSpec

    b = _constraint_bench()
    first = Run({"q1": [("d3", 3.0), ("d2", 2.0), ("d1", 1.0), ("d0", 1.0)], "q2": [("d5", 1.0), ("d6", 0.5)]})
    pool = build_pool(b, first, RetrieverSpec("first"), 3, "first@3")
    assert pool.rankings["q1"] == [("d3", 3.0), ("d2", 2.0), ("d1", 1.0)]  # top 3
    assert pool.hash == pool_hash(b.version, pool.rankings)
    oracle = reference_run(pool, b, "oracle")
    assert [d for d, _ in oracle["q1"]] == ["d1", "d2", "d3"]  # satisfying first, violating last
    shuffled = reference_run(pool, b, "shuffled", seed=0)
    assert sorted(shuffled["q1"]) != [] and {d for d, _ in shuffled["q1"]} == {"d1", "d2", "d3"}
    assert reference_run(pool, b, "shuffled", seed=0) == shuffled
    pool.manifest = describe(pool, b, ["Sat@10", "nDCG@10", "V@1"])
    c = pool.manifest["ceiling"]
    # q1 can be satisfied (d1 is in the pool), q2 cannot (d4 is not): half the queries
    assert c["satisfiable"] == 0.5 and c["Sat@10"] == 0.5
    assert pool.manifest["figures"]["Sat@10"] == 0.0  # its own order puts the violating d3 first
    trec, meta = write_pool(pool, tmp_path / "p.trec")
    back = read_pool(trec, b)
    assert back.hash == pool.hash and back.rankings == pool.rankings
    lines = trec.read_text().splitlines()
    trec.write_text("\n".join([lines[1], lines[0], *lines[2:]]) + "\n")  # same scores: order is by score
    assert read_pool(trec, b).hash == pool.hash
    trec.write_text("\n".join(lines[:-1]).replace("d2", "d7") + "\n")
    with pytest.raises(PoolError, match="its content hashes to"):
        read_pool(trec, b)


RERANKERS = '''
class Reverse:
    """Reverses each pool."""
    def rerank(self, queries, candidates, ctx):
        out = {}
        for q in queries:
            c = candidates[q.id][::-1]
            out[q.id] = [(x.id, float(len(c) - i)) for i, x in enumerate(c)]
        return out

class Outside:
    """Ranks one document that is not a candidate."""
    def rerank(self, queries, candidates, ctx):
        return {q.id: [(c.id, 1.0) for c in candidates[q.id][:1]] if i else [("negation-d1x", 1.0)]
                for i, q in enumerate(queries)}
'''


def test_pools_end_to_end(shared_data: Path, home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BEYONDSIM_DATA", str(shared_data))
    (tmp_path / "myrr.py").write_text(RERANKERS)
    monkeypatch.syspath_prepend(str(tmp_path))
    out = tmp_path / "pool.trec"
    res = invoke("pool", "export", "-b", "diag/negation", "--first-stage", "bm25", "--depth", "20", "-o", out)
    assert res.exit_code == 0, res.output
    manifest = json.loads((tmp_path / "pool.trec.manifest.json").read_text())
    from harness.core.registry import load_benchmark

    b = load_benchmark("diag/negation", shared_data)
    pool = read_pool(out, b)
    assert pool.hash == manifest["hash"]
    store = Store(home / "results.sqlite")
    refs = {r.retriever: r for r in store.results() if r.spec.get("pool") == pool.hash}
    assert set(refs) == {"pool-order", "pool-shuffled", "pool-oracle"}
    assert refs["pool-oracle"].measures["Sat@10"].mean == pytest.approx(manifest["ceiling"]["Sat@10"])
    bm25 = next(r for r in store.results() if r.retriever == "bm25")
    assert refs["pool-order"].measures["nDCG@10"].mean == pytest.approx(bm25.measures["nDCG@10"].mean, abs=2e-7)
    # a second export is the same pool
    assert invoke("pool", "export", "-b", "diag/negation", "--first-stage", "bm25", "--depth", "20",
                  "-o", tmp_path / "again.trec").exit_code == 0
    assert read_pool(tmp_path / "again.trec", b).hash == pool.hash
    # a reranker on the pool file; its result names the pool and is a reordering of it
    res = invoke("run", "myrr:Reverse", "-b", "diag/negation", "--pool", out)
    assert res.exit_code == 0, res.output
    rec = next(r for r in Store(home / "results.sqlite").results() if r.retriever == "myrr:Reverse")
    assert rec.spec["pool"] == pool.hash and rec.extra["pool"]["name"] == manifest["name"]
    ranked = Store(home / "results.sqlite").rankings(rec.id)
    assert all([d for d, _ in ranked[q]] == [d for d, _ in pool.rankings[q][::-1]] for q in pool.rankings)
    # the runner refuses a ranking outside the pool
    res = invoke("run", "myrr:Outside", "-b", "diag/negation", "--pool", out)
    assert res.exit_code == 2 and "is not among its candidates in pool" in res.output
    # evaluate --pool refuses a run file with one document outside the pool
    q0 = next(iter(pool.rankings))
    inside = tmp_path / "inside.trec"
    Run({q: r[::-1] for q, r in pool.rankings.items()}).to_trec(inside)
    assert invoke("evaluate", inside, "-b", "diag/negation", "--pool", out).exit_code == 0
    outside_doc = next(d for d in b.corpus.ids if d not in {x for x, _ in pool.rankings[q0]})
    bad = tmp_path / "outside.trec"
    Run({q: ([(outside_doc, 99.0)] if q == q0 else []) + list(r) for q, r in pool.rankings.items()}).to_trec(bad)
    res = invoke("evaluate", bad, "-b", "diag/negation", "--pool", out)
    assert res.exit_code == 2 and outside_doc in res.output and "not among its candidates" in res.output


def test_verify_refuses_a_reranked_result_outside_its_pool(shared_data: Path, home: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A pool's reference row is a reranker's result like any other for ``verify``: its rankings must
    reorder its pool; one document swapped for another of the corpus fails, naming it."""
    monkeypatch.setenv("BEYONDSIM_DATA", str(shared_data))
    out = tmp_path / "pool.trec"
    assert invoke("pool", "export", "-b", "diag/negation", "--first-stage", "bm25", "--depth", "20",
                  "-o", out).exit_code == 0
    dump = tmp_path / "dump.jsonl"
    assert invoke("export", dump, "-r", "pool-oracle").exit_code == 0
    assert invoke("verify", dump, "--pool", out, "--data-dir", shared_data).exit_code == 0
    line = json.loads(dump.read_text().splitlines()[-1])
    from harness.core.registry import load_benchmark

    b = load_benchmark("diag/negation", shared_data)
    q, ranking = next(iter(line["rankings"].items()))
    stranger = next(d for d in b.corpus.ids if d not in {x for x, _ in read_pool(out, b).rankings[q]})
    ranking[-1][0] = stranger
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join([*dump.read_text().splitlines()[:-1], json.dumps(line)]) + "\n")
    res = invoke("verify", bad, "--pool", out, "--data-dir", shared_data)
    assert res.exit_code == 1 and f"document {stranger!r}" in res.output and "not among its candidates" in res.output
    # without the pool anywhere (not beside the export, not in the store) it cannot be checked: not verified
    from harness.run.pools import pools_file

    assert pools_file(dump).is_file()  # export writes the pools beside the file ...
    pools_file(dump).unlink()  # ... and without them
    res = invoke("verify", dump, "--data-dir", shared_data, "--home", tmp_path / "empty")
    assert res.exit_code == 1 and "which is not here" in res.output


def test_reproduce_recomputes_the_pinned_pool_hashes(shared_data: Path, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """A reference pool's hash is recomputed from its first stage here: the pinned hash matches, a
    wrong pin fails, a benchmark not on disk is skipped."""
    from harness import registry
    from harness.record.reproduce import check_pools
    from harness.run.runner import Settings

    first = tmp_path / "first"
    assert invoke("pool", "export", "-b", "diag/negation", "--first-stage", "bm25", "--depth", "20",
                  "-o", tmp_path / "p.trec", "--home", first, "--data-dir", shared_data).exit_code == 0
    right = json.loads((tmp_path / "p.trec.manifest.json").read_text())["hash"]
    plan = tmp_path / "plan.toml"
    plan.write_text(f'''
[matrix]
quick_benchmarks = ["diag/negation"]

[[pool]]
first_stage = "bm25"
depth = 20
hashes = {{ "diag/negation" = "{right}", "diag/antonym" = "0000000000000000", "diag/exclusion" = "1" }}
''')
    monkeypatch.setattr(registry, "reference_files", lambda: {"plan": plan})
    checks = check_pools(Settings(home=tmp_path / "fresh", data_dir=shared_data), log=lambda m: None)
    got = {c.benchmark: c.status for c in checks}
    assert got == {"diag/negation": "OK", "diag/antonym": "FAIL", "diag/exclusion": "SKIP"}
    assert [c.benchmark for c in check_pools(Settings(home=tmp_path / "fresh", data_dir=shared_data), quick=True,
                                             log=lambda m: None)] == ["diag/negation"]


def test_a_plan_configuration_names_one_of_its_pools(tmp_path: Path) -> None:
    from harness.record.matrix import PlanError, load_plan

    plan = tmp_path / "plan.toml"
    plan.write_text('[[pool]]\nfirst_stage = "bm25"\n\n[[config]]\nretriever = "mmr"\npool = "dense@100"\n')
    with pytest.raises(PlanError, match="pool 'dense@100' is none of the plan's"):
        load_plan(plan)
    plan.write_text('[[pool]]\nfirst_stage = "bm25"\n\n[[config]]\nretriever = "mmr"\npool = "bm25@100"\n')
    p = load_plan(plan)
    assert p.config[0].display == "mmr [bm25@100]" and p.pins() == {"bm25@100": {}}


def test_a_pool_is_the_same_from_memory_from_the_store_and_from_its_file(tmp_path: Path) -> None:
    """Scores that differ in memory but not as the store keeps them (7 decimals) tie in every copy
    of the pool, so its hash does not depend on where it was made from."""
    from harness.core.registry import RetrieverSpec
    from harness.store.results import ResultRecord  # noqa: F401 - (the store's rounding is round(s, 7))

    b = _constraint_bench()
    memory = Run({"q1": [("d1", 0.12345681), ("d2", 0.12345679), ("d3", 0.1)], "q2": [("d4", 25.123456789)]})
    stored = Run({q: [(d, round(s, 7)) for d, s in r] for q, r in memory.items()})
    a = build_pool(b, memory, RetrieverSpec("first"), 10, "first@10")
    c = build_pool(b, stored, RetrieverSpec("first"), 10, "first@10")
    assert a.hash == c.hash and a.rankings == c.rankings
    assert [d for d, _ in a.rankings["q1"]] == ["d2", "d1", "d3"]  # tied at 0.1234568: ids descending
    a.manifest = describe(a, b, ["Sat@10"])
    trec, _ = write_pool(a, tmp_path / "p.trec")
    assert read_pool(trec, b).hash == a.hash


def test_a_pinned_pool_recomputed_to_float_rounding_is_the_pinned_pool(shared_data: Path, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Dense scores computed on another CPU differ by a few 1e-7, which changes a pool's hash. A pool
    here with the pinned pool's candidates and every score within SCORE_AGREEMENT of it is that pool:
    its check is OKish (not OK) and its rerankers rerank the pinned pool; scores further off, or one
    candidate changed, fail, and the rerankers stay on the pool computed here."""
    import dataclasses

    from harness import registry
    from harness.core.registry import load_benchmark, make_spec
    from harness.record.reproduce import check_pools
    from harness.run.pools import SCORE_AGREEMENT, agreement, pools_file, read_pool, write_pool_lines
    from harness.run.runner import Runner, Settings
    from harness.store.results import Store

    b = load_benchmark("diag/negation", shared_data)
    first = tmp_path / "first"
    assert invoke("pool", "export", "-b", "diag/negation", "--first-stage", "bm25", "--depth", "20",
                  "-o", tmp_path / "p.trec", "--home", first, "--data-dir", shared_data).exit_code == 0
    here = read_pool(tmp_path / "p.trec", b)

    # a query with two candidates of equal score next to each other: the near-tie another CPU breaks the other way
    tq, ti = next((q, i) for q, r in here.rankings.items() for i in range(len(r) - 1) if r[i][1] == r[i + 1][1])

    def variant(shift: float, swap: bool = False):  # type: ignore[no-untyped-def]
        rankings = {q: [(d, s + (shift if i % 2 else -shift)) for i, (d, s) in enumerate(r)] for q, r in here.rankings.items()}
        rankings[tq][ti], rankings[tq][ti + 1] = rankings[tq][ti + 1], rankings[tq][ti]  # the other order of the tie
        if swap:
            stranger = next(d for d in b.corpus.ids if d not in {x for x, _ in rankings[tq]})
            rankings[tq][-1] = (stranger, rankings[tq][-1][1])
        p = dataclasses.replace(here, rankings=rankings)
        p.manifest = {**here.manifest, "hash": p.hash}
        return p

    near, far, other = variant(3e-7), variant(10 * SCORE_AGREEMENT), variant(3e-7, swap=True)
    assert agreement(here, near).reordered == 1
    # the hash names the candidates and their order: near and far share one (only the scores tell them apart)
    assert len({here.hash, near.hash, other.hash}) == 3 and far.hash == near.hash
    assert agreement(here, near).same_pool and agreement(here, near).max_score_diff == pytest.approx(3e-7, rel=0.5)
    assert not agreement(here, far).same_pool and agreement(here, far).same_candidates
    assert not agreement(here, other).same_candidates
    bundle = tmp_path / "ref" / "bundle.jsonl.gz"
    bundle.parent.mkdir()
    for pinned, status in ((near, "OKish"), (far, "FAIL"), (other, "FAIL")):
        write_pool_lines([pinned], pools_file(bundle))  # the shipped pool of that hash
        plan = tmp_path / "plan.toml"
        plan.write_text(f'[matrix]\nquick_benchmarks = ["diag/negation"]\n\n[[pool]]\nfirst_stage = "bm25"\ndepth = 20\n'
                        f'hashes = {{ "diag/negation" = "{pinned.hash}" }}\n')
        monkeypatch.setattr(registry, "reference_files", lambda: {"plan": plan, "bundle": bundle})
        home = tmp_path / f"fresh-{status}-{pinned.hash}-{pinned is far}"
        (c,) = check_pools(Settings(home=home, data_dir=shared_data), log=lambda m: None)
        assert (c.status, c.got, c.pinned) == (status, here.hash, pinned.hash), c.note
        assert ("the same candidates" in c.note) == (pinned is not other)
        # a reranker on the named pool: on the pinned pool where it is that pool, else on the one computed here
        settings = Settings(home=home, data_dir=shared_data, pool="bm25@20",
                            pinned_pools={"bm25@20": {"diag/negation": pinned.hash}})
        with Store(home / "results.sqlite") as store:
            (o,) = Runner(settings, store, log=lambda m: None).run([make_spec("dense")], ["diag/negation"], [0])
        assert o.record.extra["pool"]["hash"] == (near.hash if pinned is near else here.hash)
