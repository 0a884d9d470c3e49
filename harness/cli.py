"""The ``beyondsim`` command line (DESIGN.md §11). The composition root: the only module of
``harness`` that imports ``reports`` (inside ``leaderboard``)."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import os
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Annotated, Any, Callable, Iterator, Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from . import __version__
from .data import MissingDataError, default_data_dir, default_home, missing_files
from .measures import format_value
from .cli_options import (DEFAULT_SITE, BenchmarkFilterOpt, DataDirOpt, DeviceOpt, HomeOpt, LlmBaseUrlOpt, LlmConcurrencyOpt,
                          LlmModelOpt, MaxCallsOpt, MaxQueriesOpt, MaxUsdOpt, OnlineOpt, PricesOpt, RetrieverFilterOpt,
                          SeedOpt, data_dir_option, online_option, prices_option)
from .registry import (RegistryError, artifact_users, benchmark_variants, builder_names, command_apps,
                       get_benchmark_loader, get_builder, get_retriever_class, get_suite, get_trainer, load_benchmark,
                       make_spec, params_class, parse_key_values, retriever_info, retriever_names,
                       stored_benchmark_name, suites, trainer_names)
from .runner import DEFAULT_K, Runner, Settings
from .store import Store
from .cli_reference import reference_app
from .submit import SUBMIT_DEFAULT_SUITE, SubmissionError, check_submission, origin, submission_params, submit_seeds

# Help texts are plain text: brackets such as ``[retrievers.NAME]`` are words, not console markup.
_TYPER = {"no_args_is_help": True, "rich_markup_mode": None}
app = typer.Typer(add_completion=False, help="beyondsim — benchmark harness for retrieval beyond semantic similarity.",
                  **_TYPER)
list_app = typer.Typer(help="List retrievers, benchmarks or suites.", **_TYPER)
data_app = typer.Typer(help="Benchmark data on disk.", **_TYPER)
llm_app = typer.Typer(help="The LLM behind hyde/deo: the embedded llama.cpp server, settings, cache.", **_TYPER)
app.add_typer(list_app, name="list")
app.add_typer(data_app, name="data")
app.add_typer(llm_app, name="llm")
app.add_typer(reference_app, name="reference")

# Every string printed goes out as plain text: labels, queries, file names and errors may hold
# square brackets, which must never be read as console markup. Styles come from Text objects.
console = Console(stderr=True, markup=False, highlight=False, emoji=False)
out = Console(width=None if sys.stdout.isatty() else 160, markup=False, highlight=False, emoji=False)


def home_dir(home: Optional[Path] = None) -> Path:
    h = default_home(home)
    h.mkdir(parents=True, exist_ok=True)
    return h


def open_store(home: Optional[Path] = None) -> Store:
    return Store(home_dir(home) / "results.sqlite")


class RichProgress:
    """Rich progress bars for every loop that reports through ``ctx.progress``."""

    def __init__(self, console: Console):
        self._p = Progress(TextColumn("{task.description}", style="bold", markup=False), BarColumn(),
                           MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(), console=console,
                           transient=True)

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


class LineProgress:
    """Progress for a log file or a pipe: every ``interval`` seconds one plain line per loop that is
    still running (``dense: encoding corpus: 1,024/5,183 (20%), 31 s``), and a closing line for a
    loop that outlived one interval, so a long step is never silent."""

    def __init__(self, console: Console, interval: float = 10.0):
        self._console, self._interval = console, interval
        self._tasks: dict[int, list[Any]] = {}  # id -> [description, total, done, start]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._ids = itertools.count()

    def __enter__(self) -> "LineProgress":
        self._thread = threading.Thread(target=self._tick, name="beyondsim-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @staticmethod
    def _line(description: str, total: int, done: int, elapsed: float) -> str:
        share = f" ({100 * done / total:.0f}%)" if total else ""
        return f"{description}: {done:,}/{total:,}{share}, {elapsed:.0f} s"

    def _tick(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                lines = [self._line(d, t, n, time.monotonic() - t0) for d, t, n, t0 in self._tasks.values()]
            for line in lines:
                self._console.print(line, soft_wrap=True)

    @contextlib.contextmanager
    def track(self, total: int, description: str) -> Iterator[Callable[[int], None]]:
        tid = next(self._ids)
        state = [description, total, 0, time.monotonic()]
        with self._lock:
            self._tasks[tid] = state

        def advance(n: int = 1) -> None:
            with self._lock:
                state[2] += n

        try:
            yield advance
        finally:
            with self._lock:
                del self._tasks[tid]
            elapsed = time.monotonic() - state[3]
            if elapsed >= self._interval:
                self._console.print(self._line(description, total, state[2], elapsed) + " (done)", soft_wrap=True)


def progress_for(console: Console) -> "RichProgress | LineProgress":
    """Bars on a terminal; plain lines every few seconds in a log or a pipe
    (``BEYONDSIM_PROGRESS_INTERVAL`` seconds, default 10)."""
    if console.is_terminal:
        return RichProgress(console)
    try:
        interval = float(os.environ.get("BEYONDSIM_PROGRESS_INTERVAL", "10"))
    except ValueError:
        interval = 10.0
    return LineProgress(console, max(interval, 0.05))


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


# --ray: run the jobs on a Ray cluster (harness.distributed, imported only when it is given)
RayOpt = Annotated[Optional[str], typer.Option(
    "--ray", metavar="local|ADDRESS", help="Run every (retriever, benchmark, seed) job as a Ray task: 'local' starts a "
    "cluster on this machine, ADDRESS (host:port, or auto) joins a running one. Results are stored here as they "
    "arrive; --home and the data directory must be paths every node sees. Needs pip install 'beyondsim[ray]'.")]


def _make_runner(settings: Settings, store: Store, progress: Any, log: Callable[[str], None],
                 ray: Optional[str] = None) -> Runner:
    """The local runner, or with ``ray`` one that sends the jobs to that Ray cluster."""
    if ray is None:
        return Runner(settings, store, progress, log=log)
    from .distributed import RayRunner, RayUnavailable

    try:
        return RayRunner(settings, store, progress, log=log, address=ray)
    except RayUnavailable as e:
        store.close()
        fail(str(e))
        raise  # unreachable: fail exits


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
    max_queries: MaxQueriesOpt = None,
    data_dir: DataDirOpt = None,
    online: OnlineOpt = False,
    device: DeviceOpt = None,
    home: HomeOpt = None,
    leaderboard_dir: Optional[Path] = typer.Option(None, "--leaderboard", help="Render the leaderboard here afterwards."),
    llm_base_url: LlmBaseUrlOpt = None,
    llm_model: LlmModelOpt = None,
    max_usd: MaxUsdOpt = None,
    max_calls: MaxCallsOpt = None,
    llm_concurrency: LlmConcurrencyOpt = None,
    prices: PricesOpt = None,
    ray: RayOpt = None,
) -> None:
    """Run retrievers on benchmarks, score them and store the results. Exit code 3: stopped by the
    LLM budget (finished results are stored; LLM responses are cached, so a rerun resumes)."""
    cfg = _load_config(config)
    benches = list(benchmark or [])
    names = list(retrievers or [])
    if suite:
        s = _add_suite_benchmarks(suite, benches, data_dir, online)
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
    outcomes, store, budget_stop = _run_and_store(settings, specs, benches, seed_list, ray)
    with store:
        if leaderboard_dir is not None:
            _render(store, leaderboard_dir)
    if budget_stop:
        raise typer.Exit(3)


def _add_suite_benchmarks(suite: str, benches: list[str], data_dir: Optional[Path], online: bool) -> dict[str, Any]:
    """Append the benchmarks of ``suite`` to ``benches`` (those absent on disk are skipped with a
    note unless ``online``); return the suite."""
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
    return s


def _run_and_store(settings: Settings, specs: list, benches: list[str], seeds: list[int],
                   ray: Optional[str] = None) -> tuple[list, Store, Optional[str]]:
    """Run every spec on every benchmark and seed into the results store (existing keys are
    skipped unless ``settings.force``), print a table per benchmark, and return the outcomes, the
    open store and why the LLM budget stopped the run (``None`` when it did not)."""
    store = Store(settings.home / "results.sqlite")
    with progress_for(console) as progress:
        runner = _make_runner(settings, store, progress,
                              lambda m: console.print(m, highlight=False, markup=False, soft_wrap=True), ray)
        try:
            outcomes = runner.run(specs, benches, seeds)
        except (MissingDataError, RegistryError, TypeError, ValueError, RuntimeError) as e:
            store.close()
            fail(str(e))
        finally:
            runner.close()
    _print_outcomes(outcomes)
    console.print(f"results store: {store.path}", highlight=False, soft_wrap=True)
    return outcomes, store, runner.budget_stop


@app.command()
def submit(
    retriever: str = typer.Argument(..., metavar="SPEC", help="A registered retriever name (entry point group "
                                    "beyondsim.retrievers, e.g. from your package) or module:Class."),
    suite: Optional[str] = typer.Option(None, "--suite", "-s", help=f"Suite to run (default {SUBMIT_DEFAULT_SUITE} "
                                        "when no --benchmark is given); benchmarks absent on disk are skipped."),
    benchmark: list[str] = typer.Option(None, "--benchmark", "-b", help="Benchmark id or BEIR folder (repeatable), "
                                        "instead of or beside --suite."),
    config: Optional[Path] = typer.Option(None, "--config", "-c", help="TOML of parameters: a 'params' table, "
                                          "run's 'retrievers.NAME' table, or top-level keys; an 'llm' table as in run."),
    param: list[str] = typer.Option(None, "--param", "-p", help="KEY=VALUE parameter (repeatable)."),
    seeds: Optional[int] = typer.Option(None, "--seeds", help="Run seeds 0..N-1 (default: 3 for retrievers with "
                                        "fit or prepare, else 1)."),
    label: Optional[str] = typer.Option(None, "--label", help="Name shown on the leaderboard (default: SPEC)."),
    out_dir: Path = typer.Option(DEFAULT_SITE, "--out", "-o", help="Site directory (default ./leaderboard, "
                                 "where `leaderboard` and `make demo` write it too)."),
    max_queries: MaxQueriesOpt = None,
    data_dir: DataDirOpt = None,
    online: OnlineOpt = False,
    device: DeviceOpt = None,
    home: HomeOpt = None,
    llm_base_url: LlmBaseUrlOpt = None,
    llm_model: LlmModelOpt = None,
    max_usd: MaxUsdOpt = None,
    ray: RayOpt = None,
) -> None:
    """Check a retriever against the protocol, run it on a suite with the standard seeds, store the
    results (existing ones are kept, so a rerun resumes) and regenerate the leaderboard site.
    Exit code 2: the retriever cannot run (every problem is listed; nothing is loaded or stored)."""
    cfg = _load_config(config)
    shown = label or retriever
    try:
        cls, spec = check_submission(retriever, submission_params(cfg, config, (retriever, shown), param or []), shown)
    except SubmissionError as e:
        fail(str(e))
    if seeds is not None and seeds < 1:
        fail("--seeds must be at least 1")
    seed_list = list(range(seeds)) if seeds is not None else list(submit_seeds(cls))
    benches = list(benchmark or [])
    if suite or not benches:
        _add_suite_benchmarks(suite or SUBMIT_DEFAULT_SUITE, benches, data_dir, online)
    if not benches:
        fail(f"no benchmark of suite {suite or SUBMIT_DEFAULT_SUITE!r} is on disk (see `beyondsim data status`)")
    llm = _llm_settings(cfg, config, base_url=llm_base_url, model=llm_model, max_usd=max_usd)
    settings = Settings(home=home_dir(home), data_dir=data_dir, online=online, device=device, llm=llm,
                        max_queries=max_queries)
    console.print(f"submitting {spec.display} ({origin(cls)}, spec {spec.hash}) on "
                  f"{len(benches)} benchmark(s) with seed(s) {', '.join(map(str, seed_list))}",
                  highlight=False, soft_wrap=True)
    outcomes, store, budget_stop = _run_and_store(settings, [spec], benches, seed_list, ray)
    with store:
        index = _render(store, out_dir)
    done = sum(o.status == "done" for o in outcomes)
    kept = sum(o.status == "skipped" for o in outcomes)
    out.print(f"submitted {spec.display}: {done} new result(s), {kept} already stored; site: {index.resolve()}",
              highlight=False, soft_wrap=True)
    if budget_stop:
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
            t.add_row(r.label, str(r.seed), *[format_value(m, r.measures[m].mean if m in r.measures else None) for m in shown],
                      f"{r.phases.get('index', {}).get('wall_s', 0):.1f}", f"{r.phases.get('search', {}).get('wall_s', 0):.1f}",
                      "cached" if o.status == "skipped" else "")
        out.print(t)


REFERENCE_ENV = "BEYONDSIM_REFERENCE"
"""``0``/``false``/``off``/``no``: the shipped reference results stay out of the leaderboard unless
``--reference`` is given (a test suite, or a board of one's own rows only)."""


def reference_default() -> bool:
    """Whether the leaderboard brings in the shipped reference results when not told (default yes)."""
    return os.environ.get(REFERENCE_ENV, "1").strip().lower() not in ("0", "false", "off", "no")


def _render(store: Store, out_dir: Path, fmt: str = "html", *, reference: Optional[bool] = None,
            data_dir: Optional[Path] = None) -> Path:
    """Write the leaderboard in ``fmt``: the site (return its ``index.html``) or the tables of
    :mod:`reports.tables` into ``out_dir`` (return it), or to stdout when ``out_dir`` is ``-``.
    With ``reference`` the shipped reference results are brought into the store first (once per
    bundle) and shown; without, they are left out of the pages (and stay in the store). ``None``:
    :func:`reference_default`."""
    from reports import compare, render_site  # the composition root may import reports
    from reports.tables import combined, write_tables

    from .cli_reference import describe, import_bundle
    from .reference import reference_filter
    from .registry import RegistryError, reference_files

    if reference is None:
        reference = reference_default()
    if reference:
        try:
            bundle = reference_files().get("bundle")
        except RegistryError as e:
            bundle = None
            console.print(Text("warning: ", style="bold yellow") + Text(str(e)), soft_wrap=True)
        if bundle is not None and bundle.exists():
            report = import_bundle(store, bundle, default_data_dir(data_dir))
            if report is not None and not report.skipped:
                console.print(describe(report), soft_wrap=True)
    include = reference_filter(reference)
    if fmt == "html":
        index = render_site(store, out_dir, include=include)
        console.print(f"leaderboard written to {index.resolve()}", highlight=False, soft_wrap=True)
        return index
    board = compare(store, include=include)
    if str(out_dir) == "-":
        sys.stdout.write(combined(board, fmt))
        return out_dir
    paths = write_tables(board, fmt, out_dir)
    console.print(f"{len(paths)} {fmt} table{'s' if len(paths) != 1 else ''} written to {out_dir.resolve()}",
                  highlight=False, soft_wrap=True)
    return out_dir


@app.command()
def leaderboard(
    out_dir: Path = typer.Option(DEFAULT_SITE, "--out", "-o",
                                 help="Output directory (default ./leaderboard); - writes md, latex or json to stdout."),
    fmt: str = typer.Option("html", "--format", "-f", help="html (the static site), md, latex or json."),
    reference: Optional[bool] = typer.Option(None, "--reference/--no-reference", help="Show the reference results "
                                             "shipped with the project beside the store's own (imported once per "
                                             f"bundle; default: yes, unless {REFERENCE_ENV}=0)."),
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
    if fmt not in ("html", "md", "latex", "json"):
        fail("--format must be html, md, latex or json")
    if fmt == "html" and str(out_dir) == "-":
        fail("--format html writes a folder of pages: give a directory")
    with open_store(home) as store:
        _render(store, out_dir, fmt, reference=reference, data_dir=data_dir)


@list_app.command("retrievers")
def list_retrievers() -> None:
    """Every registered retriever: its family, what it does, its paper, its class and parameters."""
    t = Table(title="retrievers")
    t.add_column("id", no_wrap=True)
    t.add_column("family", max_width=16)
    for c in ("description", "paper", "class", "parameters (defaults)"):
        t.add_column(c, overflow="fold")
    for n in retriever_names():
        try:
            cls = get_retriever_class(n)
            ps = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(params_class(cls)))
        except RegistryError as e:
            t.add_row(n, "", "", "", Text("failed to load", style="red"), str(e))
            continue
        info = retriever_info(cls)
        t.add_row(n, info.family, info.description, info.reference, origin(cls), ps)
    out.print(t)


@list_app.command("benchmarks")
def list_benchmarks(data_dir: DataDirOpt = None) -> None:
    """Every registered benchmark (each split and family member), its task and whether it is on disk."""
    root = default_data_dir(data_dir)
    t = Table(title=f"benchmarks (data dir: {root})")
    for c in ("id", "task", "on disk", "description"):
        t.add_column(c)
    for n, loader, err in benchmark_variants():
        if loader is None:
            t.add_row(n, "?", Text("failed to load", style="red"), err)
            continue
        try:
            info = loader.info(n)
            missing = loader.missing_files(n, root) if hasattr(loader, "missing_files") else \
                missing_files(root, info.files)
        except (ValueError, OSError) as e:
            t.add_row(n, "?", Text("error", style="red"), str(e))
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
    data_dir: DataDirOpt = None,
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
        state = Text(r.state, style=_STATE_STYLE.get(r.state, "white"))
        if r.missing and verbose:
            state.append("\n" + "\n".join(f"– {m}" for m in r.missing[:4]))
        if r.problems:
            state.append("\n" + "\n".join(r.problems[:4]))
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
    data_dir: DataDirOpt = None,
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
        out.print(Text(f"{label:>16}", style=style) + Text(f" {r.name}  ({len(r.files)} files"
                                                            f"{', recounted' if recount and ok else ''})"))
        for p in [*r.missing, *r.problems]:
            out.print(f"{'':>18}{p}")
    checked = sum(1 for r in rows if r.state != "missing" or names)
    out.print(f"{checked - bad} of {checked} verified", highlight=False)
    if bad:
        raise typer.Exit(1)


@data_app.command("manifest")
def data_manifest(
    names: list[str] = typer.Argument(None, help="Benchmarks to include (default: every present one)."),
    data_dir: DataDirOpt = None,
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


@data_app.command("check")
def data_check(
    folder: Path = typer.Argument(..., help="A benchmark folder: BEIR layout or diagnostic layout."),
    split: str = typer.Option("test", "--split", help="The qrels split to read (qrels/<split>.tsv)."),
) -> None:
    """Validate a benchmark folder: the layout it is read as, its counts, the task it is scored as,
    the measures a run computes, and what is wrong (file:line). Exit 1 when it does not load."""
    from .data import DataError, benchmark_warnings
    from .runner import measures_for

    path = folder.expanduser().resolve()
    if not path.is_dir():
        fail(f"not a folder: {folder}", 1)
    name = str(path) if split == "test" else f"{path}:{split}"
    try:
        loader, bname = get_benchmark_loader(name)
        stored = stored_benchmark_name(name)
    except (RegistryError, ValueError) as e:
        fail(str(e), 1)
    layout = getattr(loader, "layout", None)
    out.print(f"folder:   {path} ({split} split)", soft_wrap=True)
    if callable(layout):
        out.print(f"layout:   {layout(bname)}", soft_wrap=True)
    try:
        bench = load_benchmark(name, default_data_dir())
    except (DataError, MissingDataError, RegistryError, ValueError) as e:
        out.print(f"problem:  {e}", soft_wrap=True)
        out.print("result:   does not load; fix the problem above and check again", soft_wrap=True)
        raise typer.Exit(1)
    st = bench.stats()
    in_source = bench.notes.get("queries_in_source")
    queries = in_source if isinstance(in_source, int) else st["queries"]
    out.print(f"counts:   documents {st['documents']:,}, queries {queries:,} (judged {st['judged_queries']:,}), "
              f"judged pairs {st['judged_pairs']:,}, violating pairs {st['violating_pairs']:,}", soft_wrap=True)
    with_viol = sum(1 for v in bench.judgments.violating.values() if v)
    why = (f"queries with a violating document: {with_viol:,}, so V@k and FVR@k apply" if bench.task == "constraint"
           else "no violating documents, so V@k and FVR@k do not apply (see the README on constraint benchmarks)")
    out.print(f"task:     {bench.task} ({why}); a document graded >= {bench.relevance_threshold} is relevant",
              soft_wrap=True)
    out.print(f"measures: {', '.join(measures_for(bench))}", soft_wrap=True)
    out.print(f"name:     {stored} (version {bench.version})", soft_wrap=True)
    for w in benchmark_warnings(bench):
        out.print(f"warning:  {w}", soft_wrap=True)
    out.print(f"result:   loads; run it with: beyondsim run bm25 -b {stored}", soft_wrap=True)


@data_app.command("build-diagnostics")
def build_diagnostics(
    corpus: str = typer.Option("beir/scifact", "--corpus", help="Benchmark (or BEIR folder path) whose corpus to build from."),
    sets: list[str] = typer.Option(None, "--set", help="Which sets to build (repeatable; default: all builders)."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Output folder; each set goes to <out>/<set>/ "
                                           "(default: $BEYONDSIM_HOME/diagnostics, where diag/<set> finds it)."),
    seed: SeedOpt = 0,
    max_queries: int = typer.Option(104, "--max-queries", help="Queries per set (0 = every candidate)."),
    data_dir: DataDirOpt = None,
    online: Annotated[bool, online_option(
        "Allow fetching the corpus and WordNet from their official sources.")] = False,
    home: HomeOpt = None,
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
                  "(beyondsim run RETRIEVER --benchmark <folder>)", highlight=False)


@app.command()
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
        "Extra prices TOML for --project, on top of harness/prices.toml.")] = None,
    data_dir: Annotated[Optional[Path], data_dir_option(
        "For --project: where to count the queries and documents of a benchmark the store has no record of (else "
        "BEYONDSIM_DATA, else ../shared/data).")] = None,
    home: HomeOpt = None,
) -> None:
    """Efficiency and API cost of stored results: offline/online seconds, LLM calls split into cache
    hits and billed calls, their tokens, and $ of new spend (a cache hit costs $0; a model without a
    price is "unknown", never $0, and a total with an unknown part shows its known part as "≥ $x").
    Seconds are cold (cached embeddings, models, trained encoders and LLM replies counted at what
    computing them cost; harness/cost.py), with this run's seconds beside them (run_*_s in json/csv).
    The table adds a subtotal per retriever (--by pair) and a total row. --project estimates a suite."""
    from . import audit as audit_mod
    from . import audit_tables as tables
    from .cost import Costs

    if fmt not in ("table", "json", "csv"):
        fail("--format must be table, json or csv")
    if view not in ("full", "paper"):
        fail("--view must be full or paper")
    try:
        cutoff = audit_mod.parse_since(since) if since else None
    except ValueError as e:
        fail(str(e))
    with open_store(home) as store:
        benchmark = stored_benchmark_name(benchmark) if benchmark else None
        stored = store.results(benchmark=benchmark, retriever=retriever)
        records = audit_mod.select(stored, cutoff)
        infos = store.benchmarks()
        costs = Costs(store.results())  # every stored result: those without recorded reuse derive from the others
    try:  # billed calls that no stored result holds (runs stopped by the budget, failed or killed)
        unfinished = audit_mod.unfinished_runs(home_dir(home), stored, benchmark=benchmark, retriever=retriever,
                                               since=cutoff)
    except ValueError as e:
        fail(str(e))
    scope = ", ".join(s for s in (f"retriever {retriever}" if retriever else "",
                                  f"benchmark {benchmark}" if benchmark else "",
                                  f"since {cutoff.isoformat(timespec='seconds')}" if cutoff else "") if s)
    if project is not None:
        if by is not None or view != "full":
            fail("--project does not combine with --by or --view")
        _audit_projection(audit_mod, records, infos, project, fmt, prices, data_dir, scope)
        return
    try:
        if view == "paper" and by == "model":
            raise ValueError("--view paper aggregates per method: it does not combine with --by model")
        grouped = audit_mod.group(records + unfinished, by or "pair", costs)
        if view == "paper":
            paper, settings = audit_mod.paper_settings(suites())
            rows = audit_mod.paper_rows(records, settings, costs)
        else:
            rows = grouped.rows
    except (ValueError, RegistryError) as e:
        fail(str(e))
    if fmt == "json":
        sys.stdout.write(tables.to_json(rows))
    elif fmt == "csv":
        sys.stdout.write(tables.to_csv(audit_mod.paper_csv_rows(rows) if view == "paper" else rows))
    else:
        title = "cost and time audit" + (f" ({scope})" if scope else "")
        out.print(tables.paper_table(rows, settings, f"{paper}: {title}") if view == "paper"
                  else tables.audit_table(grouped, title))
    unpriced = sorted({m for r in grouped.rows for m in r["unpriced_models"].split(";") if m})
    if unpriced:
        console.print(f"no price was known for model(s) {', '.join(unpriced)} when they ran: their spend is unknown "
                      "(add them to a prices file for future runs: --prices)", highlight=False, soft_wrap=True)


