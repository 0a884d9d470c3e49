"""The embedded LLM server with continuous batching (docs/design/ledger-and-cost.md#the-embedded-server).

    python -m harness.models.llm_batched --model PATH [--alias NAME] [--slots 8] [--n_ctx 4096]
                                         [--threads T] [--n_batch 512] [--host 127.0.0.1] [--port 8080]

An OpenAI-compatible server (``GET /v1/models``, ``POST /v1/chat/completions``) over one llama.cpp
context that decodes up to ``slots`` sequences at once, built on llama-cpp-python's low-level API:

- **One scheduler thread** owns the context. Each step it puts into one batch the last sampled token
  of every generating sequence and, in the room left (``n_batch`` tokens in all), the next chunk of
  the prompts being read; one ``llama_decode`` evaluates it; every sequence whose logits came out
  samples its next token. A finished sequence frees its slot at once and a waiting request takes
  it (continuous batching). The HTTP threads only check and queue requests and wait for their reply.
- **Slots.** The context has ``slots`` sequences of up to ``n_ctx`` tokens each, a KV stream of
  ``n_ctx`` cells per sequence, so a request never waits for room: a prompt of ``n_ctx`` tokens or
  more is a 400, and ``max_tokens`` is cut to ``n_ctx`` minus the prompt, as llama_cpp.server
  does. A request with ``n`` choices takes ``n`` slots: its prompt is read once and copied to the others
  (``llama_memory_seq_cp``); choice ``j`` is sampled with seed ``seed + j`` (``seed`` 0 when the
  request gives none), as a one-choice request with that seed is.
- **Prompt reuse.** A slot keeps its cells when its request ends; a new prompt starts from the
  longest prefix a slot holds, copied from another slot (or from a prompt still being read) when
  that one shares more (:class:`Scheduler`). Requests built on one template read it once.
- **The prompt** is built by llama-cpp-python's formatter of the chat format (``gemma`` by default:
  ``llama_chat_format.format_gemma``, which, like llama_cpp.server, drops system messages) and
  tokenized as llama_cpp.server tokenizes it; generation stops at an end-of-generation token, at the
  format's stop string, at the request's ``stop`` strings and at ``max_tokens``.
- **Sampling** follows llama_cpp.server's chain and defaults: repetition penalties (last 64
  tokens, ``repeat_penalty`` 1.1), the grammar, then greedy at temperature 0, else top-k 40, typical
  1.0, top-p, min-p 0.05, temperature and a seeded draw. ``response_format`` ``json_object``
  constrains the reply by a grammar: llama-cpp-python's JSON-schema converter for a ``schema`` (or
  OpenAI's ``json_schema`` form), its JSON grammar without one; a schema it cannot convert is a 400.
  The grammar is tried on the best candidates before the whole vocabulary, in a way that gives the
  token the whole chain gives (:meth:`Engine.sample`).
- **Replies** carry ``choices[].message.content``, ``finish_reason`` (``stop`` or ``length``) and
  ``usage`` (the prompt counted once, the completion tokens of every choice). A bad request is a 400
  whose ``error.message`` is one line; SIGTERM or SIGINT stops the server cleanly (requests still
  queued or running are answered with a 503).

Decoded alone, a request gets the reply llama-cpp-python's own chat completion gives with
llama_cpp.server's defaults. Decoding several sequences in one batch, or reading a prompt's prefix
in another batch, can change a logit in its last bits (the matrix kernels' sums differ with the
batch's size), so a temperature-0 reply may then differ in a token; ``tests/test_llm_batched.py``
checks both.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import signal
import sys
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

DEFAULT_SLOTS = 8
DEFAULT_N_CTX = 4096
DEFAULT_N_BATCH = 512
GRAMMAR_CANDIDATES = 4096  # the best candidates a grammar is tried on before the whole vocabulary
MAX_BODY_BYTES = 16 * 1024 * 1024
ROLES = ("system", "user", "assistant")
SEED_MOD = 2 ** 32


# -- requests ----------------------------------------------------------------------------------


class BadRequest(ValueError):
    """A request the server refuses (HTTP 400); the message is one line."""


@dataclass(frozen=True)
class Sampling:
    """llama_cpp.server's sampling parameters and their defaults."""

    temperature: float = 0.8
    top_p: float = 0.95
    top_k: int = 40
    min_p: float = 0.05
    typical_p: float = 1.0
    repeat_penalty: float = 1.1
    frequency_penalty: float = 0.0
    presence_penalty: float = 0.0
    penalty_last_n: int = 64
    seed: int = 0  # choice j is drawn with seed + j


@dataclass(frozen=True)
class GenRequest:
    """A checked chat request: ``schema`` is the JSON schema of a constrained reply, ``{}`` for any
    JSON object, ``None`` for free text."""

    messages: tuple[tuple[str, str], ...]
    n: int = 1
    max_tokens: int | None = None  # None: up to the slot's context
    sampling: Sampling = Sampling()
    schema: Mapping[str, Any] | None = None
    stop: tuple[str, ...] = ()

    def message_dicts(self) -> list[dict[str, str]]:
        return [{"role": r, "content": c} for r, c in self.messages]


def _number(body: Mapping[str, Any], name: str, default: float, lo: float, hi: float,
            lo_open: bool = False) -> float:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise BadRequest(f"{name} must be a number, not {json.dumps(v)[:40]}")
    if v < lo or v > hi or (lo_open and v == lo):
        raise BadRequest(f"{name} must be in {'(' if lo_open else '['}{lo:g}, {hi:g}], not {v:g}")
    return float(v)


def _integer(body: Mapping[str, Any], name: str, default: int | None, lo: int, hi: int | None = None) -> int | None:
    v = body.get(name)
    if v is None:
        return default
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadRequest(f"{name} must be a whole number, not {json.dumps(v)[:40]}")
    if v < lo or (hi is not None and v > hi):
        raise BadRequest(f"{name} must be in [{lo}, {hi if hi is not None else '∞'}], not {v}")
    return v


