"""Scoring rankings computed anywhere: ``beyondsim evaluate RUN -b BENCH`` and ``harness.evaluate``
(docs/design/runfiles.md).

:func:`evaluate` takes a run (a run file's path, a :class:`~harness.types.Run`, or a mapping
``{qid: {doc: score}}`` / ``{qid: [(doc, score), …]}``) and a benchmark (a name, a loaded
:class:`~harness.types.Benchmark`, :class:`~harness.types.Judgments`, or pytrec_eval-style qrels
``{qid: {doc: grade}}``), and gives every measure of the benchmark's task (or those asked for) with
its bootstrap interval and per-query values. Every input is ordered as trec_eval orders it (score
descending, ties by document id descending), so the figures are pytrec_eval's on the same run, ties
included. A judged query the run leaves out is an empty ranking (and counted).

:func:`run_file_record` makes a stored result of a run file (``evaluate --store --label L``): the
user's own result, whose figures this harness computed from rankings it did not compute — so its
trust level is *verified* (:mod:`harness.store.trust`), never *reproduced*. Its spec is the file
(``run-file`` with the file's SHA-256 and run tag), its provenance the file, its run tag and, when
an ``ir_metadata`` file is beside it, what that declares (training data; cost, which is unknown
unless declared).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

from .. import __version__ as HARNESS_VERSION
from ..core.errors import UserError
from ..core.leakage import family_key, same_benchmark
from ..core.registry import RetrieverSpec, check_label, load_benchmark
from ..core.types import Benchmark, Corpus, Judgments, Run, as_run
from ..data.readers import default_data_dir
from ..data.runs import RunFile, read_run, trec_order
from ..measures import TASK_DEFAULTS, Evaluation, evaluate as evaluate_measures
from ..measures.stats import BOOTSTRAP_RESAMPLES, bootstrap_cis
from ..store.results import MeasureValue, ResultRecord, result_key
from ..store.trust import RUN_FILE_KEY  # its extra: the file, its hash, tag, format and what was dropped
from . import pools as pooling
from .runner import measures_for

RUN_FILE = "run-file"  # the retriever name of a stored run file's result

METADATA_SUFFIXES = (".ir-metadata.yml", ".ir-metadata.yaml", ".ir_metadata.yml")
MAX_METADATA_BYTES = 256 * 1024
MAX_DECLARED_S = 1e8  # a declared phase time above this (three years) is no measurement


@dataclass
class Scores:
    """What :func:`evaluate` found: each measure's mean, count and interval, the per-query values,
    and what was read (the run file's description, the notes said about it)."""

    benchmark: str
    benchmark_version: str
    measures: dict[str, MeasureValue]
    per_query: dict[str, dict[str, float]]
    n_queries: int
    n_missing: int
    run: Run
    run_file: RunFile | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def means(self) -> dict[str, float | None]:
        return {m: v.mean for m, v in self.measures.items()}

    def to_dict(self) -> dict[str, Any]:
        """The figures as ``--format json`` prints them (an undefined figure is ``null``)."""
        def num(x: float | None) -> float | None:
            return None if x is None or not math.isfinite(x) else x

        return {"benchmark": self.benchmark, "benchmark_version": self.benchmark_version,
                "queries": self.n_queries, "missing": self.n_missing,
                "measures": {m: {"mean": num(v.mean), "n": v.n, "ci_low": num(v.ci_low), "ci_high": num(v.ci_high)}
                             for m, v in self.measures.items()},
                **({"run_file": {"path": self.run_file.path, "sha256": self.run_file.sha256,
                                 "format": self.run_file.format, "tag": self.run_file.tag,
                                 "lines": self.run_file.lines}} if self.run_file else {}),
                "notes": list(self.notes)}


def as_benchmark(target: Any, *, data_dir: Path | None = None, online: bool = False,
                 relevance_threshold: int | None = None) -> Benchmark:
    """The benchmark ``target`` names: a registered name or folder (loaded), a Benchmark, or
    judgments alone (``Judgments`` or qrels ``{qid: {doc: grade}}``: a topical benchmark with no
    corpus, whose document ids are not checked)."""
    if isinstance(target, Benchmark):
        return target
    if isinstance(target, (str, Path)):
        return load_benchmark(str(target), default_data_dir(data_dir), online)
    if isinstance(target, Judgments):
        judgments = target
    elif isinstance(target, Mapping):
        try:
            judgments = Judgments({str(q): {str(d): int(g) for d, g in docs.items()} for q, docs in target.items()})
        except (AttributeError, TypeError, ValueError):
            raise UserError("qrels must be {query id: {document id: integer grade}}") from None
    else:
        raise UserError(f"evaluate: expected a benchmark name, a Benchmark, Judgments or qrels, not {type(target).__name__}")
    return Benchmark("qrels", "", Corpus([]), [], judgments, "topical", TASK_DEFAULTS["topical"],
                     relevance_threshold=relevance_threshold or 1)


def measures_of(bench: Benchmark, measures: Sequence[str] | None) -> list[str]:
    """The measures asked for (each checked against the benchmark; one it cannot support is an
    error), or every measure of the benchmark's defaults and its task's it can support."""
    if not measures:
        return measures_for(bench)
    return [m for m in measures_for(bench, measures) if m in set(map(str, measures))]


def evaluate(run: Any, benchmark: Any, measures: Sequence[str] | None = None, *, data_dir: Path | None = None,
             online: bool = False, skip_unknown: bool = False, pool: "pooling.Pool | str | Path | None" = None,
             bootstrap: int = BOOTSTRAP_RESAMPLES, seed: int = 0,
             relevance_threshold: int | None = None) -> Scores:
    """Score ``run`` on ``benchmark`` (see the module docstring). ``pool``: the pool the run must
    reorder (a document outside it is a :class:`~harness.types.RunError`); ``skip_unknown``: drop
    (and count) a run file's lines whose query or document the benchmark does not have."""
    bench = as_benchmark(benchmark, data_dir=data_dir, online=online, relevance_threshold=relevance_threshold)
    names = measures_of(bench, measures)
    judged = bench.judgments.relevance
    scored = [q.id for q in bench.eval_queries] if bench.queries else list(judged)
    notes: list[str] = []
    rf: RunFile | None = None
    if isinstance(run, (str, Path)):
        rf = read_run(run, queries={q.id for q in bench.queries} if bench.queries else None,
                      documents=bench.corpus if len(bench.corpus) else None, judged=set(scored), skip_unknown=skip_unknown)
        ranked = rf.run
        if rf.skipped_queries:
            notes.append(f"dropped {sum(rf.skipped_queries.values()):,} line(s) of {len(rf.skipped_queries):,} query id(s) "
                         f"the benchmark does not have (--skip-unknown)")
        if rf.skipped_documents:
            notes.append(f"dropped {rf.skipped_documents:,} line(s) naming a document the corpus does not have "
                         "(--skip-unknown)")
        if rf.unjudged_queries:
            notes.append(f"{len(rf.unjudged_queries):,} query id(s) of the file have no judgments: not scored "
                         "(as trec_eval leaves them out)")
    else:
        given = as_run(run, "the run")
        ranked = Run({q: trec_order((str(d), float(s)) for d, s in r) for q, r in given.items() if q in set(scored)})
        ranked.validate(bench.corpus if len(bench.corpus) else None)
    if pool is not None:
        p = pool if isinstance(pool, pooling.Pool) else pooling.read_pool(pool, bench)
        pooling.check_reordering(ranked, p, f"run {rf.path if rf else ''}".strip())
    ev: Evaluation = evaluate_measures(ranked, bench.judgments, names, relevance_threshold=bench.relevance_threshold,
                                       pairs=bench.pairs, query_ids=scored)
    if ev.n_missing:
        notes.append(f"{ev.n_missing:,} of {len(scored):,} judged queries have no ranking in the run: scored as "
                     "empty rankings")
    cis = bootstrap_cis({m: list(ev.per_query.get(m, {}).values()) for m in names}, n_resamples=bootstrap,
                        seed=seed) if bootstrap > 0 else {}
    values = {m: MeasureValue(ev.means[m], ev.counts[m], *cis.get(m, (None, None))) for m in names}
    return Scores(bench.name, bench.version, values, ev.per_query, ev.n_queries, ev.n_missing, ranked, rf, notes)


# -- a run file as a stored result -------------------------------------------------------------------


def metadata_file(path: Path) -> Path | None:
    """The ``ir_metadata`` file beside a run file: ``<stem>.ir-metadata.yml`` (the run's name
    without ``.gz`` / ``.trec`` / ``.txt`` / ``.run``) or ``<file>.ir-metadata.yml``."""
    stem = path.name
    for ext in (".gz", ".trec", ".txt", ".run", ".tsv", ".json"):
        if stem.endswith(ext):
            stem = stem[: -len(ext)]
    for base in dict.fromkeys((stem, path.name)):
        for suffix in METADATA_SUFFIXES:
            p = path.with_name(base + suffix)
            if p.is_file():
                return p
    return None


def read_metadata(path: Path) -> dict[str, Any]:
    """The ir_metadata document at ``path`` (YAML, read safely)."""
    import yaml

    if path.stat().st_size > MAX_METADATA_BYTES:
        raise UserError(f"{path}: an ir_metadata file over {MAX_METADATA_BYTES:,} bytes; not read")
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise UserError(f"{path}: not an ir_metadata YAML document: {' '.join(str(e).split())[:200]}") from None
    if not isinstance(doc, dict):
        raise UserError(f"{path}: an ir_metadata document is a mapping (tag, platform, implementation, method, data, …)")
    return doc


def _jsonable(value: Any) -> Any:
    """A YAML document as JSON keeps it: dates as text, a non-finite number as ``null``."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def _declared_seconds(meta: Mapping[str, Any], where: str) -> dict[str, float]:
    """The cold offline and online seconds an ir_metadata ``resources`` section declares (the
    ``resources.cold`` of ``beyondsim export --format trec``), each checked to be a finite number
    of seconds, ≥ 0 and below :data:`MAX_DECLARED_S`; none when it declares none."""
    cold = (meta.get("resources") or {}).get("cold") if isinstance(meta.get("resources"), Mapping) else None
    if not isinstance(cold, Mapping):
        return {}
    out: dict[str, float] = {}
    for key, phase in (("offline s", "index"), ("online s", "search")):
        v = cold.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not 0 <= v < MAX_DECLARED_S:
            raise UserError(f"{where}: field resources.cold.{key}: {v!r} is not a number of seconds in [0, {MAX_DECLARED_S:g})")
        out[phase] = float(v)
    return out


def _training(meta: Mapping[str, Any]) -> list[dict[str, Any]]:
    data = meta.get("data") if isinstance(meta.get("data"), Mapping) else {}
    entries = data.get("training data") if isinstance(data, Mapping) else None
    entries = [entries] if isinstance(entries, Mapping) else entries if isinstance(entries, list) else []
    return [{"benchmark": str(e.get("name")), "benchmark_version": str(e.get("version") or ""),
             **({"queries": e["queries"]} if isinstance(e.get("queries"), int) else {})}
            for e in entries if isinstance(e, Mapping) and e.get("name")]


def run_file_record(scores: Scores, label: str, pool: "pooling.Pool | None" = None) -> ResultRecord:
    """The stored result of a run file ``scores`` came from (see the module docstring); ``pool``:
    the pool it reranks (checked by :func:`evaluate`), which puts it on that pool's second-stage track."""
    rf = scores.run_file
    if rf is None:
        raise UserError("only a run file can be stored (give its path)")
    label = check_label(label)
    path = Path(rf.path)
    meta_path = metadata_file(path)
    meta = read_metadata(meta_path) if meta_path else {}
    where = str(meta_path)
    declared = _declared_seconds(meta, where) if meta else {}
    training = _training(meta)
    for t in training:  # names compared as the leakage checks compare them (case, slices)
        if same_benchmark(t["benchmark"], scores.benchmark) or (
                family_key(t["benchmark"]) == family_key(scores.benchmark) and ":" not in t["benchmark"]
                and t["benchmark_version"] == scores.benchmark_version):
            raise UserError(f"{where}: field data.training data: the run declares training on {t['benchmark']}, the "
                            "split it is scored on; refusing to store a run that saw its test data")
    spec = RetrieverSpec(RUN_FILE, {"sha256": rf.sha256, "tag": rf.tag}, label)
    if pool is not None:
        spec = spec.on_pool(pool.hash, pool.name)
    depth = max((len(r) for r in scores.run.values()), default=1) or 1
    key = result_key(spec.hash, scores.benchmark_version, 0, depth, HARNESS_VERSION)
    phases = {p: {"wall_s": s, "cpu_s": 0.0, "items": 0} for p, s in declared.items()}
    run_file = {"file": path.name, "sha256": rf.sha256, "format": rf.format, "tag": rf.tag, "lines": rf.lines,
                "skipped_lines": rf.skipped_documents + sum(rf.skipped_queries.values()),
                **({"ir_metadata": path.name if meta_path is None else meta_path.name} if meta_path else {}),
                **({"declared_cost": declared} if declared else {})}
    extra: dict[str, Any] = {RUN_FILE_KEY: run_file, **({pooling.POOL_KEY: pool.ref()} if pool is not None else {})}
    if meta:
        extra["ir_metadata"] = _jsonable({k: meta[k] for k in ("tag", "research goal", "platform", "implementation",
                                                               "method", "data", "resources") if k in meta})
    if training:
        extra["training"] = training[0] if len(training) == 1 else training
    return ResultRecord(
        key=key, retriever=RUN_FILE, label=label, spec_hash=spec.hash, spec=spec.as_dict(),
        benchmark=scores.benchmark, benchmark_version=scores.benchmark_version, seed=0, k=depth,
        harness_version=HARNESS_VERSION, n_queries=scores.n_queries, n_missing=scores.n_missing,
        measures=scores.measures, per_query=scores.per_query, phases=phases, rankings=dict(scores.run),
        provenance={"run_file": path.name, "sha256": rf.sha256, "tag": rf.tag}, extra=extra)
