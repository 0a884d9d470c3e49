"""The run matrix on Ray: 1 against 2 worker processes, and Ray's overhead per task.

    python -m tests.perf.ray [--data-dir DIR] [--cold] [--noop 200] [--keep DIR]

The matrix is the CI one: bm25, dense and nnn-fix on diag/antonym and diag/negation with seeds 0
and 1 (12 jobs). It runs three times, each in a fresh process with a fresh results store:
``local`` (no Ray, the runner's loop), ``ray-1`` (a local Ray cluster with one worker slot) and
``ray-2`` (two slots). Cluster start and each worker process's imports (torch, the retrievers) are
timed apart, before the matrix. By default each run's home starts with the embedding cache a first local run
wrote (the corpus is encoded once for the whole board and shared between nodes, so this times the
jobs themselves); ``--cold`` starts every run from empty caches (each worker then loads the encoder
and encodes the corpora itself).

Printed, from one run of the script: each configuration's wall seconds for the matrix (cluster
start apart), the sum and mean of the jobs' seconds inside their workers, the speed-up of ray-2
over ray-1 and over local, Ray's overhead per job (wall × slots − job seconds, per job), and the
scheduling cost of an empty task on warm workers (``--noop`` tasks, submitted at once and one at a
time). Also the machine's cores and load average: on a shared machine, wall seconds also measure
the other load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RETRIEVERS = ["bm25", "dense", "nnn-fix"]
BENCHMARKS = ["diag/antonym", "diag/negation"]
SEEDS = [0, 1]


def noop() -> None:
    return None


def warm_worker() -> int:
    """What the first job of a fresh worker process would pay before its own work: the imports."""
    import sentence_transformers  # noqa: F401
    import torch  # noqa: F401

    from harness.registry import get_retriever_class
    from harness.run.runner import Runner  # noqa: F401

    for r in RETRIEVERS:
        get_retriever_class(r)
    time.sleep(1.0)  # hold the slot, so each worker process gets one of these
    return os.getpid()


def child(mode: str, home: Path, data_dir: Path | None, n_noop: int) -> dict:
    """One configuration, in this (fresh) process: the matrix, then the empty tasks."""
    from harness.registry import make_spec
    from harness.run.runner import Runner, Settings
    from harness.store.results import Store

    settings = Settings(home=home, data_dir=data_dir, device="cpu")
    specs = [make_spec(r) for r in RETRIEVERS]
    out: dict = {"mode": mode}
    with Store(home / "results.sqlite") as store:
        t0 = time.perf_counter()
        if mode == "local":
            runner = Runner(settings, store, log=lambda m: None)
        else:
            from harness.run import distributed

            runner = distributed.RayRunner(settings, store, log=lambda m: None, address="local",
                                           num_cpus=int(mode.split("-")[1]))
        out["start_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        if mode == "local":
            warm_worker()
        else:
            import ray

            slots = int(mode.split("-")[1])
            ray.get([ray.remote(num_cpus=1)(warm_worker).remote() for _ in range(slots)])
        out["warm_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        outcomes = runner.run(specs, BENCHMARKS, SEEDS)
        out["wall_s"] = time.perf_counter() - t0
        runner.close()
        out["jobs"] = sum(o.status == "done" for o in outcomes)
        done = [o for o in outcomes if o.record is not None]
        if mode == "local":  # a job's seconds: its phases (the driver loads each benchmark once, apart)
            seconds = [sum(p["wall_s"] for name, p in o.record.phases.items() if name != "load") for o in done]
        else:  # everything the job did in its worker, loading the benchmark when the worker had not
            seconds = [runner.job_seconds[o.key] for o in done]
            out["nodes"] = dict(runner.nodes)
        out["job_s"] = seconds
        out["by_retriever"] = {}
        for o, s in zip(done, seconds):
            out["by_retriever"].setdefault(o.spec.name, []).append(s)
    if mode != "local" and n_noop:
        import ray

        task = ray.remote(num_cpus=1)(noop)
        ray.get([task.remote() for _ in range(4)])  # warm the workers
        t0 = time.perf_counter()
        ray.get([task.remote() for _ in range(n_noop)])
        out["noop_batch_s"] = (time.perf_counter() - t0) / n_noop
        t0 = time.perf_counter()
        for _ in range(min(n_noop, 50)):
            ray.get(task.remote())
        out["noop_roundtrip_s"] = (time.perf_counter() - t0) / min(n_noop, 50)
        ray.shutdown()
    return out


def run_child(mode: str, home: Path, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, "-m", "tests.perf.ray", "--child", mode, "--home", str(home), "--noop", str(args.noop)]
    if args.data_dir:
        cmd += ["--data-dir", str(args.data_dir)]
    env = {**os.environ, "BEYONDSIM_HOME": str(home), "RAY_USAGE_STATS_ENABLED": "0", "HF_HUB_OFFLINE": "1",
           "TRANSFORMERS_OFFLINE": "1"}
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=Path(__file__).resolve().parents[2])
    if r.returncode != 0:
        raise SystemExit(f"{mode} failed:\n{r.stderr[-4000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path)
    ap.add_argument("--cold", action="store_true", help="start every configuration from empty caches")
    ap.add_argument("--noop", type=int, default=200, help="empty tasks for the scheduling cost (0: none)")
    ap.add_argument("--keep", type=Path, help="keep the homes here (default: a temporary folder)")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--home", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.home, args.data_dir, args.noop)))
        return

    root = args.keep or Path(tempfile.mkdtemp(prefix="beyondsim-perf-ray-"))
    root.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    warm = root / "warm"
    if not args.cold:  # encode the corpora once, into the cache every configuration starts from
        run_child("local", warm, argparse.Namespace(**{**vars(args), "noop": 0}))
    print(f"machine: {os.cpu_count()} cores, load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}; "
          f"matrix: {len(RETRIEVERS)} retrievers × {len(BENCHMARKS)} benchmarks × {len(SEEDS)} seeds; "
          f"caches: {'cold' if args.cold else 'warm (embeddings encoded once beforehand, ' + f'{time.perf_counter() - t0:.0f} s)'}")
    res: dict[str, dict] = {}
    for mode in ("local", "ray-1", "ray-2"):
        home = root / mode
        shutil.rmtree(home, ignore_errors=True)
        if not args.cold:
            shutil.copytree(warm / "cache" / "embeddings", home / "cache" / "embeddings")
        res[mode] = r = run_child(mode, home, args)
        slots = 1 if mode == "local" else int(mode.split("-")[1])
        r["overhead_per_job_s"] = (r["wall_s"] * slots - sum(r["job_s"])) / max(1, r["jobs"])
        print(f"{mode:6} start {r['start_s']:5.1f} s  worker imports {r['warm_s']:5.1f} s  matrix {r['wall_s']:6.1f} s wall  {r['jobs']} jobs  "
              f"job seconds: sum {sum(r['job_s']):6.1f}, mean {statistics.mean(r['job_s']):5.2f}  "
              f"overhead/job {r['overhead_per_job_s']:5.2f} s"
              + (f"  empty task: {r['noop_batch_s'] * 1000:.1f} ms at once, {r['noop_roundtrip_s'] * 1000:.1f} ms "
                 "one at a time" if "noop_batch_s" in r else ""), flush=True)
    for mode, r in res.items():
        means = ", ".join(f"{k} {statistics.mean(v):.2f}" for k, v in sorted(r["by_retriever"].items()))
        print(f"{mode:6} mean seconds per job by retriever: {means}")
    one, two, local = res["ray-1"]["wall_s"], res["ray-2"]["wall_s"], res["local"]["wall_s"]
    print(f"speed-up ray-2 / ray-1: {one / two:.2f}x   ray-2 / local: {local / two:.2f}x   "
          f"ray-1 / local: {local / one:.2f}x")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
