"""The ``beyondsim`` command line (DESIGN.md §11). The composition root: the only module of
``harness`` that imports ``reports`` (inside ``leaderboard``)."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import os
import sys
import tomllib
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from . import __version__
from .data import MissingDataError, default_data_dir, missing_files
from .ledger import call_totals, phase_totals
from .registry import (RegistryError, benchmark_names, get_benchmark_loader, get_suite, make_spec,
                       retriever_names, suites)
from .runner import DEFAULT_K, Runner, Settings
from .store import Store

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="beyondsim — benchmark harness for retrieval beyond semantic similarity.")
list_app = typer.Typer(help="List retrievers, benchmarks or suites.", no_args_is_help=True)
data_app = typer.Typer(help="Benchmark data on disk.", no_args_is_help=True)
app.add_typer(list_app, name="list")
app.add_typer(data_app, name="data")

console = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 160)


def home_dir(home: Optional[Path] = None) -> Path:
    h = home or Path(os.environ.get("BEYONDSIM_HOME", "~/.beyondsim"))
    h = h.expanduser().resolve()
    h.mkdir(parents=True, exist_ok=True)
    return h


def open_store(home: Optional[Path] = None) -> Store:
    return Store(home_dir(home) / "results.sqlite")


class RichProgress:
    """Rich progress bars for every loop that reports through ``ctx.progress``."""

    def __init__(self, console: Console):
        self._p = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                           TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=True)

    def __enter__(self) -> "RichProgress":
        self._p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._p.stop()

    @contextlib.contextmanager
    def track(self, total: int, description: str) -> Iterator[Callable[[int], None]]:
        task = self._p.add_task(description, total=total)
        try:
            yield lambda n=1: self._p.advance(task, n)
        finally:
            self._p.remove_task(task)


def fail(msg: str, code: int = 2) -> None:
    console.print(Text("error: ", style="bold red") + Text(msg), soft_wrap=True)
    raise typer.Exit(code)


def _parse_params(items: list[str], config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    params: dict[str, dict[str, Any]] = {k: dict(v) for k, v in config.get("retrievers", {}).items()}
    for item in items:
        name_key, eq, value = item.partition("=")
        name, dot, key = name_key.partition(".")
        if not eq or not dot or not key:
            fail(f"--param {item!r}: expected RETRIEVER.KEY=VALUE, e.g. dense.model=all-MiniLM-L6-v2")
        params.setdefault(name, {})[key] = value
    return params


def _load_config(path: Optional[Path]) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        fail(f"config file {path} does not exist")
    except tomllib.TOMLDecodeError as e:
        fail(f"{path}: invalid TOML: {e}")
    return {}


@app.command()
def run(
    retrievers: list[str] = typer.Argument(None, help="Retriever ids (bm25, dense, ...), config variants, or module:Class."),
    benchmark: list[str] = typer.Option(None, "--benchmark", "-b", help="Benchmark id or path to a BEIR folder (repeatable)."),
    suite: Optional[str] = typer.Option(None, "--suite", "-s", help="Run a suite (demo, constraint, topical, completeness, all)."),
    seeds: int = typer.Option(1, "--seeds", help="Number of seeds: runs seeds 0..N-1."),
    seed: list[int] = typer.Option(None, "--seed", help="Explicit seed (repeatable); overrides --seeds."),
    k: int = typer.Option(DEFAULT_K, "--k", help="Ranking depth stored and evaluated."),
    param: list[str] = typer.Option(None, "--param", "-p", help="RETRIEVER.KEY=VALUE parameter (repeatable)."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="TOML file: [retrievers.NAME] tables of parameters."),
    measure: list[str] = typer.Option(None, "--measure", "-m", help="Extra measure to compute (repeatable)."),
    force: bool = typer.Option(False, "--force", help="Recompute results that already exist."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Data directory (else BEYONDSIM_DATA, else ../shared/data)."),
    online: bool = typer.Option(False, "--online", help="Allow loaders to fetch missing data from the official source."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda (default: cuda when present)."),
    home: Optional[Path] = typer.Option(None, "--home", envvar="BEYONDSIM_HOME", help="Store and caches (default ~/.beyondsim)."),
    leaderboard_dir: Optional[Path] = typer.Option(None, "--leaderboard", help="Render the leaderboard here afterwards."),
) -> None:
    """Run retrievers on benchmarks, score them and store the results."""
    cfg = _load_config(config)
    benches = list(benchmark or [])
    names = list(retrievers or [])
    if suite:
        try:
            s = get_suite(suite)
        except RegistryError as e:
            fail(str(e))
        benches += [b for b in s["benchmarks"] if b not in benches]
        if not names:
            names = list(s.get("retrievers", []))
    if not benches:
        fail("give at least one --benchmark or a --suite")
    if not names:
        fail("give at least one retriever (see `beyondsim list retrievers`)")
    params = _parse_params(list(param or []), cfg)
    specs = []
    try:
        for n in names:
            p = dict(params.get(n, {}))
            base = p.pop("retriever", n)
            specs.append(make_spec(base, p, label=n if base != n else ""))
    except (RegistryError, ValueError) as e:
        fail(str(e))
    seed_list = list(seed) if seed else list(range(seeds))
    settings = Settings(home=home_dir(home), data_dir=data_dir, k=k, force=force, online=online, device=device,
                        extra_measures=tuple(measure or ()))
    store = Store(settings.home / "results.sqlite")
    with RichProgress(console) as progress:
        runner = Runner(settings, store, progress, log=lambda m: console.print(m, highlight=False, markup=False, soft_wrap=True))
        try:
            outcomes = runner.run(specs, benches, seed_list)
        except (MissingDataError, RegistryError, TypeError, ValueError, RuntimeError) as e:
            fail(str(e))
    _print_outcomes(outcomes)
    console.print(f"results store: {store.path}", highlight=False, soft_wrap=True)
    if leaderboard_dir is not None:
        _render(store, leaderboard_dir)


def _fmt(v: Optional[float], measure: str = "") -> str:
    if v is None or v != v:
        return "–"
    return f"{v:.2f}" if measure.startswith("FVR") else f"{v:.3f}"


def _print_outcomes(outcomes: list) -> None:
    by_bench: dict[str, list] = {}
    for o in outcomes:
        if o.record is not None:
            by_bench.setdefault(o.benchmark, []).append(o)
    for bname, items in by_bench.items():
        shown = [m for m in items[0].headline if m in items[0].record.measures]
        t = Table(title=f"{bname}", title_justify="left")
        t.add_column("retriever")
        t.add_column("seed", justify="right")
        for m in shown:
            t.add_column(m, justify="right")
        t.add_column("index s", justify="right")
        t.add_column("search s", justify="right")
        t.add_column("", justify="left")
        for o in items:
            r = o.record
            t.add_row(r.label, str(r.seed), *[_fmt(r.measures[m].mean if m in r.measures else None, m) for m in shown],
                      f"{r.phases.get('index', {}).get('wall_s', 0):.1f}", f"{r.phases.get('search', {}).get('wall_s', 0):.1f}",
                      "cached" if o.status == "skipped" else "")
        out.print(t)


def _render(store: Store, out_dir: Path) -> Path:
    from reports import render_site  # the composition root may import reports

    index = render_site(store, out_dir)
    console.print(f"leaderboard written to {index.resolve()}", highlight=False, soft_wrap=True)
    return index


@app.command()
def leaderboard(
    out_dir: Path = typer.Option(Path("leaderboard"), "--out", "-o", help="Output directory."),
    home: Optional[Path] = typer.Option(None, "--home", envvar="BEYONDSIM_HOME"),
) -> None:
    """Render the static leaderboard site from the results store."""
    with open_store(home) as store:
        _render(store, out_dir)


@list_app.command("retrievers")
def list_retrievers() -> None:
    from .registry import get_retriever_class, params_class
    import dataclasses

    t = Table(title="retrievers")
    t.add_column("id")
    t.add_column("class")
    t.add_column("parameters (defaults)")
    for n in retriever_names():
        try:
            cls = get_retriever_class(n)
            ps = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(params_class(cls)))
            t.add_row(n, f"{cls.__module__}:{cls.__qualname__}", ps)
        except RegistryError as e:
            t.add_row(n, "[red]failed to load[/red]", str(e))
    out.print(t)


def _benchmark_infos(root: Path) -> list[tuple[str, Any, list[str]]]:
    """(id, DatasetInfo, missing files) for every registered benchmark; a family ``x/*`` is shown
    through its on-disk example (``beir/scifact``)."""
    rows = []
    for n in benchmark_names():
        loader, _ = get_benchmark_loader(n)
        info = loader.info(n.replace("/*", "/scifact") if n.endswith("/*") else n)
        rows.append((n, info, missing_files(root, info.files)))
    return rows


@list_app.command("benchmarks")
def list_benchmarks(data_dir: Optional[Path] = typer.Option(None, "--data-dir")) -> None:
    root = default_data_dir(data_dir)
    t = Table(title=f"benchmarks (data dir: {root})")
    for c in ("id", "task", "on disk", "description"):
        t.add_column(c)
    for n, info, missing in _benchmark_infos(root):
        t.add_row(n, info.task, "missing" if missing else "yes", info.description[:90])
    out.print(t)


@list_app.command("suites")
def list_suites() -> None:
    t = Table(title="suites")
    for c in ("suite", "benchmarks", "retrievers", "description"):
        t.add_column(c)
    for n, s in sorted(suites().items()):
        t.add_row(n, ", ".join(s["benchmarks"]), ", ".join(s.get("retrievers", [])), s.get("description", ""))
    out.print(t)


@data_app.command("status")
def data_status(data_dir: Optional[Path] = typer.Option(None, "--data-dir")) -> None:
    """Which benchmarks are on disk and where their files are looked for."""
    root = default_data_dir(data_dir)
    t = Table(title=f"data directory: {root}")
    for c in ("benchmark", "status", "files", "source", "license"):
        t.add_column(c)
    for _, info, missing in _benchmark_infos(root):
        t.add_row(info.name, f"missing {len(missing)}" if missing else "present", "\n".join(info.files),
                  info.source, info.license)
    out.print(t)


def _audit_rows(store: Store, by: str) -> list[dict[str, Any]]:
    groups: dict[tuple, dict[str, Any]] = {}
    for r in store.results():
        key = {"retriever": (r.label,), "benchmark": (r.benchmark,)}.get(by, (r.label, r.benchmark))
        g = groups.setdefault(key, {"retriever": r.label if by != "benchmark" else "*",
                                    "benchmark": r.benchmark if by != "retriever" else "*",
                                    "results": 0, "queries": 0, "offline_s": 0.0, "online_s": 0.0,
                                    "cpu_s": 0.0, "llm_calls": 0, "cache_hits": 0, "prompt_tokens": 0,
                                    "completion_tokens": 0, "usd": 0.0})
        t, c = phase_totals(r.phases), call_totals(r.llm_calls)
        g["results"] += 1
        g["queries"] += t["online_items"]
        for f in ("offline_s", "online_s", "cpu_s"):
            g[f] += t[f] or 0.0
        g["llm_calls"] += c["calls"]
        for f in ("cache_hits", "prompt_tokens", "completion_tokens"):
            g[f] += c[f]
        g["usd"] = None if g["usd"] is None or c["usd"] is None else g["usd"] + c["usd"]
    rows = []
    for g in groups.values():
        g["qps"] = g["queries"] / g["online_s"] if g["online_s"] > 0 else None
        g["usd"] = None if g["usd"] is None else round(g["usd"], 6)
        rows.append(g)
    return sorted(rows, key=lambda x: (x["retriever"], x["benchmark"]))


@app.command()
def audit(
    by: str = typer.Option("pair", "--by", help="Group by retriever, benchmark, or pair (retriever × benchmark)."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json or csv."),
    home: Optional[Path] = typer.Option(None, "--home", envvar="BEYONDSIM_HOME"),
) -> None:
    """Efficiency and API cost per retriever × benchmark: offline/online seconds, LLM calls, tokens, $."""
    if by not in ("pair", "retriever", "benchmark"):
        fail("--by must be retriever, benchmark or pair")
    with open_store(home) as store:
        rows = _audit_rows(store, by)
    if fmt == "json":
        out.print_json(json.dumps(rows))
    elif fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=list(rows[0]) if rows else ["retriever"])
        w.writeheader()
        w.writerows(rows)
        sys.stdout.write(buf.getvalue())
    elif fmt == "table":
        t = Table(title="cost and time audit")
        cols = ["retriever", "benchmark", "results", "offline_s", "online_s", "qps", "cpu_s", "llm_calls",
                "cache_hits", "prompt_tokens", "completion_tokens", "usd"]
        for c in cols:
            t.add_column(c, justify="left" if c in ("retriever", "benchmark") else "right")
        for r in rows:
            cells = []
            for c in cols:
                v = r[c]
                if c == "usd":
                    cells.append("unknown" if v is None else f"${v:.4f}")
                elif isinstance(v, float):
                    cells.append(f"{v:.2f}")
                else:
                    cells.append("–" if v is None else str(v))
            t.add_row(*cells)
        out.print(t)
    else:
        fail("--format must be table, json or csv")


@app.command("export")
def export_cmd(
    path: str = typer.Argument("-", help="Output file (jsonl), directory (trec), or - for stdout (jsonl)."),
    fmt: str = typer.Option("jsonl", "--format", "-f", help="jsonl (every result, per-query measures "
                            "included) or trec (one TREC run file per result, for trec_eval/ir_measures)."),
    benchmark: Optional[str] = typer.Option(None, "--benchmark", "-b"),
    retriever: Optional[str] = typer.Option(None, "--retriever", "-r"),
    home: Optional[Path] = typer.Option(None, "--home", envvar="BEYONDSIM_HOME"),
) -> None:
    """Export stored results: JSON lines (to merge elsewhere with `import`) or TREC run files."""
    with open_store(home) as store:
        if fmt == "trec":
            if path == "-":
                fail("--format trec writes one file per result: give a directory")
            n = _export_trec(store, Path(path), benchmark, retriever)
        elif fmt != "jsonl":
            fail("--format must be jsonl or trec")
        elif path == "-":
            n = store.export_jsonl(sys.stdout, benchmark=benchmark, retriever=retriever)
        else:
            tmp = Path(path).with_name(f".{Path(path).name}.tmp")
            with open(tmp, "w", encoding="utf-8") as f:
                n = store.export_jsonl(f, benchmark=benchmark, retriever=retriever)
            os.replace(tmp, path)
    console.print(f"exported {n} result(s)", highlight=False)


def _export_trec(store: Store, out_dir: Path, benchmark: Optional[str], retriever: Optional[str]) -> int:
    """``<benchmark>__<label>__<spec hash>__seed<N>.trec`` per result (names made file-safe)."""
    import re

    from .types import Run

    out_dir.mkdir(parents=True, exist_ok=True)
    n = 0
    for rec in store.results(benchmark=benchmark, retriever=retriever):
        stem = "__".join(re.sub(r"[^A-Za-z0-9._-]+", "_", x).strip("_") or "x"
                         for x in (rec.benchmark, rec.label, rec.spec_hash, f"seed{rec.seed}"))
        path = out_dir / f"{stem}.trec"
        tmp = path.with_name(f".{path.name}.tmp")
        Run(store.rankings(rec.id)).to_trec(tmp, tag=re.sub(r"\s+", "_", rec.label) or "run")
        os.replace(tmp, path)
        n += 1
    return n


@app.command("import")
def import_cmd(
    path: Path = typer.Argument(..., help="JSON lines written by `beyondsim export`."),
    home: Optional[Path] = typer.Option(None, "--home", envvar="BEYONDSIM_HOME"),
) -> None:
    """Merge results exported elsewhere; refuses results whose benchmark version differs from ours."""
    added = skipped = 0
    with open_store(home) as store, open(path, encoding="utf-8") as f:
        known = {}
        for b in store.benchmarks():
            known.setdefault(b.name, set()).add(b.version)
        try:
            for rec in store.iter_records_jsonl(f, str(path)):
                if rec.benchmark in known and rec.benchmark_version not in known[rec.benchmark]:
                    fail(f"{path}: result {rec.key} was computed on {rec.benchmark} version {rec.benchmark_version}, "
                         f"but this store has version(s) {', '.join(sorted(known[rec.benchmark]))}; refusing to mix")
                if store.has(rec.key):
                    skipped += 1
                    continue
                store.save(rec)
                added += 1
        except ValueError as e:
            fail(str(e))
    console.print(f"imported {added} result(s), {skipped} already present", highlight=False)


@app.command()
def version() -> None:
    """Print the harness version."""
    out.print(__version__)


def main() -> None:  # pragma: no cover
    app()
