"""Reference results: every registered method run on every benchmark on disk, shipped with the
project as one compressed export (the *bundle*), so a board shows the whole field before anyone has
recomputed it.

* :func:`harness.record.matrix.load_plan` reads the plan (a TOML file, found through the
  ``beyondsim.reference`` entry point group): which configurations run, with which seeds, on
  which benchmarks, and on what slice where the full set is too slow on a CPU (with the reason,
  shown with the results);
* ``beyondsim reference build`` runs the plan (:func:`jobs`, :func:`build`) into a results store
  of its own — resumable like every run: a finished result is kept, so ``--only`` chunks and
  interrupted builds add up;
* :func:`bundle_rows` gives the reproduction matrix the bundle's own figures, as its rows of kind
  ``reference`` (:mod:`harness.record.reproduce`);
* :func:`write_bundle` exports that store as gzip-compressed JSON lines with rankings cut to the
  top :data:`BUNDLE_DEPTH` (per-query measures, spec, provenance, environment and ledger kept);
* :func:`ensure_imported` brings a bundle into a user's store once per bundle: every result is
  verified against the benchmark here where it can be (:mod:`harness.record.verify`), marked with the
  bundle id (:mod:`harness.store.trust`), and the results of an older bundle are replaced. The bundle's
  results go to the store's imported slot: a result the user computed here under the same key is
  never touched (and is compared with the bundle's figures), and a damaged bundle is one
  :class:`harness.store.exchange.ExchangeError` line naming the file.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import gzip
import io
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Sequence, TextIO

from ..core.registry import RegistryError, RetrieverSpec, make_spec
from ..core.types import slice_name, split_slice
from ..measures import parse_measure
from ..models.embedding_cache import sha256_hex
from ..store.results import IMPORTED, ResultRecord, Store
from ..store.trust import ORIGIN_KEY, is_reference, origin
from .matrix import BUNDLE_DEPTH, REFERENCE, Plan, PlanConfig, PlanError, Row, check_unique
from .matrix import load_plan as load_plan  # the bundle's recipe; its model is with the matrix's

if TYPE_CHECKING:
    from ..core.protocols import Progress
    from ..run.runner import Settings

META_KEY = "reference_bundle"
TOLERANCE = 1e-9


@dataclass
class Job:
    """One (configuration, benchmarks, seeds) unit of the build."""

    config: PlanConfig
    benchmarks: list[str]
    skipped: list[str] = field(default_factory=list)  # not on disk


def jobs(plan: Plan, suites: Mapping[str, Mapping[str, Any]], on_disk: Callable[[str], bool],
         only: str | None = None) -> list[Job]:
    """The plan as jobs, each configuration's benchmarks resolved (its own list, else its suites',
    else the plan's) and split into those on disk and those skipped; ``only`` (an fnmatch pattern)
    keeps the configurations whose label matches (a configuration without a label is labelled by
    its retriever), or the benchmarks that match; ``LABEL@BENCHMARK`` keeps the benchmarks that
    match the second pattern of the configurations that match the first."""
    out = []
    for c in plan.config:
        names: list[str] = list(c.benchmarks)
        if not names:
            for s in c.suites or plan.suites:
                if s not in suites:
                    raise PlanError(f"configuration {c.display!r}: unknown suite {s!r}")
                names += [b for b in suites[s].get("benchmarks", []) if b not in names]
        if only and fnmatch.fnmatch(c.display, only):  # (a label may hold "@": a reranker's pool, "mmr [bm25@100]")
            pass
        elif only and "@" in only:  # LABEL@BENCHMARK: both patterns must match
            label, bench = only.rsplit("@", 1)
            names = [b for b in names if fnmatch.fnmatch(b, bench)] if fnmatch.fnmatch(c.display, label) else []
            if not names:
                continue
        elif only and not fnmatch.fnmatch(c.display, only):
            names = [b for b in names if fnmatch.fnmatch(b, only)]
            if not names:
                continue
        present = [b for b in names if on_disk(b)]
        out.append(Job(c, present, [b for b in names if b not in present]))
    return out


def pool_jobs(plan: Plan, suites: Mapping[str, Mapping[str, Any]], on_disk: Callable[[str], bool],
              only: str | None = None) -> list[tuple[str, list[str]]]:
    """The plan's reference pools as ``(pool name, benchmarks on disk)``, each pool's benchmarks
    its own list, else its suites' (``only``: the pools whose name matches, or the benchmarks)."""
    out = []
    for p in plan.pool:
        names: list[str] = list(p.benchmarks)
        for s in ([] if names else p.suites or plan.suites):
            if s not in suites:
                raise PlanError(f"pool {p.name!r}: unknown suite {s!r}")
            names += [b for b in suites[s].get("benchmarks", []) if b not in names]
        if only and not fnmatch.fnmatch(p.name, only):  # (a configuration's pool is made when it first runs)
            names = [b for b in names if fnmatch.fnmatch(b, only)]
        out.append((p.name, [b for b in names if on_disk(b)]))
    return [(n, bs) for n, bs in out if bs]


