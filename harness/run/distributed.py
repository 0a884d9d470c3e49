"""The run matrix, sweeps and corpus encoding on a Ray cluster (``--ray local|ADDRESS``).

Everything that imports :mod:`ray` lives here, and this module is imported only when ``--ray`` is
given (``pip install 'beyondsim[ray]'``); without it nothing changes.

- **Jobs.** Every (spec, benchmark, seed) is one Ray task (:func:`run_job`) that builds a
  :class:`~harness.run.runner.Runner` in its worker with the driver's settings and returns
  ``run_one``'s :class:`~harness.store.results.ResultRecord` as a dict (Ray's object transport; nothing
  read back from disk is unpickled). A worker process keeps its runner between tasks, so an
  encoder it loaded serves its next jobs. A task asks for one GPU when the cluster has GPUs and its
  retriever's family computes with torch (every family but ``lexical``, and any retriever that
  trains; a class may say ``uses_gpu = True/False`` itself), else for one CPU.
- **One store.** Only the driver writes the results store: :class:`RayRunner` skips stored keys as
  a local run does, keeps a window of tasks in flight, and saves each result in its own
  transaction as it arrives (``ray.wait``), with the benchmark content and the same lines a local
  run prints. A lost worker or node costs the jobs it was running (Ray retries them first,
  ``BEYONDSIM_RAY_MAX_RETRIES``, default 2); a killed driver costs the jobs in flight. A rerun
  of the same command skips what is stored and computes the rest.
- **Shared state.** Workers read and write the caches under ``<home>/cache`` (embeddings: ``.npy``
  files written by atomic rename, each computed under its entry's lock, so two jobs that need it at
  once encode it once; LLM responses and the journal of billed calls: SQLite), so
  ``home`` must be one path that every node sees (a shared file system; on one machine, the same
  directory), and the data directory too. The LLM budget (``--max-usd``, ``--max-calls``) is one
  :class:`BudgetKeeper` actor on the driver's node that every worker's client reserves from and
  settles to, so the limit holds for the whole cluster. Each result records the node that computed
  it in ``extra["node"]`` (node id, host name, IP, GPU ids).
- **Grids.** ``sweep`` and ``tune`` submit every grid point as a task up front
  (:meth:`RayRunner.prefetch_grid`); the grid code then reads the records in its own order, so the
  stored sweep and the chosen setting are those of a local run. (An exhaustive grid gains nothing
  from Ray Tune's search algorithms, which sample a space or stop trials early.)
- **Corpus encoding.** :func:`encode_corpus_distributed` encodes a corpus with Ray Data
  (``map_batches`` over an actor pool, one encoder per actor) and writes the embedding cache entry a
  local :class:`~harness.models.pool.EncoderPool` would (same key, same file), so a later local run
  reads it. Inside jobs, a cache miss of at least ``BEYONDSIM_RAY_ENCODE_MIN`` texts (default
  100,000) goes that way (torch backend only: an onnx backend encodes in the job).
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import itertools
import os
import socket
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import numpy as np

from ..models.embedding_cache import EmbeddingCache
from ..models.pool import EncoderPool, load_encoder
from ..core.errors import UserError
from ..models.llm import Budget, BudgetExceeded, LLMClient, LLMSettings, cache_file
from ..core.protocols import Progress
from ..core.registry import RetrieverSpec, looks_like_path, make_spec, retriever_info, stored_benchmark_name
from .runner import Computed, Job, Runner, Settings
from ..store.results import MeasureValue, ResultRecord, Store
from ..core.types import split_slice

INSTALL_HINT = "pip install 'beyondsim[ray]'"
ENV_MAX_RETRIES = "BEYONDSIM_RAY_MAX_RETRIES"
ENV_ENCODE_MIN = "BEYONDSIM_RAY_ENCODE_MIN"
DEFAULT_MAX_RETRIES = 2
DEFAULT_ENCODE_MIN = 100_000
PROBE_TIMEOUT_S = 5.0  # how long a cluster's address may take to accept a connection before it is refused
# Ray's switch for local-only Ray: off, a node takes the loopback address and its servers listen there only
LOCAL_ONLY_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
CPU_FAMILIES = frozenset({"lexical"})  # families whose work is not torch: a GPU would sit idle
# the driver's environment variables that the job's workers get (API keys are not among them: set
# those in the environment of each node's `ray start`, where Ray does not record them)
PASSED_ENV = ("BEYONDSIM_LLM_BASE_URL", "BEYONDSIM_LLM_MODEL", "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE",
              "SENTENCE_TRANSFORMERS_HOME", "TORCH_HOME", "NLTK_DATA", ENV_MAX_RETRIES, ENV_ENCODE_MIN)


class RayUnavailable(UserError, RuntimeError):
    """Ray is not installed, or the cluster cannot be reached."""


class JobsLost(UserError, RuntimeError):
    """Jobs whose worker or node was lost; the finished results are stored and a rerun resumes."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError as e:
        raise RayUnavailable(f"--ray needs Ray: {INSTALL_HINT}") from e
    return ray


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise RayUnavailable(f"{name}={raw!r} is not a whole number") from None


