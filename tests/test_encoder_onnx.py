"""The onnx encoder backends (harness/models/onnx.py): the packaged MiniLM exported to ONNX once per
cache, run by ONNX Runtime through sentence-transformers' own pooling; fp32 gives torch's embeddings,
int8 a measurably different model; the export is cached with its checksum, and a damaged one is
reported, removed and made again. The torch backend keeps the cache keys and spec hashes it had."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from harness.models import onnx as encoder_onnx
from harness.models.embedding_cache import _texts_hash
from harness.models.onnx import BACKENDS, cached_onnx_file
from harness.models.pool import EncoderPool, load_encoder
from harness.models.resolve import EncoderError
from harness.core.errors import UserError
from harness.protocols import RunContext
from harness.registry import make_spec
from harness.types import Corpus, Document, Query

MODEL = "all-MiniLM-L6-v2"
LONG = ("Randomised trials of statins in patients with stable coronary disease report fewer myocardial "
        "infarctions, although the absolute benefit depends on the baseline risk and on adherence. ")
TEXTS = [
    "Aspirin reduces the risk of heart attack.",
    "Dogs bark at night.",
    "x",
    "",
    "Green tea lowers cholesterol in adults with mild hypercholesterolaemia.",
    "Vitamin D does not prevent fractures in community-dwelling older adults.",
    "The p53 protein suppresses tumours by arresting the cell cycle after DNA damage.",
    "Mitochondria are the powerhouse of the cell; ATP synthase couples proton flow to phosphorylation.",
    "Ünïcödé têxt with àccents, emoji 🙂 and CJK 漢字 characters.",
    "NUMBERS 1234567890 and symbols #$%^&*() [] {} <> ~",
    LONG * 12,  # far past the model's 256 tokens: truncated
    LONG * 3,  # past it too
    LONG,  # ~40 tokens
    "what is the capital of France?",
    "A query that excludes something: hotels in Paris without a pool.",
    "    leading and trailing whitespace    ",
    "Line one.\nLine two.\tTabbed.",
    "repeat " * 200,
    "BRCA1 mutations increase breast cancer risk.",
    "Exercise improves insulin sensitivity independent of weight loss.",
]


def cosines(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))


@pytest.fixture(scope="module")
def onnx_pool(tmp_path_factory: pytest.TempPathFactory) -> EncoderPool:
    """A pool with a cache shared by this module's tests: the export is made once."""
    return EncoderPool(tmp_path_factory.mktemp("onnx-cache"), "cpu", warn=lambda m: pytest.fail(f"warned: {m}"))


@pytest.fixture(scope="module")
def torch_embeddings(onnx_pool: EncoderPool) -> np.ndarray:
    return np.array(onnx_pool.encode(MODEL, TEXTS, batch_size=8))


def test_onnx_fp32_gives_torch_embeddings(onnx_pool: EncoderPool, torch_embeddings: np.ndarray) -> None:
    got = np.array(onnx_pool.encode(MODEL, TEXTS, batch_size=8, backend="onnx"))
    assert got.shape == torch_embeddings.shape == (len(TEXTS), 384)
    assert np.abs(got - torch_embeddings).max() < 1e-5
    # other batchings (other padding) and a shorter maximum length give torch's embeddings too
    for batch_size, max_length in ((1, None), (32, None), (5, 32)):
        ref = np.array(onnx_pool.encode(MODEL, TEXTS, batch_size=batch_size, max_length=max_length))
        got = np.array(onnx_pool.encode(MODEL, TEXTS, batch_size=batch_size, max_length=max_length, backend="onnx"))
        assert np.abs(got - ref).max() < 1e-5, (batch_size, max_length)
    # unnormalised embeddings as well (Contriever-style inner product)
    ref = np.array(onnx_pool.encode(MODEL, TEXTS[:6], normalize=False))
    got = np.array(onnx_pool.encode(MODEL, TEXTS[:6], normalize=False, backend="onnx"))
    assert np.abs(got - ref).max() < 1e-5 * max(1.0, float(np.abs(ref).max()))


def test_onnx_int8_is_a_different_but_close_model(onnx_pool: EncoderPool, torch_embeddings: np.ndarray) -> None:
    got = np.array(onnx_pool.encode(MODEL, TEXTS, batch_size=8, backend="onnx-int8"))
    assert got.shape == torch_embeddings.shape
    assert np.abs(got - torch_embeddings).max() > 1e-3  # measurably different
    # close: weights quantised per output channel (one scale per tensor: worst cosine ~0.82 here)
    assert cosines(got, torch_embeddings).min() > 0.95


