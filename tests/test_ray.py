"""``--ray``: the run matrix on a Ray cluster of two nodes on this machine (``ray start --head`` and a
second ``ray start`` worker node on 127.0.0.1), checked against a local run of the same matrix;
a worker process killed mid-run; the LLM budget held across workers; Ray Data corpus encoding
into the local embedding cache; sweeps and tuning grids. Skipped where Ray is not installed
(``pip install -e '.[test,ray]'`` installs it)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Iterator

import numpy as np
import pytest

ray = pytest.importorskip("ray")

from fake_llm import FakeLLMServer  # noqa: E402
from harness.run import distributed  # noqa: E402
from harness.models.embedding_cache import EmbeddingCache  # noqa: E402
from harness.models.pool import EncoderPool  # noqa: E402
from harness.core.ledger import read_journal  # noqa: E402
from harness.models.llm import LLMSettings, cache_file  # noqa: E402
from harness.registry import make_spec  # noqa: E402
from harness.run.runner import Settings  # noqa: E402
from harness.store.results import Store  # noqa: E402
from tests.conftest import SHARED_DATA  # noqa: E402
from tests.test_cli import make_beir  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
MATRIX = ["bm25", "dense", "nnn-fix", "-b", "diag/antonym", "-b", "diag/negation", "--seeds", "2", "--device", "cpu"]
N_JOBS = 3 * 2 * 2
CLI = "import sys\nfrom harness.cli import app\ntry:\n    app()\nfinally:\n" \
      "    print('RAY-IMPORTED' if 'ray' in sys.modules else 'RAY-NOT-IMPORTED', file=sys.stderr)\n"


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {**os.environ, "BEYONDSIM_HOME": str(home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
           "RAY_USAGE_STATS_ENABLED": "0", "PYTHONPATH": str(ROOT)}
    env.update(extra)
    return env


def beyondsim(home: Path, *args: str, timeout: float = 900, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", CLI, *args], cwd=ROOT, env=_env(home, **env), capture_output=True,
                          text=True, timeout=timeout)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stored(home: Path) -> set[str]:
    """The result keys in ``home``'s store, read without writing (the driver may be writing)."""
    path = home / "results.sqlite"
    if not path.exists():
        return set()
    try:
        conn = sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True, timeout=30)
        try:
            return {r[0] for r in conn.execute("SELECT key FROM results")}
        finally:
            conn.close()
    except sqlite3.OperationalError:  # not created yet
        return set()


# -- processes of the cluster this module starts ----------------------------------------------------


def _parent(pid: int) -> int:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _descends(pid: int, roots: set[int]) -> bool:
    while pid > 1:
        if pid in roots:
            return True
        pid = _parent(pid)
    return False


def _processes(roots: set[int], title: bytes = b"") -> list[int]:
    """The live processes under ``roots`` (the ``ray start`` processes this module started) whose
    command line starts with ``title``."""
    out = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) in roots:
            continue
        try:
            cmd = (d / "cmdline").read_bytes()
        except OSError:
            continue
        if cmd.startswith(title) and _descends(int(d.name), roots):
            out.append(int(d.name))
    return out


