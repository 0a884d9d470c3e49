"""The encoder pool and the shared embedding cache (docs/design/encoders.md#the-embedding-cache).

:class:`EncoderPool` loads each encoder once per process (:func:`load_encoder`: sentence-transformers
on torch, or its transformer run by ONNX Runtime, :mod:`harness.models.onnx`) and encodes through it.
Embeddings are cached as float32 ``.npy`` files keyed by (model fingerprint, prefix, normalisation,
max length, pooling, text hash) and memory-mapped on load — no pickle anywhere. Each file's name carries
the SHA-256 of its bytes (:class:`~harness.models.embedding_cache.EmbeddingCache`), checked on every
load: a damaged entry is reported by path, removed and recomputed. Next to each entry,
``<key>.cost.json`` records what computing it cost (wall and CPU seconds), and
``<fingerprint>/model-load.json`` what loading the model's weights cost; a result that reuses them is
charged that as its cold cost (:meth:`harness.core.ledger.Ledger.reuse`, harness/cost/figures.py). A
record read back is checked (:meth:`~harness.models.embedding_cache.EmbeddingCache.recorded_cost`): a
bad one is one warning naming the file and the field, and the artefact's cost counts as unknown.

Which model a name means, and its pooling, is :mod:`harness.models.resolve`'s.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .embedding_cache import EmbeddingCache, _texts_hash, warn_stderr
from .llm_accounts import redact
from .onnx import DEFAULT_BACKEND, ONNX_VARIANTS, _import_onnxruntime, check_backend, load_onnx_encoder
from .resolve import (POOLING_MODES, EncoderError, default_device, hub_offline_uncached, model_fingerprint,
                      packaged_model_names, resolve_model)
from ..core.files import exclusive_lock
from ..core.progress import NullProgress


def set_pooling(model: Any, pooling: str) -> Any:
    """Replace the model's pooling module by ``pooling`` (``mean``, ``cls``, ``max``, ``lasttoken``).

    CoDeR uses BGE with mean pooling where the released BGE models pool with CLS; a model whose
    pooling already matches is returned unchanged."""
    try:  # sentence-transformers ≥ 6
        from sentence_transformers.sentence_transformer.modules import Pooling
    except ImportError:  # pragma: no cover - older releases
        from sentence_transformers.models import Pooling

    if pooling not in POOLING_MODES:
        raise EncoderError(f"unknown pooling {pooling!r}; use one of {', '.join(POOLING_MODES)}")
    for i, module in enumerate(model):
        if isinstance(module, Pooling):
            cfg = module.get_config_dict()
            if cfg.get("pooling_mode") == pooling or cfg.get(f"pooling_mode_{pooling}_token") \
                    or cfg.get(f"pooling_mode_{pooling}_tokens"):
                return model
            dim = cfg.get("embedding_dimension") or cfg.get("word_embedding_dimension")
            model[i] = Pooling(int(dim), pooling_mode=pooling)
            return model
    raise EncoderError("the model has no pooling module to replace")


def load_encoder(name: str, device: str | None = None, max_length: int | None = None,
                 pooling: str | None = None, backend: str = DEFAULT_BACKEND, onnx_folder: Path | None = None,
                 warn: Callable[[str], None] = warn_stderr) -> Any:
    """A ``SentenceTransformer`` for ``name`` (local dir, packaged alias or hub name); ``pooling``
    overrides the model's own pooling (None keeps it). ``backend`` (:data:`BACKENDS`) other than
    ``torch`` loads it on the CPU and runs its transformer with ONNX Runtime (:func:`load_onnx_encoder`),
    the export kept under ``onnx_folder`` (``None``: a temporary folder); ``warn`` hears of a damaged
    export."""
    check_backend(backend)
    if backend != DEFAULT_BACKEND:
        _import_onnxruntime()  # before the weights load: a missing package is said at once
        device = "cpu"
    from sentence_transformers import SentenceTransformer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # rich draws our progress; keep the log clean

    rm = resolve_model(name)
    hint = ""
    if rm.source == "hub":
        hint = (f" (looked for a local directory and a packaged model named {name!r}; "
                f"packaged offline models: {', '.join(packaged_model_names())})")
        if hub_offline_uncached(name):
            raise EncoderError(f"cannot load encoder {name!r} from hub{hint}: HF_HUB_OFFLINE is set and the "
                               "model is not in the local hub cache")
    try:
        model = SentenceTransformer(rm.load_target, device=device or default_device(),
                                    local_files_only=rm.source != "hub")
    except Exception as e:  # noqa: BLE001 - add where we looked to whatever failed
        raise EncoderError(f"cannot load encoder {name!r} from {rm.source}{hint}: {_error_line(e)}") from e
    if max_length:
        model.max_seq_length = int(max_length)
    if pooling:
        set_pooling(model, pooling)
    if backend != DEFAULT_BACKEND:
        model = load_onnx_encoder(model, backend, onnx_folder, warn)
    return model


def _error_line(error: BaseException, limit: int = 300) -> str:
    """An exception's message as one line, secrets redacted *before* it is cut to ``limit``
    characters (a hub error can quote a request's headers; a cut made first can keep a token's prefix)."""
    tokens = [os.environ.get(v, "") for v in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HUGGINGFACE_HUB_TOKEN")]
    text = " ".join(redact(str(error), tokens).split()) or type(error).__name__
    return text if len(text) <= limit else text[:limit - 1] + "…"


def _backend_field(backend: str) -> dict[str, str]:
    """``{"backend": backend, "export": variant}``, empty for torch: what a cache key or record says
    of the backend (the variant names the export's recipe, :data:`ONNX_VARIANTS`)."""
    return {} if backend == DEFAULT_BACKEND else {"backend": backend, "export": ONNX_VARIANTS[backend]}


def _load_record(backend: str) -> str:
    """The name of the record of what loading a model cost: ``model-load`` (torch), ``model-load.<backend>``."""
    return "model-load" if backend == DEFAULT_BACKEND else f"model-load.{backend}"


class EncoderPool:
    """Loads each encoder once per process and caches embeddings on disk; ``warn`` receives a
    one-line message for each damaged cache entry it discards (default: standard error)."""

    def __init__(self, cache_dir: Path | None, device: str | None = None,
                 progress: Any = None, warn: Callable[[str], None] = warn_stderr):
        self.cache_dir = Path(cache_dir) if cache_dir else None
        self.cache = EmbeddingCache(self.cache_dir / "embeddings", warn) if self.cache_dir else None
        self.warn = warn
        self.device = device or default_device()
        self.progress = progress or NullProgress()
        self._models: dict[tuple[str, int | None, str | None, str], Any] = {}  # (name, max_length, pooling, backend)
        self._fingerprints: dict[str, str] = {}
        self._lock = threading.Lock()
        self.stats = {"encoded": 0, "cache_hits": 0, "cache_misses": 0, "cache_discarded": 0}
        # the ledger of the result being computed (the runner sets it): loading a model's weights is
        # timed as its ``model`` phase, apart from the index or search phase that asked for it
        self._ledger: Any = None
        self._load_cost: dict[tuple[str, str], dict[str, float]] = {}  # (model, backend) → what loading it cost here
        self._reset_result()
        # a cache miss of at least ``bulk_min_texts`` texts (torch backend) is offered to ``bulk_encode(name, texts,
        # prefix=, normalize=, max_length=, pooling=, batch_size=)`` when it is set (on a Ray cluster:
        # harness.run.distributed, a Ray Data actor pool), which returns the embeddings or None (encode
        # here); they are cached here like any other, and counted in stats["bulk_encoded"]
        self.bulk_encode: Callable[..., np.ndarray] | None = None
        self.bulk_min_texts = 100_000

    @property
    def ledger(self) -> Any:
        return self._ledger

    @ledger.setter
    def ledger(self, ledger: Any) -> None:
        self._ledger = ledger
        self._reset_result()

    def _reset_result(self) -> None:
        """A new result starts: nothing of it is loaded, written or charged yet."""
        self._loaded_here: set[str] = set()
        self._used: set[str] = set()
        self._seen_keys: set[tuple[str, str]] = set()

    def onnx_folder(self, name: str) -> Path | None:
        """Where the ONNX exports of ``name`` are kept: ``<cache_dir>/onnx/<model fingerprint>``
        (``None`` without a cache dir: each load exports into a temporary folder)."""
        return self.cache_dir / "onnx" / self.fingerprint(name) if self.cache_dir is not None else None

    def model(self, name: str, max_length: int | None = None, pooling: str | None = None,
              backend: str = DEFAULT_BACKEND) -> Any:
        """The loaded encoder (one per name, maximum length, pooling and backend in this pool). A
        ``backend`` other than ``torch`` exports the model to ONNX the first time (kept under
        :meth:`onnx_folder`); the export is part of the load's cost."""
        check_backend(backend)
        key = (name, max_length, pooling, backend)
        with self._lock:
            if key not in self._models:
                timer = self.ledger.phase("model") if self.ledger is not None else contextlib.nullcontext()
                w0, c0 = time.perf_counter(), time.process_time()
                with timer:
                    self._models[key] = load_encoder(name, self.device, max_length, pooling, backend,
                                                     self.onnx_folder(name) if backend != DEFAULT_BACKEND else None,
                                                     self.warn)
                cost = {"wall_s": time.perf_counter() - w0, "cpu_s": time.process_time() - c0}
                self._load_cost[(name, backend)] = cost
                self._loaded_here.add(name)
                if self.cache is not None:
                    self.cache.record_cost(self.fingerprint(name), _load_record(backend),
                                           {**cost, "model": name, **_backend_field(backend)})
            return self._models[key]

    def used_models(self) -> dict[str, Any]:
        """The encoders the current result used, by name: the loaded model, or None when all its
        embeddings came from the cache (harness/models/facts.py reads their facts)."""
        loaded = {key[0]: m for key, m in self._models.items()}
        return {n: loaded.get(n) for n in sorted(self._used | self._loaded_here)}

    def _charge_model(self, name: str, backend: str = DEFAULT_BACKEND) -> None:
        """The first use of ``name`` in a result that did not load it: charge what loading it (with
        ``backend``, its export included) cost."""
        if self.ledger is None or name in self._used:
            return
        self._used.add(name)
        if name in self._loaded_here:
            return
        cost = self._load_cost.get((name, backend)) or (
            self.cache.recorded_cost(self.fingerprint(name), _load_record(backend))
            if self.cache is not None else None) or {}
        self.ledger.reuse("model", cost.get("wall_s"), cost.get("cpu_s"), phase="model")

    def _charge_entry(self, entry: tuple[str, str]) -> None:
        """A cache hit of an entry this result did not compute: charge what computing it cost."""
        if self.ledger is None or entry in self._seen_keys or self.cache is None:
            return
        self._seen_keys.add(entry)
        cost = self.cache.recorded_cost(entry[0], f"{entry[1]}.cost") or {}
        self.ledger.reuse("embeddings", cost.get("wall_s"), cost.get("cpu_s"))

    def fingerprint(self, name: str) -> str:
        if name not in self._fingerprints:
            self._fingerprints[name] = model_fingerprint(name)
        return self._fingerprints[name]

    def cache_key(self, name: str, texts: Sequence[str], *, prefix: str, normalize: bool,
                  max_length: int | None, pooling: str | None = None,
                  backend: str = DEFAULT_BACKEND) -> tuple[str, str]:
        """``(folder, key)`` of the embeddings of ``texts``: the model fingerprint, and the hash of
        it with the encoding settings and the texts. The backend is a setting when it is not
        ``torch`` (the keys of torch embeddings are those from before there were backends)."""
        settings = json.dumps({"prefix": prefix, "normalize": normalize, "max_length": max_length,
                               "pooling": pooling or "model-default", **_backend_field(backend)}, sort_keys=True)
        key = hashlib.sha256(f"{self.fingerprint(name)}\n{settings}\n{_texts_hash(texts)}".encode()).hexdigest()[:32]
        return self.fingerprint(name), key

    def encode(self, name: str, texts: Sequence[str], *, prefix: str = "", normalize: bool = True,
               batch_size: int = 64, max_length: int | None = None, description: str = "encoding",
               chunk: int = 256, pooling: str | None = None, backend: str = DEFAULT_BACKEND) -> np.ndarray:
        """Embeddings of ``prefix + text`` for each text, float32, shape (len(texts), dim);
        ``pooling`` overrides the model's pooling (None: the model's own); ``backend``
        (:data:`BACKENDS`) says what runs the model."""
        check_backend(backend)
        texts = list(texts)
        entry = None
        if self.cache is not None:
            entry = self.cache_key(name, texts, prefix=prefix, normalize=normalize, max_length=max_length,
                                   pooling=pooling, backend=backend)
        with contextlib.ExitStack() as stack:
            self._lock_entry(stack, entry)
            return self._encode(name, texts, entry, prefix=prefix, normalize=normalize, batch_size=batch_size,
                                max_length=max_length, description=description, chunk=chunk, pooling=pooling,
                                backend=backend)

    def _lock_entry(self, stack: contextlib.ExitStack, entry: tuple[str, str] | None) -> None:
        """Hold (until ``stack`` closes) an exclusive lock on ``<cache>/<model>/.<key>.lock`` while
        an entry is looked up and computed, so that two processes that need the same embeddings at
        once (two runs over one home, test workers, Ray jobs on one file system) encode them once:
        the second waits, then reads the first one's file. Where the lock file cannot be made (a
        read-only cache) nothing is locked, and each writes its own copy atomically, as before."""
        if entry is None or self.cache is None:
            return
        lock = self.cache.root / entry[0] / f".{entry[1]}.lock"
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
            stack.enter_context(exclusive_lock(lock))
        except OSError:
            pass

    def _encode(self, name: str, texts: list[str], entry: tuple[str, str] | None, *, prefix: str, normalize: bool,
                batch_size: int, max_length: int | None, description: str, chunk: int, pooling: str | None,
                backend: str) -> np.ndarray:
        if self.cache is not None and entry is not None:
            cached = self.cache.get(*entry, rows=len(texts))
            self.stats["cache_discarded"] = self.cache.discarded
            if cached is not None:
                self.stats["cache_hits"] += 1
                self._charge_entry(entry)
                self._charge_model(name, backend)
                return cached
        self.stats["cache_misses"] += 1
        w0, c0 = time.perf_counter(), time.process_time()
        bulk = (self.bulk_encode(name, texts, prefix=prefix, normalize=normalize, max_length=max_length, pooling=pooling,
                                 batch_size=batch_size)
                if self.bulk_encode is not None and len(texts) >= self.bulk_min_texts and backend == DEFAULT_BACKEND
                else None)
        if bulk is not None:  # None: the bulk encoder declined (no free capacity); encode here
            arr = np.asarray(bulk, dtype=np.float32)
            self.stats["encoded"] += len(texts)
            self.stats["bulk_encoded"] = self.stats.get("bulk_encoded", 0) + len(texts)
            self._store(entry, arr, {"wall_s": time.perf_counter() - w0, "cpu_s": None})  # CPU spent elsewhere
            self._charge_model(name)
            return arr
        fresh = (name, max_length, pooling, backend) not in self._models
        model = self.model(name, max_length, pooling, backend)
        load = self._load_cost.get((name, backend), {}) if fresh else {}
        # Longest first across the whole list (not per chunk), so batches carry little padding.
        order = np.argsort([-len(t) for t in texts], kind="stable")
        inputs = [prefix + texts[i] for i in order]
        parts: list[np.ndarray] = []
        with self.progress.track(len(inputs), description) as advance:
            for s in range(0, len(inputs), chunk):
                batch = inputs[s:s + chunk]
                emb = model.encode(batch, batch_size=batch_size, convert_to_numpy=True,
                                   normalize_embeddings=normalize, show_progress_bar=False)
                parts.append(np.asarray(emb, dtype=np.float32))
                advance(len(batch))
        dim = model.get_sentence_embedding_dimension() if not parts else parts[0].shape[1]
        arr = np.empty((len(texts), dim or 0), dtype=np.float32)
        if parts:
            arr[order] = np.concatenate(parts)
        self.stats["encoded"] += len(texts)
        wall, cpu = time.perf_counter() - w0, time.process_time() - c0
        if load:  # the model was loaded inside this call: that is its own cost (model-load.json), not the entry's
            wall, cpu = max(0.0, wall - load["wall_s"]), max(0.0, cpu - load["cpu_s"])
        self._store(entry, arr, {"wall_s": wall, "cpu_s": cpu})
        self._charge_model(name, backend)
        return arr

    def _store(self, entry: tuple[str, str] | None, arr: np.ndarray, cost: dict[str, Any]) -> None:
        if entry is not None:
            self._seen_keys.add(entry)  # computed by this result: never charged to it as reused
        if self.cache is not None and entry is not None:
            try:
                self.cache.put(*entry, arr)
            except OSError as e:  # the embeddings are computed: keep them, say the cache is not written
                self.cache.warn(f"embedding cache not written under {self.cache.root / entry[0]}: {e}")
                return
            self.cache.record_cost(entry[0], f"{entry[1]}.cost", {**cost, "rows": int(arr.shape[0])})