def _schema_of(fmt: Any) -> Mapping[str, Any] | None:
    if fmt is None:
        return None
    if not isinstance(fmt, Mapping) or not isinstance(fmt.get("type"), str):
        raise BadRequest("response_format must be an object with a type")
    kind = fmt["type"]
    if kind == "text":
        return None
    if kind == "json_object":
        schema = fmt.get("schema", {})
    elif kind == "json_schema":
        inner = fmt.get("json_schema")
        schema = inner.get("schema", {}) if isinstance(inner, Mapping) else None
    else:
        raise BadRequest(f"response_format.type must be text, json_object or json_schema, not {kind[:40]!r}")
    if not isinstance(schema, Mapping):
        raise BadRequest("response_format's schema must be a JSON object")
    return schema


def parse_chat_request(body: Any, max_n: int) -> GenRequest:
    """``body`` (a decoded ``/v1/chat/completions`` JSON body) as a :class:`GenRequest`, or
    :class:`BadRequest`. Keys the server does not use (``model``, ``user``, …) are ignored."""
    if not isinstance(body, Mapping):
        raise BadRequest("the request body must be a JSON object")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise BadRequest("messages must be a non-empty list")
    messages: list[tuple[str, str]] = []
    for i, m in enumerate(msgs):
        if not isinstance(m, Mapping):
            raise BadRequest(f"messages[{i}] must be an object")
        role, content = m.get("role"), m.get("content")
        if role not in ROLES:
            raise BadRequest(f"messages[{i}].role must be one of {', '.join(ROLES)}, not {json.dumps(role)[:40]}")
        if not isinstance(content, str):
            raise BadRequest(f"messages[{i}].content must be a string")
        messages.append((role, content))
    if not any(r != "system" for r, _ in messages):
        raise BadRequest("messages must hold a user or assistant message (system messages are dropped by the chat format)")
    if body.get("stream"):
        raise BadRequest("stream is not supported")
    n = _integer(body, "n", 1, 1, max_n)
    max_tokens = _integer(body, "max_tokens", None, 1)
    if max_tokens is None:
        max_tokens = _integer(body, "max_completion_tokens", None, 1)
    seed = _integer(body, "seed", 0, -(2 ** 63), 2 ** 64 - 1)
    sampling = Sampling(
        temperature=_number(body, "temperature", 0.8, 0.0, 100.0),
        top_p=_number(body, "top_p", 0.95, 0.0, 1.0, lo_open=True),
        top_k=int(_integer(body, "top_k", 40, 0) or 0),
        min_p=_number(body, "min_p", 0.05, 0.0, 1.0),
        typical_p=_number(body, "typical_p", 1.0, 0.0, 1.0, lo_open=True),
        repeat_penalty=_number(body, "repeat_penalty", 1.1, 0.0, 100.0, lo_open=True),
        frequency_penalty=_number(body, "frequency_penalty", 0.0, -2.0, 2.0),
        presence_penalty=_number(body, "presence_penalty", 0.0, -2.0, 2.0),
        seed=int(seed or 0) % SEED_MOD)
    stop = body.get("stop")
    if stop is None:
        stops: tuple[str, ...] = ()
    elif isinstance(stop, str):
        stops = (stop,) if stop else ()
    elif isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        stops = tuple(s for s in stop if s)
    else:
        raise BadRequest("stop must be a string or a list of strings")
    return GenRequest(tuple(messages), n=int(n or 1), max_tokens=max_tokens, sampling=sampling,
                      schema=_schema_of(body.get("response_format")), stop=stops)


def grammar_for(schema: Mapping[str, Any] | None) -> str | None:
    """The GBNF grammar a reply must follow: llama-cpp-python's conversion of ``schema``, its JSON
    grammar for ``{}``, ``None`` for free text. A schema it cannot convert is a :class:`BadRequest`."""
    if schema is None:
        return None
    from llama_cpp import llama_grammar

    if not schema:
        return llama_grammar.JSON_GBNF
    try:
        return llama_grammar.json_schema_to_gbnf(json.dumps(schema))
    except Exception as e:  # noqa: BLE001 - the converter raises plain exceptions of several kinds
        raise BadRequest(f"response_format's schema cannot be turned into a grammar: "
                         f"{' '.join(str(e).split())[:200]}") from None


def format_prompt(messages: Sequence[Mapping[str, str]], chat_format: str = "gemma") -> tuple[str, bool, list[str]]:
    """(prompt text, whether the formatter already put the BOS token in, stop strings) as
    llama-cpp-python's chat handler of ``chat_format`` builds them."""
    from llama_cpp import llama_chat_format

    formatter = getattr(llama_chat_format, f"format_{chat_format}", None)
    if formatter is None:
        raise ValueError(f"no chat formatter named {chat_format!r} in llama_cpp.llama_chat_format")
    res = formatter(messages=list(messages))
    stop = [] if res.stop is None else [res.stop] if isinstance(res.stop, str) else list(res.stop)
    return res.prompt, bool(res.added_special), stop


# -- the engine --------------------------------------------------------------------------------


class EngineError(RuntimeError):
    """llama.cpp failed (loading, a context, a decode)."""


