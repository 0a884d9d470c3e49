"""The facts of the models a result used — parameters, embedding dimension, maximum input tokens —
read from the model itself when it is loaded (a sentence-transformers model:
``get_embedding_dimension()`` (``get_sentence_embedding_dimension()`` before sentence-transformers 5), ``max_seq_length`` and the sum of its tensors' sizes), and
recorded with the result as ``extra["model_facts"]``. A model whose embeddings all came from the
cache is not loaded: its facts are those recorded beside its cached embeddings when it was
(``model-facts.json`` in its folder of the embedding cache, harness/models/pool.py); without either, it
is listed by name with no facts, never a guessed number."""

from __future__ import annotations

import math
from typing import Any, Callable, Mapping

FACTS_KEY = "model_facts"
CACHE_NAME = "model-facts"
FACT_BOUNDS = {"parameters": 10 ** 13, "dimension": 10 ** 6, "max_tokens": 10 ** 9}
"""Each number a facts record may hold, and the bound it stays below: a whole number ≥ 1, or null."""


def display_name(model: str) -> str:
    """A model as a page names it: a hub or package name as is, a folder on the machine that ran it
    by its last two components (``…/models/coder/<hash>`` → ``coder/<hash>``)."""
    if not model.startswith(("/", "~", ".")) and "\\" not in model:
        return model
    parts = [p for p in model.replace("\\", "/").split("/") if p not in ("", ".", "..", "~")]
    return "/".join(parts[-2:]) or model


def _int(x: Any) -> int | None:
    try:
        v = int(x)
    except (TypeError, ValueError, OverflowError):  # OverflowError: int(inf)
        return None
    return v if v > 0 else None


def _fact(v: Any, bound: int) -> int | None | bool:
    """A recorded fact: the whole number, ``None`` when null, ``False`` when it is not a fact."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or (isinstance(v, float) and not
                                                                      (math.isfinite(v) and v.is_integer())):
        return False
    return int(v) if 1 <= v < bound else False


def recorded_facts(record: Any, name: str, where: str = "", warn: Callable[[str], None] | None = None
                   ) -> dict[str, Any] | None:
    """The facts a ``model-facts`` record read back from the cache holds, checked: ``None`` (with one
    warning line through ``warn`` naming ``where`` and the field) when it is not an object or a fact
    is not a whole number in its range (:data:`FACT_BOUNDS`) — then the model's facts are unknown,
    never the bad value. The model is named as ``name`` says, whatever the record says."""
    if not isinstance(record, Mapping):
        return None
    out: dict[str, Any] = {"model": display_name(name), "role": str(record.get("role") or "encoder")[:40]}
    for key, bound in FACT_BOUNDS.items():
        v = _fact(record.get(key), bound)
        if v is False:
            if warn is not None:
                shown = repr(record.get(key))
                shown = shown if len(shown) <= 40 else shown[:40] + "…"
                warn(f"model facts record {where or name}: field {key!r} is {shown}, must be a whole number in "
                     f"[1, {bound:g}); the record is ignored and the model's facts counted as unknown")
            return None
        out[key] = v
    return out


def read_facts(name: str, model: Any, role: str = "encoder") -> dict[str, Any]:
    """What ``model`` (loaded) says of itself; a fact it does not expose is ``None``."""
    dim = getattr(model, "get_embedding_dimension", None) or getattr(model, "get_sentence_embedding_dimension", None)
    params = getattr(model, "parameters", None)
    try:
        n_params = sum(int(p.numel()) for p in params()) if callable(params) else None
    except (TypeError, RuntimeError, AttributeError):
        n_params = None
    return {"model": display_name(name), "role": role, "parameters": _int(n_params),
            "dimension": _int(dim()) if callable(dim) else None,
            "max_tokens": _int(getattr(model, "max_seq_length", None))}


def pool_facts(pool: Any) -> list[dict[str, Any]]:
    """The facts of every model ``pool`` (a harness.models.pool.EncoderPool) used for the current
    result, read from the loaded model and recorded in the cache, else read from that record."""
    out = []
    cache = getattr(pool, "cache", None)
    for name, model in pool.used_models().items():
        facts = None
        if model is not None:
            facts = read_facts(name, model)
            if cache is not None:
                cache.record_cost(pool.fingerprint(name), CACHE_NAME, facts)
        elif cache is not None:
            folder = pool.fingerprint(name)
            facts = recorded_facts(cache.recorded_cost(folder, CACHE_NAME), name,
                                   str(cache.root / folder / f"{CACHE_NAME}.json"), cache.warn)
        out.append(dict(facts) if facts else {"model": display_name(name), "role": "encoder", "parameters": None,
                                             "dimension": None, "max_tokens": None})
    return out


def fmt_params(n: int | None) -> str:
    """22,713,216 → ``22.7M``; 1.3e9 → ``1.3B``; ``–`` when unknown."""
    if not n:
        return "–"
    for unit, size in (("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if n >= size:
            return f"{n / size:.1f}{unit}"
    return str(n)


def facts_text(f: Mapping[str, Any]) -> str:
    """``all-MiniLM-L6-v2: 22.7M params, 384-d, 256 tokens`` ("–" for each fact not known)."""
    dim, tok = f.get("dimension"), f.get("max_tokens")
    return (f"{f.get('model', '')}: {fmt_params(f.get('parameters'))} params, {f'{dim}-d' if dim else '–'}, "
            f"{f'{tok} tokens' if tok else '– tokens'}")