def job_specs(todo: Sequence[Job]) -> list[RetrieverSpec]:
    """Each job's configuration as a spec (labelled when its label is not its retriever's name);
    one the registry cannot make is a :class:`PlanError`."""
    out = []
    for j in todo:
        c = j.config
        try:
            spec = make_spec(c.retriever, c.params, label=c.label if c.label != c.retriever else "")
        except (RegistryError, ValueError) as e:
            raise PlanError(f"reference plan: {e}") from None
        out.append(dataclasses.replace(spec, pool_name=c.pool) if c.pool else spec)
    return out


def build(todo: Sequence[Job], specs: Sequence[RetrieverSpec], settings: Settings, store: Store, *,
          progress: Progress | None = None, log: Callable[[str], None] = print,
          pools: Sequence[tuple[str, list[str]]] = ()) -> str:
    """Compute the reference ``pools`` (:func:`pool_jobs`: each pool, its first stage's result and
    its reference rows on each of its benchmarks), then run each job's configuration (``specs``,
    :func:`job_specs`) on its benchmarks on disk with its seeds, on its slice (``max_queries``),
    on its pool (``pool``), into ``store``: resumable, a finished result is kept. Why the build
    stopped early (the runner's budget), or ``""``."""
    from ..run.runner import Runner

    if pools:
        with Runner(settings, store, progress, log=log) as runner:
            for name, benchmarks in pools:
                for b in benchmarks:
                    bench, _ = runner.load_benchmark(b)
                    pool = runner.pool_for(bench, name)
                    log(f"pool {name} on {b}: {pool.hash}")

    for job, spec in zip(todo, specs):
        if not job.benchmarks:
            continue
        pooled = dataclasses.replace(settings, max_queries=job.config.max_queries, pool=job.config.pool or None)
        with Runner(pooled, store, progress, log=log) as runner:
            runner.run([dataclasses.replace(spec, pool_name="")], job.benchmarks, list(job.config.seeds))
            if runner.budget_stop:
                return runner.budget_stop
    return ""


def bundle_id(path: Path) -> str:
    """The first 16 hex digits of the bundle file's SHA-256: results imported from it carry it."""
    return sha256_hex(path)[:16]


NOTE_KEY = "reference"  # extra["reference"] = {"configuration": label, "note": why} of a bundled result


def write_bundle(store: Store, path: Path, *, depth: int = BUNDLE_DEPTH, plan: Plan | None = None) -> int:
    """Export ``store`` to ``path`` as gzip-compressed JSON lines, rankings cut to ``depth``
    (written to a temporary file and renamed, so a reader never sees half a bundle). The gzip
    header carries no time stamp, so the same results give the same bytes. With ``plan``, each
    result of a configuration with a note carries it (``extra["reference"]``), so the pages say
    why a row is a slice or differs from the paper."""
    from ..store.exchange import export_jsonl

    def annotate(rec: ResultRecord) -> None:
        note = _reference_note(plan, rec.label, rec.benchmark)
        if note:
            rec.extra = {**rec.extra, NOTE_KEY: note}

    with _bundle_writer(Path(path)) as text:
        n = export_jsonl(store, text, depth=depth, annotate=annotate)
    write_pools(store, Path(path))
    return n


