"""Throughput of the embedded LLM on DEO's decomposition requests, in tokens per second.

    python -m tests.perf.llm [--queries 16] [--slots 8] [--threads T] [--n-ctx 4096] [--max-tokens 256]
                             [--benchmark nevir] [--data-dir ../shared/data] [--old] [--skip-engine] [--e2e K]

The requests are the ones DEO sends: :meth:`retrievers.deo.DEO.decompose` is run on the first
``--queries`` queries of ``--benchmark`` with a client that records its requests (and answers each
with a valid decomposition, so no re-ask is asked), as it runs with the embedded server (the JSON
schema on, temperature 0, ``max_tokens``). Timed, one after the other, wall-clock:

* ``engine``: :class:`harness.models.llm_batched.Engine` alone — no HTTP, no scheduler — decoding
  ``--slots`` requests in lock-step: their shared prompt prefix read once and copied
  (``llama_memory_seq_cp``), the rest of each prompt read in one batch, then one token of every
  unfinished sequence per decode until all are done; then the next ``--slots`` requests;
* ``server``: the batched server (:class:`harness.models.llm.EmbeddedServer`, ``--slots`` slots)
  answering the same requests through :meth:`harness.models.llm.LLMClient.chat_many`, cache off,
  ``--slots`` at a time;
* ``server, 1 at a time``: the same server, the requests one after the other (concurrency 1, what
  the embedded default was);
* with ``--old``: llama_cpp.server (``embedded_server = "llama_cpp.server"``), one at a time.

Each line gives completion tokens/s and (prompt + completion) tokens/s, every prompt token counted
(the usage the client bills), then the ratios server/engine (how much of the engine's rate the
server keeps) and server/one-at-a-time (the speed-up), and how many replies agree word for word
between the runs (temperature 0: a reply can change with the batch it was decoded in).

``--e2e K`` also times ``beyondsim run deo -b BENCH --max-queries K`` with each embedded server (a
fresh LLM cache each time; the embeddings are put in a cache by a ``deo-rules`` run first, so both
runs encode nothing new): wall seconds of the command and of its search phase, per query.
The load of the machine (``os.getloadavg``) is printed before each figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from harness.core.ledger import Ledger
from harness.models.llm import (EMBEDDED_MODEL, ChatRequest, Completion, EmbeddedServer, LLMClient, LLMSettings,
                                embedded_model_path)
from harness.models.llm_batched import Engine, Sampling, common_prefix, grammar_for, quiet_llama_logs
from harness.protocols import RunContext

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


class _Recorder:
    """Stands in for the client while DEO builds its requests: keeps them, answers each with a
    valid decomposition. ``embedded`` as with the embedded server, so DEO asks for its schema."""

    embedded = True

    def __init__(self) -> None:
        self.requests: list[ChatRequest] = []

    def chat_many(self, requests: Sequence[ChatRequest], ledger: Any = None, on_done: Any = None) -> list[Completion]:
        self.requests.extend(requests)
        return [Completion(['{"positives": ["a query"], "negatives": []}'], 0, 0, False, EMBEDDED_MODEL, 0.0)
                for _ in requests]


def deo_requests(benchmark: str, data_dir: Path, k: int, max_tokens: int) -> list[ChatRequest]:
    from harness.registry import load_benchmark
    from retrievers.deo import DEO, DeoParams

    bench = load_benchmark(benchmark, data_dir)
    rec = _Recorder()
    DEO(DeoParams(max_tokens=max_tokens)).decompose(bench.eval_queries[:k], RunContext(llm=rec, ledger=Ledger()))
    return rec.requests


@dataclass
class Figure:
    name: str
    seconds: float
    prompt: int
    completion: int
    texts: list[str]

    def line(self) -> str:
        return (f"{self.name:<28} {self.seconds:8.2f} s  {self.completion:6d} completion tokens "
                f"{self.completion / self.seconds:7.1f} tok/s   prompt+completion {self.prompt + self.completion:6d} "
                f"{(self.prompt + self.completion) / self.seconds:7.1f} tok/s")


def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def engine_lockstep(reqs: Sequence[ChatRequest], model: Path, slots: int, n_ctx: int, threads: int) -> Figure:
    """The engine's own rate: groups of ``slots`` requests decoded in lock-step."""
    eng = Engine(model, slots=slots, n_ctx=n_ctx, threads=threads)
    try:
        jobs = []
        for r in reqs:
            tokens, stop = eng.prompt_tokens(r.message_dicts())
            params = r.params()
            schema = params.get("response_format", {}).get("schema", {}) if r.json_mode else None
            jobs.append((tokens, tuple(s.encode() for s in stop), grammar_for(schema),
                         Sampling(temperature=r.temperature, top_p=r.top_p, seed=r.seed or 0), r.max_tokens))
        texts: list[str] = []
        prompt = completion = 0
        t0 = time.perf_counter()
        for g in range(0, len(jobs), slots):
            group = jobs[g:g + slots]
            n = len(group)
            samplers = [eng.sampler(s, s.seed, gr) for _, _, gr, s, _ in group]
            least = min(len(toks) for toks, *_ in group) - 1
            shared = min(common_prefix(group[0][0], toks, least) for toks, *_ in group)
            for lo in range(0, shared, eng.n_batch):  # the shared prefix, once, into sequence 0
                eng.clear()
                for p in range(lo, min(shared, lo + eng.n_batch)):
                    eng.add(group[0][0][p], p, 0, False)
                eng.decode()
            for i in range(1, n):
                if shared:
                    eng.seq_cp(0, i)
            pos = [shared] * n
            out: list[list[int]] = [[] for _ in range(n)]
            text = [bytearray() for _ in range(n)]
            go = [False] * n
            pending = [(i, t) for i in range(n) for t in group[i][0][shared:]]
            while pending:  # the rest of each prompt; a sequence samples after the decode of its last token
                eng.clear()
                chunk, pending = pending[:eng.n_batch], pending[eng.n_batch:]
                idx: dict[int, int] = {}
                for i, t in chunk:
                    last = pos[i] == len(group[i][0]) - 1
                    b = eng.add(t, pos[i], i, last)
                    pos[i] += 1
                    if last:
                        idx[i] = b
                eng.decode()
                for i, b in idx.items():
                    go[i] = _step(eng, samplers[i], b, i, group, out, text)
            running = [i for i in range(n) if go[i]]
            while running:
                eng.clear()
                where = {i: eng.add(out[i][-1], pos[i], i, True) for i in running}
                eng.decode()
                for i in running:
                    pos[i] += 1
                running = [i for i in running if _step(eng, samplers[i], where[i], i, group, out, text)]
            for i in range(n):
                eng.seq_rm(i)
                samplers[i].free()
                stops = group[i][1]
                cut = min([text[i].find(s) for s in stops if text[i].find(s) >= 0] or [len(text[i])])
                texts.append(bytes(text[i][:cut]).decode("utf-8", errors="ignore"))
                prompt += len(group[i][0])
                completion += len(out[i])
        return Figure(f"engine, {slots} in lock-step", time.perf_counter() - t0, prompt, completion, texts)
    finally:
        eng.close()