def test_session_threads_follow_torch_and_the_model_keeps_its_modules(onnx_pool: EncoderPool) -> None:
    model = onnx_pool.model(MODEL, backend="onnx")
    assert model.encoder_backend == "onnx"
    session = model[0].onnx_session
    assert session.get_session_options().intra_op_num_threads == max(1, torch.get_num_threads())
    assert [i.name for i in session.get_inputs()] == ["input_ids", "attention_mask", "token_type_ids"]
    dim = getattr(model, "get_embedding_dimension", None) or model.get_sentence_embedding_dimension
    assert dim() == 384 and len(model) >= 2  # pooling etc. are its own
    # one model (and one session) per backend; torch's is untouched
    assert onnx_pool.model(MODEL, backend="onnx") is model
    assert onnx_pool.model(MODEL) is not model and not hasattr(onnx_pool.model(MODEL), "encoder_backend")
    assert onnx_pool.model(MODEL, max_length=32, backend="onnx")[0].onnx_session is session
    assert {k[3] for k in onnx_pool._models} >= {"torch", "onnx"}


def test_export_is_cached_and_reused_by_a_new_pool(onnx_pool: EncoderPool, monkeypatch: pytest.MonkeyPatch) -> None:
    onnx_pool.model(MODEL, backend="onnx-int8")
    folder = onnx_pool.cache_dir / "onnx" / onnx_pool.fingerprint(MODEL)
    files = {p.name for p in folder.iterdir() if not p.name.startswith(".")}
    assert files == {"fp32.onnx", "fp32.onnx.sha256", "int8-per-channel.onnx", "int8-per-channel.onnx.sha256"}
    for name in ("fp32.onnx", "int8-per-channel.onnx"):
        digest = hashlib.sha256((folder / name).read_bytes()).hexdigest()
        assert (folder / f"{name}.sha256").read_text().strip() == digest
    assert not list(folder.glob("*.tmp")) and not list(folder.glob(".*.tmp"))
    mtimes = {p: p.stat().st_mtime_ns for p in folder.glob("*.onnx")}
    calls: list[str] = []
    monkeypatch.setattr(encoder_onnx, "export_onnx", lambda *a: calls.append("export"))
    monkeypatch.setattr(encoder_onnx, "quantize_onnx", lambda *a: calls.append("quantize"))
    warned: list[str] = []
    fresh = EncoderPool(onnx_pool.cache_dir, "cpu", warn=warned.append)
    emb = fresh.encode(MODEL, ["a text no pool has encoded yet"], backend="onnx-int8")
    assert emb.shape == (1, 384) and calls == [] and warned == []
    assert {p: p.stat().st_mtime_ns for p in folder.glob("*.onnx")} == mtimes
    # the load (and export) cost is recorded apart from torch's
    records = {p.name for p in (onnx_pool.cache_dir / "embeddings" / onnx_pool.fingerprint(MODEL)).glob("model-load*")}
    assert {"model-load.onnx-int8.json"} <= records