def write_pools(store: Store, bundle: Path) -> int:
    """The pools the store's rerankers ranked (and their reference rows name), beside the bundle
    (:func:`harness.run.pools.pools_file`); a bundle without rerankers gets no pools file."""
    from ..run.pools import pool_from_store, pools_file, write_pool_lines

    hashes = {str(r.spec.get("pool")) for r in store.results() if isinstance(r.spec, Mapping) and r.spec.get("pool")}
    pools = [p for p in (pool_from_store(store, h) for h in sorted(hashes)) if p is not None]
    target = pools_file(bundle)
    if not pools:
        return 0
    return write_pool_lines(pools, target)


def import_pools(store: Store, bundle: Path, benches: Any, log: Callable[[str], None] = lambda m: None) -> int:
    """The pools beside a bundle into ``store`` (each checked by :func:`harness.run.pools.read_pool_lines`),
    their figures and ceiling computed here from the benchmark where it loads with their version (a
    pool of a benchmark that is not here is kept without them); how many were new."""
    from ..run.pools import describe, pools_file, read_pool_lines
    from ..run.runner import measures_for

    path = pools_file(bundle)
    if not path.is_file():
        return 0
    added = 0
    for pool in read_pool_lines(path):
        bench = benches.get(pool.benchmark)
        if not isinstance(bench, str) and bench.version == pool.benchmark_version:
            pool.manifest = describe(pool, bench, measures_for(bench))
        else:
            log(f"pool {pool.name} of {pool.benchmark}: the benchmark is not here at version {pool.benchmark_version}; "
                "kept without its figures")
        added += store.save_pool(pool.manifest, pool.rankings)
    return added