class Sampler:
    """One sequence's sampling state, as llama_cpp.server chains it: the repetition penalties
    (``pen``), the grammar of a constrained reply (``grammar``), then ``pick`` (greedy, or top-k,
    typical, top-p, min-p, temperature and a seeded draw). Kept as three samplers so that the
    grammar can be applied to a few candidates instead of the whole vocabulary
    (:meth:`Engine.sample`)."""

    def __init__(self, engine: "Engine", s: Sampling, seed: int, grammar: str | None):
        L = engine.L
        self.L = L
        self.greedy = s.temperature == 0.0
        self.top_k = s.top_k
        self.pen = L.llama_sampler_init_penalties(engine.n_vocab, s.penalty_last_n, s.repeat_penalty,
                                                  s.frequency_penalty, s.presence_penalty)
        self.pick = L.llama_sampler_chain_init(L.llama_sampler_chain_default_params())
        add = lambda smpl: L.llama_sampler_chain_add(self.pick, smpl)  # noqa: E731
        if self.greedy:
            add(L.llama_sampler_init_greedy())
        else:
            add(L.llama_sampler_init_top_k(s.top_k))
            add(L.llama_sampler_init_typical(s.typical_p, 1))
            add(L.llama_sampler_init_top_p(s.top_p, 1))
            add(L.llama_sampler_init_min_p(s.min_p, 1))
            add(L.llama_sampler_init_temp(s.temperature))
            add(L.llama_sampler_init_dist(seed % SEED_MOD))
        self.grammar = None
        if grammar is not None:
            self.grammar = L.llama_sampler_init_grammar(engine.vocab, grammar.encode("utf-8"), b"root")
            if not self.grammar:
                self.free()
                raise BadRequest("the reply's grammar could not be parsed by llama.cpp")

    def accept(self, token: int) -> None:
        for smpl in (self.pen, self.grammar, self.pick):
            if smpl:
                self.L.llama_sampler_accept(smpl, token)

    def free(self) -> None:
        for name in ("pen", "grammar", "pick"):
            smpl = getattr(self, name, None)
            if smpl:
                self.L.llama_sampler_free(smpl)
            setattr(self, name, None)


