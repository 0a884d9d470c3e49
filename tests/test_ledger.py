"""Ledger totals: phase timing and LLM cost, with unknown prices kept unknown."""

from __future__ import annotations

import time

import pytest

from harness.ledger import Ledger, LLMCall, call_totals, phase_totals


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
                                           "completion_tokens": 40, "usd": pytest.approx(0.002)}
    led.record_llm_call(LLMCall("unpriced", 5, 5, 0.1, cached=False, usd=None))
    assert call_totals(led.to_dict()["llm_calls"])["usd"] is None  # never a silent 0
    assert phase_totals({})["offline_s"] is None and phase_totals({})["online_s"] is None
