"""Forged and hostile inputs, each answered at its cause (issue 43b):

1. an LLM server that echoes the API key in its error bodies never gets it into a log line, a
   warning or an error (redacted before any cut);
2. crafted cost records (``*.cost.json``, ``model-load.json``, ``model-facts.json``, a cached LLM
   reply, a stored result's ``extra["reused"]``) are ignored with one warning and count as unknown;
   an imported result's phase times never become another row's derived cold cost; the audit's
   JSON is finite;
3. a benchmark path with a name too long for any file system is one error line;
4. declared training benchmarks are matched case-insensitively, and a retriever that trains but
   declares no training source is refused before it runs.
"""

from __future__ import annotations

import json
import logging
import math
import random
import string
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.core.leakage import LeakageError, TrainingData, check_unseen, overlap
from harness.core.ledger import Ledger
from harness.cost.figures import Costs, derive_cold, result_cost
from harness.store.results import BenchmarkInfo, Store
from tests.factories import make_benchmark, make_corpus, make_record
from tests.test_cli import invoke, make_beir

# -- 1. secrets ------------------------------------------------------------------------------------

_rng = random.Random(43)
KEY = "sk-proj-" + "".join(_rng.choice(string.ascii_letters + string.digits) for _ in range(156))  # 164 chars


def pieces(secret: str, n: int = 8) -> set[str]:
    return {secret[i:i + n] for i in range(len(secret) - n + 1)}


def leaked(text: str) -> list[str]:
    """The 8-character pieces of :data:`KEY` found in ``text``."""
    return sorted(p for p in pieces(KEY) if p in text)


def error_body(message: str) -> str:
    """An OpenAI-style error body (the ``openai`` package quotes ``error.message`` in its exception)."""
    return json.dumps({"error": {"message": message, "type": "invalid_request_error", "code": None}})


def long_message() -> str:
    """A 10 kB error message: the key in an echoed header from character ~220, and again at the end."""
    head = "invalid credentials for this project; the request was rejected by the gateway. "
    head = (head * 3)[:190]
    middle = f"bad header Authorization: Bearer {KEY} " + "detail " * 1400
    return head + middle + f"you sent {KEY}"


class EchoServer:
    """An OpenAI-compatible endpoint that answers every chat request with ``(status, body)`` from its
    script (the last entry repeats)."""

    def __init__(self, script: list[tuple[int, str]]):
        self.script, self.count = list(script), 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:
                pass

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                status, body = outer.script[min(outer.count, len(outer.script) - 1)]
                outer.count += 1
                payload = body.encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def client(base_url: str, tmp_path: Path | None = None, **kw: Any):
    from harness.models.llm import LLMClient, LLMSettings

    settings = LLMSettings(base_url=base_url, model="gpt-4o-mini", timeout_s=5.0, backoff_s=0.01, **kw)
    return LLMClient(settings, cache_path=tmp_path / "llm.sqlite" if tmp_path else None, sleep=lambda s: None)


