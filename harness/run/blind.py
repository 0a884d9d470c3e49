"""Blind runs (``beyondsim run --blind``): a retriever computed in a child process inside an
operating-system sandbox that holds no judgment (README, "Guarantees").

Why: code that opens the qrels or queries files (under the data directory it is handed, or any
path it knows) and puts the satisfying documents first gives rankings that nothing checked
afterwards can tell from real ones. A blind run takes the files away instead of looking for the
cheat.

How it runs (:class:`Sandboxed`, the parent side; :func:`child_main`, the child):

* The runner keeps the benchmark. It writes what the retriever may see to a scratch folder as
  JSON (``job.json``): the corpus (ids, titles, texts), the evaluated queries (ids, texts,
  ``meta``), the candidates of a pool it reranks (a ``<first stage>@<depth>`` pool whose first
  stage the runner computed blind too: a pool file is refused), and for a trainable retriever the ``:train``
  split and the ``:dev`` split (training data, with their judgments: a run here hands them to
  ``fit`` too) — never a judgment of the scored split, nor its pairs.
* It starts ``python -m harness.run.blind job.json FD`` under bubblewrap (``bwrap``):
  ``--unshare-all`` (no network: a loopback of its own; its own PID, IPC and UTS namespaces),
  ``--cap-drop ALL``, ``--die-with-parent``, ``--new-session``, a fresh ``/proc``, a minimal
  ``/dev``, a fresh tmpfs ``/tmp``, and a root of its own holding only: the system (``/usr``,
  ``/etc``, …) and the Python installation (its prefixes, site-packages) read-only; of the other
  folders on ``sys.path`` only their modules and regular packages (``*.py``, extension modules,
  folders with ``__init__.py``), of an editable install its mapped packages, and the retriever's
  own package, read-only; the models (``<home>/cache/models``, ``<home>/models``, the Hugging Face
  hub's ``models--*`` folders) read-only; the embedding cache and ONNX exports (``<home>/cache/
  embeddings``, ``<home>/cache/onnx``) read-write, or none (``--blind-cache fresh``: an empty
  one in the sandbox's tmpfs); the scratch folder read-write. The data directory, the home
  (its results store, LLM cache, built diagnostics) and the shipped reference files (the bundle
  carries benchmark content, judgments included) are hidden even where they lie inside a bound
  folder. The environment is a short allowlist (no key, no ``BEYONDSIM_DATA``).
* The child rebuilds a :class:`~harness.core.protocols.RunContext` (seed, device, an encoder pool
  on the same cache, a ledger, progress and log lines sent back) with ``data_dir=None`` and no
  LLM, and runs ``prepare``, ``training_data``, ``fit``, ``index``, ``search`` (``rerank`` on a
  pool). It sends the run back as one JSON line on the pipe ``FD``; only then does the parent
  send (on the child's standard input) the pair documents PairAcc needs, and the child scores
  them (``score``, or a ranking of the whole corpus) — so ``search`` cannot use them. Then the
  phases, counters, reused artefacts, encoder statistics, model facts and ``result_extra``.
  Nothing read back is unpickled: every message is JSON, checked as ``search``'s return is.
* The parent validates, cuts at ``k``, evaluates and stores as in a run here, and records
  ``extra["blind"]`` (:data:`BLIND_KEY`): the sandbox and its version, what the child saw, the
  embedding cache's mode, the child's wall seconds and the overhead (its seconds outside the
  retriever's phases). :mod:`harness.store.trust` gives such a result computed here the level
  *reproduced blind*; an imported result's ``extra["blind"]`` counts for nothing.

What is refused: a retriever that calls an LLM (the embedded server lives in the parent; one line
says so); a machine without a working bubblewrap (one line: what to install) — never a silent run
that is not blind. ``analyse`` is not called (it reads the judgments); ``extra["blind"]["skipped"]``
says so.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Callable, Iterable, Iterator, Mapping, Sequence

from ..core.errors import UserError
from ..core.leakage import TrainingData, check_unseen
from ..core.ledger import Ledger, PhaseTime
from ..core.protocols import (Analysable, DeclaresTrainingData, HasResultExtra, Preparable, Progress, RunContext,
                              Scorer, Trainable)
from ..core.registry import RegistryError, RetrieverSpec, get_retriever_class, instantiate, reference_files
from ..core.types import Benchmark, Candidate, Corpus, Document, Judgments, Pair, Query, RunError, as_run
from ..data.readers import default_home
from ..measures import pair_documents
from ..store.trust import BLIND_KEY

PROTOCOL = 1  # the version of job.json and of the messages
INSTALL_HINT = "--blind needs bubblewrap: apt-get install bubblewrap"
CACHE_MODES = ("shared", "fresh")  # the embedding cache a blind run sees: the home's, or an empty one
SYSTEM_PATHS = ("/usr", "/etc", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# the environment variables a blind child keeps (by name or prefix); everything else is dropped
ENV_KEEP = ("PATH", "LANG", "LANGUAGE", "TZ", "TERM", "PYTHONHASHSEED", "TOKENIZERS_PARALLELISM", "LD_LIBRARY_PATH",
            "SENTENCE_TRANSFORMERS_HOME", "BEYONDSIM_TRACEBACK")
ENV_KEEP_PREFIXES = ("LC_", "OMP_", "MKL_", "OPENBLAS_", "KMP_", "CUDA_", "NVIDIA_", "TORCH_", "PYTORCH_")
# the folders of <home>/cache a blind run with the shared cache reads and writes: embeddings, ONNX
# exports, numba's compiled kernels (read-only in its own package folder, numba would compile them
# again in every run)
SHARED_CACHES = ("embeddings", "onnx", "numba")
ADVANCE_EVERY_S = 0.2  # the child sends a progress advance at most this often per bar


class BlindError(UserError, RuntimeError):
    """A blind run that cannot start, or a retriever that failed inside the sandbox."""


# -- the sandbox ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Sandbox:
    """The tool that builds the sandbox: its executable and its version line."""

    path: str
    version: str  # "bubblewrap 0.8.0"

    def describe(self) -> str:
        return self.version


_SANDBOX: Sandbox | str | None = None  # the sandbox found, or why there is none


def find_sandbox() -> Sandbox:
    """The bubblewrap of this machine (``BEYONDSIM_BWRAP``, else ``bwrap`` on the ``PATH``), checked
    once per process by building an empty sandbox with the namespaces a blind run uses; a
    :class:`BlindError` in one line when it is missing or cannot create them (a container without
    user namespaces). There is no fallback to a run that is not blind."""
    global _SANDBOX
    if _SANDBOX is None:
        got = _probe()
        _SANDBOX = str(got) if isinstance(got, BlindError) else got
    if isinstance(_SANDBOX, str):
        raise BlindError(_SANDBOX)
    return _SANDBOX


def _probe() -> Sandbox | BlindError:
    path = os.environ.get("BEYONDSIM_BWRAP") or shutil.which("bwrap")
    if not path:
        return BlindError(INSTALL_HINT)
    try:
        version = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout.strip()
        probe = subprocess.run([path, "--ro-bind", "/", "/", "--unshare-all", "--cap-drop", "ALL", "--die-with-parent",
                                "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "true"],
                               capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as e:
        return BlindError(f"{INSTALL_HINT} ({path} does not run: {e})")
    if probe.returncode != 0:
        why = " ".join((probe.stderr or probe.stdout or f"exit {probe.returncode}").split())[:200]
        return BlindError(f"--blind: bubblewrap cannot build its sandbox on this machine ({why}); it needs "
                          "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or a container "
                          "that allows them)")
    return Sandbox(path, version or "bubblewrap")


def check_blind(display: str, uses_llm: bool) -> None:
    """Refuse, in one line, what a blind run cannot do: a retriever that calls an LLM."""
    if uses_llm:
        raise BlindError(f"--blind: {display} calls an LLM, whose server runs outside the sandbox; blind runs take "
                         "retrievers without an LLM")


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents


def _existing(paths: Iterable[Path | str | None]) -> list[Path]:
    out = []
    for p in paths:
        if p is None or str(p) == "":
            continue
        try:
            q = Path(p).expanduser().resolve()
        except OSError:
            continue
        if q.exists() and q not in out:
            out.append(q)
    return out


def _importable(entry: Path) -> list[Path]:
    """What Python can import from a folder on ``sys.path`` that is not an installation's: its
    modules and regular packages (a folder without ``__init__.py``, a data file, is left out)."""
    out = []
    try:
        children = sorted(entry.iterdir())
    except OSError:
        return out
    for c in children:
        if c.name.startswith("."):
            continue
        if c.is_file() and c.suffix in (".py", ".so", ".pyd", ".pth"):
            out.append(c)
        elif c.is_dir() and (c / "__init__.py").is_file():
            out.append(c)
    return out


def code_paths(cls: type | None = None) -> tuple[list[Path], list[Path]]:
    """``(installations, extra)``: the folders bound whole (the Python prefixes, site-packages) and
    the modules and packages bound one by one (:func:`_importable` of the other folders on
    ``sys.path``, an editable install's mapped packages, ``cls``'s top-level package or module)."""
    prefixes = _existing({sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix})
    whole = list(prefixes)
    extra: list[Path] = _existing([os.path.realpath(sys.executable)])
    for entry in sys.path:
        if not entry:  # the working directory: never bound whole
            continue
        found = _existing([entry])
        if not found:
            continue
        p = found[0]
        if p.is_file():  # a zip
            extra.append(p)
        elif p.name in ("site-packages", "dist-packages") or any(_inside(p, x) for x in prefixes):
            whole.append(p)
        else:
            extra += _importable(p)
    for finder in sys.meta_path:  # setuptools' editable installs map package names to folders
        mapping = getattr(sys.modules.get(getattr(finder, "__module__", "") or ""), "MAPPING", None)
        if isinstance(mapping, Mapping):
            extra += _existing(str(v) for v in mapping.values())
    if cls is not None:
        top = sys.modules.get(cls.__module__.split(".")[0])
        locations = list(getattr(top, "__path__", None) or []) or [getattr(top, "__file__", None)]
        extra += _existing(locations)
    return whole, extra


def hub_cache() -> Path:
    """The Hugging Face hub cache folder, as huggingface_hub finds it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    xdg = os.environ.get("XDG_CACHE_HOME") or "~/.cache"
    return Path(xdg).expanduser() / "huggingface" / "hub"


