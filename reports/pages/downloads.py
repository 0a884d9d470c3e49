"""The data files beside the tables: the rows of a benchmark's results table and of a suite's
overview table with their 95% CIs and the benchmarks a figure averages, and each result's per-query
values (``data/<retriever>/<benchmark>-seed<N>-queries.csv.gz|json.gz``, gzip-compressed: they are
most of a board's bytes), linked from its drill-down, its retriever page and its benchmark page.
Each file holds the same numbers as the page, unrounded: a value is written as the shortest decimal
that reads back as the same double, so a parsed file equals the store bit for bit."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from harness.cost.tables import to_csv
from harness.store.results import ResultRecord

from ..compare import BenchmarkComparison, ConfigGroup, SuiteComparison
from ..ranking import _prefer
from . import rowfacts
from .page import Site

CI_RESAMPLES = 2000
GZIP_LEVEL = 6  # gzip's own default: within a few per cent of its best on these files, several times faster
QUERY_VALUES = ("every per-query value the store holds, unrounded: the shortest decimal that reads back as the "
                "same IEEE 754 double (empty in the CSV, null in the JSON: no value for that query)")


def suite_groups(suite: SuiteComparison, label: str) -> dict[str, ConfigGroup]:
    """Per benchmark of ``suite``, the group of ``label`` its table shows (the shown version, else the
    newest: as :func:`reports.ranking.suite_comparison` picks it)."""
    out: dict[str, ConfigGroup] = {}
    for s in suite.benchmarks:
        shown = s.info.version if s.info is not None else None
        for g in s.groups:
            if g.display == label and (s.name not in out or _prefer(g, out[s.name], shown)):
                out[s.name] = g
    return out


def ci_fields(measures: Sequence[str], cis: Mapping[str, tuple[float, float] | None]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in measures:
        ci = cis.get(m)
        out[f"{m} ci_low"], out[f"{m} ci_high"] = (ci if ci is not None else (None, None))
    return out


def bench_rows(b: BenchmarkComparison, rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The benchmark table's rows for its CSV/JSON, in the page's order: rank interval, why a row is
    not ranked, trust, encoder, LLM, seeds, and per measure the mean, its 95% bootstrap CI (one seed)
    or the std over seeds, and the count it is averaged over; then the row facts (command, training,
    model facts, BibTeX)."""
    by_label = {g.display: g for g in b.groups}
    out = []
    for r in rows:
        g = by_label[r["label"]]
        d: dict[str, Any] = {"label": r["label"], "rank": r["rank"] if r["rank_raw"] else "",
                             "why_not_ranked": r["why"], "trust": r["trust"], "encoder": r["encoder"],
                             "llm": r["llm"], "seeds": ";".join(str(s) for s in g.seeds),
                             "benchmark_version": g.benchmark_version}
        for m in b.measures:
            agg = g.measure(m)
            d[m] = agg.mean
            d[f"{m} ci_low"], d[f"{m} ci_high"] = agg.ci if agg.ci is not None else (None, None)
            d[f"{m} std"] = agg.std
            d[f"{m} n"] = "/".join(str(n) for n in agg.n)
        out.append({**d, **rowfacts.data_fields([g])})
    return out


def query_files(site: Site, rec: ResultRecord) -> dict[str, str]:
    """Write one result's per-query values (every measure it stores, every query it has a value for)
    as gzip-compressed CSV (a header row, then a row per query) and JSON (``{"table", "result",
    "values", "columns", "rows": [{"query": …, measure: value or null}]}``, a row per line); their
    paths from the site root (:func:`query_links`)."""
    per_query = site.board.per_query.result(rec)
    measures = sorted(per_query)
    qids = sorted({q for col in per_query.values() for q in col})
    columns = ["query", *measures]
    rows = [{"query": q, **{m: per_query[m].get(q) for m in measures}} for q in qids]
    links = query_links(site, rec)
    meta = {"table": links["csv"][len("data/"):-len(".csv.gz")], "result": {
        "retriever": rec.label, "benchmark": rowfacts.where(rec.benchmark), "benchmark_version": rec.benchmark_version,
        "seed": rec.seed, "k": rec.k, "spec_hash": rec.spec_hash,
        "means": {m: rec.measures[m].mean for m in measures if m in rec.measures}},
        "values": QUERY_VALUES, "columns": columns}
    texts = {"csv": to_csv(rows, columns), "json": json_lines(meta, rows)}
    for kind, text in texts.items():
        write_bytes(site.out_dir / links[kind], gzip.compress(text.encode("utf-8"), compresslevel=GZIP_LEVEL, mtime=0))
    site.written.update(links.values())
    return links


def json_lines(meta: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str:
    """``{**meta, "rows": rows}`` as JSON (ASCII-escaped) with one row per line, so that the file
    reads as a table when decompressed and opened as text."""
    head = "".join(f"{json.dumps(k)}: {json.dumps(v, ensure_ascii=True)}, " for k, v in meta.items())
    body = ",\n".join(json.dumps(r, ensure_ascii=True) for r in rows)
    return "{" + head + '"rows": [' + (f"\n{body}\n" if rows else "") + "]}\n"


def write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` through a temporary file, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def query_links(site: Site, rec: ResultRecord) -> dict[str, str]:
    """The paths :func:`query_files` writes for ``rec`` (without writing them), from the site root:
    ``{"csv": "data/….csv.gz", "json": "data/….json.gz"}``."""
    stem = site.drilldowns[int(rec.id or 0)].split("/", 1)[1][:-len(".html")] + "-queries"
    return {"csv": f"data/{stem}.csv.gz", "json": f"data/{stem}.json.gz"}