def _step(eng: Engine, smp: Any, b: int, i: int, group: Sequence[Any], out: list[list[int]],
          text: list[bytearray]) -> bool:
    """Sample sequence ``i`` from batch index ``b``; whether it goes on."""
    tok = eng.sample(smp, b)
    if eng.is_eog(tok):
        return False
    out[i].append(tok)
    text[i] += eng.piece(tok)
    if any(s in text[i] for s in group[i][1]):
        return False
    return len(out[i]) < group[i][4]


def through_client(name: str, reqs: Sequence[ChatRequest], base_url: str, concurrency: int) -> Figure:
    client = LLMClient(LLMSettings(base_url=base_url, model=EMBEDDED_MODEL, concurrency=concurrency, cache=False,
                                   timeout_s=1800), cache_path=None)
    led = Ledger()
    t0 = time.perf_counter()
    outs = client.chat_many(list(reqs), led)
    dt = time.perf_counter() - t0
    client.close()
    return Figure(name, dt, sum(o.prompt_tokens or 0 for o in outs), sum(o.completion_tokens or 0 for o in outs),
                  [o.texts[0] if o.texts else "" for o in outs])


def same(a: Figure, b: Figure) -> str:
    n = sum(x == y for x, y in zip(a.texts, b.texts))
    return f"{n}/{len(a.texts)}"