@dataclass
class View:
    """What the child sees: the bubblewrap arguments, and the facts recorded with the result."""

    args: list[str]
    hidden: list[str]
    read_only: list[str]
    writable: list[str]


def sandbox_view(*, cls: type | None, home: Path, scratch: Path, device: str, cache: str = "shared",
                 hide: Iterable[Path | None] = ()) -> View:
    """The bubblewrap arguments of a blind child (see the module docstring): a root of its own
    holding the system and the code read-only, the models read-only, the embedding cache
    read-write (``cache="shared"``) or not at all (``"fresh"``), and ``scratch`` read-write;
    ``hide`` (the data directory, the results store) and the home are hidden wherever a bound
    folder holds them."""
    if cache not in CACHE_MODES:
        raise BlindError(f"--blind-cache must be one of {', '.join(CACHE_MODES)}, not {cache!r}")
    home = Path(home).expanduser().resolve()
    args = ["--unshare-all", "--cap-drop", "ALL", "--die-with-parent", "--new-session",
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    for p in SYSTEM_PATHS:
        if os.path.islink(p):
            args += ["--symlink", os.readlink(p), p]
        elif os.path.isdir(p):
            args += ["--ro-bind", p, p]
    try:
        refs = list(reference_files().values())
    except RegistryError:  # a broken plug-in: its files cannot be found, by the child either
        refs = []
    hidden = _existing([*hide, home, default_home(), *refs])
    whole, extra = code_paths(cls)
    bound: list[Path] = []
    for p in sorted(whole, key=lambda q: len(q.parts)) + sorted(extra, key=lambda q: len(q.parts)):
        if any(_inside(p, b) for b in bound) or any(_inside(Path(s), p) for s in ("/proc", "/dev")):
            continue
        if p not in whole and any(_inside(p, h) for h in hidden):  # code kept inside a hidden folder
            continue
        if any(_inside(p, Path(s)) for s in SYSTEM_PATHS if os.path.isdir(s) and not os.path.islink(s)):
            continue  # bound with the system
        bound.append(p)
        args += ["--ro-bind", str(p), str(p)]
    masked = []
    for h in hidden:  # inside a bound folder: an empty folder, an empty file
        if any(_inside(h, b) for b in bound) or any(_inside(h, Path(s)) for s in SYSTEM_PATHS):
            args += ["--tmpfs", str(h)] if h.is_dir() else ["--ro-bind", "/dev/null", str(h)]
            masked.append(str(h))
    read_only: list[str] = []
    from ..models.resolve import split_zip_cache_root

    hub = hub_cache()
    models = [split_zip_cache_root(), home / "cache" / "models", home / "models", default_home() / "nltk_data"]
    if hub.is_dir():
        models += sorted(p for p in hub.iterdir() if p.name.startswith("models--"))
    if os.environ.get("SENTENCE_TRANSFORMERS_HOME"):
        models.append(Path(os.environ["SENTENCE_TRANSFORMERS_HOME"]))
    for m in models:
        m = Path(m).expanduser()
        if m.is_dir():
            args += ["--ro-bind", str(m.resolve()), str(m.absolute())]
            read_only.append(str(m.absolute()))
    writable = []
    if cache == "shared":
        for name in SHARED_CACHES:
            d = home / "cache" / name
            d.mkdir(parents=True, exist_ok=True)
            args += ["--bind", str(d.resolve()), str(d)]
            writable.append(str(d))
    if device.startswith("cuda"):
        args += ["--ro-bind", "/sys", "/sys"]
        for dev in sorted(Path("/dev").glob("nvidia*")):
            args += ["--dev-bind", str(dev), str(dev)]
    args += ["--bind", str(scratch), str(scratch), "--chdir", str(scratch)]
    return View(args, masked, [str(b) for b in bound] + read_only, writable + [str(scratch)])


def child_env(hub: Path, numba: Path) -> dict[str, str]:
    """The child's environment: :data:`ENV_KEEP` and :data:`ENV_KEEP_PREFIXES` of this one, the
    home and hub cache where the parent has them, numba's cache in ``numba``, offline, and the
    non-installation folders of ``sys.path`` (their importable parts are bound) as ``PYTHONPATH``."""
    env = {k: v for k, v in os.environ.items() if k in ENV_KEEP or k.startswith(ENV_KEEP_PREFIXES)}
    paths = [e for e in sys.path if e and os.path.isdir(e) and "site-packages" not in e and "dist-packages" not in e
             and not any(_inside(Path(e).resolve(), Path(p).resolve()) for p in {sys.prefix, sys.base_prefix})]
    env.update({"HOME": "/tmp", "BEYONDSIM_HOME": str(default_home()), "HF_HUB_CACHE": str(hub),
                "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
                "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1", "NUMBA_CACHE_DIR": str(numba)})
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return env


# -- what travels: JSON, never pickle ------------------------------------------------------------


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def corpus_json(corpus: Corpus) -> list[list[str]]:
    return [[d.id, d.title, d.text] for d in corpus]


def corpus_of(rows: Sequence[Sequence[str]]) -> Corpus:
    return Corpus(Document(str(i), str(text), str(title)) for i, title, text in rows)


def queries_json(queries: Sequence[Query]) -> list[list[Any]]:
    return [[q.id, q.text, {k: v for k, v in q.meta.items() if _jsonable(v)}] for q in queries]


def queries_of(rows: Sequence[Sequence[Any]]) -> list[Query]:
    return [Query(str(i), str(text), dict(meta)) for i, text, meta in rows]


def benchmark_json(b: Benchmark, same_corpus: Corpus | None = None) -> dict[str, Any]:
    """A training split (``:train``, ``:dev``) as JSON, its judgments included (those of its own
    queries only); ``same_corpus``: the scored split's corpus, not written again when it is the
    same object."""
    own = {q.id for q in b.queries}
    return {"name": b.name, "version": b.version, "task": b.task, "default_measures": list(b.default_measures),
            "relevance_threshold": b.relevance_threshold, "description": b.description, "source": b.source,
            "license": b.license, "splits": {k: list(v) for k, v in b.splits.items()},
            "corpus": None if b.corpus is same_corpus else corpus_json(b.corpus), "queries": queries_json(b.queries),
            "relevance": {q: dict(r) for q, r in b.judgments.relevance.items() if q in own},
            "violating": {q: sorted(v) for q, v in b.judgments.violating.items() if q in own},
            "pairs": None if b.pairs is None else [[p.q1, p.d1, p.q2, p.d2, p.id] for p in b.pairs],
            "notes": {k: v for k, v in b.notes.items() if _jsonable(v)}}


def benchmark_of(d: Mapping[str, Any], corpus: Corpus) -> Benchmark:
    return Benchmark(name=d["name"], version=d["version"],
                     corpus=corpus if d.get("corpus") is None else corpus_of(d["corpus"]),
                     queries=queries_of(d["queries"]),
                     judgments=Judgments({q: {doc: int(g) for doc, g in r.items()} for q, r in d["relevance"].items()},
                                         {q: frozenset(v) for q, v in d["violating"].items()}),
                     task=d["task"], default_measures=tuple(d["default_measures"]), splits=dict(d["splits"]),
                     pairs=None if d["pairs"] is None else [Pair(*p) for p in d["pairs"]],
                     relevance_threshold=int(d["relevance_threshold"]), description=d["description"],
                     source=d["source"], license=d["license"], notes=dict(d["notes"]))


def run_json(run: Mapping[str, Sequence[tuple[str, float]]]) -> dict[str, list[list[Any]]]:
    return {q: [[d, float(s)] for d, s in r] for q, r in run.items()}


def _score_map(value: Any, where: str) -> dict[str, dict[str, float]]:
    """``{qid: {doc id: score}}`` read back from the child, checked like a ranking."""
    if not isinstance(value, Mapping):
        raise RunError(f"{where} returned {type(value).__name__}; expected {{query_id: {{doc_id: score}}}}")
    out: dict[str, dict[str, float]] = {}
    for q, scores in value.items():
        if not isinstance(q, str) or not isinstance(scores, Mapping):
            raise RunError(f"{where} returned a value for query {q!r} that is not {{doc_id: score}}")
        row = {}
        for d, s in scores.items():
            if not isinstance(d, str) or isinstance(s, bool) or not isinstance(s, (int, float)):
                raise RunError(f"{where}: query {q!r}, document {d!r}: score {s!r} is not a number")
            row[d] = float(s)
        out[q] = row
    return out


# -- the parent side -----------------------------------------------------------------------------


class Sandboxed:
    """A retriever computed blind in a child process: the steps of a run here
    (:meth:`start`, :meth:`retrieve`, :meth:`pair_scores`, :meth:`extra`), each reading the child's
    messages until the one it waits for. A context manager: leaving it ends the child and removes
    the scratch folder."""

    def __init__(self, *, spec: RetrieverSpec, cls: type, bench: Benchmark, queries: Sequence[Query], seed: int, k: int,
                 device: str, home: Path, ledger: Ledger, progress: Progress, log: Callable[[str], None],
                 candidates: Mapping[str, Sequence[tuple[str, float]]] | None = None,
                 train: Benchmark | None = None, validation: Benchmark | None = None,
                 cache: str = "shared", hide: Iterable[Path | None] = ()):
        self.sandbox = find_sandbox()
        self.spec, self.cls, self.bench, self.queries = spec, cls, bench, list(queries)
        self.ledger, self.progress, self.log = ledger, progress, log
        self.cache = cache
        self.train_given = train is not None
        self.training: list[dict[str, Any]] | None = None
        self._sent_pairs = False
        self._tracks: dict[int, tuple[Any, Callable[[int], None]]] = {}
        self._tail: deque[str] = deque(maxlen=12)
        self.scratch = Path(tempfile.mkdtemp(prefix="beyondsim-blind-")).resolve()
        self.proc: subprocess.Popen[bytes] | None = None
        self._messages: IO[bytes] | None = None
        try:
            self._start_child(spec, cls, bench, seed, k, device, Path(home), candidates, train, validation, hide)
        except BaseException:
            self.close()
            raise

    @property
    def where(self) -> str:
        return f"retriever {self.spec.display!r}"

    def _start_child(self, spec: RetrieverSpec, cls: type, bench: Benchmark, seed: int, k: int, device: str,
                     home: Path, candidates: Mapping[str, Sequence[tuple[str, float]]] | None,
                     train: Benchmark | None, validation: Benchmark | None, hide: Iterable[Path | None]) -> None:
        home = home.expanduser().resolve()
        job = {"protocol": PROTOCOL, "cls": f"{cls.__module__}:{cls.__qualname__}",
               "spec": {"name": spec.name, "params": dict(spec.params), "label": spec.label, "pool": spec.pool,
                        "pool_name": spec.pool_name},
               "spec_hash": spec.hash, "seed": seed, "k": k, "device": device, "cache_dir": str(home / "cache"),
               "benchmark": {"name": bench.name, "task": bench.task},
               "corpus": corpus_json(bench.corpus), "queries": queries_json(self.queries),
               "candidates": None if candidates is None else run_json(candidates),
               "train": None if train is None else benchmark_json(train, bench.corpus),
               "validation": None if validation is None else benchmark_json(validation, bench.corpus)}
        job_path = self.scratch / "job.json"
        job_path.write_text(json.dumps(job), encoding="utf-8")
        self.view = sandbox_view(cls=cls, home=home, scratch=self.scratch, device=device, cache=self.cache, hide=hide)
        r, w = os.pipe()
        argv = [self.sandbox.path, *self.view.args, "--", sys.executable, "-m", "harness.run.blind", str(job_path),
                str(w)]
        self.started = time.perf_counter()
        numba = home / "cache" / "numba" if self.cache == "shared" else Path("/tmp/numba")
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                         pass_fds=(w,), env=child_env(hub_cache(), numba))
        except BaseException:
            os.close(r)
            raise
        finally:
            os.close(w)
        self._messages = os.fdopen(r, "rb")
        threading.Thread(target=self._forward_output, daemon=True).start()

    def _forward_output(self) -> None:
        """The child's standard output and error, passed on to this one's standard error (the tail kept
        for an error message)."""
        assert self.proc is not None and self.proc.stdout is not None
        for raw in iter(self.proc.stdout.readline, b""):
            line = raw.decode("utf-8", "replace")
            self._tail.append(line.rstrip("\n"))
            with contextlib.suppress(OSError, ValueError):
                sys.stderr.write(line)
                sys.stderr.flush()

    def _fail(self, what: str) -> BlindError:
        rc = None
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                rc = self.proc.wait(timeout=10)
        tail = " | ".join(t for t in list(self._tail)[-4:] if t.strip())
        return BlindError(f"{self.where} in the blind sandbox: {what}" + (f" (exit code {rc})" if rc is not None else "")
                          + (f"; its last output: {tail[:400]}" if tail else ""))

    def _next(self, kind: str) -> dict[str, Any]:
        """The child's messages, handled (log, progress, training data, errors) until one of ``kind``."""
        assert self._messages is not None
        while True:
            line = self._messages.readline()
            if not line:
                raise self._fail(f"the child ended before it sent its {kind}")
            try:
                msg = json.loads(line)
            except ValueError:
                raise self._fail("the child sent a message that is not JSON") from None
            if not isinstance(msg, dict) or not isinstance(msg.get("t"), str):
                raise self._fail("the child sent a message without a type")
            if msg["t"] == kind:
                return msg
            try:
                self._handle(msg, kind)
            except UserError:  # the child's error, a leak found in what it declares
                raise
            except (TypeError, ValueError, KeyError, AttributeError) as e:
                raise self._fail(f"the child sent a malformed {msg['t']!r} message ({type(e).__name__}: {e})") from None

    def _handle(self, msg: Mapping[str, Any], kind: str) -> None:
        """One message that is not the one awaited: a log line, a progress bar's step, the training
        data (checked), an error (raised)."""
        t = msg["t"]
        if t == "log":
            self.log(str(msg.get("msg", "")))
        elif t == "track":
            cm = self.progress.track(int(msg.get("total", 0)), str(msg.get("desc", "")))
            self._tracks[int(msg["id"])] = (cm, cm.__enter__())
        elif t == "advance" and int(msg.get("id", -1)) in self._tracks:
            self._tracks[int(msg["id"])][1](int(msg.get("n", 1)))
        elif t == "untrack" and int(msg.get("id", -1)) in self._tracks:
            self._tracks.pop(int(msg["id"]))[0].__exit__(None, None, None)
        elif t == "training_data":
            self._check_training(msg.get("data"))
        elif t == "error":
            self._raise(msg)
        else:
            raise self._fail(f"the child sent a message of unknown type {t!r} while the parent waited for {kind}")

    def _raise(self, msg: Mapping[str, Any]) -> None:
        text = f"{msg.get('type', 'Error')}: {msg.get('message', '')}"
        if msg.get("run_error"):
            raise RunError(str(msg.get("message", "")))
        raise BlindError(f"{self.where} failed in the blind sandbox: {' '.join(text.split())[:1000]}")

    def _check_training(self, data: Any) -> None:
        """What the retriever declares it was trained on (``training_data``), checked here against the
        scored benchmark before it indexes, as a run here checks it."""
        if data is None:
            return
        if not isinstance(data, Mapping):
            raise self._fail("training_data came back as something that is not a mapping")
        seen = TrainingData.from_dict(data)
        check_unseen(seen, self.bench, self.spec.display)
        self.training = [{"benchmark": str(s.get("benchmark", "")), "benchmark_version": str(s.get("version", "")),
                          "queries": s.get("queries")} for s in seen.sources]

    # the steps of a run

    def start(self) -> list[dict[str, Any]] | None:
        """``prepare``, ``training_data`` (checked here) and ``fit`` done in the child: the sources its
        model declares it learnt from (the runner adds the ``:train`` split it handed over)."""
        self._next("fitted")
        return self.training

    def retrieve(self) -> Mapping[str, Any]:
        """``index`` and ``search`` (``rerank`` on a pool) done in the child: the ranking it sent,
        as plain data for :func:`harness.types.as_run`."""
        return self._next("run").get("run")  # type: ignore[return-value]

    def pair_scores(self, run: Mapping[str, Sequence[tuple[str, float]]]) -> dict[str, dict[str, float]]:
        """PairAcc's scores, asked of the child once its ranking is in (:meth:`Runner.pair_scores`
        of a run here, with the documents sent only now): for each pair query, its two documents
        scored by ``score``, or read from a ranking of the whole corpus for the queries whose pair
        documents ``run`` (cut at k) does not hold."""
        wanted = pair_documents(self.bench.pairs or ())
        asked = [q.id for q in self.queries if q.id in wanted]
        short = [q for q in asked if not wanted[q] <= {d for d, _ in run.get(q, ())}]
        self._send({"pairs": {q: sorted(wanted[q]) for q in asked}, "short": short})
        got = _score_map(self._next("pair_scores").get("scores"), f"{self.where}: pair scores")
        return {q: {d: s for d, s in got.get(q, {}).items() if d in wanted[q]} for q in got if q in wanted}

    def extra(self, analyse: bool = True) -> dict[str, Any]:
        """What the child reports at the end, merged into this run's ledger (phases, counters, the
        artefacts it reused) and returned as the result's extra (encoder statistics, model facts,
        ``result_extra``, and :data:`BLIND_KEY`). ``analyse`` is never called in the child (it
        reads the judgments): with ``analyse``, the blind record says it was skipped."""
        if not self._sent_pairs:
            self._send({"pairs": None})
        done = self._next("done")
        child_s = time.perf_counter() - self.started
        try:
            return self._merge(done, child_s, analyse)
        except (TypeError, ValueError, AttributeError) as e:
            raise self._fail(f"the child sent a malformed report ({type(e).__name__}: {e})") from None

    def _merge(self, done: Mapping[str, Any], child_s: float, analyse: bool) -> dict[str, Any]:
        led = done.get("ledger") or {}
        for name, p in (led.get("phases") or {}).items():
            self.ledger.phases[str(name)] = PhaseTime(str(name), float(p.get("wall_s", 0.0)), float(p.get("cpu_s", 0.0)),
                                                      int(p.get("items", 0)))
        for name, n in (led.get("counters") or {}).items():
            self.ledger.count(str(name), int(n))
        for phase, rec in (led.get("reused") or {}).items():
            if isinstance(rec, Mapping):
                self.ledger.reused[str(phase)] = dict(rec)
        inside = sum(float(p.get("wall_s", 0.0)) for p in (led.get("phases") or {}).values())
        out: dict[str, Any] = {"encoder_stats": dict(done.get("encoder_stats") or {})}
        if done.get("retriever") is not None:
            out["retriever"] = done["retriever"]
        if done.get("model_facts"):
            out["model_facts"] = list(done["model_facts"])
        out[BLIND_KEY] = {
            "sandbox": self.sandbox.describe(), "network": "none", "data_dir": "hidden",
            "sees": ["corpus", "evaluated queries (ids, texts, meta)"]
                    + (["pool candidates (its first stage computed blind)"] if self.spec.pool else [])
                    + (["train split"] if self.train_given else []),
            "embedding_cache": self.cache, "child_s": round(child_s, 3), "overhead_s": round(max(0.0, child_s - inside), 3),
            **({"skipped": ["analyse (it reads the judgments)"]} if analyse and issubclass(self.cls, Analysable)
               else {}),
        }
        return out

    def _send(self, msg: Mapping[str, Any]) -> None:
        self._sent_pairs = True
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode("utf-8"))
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._fail("the child closed its input") from None

    def close(self) -> None:
        for cm, _ in list(self._tracks.values()):
            with contextlib.suppress(Exception):
                cm.__exit__(None, None, None)
        self._tracks.clear()
        if self.proc is not None:
            with contextlib.suppress(OSError):
                if self.proc.stdin is not None:
                    self.proc.stdin.close()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._messages is not None:
            self._messages.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()

    def __enter__(self) -> "Sandboxed":
        return self

    def __exit__(self, exc_type: Any, *rest: Any) -> None:
        if exc_type is not None:
            self.kill()
        self.close()