class Engine:
    """The model and one context of ``slots`` sequences of up to ``n_ctx`` tokens each (a KV cache
    of ``slots × n_ctx`` cells they share), over llama-cpp-python's low-level API. Not
    thread-safe: one thread decodes and samples (tokenizing and :meth:`check_grammar` only read
    the vocabulary, from any thread)."""

    def __init__(self, model_path: str | Path, slots: int = DEFAULT_SLOTS, n_ctx: int = DEFAULT_N_CTX,
                 threads: int = 1, n_batch: int = DEFAULT_N_BATCH, chat_format: str = "gemma",
                 flash_attn: bool = False, kv_unified: bool = False):
        import numpy as np
        import llama_cpp as L

        if slots < 1 or n_ctx < 16 or threads < 1 or n_batch < 1:
            raise ValueError("slots ≥ 1, n_ctx ≥ 16, threads ≥ 1 and n_batch ≥ 1")
        if slots > L.llama_max_parallel_sequences():
            raise ValueError(f"slots must be ≤ {L.llama_max_parallel_sequences()} (llama.cpp's limit)")
        self.L, self.np = L, np
        self.slots, self.n_ctx, self.threads, self.n_batch = slots, n_ctx, threads, n_batch
        self.chat_format = chat_format
        L.llama_backend_init()
        mp = L.llama_model_default_params()
        mp.n_gpu_layers = 0  # llama_cpp.server's default: the embedded model runs on the CPU
        self.model = L.llama_model_load_from_file(str(model_path).encode("utf-8"), mp)
        if not self.model:
            raise EngineError(f"llama.cpp could not load {model_path}")
        self.vocab = L.llama_model_get_vocab(self.model)
        self.n_vocab = int(L.llama_vocab_n_tokens(self.vocab))
        cp = L.llama_context_default_params()
        cp.n_ctx = n_ctx * slots
        cp.n_batch = cp.n_ubatch = n_batch
        cp.n_seq_max = slots
        cp.n_threads = cp.n_threads_batch = threads
        # a stream of n_ctx cells per sequence. One cache the sequences share (kv_unified) gives
        # Gemma 3 (sliding-window layers) other logits for a sequence whose cells do not start the
        # cache: in llama-cpp-python 0.3.36, up to 0.74 apart (logit spread 3.2) from the same
        # prompt decoded alone, whether or not the other sequence is in the same batch; with a
        # stream per sequence they are equal to the last bit (tests/test_llm_batched.py)
        cp.kv_unified = kv_unified
        cp.swa_full = False  # sliding-window layers keep only their window
        cp.flash_attn_type = L.LLAMA_FLASH_ATTN_TYPE_ENABLED if flash_attn else L.LLAMA_FLASH_ATTN_TYPE_DISABLED
        self.ctx = L.llama_init_from_model(self.model, cp)
        if not self.ctx:
            L.llama_model_free(self.model)
            raise EngineError("llama.cpp could not create a context")
        self.mem = L.llama_get_memory(self.ctx)
        self.batch = L.llama_batch_init(n_batch, 0, 1)
        # the candidate array the samplers work on (llama_token_data is {int32 id, float logit, float p})
        self._cand = np.zeros(self.n_vocab, dtype=np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)]))
        self._ids = np.arange(self.n_vocab, dtype=np.int32)
        self._cand_p = L.llama_token_data_array(
            data=self._cand.ctypes.data_as(ctypes.POINTER(L.llama_token_data)), size=self.n_vocab, selected=-1,
            sorted=False)
        self._sub = np.zeros(GRAMMAR_CANDIDATES, dtype=self._cand.dtype)
        self._sub_p = L.llama_token_data_array(
            data=self._sub.ctypes.data_as(ctypes.POINTER(L.llama_token_data)), size=GRAMMAR_CANDIDATES, selected=-1,
            sorted=False)
        self._one = L.llama_token_data(id=0, logit=1.0, p=0.0)
        self._one_p = L.llama_token_data_array(data=ctypes.pointer(self._one), size=1, selected=-1, sorted=False)
        self._piece_buf = ctypes.create_string_buffer(256)

    # -- text --

    def tokenize(self, text: str, add_special: bool) -> list[int]:
        data = text.encode("utf-8")
        arr = (self.L.llama_token * (len(data) + 16))()
        n = self.L.llama_tokenize(self.vocab, data, len(data), arr, len(arr), add_special, True)
        if n < 0:
            arr = (self.L.llama_token * (-n))()
            n = self.L.llama_tokenize(self.vocab, data, len(data), arr, len(arr), add_special, True)
        return list(arr[:n])

    def prompt_tokens(self, messages: Sequence[Mapping[str, str]]) -> tuple[list[int], list[str]]:
        """The prompt's tokens and the chat format's stop strings (llama_cpp.server's tokenization:
        BOS added unless the formatter put it in, special tokens parsed)."""
        text, added, stop = format_prompt(messages, self.chat_format)
        return self.tokenize(text, add_special=not added), stop

    def piece(self, token: int) -> bytes:
        n = self.L.llama_token_to_piece(self.vocab, token, self._piece_buf, len(self._piece_buf), 0, False)
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = self.L.llama_token_to_piece(self.vocab, token, buf, len(buf), 0, False)
            return buf.raw[:n]
        return self._piece_buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        return bool(self.L.llama_vocab_is_eog(self.vocab, token))

    def check_grammar(self, grammar: str) -> None:
        smpl = self.L.llama_sampler_init_grammar(self.vocab, grammar.encode("utf-8"), b"root")
        if not smpl:
            raise BadRequest("the reply's grammar could not be parsed by llama.cpp")
        self.L.llama_sampler_free(smpl)

    # -- the batch --

    def clear(self) -> None:
        self.batch.n_tokens = 0

    def add(self, token: int, pos: int, seq: int, logits: bool) -> int:
        """Put ``token`` at ``pos`` of sequence ``seq`` into the batch; its index there."""
        b, i = self.batch, self.batch.n_tokens
        if i >= self.n_batch:
            raise EngineError(f"the batch is full ({self.n_batch} tokens)")
        b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos, 1, 1 if logits else 0
        b.seq_id[i][0] = seq
        b.n_tokens = i + 1
        return i

    def decode(self) -> None:
        rc = self.L.llama_decode(self.ctx, self.batch)
        if rc != 0:
            raise EngineError(f"llama_decode returned {rc}")

    def seq_rm(self, seq: int, p0: int = -1) -> None:
        """Drop the cells of sequence ``seq`` from position ``p0`` on (all of them for ``-1``)."""
        if not self.L.llama_memory_seq_rm(self.mem, seq, p0, -1):
            raise EngineError(f"llama.cpp could not drop positions {p0}… of sequence {seq}")

    def seq_cp(self, src: int, dst: int) -> None:
        """Make sequence ``dst`` a copy of sequence ``src`` (in a shared cache its cells are marked
        as ``dst``'s too; with a stream per sequence the stream is copied at the next decode).
        ``dst``'s own cells are dropped first: llama.cpp's copy only adds ``src``'s cells to
        ``dst``, so cells ``dst`` held would stay beside them, at the same positions, in its
        attention (and the next token after the copy's end would be refused as out of order)."""
        self.seq_rm(dst)
        self.L.llama_memory_seq_cp(self.mem, src, dst, -1, -1)

    def seq_pos_min(self, seq: int) -> int:
        """The first position sequence ``seq`` still holds (above 0 once a sliding-window layer has
        dropped cells; -1 when empty)."""
        return int(self.L.llama_memory_seq_pos_min(self.mem, seq))

    def sampler(self, s: Sampling, seed: int, grammar: str | None) -> Sampler:
        return Sampler(self, s, seed, grammar)

    def _load(self, i: int) -> None:
        logits = self.np.ctypeslib.as_array(self.L.llama_get_logits_ith(self.ctx, i), shape=(self.n_vocab,))
        c = self._cand
        c["id"] = self._ids
        c["logit"] = logits
        c["p"] = 0.0
        self._cand_p.size, self._cand_p.selected, self._cand_p.sorted = self.n_vocab, -1, False

    def _apply(self, smpl: Any, arr: Any) -> None:
        arr.selected, arr.sorted = -1, False
        self.L.llama_sampler_apply(smpl, ctypes.byref(arr))

    def sample(self, smp: Sampler, i: int, exhaustive: bool = False) -> int:
        """The next token of the sequence whose logits are at batch index ``i``, accepted into its
        samplers: penalties, grammar, then the pick, as one llama_cpp.server chain would give it.

        The grammar costs about a quarter of a microsecond a candidate (~70 ms on Gemma's 262k
        tokens, more than a decode step), so it is applied to as few as give the same token: at temperature 0 to the best candidate alone,
        then to the :data:`GRAMMAR_CANDIDATES` best; with a temperature, to those best when at
        least ``top_k`` of them are allowed (the top-k the chain keeps is then the same); else to
        the whole vocabulary. Candidates are ranked by (logit, lower id first), as the greedy
        sampler breaks ties, and a subset is used only when every token outside it ranks below
        the ones it keeps. ``exhaustive`` applies the grammar to the whole vocabulary every time.
        """
        self._load(i)
        cand, arr = self._cand, self._cand_p
        self._apply(smp.pen, arr)  # in place: the candidates keep their order
        token = -1
        if smp.grammar and not exhaustive:
            token = self._grammar_pick(smp)
        if token < 0:
            if smp.grammar:
                self._apply(smp.grammar, arr)
            self._apply(smp.pick, arr)
            token = int(cand[arr.selected]["id"])
        smp.accept(token)
        return token

    def _grammar_pick(self, smp: Sampler) -> int:
        """The token picked among the best candidates, or -1 when they cannot decide it."""
        np = self.np
        logits = self._cand["logit"]
        if smp.greedy:
            best = int(np.argmax(logits))  # the first of the highest, as the greedy sampler takes it
            self._one.id, self._one.logit, self._one.p = best, 1.0, 0.0
            self._one_p.size = 1
            self._apply(smp.grammar, self._one_p)
            if self._one.logit != -math.inf:
                return best
            need = 1
        else:
            need = smp.top_k
            if need <= 0 or need >= GRAMMAR_CANDIDATES:
                return -1
        m = GRAMMAR_CANDIDATES
        if m >= self.n_vocab:
            return -1
        top = np.argpartition(logits, self.n_vocab - m)[self.n_vocab - m:]
        vals = logits[top]
        order = np.lexsort((top, -vals))
        sub = self._sub
        sub["id"] = top[order]
        sub["logit"] = vals[order]
        sub["p"] = 0.0
        floor = float(sub["logit"][-1])
        self._sub_p.size = m
        self._apply(smp.grammar, self._sub_p)
        allowed = np.flatnonzero(sub["logit"] != -np.inf)
        # decided only if the need-th allowed candidate ranks above every token left out
        if len(allowed) < need or not float(sub["logit"][allowed[need - 1]]) > floor:
            return -1
        self._sub_p.size = m
        self._apply(smp.pick, self._sub_p)
        return int(sub[self._sub_p.selected]["id"])

    def close(self) -> None:
        L = self.L
        if getattr(self, "batch", None) is not None:
            L.llama_batch_free(self.batch)
            self.batch = None
        if getattr(self, "ctx", None):
            L.llama_free(self.ctx)
            self.ctx = None
        if getattr(self, "model", None):
            L.llama_model_free(self.model)
            self.model = None