# -- the cluster ---------------------------------------------------------------------------------


@dataclass
class Cluster:
    address: str  # as given: "local", "auto" or host:port
    started_here: bool  # ray.init started a local cluster for this process

    @staticmethod
    def resources() -> dict[str, float]:
        return dict(import_ray().cluster_resources())

    @property
    def gpus(self) -> int:
        return int(self.resources().get("GPU", 0))

    @property
    def cpus(self) -> int:
        return int(self.resources().get("CPU", 0))

    def describe(self) -> str:
        ray = import_ray()
        nodes = [n for n in ray.nodes() if n.get("Alive")]
        where = "a local cluster" if self.started_here else f"the cluster at {self.address}"
        return f"ray: {where}: {len(nodes)} node(s), {self.cpus} CPU(s), {self.gpus} GPU(s)"


def host_port(address: str) -> tuple[str, int] | None:
    """``(host, port)`` of a cluster address (``host:port``, ``[v6]:port``, ``ray://host:port``), or
    ``None`` for ``local``, ``auto`` and an address without a port (Ray finds those itself)."""
    rest = address.split("://", 1)[-1]
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def probe(address: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Refuse ``address`` when nothing accepts a TCP connection there within ``timeout`` seconds
    (``ray.init`` would retry for minutes)."""
    where = host_port(address)
    if where is None:
        return
    try:
        with socket.create_connection(where, timeout=timeout):
            pass
    except OSError as e:
        why = f"no answer within {timeout:g} s" if isinstance(e, TimeoutError) else \
            (e.strerror or type(e).__name__).lower()
        raise RayUnavailable(f"cannot join the Ray cluster at {address!r}: nothing accepts a connection on "
                             f"{where[0]}:{where[1]} ({why}); is its head node started there?") from None


@contextlib.contextmanager
def _loopback_only(ray: Any) -> Iterator[None]:
    """While a local cluster starts: Ray's local-only mode, in which the node takes 127.0.0.1 as its
    address and its servers (GCS, raylet, workers) listen on the loopback interface only. Ray reads
    the switch from the environment when it is imported; an already imported Ray has it set too."""
    constants = getattr(getattr(ray, "_private", None), "ray_constants", None)
    before_env, before = os.environ.get(LOCAL_ONLY_ENV), getattr(constants, "ENABLE_RAY_CLUSTER", None)
    os.environ[LOCAL_ONLY_ENV] = "0"
    if before is not None:
        constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        if before_env is None:
            os.environ.pop(LOCAL_ONLY_ENV, None)
        else:
            os.environ[LOCAL_ONLY_ENV] = before_env
        if before is not None:
            constants.ENABLE_RAY_CLUSTER = before


def connect(address: str, *, home: Path, data_dir: Path, num_cpus: int | None = None) -> Cluster:
    """Join the cluster at ``address`` (``host:port`` or ``auto``; one where nothing answers is
    refused within :data:`PROBE_TIMEOUT_S` seconds) or, for ``local``, start one on this machine
    that listens on the loopback interface only, without a dashboard (``num_cpus``: its worker
    slots, default every core). A process already connected keeps its connection. The job's
    workers get ``BEYONDSIM_HOME`` = ``home``, ``BEYONDSIM_DATA`` = ``data_dir`` and the variables
    of :data:`PASSED_ENV` that are set here."""
    ray = import_ray()
    if address != "local":
        probe(address)
    if ray.is_initialized():
        return Cluster(address, started_here=False)
    env = {k: os.environ[k] for k in PASSED_ENV if os.environ.get(k)}
    env.update(BEYONDSIM_HOME=str(home), BEYONDSIM_DATA=str(data_dir))
    kw: dict[str, Any] = dict(runtime_env={"env_vars": env}, log_to_driver=False, namespace="beyondsim")
    try:
        if address == "local":
            os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")  # a local cluster stays offline
            with _loopback_only(ray):
                ray.init(num_cpus=num_cpus, include_dashboard=False, _node_ip_address="127.0.0.1", **kw)
            return Cluster(address, started_here=True)
        ray.init(address=address, **kw)
    except (ConnectionError, RuntimeError, ValueError) as e:
        raise RayUnavailable(f"cannot join the Ray cluster at {address!r}: {e}") from e
    return Cluster(address, started_here=False)


def shutdown() -> None:
    """Leave the cluster (stopping it when this process started it)."""
    ray = import_ray()
    if ray.is_initialized():
        ray.shutdown()


# -- records on the wire -------------------------------------------------------------------------


def record_to_dict(rec: ResultRecord) -> dict[str, Any]:
    return dataclasses.asdict(rec)


def record_from_dict(d: Mapping[str, Any]) -> ResultRecord:
    fields = dict(d)
    fields["measures"] = {m: MeasureValue(**v) for m, v in fields["measures"].items()}
    fields["rankings"] = {q: [(str(doc), float(s)) for doc, s in r] for q, r in fields["rankings"].items()}
    return ResultRecord(**fields)


def wants_gpu(cls: type) -> bool:
    """Whether a retriever class's work runs on a GPU when it has one: its own ``uses_gpu`` when it
    sets one; else every registered family but :data:`CPU_FAMILIES`, and every retriever that trains."""
    own = getattr(cls, "uses_gpu", None)
    if isinstance(own, bool):
        return own
    info = retriever_info(cls)
    return bool(info.trains_on) or (bool(info.family) and info.family not in CPU_FAMILIES)


# -- the worker side -----------------------------------------------------------------------------


class _NoStore:
    """What a worker's runner has for a store: the driver keeps the one results store."""

    def save_benchmark(self, info: Any) -> None:
        pass


@dataclass
class _Worker:
    key: str = ""
    runner: Runner | None = None
    lines: list[str] = field(default_factory=list)
    recent: list[str] = field(default_factory=list)  # the benchmarks of its last jobs, oldest first


_WORKER = _Worker()


class RemoteBudget:
    """A :class:`~harness.models.llm.Budget` held by a :class:`BudgetKeeper` actor: ``reserve`` and ``settle``
    are calls to it, so every worker's LLM client spends from one budget."""

    def __init__(self, keeper: Any):
        self.keeper = keeper

    def reserve(self, est_usd: float | None) -> float:
        ray = import_ray()
        try:
            return float(ray.get(self.keeper.reserve.remote(est_usd)))
        except ray.exceptions.RayTaskError as e:
            if isinstance(e.cause, BudgetExceeded):
                raise BudgetExceeded(str(e.cause)) from None
            raise

    def settle(self, reserved: float, actual_usd: float | None, sent: bool) -> None:
        import_ray().get(self.keeper.settle.remote(reserved, actual_usd, sent))


class BudgetKeeper:
    """The cluster's one LLM budget (a threaded Ray actor around :class:`~harness.models.llm.Budget`: a
    reservation that must wait for others to settle waits in its own thread)."""

    def __init__(self, max_usd: float | None, max_calls: int | None):
        self.budget = Budget(max_usd, max_calls)

    def reserve(self, est_usd: float | None) -> float:
        return self.budget.reserve(est_usd)

    def settle(self, reserved: float, actual_usd: float | None, sent: bool) -> None:
        self.budget.settle(reserved, actual_usd, sent)

    def spent(self) -> dict[str, Any]:
        return {"usd": self.budget.spent_usd, "calls": self.budget.calls}


def node_info() -> dict[str, Any]:
    ray = import_ray()
    return {"node_id": ray.get_runtime_context().get_node_id(), "hostname": socket.gethostname(),
            "ip": ray.util.get_node_ip_address(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}


def _worker_runner(settings: Settings, keeper: Any) -> Runner:
    """This worker process's runner for ``settings`` (kept between tasks: its encoders stay loaded)."""
    ray = import_ray()
    if settings.device is None:  # the device Ray gave this task
        settings = dataclasses.replace(settings, device="cuda" if ray.get_gpu_ids() else "cpu")
    key = repr((settings, None if keeper is None else keeper._actor_id.hex()))
    if _WORKER.runner is None or _WORKER.key != key:
        if _WORKER.runner is not None:
            _WORKER.runner.close()
        runner = Runner(settings, _NoStore(), log=_WORKER.lines.append)  # type: ignore[arg-type]
        if keeper is not None:
            runner._llm = LLMClient(settings.llm or LLMSettings(), cache_path=cache_file(settings.home),
                                    budget=RemoteBudget(keeper))  # type: ignore[arg-type]
        min_texts = _env_int(ENV_ENCODE_MIN, DEFAULT_ENCODE_MIN)
        if min_texts > 0:
            runner.encoders.bulk_encode = _bulk_encode
            runner.encoders.bulk_min_texts = min_texts
        _WORKER.runner, _WORKER.key = runner, key
    return _WORKER.runner


WORKER_BENCHMARKS = 4  # benchmarks (with their splits) a worker keeps loaded between jobs


def _keep_recent_benchmarks(runner: Runner, base: str) -> None:
    """Forget all but the :data:`WORKER_BENCHMARKS` most recently used benchmarks (``base`` is used now)."""
    recent = [b for b in _WORKER.recent if b != base] + [base]
    _WORKER.recent = recent[-WORKER_BENCHMARKS:]
    for name in [n for n in runner._benchmarks if split_slice(n)[0].split(":", 1)[0] not in _WORKER.recent]:
        del runner._benchmarks[name]


def run_job(settings: Settings, spec: RetrieverSpec, benchmark: str, seed: int, keeper: Any = None,
            analyse: bool = True) -> dict[str, Any]:
    """One (spec, benchmark, seed) in a Ray worker: ``{"record": the ResultRecord as a dict, "lines":
    what the run logged, "node": where it ran, "wall_s": seconds in this task}``."""
    t0 = time.perf_counter()
    runner = _worker_runner(settings, keeper)
    _WORKER.lines.clear()
    _keep_recent_benchmarks(runner, benchmark.split(":", 1)[0])
    try:
        bench, load_s = runner.load_benchmark(benchmark)
        rec = runner.run_one(spec, bench, seed, load_s, analyse=analyse)
    finally:
        if runner._llm is not None:
            runner._llm.close()  # stops an embedded LLM server: it must not outlive the job's workers
    node = node_info()
    rec.extra["node"] = node
    return {"record": record_to_dict(rec), "lines": list(_WORKER.lines), "node": node,
            "wall_s": time.perf_counter() - t0}


_REMOTE: dict[str, Any] = {}


def _remote(name: str) -> Any:
    """The Ray remote function or actor class ``name``, made once per process."""
    if name not in _REMOTE:
        ray = import_ray()
        if name == "run_job":
            _REMOTE[name] = ray.remote(run_job)
        elif name == "budget":
            _REMOTE[name] = ray.remote(max_concurrency=256, num_cpus=0)(BudgetKeeper)
        else:  # pragma: no cover
            raise KeyError(name)
    return _REMOTE[name]


# -- the driver ----------------------------------------------------------------------------------


def _cause(error: BaseException) -> BaseException:
    """The exception a task raised, out of Ray's wrapper."""
    cause = getattr(error, "cause", None)
    return cause if isinstance(cause, BaseException) else error


class RayRunner(Runner):
    """A :class:`~harness.run.runner.Runner` whose ``run`` sends the jobs to a Ray cluster and stores
    each result in the driver as it arrives; ``prefetch_grid`` does the same for a sweep's grid."""

    def __init__(self, settings: Settings, store: Store, progress: Progress | None = None,
                 log: Callable[[str], None] = print, *, address: str = "local", num_cpus: int | None = None):
        super().__init__(settings, store, progress, log)
        self.cluster = connect(address, home=settings.home.resolve(), data_dir=self.data_dir, num_cpus=num_cpus)
        self.log(self.cluster.describe())
        # what the workers get: the same settings, with absolute paths
        self.worker_settings = dataclasses.replace(settings, home=settings.home.resolve(), data_dir=self.data_dir)
        self.max_retries = _env_int(ENV_MAX_RETRIES, DEFAULT_MAX_RETRIES)
        self._prefetched: dict[tuple[str, str, int, bool], Any] = {}
        self._keeper: Any = None
        self.nodes: collections.Counter[str] = collections.Counter()  # host names of the finished jobs
        self.job_seconds: dict[str, float] = {}  # result key -> seconds its job took in its worker
        self._worker_names: dict[str, str] = {}  # a benchmark as given -> as the workers load it

    # -- options --

    def job_options(self, spec: RetrieverSpec) -> dict[str, Any]:
        gpu = self.s.device != "cpu" and self.cluster.gpus > 0 and wants_gpu(self.resolve(spec).cls)
        # run_job is made remote without GPUs, so Ray keeps its worker processes (and the models they
        # loaded) between tasks, GPU tasks included: it recycles a worker after every task only for a
        # function declared with GPUs
        return {"num_cpus": 1, "num_gpus": 1 if gpu else 0, "max_retries": self.max_retries}

    def window(self) -> int:
        """How many jobs are kept in flight: twice the cluster's slots, so none idles between jobs."""
        res = self.cluster.resources()
        return max(2, 2 * int(res.get("CPU", 1) + res.get("GPU", 0)))

    def keeper(self, specs: Sequence[RetrieverSpec]) -> Any:
        """The budget actor, when an LLM retriever runs under a limit (else each client's own, unlimited)."""
        llm = self.s.llm or LLMSettings()
        if self._keeper is None and (llm.max_usd is not None or llm.max_calls is not None) \
                and any(self.uses_llm(s) for s in specs):
            ray = import_ray()
            from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

            here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=False)
            self._keeper = _remote("budget").options(scheduling_strategy=here).remote(llm.max_usd, llm.max_calls)
        return self._keeper

    def close(self) -> None:
        super().close()
        if self._keeper is not None:
            import_ray().kill(self._keeper)
            self._keeper = None

    def worker_name(self, benchmark: str) -> str:
        """``benchmark`` as a worker loads it: a folder path resolved the way its loader names it."""
        if benchmark not in self._worker_names:
            self._worker_names[benchmark] = stored_benchmark_name(benchmark) if looks_like_path(benchmark) \
                else benchmark
        return self._worker_names[benchmark]

    def _submit(self, job: Job, keeper: Any, analyse: bool = True) -> Any:
        return _remote("run_job").options(**self.job_options(job.spec)).remote(
            self.worker_settings, job.spec, self.worker_name(job.name), job.seed, keeper, analyse)

    def _received(self, out: Mapping[str, Any], key: str) -> ResultRecord:
        for line in out["lines"]:
            self.log(line)
        rec = record_from_dict(out["record"])
        if rec.key != key:
            raise RuntimeError(f"a worker on {out['node']['hostname']} computed result {rec.key} where the driver "
                               f"expects {key}: its benchmark or retriever differs from the driver's (is the same "
                               "data and the same beyondsim on every node?)")
        self.nodes[str(out["node"]["hostname"])] += 1
        self.job_seconds[rec.key] = float(out["wall_s"])
        return rec

    # -- the matrix --

    def execute(self, jobs: Iterable[Job]) -> Iterator[tuple[Job, Computed]]:
        """Compute ``jobs`` as Ray tasks: all planned first (every stored result is skipped before the
        first task goes), sent seed-major in a window of :meth:`window` tasks, and each record given
        back as it arrives. A job that raises stops the sending and, once the tasks in flight are
        in, the run with its error; jobs whose worker or node was lost end the run with an error
        that says how many; the LLM budget stops the sending."""
        ray = import_ray()
        # seed-major: the first seed of every (retriever, benchmark) goes first, so the later seeds find
        # its encoded corpus in the shared cache instead of encoding it at the same time on another node
        pending = collections.deque(sorted(jobs, key=lambda j: (j.round, j.index)))
        keeper = self.keeper([j.spec for j in pending])
        in_flight: dict[Any, Job] = {}
        error: BaseException | None = None
        lost: list[tuple[Job, str]] = []
        while pending or in_flight:
            window = self.window() if pending else 0
            while pending and error is None and self.settled.stop is None and len(in_flight) < window:
                job = pending.popleft()
                in_flight[self._submit(job, keeper)] = job
            if not in_flight:
                break
            ready, _ = ray.wait(list(in_flight), num_returns=1)
            job = in_flight.pop(ready[0])
            try:
                rec = self._received(ray.get(ready[0]), job.key)
            except ray.exceptions.RayTaskError as e:  # the job raised
                cause = _cause(e)
                if isinstance(cause, BudgetExceeded):
                    yield job, cause
                else:
                    self.log(f"failed: {job.where}: {type(cause).__name__}: {cause}")
                    error = error or cause
                continue
            except ray.exceptions.RayError as e:  # the worker or its node died (after Ray's retries)
                self.log(f"lost: {job.where}: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
                lost.append((job, type(e).__name__))
                continue
            except RuntimeError as e:
                self.log(f"failed: {job.where}: {e}")
                error = error or e
                continue
            yield job, rec
        if self.nodes:
            self.log(f"ray: {sum(self.nodes.values())} job(s) computed on {len(self.nodes)} node(s): "
                     + ", ".join(f"{h} ({n})" for h, n in sorted(self.nodes.items())))
        if error is not None:
            raise error
        if lost:
            raise JobsLost(f"{len(lost)} job(s) did not finish: their worker or node was lost "
                             f"({', '.join(sorted({why for _, why in lost}))}); the {self.settled.done} result(s) "
                             "that finished are stored: run the same command again to compute the rest")

    # -- grids (sweep, tune) --

    def prefetch_grid(self, retriever: str, benchmark: str, grid: Mapping[str, Sequence[Any]],
                      fixed: Mapping[str, Any] | None = None, seed: int = 0) -> int:
        """Submit every point of ``grid`` on ``benchmark`` (the specs :mod:`harness.run.tuning` builds, in
        its order); :meth:`run_one` then returns their records. Returns how many were submitted (0
        when the grid is invalid: the grid code reports why)."""
        fixed = dict(fixed or {})
        try:
            bench, _ = self.load_benchmark(benchmark)
            keys = list(grid)
            specs = [make_spec(retriever, {**fixed, **dict(zip(keys, combo))})
                     for combo in itertools.product(*grid.values())]
        except Exception:  # noqa: BLE001 - the grid code raises the same error with its own message
            return 0
        for spec in specs:
            job = Job(-1, spec, bench, seed, 0, self.key(spec, bench, seed), benchmark)
            self._prefetched[(spec.hash, bench.version, seed, False)] = (self._submit(job, None, analyse=False), job.key)
        return len(specs)

    def run_one(self, spec: RetrieverSpec, bench: Any, seed: int, load_s: float = 0.0,
                analyse: bool = True) -> ResultRecord:
        got = self._prefetched.pop((spec.hash, bench.version, seed, analyse), None)
        if got is None:
            return super().run_one(spec, bench, seed, load_s, analyse)
        ray = import_ray()
        ref, key = got
        try:
            return self._received(ray.get(ref), key)
        except ray.exceptions.RayTaskError as e:
            raise _cause(e) from None


# -- corpus encoding through Ray Data ------------------------------------------------------------


class EncodeBatches:
    """A Ray Data actor: one encoder, loaded once, encodes the batches it is given."""

    def __init__(self, model: str, normalize: bool, max_length: int | None, pooling: str | None, batch_size: int,
                 device: str):
        self.model = load_encoder(model, device, max_length, pooling)
        self.normalize, self.batch_size = normalize, batch_size

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        emb = self.model.encode([str(t) for t in batch["text"]], batch_size=self.batch_size, convert_to_numpy=True,
                                normalize_embeddings=self.normalize, show_progress_bar=False)
        return {"i": np.asarray(batch["i"], dtype=np.int64), "emb": np.asarray(emb, dtype=np.float32)}


def encode_corpus_distributed(model: str, texts: Sequence[str], cache: EmbeddingCache | None = None, *,
                              prefix: str = "", normalize: bool = True, max_length: int | None = None,
                              pooling: str | None = None, batch_size: int = 64,
                              actors: int | tuple[int, int] | None = None,
                              gpus_per_actor: float | None = None) -> np.ndarray:
    """Embeddings of ``prefix + text`` for each text (float32, ``(len(texts), dim)``), computed by
    Ray Data: ``map_batches`` over a pool of ``actors`` :class:`EncodeBatches` (a number, or a
    ``(min, max)`` range the pool grows in; default: one per GPU of the cluster, else one per CPU),
    texts longest first so batches carry little padding. With
    ``cache``, an entry already there is returned as it is, and a computed one is written through
    :meth:`EmbeddingCache.put` under the key :meth:`EncoderPool.cache_key` gives, so a local
    ``EncoderPool.encode`` of the same texts and settings is a cache hit."""
    ray = import_ray()
    import pyarrow as pa
    import ray.data

    texts = list(texts)
    entry = None
    if cache is not None:
        entry = EncoderPool(None, "cpu").cache_key(model, texts, prefix=prefix, normalize=normalize,
                                                   max_length=max_length, pooling=pooling)
        hit = cache.get(*entry, rows=len(texts))
        if hit is not None:
            return hit
    res, free = ray.cluster_resources(), ray.available_resources()
    gpu = gpus_per_actor if gpus_per_actor is not None else (1.0 if free.get("GPU", 0) >= 1 else 0.0)
    pool = actors or max(1, int(res.get("GPU", 0)) if gpu else int(res.get("CPU", 1)))
    n = pool[1] if isinstance(pool, tuple) else pool
    if not texts:
        enc = load_encoder(model, "cpu", max_length, pooling)
        return np.empty((0, enc.get_sentence_embedding_dimension() or 0), dtype=np.float32)
    order = np.argsort([-len(t) for t in texts], kind="stable")
    block = max(batch_size, -(-len(texts) // (4 * n)))  # a few blocks per actor
    tables = [pa.table({"i": order[s:s + block].astype(np.int64),
                        "text": [prefix + texts[j] for j in order[s:s + block]]})
              for s in range(0, len(texts), block)]
    ds = ray.data.from_arrow(tables).map_batches(
        EncodeBatches, batch_size=batch_size, batch_format="numpy", concurrency=pool, num_gpus=gpu,
        num_cpus=0 if gpu else 1,
        fn_constructor_kwargs={"model": model, "normalize": normalize, "max_length": max_length, "pooling": pooling,
                               "batch_size": batch_size, "device": "cuda" if gpu else "cpu"})
    out: np.ndarray | None = None
    seen = 0
    for b in ds.iter_batches(batch_size=None, batch_format="numpy"):
        emb = np.asarray(b["emb"], dtype=np.float32)
        if out is None:
            out = np.empty((len(texts), emb.shape[1]), dtype=np.float32)
        out[np.asarray(b["i"], dtype=np.int64)] = emb
        seen += len(emb)
    if out is None or seen != len(texts):
        raise RuntimeError(f"Ray Data returned {seen} embeddings for {len(texts)} texts")
    if cache is not None and entry is not None:
        cache.put(*entry, out)
    return out


def _bulk_encode(name: str, texts: Sequence[str], *, prefix: str, normalize: bool, max_length: int | None,
                 pooling: str | None, batch_size: int) -> np.ndarray | None:
    """A job's :attr:`EncoderPool.bulk_encode`: a large corpus goes to a Ray Data actor pool that grows
    from one actor to as many as the cluster has free slots now (GPUs when it has GPUs, else CPUs); the
    job's encoder pool caches the result. ``None`` (the job encodes it itself) when no slot is free: a
    pool that waited for the slots held by the jobs waiting for it would never start."""
    ray = import_ray()
    free, gpus = ray.available_resources(), ray.cluster_resources().get("GPU", 0) > 0
    slots = int(free.get("GPU", 0)) if gpus else int(free.get("CPU", 0))
    if slots < 1:
        return None
    return encode_corpus_distributed(name, texts, None, prefix=prefix, normalize=normalize, max_length=max_length,
                                     pooling=pooling, batch_size=batch_size, actors=(1, slots),
                                     gpus_per_actor=1.0 if gpus else 0.0)