# -- the child side ------------------------------------------------------------------------------


class _Channel:
    """The child's messages to the parent: one JSON object per line, from any thread."""

    def __init__(self, fd: int):
        self._out = os.fdopen(fd, "w", encoding="utf-8")
        self._lock = threading.Lock()

    def send(self, t: str, **fields: Any) -> None:
        line = json.dumps({"t": t, **fields})
        with self._lock:
            self._out.write(line + "\n")
            self._out.flush()


class _ChannelProgress:
    """Progress bars drawn by the parent: each bar's advances sent at most every
    :data:`ADVANCE_EVERY_S` seconds."""

    def __init__(self, channel: _Channel):
        self.channel = channel
        self._ids = itertools.count()

    @contextlib.contextmanager
    def track(self, total: int, description: str) -> Iterator[Callable[[int], None]]:
        i = next(self._ids)
        self.channel.send("track", id=i, total=int(total), desc=str(description))
        pending, last = [0], [time.monotonic()]

        def advance(n: int = 1) -> None:
            pending[0] += int(n)
            if time.monotonic() - last[0] >= ADVANCE_EVERY_S:
                self.channel.send("advance", id=i, n=pending[0])
                pending[0], last[0] = 0, time.monotonic()

        try:
            yield advance
        finally:
            if pending[0]:
                self.channel.send("advance", id=i, n=pending[0])
            self.channel.send("untrack", id=i)