class EngineLike(Protocol):
    """What the scheduler needs of an engine (:class:`Engine` is the real one)."""

    slots: int
    n_ctx: int
    n_batch: int

    def clear(self) -> None: ...
    def add(self, token: int, pos: int, seq: int, logits: bool) -> int: ...
    def decode(self) -> None: ...
    def sample(self, smp: Any, i: int) -> int: ...
    def sampler(self, s: Sampling, seed: int, grammar: str | None) -> Any: ...
    def seq_rm(self, seq: int, p0: int = -1) -> None: ...
    def seq_cp(self, src: int, dst: int) -> None: ...
    def seq_pos_min(self, seq: int) -> int: ...
    def piece(self, token: int) -> bytes: ...
    def is_eog(self, token: int) -> bool: ...


# -- scheduling --------------------------------------------------------------------------------


@dataclass(eq=False)
class Choice:
    """One sequence being generated: a choice of a job, in slot ``seq``."""

    job: "Job"
    index: int
    seq: int = -1
    sampler: Any = None
    pos: int = 0  # tokens of this sequence in the KV cache
    pending: int | None = None  # the last sampled token, to be decoded next step
    tokens: list[int] = field(default_factory=list)
    text: bytearray = field(default_factory=bytearray)
    cut: int | None = None  # where a stop string begins in ``text``
    finish: str | None = None
    source: "Choice | None" = None  # a choice reading a prompt whose first ``pos`` tokens this one copies


@dataclass(eq=False)
class Job:
    """A request waiting for, or holding, its slots."""

    request: GenRequest
    prompt: list[int]
    max_tokens: int
    grammar: str | None = None
    stop: tuple[bytes, ...] = ()
    choices: list[Choice] = field(default_factory=list)
    done: threading.Event = field(default_factory=threading.Event)
    error: str | None = None
    status: int = 200
    submitted: float = field(default_factory=time.monotonic)
    started: float | None = None
    reused: int = 0  # prompt tokens found in the slot's cells

    @property
    def n(self) -> int:
        return self.request.n

    def texts(self) -> list[str]:
        return [bytes(c.text[:c.cut] if c.cut is not None else c.text).decode("utf-8", errors="ignore")
                for c in self.choices]


