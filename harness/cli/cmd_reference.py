"""``beyondsim reference`` (build, bundle and import the reference results, :mod:`harness.record.bundle`)
and ``reproduce`` (recompute the reproduction matrix, :mod:`harness.record.reproduce`)."""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from ..data.readers import default_data_dir
from ..run.runner import Settings
from ..store.results import open_store as store_at
from ..store.results import store_path
from .console import (check_choice, console, fail, home_dir, log_line, make_runner, missing_on_disk, open_store, out, progress_for,
                      reference_pins, warn)
from .options import TABULAR, TYPER_SETTINGS, DataDirOpt, DeviceOpt, HomeOpt, RayOpt

reference_app = typer.Typer(help="The reference results shipped with the project: build them, write the bundle, "
                            "import it.", **TYPER_SETTINGS)

OnlyOpt = typer.Option(None, "--only", help="Only the configurations whose label matches this fnmatch pattern "
                       "('dense*'), or the benchmarks that match it; LABEL@BENCHMARK for both "
                       "('coder-*@beir/scifact').")


def _files() -> dict[str, Path]:
    from ..core.registry import reference_files

    files = reference_files()
    if "plan" not in files:
        fail("no reference plan is installed (entry point group beyondsim.reference)")
    return files


def _jobs(only: Optional[str], data_dir: Optional[Path]):  # type: ignore[no-untyped-def]
    from ..record.bundle import jobs
    from ..record.matrix import load_plan
    from ..core.registry import suites

    files = _files()
    root = default_data_dir(data_dir)
    plan = load_plan(files["plan"])
    return plan, jobs(plan, suites(), lambda b: not missing_on_disk(b, root), only)


def build_home(home: Path) -> Path:
    """Where the reference results are built: a store of their own beside the user's."""
    return home / "reference"


@reference_app.command("build")
def build(
    only: Optional[str] = OnlyOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would run, run nothing."),
    data_dir: DataDirOpt = None,
    device: DeviceOpt = None,
    home: HomeOpt = None,
) -> None:
    """Run the reference plan into its own store ($BEYONDSIM_HOME/reference/results.sqlite), sharing
    the embedding and LLM caches. Resumable: finished results are kept, so chunks (--only) and
    interrupted builds add up; `reference bundle` then writes the bundle."""
    from ..record.bundle import build as build_plan
    from ..record.bundle import job_specs

    from ..record.bundle import pool_jobs
    from ..core.registry import suites

    plan, todo = _jobs(only, data_dir)
    specs = job_specs(todo)
    root_data = default_data_dir(data_dir)
    pools = pool_jobs(plan, suites(), lambda b: not missing_on_disk(b, root_data), only)
    for name, benches in pools:
        console.print(f"pool {name}: {len(benches)} benchmark(s)", soft_wrap=True)
    for j in todo:
        c = j.config
        what = f"{c.display}: {len(j.benchmarks)} benchmark(s) × seeds {c.seeds}" + (
            f", first {c.max_queries} queries" if c.max_queries else "")
        console.print(what + (f" (not on disk: {', '.join(j.skipped)})" if j.skipped else ""), soft_wrap=True)
    if dry_run:
        return
    root = home_dir(home)
    t0 = time.perf_counter()
    with store_at(build_home(root)) as store, progress_for(console) as progress:
        stopped = build_plan(todo, specs, Settings(home=root, data_dir=data_dir, device=device,
                                                   pinned_pools=plan.pins()), store,
                             progress=progress, log=log_line, pools=pools)
    if stopped:
        fail(f"stopped: {stopped}", 3)
    console.print(f"reference build: {time.perf_counter() - t0:,.0f} s; `beyondsim reference status` shows what is "
                  "done, `beyondsim reference bundle` writes the bundle", soft_wrap=True)


@reference_app.command("status")
def status(only: Optional[str] = OnlyOpt, data_dir: DataDirOpt = None, home: HomeOpt = None) -> None:
    """How much of the reference plan the build store holds, per configuration, and how much the
    installed bundle holds ("in the bundle"; a partial build adds to it with `bundle --add`)."""
    from ..record.bundle import bundled, summary

    plan, todo = _jobs(only, data_dir)
    bundle_file = _files().get("bundle")
    with store_at(build_home(home_dir(home))) as store:
        rows = summary(store, plan, todo, bundled(bundle_file) if bundle_file else None)
        path = store.path
    t = Table(title=f"reference plan ({path})")
    for col in ("configuration", "results", "in the bundle", "not on disk", "note"):
        t.add_column(col)
    for r in rows:
        style = "green" if r["done"] == r["wanted"] else "yellow"
        in_bundle = "–" if r["in_bundle"] is None else f"{r['in_bundle']}/{r['wanted']}"
        t.add_row(Text(r["label"]), Text(f"{r['done']}/{r['wanted']}", style=style), Text(in_bundle),
                  Text(", ".join(r["skipped"])), Text(r["note"]))
    out.print(t)


