"""The ``beyondsim`` command line (DESIGN.md §11). The composition root: the only module of
``harness`` that imports ``reports`` (inside ``leaderboard``)."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import itertools
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
from .data import MissingDataError, default_data_dir, default_home, missing_files
from .ledger import call_totals, phase_totals
from .registry import (RegistryError, benchmark_variants, builder_names, get_benchmark_loader, get_builder, get_trainer,
                       load_benchmark, trainer_names,
                       get_suite, make_spec, retriever_names, suites)
from .runner import DEFAULT_K, Runner, Settings
from .store import Store

app = typer.Typer(add_completion=False, no_args_is_help=True,
                  help="beyondsim — benchmark harness for retrieval beyond semantic similarity.")
list_app = typer.Typer(help="List retrievers, benchmarks or suites.", no_args_is_help=True)
data_app = typer.Typer(help="Benchmark data on disk.", no_args_is_help=True)
llm_app = typer.Typer(help="The LLM behind hyde/deo: the embedded llama.cpp server, settings, cache.",
                      no_args_is_help=True)
app.add_typer(list_app, name="list")
app.add_typer(data_app, name="data")
app.add_typer(llm_app, name="llm")

console = Console(stderr=True)
out = Console(width=None if sys.stdout.isatty() else 160)


def home_dir(home: Optional[Path] = None) -> Path:
    h = default_home(home)
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


def _key_values(items: Optional[list[str]], *, strip_values: bool) -> dict[str, str]:
    """``--param KEY=VALUE`` options (no retriever prefix) as a dict; a malformed one is a ValueError."""
    out: dict[str, str] = {}
    for item in items or []:
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise ValueError(f"bad --param {item!r}; use KEY=VALUE")
        out[k.strip()] = v.strip() if strip_values else v
    return out


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
    max_queries: Optional[int] = typer.Option(None, "--max-queries", help="Score only the first N judged queries "
                                              "(stored as the benchmark '<name>[:N]', apart from full runs)."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Data directory (else BEYONDSIM_DATA, else ../shared/data)."),
    online: bool = typer.Option(False, "--online", help="Allow loaders to fetch missing data from the official source."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda (default: cuda when present)."),
    home: Optional[Path] = typer.Option(None, "--home", envvar="BEYONDSIM_HOME", help="Store and caches (default ~/.beyondsim)."),
    leaderboard_dir: Optional[Path] = typer.Option(None, "--leaderboard", help="Render the leaderboard here afterwards."),
    llm_base_url: Optional[str] = typer.Option(None, "--llm-base-url", help="OpenAI-compatible server for LLM retrievers "
                                               "(else BEYONDSIM_LLM_BASE_URL, else the embedded llama.cpp server). "
                                               "The key comes from BEYONDSIM_LLM_API_KEY or OPENAI_API_KEY."),
    llm_model: Optional[str] = typer.Option(None, "--llm-model", help="Model name on that server (else BEYONDSIM_LLM_MODEL)."),
    max_usd: Optional[float] = typer.Option(None, "--max-usd", help="Stop before the LLM request that could pass this spend."),
    max_calls: Optional[int] = typer.Option(None, "--max-calls", help="Stop before LLM request number N+1 (cache hits are free)."),
    llm_concurrency: Optional[int] = typer.Option(None, "--llm-concurrency", help="Parallel LLM requests (default 4)."),
    prices: Optional[Path] = typer.Option(None, "--prices", help="Extra prices TOML on top of harness/prices.toml."),
) -> None:
    """Run retrievers on benchmarks, score them and store the results. Exit code 3: stopped by the
    LLM budget (finished results are stored; LLM responses are cached, so a rerun resumes)."""
    cfg = _load_config(config)
    benches = list(benchmark or [])
    names = list(retrievers or [])
    if suite:
        try:
            s = get_suite(suite)
        except RegistryError as e:
            fail(str(e))
        root = default_data_dir(data_dir)
        absent: list[str] = []
        for b in s["benchmarks"]:
            if b in benches:
                continue
            if not online and _missing_on_disk(b, root):
                absent.append(b)
                continue
            benches.append(b)
        if absent:
            console.print(f"suite {suite!r}: skipping {len(absent)} benchmark(s) not on disk in {root}: "
                          f"{', '.join(absent)} (see `beyondsim data status`; --online fetches those with an online source)",
                          highlight=False, soft_wrap=True)
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
    llm_settings = _llm_settings(cfg, config, base_url=llm_base_url, model=llm_model, max_usd=max_usd,
                                 max_calls=max_calls, concurrency=llm_concurrency,
                                 prices=str(prices) if prices else None)
    settings = Settings(home=home_dir(home), data_dir=data_dir, k=k, force=force, online=online, device=device,
                        extra_measures=tuple(measure or ()), llm=llm_settings,
                        max_queries=max_queries)
    store = Store(settings.home / "results.sqlite")
    with RichProgress(console) as progress:
        runner = Runner(settings, store, progress, log=lambda m: console.print(m, highlight=False, markup=False, soft_wrap=True))
        try:
            outcomes = runner.run(specs, benches, seed_list)
        except (MissingDataError, RegistryError, TypeError, ValueError, RuntimeError) as e:
            fail(str(e))
        finally:
            runner.close()
    _print_outcomes(outcomes)
    console.print(f"results store: {store.path}", highlight=False, soft_wrap=True)
    if leaderboard_dir is not None:
        _render(store, leaderboard_dir)
    if runner.budget_stop:
        raise typer.Exit(3)


def _llm_settings(cfg: dict[str, Any], path: Optional[Path], **overrides: Any) -> Any:
    from .llm import LLMSettings

    table = cfg.get("llm", {})
    if not isinstance(table, dict):
        fail(f"{path}: [llm] must be a table")
    try:
        return LLMSettings.resolve(table, **overrides)
    except (TypeError, ValueError) as e:
        fail(f"{path or 'LLM settings'}: {e}")


def _missing_on_disk(name: str, root: Path) -> bool:
    try:
        loader, bname = get_benchmark_loader(name)
    except RegistryError:
        return False  # let the run report it
    check = getattr(loader, "missing_files", None)
    return bool(check(bname, root)) if callable(check) else bool(missing_files(root, loader.info(bname).files))


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


@list_app.command("benchmarks")
def list_benchmarks(data_dir: Optional[Path] = typer.Option(None, "--data-dir")) -> None:
    """Every registered benchmark (each split and family member), its task and whether it is on disk."""
    root = default_data_dir(data_dir)
    t = Table(title=f"benchmarks (data dir: {root})")
    for c in ("id", "task", "on disk", "description"):
        t.add_column(c)
    for n, loader, err in benchmark_variants():
        if loader is None:
            t.add_row(n, "?", "[red]failed to load[/red]", err)
            continue
        try:
            info = loader.info(n)
            missing = loader.missing_files(n, root) if hasattr(loader, "missing_files") else \
                missing_files(root, info.files)
        except (ValueError, OSError) as e:
            t.add_row(n, "?", "[red]error[/red]", str(e))
            continue
        t.add_row(n, info.task, "missing" if missing else "yes", info.description[:100])
    out.print(t)


@list_app.command("suites")
def list_suites() -> None:
    t = Table(title="suites")
    for c in ("suite", "benchmarks", "retrievers", "description"):
        t.add_column(c)
    for n, s in sorted(suites().items()):
        t.add_row(n, ", ".join(s["benchmarks"]), ", ".join(s.get("retrievers", [])), s.get("description", ""))
    out.print(t)


_STATE_STYLE = {"present": "green", "unlisted": "yellow", "modified": "red", "missing": "dim", "error": "red"}


def _counts_text(c: dict[str, int]) -> str:
    if not c:
        return "–"
    parts = [f"{c.get('queries', 0):,} q", f"{c.get('documents', 0):,} docs", f"{c.get('judged_pairs', 0):,} judged"]
    if c.get("violating_pairs"):
        parts.append(f"{c['violating_pairs']:,} violating")
    if c.get("queries") != c.get("judged_queries") and "judged_queries" in c:
        parts[0] += f" ({c['judged_queries']:,} judged)"
    return ", ".join(parts)


@data_app.command("status")
def data_status(
    names: list[str] = typer.Argument(None, help="Benchmarks to show (default: every registered one)."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir"),
    recount: bool = typer.Option(False, "--recount", help="Load each present benchmark and count it (slower)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show folders, missing files and sources."),
) -> None:
    """Every benchmark: present or missing, where its files are looked for, checksum, counts,
    license and source. Counts come from the manifest when the checksums match (or --recount)."""
    from .manifest import statuses

    root = default_data_dir(data_dir)
    try:
        rows = statuses(root, names or None, recount=recount)
    except (RegistryError, ValueError) as e:
        fail(str(e))
    if as_json:
        out.print_json(data={"data_dir": str(root), "benchmarks": [r.to_dict() for r in rows]})
        return
    t = Table(title=f"data directory: {root}", title_justify="left", show_lines=verbose)
    cols = ["benchmark", "status", "counts", "sha256", "license"] + (["where", "source"] if verbose else [])
    for c in cols:
        t.add_column(c, overflow="fold")
    for r in rows:
        state = f"[{_STATE_STYLE.get(r.state, 'white')}]{r.state}[/]"
        if r.missing and verbose:
            state += "\n" + "\n".join(f"– {m}" for m in r.missing[:4])
        if r.problems:
            state += "\n" + "\n".join(r.problems[:4])
        counts = _counts_text(r.counts) + (" (manifest)" if r.counts_from == "manifest" and r.state == "missing" else "")
        cells = [r.name, state, counts, r.checksum[:12], r.license]
        if verbose:
            cells += [r.where, r.source]
        t.add_row(*cells)
    out.print(t)
    if not verbose:
        console.print("--verbose shows where files are looked for, missing files and sources; --json gives everything",
                      highlight=False)


@data_app.command("verify")
def data_verify(
    names: list[str] = typer.Argument(None, help="Benchmarks to verify (default: every present one)."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir"),
    recount: bool = typer.Option(False, "--recount", help="Also load each benchmark and compare counts and content version."),
) -> None:
    """Check the files on disk against the manifest's SHA-256 checksums; exit 1 on any mismatch.
    Benchmarks named explicitly must be present."""
    from .manifest import statuses

    root = default_data_dir(data_dir)
    try:
        rows = statuses(root, names or None, recount=recount)
    except (RegistryError, ValueError) as e:
        fail(str(e))
    bad = 0
    for r in rows:
        if r.state == "missing" and not names:
            continue
        ok = r.state == "present"
        bad += not ok
        label = {"present": "OK", "unlisted": "NOT IN MANIFEST", "missing": "MISSING"}.get(r.state, r.state.upper())
        style = "green" if ok else "red"
        out.print(f"[{style}]{label:>16}[/] {r.name}  ({len(r.files)} files{', recounted' if recount and ok else ''})",
                  highlight=False)
        for p in [*r.missing, *r.problems]:
            out.print(f"{'':>18}{p}", highlight=False, markup=False)
    checked = sum(1 for r in rows if r.state != "missing" or names)
    out.print(f"{checked - bad} of {checked} verified", highlight=False)
    if bad:
        raise typer.Exit(1)


@data_app.command("manifest")
def data_manifest(
    names: list[str] = typer.Argument(None, help="Benchmarks to include (default: every present one)."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir"),
    out_file: Optional[Path] = typer.Option(None, "--out", "-o", help="Write here (default: stdout)."),
) -> None:
    """Record the checksums and counts of what the data directory holds now (loads each benchmark)."""
    from .manifest import make_manifest, write_json_atomic

    root = default_data_dir(data_dir)
    try:
        doc = make_manifest(root, names or None)
    except (RegistryError, ValueError) as e:
        fail(str(e))
    if out_file is None:
        sys.stdout.write(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    else:
        write_json_atomic(out_file, doc)
        console.print(f"manifest of {len(doc['benchmarks'])} benchmarks written to {out_file}", highlight=False)


@data_app.command("build-diagnostics")
def build_diagnostics(
    corpus: str = typer.Option("beir/scifact", "--corpus", help="Benchmark (or BEIR folder path) whose corpus to build from."),
    sets: list[str] = typer.Option(None, "--set", help="Which sets to build (repeatable; default: all builders)."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Output folder; each set goes to <out>/<set>/ "
                                           "(default: $BEYONDSIM_HOME/diagnostics, where diag/<set> finds it)."),
    seed: int = typer.Option(0, "--seed"),
    max_queries: int = typer.Option(104, "--max-queries", help="Queries per set (0 = every candidate)."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir"),
    online: bool = typer.Option(False, "--online", help="Allow fetching the corpus and WordNet from their official sources."),
    home: Optional[Path] = typer.Option(None, "--home", envvar="BEYONDSIM_HOME"),
) -> None:
    """Build the CoDeR antonym / negation / exclusion diagnostic sets from any corpus."""
    root = default_data_dir(data_dir)
    target = out_dir or home_dir(home) / "diagnostics"
    try:
        chosen = list(sets) if sets else builder_names()
        builders = {n: get_builder(n) for n in chosen}
        bench = load_benchmark(corpus, root, online)
    except (RegistryError, MissingDataError, ValueError) as e:
        fail(str(e))
    source = f"{bench.name} (version {bench.version}, {len(bench.corpus):,} documents)"
    t = Table(title=f"diagnostic sets built from {bench.name}", title_justify="left")
    for c in ("set", "queries", "passages", "source docs", "sat / neutral / viol", "written to"):
        t.add_column(c)
    for n, build in builders.items():
        try:
            built = build(bench.corpus, seed=seed, max_queries=max_queries or None, source=source,
                          data_dir=root, online=online)
        except (LookupError, ValueError, OSError) as e:  # WordNet missing, too few candidates, I/O
            fail(f"building {n!r}: {e}")
        folder = Path(target) / n
        built.write(folder)
        st = built.stats()
        grades = st.get("judged", {})
        t.add_row(n, str(st.get("queries")), str(st.get("passages")), str(st.get("source_documents", "")),
                  " / ".join(str(grades.get(g, "")) for g in ("2", "1", "0")), str(folder))
    out.print(t)
    console.print("run them by name (diag/<set>) when written to the default folder, or by path "
                  "(beyondsim run bm25 --benchmark <folder>)", highlight=False)


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
        g["total_s"] = g["offline_s"] + g["online_s"]
        g["tokens_k"] = (g["prompt_tokens"] + g["completion_tokens"]) / 1000
        g["usd"] = None if g["usd"] is None else round(g["usd"], 6)
        rows.append(g)
    return sorted(rows, key=lambda x: (x["retriever"], x["benchmark"]))


@app.command()
def audit(
    by: str = typer.Option("pair", "--by", help="Group by retriever, benchmark, or pair (retriever × benchmark)."),
    fmt: str = typer.Option("table", "--format", "-f", help="table, json or csv."),
    view: str = typer.Option("full", "--view", help="full, or paper: CoDeR Table 7's columns (setting, method, "
                             "time s = offline + online, cost $, tokens K)."),
    home: Optional[Path] = typer.Option(None, "--home", envvar="BEYONDSIM_HOME"),
) -> None:
    """Efficiency and API cost per retriever × benchmark: offline/online seconds, LLM calls, cache hits,
    prompt/completion tokens and $ (new spend; cache hits cost $0; "unknown" when a model has no price)."""
    if by not in ("pair", "retriever", "benchmark"):
        fail("--by must be retriever, benchmark or pair")
    if view not in ("full", "paper"):
        fail("--view must be full or paper")
    with open_store(home) as store:
        rows = _audit_rows(store, by)
    if view == "paper":
        rows = [{"setting": r["benchmark"], "method": r["retriever"], "time_s": round(r["total_s"], 2),
                 "usd": r["usd"], "tokens_k": round(r["tokens_k"], 2)}
                for r in sorted(rows, key=lambda x: (x["benchmark"], x["retriever"]))]
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
        cols = (["setting", "method", "time_s", "usd", "tokens_k"] if view == "paper" else
                ["retriever", "benchmark", "results", "offline_s", "online_s", "qps", "cpu_s", "llm_calls",
                 "cache_hits", "prompt_tokens", "completion_tokens", "usd"])
        for c in cols:
            t.add_column(c, justify="left" if c in ("retriever", "benchmark", "setting", "method") else "right")
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


@app.command()
def tune(
    retriever: str = typer.Argument(..., help="Retriever id (e.g. nnn-fix, mmr)."),
    benchmark: str = typer.Option(..., "--benchmark", "-b", help="Benchmark id; its :dev split is used."),
    grid: list[str] = typer.Option(None, "--grid", "-g", help="KEY=V1,V2,... (repeatable): values to try."),
    param: list[str] = typer.Option(None, "--param", "-p", help="KEY=VALUE held fixed (repeatable)."),
    measure: str = typer.Option("Comp@5", "--measure", "-m", help="Measure to optimise on the validation split."),
    split: str = typer.Option("dev", "--split", help="Validation split name."),
    seed: int = typer.Option(0, "--seed"),
    out_file: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the best setting as a --config TOML table."),
    label: Optional[str] = typer.Option(None, "--label", help="Name of the tuned variant in the TOML (default: the retriever id)."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir"),
    device: Optional[str] = typer.Option(None, "--device"),
    home: Optional[Path] = typer.Option(None, "--home", envvar="BEYONDSIM_HOME"),
) -> None:
    """Grid-search retriever parameters on the validation split (never the test split) and write
    the best setting as TOML for `beyondsim run --config`. Grid points are not stored as results."""
    from .tuning import grid_search, parse_grid, tuning_split

    try:
        g = parse_grid(list(grid or []))
        fixed = _key_values(param, strip_values=True)
        bname = tuning_split(benchmark, split)
    except ValueError as e:
        fail(str(e))
    settings = Settings(home=home_dir(home), data_dir=data_dir, device=device, bootstrap=0)
    t = Table(title=f"{retriever} on {bname}: {measure} over {len(list(itertools.product(*g.values())))} grid points",
              title_justify="left")
    for c in (*g, measure, "search s"):
        t.add_column(c, justify="right")
    with Store(settings.home / "results.sqlite") as store, RichProgress(console) as progress:
        runner = Runner(settings, store, progress, log=lambda m: None)
        try:
            result = grid_search(runner, retriever, bname, g, measure, fixed=fixed, seed=seed,
                                 on_point=lambda p: t.add_row(*[str(v) for v in p.params.values()],
                                                              _fmt(p.value, measure), f"{p.search_s:.1f}"))
        except (MissingDataError, RegistryError, TypeError, ValueError, RuntimeError) as e:
            fail(str(e))
    out.print(t)
    best = ", ".join(f"{k}={v}" for k, v in result.best.params.items())
    out.print(f"best on {result.benchmark}: {best} ({measure} = {_fmt(result.best.value, measure)})", highlight=False)
    log_dir = settings.home / "tuning"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{retriever}__{result.benchmark.replace('/', '_').replace(':', '_')}.json"
    from .manifest import write_json_atomic

    write_json_atomic(log_path, result.to_dict())
    if out_file is not None:
        tmp = Path(str(out_file) + ".tmp")
        tmp.write_text(result.to_toml(label), encoding="utf-8")
        os.replace(tmp, out_file)
        out.print(f"best setting written to {out_file} (use: beyondsim run {label or retriever} --config {out_file})",
                  highlight=False)
    console.print(f"every grid point: {log_path}", highlight=False)


@app.command()
def sweep(
    retriever: str = typer.Argument(..., help="Retriever id (e.g. coder-seq, coder-union)."),
    benchmark: list[str] = typer.Option(..., "--benchmark", "-b", help="Benchmark id (repeatable); any split."),
    grid: list[str] = typer.Option(None, "--grid", "-g", help="KEY=V1,V2,... or KEY=START:STOP:STEP (repeatable)."),
    param: list[str] = typer.Option(None, "--param", "-p", help="KEY=VALUE held fixed (repeatable)."),
    show: list[str] = typer.Option(None, "--show", "-m", help="Measures to print (default: R@10 and FVR@10)."),
    seed: int = typer.Option(0, "--seed"),
    k: int = typer.Option(DEFAULT_K, "--k", help="Ranking depth evaluated."),
    out_file: Optional[Path] = typer.Option(None, "--out", "-o", help="Also write the sweep as JSON here."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir"),
    device: Optional[str] = typer.Option(None, "--device"),
    home: Optional[Path] = typer.Option(None, "--home", envvar="BEYONDSIM_HOME"),
) -> None:
    """Score a grid of parameters (CoDeR's appendix F sensitivity heatmaps: alpha × tau, alpha ×
    percentile) and keep every point's measures in the results store's sweep table for the reports.
    Sweep points are sensitivity data, not leaderboard results."""
    from .tuning import parse_grid, sweep as run_sweep

    try:
        g = parse_grid(list(grid or []))
        fixed = _key_values(param, strip_values=True)
    except ValueError as e:
        fail(str(e))
    shown = list(show or ["R@10", "FVR@10"])
    settings = Settings(home=home_dir(home), data_dir=data_dir, device=device, bootstrap=0, k=k)
    n_points = len(list(itertools.product(*g.values())))
    with Store(settings.home / "results.sqlite") as store, RichProgress(console) as progress:
        runner = Runner(settings, store, progress, log=lambda m: None)
        for bname in benchmark:
            t = Table(title=f"{retriever} on {bname}: {n_points} grid points", title_justify="left")
            for c in (*g, *shown, "search s"):
                t.add_column(c, justify="right")
            try:
                data = run_sweep(runner, retriever, bname, g, fixed=fixed, seed=seed,
                                 on_point=lambda p: t.add_row(*[str(v) for v in p.params.values()],
                                                              *[_fmt(p.measures.get(m), m) for m in shown],
                                                              f"{p.search_s:.1f}"))
            except (MissingDataError, RegistryError, TypeError, ValueError, RuntimeError) as e:
                fail(str(e))
            finally:
                runner.close()
            key = store.save_sweep(data)
            out.print(t)
            console.print(f"sweep stored in {store.path} (sweep {key})", highlight=False, soft_wrap=True)
            if out_file is not None:
                from .manifest import write_json_atomic

                target = out_file if len(benchmark) == 1 else out_file.with_name(
                    f"{out_file.stem}__{data['benchmark'].replace('/', '_').replace(':', '_')}{out_file.suffix}")
                write_json_atomic(target, data)


@app.command()
def breakdown(
    benchmark: str = typer.Argument(..., help="Benchmark name as stored (e.g. negconstraint)."),
    by: Optional[str] = typer.Option(None, "--by", help="Query metadata key to group by (default: the first one stored)."),
    measure: list[str] = typer.Option(None, "--measure", "-m", help="Measures to show (default: the benchmark's defaults)."),
    retriever: Optional[str] = typer.Option(None, "--retriever", "-r"),
    fmt: str = typer.Option("table", "--format", "-f", help="table or json."),
    home: Optional[Path] = typer.Option(None, "--home", envvar="BEYONDSIM_HOME"),
) -> None:
    """Per-group means of stored per-query measures (e.g. NegConstraint by query category)."""
    from .metrics import group_by

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
        t.add_row(label, str(seed_), group, str(n), *[_fmt(ms[m]["mean"], m) if m in ms else "–" for m in measures_shown])
    out.print(t)


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


@llm_app.command("serve")
def llm_serve(
    port: int = typer.Option(8080, "--port", help="Port on 127.0.0.1."),
    model_path: Optional[Path] = typer.Option(None, "--model-path", help="A GGUF file (default: the packaged Gemma-3-270M)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads (default: all)."),
    n_ctx: int = typer.Option(4096, "--n-ctx", help="Context window."),
    home: Optional[Path] = typer.Option(None, "--home", envvar="BEYONDSIM_HOME"),
) -> None:
    """Serve the embedded LLM (llama.cpp, Gemma-3-270M) until Ctrl-C; point runs at it with
    --llm-base-url http://127.0.0.1:PORT/v1 to share one server between runs."""
    import time

    from .llm import EmbeddedServer, LLMError, LLMSettings

    if home is not None:
        os.environ["BEYONDSIM_HOME"] = str(home_dir(home))
    srv = EmbeddedServer(LLMSettings(embedded_threads=threads, embedded_ctx=n_ctx), model_path=model_path, port=port)
    try:
        url = srv.start()
    except LLMError as e:
        fail(str(e))
    console.print(f"serving {srv.model_path} at {url} (model name for --llm-model: "
                  f"gemma-3-270m-q4_k_m); log: {srv.log_path}. Ctrl-C stops it.", highlight=False, soft_wrap=True)
    try:
        while srv.proc is not None and srv.proc.poll() is None:
            time.sleep(1)
        fail(f"the server exited; see {srv.log_path}", code=1)
    except KeyboardInterrupt:
        pass
    finally:
        srv.stop()