def e2e(k: int, benchmark: str, data_dir: Path, slots: int, threads: int | None, old: bool) -> None:
    """``beyondsim run deo`` with each embedded server, a fresh LLM cache each time."""
    home = Path(tempfile.mkdtemp(prefix="perf-llm-"))
    try:
        (home / "models").mkdir(parents=True)
        os.symlink(embedded_model_path(), home / "models" / f"{EMBEDDED_MODEL}.gguf")
        env = dict(os.environ, BEYONDSIM_HOME=str(home))
        base = [sys.executable, "-m", "harness.cli", "run", "--benchmark", benchmark, "--max-queries", str(k),
                "--data-dir", str(data_dir)]
        subprocess.run(base + ["deo-rules"], env=env, check=True, capture_output=True)
        servers = (["llama_cpp.server"] if old else []) + ["batched"]
        for server in servers:
            cfg = home / f"{server}.toml"
            table = {"embedded_server": server, "embedded_slots": slots}
            if threads:
                table["embedded_threads"] = threads
            cfg.write_text("[llm]\n" + "".join(f"{key} = {json.dumps(v)}\n" for key, v in table.items()))
            (home / "cache" / "llm.sqlite").unlink(missing_ok=True)
            print(f"  {load()}")
            t0 = time.perf_counter()
            res = subprocess.run(base + ["deo", "--force", "--config", str(cfg)], env=env, capture_output=True, text=True)
            dt = time.perf_counter() - t0
            if res.returncode != 0:
                print(f"  {server}: the run failed:\n{res.stdout[-2000:]}{res.stderr[-2000:]}")
                continue
            from harness.store.results import Store

            store = Store(home / "results.sqlite")
            rec = max((store.get(r.key, full=True) for r in store.results() if r.retriever == "deo"),
                      key=lambda r: r.created_at)
            store.close()
            search = rec.phases.get("search", {})
            wall = search.get("wall_s") or search.get("wall") or 0.0
            calls = len(rec.llm_calls)
            print(f"  deo on {benchmark}[:{k}], {server:<16}: {dt:7.1f} s the command, {wall:7.1f} s its search phase "
                  f"= {wall / k:5.2f} s/query ({calls} LLM calls, "
                  f"{sum(c['completion_tokens'] or 0 for c in rec.llm_calls)} completion tokens)")
    finally:
        shutil.rmtree(home, ignore_errors=True)


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--queries", type=int, default=16, help="DEO requests timed (0: none, only --e2e)")
    ap.add_argument("--slots", type=int, default=LLMSettings().embedded_slots)
    ap.add_argument("--threads", type=int, default=None, help="llama.cpp threads (default: the embedded default)")
    ap.add_argument("--n-ctx", type=int, default=LLMSettings().embedded_ctx)
    ap.add_argument("--max-tokens", type=int, default=256, help="DEO's max_tokens")
    ap.add_argument("--benchmark", default="nevir")
    ap.add_argument("--data-dir", type=Path, default=DATA)
    ap.add_argument("--old", action="store_true", help="also time llama_cpp.server, one request at a time")
    ap.add_argument("--skip-engine", action="store_true")
    ap.add_argument("--e2e", type=int, default=0, metavar="K", help="also time `beyondsim run deo` on K queries")
    a = ap.parse_args(argv)
    quiet_llama_logs()

    settings = LLMSettings(embedded_slots=a.slots, embedded_threads=a.threads, embedded_ctx=a.n_ctx)
    if a.queries > 0:
        throughput(a, settings)
    if a.e2e:
        e2e(a.e2e, a.benchmark, a.data_dir, a.slots, a.threads, a.old)


def throughput(a: argparse.Namespace, settings: LLMSettings) -> None:
    reqs = deo_requests(a.benchmark, a.data_dir, a.queries, a.max_tokens)
    model = embedded_model_path()
    threads = EmbeddedServer(settings).threads
    print(f"{len(reqs)} DEO requests on {a.benchmark}; {a.slots} slots, {threads} threads, n_ctx {a.n_ctx}, "
          f"{os.cpu_count()} CPUs")
    figs: dict[str, Figure] = {}
    if not a.skip_engine:
        print(f"  {load()}")
        figs["engine"] = engine_lockstep(reqs, model, a.slots, a.n_ctx, threads)
        print(figs["engine"].line())
    with EmbeddedServer(settings) as srv:
        print(f"  {load()}")
        figs["server"] = through_client(f"server, {a.slots} at a time", reqs, srv.base_url, a.slots)
        print(figs["server"].line())
        print(f"  {load()}")
        figs["one"] = through_client("server, 1 at a time", reqs, srv.base_url, 1)
        print(figs["one"].line())
    if a.old:
        with EmbeddedServer(LLMSettings(embedded_server="llama_cpp.server", embedded_threads=a.threads,
                                        embedded_ctx=a.n_ctx)) as srv:
            print(f"  {load()}")
            figs["old"] = through_client("llama_cpp.server, 1 at a time", reqs, srv.base_url, 1)
            print(figs["old"].line())

    def rate(f: Figure) -> float:
        return f.completion / f.seconds

    s = figs["server"]
    if "engine" in figs:
        e = figs["engine"]
        print(f"server / engine: {rate(s) / rate(e):.2f} completion, "
              f"{(s.prompt + s.completion) / s.seconds / ((e.prompt + e.completion) / e.seconds):.2f} prompt+completion "
              f"(same replies {same(s, e)})")
    o = figs["one"]
    print(f"server / 1 at a time: {rate(s) / rate(o):.2f} completion, {o.seconds / s.seconds:.2f} wall "
          f"(same replies {same(s, o)})")
    if "old" in figs:
        old = figs["old"]
        print(f"server / llama_cpp.server: {old.seconds / s.seconds:.2f} wall; 1 at a time / llama_cpp.server: "
              f"{old.seconds / o.seconds:.2f} wall (same replies as llama_cpp.server: batched {same(s, old)}, "
              f"1 at a time {same(o, old)})")


if __name__ == "__main__":
    main()
