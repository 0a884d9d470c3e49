"""``run``, ``submit`` and ``train``: run retrievers into the results store and train the artifacts
some of them use."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from ..data.readers import default_data_dir
from ..core.errors import UserError
from ..measures import format_value, parse_measure
from ..core.registry import artifact_users, get_trainer, load_benchmark, make_spec, parse_key_values
from ..run.runner import DEFAULT_K, Settings
from ..store.results import Store
from ..store.results import open_store as store_at
from ..run.submit import SUBMIT_DEFAULT_SUITE, check_submission, origin, submission_params, submit_seeds
from .cmd_board import check_site_folder, write_board
from .console import (add_suite_benchmarks, check_depth, check_seeds, console, fail, home_dir, load_config, log_line,
                     make_runner, out, parse_params, progress_for, reference_pins, resolve_llm_settings)
from .options import (DEFAULT_SITE, DataDirOpt, DeviceOpt, HomeOpt, LlmBaseUrlOpt, LlmConcurrencyOpt, LlmModelOpt,
                      MaxCallsOpt, MaxQueriesOpt, MaxUsdOpt, OnlineOpt, PricesOpt, RayOpt)

# blind runs (harness/run/blind.py): the retriever runs in a sandbox that holds no judgment
BlindOpt = Annotated[bool, typer.Option(
    "--blind", help="Run each retriever's fit/prepare/index/search in a bubblewrap sandbox that sees the corpus "
    "and the query texts but no judgment file, no data directory and no network; its results are 'reproduced "
    "blind' (a stored result that was not computed blind is computed again and replaced). Needs bubblewrap.")]
BlindCacheOpt = Annotated[str, typer.Option(
    "--blind-cache", help="The embedding cache a blind run sees: shared (the home's, read-write) or fresh (an "
    "empty one, so nothing computed outside the sandbox reaches it; every run encodes again).")]


def check_blind_options(blind: bool, cache: str, ray: Optional[str]) -> None:
    """``--blind-cache`` is shared or fresh; ``--blind`` runs on this machine, not on a Ray cluster."""
    from ..run.blind import CACHE_MODES

    if cache not in CACHE_MODES:
        fail(f"--blind-cache must be one of {', '.join(CACHE_MODES)}, not {cache!r}")
    if blind and ray is not None:
        fail("--blind runs on this machine: it cannot be combined with --ray")


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
    pool: Optional[str] = typer.Option(None, "--pool", help="Rerank a frozen candidate pool instead of the corpus: "
                                       "<first stage>@<depth> (e.g. bm25@100: computed here, or taken from the "
                                       "store) or a pool file written by `beyondsim pool export`."),
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
    blind: BlindOpt = False,
    blind_cache: BlindCacheOpt = "shared",
) -> None:
    """Run retrievers on benchmarks, score them and store the results. Exit code 3: stopped by the
    LLM budget (finished results are stored; LLM responses are cached, so a rerun resumes)."""
    k = check_depth(k)
    check_blind_options(blind, blind_cache, ray)
    seed_list = check_seeds(seeds, seed) or []
    for m in measure or ():
        parse_measure(m)  # a name that does not parse is refused before any work
    cfg = load_config(config)
    if leaderboard_dir is not None:
        check_site_folder(leaderboard_dir)
    benches = list(benchmark or [])
    names = list(retrievers or [])
    if suite:
        s = add_suite_benchmarks(suite, benches, data_dir, online)
        if not names:
            names = list(s.get("retrievers", []))
    if not benches:
        fail("give at least one --benchmark or a --suite")
    if not names:
        fail("give at least one retriever (see `beyondsim list retrievers`)")
    params = parse_params(list(param or []), cfg)
    specs = []
    for n in names:
        p = dict(params.get(n, {}))
        base = p.pop("retriever", n)
        specs.append(make_spec(base, p, label=n if base != n else ""))
    llm_settings = resolve_llm_settings(cfg, config, base_url=llm_base_url, model=llm_model, max_usd=max_usd,
                                        max_calls=max_calls, concurrency=llm_concurrency,
                                        prices=str(prices) if prices else None)
    settings = Settings(home=home_dir(home), data_dir=data_dir, k=k, force=force, online=online, device=device,
                        extra_measures=tuple(measure or ()), llm=llm_settings,
                        max_queries=max_queries, pool=pool, pinned_pools=reference_pins(), blind=blind,
                        blind_cache=blind_cache)
    outcomes, store, budget_stop = _run_and_store(settings, specs, benches, seed_list, ray)
    with store:
        index = write_board(store, leaderboard_dir) if leaderboard_dir is not None else None
        _print_tops(store, outcomes)
    if index is not None:
        out.print(f"leaderboard: {index.resolve()}", highlight=False)
    if budget_stop:
        raise typer.Exit(3)


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
    blind: BlindOpt = False,
    blind_cache: BlindCacheOpt = "shared",
) -> None:
    """Check a retriever against the protocol, run it on a suite with the standard seeds, store the
    results (existing ones are kept, so a rerun resumes) and regenerate the leaderboard site.
    Exit code 2: the retriever cannot run (every problem is listed; nothing is loaded or stored)."""
    chosen_seeds = check_seeds(seeds)
    check_blind_options(blind, blind_cache, ray)
    cfg = load_config(config)
    check_site_folder(out_dir)
    shown = label or retriever
    cls, spec = check_submission(retriever, submission_params(cfg, config, (retriever, shown), param or []), shown)
    seed_list = chosen_seeds if chosen_seeds is not None else list(submit_seeds(cls))
    benches = list(benchmark or [])
    if suite or not benches:
        add_suite_benchmarks(suite or SUBMIT_DEFAULT_SUITE, benches, data_dir, online)
    if not benches:
        fail(f"no benchmark of suite {suite or SUBMIT_DEFAULT_SUITE!r} is on disk (see `beyondsim data status`)")
    llm = resolve_llm_settings(cfg, config, base_url=llm_base_url, model=llm_model, max_usd=max_usd)
    settings = Settings(home=home_dir(home), data_dir=data_dir, online=online, device=device, llm=llm,
                        max_queries=max_queries, blind=blind, blind_cache=blind_cache)
    console.print(f"submitting {spec.display} ({origin(cls)}, spec {spec.hash}) on "
                  f"{len(benches)} benchmark(s) with seed(s) {', '.join(map(str, seed_list))}"
                  + (" blind" if blind else ""),
                  highlight=False, soft_wrap=True)
    outcomes, store, budget_stop = _run_and_store(settings, [spec], benches, seed_list, ray)
    with store:
        index = write_board(store, out_dir)
    done = sum(o.status == "done" for o in outcomes)
    kept = sum(o.status == "skipped" for o in outcomes)
    out.print(f"submitted {spec.display}: {done} new result(s), {kept} already stored; site: {index.resolve()}",
              highlight=False, soft_wrap=True)
    if budget_stop:
        raise typer.Exit(3)


def _run_and_store(settings: Settings, specs: list, benches: list[str], seeds: list[int],
                   ray: Optional[str] = None) -> tuple[list, Store, Optional[str]]:
    """Run every spec on every benchmark and seed into the results store (existing keys are
    skipped unless ``settings.force``), print a table per benchmark, and return the outcomes, the
    open store and why the LLM budget stopped the run (``None`` when it did not)."""
    store = store_at(settings.home)
    with progress_for(console) as progress:
        runner = make_runner(settings, store, progress, log_line, ray)
        try:
            outcomes = runner.run(specs, benches, seeds)
        except BaseException:
            store.close()
            raise
        finally:
            runner.close()
    _print_outcomes(outcomes)
    console.print(f"results store: {store.path}", highlight=False, soft_wrap=True)
    return outcomes, store, runner.budget_stop


RUN_TABLE_HINT = "every stored figure: the leaderboard's benchmark page (`beyondsim leaderboard`) or `beyondsim export`"
TOP = 3  # rows of each suite's ranking printed at the end of a run


def outcome_table(bname: str, items: list) -> Table:
    """The table of one benchmark's outcomes: a row per result (label, seed, the benchmark's
    headline measures, index and search seconds, and ``cached`` where the result was already
    stored), with the order its columns are left out in on a narrow terminal
    (:func:`harness.cli.console.fit_table`): seconds first, then the headline measures from the last,
    then the seed; the label is abbreviated, the first measure is kept."""
    shown = [m for m in items[0].headline if m in items[0].record.measures]
    t = Table(title=f"{bname}", title_justify="left")
    t.add_column("retriever", no_wrap=True, overflow="ellipsis")
    t.add_column("seed", justify="right")
    for m in shown:
        t.add_column(m, justify="right")
    t.add_column("index s", justify="right")
    t.add_column("search s", justify="right")
    t.add_column("status", no_wrap=True)  # left out when no result was cached (no column is ever empty)
    for o in items:
        r = o.record
        t.add_row(r.label, str(r.seed), *[format_value(m, r.measures[m].mean if m in r.measures else None) for m in shown],
                  f"{r.phases.get('index', {}).get('wall_s', 0):.1f}", f"{r.phases.get('search', {}).get('wall_s', 0):.1f}",
                  "cached" if o.status == "skipped" else "")
    t.drop_order = ("index s", "search s", *reversed(shown[1:]), "seed", "status")  # type: ignore[attr-defined]
    t.fit_hint = RUN_TABLE_HINT  # type: ignore[attr-defined]
    return t


def _print_outcomes(outcomes: list) -> None:
    by_bench: dict[str, list] = {}
    for o in outcomes:
        if o.record is not None:
            by_bench.setdefault(o.benchmark, []).append(o)
    for bname, items in by_bench.items():
        out.print(outcome_table(bname, items))


def ranked_suites(store: Store, benchmarks: set[str]) -> list:
    """The overview tables (:class:`reports.compare.SuiteComparison`) of the suites that hold one
    of ``benchmarks``, and the ``other`` table when one of them is in no suite with a headline:
    made as :func:`reports.compare.compare` makes them for the leaderboard (the same results, the
    reference filter of :func:`harness.cli.cmd_board.reference_default`, trust, chance row and rank
    intervals), without the per-benchmark tests the overview does not need."""
    from reports.compare import (N_RESAMPLES, OTHER_SUITE, PerQuery, assign_trust, collect, declared_suites,
                                 on_pool, suite_comparisons)

    from ..record.bundle import reference_filter
    from .cmd_board import reference_default

    include = reference_filter(reference_default())
    records = [r for r in store.results() if (include is None or include(r)) and not on_pool(r)]
    specs = declared_suites()
    placed = {b for s in specs if s.headline for b in s.benchmarks}
    ran = [s for s in specs if s.headline and benchmarks & set(s.benchmarks)]
    other = bool(benchmarks - placed)
    wanted = {b for s in ran for b in s.benchmarks}
    sections = [s for s in collect(store, records) if s.name in wanted or (other and s.name not in placed)]
    if not sections:
        return []
    assign_trust(sections, store.reproductions(shipped=True), specs)
    tables = suite_comparisons(sections, specs, values=PerQuery(store).group, n_resamples=N_RESAMPLES)
    names = {s.name for s in ran} | ({OTHER_SUITE} if other else set())
    return [t for t in tables if t.name in names]


def top_lines(suite) -> list[str]:
    """A suite's ranking as the run's last lines: its first :data:`TOP` ranked rows in the board's
    order, each with its figure of the suite's headline measure (the mean over the benchmarks the
    headline averages) and its rank interval; the chance row is never ranked."""
    m = suite.first
    name = "benchmarks in no suite" if suite.other else f"suite {suite.name}"
    over = ", ".join(suite.headline_benchmarks)
    ranked = suite.ranked[:TOP]
    if m is None:
        return []
    if not ranked:
        first = next((r for r in suite.apart if r.why_apart), None)
        return [f"{name}: no row is ranked on {m} yet" + (f"; {first.label}: {first.why_apart}" if first else "")]
    lines = [f"{name}: top {len(ranked)} by {m} (mean over {over})"]
    width = max(len(r.label) for r in ranked)
    for i, r in enumerate(ranked, 1):
        rank = "" if r.rank is None else f"  rank {r.rank[0]}" + (f"–{r.rank[1]}" if r.rank[1] != r.rank[0] else "")
        lines.append(f"  {i}. {r.label.ljust(width)}  {format_value(m, r.means[m])}{rank}")
    return lines


def _print_tops(store: Store, outcomes: list) -> None:
    benchmarks = {o.record.benchmark for o in outcomes if o.record is not None}
    for suite in ranked_suites(store, benchmarks):
        for line in top_lines(suite):
            out.print(line, highlight=False)


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
    trainer = get_trainer(name)
    params = parse_key_values(param, strip_values=False)  # a query prefix keeps its trailing space
    root = default_data_dir(data_dir)
    with progress_for(console) as progress:
        try:
            path, card = trainer.train(params, home=home_dir(home), data_dir=root, load_benchmark=lambda n: load_benchmark(n, root, online),
                                       device=device, progress=progress,
                                       log=log_line, out_dir=out_dir, force=force)
        except UserError:
            raise
        except (FileNotFoundError, ValueError, RuntimeError) as e:  # the trainer's own refusals
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