def make_job(request: GenRequest, prompt: list[int], n_ctx: int, chat_stop: Sequence[str] = (),
             grammar: str | None = None) -> Job:
    """A :class:`Job` for a checked request and its prompt tokens: a prompt of ``n_ctx`` tokens or
    more is a :class:`BadRequest`; ``max_tokens`` is cut to the room left in the slot."""
    if len(prompt) >= n_ctx:
        raise BadRequest(f"the prompt has {len(prompt)} tokens; a slot's context holds {n_ctx}")
    room = n_ctx - len(prompt)
    max_tokens = room if request.max_tokens is None else min(request.max_tokens, room)
    stops = tuple(s.encode("utf-8") for s in (*request.stop, *chat_stop) if s)
    job = Job(request, prompt, max_tokens, grammar, stops)
    job.choices = [Choice(job, j) for j in range(request.n)]
    return job


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int) -> int:
    """How many leading tokens ``a`` and ``b`` share, at most ``limit``."""
    n = min(len(a), len(b), limit)
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class Scheduler:
    """Continuous batching over an engine's slots. :meth:`submit` queues a job (from any thread)
    and returns at once; :meth:`run` (one thread) admits queued jobs in order as slots free up,
    and :meth:`step` decodes one batch. A job's ``done`` event is set when it is answered.

    **Prompt reuse.** A slot keeps what it decoded after its job ends (``kv[slot]``: the tokens in
    its cells). A new job takes the free slot whose cells share the longest prefix with its prompt
    and reads only the rest; when another slot (busy or free) shares a prefix longer by at least
    ``copy_min`` tokens, that slot's cells are copied in first. So requests built on one template
    (DEO's decomposition prompt differs from query to query only near its end) read the template
    once. A slot whose sliding-window cells were dropped (``seq_pos_min`` above 0) is never reused.
    The last prompt token is always decoded again, for its logits."""

    def __init__(self, engine: EngineLike, log: Callable[[str], None] | None = None, copy_min: int = 32,
                 reuse: bool = True):
        self.engine = engine
        for seq in range(engine.slots):  # the slots start empty
            engine.seq_rm(seq)
        self.free: list[int] = list(range(engine.slots))
        self.kv: list[list[int]] = [[] for _ in range(engine.slots)]
        self.waiting: deque[Job] = deque()
        self.active: list[Job] = []  # admitted, in admission order
        self.cond = threading.Condition()
        self.stopping = False
        self.log = log
        self.copy_min = copy_min
        self.reuse = reuse
        self.stats: dict[str, float] = {"steps": 0, "decoded_tokens": 0, "outputs": 0, "prompt_tokens": 0,
                                        "reused_tokens": 0, "completion_tokens": 0, "requests": 0, "decode_s": 0.0,
                                        "sample_s": 0.0}

    # -- from the HTTP threads --

    def submit(self, job: Job) -> None:
        with self.cond:
            if self.stopping:
                job.error, job.status = "the server is stopping", 503
                job.done.set()
                return
            self.waiting.append(job)
            self.cond.notify()

    def stop(self) -> None:
        with self.cond:
            self.stopping = True
            self.cond.notify_all()

    # -- the scheduler thread --

    def run(self) -> None:
        try:
            while True:
                with self.cond:
                    while not self.stopping and not self.waiting and not self.active:
                        self.cond.wait()
                    if self.stopping:
                        break
                    self.admit()
                if self.active:
                    try:
                        self.step()
                    except Exception as e:  # noqa: BLE001 - the jobs in flight fail, the server goes on
                        self._fail_all(f"the scheduler failed: {type(e).__name__}: {' '.join(str(e).split())}"[:300],
                                       500, waiting=False)
        finally:
            self._fail_all("the server is stopping", 503)

    def _reusable(self, seq: int) -> bool:
        return self.reuse and bool(self.kv[seq]) and self.engine.seq_pos_min(seq) <= 0

    def admit(self) -> None:
        """Give queued jobs their slots, first come first served (a job of ``n`` choices waits for
        ``n`` free slots; the jobs behind it wait too)."""
        while self.waiting and len(self.free) >= self.waiting[0].n:
            job = self.waiting.popleft()
            try:
                self._place(job)
                for c in job.choices:
                    c.sampler = self.engine.sampler(job.request.sampling, job.request.sampling.seed + c.index,
                                                    job.grammar)
            except Exception as e:  # noqa: BLE001 - answered as this job's error
                self._release(job, keep=False)
                job.error = " ".join(str(e).split()) or type(e).__name__
                job.status = 400 if isinstance(e, BadRequest) else 500
                job.done.set()
                continue
            job.started = time.monotonic()
            self.active.append(job)

    def _place(self, job: Job) -> None:
        """Slots for ``job``'s choices; the first one's cells start with the longest prefix of the
        prompt that a slot holds, or will hold once a prompt being read gets that far."""
        eng, prompt = self.engine, job.prompt
        limit = len(prompt) - 1
        shared = {s: common_prefix(self.kv[s], prompt, limit) if self._reusable(s) else 0 for s in range(eng.slots)}
        lead = job.choices[0]
        lead.seq = max(self.free, key=lambda s: (shared[s], -s))
        self.free.remove(lead.seq)
        keep = shared[lead.seq]
        src = max((s for s in range(eng.slots) if s != lead.seq), key=lambda s: (shared[s], -s), default=None)
        if src is not None and shared[src] >= keep + self.copy_min:
            eng.seq_cp(src, lead.seq)
            self.kv[lead.seq] = list(self.kv[src])
            keep = shared[src]
        # a prompt still being read that shares more: wait for it to get there, then copy
        reading = [j.choices[0] for j in self.active if self.reuse and j.choices[0].source is None
                   and not j.choices[0].tokens and j.choices[0].pos < len(j.prompt)]
        ahead = max(((c, common_prefix(c.job.prompt, prompt, limit)) for c in reading), key=lambda x: x[1],
                    default=(None, 0))
        if ahead[0] is not None and ahead[1] >= keep + self.copy_min:
            lead.source, keep = ahead[0], ahead[1]
            if self.kv[lead.seq]:
                eng.seq_rm(lead.seq)
                self.kv[lead.seq] = []
        elif keep < len(self.kv[lead.seq]):
            eng.seq_rm(lead.seq, keep if keep > 0 else -1)
            del self.kv[lead.seq][keep:]
        lead.pos = keep
        job.reused = keep
        for c in job.choices[1:]:  # their cells become a copy of the first choice's once the prompt is read
            c.seq = min(self.free, key=lambda s: (len(self.kv[s]), s))
            self.free.remove(c.seq)
            if self.kv[c.seq]:
                eng.seq_rm(c.seq)
                self.kv[c.seq] = []

    def _copy_ready(self) -> None:
        """Choices waiting on a prompt being read take a copy of it once it has got far enough."""
        eng = self.engine
        for job in self.active:
            c = job.choices[0]
            if c.source is None or c.source.pos < c.pos:
                continue
            if eng.seq_pos_min(c.source.seq) <= 0:
                eng.seq_cp(c.source.seq, c.seq)
                eng.seq_rm(c.seq, c.pos)
                self.kv[c.seq] = self.kv[c.source.seq][:c.pos]
            else:  # its sliding-window cells are gone: this prompt is read from the start
                eng.seq_rm(c.seq)
                self.kv[c.seq] = []
                c.pos = job.reused = 0
            c.source = None

    def plan(self) -> list[tuple[Choice, list[int], bool]]:
        """This step's batch: (choice, tokens to put at its next positions, whether the last one
        gives logits). Every generating choice gets its pending token; the room left goes to the
        prompts being read, in admission order, one chunk each."""
        out: list[tuple[Choice, list[int], bool]] = []
        room = self.engine.n_batch
        for job in self.active:
            for c in job.choices:
                if c.pending is not None and room > 0:
                    out.append((c, [c.pending], True))
                    room -= 1
        for job in self.active:
            lead = job.choices[0]
            if room <= 0:
                break
            if (lead.finish is None and lead.source is None and lead.pending is None and not lead.tokens
                    and lead.pos < len(job.prompt)):
                take = job.prompt[lead.pos:lead.pos + room]
                out.append((lead, take, lead.pos + len(take) == len(job.prompt)))
                room -= len(take)
        return out

    def step(self) -> None:
        """Decode one batch and sample every sequence that got logits."""
        eng = self.engine
        plan = self.plan()
        if not plan:  # every admitted prompt waits on another one (which cannot be): read them afresh
            for job in self.active:
                if job.choices[0].source is not None:
                    job.choices[0].source, job.choices[0].pos, job.reused = None, 0, 0
            return
        eng.clear()
        outputs: list[tuple[Choice, int]] = []
        for c, toks, logits in plan:
            for k, t in enumerate(toks):
                i = eng.add(t, c.pos + k, c.seq, logits and k == len(toks) - 1)
            if logits:
                outputs.append((c, i))
        t0 = time.perf_counter()
        try:
            eng.decode()
        except Exception as e:  # noqa: BLE001 - every job in the batch fails; the slots are cleared
            self._fail_all(f"decoding failed: {' '.join(str(e).split())}", 500, waiting=False)
            return
        t1 = time.perf_counter()
        self.stats["decode_s"] += t1 - t0
        self.stats["steps"] += 1
        self.stats["decoded_tokens"] += sum(len(t) for _, t, _ in plan)
        for c, toks, _ in plan:
            c.pos += len(toks)
            self.kv[c.seq].extend(toks)
            c.pending = None
        self._copy_ready()
        for c, i in outputs:
            job = c.job
            if c.index == 0 and not c.tokens and c.pos == len(job.prompt):  # the prompt is read
                for f in job.choices[1:]:
                    eng.seq_cp(c.seq, f.seq)
                    self.kv[f.seq] = list(self.kv[c.seq])
                    f.pos = c.pos
                    self._take(f, eng.sample(f.sampler, i))
            self._take(c, eng.sample(c.sampler, i))
        self.stats["sample_s"] += time.perf_counter() - t1
        self.stats["outputs"] += len(outputs)
        for job in [j for j in self.active if all(c.finish is not None for c in j.choices)]:
            self._complete(job)

    def _take(self, c: Choice, token: int) -> None:
        """Record a sampled token: the end of the choice at an end-of-generation token, a stop
        string or ``max_tokens``; else the token to decode next step."""
        eng, job = self.engine, c.job
        if eng.is_eog(token):
            c.finish = "stop"
            return
        c.tokens.append(token)
        before = len(c.text)
        c.text += eng.piece(token)
        for s in job.stop:
            at = c.text.find(s, max(0, before - len(s) + 1))
            if at >= 0 and (c.cut is None or at < c.cut):
                c.cut = at
        if c.cut is not None:
            c.finish = "stop"
        elif len(c.tokens) >= job.max_tokens:
            c.finish = "length"
        else:
            c.pending = token

    def _release(self, job: Job, keep: bool = True) -> None:
        """Free the job's slots; with ``keep`` their cells stay for a later prompt to reuse."""
        for c in job.choices:
            if c.sampler is not None:
                c.sampler.free()
                c.sampler = None
            if c.seq >= 0:
                if not keep or not self.reuse:
                    self.engine.seq_rm(c.seq)
                    self.kv[c.seq] = []
                self.free.append(c.seq)
                c.seq = -1
        self.free.sort()

    def _complete(self, job: Job) -> None:
        self.active.remove(job)
        self._release(job)
        self.stats["requests"] += 1
        self.stats["prompt_tokens"] += len(job.prompt)
        self.stats["reused_tokens"] += job.reused
        self.stats["completion_tokens"] += sum(len(c.tokens) for c in job.choices)
        if self.log is not None:
            now = time.monotonic()
            self.log(f"request: prompt {len(job.prompt)} tokens ({job.reused} reused), completion "
                     f"{'+'.join(str(len(c.tokens)) for c in job.choices)} tokens "
                     f"({'/'.join(str(c.finish) for c in job.choices)}), queued {(job.started or now) - job.submitted:.2f}s, "
                     f"generated in {now - (job.started or now):.2f}s")
        job.done.set()

    def _fail_all(self, why: str, status: int, waiting: bool = True) -> None:
        with self.cond:
            jobs = list(self.active) + (list(self.waiting) if waiting else [])
            self.active.clear()
            if waiting:
                self.waiting.clear()
        for job in jobs:
            self._release(job, keep=False)
            job.error, job.status = why, status
            job.done.set()