class _SeedTorchOnImport:
    """A meta path finder that seeds torch the moment it is first imported: the child seeds what a
    run here seeds (harness.run.runner.seed_everything) without paying torch's import (seconds)
    for a retriever that never uses it."""

    def __init__(self, seed: int):
        self.seed = seed

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name != "torch":
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)
        import importlib.util

        spec = importlib.util.find_spec("torch")
        if spec is not None and spec.loader is not None:
            spec.loader = _Seeding(spec.loader, self.seed)
        return spec


class _Seeding:
    """A loader that runs another and then calls ``manual_seed`` of the module it made."""

    def __init__(self, loader: Any, seed: int):
        self._loader, self._seed = loader, seed

    def create_module(self, spec: Any) -> Any:
        return self._loader.create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loader.exec_module(module)
        module.manual_seed(self._seed)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)


def _seed_everything(seed: int) -> None:
    """The seeds a run here sets (harness.run.runner.seed_everything), set in the child: torch's
    when it is first imported."""
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover
        pass
    if "torch" in sys.modules:
        sys.modules["torch"].manual_seed(seed)
    else:
        sys.meta_path.insert(0, _SeedTorchOnImport(seed))  # type: ignore[arg-type]


def _child_pair_scores(retriever: Any, queries: Sequence[Query], n_docs: int, pairs: Mapping[str, Sequence[str]],
                       short: Sequence[str], ctx: RunContext, where: str) -> dict[str, dict[str, float]]:
    """The pair documents scored in the child, as :meth:`harness.run.runner.Runner.pair_scores`
    scores them in a run here."""
    wanted = {q: set(d) for q, d in pairs.items()}
    asked = [q for q in queries if q.id in wanted]
    if isinstance(retriever, Scorer):
        got = retriever.score(asked, {q.id: sorted(wanted[q.id]) for q in asked}, ctx)
        return {str(q): {str(d): float(s) for d, s in row.items()} for q, row in dict(got).items()}
    asked_short = [q for q in asked if q.id in set(short)]
    full = as_run(retriever.search(asked_short, n_docs, ctx), f"{where}: search") if asked_short else {}
    return {q.id: {d: float(s) for d, s in full.get(q.id, ()) if d in wanted[q.id]} for q in asked_short}


