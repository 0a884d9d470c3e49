"""Blind runs (harness/run/blind.py, README "Guarantees"): a retriever that reads the judgment files
wins without ``--blind`` (the documented limit of an ordinary run) and finds none with it, scoring
as the method it falls back to; a blind run of dense ranks as an ordinary one; the sandbox has no
network; a blind result is *reproduced blind* and an import that says it was blind is not; a
ranking deeper than k is cut at k. The tests that need the sandbox skip, saying why, where
bubblewrap cannot run."""

from __future__ import annotations

import importlib
import json
import os
import socket
import sys
import textwrap
from pathlib import Path
from typing import Any, Iterator

import pytest
from typer.testing import CliRunner

from harness.cli import app
from harness.registry import make_spec
from harness.run import blind
from harness.run.blind import BlindError
from harness.run.runner import Runner, Settings
from harness.store.results import Store
from harness.store.trust import BLIND_KEY, LEVELS, REPRODUCED, REPRODUCED_BLIND, VERIFIED, trust_of
from tests.conftest import SHARED_DATA
from tests.test_cli import make_beir

ANTONYM = "diag/antonym"
JUDGMENTS = SHARED_DATA / "diag" / "antonym" / "queries_antonym.jsonl"

# A submitted class that cheats: dense, with each query's satisfying documents moved to the top
# when it can read them from the data directory it is handed, a path it knows, the reference
# bundle shipped in the code, or the results store of the home.
CHEAT = textwrap.dedent('''
    import gzip, json, os, sqlite3
    from pathlib import Path

    from retrievers.dense import DenseRetriever

    KNOWN = Path(%r)


    def from_queries_file(path):
        out = {}
        with open(path, encoding="utf-8") as f:
            for line in f:
                o = json.loads(line)
                out[o["query_id"]] = set(o["constraint_satisfying_doc_ids"])
        return out


    def from_bundle():
        from benchmarks.reference import FILES

        out = {}
        with gzip.open(FILES["bundle"], "rt", encoding="utf-8") as f:
            for line in f:
                o = json.loads(line)
                if o.get("kind") == "benchmark_content" and o.get("benchmark") == "diag/antonym":
                    for r in o["qrels"]:
                        if r["grade"] == 2:
                            out.setdefault(r["qid"], set()).add(r["docid"])
        return out


    def from_store(path):
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
        out = {}
        for q, d in conn.execute("SELECT qid, docid FROM bench_qrels WHERE grade = 2"):
            out.setdefault(q, set()).add(d)
        if not out:
            raise LookupError("no judgments in the store")
        return out


    class Cheat(DenseRetriever):
        """Dense, with the satisfying documents first when it can read them."""

        def index(self, corpus, ctx):
            super().index(corpus, ctx)
            self.satisfying, self.found, self.tried = {}, [], {}
            home = Path(os.environ.get("BEYONDSIM_HOME") or Path(ctx.cache_dir).parent)
            sources = [("data_dir", lambda: from_queries_file(Path(ctx.data_dir) / "diag/antonym/queries_antonym.jsonl")),
                       ("known path", lambda: from_queries_file(KNOWN)),
                       ("reference bundle", from_bundle),
                       ("results store", lambda: from_store(Path(ctx.cache_dir).parent / "results.sqlite")),
                       ("home store", lambda: from_store(home / "results.sqlite"))]
            for name, read in sources:
                try:
                    got = read()
                except Exception as e:
                    self.tried[name] = type(e).__name__
                    continue
                if not got:
                    self.tried[name] = "nothing in it"
                    continue
                self.found.append(name)
                for q, docs in got.items():
                    self.satisfying.setdefault(q, set()).update(docs)

        def search(self, queries, k, ctx):
            run = super().search(queries, k, ctx)
            out = {}
            for q in queries:
                ranking = list(run.get(q.id, ()))
                good = self.satisfying.get(q.id, set())
                if good:
                    top = (ranking[0][1] if ranking else 0.0) + 1.0
                    first = [(d, top + 1.0 - i * 1e-3) for i, d in enumerate(sorted(good))]
                    ranking = first + [(d, s) for d, s in ranking if d not in good]
                out[q.id] = ranking[:k]
            return out

        def result_extra(self):
            return {**super().result_extra(), "found": self.found, "tried": self.tried}
''') % str(JUDGMENTS)