def test_damaged_export_is_reported_removed_and_made_again(onnx_pool: EncoderPool,
                                                           torch_embeddings: np.ndarray) -> None:
    folder = onnx_pool.cache_dir / "onnx" / onnx_pool.fingerprint(MODEL)
    onnx_pool.model(MODEL, backend="onnx-int8")
    int8 = folder / "int8-per-channel.onnx"
    before = int8.read_bytes()
    with open(int8, "r+b") as f:  # flip bytes in the middle of the weights
        f.seek(len(before) // 2)
        f.write(bytes(b ^ 0xFF for b in before[len(before) // 2:len(before) // 2 + 64]))
    warned: list[str] = []
    fresh = EncoderPool(onnx_pool.cache_dir, "cpu", warn=warned.append)
    emb = np.array(fresh.encode(MODEL, TEXTS[:5], backend="onnx-int8"))
    assert len(warned) == 1 and "\n" not in warned[0]
    assert str(int8) in warned[0] and "damaged" in warned[0] and "exporting it again" in warned[0]
    assert hashlib.sha256(int8.read_bytes()).hexdigest() == (folder / "int8-per-channel.onnx.sha256").read_text().strip()
    assert cosines(emb, torch_embeddings[:5]).min() > 0.8
    # a missing checksum record is a damage too
    (folder / "int8-per-channel.onnx.sha256").unlink()
    warned.clear()
    EncoderPool(onnx_pool.cache_dir, "cpu", warn=warned.append).model(MODEL, backend="onnx-int8")
    assert len(warned) == 1 and "int8-per-channel.onnx.sha256 is missing" in warned[0]
    assert (folder / "int8-per-channel.onnx.sha256").is_file()


def test_cached_onnx_file_checks_its_checksum(tmp_path: Path) -> None:
    made: list[int] = []
    warned: list[str] = []

    def make(path: Path) -> None:
        made.append(1)
        path.write_bytes(b"onnx bytes " * 100)

    target = tmp_path / "fp" / "fp32.onnx"
    digest = cached_onnx_file(target, make, warned.append)
    assert digest == hashlib.sha256(target.read_bytes()).hexdigest() and made == [1]
    assert cached_onnx_file(target, make, warned.append) == digest and made == [1] and warned == []
    target.write_bytes(b"onnx bytes " * 99)  # truncated
    assert cached_onnx_file(target, make, warned.append) == digest and made == [1, 1]
    assert len(warned) == 1 and str(target) in warned[0]
    assert sorted(p.name for p in target.parent.iterdir()) == [".fp32.onnx.lock", "fp32.onnx", "fp32.onnx.sha256"]

    def broken(path: Path) -> None:  # an export that fails half-way leaves nothing behind
        path.write_bytes(b"half")
        raise EncoderError("export failed")

    other = tmp_path / "fp" / "int8-per-channel.onnx"
    with pytest.raises(EncoderError):
        cached_onnx_file(other, broken, warned.append)
    assert not other.exists() and not list(other.parent.glob("*.tmp")) and not list(other.parent.glob(".*.tmp"))


def test_without_a_cache_dir_the_export_goes_to_a_temporary_folder(monkeypatch: pytest.MonkeyPatch,
                                                                   tmp_path: Path) -> None:
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    made: list[Path] = []
    export = encoder_onnx.export_onnx
    monkeypatch.setattr(encoder_onnx, "export_onnx", lambda model, path: (made.append(Path(path)), export(model, path)))
    pool = EncoderPool(None, "cpu")
    assert pool.onnx_folder(MODEL) is None
    emb = pool.encode(MODEL, TEXTS[:3], backend="onnx")
    assert emb.shape == (3, 384) and len(made) == 1
    assert made[0].parent.parent == tmp_path and made[0].parent.name.startswith("beyondsim-onnx-")
    assert not made[0].parent.exists()  # removed once the session is loaded


def test_cache_keys_differ_by_backend_and_torch_keeps_its_key(onnx_pool: EncoderPool) -> None:
    texts = TEXTS[:4]
    kw = dict(prefix="q: ", normalize=True, max_length=None, pooling=None)
    keys = {b: onnx_pool.cache_key(MODEL, texts, backend=b, **kw) for b in BACKENDS}
    assert len({k for _, k in keys.values()}) == 3
    assert {folder for folder, _ in keys.values()} == {onnx_pool.fingerprint(MODEL)}
    # the key torch embeddings had before there were backends
    fp = onnx_pool.fingerprint(MODEL)
    settings = json.dumps({"prefix": "q: ", "normalize": True, "max_length": None, "pooling": "model-default"},
                          sort_keys=True)
    old = hashlib.sha256(f"{fp}\n{settings}\n{_texts_hash(texts)}".encode()).hexdigest()[:32]
    assert keys["torch"] == (fp, old) == onnx_pool.cache_key(MODEL, texts, **kw)
    # an onnx encoding is never served torch's entry, nor torch onnx's
    pool = EncoderPool(onnx_pool.cache_dir, "cpu")
    pool.encode(MODEL, ["only torch has seen this"])
    pool.encode(MODEL, ["only torch has seen this"], backend="onnx")
    assert pool.stats["cache_misses"] == 2 and pool.stats["cache_hits"] == 0
    pool.encode(MODEL, ["only torch has seen this"], backend="onnx")
    assert pool.stats["cache_hits"] == 1


def test_bad_backend_is_refused() -> None:
    from retrievers.dense import ContrieverParams, DenseParams, PooledDenseParams
    from retrievers.hyde import HydeParams

    for cls in (DenseParams, PooledDenseParams, ContrieverParams, HydeParams):
        with pytest.raises(ValueError, match="backend must be one of torch, onnx, onnx-int8"):
            cls(backend="tensorflow")
        assert cls(backend="onnx").backend == "onnx"
    with pytest.raises(UserError, match="'tensorflow' is not one of 'torch', 'onnx', 'onnx-int8'"):
        make_spec("dense", {"backend": "tensorflow"})
    with pytest.raises(EncoderError, match="unknown encoder backend"):
        EncoderPool(None, "cpu").encode(MODEL, ["x"], backend="tensorflow")


def test_torch_backend_keeps_the_spec_hash() -> None:
    torch_spec = make_spec("dense")
    assert "backend" not in torch_spec.params
    assert make_spec("dense", {"backend": "torch"}).hash == torch_spec.hash
    onnx_spec = make_spec("dense", {"backend": "onnx"})
    assert onnx_spec.params["backend"] == "onnx" and onnx_spec.hash != torch_spec.hash
    for name in ("contriever", "hyde", "deo", "nsir", "colt"):
        assert "backend" not in make_spec(name).params, name


def test_missing_onnxruntime_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)  # import fails
    with pytest.raises(EncoderError) as err:
        load_encoder(MODEL, "cpu", backend="onnx")
    assert "pip install onnxruntime" in str(err.value) and "\n" not in str(err.value)


def test_dense_retriever_runs_with_the_onnx_backend(onnx_pool: EncoderPool) -> None:
    from retrievers.dense import DenseRetriever, PooledDenseParams

    corpus = Corpus([Document("d1", "Aspirin reduces the risk of heart attack."),
                     Document("d2", "Dogs bark at night."),
                     Document("d3", "Green tea and cholesterol.")])
    queries = [Query("q1", "does aspirin prevent heart attacks"), Query("q2", "barking dogs")]
    ctx = RunContext(seed=0, device="cpu", encoders=onnx_pool, cache_dir=onnx_pool.cache_dir)
    runs = {}
    for backend in ("torch", "onnx"):
        r = DenseRetriever(PooledDenseParams(backend=backend))
        r.index(corpus, ctx)
        runs[backend] = r.search(queries, 3, ctx)
        extra = r.result_extra()["encoder"]
        assert extra.get("backend") == (None if backend == "torch" else backend)
    for q in ("q1", "q2"):
        assert [d for d, _ in runs["torch"][q]] == [d for d, _ in runs["onnx"][q]]
        assert np.allclose([s for _, s in runs["torch"][q]], [s for _, s in runs["onnx"][q]], atol=1e-5)


# -- slow: the real benchmarks -------------------------------------------------------------------


@pytest.mark.slow
def test_dense_ndcg_is_the_same_with_the_onnx_backend(home: Path, shared_data: Path, share_embeddings) -> None:
    from harness.registry import get_benchmark_loader
    from harness.run.runner import Runner, Settings
    from harness.store.results import Store

    share_embeddings(home)  # torch's embeddings of these may be there already (the demo's)
    # the small real benchmarks of both task families: the same check as on SciFact, in a fraction of the time
    names = ("diag/antonym", "diag/negation", "toolbank/numpy", "limit-small")
    def on_disk(name: str) -> bool:
        loader, key = get_benchmark_loader(name)
        return not loader.missing_files(key, shared_data)

    benchmarks = [b for b in names if on_disk(b)]
    if not benchmarks:
        pytest.skip(f"none of {', '.join(names)} under {shared_data}")
    specs = [make_spec("dense"), make_spec("dense", {"backend": "onnx"}, label="dense-onnx")]
    runner = Runner(Settings(home=home, data_dir=shared_data, device="cpu"), Store(home / "results.sqlite"))
    outcomes = runner.run(specs, benchmarks, [0])
    got = {(o.spec.label or o.spec.name, o.benchmark): o.record for o in outcomes}
    assert len(got) == 2 * len(benchmarks) and all(r is not None for r in got.values())
    for b in benchmarks:
        t, o = got["dense", b], got["dense-onnx", b]
        assert t.n_queries == o.n_queries > 0
        assert abs(t.measures["nDCG@10"].mean - o.measures["nDCG@10"].mean) < 1e-4, b
        assert o.extra["retriever"]["encoder"]["backend"] == "onnx"
        assert "backend" not in t.extra["retriever"]["encoder"]