@pytest.mark.parametrize("status", [500, 503])
def test_1_a_key_echoed_in_retried_error_bodies_never_reaches_a_warning_or_the_error(
        status: int, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
        capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("openai")
    from harness.models.llm import LLMError

    monkeypatch.setenv("BEYONDSIM_LLM_API_KEY", KEY)
    short = error_body(f"bad header Authorization: Bearer {KEY}")
    server = EchoServer([(status, short), (status, error_body(long_message()))])
    caplog.set_level(logging.WARNING, logger="beyondsim.llm")
    try:
        with client(server.base_url, max_retries=2) as c:
            with pytest.raises(LLMError) as e:
                c.chat("hello")
            described = json.dumps(c.describe())
    finally:
        server.stop()
    assert server.count == 3
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 2 and all("retry" in w for w in warnings)
    out = capsys.readouterr()
    for text in (*warnings, caplog.text, str(e.value), out.out, out.err, described):
        assert leaked(text) == [], text[:400]
    assert "***" in warnings[0] and "giving up after 2 retries" in str(e.value)


def test_1_a_long_401_body_is_redacted_before_it_is_cut(monkeypatch: pytest.MonkeyPatch,
                                                         caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("openai")
    from harness.models.llm import LLMError

    body = error_body(long_message())
    assert len(body) > 10_000 and 180 < long_message().index(KEY) < 260
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.delenv("BEYONDSIM_LLM_API_KEY", raising=False)
    server = EchoServer([(401, body)])
    caplog.set_level(logging.DEBUG)
    try:
        with client(server.base_url) as c:
            with pytest.raises(LLMError, match="HTTP 401") as e:
                c.chat("hello")
    finally:
        server.stop()
    assert server.count == 1  # a 401 is not retried
    message = str(e.value)
    assert leaked(message) == [] and leaked(caplog.text) == []
    assert "Authorization: Bearer ***" in message and len(message) < 500


def test_1_redaction_covers_tokens_the_client_does_not_know() -> None:
    from harness.models.llm_accounts import redact

    other = "tok_" + "Q" * 30
    cases = [f"Authorization: Bearer {other}", f'{{"authorization": "Basic {other}"}}', f"bearer {other}",
             f"https://x/v1?api_key={other}&a=1", f'{{"api-key": "{other}"}}', f"x-api-key: {other}",
             f"http://user:{other}@host:8000/v1", f"your key sk-{other}", f"?access_token={other}",
             f'{{"client_secret": "{other}"}}']
    for text in cases:
        got = redact(text)
        assert other not in got and "***" in got, (text, got)
    assert redact(f"... {KEY[:50]} ...", [KEY[:50]]) == "... *** ..."
    for plain in ("a text with nothing secret: 42 documents", "the password: was not sent", "Error code: 500"):
        assert redact(plain) == plain


@pytest.mark.parametrize("bad", [float("nan"), "12s", -1e9, 1e308])
def test_2_a_cached_llm_reply_with_a_forged_cost_counts_as_unknown(bad: Any, tmp_path: Path,
                                                                    caplog: pytest.LogCaptureFixture) -> None:
    pytest.importorskip("openai")
    from harness.models.llm import ChatRequest, ResponseCache, request_key

    req = ChatRequest.of("question one")
    cache = ResponseCache(tmp_path / "llm.sqlite")
    cache.put(request_key("gpt-4o-mini", req.message_dicts(), req.params()), "gpt-4o-mini", {},
              {"texts": ["answer"], "prompt_tokens": 3, "completion_tokens": 1, "usd": bad, "latency_s": bad})
    cache.close()
    ledger = Ledger()
    caplog.set_level(logging.WARNING, logger="beyondsim.llm")
    with client("http://127.0.0.1:9/v1", tmp_path) as c:  # never contacted: a cache hit
        out = c.chat(req, ledger)
        c.chat(req, ledger)
    assert out.texts == ["answer"] and out.cached
    (rec,) = ledger.reused.values()
    assert rec["entries"] == 2 and rec["unknown"] == 2 and rec["usd_unknown"] == 2
    assert rec["wall_s"] == 0.0 and rec["usd"] == 0.0  # nothing known, nothing bad added
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and {"'latency_s'", "'usd'"} == {w.split("field ")[1].split(" ")[0] for w in lines}
    assert all(str(tmp_path / "llm.sqlite") in w for w in lines)


# -- 2. cost records -------------------------------------------------------------------------------

MODEL = "all-MiniLM-L6-v2"
TEXTS = ["Aspirin reduces the risk of heart attack.", "Dogs bark at night.", "Green tea lowers cholesterol."]
BAD_JSON = {"nan": "NaN", "string": '"12s"', "negative": "-1e9", "huge": "1e308"}


@pytest.mark.parametrize("bad", sorted(BAD_JSON))
def test_2_forged_embedding_cost_records_are_ignored_with_one_warning_each(bad: str, tmp_path: Path,
                                                                             no_network) -> None:
    from harness.models.facts import pool_facts
    from harness.models.pool import EncoderPool

    warnings: list[str] = []
    pool = EncoderPool(tmp_path / "cache", "cpu", warn=warnings.append)
    folder, key = pool.cache_key(MODEL, TEXTS, prefix="", normalize=True, max_length=None)
    emb = np.random.default_rng(0).standard_normal((3, 384)).astype(np.float32)
    pool.cache.put(folder, key, emb)
    root = pool.cache.root / folder
    value = BAD_JSON[bad]
    (root / f"{key}.cost.json").write_text(f'{{"wall_s": {value}, "cpu_s": 1.0, "rows": 3}}')
    (root / "model-load.json").write_text(f'{{"wall_s": 2.0, "cpu_s": {value}}}')
    (root / "model-facts.json").write_text(f'{{"model": "x", "role": "encoder", "parameters": {value}, '
                                           '"dimension": 384, "max_tokens": 256}')
    ledger = Ledger()
    pool.ledger = ledger
    with ledger.phase("index"):
        got = pool.encode(MODEL, TEXTS)
        pool.encode(MODEL, TEXTS)  # read again: no second warning
    np.testing.assert_array_equal(np.asarray(got), emb)  # a cache hit: no model loaded
    assert pool.stats["encoded"] == 0
    index, model = ledger.reused["index"], ledger.reused["model"]
    assert index["entries"] == 1 and index["unknown"] == 1 and index["wall_s"] == 0.0 and index["cpu_s"] == 0.0
    assert index["cpu_unknown"] == 1  # the whole record is ignored, not only its bad field
    assert model["unknown"] == 1 and model["cpu_unknown"] == 1 and model["wall_s"] == 0.0
    facts = pool_facts(pool)
    assert facts == [{"model": MODEL, "role": "encoder", "parameters": None, "dimension": None, "max_tokens": None}]
    assert len(warnings) == 3, warnings
    for name, field in ((f"{key}.cost.json", "wall_s"), ("model-load.json", "cpu_s"),
                        ("model-facts.json", "parameters")):
        (line,) = [w for w in warnings if str(root / name) in w]
        assert f"'{field}'" in line and "unknown" in line and "\n" not in line
    # the result's cold cost: finite, never negative, and a lower bound that says so
    rec = make_record("dense", phases={"index": {"wall_s": 0.5, "cpu_s": 0.5, "items": 3},
                                       "search": {"wall_s": 0.1, "cpu_s": 0.1, "items": 3}},
                      extra={"reused": ledger.reused})
    cost = result_cost(rec)
    assert cost.offline_s == pytest.approx(0.5) and cost.reused_unknown == 2
    assert all(v is None or (math.isfinite(v) and v >= 0) for v in cost.fields().values() if not isinstance(v, str))


def reference(key: str, label: str, index_s: float, extra: dict | None = None, model_s: float | None = None,
              bench: str = "a", docs: int = 1000):
    phases = {"index": {"wall_s": index_s, "cpu_s": index_s, "items": docs},
              "search": {"wall_s": 1.0, "cpu_s": 1.0, "items": 10}}
    if model_s is not None:
        phases["model"] = {"wall_s": model_s, "cpu_s": model_s, "items": 0}
    return make_record(label, key=key, spec_hash=key, spec={"retriever": label, "params": {"model": "m"}},
                       benchmark=bench, benchmark_version="v", k=10, harness_version="0", n_queries=10,
                       phases=phases, extra=dict(extra or {}))


BUNDLE = {"origin": {"kind": "import", "source": "reference bundle r1", "reference": "r1"}}
PLAIN = {"origin": {"kind": "import", "source": "evil.jsonl"}}


def forged_store() -> list:
    """A result computed here (dense: 20 s to index, 4 s to load the model), seven shipped reference
    rows that read the corpus from the cache, and imports claiming enormous phase times."""
    recs = [reference("dense", "dense", 20.0, model_s=4.0)]
    recs += [reference(f"ref{i}", f"ref{i}", 0.01, BUNDLE) for i in range(7)]
    recs.append(reference("evil", "evil", 9e6, PLAIN, model_s=9e6))  # plausible magnitude, imported
    recs.append(reference("evil2", "evil2", 1e308, PLAIN, model_s=1e308))
    recs.append(reference("verified", "verified", 5e6, {"origin": {**PLAIN["origin"], "verified": {
        "benchmark_version": "v", "measures": ["nDCG@10"]}}}))
    recs.append(reference("forged-reuse", "forged", 1.0, {"reused": {
        "index": {"wall_s": "12s", "cpu_s": "NaN", "entries": 1, "unknown": "x", "usd": -5.0, "kinds": "ab"},
        "search": {"wall_s": -1e9, "cpu_s": 1e308, "entries": 1}}}))
    return recs


def test_2_an_import_never_moves_another_rows_derived_cold_cost() -> None:
    recs = forged_store()
    costs = Costs(recs)
    for i in range(7):  # each reference row: dense's 20 s index + its 4 s model load, whatever the imports say
        c = costs.of(recs[1 + i])
        assert c.offline_s == pytest.approx(24.0), c
        assert "dense's index time on a" in c.cold_basis
    derived = derive_cold(recs)
    assert {d.index_s for d in derived.values()} <= {20.0}
    assert {d.model_s for d in derived.values()} == {4.0}
    # an import may be given a derived cold cost (its own row), but never the other way round
    assert costs.of(recs[8]).run_offline_s == pytest.approx(9e6)
    assert costs.of(recs[9]).offline_s is None and costs.of(recs[9]).run_offline_s is None  # 1e308 s: unknown
    forged = costs.of(recs[-1])
    assert forged.offline_s == pytest.approx(1.0) and forged.online_s == pytest.approx(1.0)
    assert forged.reused_unknown == 2 and forged.offline_cpu_s is None
    assert forged.cold_usd.unknown == 1 and forged.cold_usd.known == 0.0


def _strict(text: str) -> Any:
    def refuse(name: str) -> Any:
        raise AssertionError(f"{name} in the audit's JSON")
    return json.loads(text, parse_constant=refuse)


def _numbers(x: Any) -> list[float]:
    if isinstance(x, dict):
        return [n for v in x.values() for n in _numbers(v)]
    if isinstance(x, list):
        return [n for v in x for n in _numbers(v)]
    return [x] if isinstance(x, (int, float)) and not isinstance(x, bool) else []


def test_2_the_audit_json_is_finite_and_ignores_forged_phase_times(home: Path) -> None:
    with Store(home / "results.sqlite") as store:
        store.save_benchmark(BenchmarkInfo("a", "v", "topical", ["nDCG@10"], {"queries": 10, "documents": 1000}))
        for r in forged_store():
            store.save(r)
    for args in ((), ("--by", "retriever"), ("--by", "benchmark"), ("--by", "model")):
        res = invoke("audit", "-f", "json", *args)
        assert res.exit_code == 0, res.output
        rows = _strict(res.stdout)
        assert all(math.isfinite(n) for n in _numbers(rows))
    rows = {r["retriever"]: r for r in _strict(invoke("audit", "-f", "json").stdout)}
    for i in range(7):
        assert rows[f"ref{i}"]["offline_s"] == pytest.approx(24.0, abs=1e-3)
    assert rows["evil2"]["offline_s"] is None and rows["forged"]["offline_s"] >= 0
    res = invoke("audit", "-f", "json", "--project", "a,elsewhere")
    assert res.exit_code == 0, res.output
    projection = _strict(res.stdout)
    assert projection["rows"] and all(math.isfinite(n) for n in _numbers(projection))


# -- 3. paths --------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", ["folder", "split", "nested"])
def test_3_a_benchmark_path_with_a_name_too_long_is_one_error_line(shape: str, home: Path, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from harness.data.readers import DataError, missing_files
    from benchmarks.beir import BeirFolder

    monkeypatch.chdir(tmp_path)
    name = {"folder": "./" + "a" * 300, "split": "./" + "b" * 300 + ":train",
            "nested": f"{tmp_path}/{'c' * 300}/more"}[shape]
    with pytest.raises(DataError, match="255") as e:
        BeirFolder.parse(name)
    assert len(str(e.value)) < 300 and "\n" not in str(e.value)
    res = invoke("run", "bm25", "-b", name)
    assert res.exit_code != 0
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "characters" in lines[0], res.output
    assert "Traceback" not in res.output and "OSError" not in res.output and len(lines[0]) < 300
    with pytest.raises(DataError, match="bytes long"):
        missing_files(tmp_path, ["d" * 300 + "/corpus.jsonl"])


# -- 4. training data ------------------------------------------------------------------------------

def _bench(name: str, queries: dict[str, str], docs: dict[str, str]):
    qids = list(queries)
    rel = {q: {next(iter(docs)): 1} for q in qids}
    return make_benchmark(make_corpus(docs), queries, rel, name=name, version=f"v-{name}")


def test_4_declared_training_benchmarks_match_whatever_their_case() -> None:
    nevir_train = _bench("nevir:train", {"t1": "a question"}, {"x1": "a passage"})
    nevir = _bench("nevir", {"q1": "which mayor?"}, {"d1": "a mayor"})
    # declared NevIR:train under another version: still nevir's train split, scored on it
    with pytest.raises(LeakageError, match="refusing to score on nevir:train"):
        check_unseen(TrainingData(({"benchmark": "NevIR:train", "version": "v-elsewhere"},)), nevir_train, "t")
    with pytest.raises(LeakageError, match="refusing to score on nevir"):
        check_unseen(TrainingData(({"benchmark": "NEVIR", "version": "v-old"},)), nevir, "t")
    # ids declared under the family's other spelling name the same items
    td = TrainingData(({"benchmark": "NevIR:train", "version": "v-nevir:train"},), {"NevIR": frozenset({"q1"})},
                      {"NEVIR": frozenset({"d1"})})
    assert overlap(td, nevir) == {"query ids": ["q1"], "document ids": ["d1"]}
    with pytest.raises(LeakageError):
        check_unseen(td, nevir, "t")
    # the train split scored on the test split with nothing shared stays allowed
    check_unseen(TrainingData(({"benchmark": "NevIR:train", "version": "v-nevir:train"},)), nevir, "t")


def test_4_a_trainer_that_declares_no_source_is_refused_before_it_runs(home: Path, tmp_path: Path) -> None:
    from harness.core import registry
    from harness.registry import register

    name = "t43b-empty-trainer"
    ran: list[str] = []

    class EmptyTrainer:
        """A retriever whose model trains, declaring training data with no source."""

        def __init__(self, params: Any = None) -> None:
            self.params = params

        def training_data(self, ctx: Any) -> TrainingData:
            return TrainingData()

        def index(self, corpus: Any, ctx: Any) -> None:
            ran.append("index")

        def search(self, queries: Any, k: int, ctx: Any) -> dict:
            ran.append("search")
            return {q.id: {} for q in queries}

    register(name, trains_on="a toy split")(EmptyTrainer)
    try:
        data = make_beir(tmp_path / "tiny")
        res = invoke("run", name, "-b", str(data), "--k", "5")
        assert res.exit_code != 0, res.output
        assert "declares training data with no source" in " ".join(res.output.split())
        assert ran == []  # refused before it indexed anything
        with pytest.raises(LeakageError, match="no source"):
            check_unseen(TrainingData(), _bench("b", {"q": "x"}, {"d": "y"}), "my label", retriever=EmptyTrainer)
        # a retriever that trains nothing may declare nothing
        check_unseen(TrainingData(), _bench("b", {"q": "x"}, {"d": "y"}), "bm25", trains_on="")
    finally:
        registry._retrievers.pop(name, None)