def _audit_projection(audit_mod: Any, records: list, infos: list, target: str, fmt: str, prices: Optional[Path],
                      data_dir: Optional[Path], scope: str) -> None:
    from .llm import LLMError, load_prices

    try:
        known_suites = suites()
    except RegistryError as e:
        fail(str(e))
    if target in known_suites:
        benches = list(known_suites[target]["benchmarks"])
    else:
        benches = [b.strip() for b in target.split(",") if b.strip()]
        if len(benches) == 1 and "," not in target and benches[0] not in {i.name for i in infos}:
            try:
                get_benchmark_loader(benches[0])
            except RegistryError:
                fail(f"--project {target!r} is neither a suite ({', '.join(sorted(known_suites))}) nor a benchmark")
    if not benches:
        fail("--project needs a suite or benchmark names")
    try:
        price_table = load_prices(prices)
    except LLMError as e:
        fail(str(e))
    proj = audit_mod.project(records, benches, infos, price_table,
                             fallback=audit_mod.registry_stats(default_data_dir(data_dir)))
    from . import audit_tables as tables

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


@app.command()
def tune(
    retriever: str = typer.Argument(..., help="Retriever id (e.g. nnn-fix, mmr)."),
    benchmark: str = typer.Option(..., "--benchmark", "-b", help="Benchmark id; its :dev split is used."),
    grid: list[str] = typer.Option(None, "--grid", "-g", help="KEY=V1,V2,... (repeatable): values to try."),
    param: list[str] = typer.Option(None, "--param", "-p", help="KEY=VALUE held fixed (repeatable)."),
    measure: str = typer.Option("Comp@5", "--measure", "-m", help="Measure to optimise on the validation split."),
    split: str = typer.Option("dev", "--split", help="Validation split name."),
    seed: SeedOpt = 0,
    out_file: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the best setting as a --config TOML table."),
    label: Optional[str] = typer.Option(None, "--label", help="Name of the tuned variant in the TOML (default: the retriever id)."),
    data_dir: DataDirOpt = None,
    device: DeviceOpt = None,
    home: HomeOpt = None,
    ray: RayOpt = None,
) -> None:
    """Grid-search retriever parameters on the validation split (never the test split) and write
    the best setting as TOML for `beyondsim run --config`. Grid points are not stored as results."""
    from .tuning import grid_search, parse_grid, tuning_split

    try:
        g = parse_grid(list(grid or []))
        fixed = parse_key_values(param, strip_values=True)
        bname = tuning_split(benchmark, split)
    except ValueError as e:
        fail(str(e))
    settings = Settings(home=home_dir(home), data_dir=data_dir, device=device, bootstrap=0)
    t = Table(title=f"{retriever} on {bname}: {measure} over {len(list(itertools.product(*g.values())))} grid points",
              title_justify="left")
    for c in (*g, measure, "search s"):
        t.add_column(c, justify="right")
    with Store(settings.home / "results.sqlite") as store, progress_for(console) as progress:
        runner = _make_runner(settings, store, progress, lambda m: None, ray)
        if ray is not None:
            runner.prefetch_grid(retriever, bname, g, fixed, seed)  # every grid point at once
        try:
            result = grid_search(runner, retriever, bname, g, measure, fixed=fixed, seed=seed,
                                 on_point=lambda p: t.add_row(*[str(v) for v in p.params.values()],
                                                              format_value(measure, p.value), f"{p.search_s:.1f}"))
        except (MissingDataError, RegistryError, TypeError, ValueError, RuntimeError) as e:
            fail(str(e))
    out.print(t)
    best = ", ".join(f"{k}={v}" for k, v in result.best.params.items())
    out.print(f"best on {result.benchmark}: {best} ({measure} = {format_value(measure, result.best.value)})", highlight=False)
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
    seed: SeedOpt = 0,
    k: int = typer.Option(DEFAULT_K, "--k", help="Ranking depth evaluated."),
    out_file: Optional[Path] = typer.Option(None, "--out", "-o", help="Also write the sweep as JSON here."),
    data_dir: DataDirOpt = None,
    device: DeviceOpt = None,
    home: HomeOpt = None,
    ray: RayOpt = None,
) -> None:
    """Score a grid of parameters (CoDeR's appendix F sensitivity heatmaps: alpha × tau, alpha ×
    percentile) and keep every point's measures in the results store's sweep table for the reports.
    Sweep points are sensitivity data, not leaderboard results."""
    from .tuning import parse_grid, sweep as run_sweep

    try:
        g = parse_grid(list(grid or []))
        fixed = parse_key_values(param, strip_values=True)
    except ValueError as e:
        fail(str(e))
    shown = list(show or ["R@10", "FVR@10"])
    settings = Settings(home=home_dir(home), data_dir=data_dir, device=device, bootstrap=0, k=k)
    n_points = len(list(itertools.product(*g.values())))
    with Store(settings.home / "results.sqlite") as store, progress_for(console) as progress:
        runner = _make_runner(settings, store, progress, lambda m: None, ray)
        for bname in benchmark:
            if ray is not None:
                runner.prefetch_grid(retriever, bname, g, fixed, seed)  # every grid point at once
            t = Table(title=f"{retriever} on {bname}: {n_points} grid points", title_justify="left")
            for c in (*g, *shown, "search s"):
                t.add_column(c, justify="right")
            try:
                data = run_sweep(runner, retriever, bname, g, fixed=fixed, seed=seed,
                                 on_point=lambda p: t.add_row(*[str(v) for v in p.params.values()],
                                                              *[format_value(m, p.measures.get(m)) for m in shown],
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
    benchmark: str = typer.Argument(..., help="Benchmark name (e.g. negconstraint) or folder path, as given to run."),
    by: Optional[str] = typer.Option(None, "--by", help="Query metadata key to group by (default: the first one stored)."),
    measure: list[str] = typer.Option(None, "--measure", "-m", help="Measures to show (default: the benchmark's defaults)."),
    retriever: RetrieverFilterOpt = None,
    fmt: str = typer.Option("table", "--format", "-f", help="table or json."),
    home: HomeOpt = None,
) -> None:
    """Per-group means of stored per-query measures (e.g. NegConstraint by query category)."""
    from .measures import group_by

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
    out.print(t)


@app.command("export")
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
    from .exchange import ExchangeError, export_jsonl
    from .runfiles import export_trec

    if fmt not in ("jsonl", "trec"):
        fail("--format must be jsonl or trec")
    if fmt == "trec" and path == "-":
        fail("--format trec writes one file per result: give a directory")
    benchmark = stored_benchmark_name(benchmark) if benchmark else None
    with open_store(home) as store:
        try:
            if fmt == "trec":
                n = export_trec(store, Path(path), benchmark, retriever)
            elif path == "-":
                n = export_jsonl(store, sys.stdout, benchmark=benchmark, retriever=retriever)
            else:
                tmp = Path(path).with_name(f".{Path(path).name}.tmp")
                try:
                    with open(tmp, "w", encoding="utf-8") as f:
                        n = export_jsonl(store, f, benchmark=benchmark, retriever=retriever)
                    os.replace(tmp, path)
                finally:
                    tmp.unlink(missing_ok=True)
        except ExchangeError as e:
            fail(str(e))
    console.print(f"exported {n} result(s)", highlight=False)


@app.command("import")
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
    from .exchange import ExchangeError, ImportCounts, ImportedContent, ImportedLine, check_versions, import_items, \
        read_export_file

    source = "<stdin>" if path == "-" else path
    try:
        items = read_export_file(path)
    except ExchangeError as e:
        fail(str(e))
    store_path = home_dir(home) / "results.sqlite"
    known: dict[str, set[str]] = {}
    if store_path.exists():
        with Store(store_path) as store:
            for b in store.benchmarks():
                known.setdefault(b.name, set()).add(b.version)
    check = check_versions(items, known, default_data_dir(data_dir),
                           log=lambda m: console.print(m, highlight=False, soft_wrap=True))
    for w in check.warnings:
        console.print(Text("warning: ", style="bold yellow") + Text(w), soft_wrap=True)
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
        with Store(store_path) as store:
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


@app.command("verify")
def verify_cmd(
    path: str = typer.Argument(..., help="A results file written by `beyondsim export` (.jsonl, or .jsonl.gz; - reads "
                               "stdin)."),
    do_import: bool = typer.Option(False, "--import", help="When every result verifies, store them all as verified, "
                                   "in one transaction (nothing is stored when any fails)."),
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
    from .exchange import ExchangeError, ImportedLine, import_items, read_export_file, shown_benchmark
    from .verify import verify_items

    source = "<stdin>" if path == "-" else path
    try:
        items = read_export_file(path)
    except ExchangeError as e:
        fail(str(e))
    n_results = sum(isinstance(it, ImportedLine) for it in items)
    if not n_results:
        fail(f"{source} holds no result line: nothing to verify", 1)
    report = verify_items(items, default_data_dir(data_dir),
                          log=lambda m: console.print(m, highlight=False, soft_wrap=True))
    t = Table(title=f"verify {source}", title_justify="left")
    for c in ("result", "benchmark", "recomputed", "not recomputable", "status"):
        t.add_column(c, overflow="fold")
    for r in report.lines:
        rec = r.item.record
        t.add_row(f"{rec.label} (seed {rec.seed}) {rec.key}", shown_benchmark(rec.benchmark),
                  f"{len(r.recomputed)}: {', '.join(r.recomputed)}" if r.recomputed else "0",
                  ", ".join(r.not_recomputable) or "–",
                  Text("verified", style="green") if r.ok else Text(f"FAILED ({len(r.problems)})", style="bold red"))
    out.print(t)
    for r in report.lines:
        for m, why in r.not_recomputable.items():
            out.print(f"{r.what}: not recomputable: {m}: {why}", soft_wrap=True)
    for p in report.problems:
        out.print(p, soft_wrap=True)
    failed = sum(not r.ok for r in report.lines)
    if failed:
        fail(f"{failed} of {n_results} result(s) in {source} did not verify" + ("; nothing was stored" if do_import
                                                                                  else ""), 1)
    if not do_import:
        console.print(f"all {n_results} result(s) verified", highlight=False, soft_wrap=True)
        return
    store_path = home_dir(home) / "results.sqlite"
    with Store(store_path) as store:
        known: dict[str, set[str]] = {}
        for b in store.benchmarks():
            known.setdefault(b.name, set()).add(b.version)
        mixed = [f"{it.where}: result {it.record.key} is of {it.record.benchmark} version "
                 f"{it.record.benchmark_version}, but this store holds version(s) "
                 f"{', '.join(sorted(known[it.record.benchmark]))}" for it in report.verified
                 if it.record.benchmark_version not in known.get(it.record.benchmark, {it.record.benchmark_version})]
        if mixed:
            fail("refusing to import: the store holds other versions of these benchmarks; nothing was stored:\n"
                 + "\n".join(f"  - {m}" for m in mixed), 1)
        counts = import_items(store, [*report.content, *report.verified], report.local_infos)
    console.print(f"all {n_results} result(s) verified; imported {counts.results_added} as verified, "
                  f"{counts.results_present} already present (kept as stored); drill-down content written from the "
                  "benchmarks as loaded here", highlight=False, soft_wrap=True)


@llm_app.command("serve")
def llm_serve(
    port: int = typer.Option(8080, "--port", help="Port on 127.0.0.1."),
    model_path: Optional[Path] = typer.Option(None, "--model-path", help="A GGUF file (default: the packaged Gemma-3-270M)."),
    threads: Optional[int] = typer.Option(None, "--threads", help="CPU threads (default: all)."),
    n_ctx: int = typer.Option(4096, "--n-ctx", help="Context window."),
    home: HomeOpt = None,
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
    llm_base_url: LlmBaseUrlOpt = None,
    llm_model: LlmModelOpt = None,
    prices: PricesOpt = None,
    ping: bool = typer.Option(False, "--ping", help="Send one short request (uncached) and report its latency."),
    home: HomeOpt = None,
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
    data_dir: DataDirOpt = None,
    online: OnlineOpt = False,
    device: DeviceOpt = None,
    home: HomeOpt = None,
) -> None:
    """Train a model artifact (CoDeR's compatibility encoder) and print where it is and its card."""
    try:
        trainer = get_trainer(name)
    except RegistryError as e:
        fail(str(e))
    try:
        params = parse_key_values(param, strip_values=False)  # a query prefix keeps its trailing space
    except ValueError as e:
        fail(str(e))
    root = default_data_dir(data_dir)
    with progress_for(console) as progress:
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
    for info in artifact_users(name):
        out.print(f"use it: beyondsim run {info.name} -p {info.name}.{info.artifact_param}={path} -b BENCHMARK",
                  highlight=False, soft_wrap=True)


@list_app.command("trainers")
def list_trainers() -> None:
    """Trainable artifacts (`beyondsim train NAME`)."""
    t = Table("name", "description", "parameters")
    for n in trainer_names():
        try:
            tr = get_trainer(n)
        except RegistryError as e:
            t.add_row(n, Text(str(e), style="red"), "")
            continue
        fields = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(tr.Params))
        t.add_row(n, getattr(tr, "description", ""), fields)
    out.print(t)


def _same_bytes(a: Path, b: Path) -> bool:
    try:
        return Path(a).read_bytes() == Path(b).read_bytes()
    except OSError:
        return False


@app.command()
def reproduce(
    quick: bool = typer.Option(False, "--quick", help="Only the rows marked quick = true: the cheap ones (bm25, dense, "
                               "deo-rules, nnn-fix, mmr on the diagnostic sets and NegConstraint) that CI runs."),
    only: list[str] = typer.Option(None, "--only", metavar="PATTERN", help="Only the rows whose retriever:benchmark:measure, or any one "
                                   "of the three, matches this shell pattern, e.g. 'bm25:*' or 'V@*' (repeatable)."),
    expected: Optional[Path] = typer.Option(None, "--expected", help="The matrix of expected figures (default: "
                                            "expected.toml of the installed reference files)."),
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
    from .registry import reference_files
    from .reproduce import (FAIL, OK, OKISH, REFERENCE, SKIP, MatrixError, describe, load_matrix, reproduce,
                            shipped_matrix, store_rows, summarise)

    try:
        files = reference_files()
    except RegistryError as e:
        if expected is None:
            fail(str(e))
        files = {}
    installed = files.get("expected")
    if expected is None and installed is None:
        fail("no reproduction matrix is installed (entry point group beyondsim.reference); give --expected FILE")
    # the shipped matrix (the bundle's reference rows plus the installed expected.toml) is the only one
    # whose run can make an imported figure "reproduced" (harness.trust); another --expected file is a report
    shipped = installed is not None and (expected is None or _same_bytes(expected, installed))
    expected = expected or installed
    try:
        rows = (shipped_matrix(files, quick=quick, only=list(only or ())) if shipped
                else load_matrix(expected, quick=quick, only=list(only or ())))
    except MatrixError as e:
        fail(str(e))
    if not rows:
        fail(f"{expected}: no row is selected by{' --quick' if quick else ''}"
             f"{''.join(f' --only {p!r}' for p in only or ())}")
    settings = Settings(home=home_dir(home), data_dir=data_dir, device=device)
    started = time.monotonic()
    with open_store(home) as store, progress_for(console) as progress:
        outcomes = reproduce(rows, settings, progress=progress,
                             log=lambda m: console.print(m, highlight=False, markup=False, soft_wrap=True),
                             make_runner=lambda st, sc, pr, lg: _make_runner(st, sc, pr, lg, ray))
        matrix_rows = store_rows(outcomes)
        if matrix_rows:
            store.save_reproductions(matrix_rows, shipped=shipped)
        store_path = store.path
    style = {OK: "green", OKISH: "yellow", FAIL: "bold red", SKIP: "dim"}

    def num(x: Optional[float], signed: bool = False) -> str:
        return "–" if x is None else (f"{x:+.6f}" if signed else f"{x:.6f}")

    t = Table(title=f"reproduction matrix: {expected}", title_justify="left")
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
    for o in outcomes:
        if o.note and o.status != SKIP:
            out.print(f"row {o.row.index} ({o.row.key}, {o.row.kind}): {o.status}: {o.note}", soft_wrap=True)
    s = summarise(outcomes)
    parts = [f"{kind} rows: {describe(c)}" for kind, c in sorted(s.counts.items(), key=lambda kc: kc[0] != REFERENCE)]
    if s.skipped_benchmarks:
        parts.append(f"skipped (not on disk): {', '.join(s.skipped_benchmarks)}")
    compared = any(o.status != SKIP for o in outcomes)
    verdict = ("FAIL: a reference row did not reproduce" if s.failed else "reproduced" if compared
               else "nothing compared")
    saved = (f"; matrix saved to {store_path}" + ("" if shipped else " (not the shipped matrix: it upgrades no trust "
                                                                      "level)")) if compared else ""
    out.print(f"{verdict} — {'; '.join(parts)} ({time.monotonic() - started:.0f} s){saved}", soft_wrap=True)
    if s.failed:
        raise typer.Exit(1)


@app.command()
def version() -> None:
    """Print the harness version."""
    out.print(__version__)


def _failed_command(error: str) -> Callable[[], None]:
    def command() -> None:
        fail(error)

    return command


def _mount_commands() -> None:
    """Verbs of installed packages (entry point group ``beyondsim.commands``), each a typer app
    mounted under its entry point's name; one that fails to load becomes a verb that says why."""
    for verb, commands, error in command_apps():
        if commands is None:
            app.command(verb, help=f"Failed to load: {error}")(_failed_command(error))
        else:
            app.add_typer(commands, name=verb)


_mount_commands()


def main() -> None:  # pragma: no cover
    app()
