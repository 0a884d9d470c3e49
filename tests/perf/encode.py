"""Encoding throughput of the encoder backends (harness/models/onnx.py) on the CPU: torch against ONNX
Runtime fp32 and int8, on the same texts in one process.

    python -m tests.perf.encode [--docs 512] [--models all-MiniLM-L6-v2,all-mpnet-base-v2]
                                [--backends torch,onnx,onnx-int8] [--batch-size 64] [--repeat 2]
                                [--queries 100] [--data-dir ../shared/data] [--cache DIR]

Texts: the first ``--docs`` documents of BEIR SciFact (title and abstract, through the benchmark
loader), or, when its data is missing, as many synthetic texts of 40–300 random words; queries for
the top-10 overlap: the first ``--queries`` SciFact queries (synthetic ones of 5–15 words without
the data; 0: no overlap column).

Each model is loaded once per backend (``EncoderPool.model``; the onnx backends export it into
``--cache``, a temporary folder by default, so the export is timed too: the ``load s`` column). Then
``--repeat`` rounds each encode the texts once with every backend in turn (``EncoderPool.encode``
with the embedding cache switched off: the path a run takes, longest texts first, batches of
``--batch-size``, L2-normalised), timed in wall-clock seconds; the best round of each counts, since
other load on the machine only ever adds time. torch's intra-op threads are what torch has
(``OMP_NUM_THREADS``, or ``--threads``), and ONNX Runtime is given as many.

Printed per model and backend: documents per second, the ratio to torch's (the reference, timed in
the same rounds), the CPU seconds of the best round, the smallest cosine of an embedding with
torch's, the largest absolute difference, and the mean overlap of each query's top 10 (inner
product over the documents) with torch's.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from harness.models.onnx import BACKENDS
from harness.models.pool import EncoderPool

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
MODELS = ("all-MiniLM-L6-v2", "all-mpnet-base-v2")


def synthetic(n: int, lo: int, hi: int, seed: int) -> list[str]:
    rng = np.random.default_rng(seed)
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    vocab = ["".join(rng.choice(letters, size=int(k))) for k in rng.integers(2, 11, size=5000)]
    return [" ".join(rng.choice(vocab, size=int(k))) for k in rng.integers(lo, hi + 1, size=n)]


def texts_of(n_docs: int, n_queries: int, data_dir: Path) -> tuple[str, list[str], list[str]]:
    """``(source, documents, queries)``."""
    if (data_dir / "beir" / "scifact").is_dir():
        from harness.registry import load_benchmark

        docs = load_benchmark("beir/scifact", data_dir).corpus.texts()[:n_docs]
        with open(data_dir / "beir" / "scifact" / "queries.jsonl", encoding="utf-8") as f:
            queries = [json.loads(line)["text"] for line in f][:n_queries]
        return "SciFact", docs, queries
    return "synthetic", synthetic(n_docs, 40, 300, 0), synthetic(n_queries, 5, 15, 1)


def top10(q: np.ndarray, d: np.ndarray) -> np.ndarray:
    k = min(10, d.shape[0])
    return np.argsort(-(q @ d.T), axis=1, kind="stable")[:, :k]


def bench_model(name: str, docs: list[str], queries: list[str], args: argparse.Namespace,
                cache: Path) -> list[dict[str, object]]:
    pool = EncoderPool(cache, "cpu")
    pool.cache = None  # the ONNX exports are kept under ``cache``; embeddings are always computed
    load: dict[str, float] = {}
    for b in args.backends:
        t0 = time.perf_counter()
        pool.model(name, backend=b)
        load[b] = time.perf_counter() - t0
        pool.encode(name, docs[:8], batch_size=args.batch_size, backend=b)  # warm-up
    best: dict[str, tuple[float, float]] = {}
    emb: dict[str, np.ndarray] = {}
    for _ in range(args.repeat):
        for b in args.backends:
            w0, c0 = time.perf_counter(), time.process_time()
            e = pool.encode(name, docs, batch_size=args.batch_size, backend=b)
            wall, cpu = time.perf_counter() - w0, time.process_time() - c0
            if b not in best or wall < best[b][0]:
                best[b] = (wall, cpu)
            emb[b] = np.asarray(e)
    qemb = {b: np.asarray(pool.encode(name, queries, batch_size=args.batch_size, backend=b))
            for b in args.backends} if queries else {}
    ref = args.backends[0]
    rows = []
    for b in args.backends:
        wall, cpu = best[b]
        cos = (emb[b] * emb[ref]).sum(1) / (np.linalg.norm(emb[b], axis=1) * np.linalg.norm(emb[ref], axis=1))
        overlap = None
        if queries:
            mine, theirs = top10(qemb[b], emb[b]), top10(qemb[ref], emb[ref])
            overlap = float(np.mean([len(set(x) & set(y)) / len(y) for x, y in zip(mine, theirs)]))
        rows.append({"model": name, "backend": b, "load_s": load[b], "docs_s": len(docs) / wall,
                     "ratio": best[ref][0] / wall, "cpu_s": cpu, "min_cos": float(cos.min()),
                     "max_abs": float(np.abs(emb[b] - emb[ref]).max()), "top10": overlap})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--docs", type=int, default=512)
    ap.add_argument("--queries", type=int, default=100, help="queries of the top-10 overlap (0: none)")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--backends", default=",".join(BACKENDS), help="the first is the reference (torch)")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=2, help="timed rounds (best counts)")
    ap.add_argument("--threads", type=int, default=0, help="torch (and ONNX Runtime) threads; 0: torch's own")
    ap.add_argument("--data-dir", type=Path, default=DATA)
    ap.add_argument("--cache", type=Path, default=None, help="keep the ONNX exports here (default: a temporary folder)")
    args = ap.parse_args()
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if args.threads:
        torch.set_num_threads(args.threads)
    source, docs, queries = texts_of(args.docs, args.queries, args.data_dir)
    import onnxruntime

    print(f"encoding {len(docs)} {source} documents ({len(queries)} queries for the top-10 overlap), batch "
          f"{args.batch_size}, best of {args.repeat}; torch {torch.__version__} and onnxruntime "
          f"{onnxruntime.__version__}, {torch.get_num_threads()} thread(s)")
    rows = []
    with tempfile.TemporaryDirectory(prefix="beyondsim-perf-encode-") as tmp:
        for name in [m.strip() for m in args.models.split(",") if m.strip()]:
            rows += bench_model(name, docs, queries, args, args.cache or Path(tmp))
    head = (f"{'model':<20} {'backend':<10} {'load s':>7} {'texts/s':>8} {'× ' + args.backends[0]:>8} {'CPU s':>7} "
            f"{'min cos':>9} {'max |Δ|':>9} {'top-10':>7}")
    print("\n" + head + "\n" + "-" * len(head))
    for r in rows:
        top = f"{r['top10']:.3f}" if r["top10"] is not None else "–"
        print(f"{r['model']:<20} {r['backend']:<10} {r['load_s']:>7.1f} {r['docs_s']:>8.1f} {r['ratio']:>7.2f}× "
              f"{r['cpu_s']:>7.1f} {r['min_cos']:>9.6f} {r['max_abs']:>9.2e} {top:>7}")


if __name__ == "__main__":
    main()
