"""What a blind run costs: wall seconds of an ordinary and of a blind run of each retriever on a
benchmark (default: bm25 and dense on diag/antonym), in one process with warm caches.

    python -m tests.perf.blind_overhead [--benchmark diag/antonym] [--retrievers bm25,dense]
                                        [--repeat 5] [--fresh] [--data-dir ../shared/data]

One home in a temporary folder; its embedding cache and numba's cache are filled first by one
ordinary and one blind run of each retriever (not timed). Then each retriever is run ``--repeat``
times each way, alternately (:meth:`harness.run.runner.Runner.run_one`: prepare, index, search,
evaluate — the store is not written), and the medians are printed:

* ``ordinary s``: a run in this process, whose imports and loaded models earlier runs paid;
* ``blind s``: the same run in a bubblewrap child (harness/run/blind.py): the sandbox, a Python
  that imports the harness, numpy and the retriever's own modules again, the job and the run as
  JSON, and whatever the retriever loads (a model is loaded only when an embedding misses the
  cache);
* ``overhead s``: blind − ordinary, the figure a blind run adds per (retriever, benchmark, seed);
* ``child outside phases s``: the child's wall seconds outside the retriever's phases, as the
  result records it (``extra["blind"]["overhead_s"]``).

``--fresh`` adds a blind run with ``--blind-cache fresh`` per retriever (nothing computed outside
the sandbox reaches it: dense encodes the corpus and loads its model every time). Afterwards the
blind rankings are checked equal to the ordinary ones.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

from harness.registry import make_spec
from harness.run.runner import Runner, Settings
from harness.store.results import Store

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--benchmark", default="diag/antonym")
    ap.add_argument("--retrievers", default="bm25,dense")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--fresh", action="store_true")
    ap.add_argument("--data-dir", type=Path, default=DATA)
    args = ap.parse_args()
    names = [n for n in args.retrievers.split(",") if n]
    with tempfile.TemporaryDirectory(prefix="blind-overhead-") as tmp:
        home = Path(tmp) / "home"

        def runner(**kw: object) -> Runner:
            return Runner(Settings(home=home, data_dir=args.data_dir, bootstrap=0, **kw),  # type: ignore[arg-type]
                          Store(home / f"{'blind' if kw else 'plain'}.sqlite"), log=lambda m: None)

        plain, sealed = runner(), runner(blind=True)
        fresh = runner(blind=True, blind_cache="fresh") if args.fresh else None
        bench, _ = plain.load_benchmark(args.benchmark)
        sealed.load_benchmark(args.benchmark)
        if fresh is not None:
            fresh.load_benchmark(args.benchmark)
        rows = []
        for name in names:
            spec = make_spec(name)
            want = plain.run_one(spec, bench, 0).rankings  # warm: embeddings, numba, imports
            got = sealed.run_one(spec, bench, 0).rankings
            assert got == want, f"{name}: the blind rankings differ from the ordinary ones"
            times: dict[str, list[float]] = {"ordinary": [], "blind": [], "fresh": []}
            outside: list[float] = []
            for _ in range(args.repeat):
                t = time.perf_counter()
                plain.run_one(spec, bench, 0)
                times["ordinary"].append(time.perf_counter() - t)
                t = time.perf_counter()
                rec = sealed.run_one(spec, bench, 0)
                times["blind"].append(time.perf_counter() - t)
                outside.append(rec.extra["blind"]["overhead_s"])
                assert rec.rankings == want
            if fresh is not None:
                for _ in range(max(1, args.repeat // 2)):
                    t = time.perf_counter()
                    rec = fresh.run_one(spec, bench, 0)
                    times["fresh"].append(time.perf_counter() - t)
                    assert rec.rankings == want
            med = {k: statistics.median(v) if v else None for k, v in times.items()}
            rows.append((name, med, statistics.median(outside)))
        for r in (plain, sealed, *([fresh] if fresh else [])):
            r.close()
            r.store.close()
    print(f"{args.benchmark}: {len(bench.corpus):,} documents, {len(bench.eval_queries):,} queries; "
          f"median of {args.repeat} runs each (wall seconds)")
    head = f"{'retriever':<10} {'ordinary s':>11} {'blind s':>9} {'overhead s':>11} {'child outside phases s':>23}"
    print(head + (f" {'blind fresh s':>14}" if args.fresh else ""))
    for name, med, out in rows:
        line = (f"{name:<10} {med['ordinary']:>11.2f} {med['blind']:>9.2f} {med['blind'] - med['ordinary']:>11.2f} "
                f"{out:>23.2f}")
        print(line + (f" {med['fresh']:>14.2f}" if args.fresh else ""))


if __name__ == "__main__":
    main()