@reference_app.command("bundle")
def bundle(
    out_path: Optional[Path] = typer.Option(None, "--out", "-o", help="Bundle file (default: the installed "
                                            "benchmarks/reference/bundle.jsonl.gz)."),
    add: bool = typer.Option(False, "--add", help="Add the build store's results to the existing bundle (one with "
                             "the same key is replaced) instead of writing the build store alone: for a "
                             "build of part of the plan (--only)."),
    home: HomeOpt = None,
) -> None:
    """Write the build store as the bundle: gzip-compressed JSON lines, rankings cut to the plan's
    depth (top 10), per-query measures, spec, provenance, environment and ledger kept."""
    from ..store.exchange import ExchangeError
    from ..record.bundle import add_to_bundle, write_bundle
    from ..record.matrix import load_plan

    files = _files()
    target = out_path or files["bundle"]
    built = build_home(home_dir(home))
    if not store_path(built).exists():
        fail(f"no reference build at {store_path(built)}: run `beyondsim reference build` first")
    plan = load_plan(files["plan"])
    with store_at(built) as store:
        try:
            if add:
                if not target.exists():
                    fail(f"--add: no bundle at {target} to add to")
                added, replaced = add_to_bundle(store, target, depth=plan.depth, plan=plan)
            else:
                n = write_bundle(store, target, depth=plan.depth, plan=plan)
        except (ExchangeError, OSError, ValueError) as e:
            fail(f"{target}: {e}")
    what = f"added {added} result(s) and replaced {replaced}" if add else f"wrote {n} result(s)"
    console.print(f"{what} in {target} ({target.stat().st_size / 1e6:.1f} MB)", soft_wrap=True)


@reference_app.command("import")
def import_(
    force: bool = typer.Option(False, "--force", help="Import again even if this bundle is in the store."),
    bundle_path: Optional[Path] = typer.Option(None, "--bundle", help="Another bundle file."),
    data_dir: DataDirOpt = None,
    home: HomeOpt = None,
) -> None:
    """Bring the reference bundle into the results store (the leaderboard does it by default):
    each result verified against the benchmark here where it is on disk, marked as reference."""
    path = bundle_path or _files().get("bundle")
    if path is None or not Path(path).exists():
        fail(f"no reference bundle at {path}")
    with open_store(home) as store:
        report = import_bundle(store, Path(path), default_data_dir(data_dir), force=force)
    if report is None:
        raise typer.Exit(1)
    console.print(describe(report), soft_wrap=True)


def import_bundle(store, path: Path, data_dir: Path, *, force: bool = False):  # type: ignore[no-untyped-def]
    """:func:`harness.record.bundle.ensure_imported` with its messages on the console."""
    from ..store.exchange import ExchangeError
    from ..record.bundle import ensure_imported

    try:
        report = ensure_imported(store, path, data_dir, force=force, log=log_line)
    except (ExchangeError, OSError) as e:
        warn(f"reference bundle {path} not imported: {e}")
        return None
    for d in report.differences:
        console.print(Text("note: ", style="bold") + Text(f"differs from the reference: {d}"), soft_wrap=True)
    for r in report.refused:
        warn(r)
    for r in report.unverified[:20]:
        console.print(Text("reported, not verified: ", style="bold yellow") + Text(r), soft_wrap=True)
    if len(report.unverified) > 20:
        console.print(f"… and {len(report.unverified) - 20} more not verified", soft_wrap=True)
    return report


def describe(report) -> str:  # type: ignore[no-untyped-def]
    if report.skipped:
        return f"reference bundle {report.bundle} is in the store already"
    return (f"reference bundle {report.bundle}: {report.added} result(s) imported ({report.verified} verified, "
            f"{report.reported} reported), {report.present} already in the store"
            + (f", {report.replaced_old} of an older bundle replaced" if report.replaced_old else "")
            + (f", {len(report.refused)} refused" if report.refused else ""))