class LocalCluster:
    """A head node and a worker node (one CPU each), each a ``ray start --block`` process of ours, with
    a token of their own (Ray's token authentication)."""

    def __init__(self) -> None:
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.temp = Path(tempfile.mkdtemp(prefix="bsray", dir="/tmp"))  # short: Ray's socket paths are bounded
        self.env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": uuid.uuid4().hex, "RAY_USAGE_STATS_ENABLED": "0"}
        self.procs: list[subprocess.Popen] = []
        ray_bin = str(Path(sys.executable).parent / "ray")
        env = {**os.environ, **self.env, "PYTHONPATH": str(ROOT)}
        common = ["--num-cpus", "1", "--block", "--disable-usage-stats"]
        try:
            self._start([ray_bin, "start", "--head", "--port", str(self.port), "--include-dashboard", "false",
                         "--temp-dir", str(self.temp), *common], env)
            deadline = time.monotonic() + 180
            while not self._listening():
                if time.monotonic() > deadline or self.procs[0].poll() is not None:
                    raise RuntimeError(f"the Ray head node did not start on port {self.port}")
                time.sleep(1)
            self._start([ray_bin, "start", "--address", self.address, *common], env)
        except BaseException:
            self.stop()
            raise

    def _start(self, cmd: list[str], env: dict[str, str]) -> None:
        self.procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))

    def _listening(self) -> bool:
        with socket.socket() as s:
            return s.connect_ex(("127.0.0.1", self.port)) == 0

    @property
    def roots(self) -> set[int]:
        return {p.pid for p in self.procs}

    def stop(self) -> None:
        for p in reversed(self.procs):  # ray start --block stops what it started when it is terminated
            p.send_signal(signal.SIGTERM)
        for p in reversed(self.procs):
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=30)
        shutil.rmtree(self.temp, ignore_errors=True)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """The two-node cluster, and this test process joined to it (until the module ends)."""
    c = LocalCluster()
    with pytest.MonkeyPatch.context() as mp:
        for k, v in {**c.env, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}.items():
            mp.setenv(k, v)
        # Ray read RAY_AUTH_MODE when it was imported: have it read it again, as its own
        # ray._private.authentication does when it turns token mode on
        from ray._raylet import AuthenticationTokenLoader, Config

        Config.initialize("")
        AuthenticationTokenLoader.instance().reset_cache()
        try:
            distributed.connect(c.address, home=tmp_path_factory.mktemp("driver") / "home", data_dir=SHARED_DATA)
            deadline = time.monotonic() + 180
            while sum(1 for n in ray.nodes() if n["Alive"]) < 2:
                assert time.monotonic() < deadline, "the worker node did not join"
                time.sleep(1)
            yield c
        finally:
            distributed.shutdown()
            c.stop()


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The matrix run locally (no --ray): its home."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real benchmark data not found at {SHARED_DATA}")
    home = tmp_path_factory.mktemp("local") / "home"
    r = beyondsim(home, "run", *MATRIX, "--data-dir", str(SHARED_DATA))
    assert r.returncode == 0, r.stderr[-3000:]
    assert "RAY-NOT-IMPORTED" in r.stderr  # without --ray, Ray is never imported
    assert len(_stored(home)) == N_JOBS
    return home


def _same_results(a: Store, b: Store, keys: set[str]) -> None:
    for key in sorted(keys):
        ra, rb = a.get(key, full=True), b.get(key, full=True)
        assert ra is not None and rb is not None, key
        assert (rb.retriever, rb.benchmark, rb.seed) == (ra.retriever, ra.benchmark, ra.seed)
        assert rb.measures == ra.measures, (ra.label, ra.benchmark, ra.seed)
        assert rb.per_query == ra.per_query, (ra.label, ra.benchmark, ra.seed)
        assert rb.rankings == ra.rankings, (ra.label, ra.benchmark, ra.seed)


# -- reaching a cluster -------------------------------------------------------------------------------