@contextlib.contextmanager
def _bundle_writer(path: Path) -> Iterator[TextIO]:
    """UTF-8 text into a gzip file at ``path``, written to a temporary file and renamed when the
    block ends without an error (a reader never sees half a bundle); no time stamp in the gzip
    header, so the same lines give the same bytes."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=9, mtime=0) as gz, \
                io.TextIOWrapper(gz, encoding="utf-8", newline="\n") as text:
            yield text
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _read_lines(path: Path) -> list[dict[str, Any]]:
    from ..store.exchange import open_export

    with open_export(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def add_to_bundle(store: Store, path: Path, *, depth: int = BUNDLE_DEPTH, plan: Plan | None = None) -> tuple[int, int]:
    """Add the results of ``store`` (a build store holding part of the plan) to the bundle at
    ``path``, as :func:`write_bundle` would write them: a result whose key the bundle holds is
    replaced (a rebuild), the others are added after the bundle's; each benchmark's content lines
    (the ranked documents, queries and judgments a reader needs) gain what the new results rank.
    With ``plan``, every result's note (new or held) is its configuration's in that plan.
    Written to a temporary file and renamed. Returns (added, replaced)."""
    from ..store.exchange import CONTENT_KIND

    path = Path(path)
    old = _read_lines(path)
    fresh_path = path.with_name(f".{path.name}.new")
    from ..run.pools import pools_file, read_pool_lines, write_pool_lines

    try:
        write_bundle(store, fresh_path, depth=depth, plan=plan)
        new = _read_lines(fresh_path)
        fresh_pools = read_pool_lines(pools_file(fresh_path)) if pools_file(fresh_path).is_file() else []
    finally:
        fresh_path.unlink(missing_ok=True)
        pools_file(fresh_path).unlink(missing_ok=True)
    if fresh_pools:  # the pools file gains the new pools (one of the same hash is the same pool)
        held = read_pool_lines(pools_file(path)) if pools_file(path).is_file() else []
        have = {p.hash for p in held}
        write_pool_lines(held + [p for p in fresh_pools if p.hash not in have], pools_file(path))
    fresh = {d["key"]: d for d in new if "key" in d}
    content = {(d["benchmark"], d["benchmark_version"]): d for d in old if d.get("kind") == CONTENT_KIND}
    lines = [fresh.get(d["key"], d) if "key" in d else d for d in old]
    replaced = sum(1 for d in old if d.get("key") in fresh)
    held = {d["key"] for d in old if "key" in d}
    added = [d for k, d in fresh.items() if k not in held]
    for d in new:
        if d.get("kind") != CONTENT_KIND:
            continue
        have = content.get((d["benchmark"], d["benchmark_version"]))
        if have is None:
            content[(d["benchmark"], d["benchmark_version"])] = d
            lines.append(d)
            continue
        for name in ("documents", "queries", "qrels"):
            seen = {json.dumps(x, sort_keys=True) for x in have.get(name, [])}
            have[name] = have.get(name, []) + [x for x in d.get(name, []) if json.dumps(x, sort_keys=True) not in seen]
        if "documents" in have:
            have["documents"].sort(key=lambda x: x["docid"])
    lines += added
    if plan is not None:  # every result's note as the plan gives it now (a note is words, never a figure)
        for d in lines:
            if "key" in d and isinstance(d.get("extra"), dict):
                d["extra"].pop(NOTE_KEY, None)
                note = _reference_note(plan, str(d.get("label", "")), str(d.get("benchmark", "")))
                if note:
                    d["extra"][NOTE_KEY] = note
    with _bundle_writer(path) as text:
        text.writelines(json.dumps(d, sort_keys=True, allow_nan=False) + "\n" for d in lines)
    return len(added), replaced


@dataclass
class ImportReport:
    bundle: str
    added: int = 0
    present: int = 0
    replaced_old: int = 0
    verified: int = 0
    reported: int = 0
    refused: list[str] = field(default_factory=list)  # lines of another benchmark version: not imported
    unverified: list[str] = field(default_factory=list)  # why a result came in as reported
    differences: list[str] = field(default_factory=list)  # the user's own results that differ from the bundle's
    skipped: bool = False  # already imported


def _differences(mine: ResultRecord, theirs: ResultRecord) -> list[str]:
    out = []
    for m, v in theirs.measures.items():
        mv = mine.measures.get(m)
        if mv is None or v.mean is None or mv.mean is None:
            continue
        if abs(mv.mean - v.mean) > max(TOLERANCE, 1e-6 * abs(v.mean)):
            out.append(f"{m} {mv.mean:.4f} here, {v.mean:.4f} in the reference")
    return out


def ensure_imported(store: Store, path: Path, data_dir: Path, *, log: Callable[[str], None] = lambda m: None,
                    force: bool = False) -> ImportReport:
    """Import the bundle at ``path`` into ``store`` unless this bundle is there already: results of
    another bundle are removed first; each result is checked against its benchmark here
    (version, then its measures recomputed from its rankings, :func:`harness.record.verify.verify_items`)
    and marked with the bundle id; a key the store holds already is kept (a result computed here
    stays), and its figures are compared with the bundle's (:attr:`ImportReport.differences`)."""
    from ..store.exchange import LocalBenchmarks, check_versions, import_items, read_export_file
    from ..core.registry import RegistryError, get_retriever_class
    from .verify import verify_items

    bid = bundle_id(path)
    report = ImportReport(bid)
    if store.get_meta(META_KEY) == bid and not force:
        report.skipped = True
        return report
    old = [r for r in store.results() if is_reference(r.extra) and origin(r.extra).get("reference") != bid]
    if old:
        with store.transaction():
            for r in old:
                store.delete(r.key, IMPORTED)
        report.replaced_old = len(old)
    items = read_export_file(str(path))
    known: dict[str, set[str]] = {}
    for b in store.benchmarks():
        known.setdefault(b.name, set()).add(b.version)
    benches = LocalBenchmarks(data_dir, log)
    check = check_versions(items, known, data_dir, log=log, benches=benches)
    report.refused = list(check.refused)
    keep = check.accepted
    import_pools(store, path, benches, log)
    # a result whose measures do not recompute here (or whose benchmark is not here), or of a
    # retriever that is not installed here, comes in unverified, so it shows as "reported", with
    # the reason among the warnings
    from ..run.pools import POOL_REFERENCE_NAMES, pool_from_store

    # each pool read back once: every reranker on it is checked against the same object
    stored_pools: dict[str, Any] = {}

    def pool(h: str) -> Any:
        if h not in stored_pools:
            stored_pools[h] = pool_from_store(store, h)
        return stored_pools[h]

    verification = verify_items(keep, data_dir, log=log, benches=benches, pools=pool)
    report.unverified = [p for p in verification.problems]
    for line in verification.lines:
        if line.item.record.retriever in POOL_REFERENCE_NAMES:
            continue  # a pool's reference row: computed by the harness from the pool, no retriever to install
        try:
            get_retriever_class(line.item.record.retriever)
        except (RegistryError, ImportError):
            if line.item.verified_here:
                line.item.verified_here = False
                report.unverified.append(f"{line.what}: retriever {line.item.record.retriever!r} is not installed "
                                         "here, so no reference result of it is taken as checked")
    for it in keep:
        rec = getattr(it, "record", None)
        if rec is None:
            continue
        mine = store.get(rec.key)
        if mine is not None and origin(mine.extra) is None:
            diff = _differences(mine, rec)
            if diff:
                report.differences.append(f"{mine.label} on {mine.benchmark} (seed {mine.seed}): " + "; ".join(diff))
    present = {it.record.key for it in keep
               if getattr(it, "record", None) is not None and store.has(it.record.key, IMPORTED)}
    counts = import_items(store, keep, check.local_infos, origin={"reference": bid})
    report.added, report.present = counts.results_added, counts.results_present
    for it in keep:
        rec = getattr(it, "record", None)
        if rec is None or rec.key in present:
            continue
        if isinstance((rec.extra.get(ORIGIN_KEY) or {}).get("verified"), dict):
            report.verified += 1
        else:
            report.reported += 1
    store.set_meta(META_KEY, bid)
    return report