def reply_body(job: Job, model: str) -> dict[str, Any]:
    """The OpenAI chat-completion body of an answered job."""
    completion = sum(len(c.tokens) for c in job.choices)
    return {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": c.index, "message": {"role": "assistant", "content": text}, "logprobs": None,
                         "finish_reason": c.finish} for c, text in zip(job.choices, job.texts())],
            "usage": {"prompt_tokens": len(job.prompt), "completion_tokens": completion,
                      "total_tokens": len(job.prompt) + completion}}


def error_body(message: str, status: int) -> dict[str, Any]:
    kind = "invalid_request_error" if status == 400 else "server_error"
    return {"error": {"message": " ".join(message.split()), "type": kind, "param": None, "code": status}}


# -- the HTTP layer ----------------------------------------------------------------------------


class BatchedServer:
    """The engine, its scheduler thread and a threading HTTP server on ``host:port``."""

    def __init__(self, engine: Engine, alias: str, host: str = "127.0.0.1", port: int = 8080, quiet: bool = False):
        self.engine, self.alias = engine, alias
        self.scheduler = Scheduler(engine, log=None if quiet else _log)
        self.httpd = ThreadingHTTPServer((host, port), _Handler)
        self.httpd.daemon_threads = True
        self.httpd.app = self  # type: ignore[attr-defined]
        self.thread = threading.Thread(target=self.scheduler.run, name="llm-scheduler", daemon=True)

    @property
    def port(self) -> int:
        return int(self.httpd.server_address[1])

    def job_for(self, body: Any) -> Job:
        req = parse_chat_request(body, self.engine.slots)
        grammar = grammar_for(req.schema)
        if grammar is not None:
            self.engine.check_grammar(grammar)
        prompt, stop = self.engine.prompt_tokens(req.message_dicts())
        return make_job(req, prompt, self.engine.n_ctx, stop, grammar)

    def serve_forever(self) -> None:
        self.thread.start()
        try:
            self.httpd.serve_forever(poll_interval=0.2)
        finally:
            self.scheduler.stop()
            self.thread.join(timeout=60)
            self.httpd.server_close()

    def shutdown(self) -> None:
        """Stop serving (from another thread or a signal handler): ``serve_forever`` returns."""
        threading.Thread(target=self.httpd.shutdown, daemon=True).start()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "beyondsim-llm-batched"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def _send(self, status: int, body: Mapping[str, Any]) -> None:
        data = json.dumps(body, ensure_ascii=False).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    @property
    def app(self) -> BatchedServer:
        return self.server.app  # type: ignore[attr-defined]

    def do_GET(self) -> None:  # noqa: N802 - the base class's name
        path = self.path.split("?", 1)[0].rstrip("/")
        if path in ("/v1/models", "/models"):
            self._send(200, {"object": "list", "data": [{"id": self.app.alias, "object": "model", "owned_by": "me",
                                                         "permissions": []}]})
        elif path == "/health":
            s = self.app.scheduler
            self._send(200, {"status": "ok", "slots": self.app.engine.slots, "slots_free": len(s.free),
                             "waiting": len(s.waiting)})
        else:
            self._send(404, error_body(f"no such path: {path[:100]}", 404))

    def do_POST(self) -> None:  # noqa: N802 - the base class's name
        path = self.path.split("?", 1)[0].rstrip("/")
        try:
            length = int(self.headers.get("Content-Length") or "")
        except ValueError:
            self._send(411 if not self.headers.get("Content-Length") else 400,
                       error_body("a Content-Length header is needed", 400))
            return
        if length < 0 or length > MAX_BODY_BYTES:
            self.close_connection = True
            self._send(413, error_body(f"the request body must be at most {MAX_BODY_BYTES} bytes", 413))
            return
        raw = self.rfile.read(length)
        if path not in ("/v1/chat/completions", "/chat/completions"):
            self._send(404, error_body(f"no such path: {path[:100]}", 404))
            return
        try:
            body = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            self._send(400, error_body(f"the request body is not JSON: {e}", 400))
            return
        try:
            job = self.app.job_for(body)
        except BadRequest as e:
            self._send(400, error_body(str(e), 400))
            return
        self.app.scheduler.submit(job)
        job.done.wait()
        if job.error is not None:
            self._send(job.status, error_body(job.error, job.status))
        else:
            self._send(200, reply_body(job, self.app.alias))


