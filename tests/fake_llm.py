"""A small OpenAI-compatible HTTP server for tests: scripted responses, 429/5xx, timeouts and
malformed bodies, so the real ``openai`` client's retry, budget and cache paths are exercised."""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


def default_responder(body: dict[str, Any]) -> str:
    """A deterministic reply derived from the last message (and the seed, when given)."""
    last = body["messages"][-1]["content"]
    seed = body.get("seed")
    return f"passage about: {last[-60:]}" + (f" [seed {seed}]" if seed is not None else "")


class FakeLLMServer:
    """``script`` entries are consumed one per chat request, then ``responder`` answers:
    ``("ok", text)``, ``("status", code)`` / ``("status", code, retry_after)``, ``("timeout", s)``
    (sleep ``s`` before answering normally), ``("malformed",)`` (a body that is not JSON),
    ``("empty",)`` (no choices), ``("null_message",)`` / ``("null_message", usage)`` (a choice whose
    ``message`` is null, with the given ``usage`` object or none), ``("no_usage", text)`` (a good
    reply without ``usage``). ``supports_n=False`` returns one choice whatever ``n`` is, like
    llama.cpp's server; ``usage=False`` leaves ``usage`` out of every reply. Usage counts words."""

    def __init__(self, responder: Callable[[dict[str, Any]], str] = default_responder, supports_n: bool = True,
                 delay_s: float = 0.0, usage: bool = True):
        self.responder = responder
        self.supports_n = supports_n
        self.delay_s = delay_s
        self.usage = usage
        self.script: deque[tuple] = deque()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.in_flight = 0
        self.max_in_flight = 0
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a: Any) -> None:  # quiet
                pass

            def _send(self, code: int, payload: bytes, headers: dict[str, str] | None = None) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(payload)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def do_GET(self) -> None:
                self._send(200, json.dumps({"object": "list", "data": [{"id": "fake", "object": "model"}]}).encode())

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", 0))
                body = json.loads(self.rfile.read(n) or b"{}")
                with outer._lock:
                    outer.requests.append(body)
                    outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                    action = outer.script.popleft() if outer.script else ("default",)
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    self._handle(body, action)
                finally:
                    with outer._lock:
                        outer.in_flight -= 1

            def _handle(self, body: dict[str, Any], action: tuple) -> None:
                kind = action[0]
                if outer.delay_s:
                    time.sleep(outer.delay_s)
                if kind == "status":
                    code = action[1]
                    headers = {"Retry-After": str(action[2])} if len(action) > 2 else {}
                    auth = self.headers.get("Authorization", "")
                    msg = {"error": {"message": f"scripted {code} (request carried {auth})", "type": "test",
                                     "code": code}}
                    self._send(code, json.dumps(msg).encode(), headers)
                    return
                if kind == "timeout":
                    time.sleep(action[1])
                if kind == "malformed":
                    self._send(200, b'{"id": "x", "choices": [ this is not json')
                    return
                if kind == "empty":
                    self._send(200, json.dumps({"id": "x", "object": "chat.completion", "created": 0,
                                                "model": body.get("model"), "choices": []}).encode())
                    return
                if kind == "null_message":
                    reply = {"id": "x", "object": "chat.completion", "created": 0, "model": body.get("model"),
                             "choices": [{"index": 0, "finish_reason": "stop", "message": None}]}
                    if len(action) > 1:
                        reply["usage"] = action[1]
                    self._send(200, json.dumps(reply).encode())
                    return
                n = int(body.get("n", 1)) if outer.supports_n else 1
                texts = []
                for i in range(n):
                    if kind in ("ok", "no_usage"):
                        texts.append(action[1] if isinstance(action[1], str) else action[1][i])
                    else:
                        b = dict(body)
                        if n > 1:
                            b["seed"] = (body.get("seed") or 0) * 1000 + i
                        texts.append(outer.responder(b))
                prompt_tokens = sum(len(m["content"].split()) for m in body["messages"])
                payload = {
                    "id": "chatcmpl-test", "object": "chat.completion", "created": 0, "model": body.get("model"),
                    "choices": [{"index": i, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": t}} for i, t in enumerate(texts)],
                    "usage": {"prompt_tokens": prompt_tokens,
                              "completion_tokens": sum(len(t.split()) for t in texts),
                              "total_tokens": prompt_tokens + sum(len(t.split()) for t in texts)},
                }
                if kind == "no_usage" or not outer.usage:
                    del payload["usage"]
                self._send(200, json.dumps(payload).encode())

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/v1"

    def start(self) -> "FakeLLMServer":
        self.thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def push(self, *actions: tuple) -> None:
        with self._lock:
            self.script.extend(actions)

    @property
    def count(self) -> int:
        return len(self.requests)