# Tries the network: a TCP server of the test on the loopback, and an address outside.
PROBE = textwrap.dedent('''
    import socket
    from dataclasses import dataclass

    from harness.registry import register


    @dataclass(frozen=True)
    class ProbeParams:
        port: int = 0
        outside: bool = False


    def attempt(address):
        s = socket.socket()
        s.settimeout(5)
        try:
            s.connect(address)
            return "connected"
        except OSError as e:
            return type(e).__name__
        finally:
            s.close()


    @register("blind-probe", params=ProbeParams)
    class Probe:
        """Ranks the corpus in its order; says whether it reached the network."""

        def __init__(self, params=None):
            self.p = params or ProbeParams()

        def index(self, corpus, ctx):
            self.ids = corpus.ids
            self.reached = {"loopback": attempt(("127.0.0.1", self.p.port))}
            if self.p.outside:
                self.reached["outside"] = attempt(("192.0.2.1", 80))

        def search(self, queries, k, ctx):
            return {q.id: [(d, -float(i)) for i, d in enumerate(self.ids)] for q in queries}

        def result_extra(self):
            return {"reached": self.reached}


    class Deep(Probe):
        """Returns every document, however small k is."""


    class Reverses:
        """Reranks a pool: its candidates in reverse."""

        def rerank(self, queries, candidates, ctx):
            return {q.id: [(c.id, float(i)) for i, c in enumerate(candidates[q.id])] [::-1] for q in queries}


    class Trains:
        """Records the split it was fitted on."""

        def fit(self, benchmark, ctx):
            self.fitted = {"name": benchmark.name, "queries": sorted(benchmark.judgments.relevance),
                           "validation": ctx.validation.name if ctx.validation else None}

        def index(self, corpus, ctx):
            self.ids = corpus.ids

        def search(self, queries, k, ctx):
            return {q.id: [(d, -float(i)) for i, d in enumerate(self.ids)] for q in queries}

        def result_extra(self):
            return self.fitted


    class Fails:
        """Raises in index."""

        def index(self, corpus, ctx):
            raise ZeroDivisionError("this retriever breaks")

        def search(self, queries, k, ctx):
            return {}


    class Garbage:
        """Returns a string from search."""

        def index(self, corpus, ctx):
            pass

        def search(self, queries, k, ctx):
            return "not a ranking"


    class Talks:
        """Says it calls an LLM."""

        uses_llm = True

        def index(self, corpus, ctx):
            pass

        def search(self, queries, k, ctx):
            return {}
''')


@pytest.fixture(scope="module")
def sandbox() -> blind.Sandbox:
    """The machine's bubblewrap; the test skips, saying why, where it cannot run (fails instead with
    BEYONDSIM_REQUIRE_BLIND=1, as CI sets it)."""
    try:
        return blind.find_sandbox()
    except BlindError as e:
        if os.environ.get("BEYONDSIM_REQUIRE_BLIND") == "1":
            pytest.fail(f"BEYONDSIM_REQUIRE_BLIND=1 but bubblewrap cannot run here: {e}")
        pytest.skip(f"bubblewrap cannot run here: {e}")