def _log(line: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {line}", file=sys.stderr, flush=True)


_LOG_CALLBACK: Any = None  # kept alive: llama.cpp calls it for the life of the process


def quiet_llama_logs() -> None:
    """llama.cpp's log: only its warnings and errors, to stderr."""
    global _LOG_CALLBACK
    import llama_cpp as L

    state = {"shown": False}

    def cb(level: int, text: bytes, _user: Any) -> None:
        # ggml levels: 1 debug, 2 info, 3 warn, 4 error, 5 continuation of the previous line
        show = level in (3, 4) or (level == 5 and state["shown"])
        state["shown"] = show
        if show:
            sys.stderr.write(text.decode("utf-8", errors="replace"))

    _LOG_CALLBACK = L.llama_log_callback(cb)
    L.llama_log_set(_LOG_CALLBACK, ctypes.c_void_p(0))


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m harness.models.llm_batched",
                                 description="An OpenAI-compatible llama.cpp server that decodes several requests at once.")
    ap.add_argument("--model", required=True, help="a GGUF file")
    ap.add_argument("--alias", default=None, help="the model's name in replies and /v1/models (default: the file's stem)")
    ap.add_argument("--slots", type=int, default=DEFAULT_SLOTS, help="sequences decoded at once")
    ap.add_argument("--n_ctx", type=int, default=DEFAULT_N_CTX, help="context of each slot (prompt + reply)")
    ap.add_argument("--threads", type=int, default=1, help="CPU threads of llama.cpp")
    ap.add_argument("--n_batch", type=int, default=DEFAULT_N_BATCH, help="tokens in one decode")
    ap.add_argument("--chat_format", default="gemma", help="llama-cpp-python chat format (its format_NAME)")
    ap.add_argument("--flash_attn", action="store_true", help="flash attention")
    ap.add_argument("--kv_unified", action="store_true", help="one KV cache the slots share instead of a stream "
                    "of n_ctx cells per slot (gives Gemma 3 other logits for a sequence behind another's cells)")
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8080)
    ap.add_argument("--quiet", action="store_true", help="no line per request")
    a = ap.parse_args(argv)
    path = Path(a.model)
    if not path.is_file():
        print(f"error: no model file at {path}", file=sys.stderr)
        return 2
    try:
        quiet_llama_logs()
        engine = Engine(path, slots=a.slots, n_ctx=a.n_ctx, threads=a.threads, n_batch=a.n_batch,
                        chat_format=a.chat_format, flash_attn=a.flash_attn, kv_unified=a.kv_unified)
    except (ValueError, EngineError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    try:
        server = BatchedServer(engine, a.alias or path.stem, a.host, a.port, quiet=a.quiet)
    except OSError as e:
        engine.close()
        print(f"error: cannot listen on {a.host}:{a.port}: {e}", file=sys.stderr)
        return 2

    def on_signal(signum: int, _frame: Any) -> None:
        server.shutdown()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    _log(f"serving {path.name} as {server.alias} on http://{a.host}:{server.port}/v1: {a.slots} slots of "
         f"{a.n_ctx} tokens, {a.threads} threads, batches of {a.n_batch}")
    try:
        server.serve_forever()
    finally:
        s = server.scheduler.stats
        _log(f"stopped after {s['requests']} requests ({s['prompt_tokens']} prompt and {s['completion_tokens']} "
             f"completion tokens, {s['steps']} decodes)")
        engine.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