def reference_filter(include: bool) -> Callable[[ResultRecord], bool] | None:
    """The ``include`` argument of :func:`reports.compare.compare`: ``None`` keeps everything, else
    a predicate that leaves the shipped reference results out."""
    return None if include else (lambda r: not is_reference(r.extra))


def bundled(path: Path) -> set[tuple[str, str, int]]:
    """(label, benchmark, seed) of every result line of the bundle at ``path`` (empty when there is none)."""
    if not Path(path).exists():
        return set()
    return {(d["label"], d["benchmark"], int(d["seed"])) for d in _read_lines(path) if "key" in d}


def summary(store: Store, plan: Plan, jobs_: Sequence[Job],
            bundle: set[tuple[str, str, int]] | None = None) -> list[dict[str, Any]]:
    """Per configuration of the plan: how many of its (benchmark, seed) results the store has and,
    with ``bundle`` (:func:`bundled`), how many the bundle has (``in_bundle``; ``None`` without)."""
    have: dict[tuple[str, str], set[int]] = {}
    for r in store.results():
        have.setdefault((r.label, r.benchmark), set()).add(r.seed)
    out = []
    for j in jobs_:
        c = j.config
        want = [(b if c.max_queries is None else slice_name(b, c.max_queries), s)
                for b in j.benchmarks for s in c.seeds]
        done = sum(1 for b, s in want if s in have.get((c.display, b), set()))
        in_bundle = None if bundle is None else sum(1 for b, s in want if (c.display, b, s) in bundle)
        out.append({"label": c.display, "retriever": c.retriever, "done": done, "wanted": len(want),
                    "in_bundle": in_bundle, "skipped": j.skipped, "note": c.note})
    return out