def child_main(argv: Sequence[str]) -> int:
    """``python -m harness.run.blind JOB FD``: the job a parent wrote, computed here (inside the
    sandbox), every message sent on the pipe ``FD``."""
    channel = _Channel(int(argv[1]))
    try:
        _child(json.loads(Path(argv[0]).read_text(encoding="utf-8")), channel)
    except BaseException as e:  # noqa: BLE001 - every failure goes back to the parent as one message
        user = isinstance(e, UserError)
        if not user:
            traceback.print_exc()
        with contextlib.suppress(Exception):
            channel.send("error", type=type(e).__name__, message=str(e), user=user, run_error=isinstance(e, RunError))
        return 1
    return 0


def _child(job: Mapping[str, Any], channel: _Channel) -> None:
    if job.get("protocol") != PROTOCOL:
        raise BlindError(f"job of protocol {job.get('protocol')!r}; this harness speaks {PROTOCOL}")
    from ..models.facts import pool_facts
    from ..models.pool import EncoderPool

    cls = get_retriever_class(job["cls"])
    s = job["spec"]
    spec = RetrieverSpec(s["name"], dict(s["params"]), s["label"], s["pool"], s["pool_name"])
    if spec.hash != job["spec_hash"]:
        raise BlindError(f"the configuration read back in the sandbox ({spec.hash}) is not the one sent "
                         f"({job['spec_hash']})")
    _seed_everything(int(job["seed"]))
    ledger = Ledger()
    progress = _ChannelProgress(channel)

    def log(msg: str) -> None:
        channel.send("log", msg=str(msg))

    cache_dir = Path(job["cache_dir"])
    encoders = EncoderPool(cache_dir, job["device"], progress, warn=lambda m: log(f"warning: {m}"))
    encoders.ledger = ledger
    ctx = RunContext(seed=int(job["seed"]), device=job["device"], ledger=ledger, encoders=encoders, llm=None,
                     progress=progress, cache_dir=cache_dir, benchmark_name=job["benchmark"]["name"],
                     task=job["benchmark"]["task"], data_dir=None, online=False, log=log)
    corpus = corpus_of(job["corpus"])
    queries = queries_of(job["queries"])
    retriever = instantiate(spec, cls)
    where = f"retriever {spec.display!r}"
    if isinstance(retriever, Preparable):
        with ledger.phase("fit"):
            retriever.prepare(ctx)
    if isinstance(retriever, DeclaresTrainingData):
        seen = retriever.training_data(ctx)
        channel.send("training_data", data=None if seen is None else seen.to_dict())
    if isinstance(retriever, Trainable):
        if job.get("train") is None:
            raise BlindError(f"{where} is trainable but no train split was handed over")
        train = benchmark_of(job["train"], corpus)
        ctx.validation = None if job.get("validation") is None else benchmark_of(job["validation"], corpus)
        with ledger.phase("fit", items=len(train.eval_queries)):
            retriever.fit(train, ctx)
    channel.send("fitted")
    candidates = job.get("candidates")
    if candidates is None or hasattr(retriever, "index"):
        with ledger.phase("index", items=len(corpus)):
            retriever.index(corpus, ctx)
    if candidates is None:
        with ledger.phase("search", items=len(queries)):
            run = as_run(retriever.search(queries, int(job["k"]), ctx), f"{where}: search")
    else:
        cands = {q: [Candidate(corpus.get(d), float(sc)) for d, sc in rows] for q, rows in candidates.items()}
        with ledger.phase("search", items=len(queries)):
            run = as_run(retriever.rerank(queries, cands, ctx), f"{where}: rerank")
    channel.send("run", run=run_json(run))
    request = json.loads(sys.stdin.readline() or "{}")
    if request.get("pairs") is not None:
        with ledger.phase("search"):
            scores = _child_pair_scores(retriever, queries, len(corpus), request["pairs"], request.get("short", []),
                                        ctx, where)
        channel.send("pair_scores", scores=scores)
    extra = retriever.result_extra() if isinstance(retriever, HasResultExtra) else None
    facts = pool_facts(encoders)
    d = ledger.to_dict()
    channel.send("done", ledger={"phases": d["phases"], "counters": dict(ledger.counters), "reused": ledger.reused},
                 encoder_stats=dict(encoders.stats), model_facts=facts, retriever=extra)


if __name__ == "__main__":
    sys.exit(child_main(sys.argv[1:]))
