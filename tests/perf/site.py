"""Render time and size of a full leaderboard: 500 results over the benchmarks on disk.

    python -m tests.perf.site [--results 500] [--seeds 3] [--keep DIR]

The store is built first (not timed): for every test benchmark of the ``constraint``,
``completeness`` and ``topical`` suites whose files are on disk, one real bm25 result is computed
by the runner at the runner's depth (so the benchmark content, judgments, documents and the
shape of rankings and per-query values are real). It is then copied into as many configurations
× seeds as ``--results`` asks for: each copy ranks the same candidates in a random order with
random scores, and its per-query values are the real ones shuffled over the queries (each
measure's distribution stays real; its mean moves), so significance tests, plots and drill-downs
have real work to do. The base results are cached under ``--cache`` between runs.

Timed: :func:`reports.render_site` on that store, into an empty folder. Printed: the number of
results, render seconds (wall and CPU), the site's size in MB and file count, its MB per stored
result (every download included), the bytes of each kind of file (pages, drill-down data,
per-query downloads, table downloads), the largest files, and the goals (≤ 60 s for 500 results,
≤ 0.25 MB per result), with the ratio of each figure to its goal.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import random
import shutil
import tempfile
import time
from pathlib import Path

from harness import registry
from harness.registry import make_spec
from harness.run.runner import Runner, Settings
from harness.store.results import MeasureValue, ResultRecord, Store, result_key

GOAL_S = 60.0  # render seconds (for 500 results)
GOAL_MB_PER_RESULT = 0.25  # the site's size over the stored results, every download included
SUITES = ("constraint", "completeness", "topical")


def on_disk(data_dir: Path | None) -> list[str]:
    """The suites' test benchmarks whose files are present."""
    from harness.data import default_data_dir, missing_files

    root = default_data_dir(data_dir)
    names: list[str] = []
    for suite in SUITES:
        for b in registry.suites()[suite]["benchmarks"]:
            loader, bname = registry.get_benchmark_loader(b)
            check = getattr(loader, "missing_files", None)
            missing = check(bname, root) if callable(check) else missing_files(root, loader.info(bname).files)
            if b not in names and not missing:
                names.append(b)
    return names


def base_store(cache: Path, names: list[str]) -> Store:
    """One real bm25 result per benchmark (computed once, then read from ``cache``)."""
    cache.mkdir(parents=True, exist_ok=True)
    store = Store(cache / "results.sqlite")
    have = {r.benchmark for r in store.results()}
    todo = [b for b in names if b not in have]
    if todo:
        with Runner(Settings(home=cache, bootstrap=200), store, log=lambda m: None) as runner:
            for b in todo:
                t = time.perf_counter()
                runner.run([make_spec("bm25")], [b], [0])
                print(f"  base result: bm25 on {b} ({time.perf_counter() - t:.1f} s)", flush=True)
    return store


