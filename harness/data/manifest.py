"""The data manifest: what each benchmark's files should be (SHA-256, size) and what they hold
(queries, documents, judged and violating pairs, content version).

* :func:`dataset_files` — the files a benchmark reads under the data directory (required files
  plus optional ones that exist; a loader may say exactly which with ``files_in_use``).
* :func:`describe` — one benchmark's status: present/missing, where its files are looked for,
  checksums, counts (from the manifest when the checksums match, or recounted by loading).
* :func:`verify` — compare the files (and, with ``recount``, the loaded counts and version)
  against the expected manifest.
* :func:`make_manifest` — write the manifest of what a data directory holds now.

Manifests are JSON (``{"schema": 1, "benchmarks": {name: {"files": {path: {"sha256", "bytes"}},
"counts": {...}, "version": ...}}}``); installed packages declare theirs through the
``beyondsim.manifests`` entry point group, so a third-party benchmark package ships its own.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .readers import DatasetInfo, MissingDataError
from ..core.registry import benchmark_variants, get_benchmark_loader, manifest_paths

SCHEMA = 1
COUNT_KEYS = ("queries", "judged_queries", "documents", "judged_pairs", "violating_pairs", "pairs")


def file_sha256(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def combined_checksum(files: dict[str, dict[str, Any]]) -> str:
    """One SHA-256 over ``path:sha256`` lines in path order (the benchmark's checksum)."""
    h = hashlib.sha256()
    for rel in sorted(files):
        h.update(f"{rel}:{files[rel]['sha256']}\n".encode())
    return h.hexdigest()


def _rel(path: Path, root: Path) -> str:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return str(path.resolve())


def dataset_files(loader: type, name: str, info: DatasetInfo, data_dir: Path) -> list[Path]:
    """Absolute paths of the files a load of ``name`` reads (those that exist)."""
    in_use = getattr(loader, "files_in_use", None)
    if callable(in_use):
        return [Path(p) for p in in_use(name, data_dir)]
    cands = [*info.files, *info.optional_files]
    return [Path(data_dir) / f for f in cands if (Path(data_dir) / f).is_file()]


def checksum_files(paths: Iterable[Path], data_dir: Path) -> dict[str, dict[str, Any]]:
    return {_rel(p, data_dir): {"sha256": file_sha256(p), "bytes": p.stat().st_size} for p in paths}


def load_expected(paths: Iterable[Path] | None = None) -> dict[str, dict[str, Any]]:
    """Merge the manifests of installed packages (later ones add names, never replace)."""
    merged: dict[str, dict[str, Any]] = {}
    for p in (manifest_paths() if paths is None else paths):
        if not Path(p).is_file():
            continue
        try:
            doc = json.loads(Path(p).read_text(encoding="utf-8"))
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}:{e.lineno}: invalid manifest JSON ({e.msg})") from None
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("benchmarks"), dict):
            raise ValueError(f"{p}: not a schema-{SCHEMA} beyondsim manifest")
        for name, entry in doc["benchmarks"].items():
            merged.setdefault(name, entry)
    return merged


@dataclass
class Status:
    """What ``beyondsim data status`` says about one benchmark."""

    name: str
    task: str
    state: str  # present | missing | modified | unlisted (present, but not in any manifest) | error
    where: str
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    checksum: str = ""
    counts: dict[str, int] = field(default_factory=dict)
    counts_from: str = ""  # manifest | loaded | ""
    version: str = ""
    source: str = ""
    license: str = ""
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def _count(loader: type, name: str, data_dir: Path) -> tuple[dict[str, int], str]:
    bench = loader.load(name, data_dir, online=False)
    stats = bench.stats()
    return {k: int(stats[k]) for k in COUNT_KEYS if k in stats}, bench.version


