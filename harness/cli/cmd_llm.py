"""``llm``: the LLM behind the retrievers that call one (the embedded server, the settings a run
would use, the response cache)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Optional

import typer

from .console import console, fail, home_dir, load_config, out, resolve_llm_settings
from .options import TYPER_SETTINGS, HomeOpt, LlmBaseUrlOpt, LlmModelOpt, PricesOpt

llm_app = typer.Typer(help="The LLM behind hyde/deo: the embedded llama.cpp server, settings, cache.", **TYPER_SETTINGS)


@llm_app.command("serve")
def llm_serve(
    port: int = typer.Option(8080, "--port", help="Port on 127.0.0.1."),
    model_path: Optional[Path] = typer.Option(None, "--model-path", help="A GGUF file (default: the packaged Gemma-3-270M)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads (default: half the cores)."),
    n_ctx: int = typer.Option(4096, "--n-ctx", help="Context of one request (prompt + reply); the batched server "
                              "keeps this much for each slot."),
    slots: int = typer.Option(8, "--slots", help="Requests the batched server decodes at once."),
    server: str = typer.Option("batched", "--server", metavar="batched|llama_cpp.server",
                               help="The batched server (harness.models.llm_batched) or llama-cpp-python's own, "
                               "which answers one request at a time."),
    home: HomeOpt = None,
) -> None:
    """Serve the embedded LLM (llama.cpp, Gemma-3-270M) until Ctrl-C; point runs at it with
    --llm-base-url http://127.0.0.1:PORT/v1 to share one server between runs (give them
    --llm-concurrency SLOTS to keep every slot busy)."""
    from ..models.llm import EMBEDDED_MODEL, EmbeddedServer, LLMSettings

    if home is not None:
        os.environ["BEYONDSIM_HOME"] = str(home_dir(home))
    try:
        settings = LLMSettings(embedded_threads=threads, embedded_ctx=n_ctx, embedded_slots=slots, embedded_server=server)
    except ValueError as e:
        fail(str(e))
    srv = EmbeddedServer(settings, model_path=model_path, port=port)
    url = srv.start()
    what = f"{slots} slots" if server == "batched" else "llama_cpp.server, one request at a time"
    console.print(f"serving {srv.model_path} at {url} ({what}; model name for --llm-model: "
                  f"{EMBEDDED_MODEL}); log: {srv.log_path}. Ctrl-C stops it.", highlight=False, soft_wrap=True)
    try:
        while srv.proc is not None and srv.proc.poll() is None:
            time.sleep(1)
        fail(f"the server exited; see {srv.log_path}", code=1)
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()


@llm_app.command("info")
def llm_info(
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Run config with an [llm] table."),
    llm_base_url: LlmBaseUrlOpt = None,
    llm_model: LlmModelOpt = None,
    prices: PricesOpt = None,
    ping: bool = typer.Option(False, "--ping", help="Send one short request (uncached) and report its latency."),
    home: HomeOpt = None,
) -> None:
    """The LLM settings a run would use (never the key), its price, and the response cache."""
    from ..core.ledger import Ledger
    from ..models.llm import LLMClient, LLMError

    cfg = load_config(config)
    settings = resolve_llm_settings(cfg, config, base_url=llm_base_url, model=llm_model,
                                    prices=str(prices) if prices else None)
    client = LLMClient(settings, cache_path=home_dir(home) / "cache" / "llm.sqlite")
    with client:
        info = client.describe() | {"cache": client.cache.stats() if client.cache else None}
        if ping:
            client.cache = None
            led = Ledger()
            try:
                c = client.chat("Reply with the single word: ready", led, max_tokens=8, purpose="ping")
            except LLMError as e:
                fail(str(e), code=1)
            info["ping"] = {"reply": c.texts[0] if c.texts else "", "latency_s": round(led.llm_calls[0].latency_s, 3),
                            "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens, "usd": c.usd}
    out.print_json(json.dumps(info, default=str))