def synthetic(base: Store, out: Store, n_results: int, seeds: int, rng: random.Random) -> int:
    """Copy every base result into configurations × seeds until ``n_results`` are stored."""
    recs = [base.get(r.key, full=True) for r in base.results()]
    recs = [r for r in recs if r is not None]
    for info in base.benchmarks():
        out.save_benchmark(info)
    # benchmark content (queries, judgments, documents) straight from the base store
    with base.transaction() as src, out.transaction() as dst:
        for table in ("bench_queries", "bench_qrels", "bench_documents"):
            rows = src.execute(f"SELECT * FROM {table}").fetchall()
            if rows:
                marks = ",".join("?" * len(rows[0]))
                dst.executemany(f"INSERT OR IGNORE INTO {table} VALUES ({marks})", [tuple(r) for r in rows])
    per_config = len(recs) * seeds
    configs = -(-n_results // per_config)
    stored = 0
    for c in range(configs):
        label = f"method-{c:02d}"
        spec_hash = hashlib.sha256(label.encode()).hexdigest()[:16]
        for rec in recs:
            for seed in range(seeds):
                if stored >= n_results:
                    return stored
                per_query: dict[str, dict[str, float]] = {}
                measures: dict[str, MeasureValue] = {}
                for m, col in rec.per_query.items():
                    vals = list(col.values())
                    rng.shuffle(vals)
                    shift = rng.uniform(-0.05, 0.05)
                    vals = [min(1.0, max(0.0, v + shift)) if 0.0 <= v <= 1.0 else v for v in vals]
                    per_query[m] = dict(zip(col, vals))
                    measures[m] = MeasureValue(sum(vals) / len(vals) if vals else None, len(vals),
                                               None, None)
                for m, v in rec.measures.items():
                    if m not in measures:
                        measures[m] = MeasureValue(v.mean, v.n, v.ci_low, v.ci_high)
                    elif measures[m].mean is not None and v.ci_low is not None and v.ci_high is not None:
                        half = (v.ci_high - v.ci_low) / 2
                        measures[m].ci_low, measures[m].ci_high = measures[m].mean - half, measures[m].mean + half
                rankings = {}
                for q, ranked in rec.rankings.items():
                    docs = [d for d, _ in ranked]
                    rng.shuffle(docs)
                    scores = sorted((rng.random() for _ in docs), reverse=True)
                    rankings[q] = list(zip(docs, scores))
                key = result_key(spec_hash, rec.benchmark_version, seed, rec.k, rec.harness_version)
                out.save(ResultRecord(
                    key=key, retriever=label, label=label, spec_hash=spec_hash, spec={"name": label, "params": {}},
                    benchmark=rec.benchmark, benchmark_version=rec.benchmark_version, seed=seed, k=rec.k,
                    harness_version=rec.harness_version, n_queries=rec.n_queries, n_missing=rec.n_missing,
                    measures=measures, per_query=per_query, phases=rec.phases, llm_calls=[], rankings=rankings,
                    environment=rec.environment, provenance=rec.provenance, extra={}))
                stored += 1
    return stored


KINDS = (("per-query downloads", ("-queries.csv.gz", "-queries.json.gz", "-queries.csv", "-queries.json")),
         ("drill-down data", (".js",)), ("pages", (".html",)), ("table downloads", (".csv", ".json")))


def kind_of(rel: str) -> str:
    return next((name for name, ends in KINDS if rel.endswith(ends)), "other")


def site_size(root: Path) -> tuple[int, int, list[tuple[int, str]], dict[str, tuple[int, int]]]:
    """Total bytes, file count, the largest files and ``{kind: (bytes, files)}``."""
    files = [p for p in root.rglob("*") if p.is_file()]
    sizes = sorted(((p.stat().st_size, str(p.relative_to(root))) for p in files), reverse=True)
    kinds: dict[str, tuple[int, int]] = {}
    for size, rel in sizes:
        b, n = kinds.get(kind_of(rel), (0, 0))
        kinds[kind_of(rel)] = (b + size, n + 1)
    return sum(s for s, _ in sizes), len(files), sizes[:5], kinds


def goal_text(value: float, goal: float, unit: str) -> str:
    ratio = value / goal
    return f"goal ≤ {goal:g}{unit}: " + (f"met ({ratio:.2f}× the goal)" if value <= goal else
                                           f"missed by {value - goal:.2f}{unit} ({ratio:.2f}× the goal)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=int, default=500)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--data-dir", type=Path, default=None)
    ap.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "beyondsim-perf-site")
    ap.add_argument("--keep", type=Path, default=None, help="Render into this folder and keep it.")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--store", type=Path, default=None,
                    help="Keep the synthetic store here and reuse it when it already holds --results results.")
    args = ap.parse_args()

    names = on_disk(args.data_dir)
    print(f"benchmarks on disk: {', '.join(names)}")
    base = base_store(args.cache, names)
    work = Path(tempfile.mkdtemp(prefix="beyondsim-perf-site-"))
    try:
        path = args.store or work / "results.sqlite"
        store = Store(path)
        n = len(store.results())
        if n != args.results:
            store.close()
            path.unlink(missing_ok=True)
            store = Store(path)
            n = synthetic(base, store, args.results, args.seeds, random.Random(args.seed))
        print(f"store: {n} results, {path.stat().st_size / 1e6:.1f} MB")
        out = args.keep or work / "site"
        if args.keep and out.exists():
            shutil.rmtree(out)
        from reports import render_site

        t, c = time.perf_counter(), time.process_time()
        render_site(store, out)
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        total, count, largest, kinds = site_size(out)
        mb = total / 1e6
        per_result = mb / max(n, 1)
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"machine: {os.cpu_count()} cores, load average {load:.1f} during the render (wall time on a "
              "loaded machine measures the machine; CPU seconds measure the work)")
        print(f"render: {wall:.1f} s wall, {cpu:.1f} s CPU for {n} results "
              f"({wall / max(n, 1) * 1000:.0f} ms/result); " + goal_text(wall, GOAL_S, " s"))
        print(f"site: {mb:.1f} MB in {count} files, {per_result:.3f} MB per result; "
              + goal_text(per_result, GOAL_MB_PER_RESULT, " MB"))
        for name, (b, k) in sorted(kinds.items(), key=lambda kv: -kv[1][0]):
            print(f"  {b / 1e6:7.2f} MB  {b / 1e6 / max(n, 1):.3f} MB/result  {name} ({k} files)")
        print("largest files:")
        for size, rel in largest:
            print(f"  {size / 1e6:7.2f} MB  {rel}")
        store.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        base.close()


if __name__ == "__main__":
    main()
