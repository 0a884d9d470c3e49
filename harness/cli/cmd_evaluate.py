"""``evaluate`` (score a run file) and ``pool`` (frozen candidate pools: export, list)
(docs/design/runfiles.md, docs/design/pools.md)."""

from __future__ import annotations

import csv
import io
import json
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..core.errors import UserError
from ..measures import format_value, parse_measure
from ..run.runner import Settings, save_content
from ..run.scoring import evaluate as score_run, run_file_record
from .console import check_choice, console, fail, home_dir, log_line, make_runner, open_store, out, progress_for
from .options import TABULAR, DataDirOpt, DeviceOpt, HomeOpt, OnlineOpt



def evaluate(
    run_file: Path = typer.Argument(..., metavar="RUN", help="A TREC run file (qid Q0 docid rank score tag; .gz read "
                                    "by content) or a JSON run {qid: {docid: score}} / {qid: [[docid, score], ...]}."),
    benchmark: str = typer.Option(..., "--benchmark", "-b", help="The benchmark it ranks (an id or a BEIR folder)."),
    measure: list[str] = typer.Option(None, "--measure", "-m", help="Measure to print (repeatable; default: every "
                                      "measure of the benchmark's task)."),
    per_query: bool = typer.Option(False, "--per-query", help="Print every query's value of each measure too."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json or csv."),
    skip_unknown: bool = typer.Option(False, "--skip-unknown", help="Drop (and count) lines whose query or document "
                                      "the benchmark does not have, instead of refusing the file."),
    pool: Optional[str] = typer.Option(None, "--pool", help="The pool (a file, or <first stage>@<depth> as stored "
                                       "here) the run reranks: a document outside it is refused."),
    store: bool = typer.Option(False, "--store", help="Keep it in the results store as your own result (ranked on "
                               "the board, trust 'verified'); needs --label."),
    label: Optional[str] = typer.Option(None, "--label", help="The name it is shown under on the board."),
    data_dir: DataDirOpt = None,
    online: OnlineOpt = False,
    home: HomeOpt = None,
) -> None:
    """Score a run file on a benchmark, as trec_eval orders it (score descending, ties by document id
    descending), with 95% bootstrap intervals; --store keeps it as a result of your own."""
    check_choice("--format", fmt, TABULAR)
    if store and not label:
        fail("--store needs --label: the name the result is shown under")
    for m in measure or ():
        parse_measure(m)
    pool_arg = None
    if pool is not None:
        pool_arg = pool if Path(pool).exists() else _stored_pool(pool, benchmark, home)
    scores = score_run(run_file, benchmark, measure or None, data_dir=data_dir, online=online,
                       skip_unknown=skip_unknown, pool=pool_arg)
    for note in scores.notes:
        console.print(f"note: {note}", soft_wrap=True)
    if store:
        from ..core.registry import load_benchmark
        from ..data.readers import default_data_dir

        rec = run_file_record(scores, label or "", pool=_as_pool(pool_arg, benchmark, data_dir, online))
        with open_store(home) as st:
            if st.has(rec.key):
                console.print(f"stored already: {label} on {scores.benchmark} [{rec.key}]", soft_wrap=True)
            else:
                st.save(rec)
                save_content(st, load_benchmark(benchmark, default_data_dir(data_dir), online), rec.rankings)
                console.print(f"stored {label} on {scores.benchmark} [{rec.key}] in {st.path}", soft_wrap=True)
    _print_scores(scores, fmt, per_query)


def _as_pool(pool, benchmark: str, data_dir, online: bool):
    """The pool object of ``--pool`` (a file read and checked against the benchmark)."""
    if pool is None or not isinstance(pool, (str, Path)):
        return pool
    from ..core.registry import load_benchmark
    from ..data.readers import default_data_dir
    from ..run.pools import read_pool

    return read_pool(pool, load_benchmark(benchmark, default_data_dir(data_dir), online))


def _stored_pool(name: str, benchmark: str, home: Optional[Path]):
    """The pool called ``name`` of ``benchmark`` in the results store (``pool export`` or a reranker's
    run put it there)."""
    from ..run.pools import pool_from_store

    with open_store(home) as st:
        found = [m for m in st.pools() if m.get("name") == name or m.get("hash") == name]
        found = [m for m in found if m.get("benchmark") == benchmark] or found
        if not found:
            fail(f"no pool {name!r} in the results store, and no such file (`beyondsim pool export` writes one)")
        return pool_from_store(st, found[-1]["hash"])


def _print_scores(scores, fmt: str, per_query: bool) -> None:
    if fmt == "json":
        doc = scores.to_dict()
        if per_query:
            doc["per_query"] = scores.per_query
        sys.stdout.write(json.dumps(doc, indent=1, allow_nan=False) + "\n")
        return
    if fmt == "csv":
        from ..cost.tables import csv_cell

        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        if per_query:
            w.writerow(["measure", "qid", "value"])
            for m, col in scores.per_query.items():
                for q, v in col.items():
                    w.writerow([csv_cell(m), csv_cell(q), repr(float(v))])
        else:
            w.writerow(["measure", "mean", "ci_low", "ci_high", "n"])
            for m, v in scores.measures.items():
                w.writerow([csv_cell(m), *("" if x is None else repr(float(x)) for x in (v.mean, v.ci_low, v.ci_high)), v.n])
        sys.stdout.write(buf.getvalue())
        return
    t = Table(title=f"{scores.benchmark} ({scores.n_queries:,} judged queries"
                    + (f", {scores.n_missing:,} without a ranking" if scores.n_missing else "") + ")",
              title_justify="left")
    for c in ("measure", "mean", "95% CI", "n"):
        t.add_column(c, justify="left" if c == "measure" else "right")
    for m, v in scores.measures.items():
        ci = "–" if v.ci_low is None else f"{format_value(m, v.ci_low)} – {format_value(m, v.ci_high)}"
        t.add_row(m, format_value(m, v.mean), ci, f"{v.n:,}")
    out.print(t)
    if per_query:
        q = Table(title="per query", title_justify="left")
        names = list(scores.per_query)
        for c in ("qid", *names):
            q.add_column(c, justify="left" if c == "qid" else "right")
        qids = list(dict.fromkeys(k for col in scores.per_query.values() for k in col))
        for qid in qids:
            q.add_row(qid, *[format_value(m, scores.per_query[m][qid]) if qid in scores.per_query[m] else "–"
                             for m in names])
        out.print(q)


# -- pools ---------------------------------------------------------------------------------------------

pool_app = typer.Typer(help="Frozen candidate pools: a first stage's top N per query, for second-stage methods.",
                       no_args_is_help=True)


@pool_app.command("export")
def pool_export(
    benchmark: str = typer.Option(..., "--benchmark", "-b", help="The benchmark (an id or a BEIR folder)."),
    first_stage: str = typer.Option(..., "--first-stage", help="The first stage: NAME, NAME:KEY=VALUE,… or JSON."),
    depth: int = typer.Option(100, "--depth", help="Candidates per query."),
    output: Path = typer.Option(..., "--output", "-o", help="The TREC file to write (its manifest goes beside it, "
                                "<file>.manifest.json)."),
    force: bool = typer.Option(False, "--force", help="Recompute the first stage even when its result is stored."),
    data_dir: DataDirOpt = None,
    online: OnlineOpt = False,
    device: DeviceOpt = None,
    home: HomeOpt = None,
) -> None:
    """Write a benchmark's candidate pool (the first stage's top DEPTH for every evaluated query) as
    a TREC file and its manifest (hash, first stage, the pool's figures and its ceiling); the pool and
    its three reference rows are kept in the results store."""
    from ..run.pools import write_pool

    if depth < 1:
        fail("--depth must be ≥ 1")
    settings = Settings(home=home_dir(home), data_dir=data_dir, k=depth, force=force, online=online, device=device)
    with open_store(home) as st, progress_for(console) as progress:
        runner = make_runner(settings, st, progress, log_line, None)
        try:
            bench, _ = runner.load_benchmark(benchmark)
            pool = runner.pool_for(bench, f"{first_stage}@{depth}")
        finally:
            runner.close()
    trec, manifest = write_pool(pool, output)
    c = pool.manifest["ceiling"]
    out.print(f"pool {pool.name} of {pool.benchmark}: {pool.hash} ({pool.manifest['queries']:,} queries, "
              f"{pool.manifest['candidates']:,} candidates); ceiling: satisfiable "
              f"{_share(c.get('satisfiable'))}, Sat@10 {_share(c.get('Sat@10'))}, nDCG@10 {_share(c.get('nDCG@10'))}",
              soft_wrap=True)
    out.print(f"wrote {trec} and {manifest}", soft_wrap=True)


def _share(x) -> str:
    return "–" if x is None else f"{x:.3f}"


@pool_app.command("list")
def pool_list(
    benchmark: Optional[str] = typer.Option(None, "--benchmark", "-b", help="Only this benchmark's pools."),
    home: HomeOpt = None,
) -> None:
    """The pools kept in the results store, with their ceilings."""
    with open_store(home) as st:
        rows = st.pools(benchmark)
    t = Table(title="candidate pools", title_justify="left")
    for c in ("benchmark", "pool", "hash", "depth", "queries", "satisfiable", "best Sat@10", "best nDCG@10"):
        t.add_column(c, justify="left" if c in ("benchmark", "pool", "hash") else "right")
    for m in rows:
        c = m.get("ceiling") or {}
        t.add_row(str(m["benchmark"]), str(m["name"]), str(m["hash"]), str(m["depth"]), f"{m.get('queries', 0):,}",
                  _share(c.get("satisfiable")), _share(c.get("Sat@10")), _share(c.get("nDCG@10")))
    out.print(t)


__all__ = ["evaluate", "pool_app", "UserError"]
