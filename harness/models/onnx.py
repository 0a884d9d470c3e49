"""The ONNX Runtime encoder backends (docs/design/encoders.md#backends-torch-onnx-runtime-fp32-and-int8).

Backends (:data:`BACKENDS`): ``torch`` runs the model as sentence-transformers loads it; ``onnx``
exports its transformer once with ``torch.onnx.export`` (kept under ``<cache>/onnx/<fingerprint>/``
with its SHA-256 beside it) and runs it with ONNX Runtime on the CPU, the model's own pooling and
normalisation after it; ``onnx-int8`` quantises that export's weights to int8, a different model.
A backend other than torch is part of the embeddings' cache key (:mod:`harness.models.pool`, which
loads the model and hands it to :func:`load_onnx_encoder`).
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import tempfile
import threading
import warnings
import weakref
from pathlib import Path
from typing import Any, Callable

from .embedding_cache import sha256_hex, warn_stderr
from .resolve import EncoderError, one_line
from ..core.files import exclusive_lock

BACKENDS = ("torch", "onnx", "onnx-int8")
"""How an encoder is run. ``torch``: the sentence-transformers model as loaded. ``onnx``: its
transformer (the first module) exported to ONNX and run by ONNX Runtime on the CPU, in float32 (the
same embeddings to rounding). ``onnx-int8``: that export with its weights quantised to int8
(dynamic quantisation): a different model, whose embeddings differ measurably."""
DEFAULT_BACKEND = "torch"
ONNX_VARIANTS = {"onnx": "fp32", "onnx-int8": "int8-per-channel"}
"""backend → the name of its exported file (``<cache>/onnx/<fingerprint>/<variant>.onnx``), which
names the recipe too: it is also in the embeddings' cache key (:func:`harness.models.pool._backend_field`), so a changed
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
    with exclusive_lock(path.with_name(f".{path.name}.lock")):
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