def bundle_rows(plan_path: str | Path, bundle_path: str | Path) -> list[Row]:
    """The rows the bundle's own figures give (kind ``reference``; rows numbered from 1): each result
    of the bundle with the plan's matrix seed, of a configuration of the plan (matched by its label),
    gives one row per measure the plan's ``matrix.measures`` names for its benchmark (a slice
    ``nevir[:25]`` is its benchmark's), expected = the bundle's figure (8 decimals), the
    configuration's tolerance (``FVR@k``: k times it where the configuration says ``scale_fvr``)
    and reason, quick when the configuration is and the benchmark is among
    ``matrix.quick_benchmarks``. Rows follow the plan's configuration order, then the bundle's
    order. A result of a configuration the plan lacks is left out."""
    from ..store.exchange import read_export_file

    plan = load_plan(Path(plan_path))
    records = [it.record for it in read_export_file(str(bundle_path)) if getattr(it, "record", None) is not None]
    source = f"reference bundle {bundle_id(Path(bundle_path))}"
    specs = [config_spec(c) for c in plan.config]
    matched: list[tuple[int, ResultRecord]] = []
    for rec in records:
        i = _config_index(plan, rec.label, rec.benchmark, rec.spec, specs) if rec.seed == plan.matrix.seed else None
        if i is not None:
            matched.append((i, rec))
    matched.sort(key=lambda t: t[0])  # the plan's configuration order, then the bundle's (a stable sort)
    rows: list[Row] = []
    for i, rec in matched:
        c, spec = plan.config[i], specs[i]
        whole = split_slice(rec.benchmark)[0]
        for m in plan.matrix.measures.get(whole, plan.matrix.default_measures):
            mv = rec.measures.get(m)
            if mv is None or mv.mean is None or not math.isfinite(mv.mean):
                continue
            scale = (parse_measure(m).k or 1) if c.scale_fvr and m.startswith("FVR@") else 1
            rows.append(Row(index=len(rows) + 1, spec=spec, benchmark=rec.benchmark, measure=m,
                            expected=round(float(mv.mean), 8), tolerance=c.tolerance * scale,
                            kind=REFERENCE, source=source, where=f"{c.display} on {rec.benchmark}, {m}",
                            reason=(f"the bundle's figure (reference plan configuration {c.display!r}, seed "
                                    f"{rec.seed}); tolerance: {c.reason or 'none given'}"
                                    + (f"; FVR runs from 1 to {scale + 1}, so {scale} times that" if scale > 1 else "")),
                            quick=c.quick and whole in plan.matrix.quick_benchmarks, seed=rec.seed))
    check_unique(rows, str(bundle_path))
    return rows


def config_spec(c: PlanConfig) -> RetrieverSpec:
    """The retriever spec a plan configuration runs (its pool named)."""
    return dataclasses.replace(make_spec(c.retriever, c.params, label=c.label), pool_name=c.pool)


def _config_index(plan: Plan, label: str, benchmark: str, stored: Mapping[str, Any] | None = None,
                  specs: Sequence[RetrieverSpec] | None = None) -> int | None:
    base, n = split_slice(benchmark)
    for k, c in enumerate(plan.config):
        if c.display != label or c.max_queries != n or (c.benchmarks and base not in c.benchmarks):
            continue
        if stored is None or specs is None or _same_configuration(stored, specs[k]):
            return k
    return None


def config_of(plan: Plan, label: str, benchmark: str) -> PlanConfig | None:
    """The configuration of ``plan`` a result of ``label`` on ``benchmark`` comes from: the first of
    that label whose slice is the benchmark name's (``nevir[:25]``: ``max_queries = 25``; no slice:
    none) and whose benchmarks, where it lists them, hold it. Several configurations share a label
    when one runs a slice of the benchmarks another runs whole (DEO on the full sets and on their
    first 25 queries), each with its own note and tolerance."""
    i = _config_index(plan, label, benchmark)
    return None if i is None else plan.config[i]


def _reference_note(plan: Plan | None, label: str, benchmark: str) -> dict[str, str] | None:
    """``extra["reference"]`` of a bundled result: its configuration's label and note, or None."""
    c = config_of(plan, label, benchmark) if plan is not None else None
    return {"configuration": label, "note": c.note} if c is not None and c.note else None


def _same_configuration(stored: Mapping[str, Any], spec: RetrieverSpec) -> bool:
    """Whether a bundled result's spec (``{"retriever", "params"}``) is the plan configuration's:
    the same retriever, and the same value of every parameter the result records (a parameter
    added to the retriever since, at its default, does not make it another configuration)."""
    params = stored.get("params") or {}
    if bool(stored.get("pool")) != bool(spec.pool_name):  # a reranker's configuration names its pool
        return False
    return stored.get("retriever") == spec.name and all(
        json.dumps(v, sort_keys=True, default=str) == json.dumps(spec.params.get(k), sort_keys=True, default=str)
        for k, v in params.items())