@llm_app.command("info")
def llm_info(
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="Run config with an [llm] table."),
    llm_base_url: Optional[str] = typer.Option(None, "--llm-base-url"),
    llm_model: Optional[str] = typer.Option(None, "--llm-model"),
    prices: Optional[Path] = typer.Option(None, "--prices"),
    ping: bool = typer.Option(False, "--ping", help="Send one short request (uncached) and report its latency."),
    home: Optional[Path] = typer.Option(None, "--home", envvar="BEYONDSIM_HOME"),
) -> None:
    """The LLM settings a run would use (never the key), its price, and the response cache."""
    from .ledger import Ledger
    from .llm import LLMClient, LLMError

    cfg = _load_config(config)
    settings = _llm_settings(cfg, config, base_url=llm_base_url, model=llm_model, prices=str(prices) if prices else None)
    h = home_dir(home)
    try:
        client = LLMClient(settings, cache_path=h / "cache" / "llm.sqlite")
    except LLMError as e:
        fail(str(e))
    with client:
        info = client.describe() | {"cache": client.cache.stats() if client.cache else None}
        if ping:
            client.cache = None
            led = Ledger()
            try:
                c = client.chat("Reply with the single word: ready", led, max_tokens=8, purpose="ping")
            except LLMError as e:
                fail(str(e), code=1)
            info["ping"] = {"reply": c.texts[0] if c.texts else "", "latency_s": round(led.llm_calls[0].latency_s, 3),
                            "prompt_tokens": c.prompt_tokens, "completion_tokens": c.completion_tokens, "usd": c.usd}
    out.print_json(json.dumps(info, default=str))