def reproduce(
    quick: bool = typer.Option(False, "--quick", help="Only the rows marked quick = true: the cheap ones (bm25, dense, "
                               "deo-rules, nnn-fix, mmr on the diagnostic sets and NegConstraint) that CI runs."),
    only: list[str] = typer.Option(None, "--only", metavar="PATTERN", help="Only the rows whose retriever:benchmark:measure, or any one "
                                   "of the three, matches this shell pattern, e.g. 'bm25:*' or 'V@*' (repeatable)."),
    expected: Optional[Path] = typer.Option(None, "--expected", help="The matrix of expected figures (default: "
                                            "expected.toml of the installed reference files)."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json (the matrix's rows, the pinned pools and the "
                            "verdict, one document) or csv (the matrix's rows); with json and csv the notes and the "
                            "verdict go to stderr."),
    data_dir: DataDirOpt = None,
    device: DeviceOpt = None,
    home: HomeOpt = None,
    ray: RayOpt = None,
) -> None:
    """Recompute the reproduction matrix and compare each figure with its expected value: OK (equal
    within 1e-4, or within the row's tolerance when that is smaller), OKish (within the tolerance),
    FAIL (outside it, not computed, or the run failed), SKIP (the benchmark is not on disk). Each
    (retriever, benchmark, seed) runs once into <home>/reproduce/results.sqlite, sharing <home>/cache;
    the matrix is saved to the results store, where the leaderboard's reproduction page shows it.
    Exit code 1: a reference row failed (published rows, a paper's figures, never change the exit code)."""
    from ..record.reproduce import FAIL, SKIP, STATUSES, check_pools, choose, notes, reproduce, summarise

    check_choice("--format", fmt, TABULAR)
    chosen = choose(expected, quick=quick, only=list(only or ()))
    settings = Settings(home=home_dir(home), data_dir=data_dir, device=device, pinned_pools=reference_pins())
    started = time.monotonic()
    with open_store(home) as store, progress_for(console) as progress:
        pool_checks = check_pools(settings, quick=quick, progress=progress, log=log_line) if chosen.shipped and not only else []
        outcomes = reproduce(chosen.rows, settings, store=store, shipped=chosen.shipped, progress=progress,
                             log=log_line, make_runner=lambda st, sc, pr, lg: make_runner(st, sc, pr, lg, ray))
        saved_to = store.path
    s = summarise(outcomes)
    failed = s.failed or any(c.status == FAIL for c in pool_checks)
    verdict = s.line(seconds=time.monotonic() - started, saved_to=saved_to, shipped=chosen.shipped)
    if fmt == "table":
        _print_matrix(chosen.path, outcomes, pool_checks)
        for line in notes(outcomes):
            out.print(line, soft_wrap=True)
        out.print(verdict, soft_wrap=True)
    else:
        from ..cost import tables

        rows = [outcome_row(o) for o in outcomes]
        if fmt == "json":
            sys.stdout.write(tables.to_json({
                "matrix": str(chosen.path), "shipped": chosen.shipped, "rows": rows,
                "pools": [dataclasses.asdict(c) for c in pool_checks],
                "summary": {"failed": failed, "compared": s.compared,
                            "counts": {kind: {st: c.get(st, 0) for st in (*STATUSES, SKIP)} for kind, c in s.counts.items()},
                            "skipped_benchmarks": s.skipped_benchmarks, "line": verdict}}))
        else:
            sys.stdout.write(tables.to_csv(rows, OUTCOME_FIELDS))
        for line in notes(outcomes):
            console.print(line, soft_wrap=True)
        console.print(verdict, soft_wrap=True)
    if failed:
        raise typer.Exit(1)


OUTCOME_FIELDS = ("row", "retriever", "benchmark", "measure", "seed", "expected", "got", "diff", "tolerance", "status",
                  "kind", "source", "note", "spec_hash", "benchmark_version")


def outcome_row(o) -> dict:  # type: ignore[no-untyped-def]
    """One compared row as ``--format json|csv`` writes it: the figures as numbers (``None`` when
    there is none), the matrix's 1-based row number, and the run it was recomputed from."""
    r = o.row
    return {"row": r.index, "retriever": r.label, "benchmark": r.benchmark, "measure": r.measure, "seed": r.seed,
            "expected": r.expected, "got": o.got, "diff": o.diff, "tolerance": r.tolerance, "status": o.status,
            "kind": r.kind, "source": r.source, "note": o.note, "spec_hash": o.spec_hash,
            "benchmark_version": o.benchmark_version}


def _print_matrix(path: Path, outcomes, pool_checks) -> None:  # type: ignore[no-untyped-def]
    from ..record.reproduce import FAIL, OK, OKISH, SKIP

    style = {OK: "green", OKISH: "yellow", FAIL: "bold red", SKIP: "dim"}

    def num(x: Optional[float], signed: bool = False) -> str:
        return "–" if x is None else (f"{x:+.6f}" if signed else f"{x:.6f}")

    t = Table(title=f"reproduction matrix: {path}", title_justify="left")
    for c in ("retriever", "benchmark", "measure"):
        t.add_column(c, overflow="fold")
    for c in ("expected", "got", "diff", "tolerance"):
        t.add_column(c, justify="right", no_wrap=True)
    t.add_column("status", no_wrap=True)
    t.add_column("kind: source", overflow="fold")
    for o in outcomes:
        r = o.row
        t.add_row(r.label, r.benchmark, r.measure, num(r.expected), num(o.got), num(o.diff, True), f"{r.tolerance:g}",
                  Text(o.status, style=style[o.status]), f"{r.kind}: {r.source}")
    out.print(t)
    if pool_checks:
        p = Table(title="reference pools (content hash pinned by the plan, recomputed here)", title_justify="left")
        for c in ("pool", "benchmark", "pinned", "got", "status", "note"):
            p.add_column(c, overflow="fold")
        for c in pool_checks:
            p.add_row(c.name, c.benchmark, c.pinned, c.got or "–", Text(c.status, style=style[c.status]), c.note)
        out.print(p)