def describe(name: str, loader: type, data_dir: Path, expected: dict[str, dict[str, Any]], *,
             recount: bool = False) -> Status:
    info = loader.info(name)
    data_dir = Path(data_dir)
    st = Status(name=info.name, task=info.task, state="missing", where=str(data_dir / info.subdir),
                source=info.source, license=info.license)
    missing_fn = getattr(loader, "missing_files", None)
    st.missing = list(missing_fn(name, data_dir)) if callable(missing_fn) else \
        [f for f in info.files if not (data_dir / f).exists()]
    exp = expected.get(info.name)
    if st.missing:
        if exp:
            st.counts, st.counts_from, st.version = dict(exp.get("counts", {})), "manifest", exp.get("version", "")
        return st
    paths = dataset_files(loader, name, info, data_dir)
    if paths:
        st.where = str(Path(os.path.commonpath([str(p.parent) for p in paths])))
    st.files = checksum_files(paths, data_dir)
    st.checksum = combined_checksum(st.files)
    if exp is None:
        st.state = "unlisted"
    else:
        want = exp.get("files", {})
        for rel, meta in want.items():
            got = st.files.get(rel)
            if got is None:
                st.problems.append(f"{rel}: listed in the manifest but not read")
            elif got["sha256"] != meta.get("sha256"):
                st.problems.append(f"{rel}: sha256 {got['sha256'][:12]}… ≠ expected {str(meta.get('sha256'))[:12]}…")
        for rel in st.files:
            if rel not in want:
                st.problems.append(f"{rel}: read but not in the manifest")
        st.state = "modified" if st.problems else "present"
        if not st.problems:
            st.counts, st.counts_from, st.version = dict(exp.get("counts", {})), "manifest", exp.get("version", "")
    if recount:
        try:
            counts, version = _count(loader, name, data_dir)
        except (MissingDataError, ValueError, OSError) as e:
            st.state, st.problems = "error", [*st.problems, f"load failed: {e}"]
            return st
        if exp is not None:
            for k, v in exp.get("counts", {}).items():
                if counts.get(k) != v:
                    st.problems.append(f"count {k}: {counts.get(k)} ≠ expected {v}")
            if exp.get("version") and exp["version"] != version:
                st.problems.append(f"content version {version} ≠ expected {exp['version']}")
            if st.problems and st.state == "present":
                st.state = "modified"
        st.counts, st.counts_from, st.version = counts, "loaded", version
    return st


def statuses(data_dir: Path, names: Iterable[str] | None = None, *, recount: bool = False,
             expected: dict[str, dict[str, Any]] | None = None) -> list[Status]:
    """Status of every registered benchmark (or of ``names``)."""
    expected = load_expected() if expected is None else expected
    rows: list[Status] = []
    if names:
        pairs: list[tuple[str, type | None, str]] = []
        for n in names:
            loader, bname = get_benchmark_loader(n)
            pairs.append((bname, loader, ""))
    else:
        pairs = benchmark_variants()
    for n, loader, err in pairs:
        if loader is None:
            rows.append(Status(name=n, task="?", state="error", where="", problems=[err]))
            continue
        try:
            rows.append(describe(n, loader, data_dir, expected, recount=recount))
        except (ValueError, OSError) as e:
            rows.append(Status(name=n, task="?", state="error", where=str(data_dir), problems=[str(e)]))
    return rows


def make_manifest(data_dir: Path, names: Iterable[str] | None = None) -> dict[str, Any]:
    """The manifest of everything present under ``data_dir`` (each benchmark loaded and counted)."""
    out: dict[str, Any] = {}
    for st in statuses(data_dir, names, recount=True, expected={}):
        if st.state in ("unlisted", "present") and st.counts:
            out[st.name] = {"files": st.files, "counts": st.counts, "version": st.version}
    return {"schema": SCHEMA, "benchmarks": dict(sorted(out.items()))}


def write_json_atomic(path: Path, obj: Any) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(obj, f, indent=1, sort_keys=False, ensure_ascii=False)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
