"""``export``, ``import``, ``verify`` and ``breakdown``: results files in and out of the store, checked
against the benchmarks here, and per-group means of the stored per-query measures."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from ..data.readers import default_data_dir
from ..measures import format_value
from ..core.registry import stored_benchmark_name
from ..store.results import store_path
from .console import check_choice, console, fail, home_dir, log_line, open_store, out, warn
from .options import BenchmarkFilterOpt, HomeOpt, RetrieverFilterOpt, data_dir_option


def breakdown(
    benchmark: str = typer.Argument(..., help="Benchmark name (e.g. negconstraint) or folder path, as given to run."),
    by: Optional[str] = typer.Option(None, "--by", help="Query metadata key to group by (default: the first one stored)."),
    measure: list[str] = typer.Option(None, "--measure", "-m", help="Measures to show (default: the benchmark's defaults)."),
    retriever: RetrieverFilterOpt = None,
    fmt: str = typer.Option("table", "--format", "-f", help="table or json."),
    home: HomeOpt = None,
) -> None:
    """Per-group means of stored per-query measures (e.g. NegConstraint by query category)."""
    from ..measures import group_by

    check_choice("--format", fmt, ("table", "json"))
    benchmark = stored_benchmark_name(benchmark)
    with open_store(home) as store:
        infos = {b.version: b for b in store.benchmarks() if b.name == benchmark}
        records = store.results(benchmark=benchmark, retriever=retriever)
        if not records:
            fail(f"no stored results for benchmark {benchmark!r} (run it first)")
        rows: list[dict[str, Any]] = []
        for rec in records:
            info = infos.get(rec.benchmark_version)
            groups_by_key = (info.stats.get("query_groups") if info else None) or {}
            if not groups_by_key:
                fail(f"benchmark {benchmark!r} has no query groups stored (no query metadata to group by)")
            key = by or next(iter(groups_by_key))
            if key not in groups_by_key:
                fail(f"unknown group key {key!r}; stored keys: {', '.join(groups_by_key)}")
            wanted = list(measure) if measure else [m for m in (info.default_measures if info else []) if m in rec.measures]
            table = group_by(store.per_query(rec.id), groups_by_key[key], wanted)  # type: ignore[arg-type]
            for m, cells in table.items():
                for g, gv in cells.items():
                    rows.append({"retriever": rec.label, "seed": rec.seed, "group_key": key, "group": g,
                                 "measure": m, "mean": gv.mean, "n": gv.n})
    if fmt == "json":
        out.print_json(json.dumps(rows))
        return
    measures_shown = list(dict.fromkeys(r["measure"] for r in rows))
    t = Table(title=f"{benchmark} by {rows[0]['group_key'] if rows else by}", title_justify="left")
    for c in ("retriever", "seed", "group", "n", *measures_shown):
        t.add_column(c, justify="left" if c in ("retriever", "group") else "right")
    cells: dict[tuple, dict[str, Any]] = {}
    for r in rows:
        cells.setdefault((r["retriever"], r["seed"], r["group"]), {})[r["measure"]] = r
    for (label, seed_, group), ms in cells.items():
        n = max(v["n"] for v in ms.values())
        t.add_row(label, str(seed_), group, str(n), *[format_value(m, ms[m]["mean"]) if m in ms else "–" for m in measures_shown])
    t.fit_hint = "every measure: `beyondsim breakdown --format json`"  # type: ignore[attr-defined]
    out.print(t)


def export_cmd(
    path: str = typer.Argument("-", help="Output file (jsonl), directory (trec), or - for stdout (jsonl)."),
    fmt: str = typer.Option("jsonl", "--format", "-f", help="jsonl (every result, per-query measures "
                            "included) or trec (one TREC run file per result, for trec_eval/ir_measures, each with its "
                            "run metadata in the ir_metadata format beside it: <run>.ir-metadata.yml)."),
    benchmark: BenchmarkFilterOpt = None,
    retriever: RetrieverFilterOpt = None,
    home: HomeOpt = None,
) -> None:
    """Export stored results: JSON lines (to merge elsewhere with `import`) or TREC run files.
    Every JSON line is checked against the import schema first; a stored value an import would
    refuse stops the export before anything is written."""
    from ..store.exchange import export_jsonl
    from ..record.runfiles import export_trec

    check_choice("--format", fmt, ("jsonl", "trec"))
    if fmt == "trec" and path == "-":
        fail("--format trec writes one file per result: give a directory")
    benchmark = stored_benchmark_name(benchmark) if benchmark else None
    with open_store(home) as store:
        if fmt == "trec":
            n, files = export_trec(store, Path(path), benchmark, retriever)
            console.print(f"exported {n} result(s): wrote {len(files)} file(s) in {path} ({n} TREC run file(s) and "
                          f"{len(files) - n} ir_metadata file(s))", highlight=False, markup=False, soft_wrap=True)
            return
        if path == "-":
            n = export_jsonl(store, sys.stdout, benchmark=benchmark, retriever=retriever)
        else:
            tmp = Path(path).with_name(f".{Path(path).name}.tmp")
            try:
                with open(tmp, "w", encoding="utf-8") as f:
                    n = export_jsonl(store, f, benchmark=benchmark, retriever=retriever)
                os.replace(tmp, path)
            finally:
                tmp.unlink(missing_ok=True)
            # the pools its rerankers' results reorder, beside it, so that `verify` of the file can check them
            from ..record.bundle import write_pools
            from ..run.pools import pools_file

            if write_pools(store, Path(path)):
                console.print(f"with the pools its rerankers reorder: {pools_file(Path(path))}", highlight=False,
                              soft_wrap=True)
    console.print(f"exported {n} result(s)", highlight=False)


def import_cmd(
    path: str = typer.Argument(..., help="JSON lines written by `beyondsim export` (- reads stdin)."),
    skip_mismatched: bool = typer.Option(False, "--skip-mismatched", help="Import the results whose benchmark "
                                         "version checks out and list the others (default: refuse the whole file)."),
    data_dir: Annotated[Optional[Path], data_dir_option(
        "Where to load a benchmark this store does not know yet, to check its version (else BEYONDSIM_DATA, else "
        "../shared/data).")] = None,
    home: HomeOpt = None,
) -> None:
    """Merge results exported elsewhere, with the drill-down content (query texts, judgments,
    top-10 document snippets) the export carries. Every line is checked against the export schema
    first and every problem is listed; each line's benchmark version must match this store's (or,
    for a benchmark the store does not know, the local copy's); a problem refuses the whole file
    before anything is written, a version mismatch unless --skip-mismatched. A benchmark that
    cannot be loaded here is accepted on the results' own benchmark description, with a warning.
    The accepted lines are written in one transaction."""
    from ..store.exchange import (ImportCounts, ImportedContent, ImportedLine, check_versions, import_items,
                                  read_export_file)

    source = "<stdin>" if path == "-" else path
    items = read_export_file(path)
    known: dict[str, set[str]] = {}
    if store_path(home_dir(home)).exists():  # nothing is created before the file is accepted
        with open_store(home) as store:
            for b in store.benchmarks():
                known.setdefault(b.name, set()).add(b.version)
    check = check_versions(items, known, default_data_dir(data_dir),
                           log=log_line)
    for w in check.warnings:
        warn(w)
    n_results = sum(isinstance(it, ImportedLine) for it in items)
    n_contents = len(items) - n_results
    refused_results = n_results - sum(isinstance(it, ImportedLine) for it in check.accepted)
    refused_contents = n_contents - sum(isinstance(it, ImportedContent) for it in check.accepted)
    if check.refused and not skip_mismatched:
        what = " and ".join(x for x in (refused_results and f"{refused_results} of {n_results} result(s)",
                                         refused_contents and f"{refused_contents} of {n_contents} benchmark "
                                         "content line(s)") if x)
        fail(f"refusing to import {source}: the benchmark version of {what} does not check out; nothing was "
             "imported (--skip-mismatched imports the others):\n" + "\n".join(f"  - {r}" for r in check.refused))
    counts = ImportCounts()
    if check.accepted:
        with open_store(home) as store:
            counts = import_items(store, check.accepted, check.local_infos)
    msg = f"imported {counts.results_added} result(s), {counts.results_present} already present"
    if counts.content_lines:
        msg += (f"; drill-down content: queries and judgments of {counts.content_versions} benchmark version(s) and "
                f"{counts.documents_added} document snippet(s) added")
    console.print(msg, highlight=False, soft_wrap=True)
    if check.refused:
        what = " and ".join(x for x in (refused_results and f"{refused_results} mismatched result(s)",
                                         refused_contents and f"{refused_contents} mismatched benchmark content "
                                         "line(s)") if x)
        console.print(f"skipped {what}:\n" + "\n".join(f"  - {r}" for r in check.refused),
                      highlight=False, soft_wrap=True, markup=False)


def _pool_lookup(files: list[Path], export: Optional[Path], home: Optional[Path]):
    """A pool by hash for ``verify``: the pool files given, the pools file beside the export, the store's."""
    from ..run.pools import pool_from_store, pools_file, read_pool, read_pool_lines

    given = {p.hash: p for p in (read_pool(f) for f in files)}
    if export is not None and pools_file(export).is_file():
        given.update({p.hash: p for p in read_pool_lines(pools_file(export))})
    store = open_store(home)

    def lookup(h: str):
        return given.get(h) or pool_from_store(store, h)

    return lookup


def verify_cmd(
    path: str = typer.Argument(..., help="A results file written by `beyondsim export` (.jsonl, or .jsonl.gz; - reads "
                               "stdin)."),
    do_import: bool = typer.Option(False, "--import", help="When every result verifies, store them all as verified, "
                                   "in one transaction (nothing is stored when any fails)."),
    pool: list[Path] = typer.Option(None, "--pool", help="A pool file (`beyondsim pool export`) a reranker's results "
                                    "reorder (repeatable; the store's pools and the pools file beside PATH are read too)."),
    data_dir: Annotated[Optional[Path], data_dir_option(
        "Where the benchmarks are loaded from to verify against (else BEYONDSIM_DATA, else ../shared/data).")] = None,
    home: HomeOpt = None,
) -> None:
    """Recompute every stored measure of a results file from its rankings, against the benchmarks
    as they load here, and check that every judged query is present, that no ranking is deeper than
    the run's k or names an unknown document, and that a trained retriever declares training data
    disjoint from the scored split. Measures the rankings cannot determine (a cutoff deeper than
    the submitted rankings, PairAcc without both pair documents ranked) are listed as not
    recomputable. Exit code 1 when any result fails; with --import nothing is stored then.
    A results repository's CI runs: beyondsim verify <bundle>.jsonl --data-dir <data>"""
    from ..store.exchange import ImportedLine, import_items, plain, read_export_file, shown_benchmark
    from ..record.verify import verify_items

    source = "<stdin>" if path == "-" else path
    items = read_export_file(path)
    n_results = sum(isinstance(it, ImportedLine) for it in items)
    if not n_results:
        fail(f"{source} holds no result line: nothing to verify", 1)
    report = verify_items(items, default_data_dir(data_dir), log=log_line,
                          pools=_pool_lookup(list(pool or ()), Path(path) if path != "-" else None, home))
    t = Table(title=f"verify {source}", title_justify="left")
    for c in ("result", "benchmark", "recomputed", "not recomputable", "status"):
        t.add_column(c, overflow="fold")
    for r in report.lines:
        rec = r.item.record
        t.add_row(f"{plain(rec.label)} (seed {rec.seed}) {plain(rec.key)}", shown_benchmark(rec.benchmark),
                  f"{len(r.recomputed)}: {', '.join(map(plain, r.recomputed))}" if r.recomputed else "0",
                  ", ".join(map(plain, r.not_recomputable)) or "–",
                  Text("verified", style="green") if r.ok else Text(f"FAILED ({len(r.problems)})", style="bold red"))
    out.print(t)
    for r in report.lines:
        for m, why in r.not_recomputable.items():
            out.print(f"{r.what}: not recomputable: {plain(m)}: {why}", soft_wrap=True)
    for p in report.problems:
        out.print(p, soft_wrap=True)
    failed = sum(not r.ok for r in report.lines)
    if failed:
        fail(f"{failed} of {n_results} result(s) in {source} did not verify" + ("; nothing was stored" if do_import
                                                                                  else ""), 1)
    if not do_import:
        console.print(f"all {n_results} result(s) verified", highlight=False, soft_wrap=True)
        return
    with open_store(home) as store:
        known: dict[str, set[str]] = {}
        for b in store.benchmarks():
            known.setdefault(b.name, set()).add(b.version)
        mixed = [f"{it.where}: result {it.record.key} is of {shown_benchmark(it.record.benchmark)} version "
                 f"{plain(it.record.benchmark_version)}, but this store holds version(s) "
                 f"{', '.join(sorted(known[it.record.benchmark]))}" for it in report.verified
                 if it.record.benchmark_version not in known.get(it.record.benchmark, {it.record.benchmark_version})]
        if mixed:
            fail("refusing to import: the store holds other versions of these benchmarks; nothing was stored:\n"
                 + "\n".join(f"  - {m}" for m in mixed), 1)
        counts = import_items(store, [*report.content, *report.verified], report.local_infos)
    console.print(f"all {n_results} result(s) verified; imported {counts.results_added} as verified, "
                  f"{counts.results_present} already present (kept as stored); drill-down content written from the "
                  "benchmarks as loaded here", highlight=False, soft_wrap=True)
