"""The embedding cache: every entry carries the checksum of its bytes; a damaged, overwritten or
pre-checksum entry is reported by path, discarded and recomputed with the real encoder."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from harness.models.embedding_cache import EmbeddingCache, file_checksum
from harness.models.pool import EncoderPool

MODEL = "all-MiniLM-L6-v2"
TEXTS = ["Aspirin reduces the risk of heart attack.", "Dogs bark at night.", "Green tea lowers cholesterol."]


def encode(cache_dir: Path, warnings: list[str]) -> tuple[np.ndarray, EncoderPool]:
    """A fresh pool (as a new process would have) encoding :data:`TEXTS` through the cache."""
    pool = EncoderPool(cache_dir, "cpu", warn=warnings.append)
    return np.array(pool.encode(MODEL, TEXTS)), pool


def only_entry(cache_dir: Path) -> Path:
    files = sorted((cache_dir / "embeddings").rglob("*.npy"))
    assert len(files) == 1, files
    return files[0]


@pytest.fixture
def first(tmp_path: Path, no_network) -> tuple[Path, np.ndarray, Path]:
    """``(cache dir, embeddings, the entry's file)`` after one encoding."""
    warnings: list[str] = []
    emb, pool = encode(tmp_path / "cache", warnings)
    assert emb.shape == (3, 384) and pool.stats["encoded"] == 3 and warnings == []
    entry = only_entry(tmp_path / "cache")
    assert entry.stem.endswith("-" + file_checksum(entry))
    return tmp_path / "cache", emb, entry


def test_clean_entry_is_a_hit(first: tuple[Path, np.ndarray, Path]) -> None:
    cache_dir, emb, entry = first
    warnings: list[str] = []
    again, pool = encode(cache_dir, warnings)
    assert pool.stats == {"encoded": 0, "cache_hits": 1, "cache_misses": 0, "cache_discarded": 0}
    np.testing.assert_array_equal(again, emb)
    assert warnings == [] and only_entry(cache_dir) == entry


@pytest.mark.parametrize("damage", ["truncated", "same-shape garbage", "emptied"])
def test_damaged_entry_is_reported_removed_and_recomputed(first: tuple[Path, np.ndarray, Path], damage: str) -> None:
    cache_dir, emb, entry = first
    raw = entry.read_bytes()
    if damage == "truncated":
        entry.write_bytes(raw[: len(raw) // 2])
    elif damage == "same-shape garbage":
        header = len(raw) - emb.nbytes
        garbage = np.random.default_rng(0).standard_normal(emb.shape).astype(np.float32)
        entry.write_bytes(raw[:header] + garbage.tobytes())
        assert np.load(entry).shape == emb.shape  # a valid .npy of the right shape: only the checksum tells
    else:
        entry.write_bytes(b"")

    warnings: list[str] = []
    again, pool = encode(cache_dir, warnings)
    assert len(warnings) == 1 and "\n" not in warnings[0]
    assert f"embedding cache entry {entry} is damaged" in warnings[0] and "recomputing" in warnings[0]
    assert pool.stats["cache_discarded"] == 1 and pool.stats["encoded"] == 3
    np.testing.assert_allclose(again, emb, atol=1e-5)

    # the entry is rewritten whole: the next run reads it without a warning and encodes nothing
    rewritten = only_entry(cache_dir)
    assert rewritten.stem.endswith("-" + file_checksum(rewritten))
    warnings.clear()
    third, pool = encode(cache_dir, warnings)
    assert warnings == [] and pool.stats["encoded"] == 0 and pool.stats["cache_hits"] == 1
    np.testing.assert_array_equal(third, again)


def test_entry_without_checksum_is_not_trusted(first: tuple[Path, np.ndarray, Path]) -> None:
    """A file in the pre-checksum layout (``<key>.npy``) is never read: it is recomputed and replaced."""
    cache_dir, emb, entry = first
    key = entry.stem.rsplit("-", 1)[0]
    legacy = entry.with_name(f"{key}.npy")
    np.save(legacy, np.zeros_like(emb))  # what an unverifiable old file could hold
    entry.unlink()

    warnings: list[str] = []
    again, pool = encode(cache_dir, warnings)
    assert pool.stats["encoded"] == 3 and pool.stats["cache_hits"] == 0
    np.testing.assert_allclose(again, emb, atol=1e-5)
    assert not legacy.exists() and only_entry(cache_dir).name.startswith(f"{key}-")


def test_cache_rejects_wrong_shape_and_keeps_writes_whole(tmp_path: Path) -> None:
    warnings: list[str] = []
    cache = EmbeddingCache(tmp_path, warn=warnings.append)
    arr = np.arange(12, dtype=np.float32).reshape(4, 3)
    path = cache.put("model", "k" * 32, arr)
    assert path.parent == tmp_path / "model" and [p.name for p in path.parent.iterdir()] == [path.name]
    np.testing.assert_array_equal(cache.get("model", "k" * 32, rows=4), arr)
    assert warnings == []
    # the same key asked for another number of rows: reported and removed, not returned
    assert cache.get("model", "k" * 32, rows=5) is None
    assert len(warnings) == 1 and "expected float32 with 5 rows" in warnings[0] and str(path) in warnings[0]
    assert not path.exists() and cache.discarded == 1
    # float64 under a valid checksum is not float32 embeddings
    path = cache.put("model", "k" * 32, arr.astype(np.float64))
    assert cache.get("model", "k" * 32, rows=4) is None and not path.exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_encoding_matches_cpu(tmp_path: Path) -> None:  # pragma: no cover - needs a GPU
    """A pool on CUDA encodes as the CPU pool does (the same vectors up to the kernels' float32
    rounding), and its cache entry is read back exactly by a fresh CUDA pool."""
    cpu = EncoderPool(tmp_path / "cpu", "cpu")
    gpu = EncoderPool(tmp_path / "gpu", "cuda")
    a, b = np.array(cpu.encode(MODEL, TEXTS)), np.array(gpu.encode(MODEL, TEXTS))
    assert next(gpu.model(MODEL, None, None).parameters()).device.type == "cuda"
    assert a.shape == b.shape == (3, 384)
    cos = (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert cos.min() > 0.9999, cos
    assert np.abs(a - b).max() < 1e-3
    fresh = EncoderPool(tmp_path / "gpu", "cuda")
    np.testing.assert_array_equal(np.array(fresh.encode(MODEL, TEXTS)), b)
    assert fresh.stats["cache_hits"] == 1 and fresh.stats["encoded"] == 0


def test_two_pools_needing_one_entry_at_once_encode_it_once(tmp_path: Path, no_network) -> None:
    """Two pools on one cache (as two processes over one home would be): while the first encodes an
    entry under its lock, the second waits for it and reads the first one's file instead of encoding
    the same texts again (flock locks belong to the open file, so two pools in one process exclude each
    other as two processes do)."""
    import threading
    import time

    first, second = EncoderPool(tmp_path / "cache", "cpu"), EncoderPool(tmp_path / "cache", "cpu")
    model = first.model(MODEL)
    started = threading.Event()
    real_encode = model.encode

    def slow_encode(*args, **kwargs):  # the first pool's encoder: still busy when the second asks
        started.set()
        time.sleep(0.5)
        return real_encode(*args, **kwargs)

    model.encode = slow_encode
    out: dict[str, np.ndarray] = {}
    worker = threading.Thread(target=lambda: out.setdefault("first", first.encode(MODEL, TEXTS)))
    worker.start()
    assert started.wait(30)
    out["second"] = second.encode(MODEL, TEXTS)
    worker.join(30)
    assert first.stats["cache_misses"] == 1 and first.stats["encoded"] == 3
    assert second.stats == {"encoded": 0, "cache_hits": 1, "cache_misses": 0, "cache_discarded": 0}
    np.testing.assert_array_equal(out["second"], out["first"])
    assert only_entry(tmp_path / "cache")
