"""Every billed LLM call reaches the cost ledger: the journal keeps the calls of a run stopped by
its budget or killed, `beyondsim audit` lists them once, and unknown token counts survive the
results store and the export format as unknown."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("openai")

from fake_llm import FakeLLMServer, default_responder  # noqa: E402

from harness.store.exchange import export_record, read_export  # noqa: E402
from harness.core.ledger import read_journal  # noqa: E402
from harness.models.llm import LLMSettings, cache_file  # noqa: E402
from harness.registry import make_spec  # noqa: E402
from harness.run.runner import Runner, Settings  # noqa: E402
from harness.store.results import MeasureValue, ResultRecord, Store  # noqa: E402
from tests.factories import llm_call as make_call, make_record  # noqa: E402
from tests.test_cli import invoke, make_beir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MINI_IN, MINI_OUT = 0.15e-6, 0.60e-6  # gpt-4o-mini, $ per token

ASKER = '''
from harness.models.llm import ChatRequest
from harness.types import Run


class Asker:
    """Asks the LLM once per query, then ranks the documents in corpus order."""
    uses_llm = True

    def index(self, corpus, ctx):
        self.ids = [d.id for d in corpus]

    def search(self, queries, k, ctx):
        reqs = [ChatRequest.of(f"expand: {q.text}", max_tokens=20, purpose="asker") for q in queries]
        ctx.llm.chat_many(reqs, ctx.ledger)
        return Run({q.id: [(d, float(-i)) for i, d in enumerate(self.ids[:k])] for q in queries})
'''


@pytest.fixture
def asker(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    (tmp_path / "userpkg_asker.py").write_text(ASKER)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "userpkg_asker:Asker"
    sys.modules.pop("userpkg_asker", None)


@pytest.fixture
def server():
    s = FakeLLMServer().start()
    yield s
    s.stop()


def cost(body: dict) -> tuple[int, int, float]:
    """What the fake server reports for a request: (prompt, completion) words and their $ at gpt-4o-mini."""
    pt = sum(len(m["content"].split()) for m in body["messages"])
    ct = len(default_responder(body).split())
    return pt, ct, pt * MINI_IN + ct * MINI_OUT


def run(home: Path, data: Path, spec: str, server: FakeLLMServer, **llm: object) -> str:
    settings = Settings(home=home, k=5, bootstrap=0,
                        llm=LLMSettings(base_url=server.base_url, model="gpt-4o-mini", concurrency=1, **llm))
    with Store(home / "results.sqlite") as store, Runner(settings, store, log=lambda m: None) as runner:
        [outcome] = runner.run([make_spec(spec)], [str(data)], [0])
    return outcome.status


def test_calls_of_a_run_stopped_by_the_budget_are_audited_once(tmp_path: Path, home: Path, server, asker) -> None:
    data = make_beir(tmp_path / "tiny")
    assert run(home, data, asker, server, max_calls=2) == "budget"
    assert server.count == 2
    paid = [cost(b) for b in server.requests]
    rows = json.loads(invoke("audit", "-f", "json").stdout)
    [row] = rows  # no result is stored, but the two billed calls are listed
    assert (row["status"], row["results"], row["unfinished_runs"], row["benchmark"]) == ("unfinished run", 0, 1, str(data))
    assert (row["billed_calls"], row["cache_hits"]) == (2, 0)
    assert (row["billed_prompt_tokens"], row["billed_completion_tokens"]) == (sum(p[0] for p in paid),
                                                                              sum(p[1] for p in paid))
    assert row["usd"] == pytest.approx(sum(p[2] for p in paid)) and row["usd"] > 0
    assert "(unfinished" in invoke("audit").stdout  # the table marks the row (its cell may wrap)

    # the rerun pays only for the third query; the stored result holds two cache hits and one billed call
    assert run(home, data, asker, server) == "done"
    assert server.count == 3
    rows = {r["status"]: r for r in json.loads(invoke("audit", "-f", "json").stdout)}
    assert set(rows) == {"stored", "unfinished run"}
    assert (rows["stored"]["billed_calls"], rows["stored"]["cache_hits"]) == (1, 2)
    assert rows["unfinished run"]["billed_calls"] == 2
    total = json.loads(invoke("audit", "--by", "retriever", "-f", "json").stdout)
    assert sum(r["billed_calls"] for r in total) == server.count  # each billed call counted once
    assert sum(r["usd"] for r in total) == pytest.approx(sum(cost(b)[2] for b in server.requests))
    # filters apply to journaled calls too
    assert json.loads(invoke("audit", "-b", "some-other-benchmark", "-f", "json").stdout) == []
    assert json.loads(invoke("audit", "--since", "2999-01-01", "-f", "json").stdout) == []
    assert len(json.loads(invoke("audit", "-r", asker, "-f", "json").stdout)) == 2


CHILD = '''
import sys
from harness.core.ledger import Ledger, RunTag
from harness.models.llm import ChatRequest, LLMClient, LLMSettings

client = LLMClient(LLMSettings(base_url=sys.argv[1], model="gpt-4o-mini", concurrency=3), cache_path=sys.argv[2])
ledger = Ledger(run=RunTag.new(retriever="hyde", label="hyde", benchmark="nevir", seed=0))
reqs = [ChatRequest.of(f"question {i}") for i in range(500)]
client.chat_many(reqs, ledger, on_done=lambda n: print("answered", flush=True))
'''


def test_a_killed_run_leaves_every_answered_call_in_the_journal(tmp_path: Path) -> None:
    s = FakeLLMServer(delay_s=0.02).start()
    path = tmp_path / "cache" / "llm.sqlite"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, s.base_url, str(path)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        answered = 0
        while answered < 12:
            line = proc.stdout.readline()
            assert line, f"the client exited early: {proc.stderr.read()}"
            answered += line.strip() == "answered"
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.stdout.close()
        proc.stderr.close()
        s.stop()
    assert proc.returncode == -signal.SIGKILL
    rows = read_journal(path)
    assert answered <= len(rows) <= s.count < 500  # every answered call, none made up
    assert {(r["label"], r["benchmark"], r["seed"]) for r in rows} == {("hyde", "nevir", 0)}
    assert len({r["run_id"] for r in rows}) == 1
    assert all((r["prompt_tokens"], r["completion_tokens"]) == (2, 4) for r in rows)  # "passage about: question N"
    assert all(r["usd"] == pytest.approx(2 * MINI_IN + 4 * MINI_OUT) for r in rows)


def test_journal_is_kept_when_the_response_cache_is_off(tmp_path: Path, server) -> None:
    from harness.models.llm import LLMClient

    with LLMClient(LLMSettings(base_url=server.base_url, model="gpt-4o-mini", cache=False),
                   cache_path=cache_file(tmp_path)) as c:
        c.chat("one")
        c.chat("one")  # no cache: paid twice, journaled twice
    assert c.cache is None and len(read_journal(cache_file(tmp_path))) == server.count == 2


def record(key: str, calls: list[dict]) -> ResultRecord:
    return make_record("hyde", key=key, spec_hash="h", benchmark="nevir", benchmark_version="v1", k=10,
                       harness_version="test", n_queries=1, measures={"nDCG@10": MeasureValue(0.5, 1)}, llm_calls=calls,
                       created_at="2026-01-10T00:00:00+00:00")


def llm_call(pt: int | None, ct: int | None, usd: float | None) -> dict:
    return make_call(usd, model="gpt-4o-mini", prompt_tokens=pt, completion_tokens=ct, latency_s=0.5, purpose="test")


OLD_LLM_CALLS = """CREATE TABLE llm_calls (
  result_id INTEGER NOT NULL REFERENCES results(id) ON DELETE CASCADE,
  model TEXT NOT NULL, prompt_tokens INTEGER NOT NULL, completion_tokens INTEGER NOT NULL,
  latency_s REAL NOT NULL, cached INTEGER NOT NULL, usd REAL, phase TEXT NOT NULL, purpose TEXT NOT NULL)"""


def test_store_keeps_unknown_tokens_and_upgrades_an_older_store(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    with Store(path) as st:
        st.save(record("old", [llm_call(100, 20, 0.000027)]))
    with sqlite3.connect(path) as db:  # the llm_calls table as stores written before held it
        db.execute("ALTER TABLE llm_calls RENAME TO calls_before")
        db.execute(OLD_LLM_CALLS)
        db.execute("INSERT INTO llm_calls SELECT * FROM calls_before")
        db.execute("DROP TABLE calls_before")
    with Store(path) as st:
        assert st.get("old").llm_calls == [llm_call(100, 20, 0.000027)]  # older rows read as before
        assert st.save(record("new", [llm_call(None, None, None), llm_call(7, None, None)]))
        assert [(c["prompt_tokens"], c["completion_tokens"], c["usd"]) for c in st.get("new").llm_calls] == \
            [(None, None, None), (7, None, None)]  # NULL, not 0
    with sqlite3.connect(path) as db:
        assert {r[1]: r[3] for r in db.execute("PRAGMA table_info(llm_calls)")}["prompt_tokens"] == 0
        assert db.execute("SELECT name FROM sqlite_master WHERE name='llm_calls_result'").fetchone()
    # and through the export format
    line = json.dumps(export_record(record("new", [llm_call(None, None, None)])))
    [item] = read_export([line])
    assert item.record.llm_calls[0]["prompt_tokens"] is None and item.record.llm_calls[0]["usd"] is None


def test_audit_names_a_journal_it_cannot_read(home: Path) -> None:
    path = cache_file(home)
    path.parent.mkdir(parents=True)
    path.write_bytes(b"this is not an SQLite file at all" * 100)
    res = invoke("audit", "-f", "json")
    assert res.exit_code == 2
    assert f"{path}: cannot read the journal of billed LLM calls" in res.output
    assert "Traceback" not in res.output
