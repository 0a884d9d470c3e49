"""Ledger totals: phase timing and LLM cost, with unknown prices and unknown token counts kept
unknown; the journal of billed calls."""

from __future__ import annotations

import sqlite3
import time

import pytest

from harness.core.ledger import CallJournal, Ledger, LLMCall, RunTag, call_totals, phase_totals, read_journal


def test_phases_time_and_calls_total() -> None:
    led = Ledger()
    with led.phase("index", items=10):
        time.sleep(0.02)
    with led.phase("search", items=4):
        led.record_llm_call(LLMCall("m", 100, 20, 0.1, cached=False, usd=0.002))
        led.record_llm_call(LLMCall("m", 100, 20, 0.0, cached=True, usd=None))  # a hit costs nothing new
    with pytest.raises(ValueError, match="unknown phase"):
        with led.phase("warmup"):
            pass
    d = led.to_dict()
    assert d["llm_calls"][0]["phase"] == "search"
    t = phase_totals(d["phases"])
    assert t["offline_s"] >= 0.02 and t["online_items"] == 4 and t["online_s"] is not None
    assert call_totals(d["llm_calls"]) == {"calls": 2, "cache_hits": 1, "prompt_tokens": 200,
                                           "completion_tokens": 40, "prompt_tokens_known": 200,
                                           "completion_tokens_known": 40, "usage_unknown_calls": 0,
                                           "usd": pytest.approx(0.002), "usd_known": pytest.approx(0.002)}
    led.record_llm_call(LLMCall("unpriced", 5, 5, 0.1, cached=False, usd=None))
    assert call_totals(led.to_dict()["llm_calls"])["usd"] is None  # never a silent 0
    assert phase_totals({})["offline_s"] is None and phase_totals({})["online_s"] is None


def test_a_call_without_usage_leaves_token_and_dollar_totals_unknown() -> None:
    led = Ledger()
    led.record_llm_call(LLMCall("gpt-4o-mini", 100, 20, 0.1, cached=False, usd=0.00003))
    led.record_llm_call(LLMCall("gpt-4o-mini", None, None, 0.1, cached=False, usd=None))  # no usage in the reply
    t = call_totals(led.to_dict()["llm_calls"])
    assert (t["prompt_tokens"], t["completion_tokens"], t["usd"]) == (None, None, None)  # not 100 / 20 / $0.00003
    assert (t["prompt_tokens_known"], t["completion_tokens_known"], t["usage_unknown_calls"]) == (100, 20, 1)
    assert t["usd_known"] == pytest.approx(0.00003)


def test_journal_commits_each_call_with_its_run(tmp_path) -> None:
    path = tmp_path / "llm.sqlite"
    assert read_journal(path) == []  # no file: no calls, and nothing is created
    assert not path.exists()
    j = CallJournal(path)
    tag = RunTag.new(result_key="k1", retriever="hyde", label="hyde-big", spec_hash="h", benchmark="nevir", seed=3)
    j.record(LLMCall("gpt-4o-mini", 12, 7, 0.5, False, 0.0000060, phase="search", purpose="hyde.generate"), tag)
    j.record(LLMCall("gpt-4o-mini", None, None, 0.25, False, None, phase="search"), tag)
    j.record(LLMCall("mystery", 3, 4, 0.1, False, None))  # outside a run
    # another connection sees every call at once: each record is its own committed transaction
    with sqlite3.connect(path) as other:
        assert other.execute("SELECT COUNT(*) FROM billed_calls").fetchone()[0] == 3
    rows = read_journal(path)
    assert [(r["run_id"], r["label"], r["benchmark"], r["seed"], r["result_key"]) for r in rows[:2]] == \
        [(tag.run_id, "hyde-big", "nevir", 3, "k1")] * 2
    assert (rows[0]["prompt_tokens"], rows[0]["completion_tokens"], rows[0]["usd"]) == (12, 7, pytest.approx(6e-6))
    assert (rows[1]["prompt_tokens"], rows[1]["completion_tokens"], rows[1]["usd"]) == (None, None, None)
    assert rows[2]["run_id"] is None and rows[2]["label"] == "" and rows[2]["model"] == "mystery"
    assert rows[0]["purpose"] == "hyde.generate" and rows[0]["created_at"] <= rows[2]["created_at"]
    j.close()


def test_a_phase_inside_another_is_counted_once_in_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """Model loading inside ``index`` is the ``model`` phase and is taken out of ``index``, wall and
    CPU alike, so index time does not depend on whether the process had loaded the model before."""
    import harness.core.ledger as ledger_mod

    clock = {"wall": 100.0, "cpu": 10.0}
    monkeypatch.setattr(ledger_mod.time, "perf_counter", lambda: clock["wall"])
    monkeypatch.setattr(ledger_mod.time, "process_time", lambda: clock["cpu"])

    def spend(wall: float, cpu: float) -> None:
        clock["wall"] += wall
        clock["cpu"] += cpu

    led = ledger_mod.Ledger()
    with led.phase("index", items=5):
        spend(1.0, 0.5)
        with led.phase("model"):
            spend(7.0, 6.0)
        spend(2.0, 1.5)
    with led.phase("index"):  # a second index call of the same result: the model is loaded already
        spend(3.0, 2.0)
    assert led.phases["model"].wall_s == pytest.approx(7.0) and led.phases["model"].cpu_s == pytest.approx(6.0)
    assert led.phases["index"].wall_s == pytest.approx(6.0) and led.phases["index"].cpu_s == pytest.approx(4.0)
    assert led.phases["index"].items == 5
    assert ledger_mod.phase_totals({k: vars(v) for k, v in led.phases.items()})["offline_s"] == pytest.approx(6.0)