@pytest.fixture(scope="module")
def modules(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The test's retriever modules in a folder of their own on sys.path."""
    folder = tmp_path_factory.mktemp("blindmods")
    (folder / "blindcheat.py").write_text(CHEAT)
    (folder / "blindprobe.py").write_text(PROBE)
    sys.path.insert(0, str(folder))
    importlib.import_module("blindprobe")  # registers blind-probe
    yield folder
    sys.path.remove(str(folder))
    for m in ("blindcheat", "blindprobe"):
        sys.modules.pop(m, None)


def _runner(home: Path, **settings: Any) -> Runner:
    return Runner(Settings(home=home, bootstrap=0, **settings), Store(home / "results.sqlite"), log=lambda m: None)


def _run(home: Path, names: list[str], bench: str, **settings: Any) -> dict[str, Any]:
    runner = _runner(home, **settings)
    try:
        outs = runner.run([make_spec(n) for n in names], [bench], [0])
        return {n: runner.store.get(o.key, full=True) for n, o in zip(names, outs)}
    finally:
        runner.close()
        runner.store.close()


# -- on diag/antonym -------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def antonym(sandbox: blind.Sandbox, modules: Path, tmp_path_factory: pytest.TempPathFactory,
            share_embeddings: Any) -> dict[str, dict[str, Any]]:
    """dense and the cheat on diag/antonym, ordinary and blind, in two homes sharing one embedding
    cache (dense's encoding is done once)."""
    if not JUDGMENTS.is_file():
        pytest.skip(f"diag/antonym not found under {SHARED_DATA}")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HF_HUB_OFFLINE", "1")
        mp.setenv("TRANSFORMERS_OFFLINE", "1")
        plain = share_embeddings(tmp_path_factory.mktemp("plain") / "home")
        mp.setenv("BEYONDSIM_HOME", str(plain))
        ordinary = _run(plain, ["dense", "blindcheat:Cheat"], ANTONYM, data_dir=SHARED_DATA)
        sealed = share_embeddings(tmp_path_factory.mktemp("sealed") / "home")
        mp.setenv("BEYONDSIM_HOME", str(sealed))
        # dense first: the blind home's store then holds the judgments, which the cheat tries to read
        blinded = _run(sealed, ["dense", "blindcheat:Cheat"], ANTONYM, data_dir=SHARED_DATA, blind=True)
    return {"ordinary": ordinary, "blind": blinded}


def _sat(rec: Any) -> float:
    return rec.measures["Sat@10"].mean


def test_the_cheat_wins_without_blind(antonym: dict[str, dict[str, Any]]) -> None:
    """The documented limit of an ordinary run: code that reads the judgments is ranked first."""
    cheat, dense = antonym["ordinary"]["blindcheat:Cheat"], antonym["ordinary"]["dense"]
    assert "data_dir" in cheat.extra["retriever"]["found"]
    assert _sat(cheat) > 0.99 and _sat(cheat) > _sat(dense) + 0.2
    assert trust_of(cheat.extra) == REPRODUCED  # nothing afterwards tells its rankings from real ones


def test_the_cheat_finds_no_judgment_under_blind_and_ranks_as_dense(antonym: dict[str, dict[str, Any]]) -> None:
    cheat, dense = antonym["blind"]["blindcheat:Cheat"], antonym["ordinary"]["dense"]
    assert cheat.extra["retriever"]["found"] == []
    assert set(cheat.extra["retriever"]["tried"]) == {"data_dir", "known path", "reference bundle", "results store",
                                                      "home store"}
    assert cheat.rankings == dense.rankings
    assert {m: v.mean for m, v in cheat.measures.items()} == {m: v.mean for m, v in dense.measures.items()}


def test_a_blind_run_of_dense_ranks_as_an_ordinary_one(antonym: dict[str, dict[str, Any]]) -> None:
    blind_dense, dense = antonym["blind"]["dense"], antonym["ordinary"]["dense"]
    assert blind_dense.rankings == dense.rankings
    assert blind_dense.per_query == dense.per_query
    assert blind_dense.extra["model_facts"] == dense.extra["model_facts"]
    assert blind_dense.extra[BLIND_KEY]["sandbox"].startswith("bubblewrap")
    assert BLIND_KEY not in dense.extra


def test_a_blind_result_is_reproduced_blind(antonym: dict[str, dict[str, Any]]) -> None:
    assert LEVELS[0] == REPRODUCED_BLIND and LEVELS.index(REPRODUCED_BLIND) < LEVELS.index(REPRODUCED)
    assert trust_of(antonym["blind"]["dense"].extra) == REPRODUCED_BLIND
    assert trust_of(antonym["blind"]["blindcheat:Cheat"].extra) == REPRODUCED_BLIND  # it ran blind: it found nothing
    assert trust_of(antonym["ordinary"]["dense"].extra) == REPRODUCED


# -- trust: an import never carries "blind" ----------------------------------------------------------