@app.command()
def train(
    name: str = typer.Argument(..., help="What to train (see `beyondsim list trainers`): coder."),
    param: list[str] = typer.Option(None, "--param", "-p", help="KEY=VALUE training parameter (repeatable)."),
    out_dir: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the artifact here (default: "
                                           "$BEYONDSIM_HOME/models/<name>/<config hash>, which retrievers find)."),
    force: bool = typer.Option(False, "--force", help="Retrain even when the artifact exists."),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir"),
    online: bool = typer.Option(False, "--online", help="Allow loaders to fetch missing data."),
    device: Optional[str] = typer.Option(None, "--device", help="cpu or cuda (default: cuda when present)."),
    home: Optional[Path] = typer.Option(None, "--home", envvar="BEYONDSIM_HOME"),
) -> None:
    """Train a model artifact (CoDeR's compatibility encoder) and print where it is and its card."""
    try:
        trainer = get_trainer(name)
    except RegistryError as e:
        fail(str(e))
    try:
        params = _key_values(param, strip_values=False)  # a query prefix keeps its trailing space
    except ValueError as e:
        fail(str(e))
    root = default_data_dir(data_dir)
    with RichProgress(console) as progress:
        try:
            path, card = trainer.train(params, home=home_dir(home), data_dir=root, load_benchmark=lambda n: load_benchmark(n, root, online),
                                       device=device, progress=progress,
                                       log=lambda m: console.print(m, highlight=False, markup=False, soft_wrap=True),
                                       out_dir=out_dir, force=force)
        except (MissingDataError, RegistryError, FileNotFoundError, ValueError, RuntimeError) as e:
            fail(str(e))
    t = Table(title=f"{name}: {path}", title_justify="left", show_header=False)
    for key in ("base_model", "pooling", "query_prefix", "seed", "steps", "wall_s", "device"):
        if key in card:
            t.add_row(key, repr(card[key]) if key == "query_prefix" else str(card[key]))
    for st in card.get("stages", []):
        curve = st.get("loss_curve") or []
        t.add_row(st.get("name", "?"), f"{st.get('triplets', 0):,} triplets, {st.get('steps', 0)} steps, "
                  f"{st.get('wall_s', 0):.0f} s, loss {curve[0] if curve else '-'} → {curve[-1] if curve else '-'}")
    out.print(t)
    out.print(f"use it: beyondsim run coder-seq -p compat_model={path} -b nevir", highlight=False, soft_wrap=True)


@list_app.command("trainers")
def list_trainers() -> None:
    """Trainable artifacts (`beyondsim train NAME`)."""
    t = Table("name", "description", "parameters")
    for n in trainer_names():
        try:
            tr = get_trainer(n)
        except RegistryError as e:
            t.add_row(n, f"[red]{e}[/red]", "")
            continue
        fields = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(tr.Params))
        t.add_row(n, getattr(tr, "description", ""), fields)
    out.print(t)


@app.command()
def version() -> None:
    """Print the harness version."""
    out.print(__version__)


def main() -> None:  # pragma: no cover
    app()