def test_an_address_where_nothing_answers_is_refused_within_seconds(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from harness.cli import app

    data = make_beir(tmp_path / "tiny")
    monkeypatch.setenv("BEYONDSIM_HOME", str(tmp_path / "home"))
    started = time.monotonic()
    r = CliRunner().invoke(app, ["run", "bm25", "-b", str(data), "--ray", "127.0.0.1:1"])
    assert time.monotonic() - started < 30, r.output
    assert r.exit_code != 0
    lines = [line for line in r.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "'127.0.0.1:1'" in lines[0] and "nothing accepts a connection" in lines[0], r.output
    assert not _stored(tmp_path / "home")


# the driver of a `--ray local` cluster: its node's address, and where the processes it started listen
LOCAL_DRIVER = """
import json, os, sys
from pathlib import Path
import ray
from harness.run import distributed

def descendants(root):
    parent = {}
    for d in Path("/proc").iterdir():
        try:
            parent[int(d.name)] = int((d / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except (ValueError, OSError, IndexError):
            pass
    tree, grew = {root}, True
    while grew:
        more = {p for p, pp in parent.items() if pp in tree} - tree
        tree, grew = tree | more, bool(more)
    return tree

def listening(pids):
    owner = {}
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                link = os.readlink(fd)
                if link.startswith("socket:["):
                    owner[link[8:-1]] = (Path(f"/proc/{pid}/comm").read_text().strip())
        except OSError:
            pass
    out = []
    for table in ("tcp", "tcp6"):
        for row in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            f = row.split()
            if f[3] == "0A" and f[9] in owner:  # LISTEN
                out.append([owner[f[9]], f[1].split(":")[0]])
    return out

home = Path(sys.argv[1])
cluster = distributed.connect("local", home=home, data_dir=home, num_cpus=1)
try:
    worker_ip = ray.get(ray.remote(ray.util.get_node_ip_address).remote())
    print(json.dumps({"started_here": cluster.started_here, "worker_ip": worker_ip,
                      "nodes": [n["NodeManagerAddress"] for n in ray.nodes() if n["Alive"]],
                      "listening": listening(descendants(os.getpid()))}))
finally:
    distributed.shutdown()
"""
# 127.0.0.1 in /proc/net/tcp and tcp6 (an IPv4-mapped address), and ::1
LOOPBACK = {"0100007F", "0000000000000000FFFF00000100007F", "00000000000000000000000001000000"}


def test_a_local_cluster_listens_on_the_loopback_interface_only(tmp_path: Path) -> None:
    env = {k: v for k, v in _env(tmp_path / "home").items() if not k.startswith("RAY_ADDRESS")}
    r = subprocess.run([sys.executable, "-c", LOCAL_DRIVER, str(tmp_path / "home")], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["started_here"] and got["nodes"] == ["127.0.0.1"] and got["worker_ip"] == "127.0.0.1"
    names = {name for name, _ in got["listening"]}
    assert {"gcs_server", "raylet"} <= names, got["listening"]
    assert all(address in LOOPBACK for _, address in got["listening"]), got["listening"]


# -- the matrix --------------------------------------------------------------------------------------


def test_without_the_option_ray_is_never_imported(tmp_path: Path) -> None:
    data = make_beir(tmp_path / "tiny")
    r = beyondsim(tmp_path / "home", "run", "bm25", "-b", str(data), "--k", "5")
    assert r.returncode == 0, r.stderr[-3000:]
    assert "RAY-NOT-IMPORTED" in r.stderr and "ray:" not in r.stderr
    assert len(_stored(tmp_path / "home")) == 1



def test_the_matrix_on_two_nodes_survives_a_killed_worker_and_equals_the_local_run(
        reference: Path, cluster: LocalCluster, tmp_path: Path) -> None:
    home = tmp_path / "home"
    # the embedding cache is shared state: the cluster's home starts with the one the local run wrote
    shutil.copytree(reference / "cache" / "embeddings", home / "cache" / "embeddings")
    args = [sys.executable, "-c", CLI, "run", *MATRIX, "--data-dir", str(SHARED_DATA), "--ray", cluster.address]
    driver = subprocess.Popen(args, cwd=ROOT, env=_env(home, BEYONDSIM_RAY_MAX_RETRIES="0", **cluster.env),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed, before = None, set()
    deadline = time.monotonic() + 600
    while driver.poll() is None and time.monotonic() < deadline:
        before = _stored(home)
        jobs = _processes(cluster.roots, b"ray::run_job") if before else []
        if jobs:  # a job is running and at least one result is stored: kill that job's worker process
            before = _stored(home)
            os.kill(jobs[0], signal.SIGKILL)
            killed = jobs[0]
            break
        time.sleep(0.05)
    out, err = driver.communicate(timeout=600)
    assert killed is not None, f"no job was seen running after a stored result: {err[-2000:]}"
    first = _stored(home)
    assert before <= first, "a stored result was lost"
    assert driver.returncode == 2 and "did not finish" in err, err[-3000:]  # the killed job was not retried
    assert 0 < len(first) < N_JOBS
    assert "RAY-IMPORTED" in err

    # the rerun skips what is stored and computes the rest
    r = beyondsim(home, "run", *MATRIX, "--data-dir", str(SHARED_DATA), "--ray", cluster.address, **cluster.env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stderr.count("result exists") == len(first)
    assert r.stderr.count("run ") >= N_JOBS - len(first)
    with Store(reference / "results.sqlite") as local, Store(home / "results.sqlite") as remote:
        keys = {x.key for x in local.results()}
        assert {x.key for x in remote.results()} == keys
        _same_results(local, remote, keys)
        nodes = {x.extra["node"]["node_id"] for x in remote.results()}
        assert len(nodes) == 2  # both nodes computed results, and each result says which
        assert all(x.extra["node"]["hostname"] == socket.gethostname() for x in remote.results())
        # the driver saved the drill-down content as a local run does
        for b in local.benchmarks():
            assert remote.queries_of(b.version) == local.queries_of(b.version)


def test_a_large_corpus_in_a_job_is_encoded_by_ray_data_into_the_shared_cache(
        reference: Path, cluster: LocalCluster, tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = beyondsim(home, "run", "dense", "-b", "diag/antonym", "--device", "cpu", "--data-dir", str(SHARED_DATA),
                  "--ray", cluster.address, BEYONDSIM_RAY_ENCODE_MIN="200", **cluster.env)
    assert r.returncode == 0, r.stderr[-3000:]
    with Store(home / "results.sqlite") as remote, Store(reference / "results.sqlite") as local:
        (rec,) = remote.results()
        assert rec.extra["encoder_stats"]["bulk_encoded"] == 210  # the corpus; its 90 queries were encoded in the job
        ref = local.get(rec.key)
        assert ref is not None
        for m, v in ref.measures.items():
            assert rec.measures[m].mean == pytest.approx(v.mean, abs=1e-6), m
    # the entries have the keys a local run gives them (the local run's cache holds the same keys)
    entries = lambda h: {f.name.rsplit("-", 1)[0] for f in (h / "cache" / "embeddings").rglob("*.npy")}  # noqa: E731
    assert len(entries(home)) == 2 and entries(home) <= entries(reference)


# -- the LLM budget ----------------------------------------------------------------------------------


def test_the_llm_budget_holds_across_workers(cluster: LocalCluster, tmp_path: Path) -> None:
    data = make_beir(tmp_path / "tiny")
    home = tmp_path / "home"
    server = FakeLLMServer().start()
    try:
        llm = LLMSettings(base_url=server.base_url, model="gpt-4o-mini", max_calls=5, concurrency=1)
        settings = Settings(home=home, k=5, device="cpu", llm=llm, bootstrap=0)
        with Store(home / "results.sqlite") as store:
            runner = distributed.RayRunner(settings, store, log=lambda m: None, address=cluster.address)
            try:
                # four jobs of three judged queries each: twelve requests, on two workers at a time
                outcomes = runner.run([make_spec("hyde", {"n": 1})], [str(data)], [0, 1, 2, 3])
            finally:
                runner.close()
            assert runner.budget_stop and "--max-calls 5" in runner.budget_stop
            done = [o for o in outcomes if o.status == "done"]
            assert len(store.results()) == len(done) <= 1  # 5 calls finish at most one 3-query job
            assert any(o.status == "budget" for o in outcomes)
        # one budget for the cluster: five requests in all, not five per worker
        assert server.count == 5
        billed = read_journal(cache_file(home))
        assert len(billed) == 5 and all(c["model"] == "gpt-4o-mini" for c in billed)
    finally:
        server.stop()


# -- corpus encoding through Ray Data ----------------------------------------------------------------


def test_ray_data_encoding_writes_the_cache_a_local_run_reads(cluster: LocalCluster, tmp_path: Path) -> None:
    texts = [json.loads(line)["text"] for line in
             (SHARED_DATA / "diag" / "negation" / "corpus.jsonl").read_text(encoding="utf-8").splitlines()[:120]]
    cache_dir = tmp_path / "cache"
    cache = EmbeddingCache(cache_dir / "embeddings")
    got = distributed.encode_corpus_distributed("all-MiniLM-L6-v2", texts, cache, prefix="passage: ", batch_size=16,
                                                actors=2)
    assert got.shape == (len(texts), 384) and got.dtype == np.float32
    # a local run of the same texts and settings is a cache hit with the same array
    pool = EncoderPool(cache_dir, "cpu")
    local = pool.encode("all-MiniLM-L6-v2", texts, prefix="passage: ")
    assert pool.stats["cache_hits"] == 1 and pool.stats["encoded"] == 0
    assert np.array_equal(np.asarray(local), got)
    # and row i is the embedding of text i (not of another one)
    fresh = EncoderPool(None, "cpu").encode("all-MiniLM-L6-v2", texts, prefix="passage: ")
    assert np.allclose(fresh, got, atol=1e-5)
    # other settings are another entry
    other = EncoderPool(cache_dir, "cpu")
    other.encode("all-MiniLM-L6-v2", texts[:5], prefix="passage: ")
    assert other.stats["cache_misses"] == 1


# -- sweeps and tuning grids -------------------------------------------------------------------------


def test_sweep_and_tune_on_ray_store_what_a_local_run_does(cluster: LocalCluster, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    from typer.testing import CliRunner

    from harness.cli import app

    data = make_beir(tmp_path / "toy")
    (data / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td4\t1\nq3\td3\t1\n",
                                           encoding="utf-8")
    results = {}
    for mode in ("local", "ray"):
        home = tmp_path / mode
        monkeypatch.setenv("BEYONDSIM_HOME", str(home))
        extra = ["--ray", cluster.address] if mode == "ray" else []
        r = CliRunner().invoke(app, ["sweep", "bm25", "-b", str(data), "-g", "k1=0.5,1.2,2.0", "-g", "b=0.3,0.9",
                                     "--k", "5", *extra])
        assert r.exit_code == 0, r.output
        t = CliRunner().invoke(app, ["tune", "bm25", "-b", str(data), "-g", "k1=0.1,1.2,3.0", "-p", "b=0.5",
                                     "-m", "nDCG@10", "-o", str(tmp_path / f"{mode}.toml"), *extra])
        assert t.exit_code == 0, t.output
        with Store(home / "results.sqlite") as store:
            (sweep,) = store.sweeps()
            assert store.results() == []  # grid points are not results
        (log,) = (home / "tuning").glob("bm25__*.json")
        tuned = json.loads(log.read_text())
        results[mode] = (sweep, tuned, (tmp_path / f"{mode}.toml").read_text())
    (sl, tl, cl), (sr, tr, cr) = results["local"], results["ray"]
    strip = lambda pts: [{k: v for k, v in p.items() if k != "search_s"} for p in pts]  # noqa: E731
    assert len(sl["points"]) == 6 and strip(sr["points"]) == strip(sl["points"])
    same = lambda d: {k: v for k, v in d.items() if k not in ("points", "created_at")}  # noqa: E731
    assert same(sr) == same(sl)
    assert strip(tr["points"]) == strip(tl["points"]) and tr["best"]["params"] == tl["best"]["params"]
    assert cr == cl
