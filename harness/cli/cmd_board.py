"""``leaderboard`` and ``audit``: what the results store shows, as a site, tables or a cost audit.
The composition root's only door to :mod:`reports`."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from ..data.readers import default_data_dir
from ..core.registry import RegistryError, get_benchmark_loader, stored_benchmark_name, suites
from ..store.results import Store
from .console import check_choice, console, fail, home_dir, open_store, out, warn
from .options import (DEFAULT_SITE, TABULAR, BenchmarkFilterOpt, DataDirOpt, HomeOpt, RetrieverFilterOpt, data_dir_option,
                      prices_option)


def check_site_folder(out_dir: Path, force: bool = False) -> None:
    """Refuse, before any work, to write the site where it would overwrite what it did not write
    (:func:`reports.site.check_site_folder`)."""
    from reports.site import check_site_folder as check  # the composition root may import reports

    check(out_dir, force)


REFERENCE_ENV = "BEYONDSIM_REFERENCE"
"""``0``/``false``/``off``/``no``: the shipped reference results stay out of the leaderboard unless
``--reference`` is given (a test suite, or a board of one's own rows only)."""


def reference_default() -> bool:
    """Whether the leaderboard brings in the shipped reference results when not told (default yes)."""
    return os.environ.get(REFERENCE_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def write_board(store: Store, out_dir: Path, fmt: str = "html", *, reference: Optional[bool] = None,
                data_dir: Optional[Path] = None, force: bool = False) -> Path:
    """Bring the shipped reference results into the store (``reference``; ``None``:
    :func:`reference_default`), then have :func:`reports.board.write_board` write the board in
    ``fmt`` into ``out_dir`` (``-``: stdout); returns the site's ``index.html`` or ``out_dir``.
    Without ``reference`` the shipped results are left out of the pages (and stay in the store); a
    read-only store shows what it holds, without the bundle's new results."""
    from reports.board import write_board as write  # the composition root may import reports

    from ..record.bundle import reference_filter

    if reference is None:
        reference = reference_default()
    if reference:
        _bring_in_the_bundle(store, data_dir)
    paths = write(store, out_dir, fmt, include=reference_filter(reference), force=force)
    if fmt == "html":
        console.print(f"leaderboard written to {paths[0].resolve()}", highlight=False, soft_wrap=True)
        return paths[0]
    if str(out_dir) != "-":
        console.print(f"{len(paths)} {fmt} table{'s' if len(paths) != 1 else ''} written to {out_dir.resolve()}",
                      highlight=False, soft_wrap=True)
    return out_dir


def _bring_in_the_bundle(store: Store, data_dir: Optional[Path]) -> None:
    """Import the shipped reference bundle into ``store`` once (its messages on the console)."""
    from ..core.registry import reference_files
    from .cmd_reference import describe, import_bundle

    try:
        bundle = reference_files().get("bundle")
    except RegistryError as e:
        warn(str(e))
        return
    if bundle is None or not bundle.exists():
        return
    if getattr(store, "readonly", False):
        warn(f"the store {store.path} is read-only: the reference bundle is not imported, the site shows what the "
             "store holds")
        return
    report = import_bundle(store, bundle, default_data_dir(data_dir))
    if report is not None and not report.skipped:
        console.print(describe(report), soft_wrap=True)


def leaderboard(
    out_dir: Path = typer.Option(DEFAULT_SITE, "--out", "-o",
                                 help="Output directory (default ./leaderboard); - writes md, latex or json to stdout."),
    fmt: str = typer.Option("html", "--format", "-f", help="html (the static site), md, latex or json."),
    reference: Optional[bool] = typer.Option(None, "--reference/--no-reference", help="Show the reference results "
                                             "shipped with the project beside the store's own (imported once per "
                                             f"bundle; default: yes, unless {REFERENCE_ENV}=0)."),
    force: bool = typer.Option(False, "--force", help="Write the site into a folder that holds other files (its "
                               "pages replace files of the same name; nothing else is touched)."),
    data_dir: DataDirOpt = None,
    home: HomeOpt = None,
) -> None:
    """Render the leaderboard from the results store: the static site (html), or the same
    comparisons as tables for a paper (md, latex, json).

    The tables go into the --out directory as one file per suite table and one per benchmark:
    suite/<name>.<ext> and bench/<name>.<ext> (ext md, tex or json; names as on the site). With
    --out - they are written to stdout one after another; json then is one object
    {"suites": [...], "benchmarks": [...]} holding the same objects as the files. md and latex
    show each benchmark's headline measures (best in bold, † and ‡ for significant differences
    from the reference and the best baseline); json holds every measure with its per-seed means,
    CI or std, and each paired test's raw and Holm-adjusted p and win/tie/loss counts (missing
    numbers are null)."""
    check_choice("--format", fmt, ("html", "md", "latex", "json"))
    if fmt == "html" and str(out_dir) == "-":
        fail("--format html writes a folder of pages: give a directory")
    if fmt == "html":
        check_site_folder(out_dir, force)
    with open_store(home) as store:
        write_board(store, out_dir, fmt, reference=reference, data_dir=data_dir, force=force)


def audit(
    by: Optional[str] = typer.Option(None, "--by", help="pair (retriever × benchmark; the default), retriever, "
                                     "benchmark, or model: LLM usage per model name across results, without time "
                                     "columns (a result's time is not split between the models it called); "
                                     "latency s is the summed latency of that model's billed requests."),
    retriever: RetrieverFilterOpt = None,
    benchmark: BenchmarkFilterOpt = None,
    since: Optional[str] = typer.Option(None, "--since", help="Only results created at or after this: an ISO date or "
                                        "datetime (UTC unless it has an offset) or an age such as 12h, 7d, 2w."),
    project: Optional[str] = typer.Option(None, "--project", help="Estimate a suite (constraint, completeness, all, …) "
                                          "or comma-separated benchmarks per retriever: the selected results' "
                                          "per-query rates × each benchmark's queries, plus offline seconds measured "
                                          "on it or per document × its corpus size. $ prices every recorded call, "
                                          "cache hits included, at current prices; unknown stays unknown."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json or csv (json/csv: one row per group, "
                            "without the table's total rows; usd is null when unknown, usd_known the priced part)."),
    view: str = typer.Option("full", "--view", help="full, or paper: CoDeR Table 4's view, per method over the "
                             "paper's six settings: cold time s (offline + online), $ of new spend, tokens K, and "
                             "what is missing per cell."),
    prices: Annotated[Optional[Path], prices_option(
        "Extra prices TOML for --project, on top of harness/models/prices.toml.")] = None,
    data_dir: Annotated[Optional[Path], data_dir_option(
        "For --project: where to count the queries and documents of a benchmark the store has no record of (else "
        "BEYONDSIM_DATA, else ../shared/data).")] = None,
    home: HomeOpt = None,
) -> None:
    """Efficiency and API cost of stored results: offline/online seconds, LLM calls split into cache
    hits and billed calls, their tokens, and $ of new spend (a cache hit costs $0; a model without a
    price is "unknown", never $0, and a total with an unknown part shows its known part as "≥ $x").
    Seconds are cold (cached embeddings, models, trained encoders and LLM replies counted at what
    computing them cost; harness/cost/figures.py), with this run's seconds beside them (run_*_s in json/csv).
    The table adds a subtotal per retriever (--by pair) and a total row. --project estimates a suite."""
    from ..cost import audit as audit_mod
    from ..cost import tables

    check_choice("--format", fmt, TABULAR)
    check_choice("--view", view, ("full", "paper"))
    try:
        cutoff = audit_mod.parse_since(since) if since else None
    except ValueError as e:
        fail(str(e))
    if project is not None:
        if by is not None or view != "full":
            fail("--project does not combine with --by or --view")
        with open_store(home) as store:
            benchmark = stored_benchmark_name(benchmark) if benchmark else None
            _, records, infos = audit_mod.select_from_store(store, retriever=retriever, benchmark=benchmark,
                                                            since=cutoff)
        _audit_projection(audit_mod, records, infos, project, fmt, prices, data_dir,
                          audit_mod.scope_text(retriever, benchmark, cutoff))
        return
    with open_store(home) as store:
        benchmark = stored_benchmark_name(benchmark) if benchmark else None
        try:
            report = audit_mod.audit_store(store, home_dir(home), by=by, retriever=retriever, benchmark=benchmark,
                                           since=cutoff, view=view, suite_table=suites() if view == "paper" else None)
        except ValueError as e:
            fail(str(e))
    rows = report.rows
    if fmt == "json":
        sys.stdout.write(tables.to_json(rows))
    elif fmt == "csv":
        sys.stdout.write(tables.to_csv(audit_mod.paper_csv_rows(rows) if view == "paper" else rows))
    else:
        title = "cost and time audit" + (f" ({report.scope})" if report.scope else "")
        out.print(tables.paper_table(rows, report.settings, f"{report.paper}: {title}") if view == "paper"
                  else tables.audit_table(report.grouped, title))
    if report.unpriced:
        console.print(f"no price was known for model(s) {', '.join(report.unpriced)} when they ran: their spend is "
                      "unknown (add them to a prices file for future runs: --prices)", highlight=False, soft_wrap=True)


def _audit_projection(audit_mod: Any, records: list, infos: list, target: str, fmt: str, prices: Optional[Path],
                      data_dir: Optional[Path], scope: str) -> None:
    from ..cost import tables
    from ..models.llm import load_prices

    def known(name: str) -> bool:
        if name in {i.name for i in infos}:
            return True
        try:
            get_benchmark_loader(name)
        except RegistryError:
            return False
        return True

    try:
        benches = audit_mod.projection_targets(target, suites(), known)
    except ValueError as e:
        fail(str(e))
    price_table = load_prices(prices)
    proj = audit_mod.project(records, benches, infos, price_table,
                             fallback=audit_mod.registry_stats(default_data_dir(data_dir)))
    notes = tables.projection_notes(proj)
    if fmt == "json":
        sys.stdout.write(tables.to_json({"target": target, **proj.to_dict(), "notes": notes}))
        return
    if fmt == "csv":
        sys.stdout.write(tables.projection_csv(proj))
        for n in notes:
            console.print(n, highlight=False, markup=False, soft_wrap=True)
        return
    out.print(tables.rates_table(proj))
    title = f"projection: {target} ({len(benches)} benchmark{'s' if len(benches) != 1 else ''})"
    out.print(tables.projection_table(proj, title + (f" — measurements: {scope}" if scope else "")))
    for n in notes:
        out.print(n, highlight=False, markup=False, soft_wrap=True)
