"""The shared LLM client against a local OpenAI-compatible server: cache, retries, budget,
prices, concurrency and key hygiene, through the real ``openai`` package."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

pytest.importorskip("openai")

from fake_llm import FakeLLMServer  # noqa: E402

from harness.core.ledger import Ledger, RunTag, call_totals, read_journal  # noqa: E402
from harness.models.llm import (BudgetExceeded, ChatRequest, LLMClient, LLMError, LLMSettings, Price,
                                extract_json_object, load_prices, price_for, request_key)


@pytest.fixture
def server():
    s = FakeLLMServer().start()
    yield s
    s.stop()


def make_client(server, tmp_path, cache=True, sleeps=None, **kw) -> LLMClient:
    kw.setdefault("model", "gpt-4o-mini")
    kw.setdefault("backoff_s", 0.01)
    settings = LLMSettings(base_url=server.base_url, timeout_s=kw.pop("timeout_s", 5.0), **kw)
    record = sleeps.append if sleeps is not None else (lambda s: None)
    return LLMClient(settings, cache_path=tmp_path / "llm.sqlite" if cache else None, sleep=record)


def test_chat_records_tokens_and_dollars(server, tmp_path):
    server.push(("ok", "a hypothetical passage"))
    ledger = Ledger()
    with make_client(server, tmp_path) as c:
        out = c.chat("Please write a passage.", ledger, purpose="test")
    assert out.texts == ["a hypothetical passage"]
    assert (out.prompt_tokens, out.completion_tokens, out.cached) == (4, 3, False)
    (call,) = ledger.llm_calls
    # gpt-4o-mini: $0.15 / 1M input, $0.60 / 1M output
    assert call.usd == pytest.approx((4 * 0.15 + 3 * 0.60) / 1e6)
    assert call.purpose == "test" and not call.cached
    assert server.requests[0]["model"] == "gpt-4o-mini"
    assert server.requests[0]["temperature"] == 0.0


def test_cached_rerun_makes_zero_requests_and_costs_nothing(server, tmp_path):
    reqs = [ChatRequest.of(f"question {i}", n=2, temperature=0.7, seed=3) for i in range(5)]
    first, second = Ledger(), Ledger()
    with make_client(server, tmp_path) as c:
        a = c.chat_many(reqs, first)
    assert server.count == 5
    with make_client(server, tmp_path) as c:
        b = c.chat_many(reqs, second)
        assert c.stats["requests"] == 0 and c.stats["cache_hits"] == 5
    assert server.count == 5  # no new HTTP request
    assert [x.texts for x in a] == [x.texts for x in b]
    t1, t2 = (call_totals([vars(x) for x in led.llm_calls]) for led in (first, second))
    assert t2["cache_hits"] == t2["calls"] == 5 and t2["usd"] == 0.0
    assert (t2["prompt_tokens"], t2["completion_tokens"]) == (t1["prompt_tokens"], t1["completion_tokens"])
    assert t1["usd"] > 0


def test_cache_key_covers_model_messages_and_params():
    m = [{"role": "user", "content": "q"}]
    base = request_key("m", m, {"temperature": 0})
    assert base == request_key("m", [{"content": "q", "role": "user"}], {"temperature": 0})
    assert len({base, request_key("m2", m, {"temperature": 0}), request_key("m", m, {"temperature": 0.7}),
                request_key("m", [{"role": "user", "content": "q2"}], {"temperature": 0})}) == 4


def test_retries_429_and_5xx_with_backoff_and_retry_after(server, tmp_path):
    server.push(("status", 429, 3), ("status", 503), ("status", 500), ("ok", "fine"))
    sleeps: list[float] = []
    ledger = Ledger()
    with make_client(server, tmp_path, sleeps=sleeps, backoff_s=0.5, backoff_max_s=10) as c:
        out = c.chat("hello", ledger)
    assert out.texts == ["fine"]
    assert server.count == 4
    # Retry-After 3 s beats the 0.5 s first backoff; then exponential 1.0, 2.0
    assert sleeps == [3.0, 1.0, 2.0]
    assert ledger.counters["llm.retries"] == 3
    assert len(ledger.llm_calls) == 1


def test_gives_up_after_max_retries_and_keeps_key_out_of_the_error(server, tmp_path, monkeypatch):
    monkeypatch.setenv("BEYONDSIM_LLM_API_KEY", "sk-very-secret-123")
    server.push(*[("status", 500)] * 3)
    with make_client(server, tmp_path, max_retries=2) as c:
        with pytest.raises(LLMError) as e:
            c.chat("hello")
        assert "sk-very-secret-123" not in json.dumps(c.describe())
    assert server.count == 3
    assert server.headers[0]["authorization"] == "Bearer sk-very-secret-123"  # it was sent ...
    assert "sk-very-secret-123" not in str(e.value)  # ... and never shown
    assert "giving up after 2 retries" in str(e.value)


def test_client_errors_are_not_retried_and_are_redacted(server, tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-other-secret")
    server.push(("status", 401))
    with make_client(server, tmp_path) as c:
        with pytest.raises(LLMError, match="HTTP 401") as e:
            c.chat("hello")
    assert server.count == 1
    assert "sk-other-secret" not in str(e.value) and "***" in str(e.value)


def test_timeout_and_malformed_body_are_retried(server, tmp_path):
    server.push(("timeout", 1.5), ("malformed",), ("empty",), ("ok", "after all"))
    ledger = Ledger()
    with make_client(server, tmp_path, timeout_s=0.5) as c:
        out = c.chat("hello", ledger)
    assert out.texts == ["after all"]
    assert server.count == 4 and ledger.counters["llm.retries"] == 3


def test_call_budget_stops_before_the_call_and_keeps_finished_work(server, tmp_path):
    reqs = [ChatRequest.of(f"q{i}") for i in range(5)]
    with make_client(server, tmp_path, max_calls=2, concurrency=1) as c:
        with pytest.raises(BudgetExceeded, match="max-calls 2"):
            c.chat_many(reqs, Ledger())
    assert server.count == 2
    ledger = Ledger()
    with make_client(server, tmp_path, max_calls=3, concurrency=1) as c:
        out = c.chat_many(reqs, ledger)  # the two answered ones come from the cache
    assert server.count == 5 and len(out) == 5
    assert sum(x.cached for x in ledger.llm_calls) == 2


def test_dollar_budget_is_never_exceeded(tmp_path):
    # gpt-4o: $2.50 / $10 per 1M. Each reply is 500 tokens ($0.005); the worst case checked before a
    # request is max_tokens = 1000 completion tokens ($0.01) plus the prompt estimate.
    s = FakeLLMServer(lambda body: "word " * 500).start()
    try:
        for conc in (1, 3):  # in-flight requests hold their worst case, so concurrency cannot overshoot
            reqs = [ChatRequest.of(f"question {conc} {i} " * 10, max_tokens=1000) for i in range(20)]
            ledger, before = Ledger(), s.count
            with make_client(s, tmp_path, model="gpt-4o", max_usd=0.03, concurrency=conc) as c:
                with pytest.raises(BudgetExceeded, match="max-usd"):
                    c.chat_many(reqs, ledger)
                spent = c.budget.spent_usd
            assert sum(x.usd for x in ledger.llm_calls) == pytest.approx(spent)
            assert 0 < spent <= 0.03  # never past the budget
            assert s.count - before == len(ledger.llm_calls) < len(reqs)
            if conc == 1:
                assert spent > 0.015  # ... and one at a time it spends what it can
    finally:
        s.stop()


def test_reply_without_usage_has_unknown_tokens_and_dollars(server, tmp_path):
    server.push(("no_usage", "a passage"), ("no_usage", "free passage"))
    ledger = Ledger(run=RunTag.new(label="hyde", benchmark="nevir", seed=0))
    with make_client(server, tmp_path) as c:
        out = c.chat("Please write a passage.", ledger)
        assert c.budget.calls == 1
    assert out.texts == ["a passage"]
    assert (out.prompt_tokens, out.completion_tokens, out.usd) == (None, None, None)  # not 0 tokens, $0.00
    (call,) = ledger.llm_calls
    assert (call.prompt_tokens, call.completion_tokens, call.usd, call.cached) == (None, None, None, False)
    t = call_totals([vars(x) for x in ledger.llm_calls])
    assert (t["prompt_tokens"], t["usd"], t["usage_unknown_calls"]) == (None, None, 1)
    (row,) = read_journal(tmp_path / "llm.sqlite")  # journaled as billed, with unknown tokens and $
    assert (row["prompt_tokens"], row["completion_tokens"], row["usd"], row["label"]) == (None, None, None, "hyde")
    hit = Ledger()
    with make_client(server, tmp_path) as c:  # the cache keeps "unknown" too; a hit costs $0 new
        again = c.chat("Please write a passage.", hit)
    assert (again.cached, again.prompt_tokens, again.usd) == (True, None, 0.0)
    assert (hit.llm_calls[0].prompt_tokens, hit.llm_calls[0].usd) == (None, 0.0)
    with make_client(server, tmp_path, model="gemma-3-270m-q4_k_m") as c:  # priced at $0: free whatever the tokens
        free = c.chat("Another passage.", Ledger())
    assert (free.prompt_tokens, free.usd) == (None, 0.0)
    assert server.count == 2


def test_unknown_usage_settles_at_its_reservation(tmp_path):
    s = FakeLLMServer(usage=False).start()
    try:
        reqs = [ChatRequest.of(f"question {i:02d}", max_tokens=1000) for i in range(10)]
        ledger = Ledger()
        with make_client(s, tmp_path, model="gpt-4o", max_usd=0.035, concurrency=1) as c:
            est = c._estimate_usd(reqs[0])
            with pytest.raises(BudgetExceeded, match="max-usd"):
                c.chat_many(reqs, ledger)
            spent = c.budget.spent_usd
        # each reply may have cost its whole reservation (~$0.01), so only three fit under $0.035
        assert est == pytest.approx((len("question 00".encode()) + 16) * 2.5e-6 + 1000 * 10e-6)
        assert s.count == len(ledger.llm_calls) == 3
        assert spent == pytest.approx(3 * est) and spent <= 0.035
        assert all(x.usd is None for x in ledger.llm_calls)
    finally:
        s.stop()


@pytest.mark.parametrize("pool", ["chat_many", "threads"])
def test_parallel_budget_ends_within_one_reservation_of_the_cap(tmp_path, pool):
    # gpt-4o: $2.50 / $10 per 1M. A request reserves ~$0.0101 (1000 completion tokens); a reply
    # costs ~$0.003 (300 words). With 6 requests in flight, refusing as soon as the in-flight
    # reservations fill the cap would stop far below it; waiting for them to settle does not.
    s = FakeLLMServer(lambda body: "word " * 300, delay_s=0.05).start()
    cap = 0.05
    try:
        reqs = [ChatRequest.of(f"question number {i:03d}", max_tokens=1000) for i in range(60)]
        ledger = Ledger()
        with make_client(s, tmp_path, model="gpt-4o", max_usd=cap, concurrency=6) as c:
            most = max(c._estimate_usd(r) for r in reqs)
            if pool == "chat_many":
                with pytest.raises(BudgetExceeded):
                    c.chat_many(reqs, ledger)
            else:
                with ThreadPoolExecutor(max_workers=6) as ex:
                    futures = [ex.submit(c.chat, r, ledger) for r in reqs]
                errors = [f.exception() for f in futures]
                assert any(isinstance(e, BudgetExceeded) for e in errors)
                assert all(e is None or isinstance(e, BudgetExceeded) for e in errors)
            spent = c.budget.spent_usd
        assert s.max_in_flight > 1
        assert sum(x.usd for x in ledger.llm_calls) == pytest.approx(spent)
        assert s.count == len(ledger.llm_calls)
        assert cap - most <= spent <= cap
        journal = read_journal(tmp_path / "llm.sqlite")
        assert len(journal) == s.count and sum(r["usd"] for r in journal) == pytest.approx(spent)
    finally:
        s.stop()


def test_null_message_is_a_retried_malformed_reply(server, tmp_path):
    server.push(("null_message",), ("ok", "fine"))
    ledger = Ledger()
    with make_client(server, tmp_path) as c:
        assert c.chat("hello", ledger).texts == ["fine"]
    assert server.count == 2 and ledger.counters["llm.retries"] == 1
    assert len(ledger.llm_calls) == 1  # a malformed reply without usage is not counted as billed

    # one that carries usage was billed: recorded (ledger, journal, budget), then retried
    server.push(("null_message", {"prompt_tokens": 40, "completion_tokens": 9, "total_tokens": 49}),
                ("ok", "fine again"))
    ledger = Ledger()
    with make_client(server, tmp_path, max_calls=5) as c:
        assert c.chat("hello there", ledger).texts == ["fine again"]
        assert c.budget.calls == 2
    assert [(x.prompt_tokens, x.completion_tokens) for x in ledger.llm_calls] == [(40, 9), (2, 2)]
    assert ledger.llm_calls[0].usd == pytest.approx((40 * 0.15 + 9 * 0.60) / 1e6)
    assert "malformed reply" in ledger.llm_calls[0].purpose
    assert [r["prompt_tokens"] for r in read_journal(tmp_path / "llm.sqlite")] == [1, 40, 2]

    server.push(*[("null_message",)] * 3)
    with make_client(server, tmp_path, max_retries=2) as c:
        with pytest.raises(LLMError) as e:
            c.chat("and again")
    msg = str(e.value)
    assert msg == "gpt-4o-mini: giving up after 2 retries: malformed reply: choice 0 of the reply has no message"
    assert "\n" not in msg and not isinstance(e.value, AttributeError)


def test_unknown_price_is_unknown_never_zero(server, tmp_path):
    ledger = Ledger()
    with make_client(server, tmp_path, model="my-own-model") as c:
        c.chat("hi", ledger)
    assert ledger.llm_calls[0].usd is None
    assert call_totals([vars(x) for x in ledger.llm_calls])["usd"] is None
    with pytest.raises(LLMError, match="price of model 'my-own-model' is unknown"):
        make_client(server, tmp_path, model="my-own-model", max_usd=1.0)


def test_n_choices_are_topped_up_when_the_server_returns_one(tmp_path):
    s = FakeLLMServer(supports_n=False).start()
    try:
        with make_client(s, tmp_path) as c:
            out = c.chat("write", n=3, temperature=0.7, seed=10)
        assert len(out.texts) == 3 and len(set(out.texts)) == 3
        assert [r.get("seed") for r in s.requests] == [10, 11, 12]
        with make_client(s, tmp_path) as c:
            again = c.chat("write", n=3, temperature=0.7, seed=10)
        assert again.texts == out.texts and again.cached and s.count == 3
    finally:
        s.stop()


def test_chat_many_runs_concurrently_and_keeps_order(tmp_path):
    s = FakeLLMServer(delay_s=0.2).start()
    try:
        with make_client(s, tmp_path, concurrency=4) as c:
            out = c.chat_many([ChatRequest.of(f"question number {i}") for i in range(8)])
        assert [o.texts[0] for o in out] == [f"passage about: question number {i}" for i in range(8)]
        assert s.max_in_flight > 1
    finally:
        s.stop()


def test_prices():
    prices = load_prices()
    assert price_for("gpt-4.1-nano", prices) == Price(0.10, 0.40)
    assert price_for("gpt-4o-2024-08-06", prices) == price_for("gpt-4o", prices)
    assert price_for("openai/gpt-4o-mini", prices) == Price(0.15, 0.60)
    assert price_for("gemma-3-270m-q4_k_m", prices).cost(10_000, 10_000) == 0.0
    assert price_for("some-unknown-model", prices) is None
    assert Price(2.5, 10).cost(1_000_000, 100_000) == pytest.approx(3.5)


def test_price_file_errors_name_the_file(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text('[models."x"]\ninput = 1\n')
    with pytest.raises(LLMError, match=r"p\.toml.*'x'.*output"):
        load_prices(bad)
    good = tmp_path / "q.toml"
    good.write_text('[models."my-model"]\ninput = 1.0\noutput = 2.0\n')
    assert price_for("my-model", load_prices(good)) == Price(1.0, 2.0)


def test_settings_resolution():
    s = LLMSettings.resolve({"model": "a", "concurrency": 2},
                            {"BEYONDSIM_LLM_BASE_URL": "http://x/v1", "BEYONDSIM_LLM_MODEL": "b"}, max_usd=1.5,
                            model=None)
    assert (s.base_url, s.model, s.concurrency, s.max_usd) == ("http://x/v1", "b", 2, 1.5)
    with pytest.raises(ValueError, match="unknown key"):
        LLMSettings.resolve({"api_key": "sk-x"}, {})
    with pytest.raises(ValueError):
        LLMSettings(concurrency=0)
    # the embedded batched server gets one request per slot and a long timeout; llama_cpp.server
    # answers one at a time, so it gets one
    assert (LLMSettings().workers, LLMSettings().timeout) == (8, 600.0)
    assert LLMSettings(embedded_slots=3).workers == 3
    assert LLMSettings(embedded_server="llama_cpp.server", embedded_slots=3).workers == 1
    assert (LLMSettings(base_url="http://x/v1").workers, LLMSettings(base_url="http://x/v1").timeout) == (4, 120.0)
    assert LLMSettings(base_url="http://x/v1", embedded_slots=3).workers == 4
    assert LLMSettings(concurrency=2, timeout_s=5).workers == 2
    assert LLMSettings.resolve({"embedded_server": "llama_cpp.server"}, {}).embedded_server == "llama_cpp.server"
    with pytest.raises(ValueError, match="embedded_server must be one of batched, llama_cpp.server"):
        LLMSettings(embedded_server="vllm")
    with pytest.raises(ValueError, match="embedded_slots"):
        LLMSettings(embedded_slots=0)


def test_embedded_server_commands():
    """The batched server by default, with the settings' slots, context and threads; llama_cpp.server
    only when asked for."""
    from harness.models.llm import EMBEDDED_MODEL, EmbeddedServer

    srv = EmbeddedServer(LLMSettings(embedded_slots=5, embedded_ctx=2048, embedded_threads=3), model_path="/m.gguf",
                         port=9999)
    cmd = srv.command()
    assert cmd[1:3] == ["-m", "harness.models.llm_batched"]
    args = dict(zip(cmd[3::2], cmd[4::2]))
    assert args == {"--model": "/m.gguf", "--alias": EMBEDDED_MODEL, "--chat_format": "gemma", "--slots": "5",
                    "--n_ctx": "2048", "--threads": "3", "--host": "127.0.0.1", "--port": "9999"}
    old = EmbeddedServer(LLMSettings(embedded_server="llama_cpp.server", embedded_ctx=2048, embedded_threads=3),
                         model_path="/m.gguf", port=9999).command()
    assert old[1:3] == ["-m", "llama_cpp.server"] and "--slots" not in old
    assert dict(zip(old[3::2], old[4::2]))["--n_ctx"] == "2048"


@pytest.mark.parametrize("text,expected", [
    ('{"positives": ["a"], "negatives": []}', {"positives": ["a"], "negatives": []}),
    ('Sure! ```json\n{"positives": ["a"]}\n``` hope it helps', {"positives": ["a"]}),
    ('Here: {"a": 1} and {"b": 2}', {"a": 1}),
    ('no json here', None),
    ('{"positives": ["a", }', None),
])
def test_extract_json_object(text, expected):
    assert extract_json_object(text) == expected