def test_an_import_that_claims_blind_is_not_reproduced_blind() -> None:
    claim = {BLIND_KEY: {"sandbox": "bubblewrap 0.8.0"}}
    assert trust_of(claim) == REPRODUCED_BLIND  # computed here, as the runner writes it
    imported = {**claim, "origin": {"kind": "import", "source": "x.jsonl",
                                    "verified": {"benchmark_version": "v", "measures": ["Sat@10"]}}}
    assert trust_of(imported, headline=["Sat@10"]) == VERIFIED
    assert trust_of(imported, reproduced=True, headline=["Sat@10"]) == REPRODUCED
    assert trust_of({**claim, "run_file": {"path": "r.trec"}}) == VERIFIED  # a run file scored here
    assert trust_of({BLIND_KEY: True}) == REPRODUCED and trust_of({BLIND_KEY: {"sandbox": ""}}) == REPRODUCED


def test_an_exported_blind_result_imports_as_an_import(sandbox: blind.Sandbox, modules: Path, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_beir(tmp_path / "tiny")
    src, dst = tmp_path / "src", tmp_path / "dst"
    monkeypatch.setenv("BEYONDSIM_HOME", str(src))
    recs = _run(src, ["blind-probe"], str(data), k=3, blind=True)
    assert trust_of(recs["blind-probe"].extra) == REPRODUCED_BLIND
    out = tmp_path / "export.jsonl"
    cli = CliRunner()
    res = cli.invoke(app, ["export", str(out), "--home", str(src)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert any(BLIND_KEY in (x.get("extra") or {}) for x in lines)  # the file says it was blind ...
    res = cli.invoke(app, ["import", str(out), "--home", str(dst)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    with Store(dst / "results.sqlite") as store:
        [imported] = [store.get(r["key"], full=True, slot="imported") for r in lines if r.get("key")]
    assert imported is not None and BLIND_KEY in imported.extra
    assert trust_of(imported.extra) != REPRODUCED_BLIND  # ... and that means nothing here


# -- the sandbox ----------------------------------------------------------------------------------


def test_the_sandbox_has_no_network(sandbox: blind.Sandbox, modules: Path, tmp_path: Path,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_beir(tmp_path / "tiny")
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(4)
    port = server.getsockname()[1]
    try:
        here = _runner(tmp_path / "here", k=3)
        [o] = here.run([make_spec("blind-probe", {"port": port})], [str(data)], [0])
        assert here.store.get(o.key).extra["retriever"]["reached"] == {"loopback": "connected"}
        monkeypatch.setenv("BEYONDSIM_HOME", str(tmp_path / "sealed"))
        sealed = _runner(tmp_path / "sealed", k=3, blind=True)
        [o] = sealed.run([make_spec("blind-probe", {"port": port, "outside": True})], [str(data)], [0])
        reached = sealed.store.get(o.key).extra["retriever"]["reached"]
    finally:
        server.close()
    assert reached["loopback"] == "ConnectionRefusedError"  # its loopback is its own: the test's server is not on it
    assert reached["outside"] in ("OSError", "TimeoutError", "ConnectionRefusedError")  # no route out


def test_the_view_hides_the_data_the_home_and_the_reference_bundle(sandbox: blind.Sandbox, tmp_path: Path) -> None:
    from harness.registry import reference_files

    view = blind.sandbox_view(cls=None, home=tmp_path / "home", scratch=tmp_path, device="cpu",
                              hide=[SHARED_DATA])
    args = view.args
    assert "--unshare-all" in args and "--cap-drop" in args and str(SHARED_DATA) not in view.read_only
    bundle = reference_files().get("bundle")
    if bundle is not None and bundle.exists():
        i = args.index(str(bundle.resolve()))
        assert args[i - 2: i] == ["--ro-bind", "/dev/null"]  # its package is bound, the bundle emptied


def test_a_trainable_retriever_is_fitted_blind_on_the_train_split_only(sandbox: blind.Sandbox, modules: Path,
                                                                       tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_beir(tmp_path / "tiny")
    with open(data / "queries.jsonl", "a") as f:
        f.write(json.dumps({"_id": "t1", "text": "aspirin stroke children"}) + "\n")
    (data / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\nt1\td2\t1\n")
    monkeypatch.setenv("BEYONDSIM_HOME", str(tmp_path / "h"))
    rec = _run(tmp_path / "h", ["blindprobe:Trains"], str(data), k=3, blind=True)["blindprobe:Trains"]
    assert rec.extra["retriever"]["queries"] == ["t1"] and rec.extra["retriever"]["name"].endswith(":train")
    assert rec.extra["training"]["queries"] == 1 and rec.phases["fit"]["items"] == 1


def test_a_failure_inside_is_one_line_naming_the_retriever(sandbox: blind.Sandbox, modules: Path, tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_beir(tmp_path / "tiny")
    monkeypatch.setenv("BEYONDSIM_HOME", str(tmp_path / "h"))
    with pytest.raises(BlindError, match=r"'blindprobe:Fails' failed in the blind sandbox: ZeroDivisionError: this "
                                         r"retriever breaks"):
        _run(tmp_path / "h", ["blindprobe:Fails"], str(data), k=3, blind=True)


def test_a_stored_result_that_was_not_blind_is_computed_again(sandbox: blind.Sandbox, modules: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_beir(tmp_path / "tiny")
    monkeypatch.setenv("BEYONDSIM_HOME", str(tmp_path / "h"))
    first = _run(tmp_path / "h", ["blind-probe"], str(data), k=3)["blind-probe"]
    assert BLIND_KEY not in first.extra
    runner = _runner(tmp_path / "h", k=3, blind=True)
    [o] = runner.run([make_spec("blind-probe")], [str(data)], [0])
    assert o.status == "done" and BLIND_KEY in runner.store.get(o.key).extra
    [o] = runner.run([make_spec("blind-probe")], [str(data)], [0])
    assert o.status == "skipped"  # blind already: kept
    plain = _runner(tmp_path / "h", k=3)
    [o] = plain.run([make_spec("blind-probe")], [str(data)], [0])
    assert o.status == "skipped" and BLIND_KEY in plain.store.get(o.key).extra  # an ordinary run keeps it


# -- refusals (no sandbox needed) ------------------------------------------------------------------


def test_no_bubblewrap_is_one_line_and_nothing_runs(modules: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_beir(tmp_path / "tiny")
    monkeypatch.setattr(blind, "_SANDBOX", None)
    monkeypatch.delenv("BEYONDSIM_BWRAP", raising=False)
    monkeypatch.setattr(blind.shutil, "which", lambda name: None)
    runner = _runner(tmp_path / "h", k=3, blind=True)
    with pytest.raises(BlindError, match=r"^--blind needs bubblewrap: apt-get install bubblewrap$"):
        runner.run([make_spec("blind-probe")], [str(data)], [0])
    monkeypatch.setattr(blind, "_SANDBOX", None)  # found again by the next test that needs it


def test_an_llm_retriever_is_refused_blind(sandbox: blind.Sandbox, modules: Path, tmp_path: Path) -> None:
    data = make_beir(tmp_path / "tiny")
    runner = _runner(tmp_path / "h", k=3, blind=True)
    with pytest.raises(BlindError, match=r"calls an LLM, whose server runs outside the sandbox"):
        runner.run([make_spec("blindprobe:Talks")], [str(data)], [0])


def test_blind_with_ray_is_refused(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["run", "blind-probe", "-b", str(tmp_path), "--blind", "--ray", "auto",
                                   "--home", str(tmp_path / "h")])
    assert res.exit_code != 0 and "--blind runs on this machine" in res.output


# -- the cut at k (every run) -----------------------------------------------------------------------


def test_a_ranking_deeper_than_k_is_stored_cut_at_k(modules: Path, tmp_path: Path) -> None:
    data = make_beir(tmp_path / "tiny")
    rec = _run(tmp_path / "h", ["blindprobe:Deep"], str(data), k=2)["blindprobe:Deep"]
    assert rec.rankings and all(len(r) == 2 for r in rec.rankings.values())


# -- the command line ------------------------------------------------------------------------------


def test_run_and_submit_blind_store_and_show_reproduced_blind(sandbox: blind.Sandbox, modules: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_beir(tmp_path / "tiny")
    home = tmp_path / "h"
    monkeypatch.setenv("BEYONDSIM_HOME", str(home))
    cli = CliRunner()
    res = cli.invoke(app, ["run", "blind-probe", "-b", str(data), "--k", "3", "--blind", "--blind-cache", "fresh",
                           "--home", str(home)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    res = cli.invoke(app, ["submit", "blindprobe:Probe", "-b", str(data), "--blind", "--home", str(home),
                           "--out", str(tmp_path / "site"), "-p", "port=1"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "blind" in res.output
    with Store(home / "results.sqlite") as store:
        recs = [r for r in store.results() if r.retriever == "blind-probe"]
    assert len(recs) == 2 and all(trust_of(r.extra) == REPRODUCED_BLIND for r in recs)  # run's and submit's
    assert sorted(r.extra[BLIND_KEY]["embedding_cache"] for r in recs) == ["fresh", "shared"]
    pages = [p.read_text(encoding="utf-8") for p in (tmp_path / "site").rglob("*.html")]
    assert any("reproduced blind" in p for p in pages)
    downloads = [p.read_text(encoding="utf-8") for p in (tmp_path / "site").rglob("*.csv")]
    assert any("reproduced blind" in d for d in downloads)


def test_a_reproduction_runs_blind_when_its_settings_say_so(sandbox: blind.Sandbox, modules: Path, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """``reproduce`` of a submitted configuration (a matrix row naming it) with ``Settings(blind=True)``
    recomputes it in the sandbox (the command's ``--blind`` option is the CLI's to add)."""
    from harness.record.matrix import read_matrix
    from harness.record.reproduce import OKISH, reproduce
    from tests.test_reproduce import write_matrix

    data = make_beir(tmp_path / "tiny")
    monkeypatch.setenv("BEYONDSIM_HOME", str(tmp_path / "home"))
    rows = read_matrix(write_matrix(tmp_path / "m.toml", [{
        "retriever": "blind-probe", "benchmark": str(data), "measure": "nDCG@10", "expected": 0.0, "tolerance": 10.0,
        "kind": "reference", "source": "reference run (test)", "reason": "a submitted class"}]))
    [outcome] = reproduce(rows, Settings(home=tmp_path / "home", device="cpu", blind=True), log=lambda m: None)
    assert outcome.status == OKISH, outcome.note
    with Store(tmp_path / "home" / "reproduce" / "results.sqlite") as store:
        [rec] = store.results()
    assert trust_of(rec.extra) == REPRODUCED_BLIND


def test_a_blind_reranker_gets_a_pool_whose_first_stage_ran_blind(sandbox: blind.Sandbox, modules: Path,
                                                                  tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    data = make_beir(tmp_path / "tiny")
    home = tmp_path / "h"
    monkeypatch.setenv("BEYONDSIM_HOME", str(home))
    first = _run(home, ["blind-probe"], str(data), k=3)["blind-probe"]  # the first stage, stored not blind
    assert BLIND_KEY not in first.extra
    runner = _runner(home, k=3, blind=True, pool="blind-probe@3")
    [o] = runner.run([make_spec("blindprobe:Reverses")], [str(data)], [0])
    rec = runner.store.get(o.key, full=True)
    assert trust_of(rec.extra) == REPRODUCED_BLIND and any("pool" in x for x in rec.extra[BLIND_KEY]["sees"])
    assert BLIND_KEY in runner.store.get(first.key).extra  # computed again, blind, before its pool reached the sandbox
    assert all([d for d, _ in r] == [d for d, _ in first.rankings[q]][::-1] for q, r in rec.rankings.items())
    pool_file = tmp_path / "pool.trec"
    pool_file.write_text("q1 Q0 d1 1 1.0 x\n")
    with pytest.raises(BlindError, match="a blind run reranks a pool named <first stage>@<depth>"):
        _runner(home, k=3, blind=True, pool=str(pool_file)).run([make_spec("blindprobe:Reverses")], [str(data)], [0])


def test_a_bad_ranking_from_inside_is_the_run_error_a_run_here_gives(sandbox: blind.Sandbox, modules: Path,
                                                                     tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.types import RunError

    data = make_beir(tmp_path / "tiny")
    monkeypatch.setenv("BEYONDSIM_HOME", str(tmp_path / "h"))
    with pytest.raises(RunError, match=r"retriever 'blindprobe:Garbage': search returned str"):
        _run(tmp_path / "h", ["blindprobe:Garbage"], str(data), k=3, blind=True)
    with pytest.raises(RunError, match=r"retriever 'blindprobe:Garbage': search returned str"):
        _run(tmp_path / "plain", ["blindprobe:Garbage"], str(data), k=3)
