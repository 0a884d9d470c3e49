"""Timing of NNN decoding (nnn-fix, exact mode) against exact dense search on synthetic clustered
embeddings.

    python -m tests.perf.fista [--sizes 10000,100000,1000000] [--queries 1000] [--sweep l1|grid|none]
                               [--threads 1,default] [--quick]

Data: n unit-norm documents in d = 384 dimensions around n/100 random centres (document =
normalise(centre + noise of norm ≈ 1), so documents of one cluster have cosine ≈ 0.5); each query
is the normalised sum of 2–4 random documents plus a little noise.

Timed, in one process on the same data:

* reference: exact dense top-10 with faiss ``IndexFlatIP`` as called (on CUDA, also exact torch
  top-10), and the same search on faiss's BLAS path: faiss takes that path only when queries × d
  reach its ``distance_compute_blas_threshold`` (128,000 in faiss 1.15: 334 queries at d = 384)
  and otherwise searches query by query, about 7× slower a query at 100k documents. The goals
  are ratios to faiss as called (the yardstick they were set with); the ratio to its BLAS path is
  printed beside each (``vs BLAS``), since below 334 queries that is the faster exact search;
* ``nnn-fix`` in its exact (tol) mode exactly as the retriever runs it
  (:func:`retrievers.nnn.exact_solve` with the retriever's default parameters at the runner's
  k = ``harness.run.runner.DEFAULT_K``): the solver's own dense pass (top-k for the ranking's fill and
  the candidate pool), the working-set solves, the whole-corpus guard. faiss and nnn-fix runs
  alternate (``--repeat`` pairs) and both the best-of times and the per-pair ratios are printed,
  since other load on the machine only ever adds time and drifts between runs;
* the λ sweep: every (λ1, λ2) of the paper's grid {0.01, 0.03, 0.06, 0.1, 0.3, 0.6, 1.0}
  (``--sweep grid``; ``--sweep l1``: the λ1 grid at λ2 = 0.1; ``--sweep cross``: that and the λ2
  grid at λ1 = 0.03), one pair per point, on the first ``--sweep-queries`` queries (both runs of
  a pair on the same queries);
* full-corpus FISTA in the paper's fixed-T protocol (T = the retriever's default ``iters``) on a
  block of ``--full-queries`` queries (the same block at every n), ``--full-iters`` of the T
  iterations timed (each iteration costs the same) and scaled to T and to all queries — printed
  as an estimate with both factors; and tol-mode full-corpus FISTA on a few queries (n ≤ 200k).

Thread counts (``--threads``, default ``1,default``): every table point and sweep point is run
at each count in turn — ``1`` is one thread for torch's intra-op pool and for every BLAS and
OpenMP pool of the process (numpy's, faiss's, torch's; through threadpoolctl), ``default`` the
counts the process started with (the machine's cores unless ``OMP_NUM_THREADS`` and the like say
otherwise), faiss and nnn-fix alike. The sweep runs each point at every count back to back (a
machine whose speed drifts over the sweep moves all counts alike) and ends with one line per
(λ1, λ2): the ratios at each count and whether nnn-fix took longer with the larger count than with
one thread, by how much (the goal: never).

Every nnn-fix solution is checked afterwards (not timed) with the full-corpus KKT residual
(:meth:`retrievers.fista.Solution.kkt`): the certificate that it is the exact minimiser to the
tolerance. On CPU each table point also prints the floor of the formulation: two corpus passes (the
dense one, one that certifies; each at least faiss's BLAS path) plus the d-space work of solving on
the final supports once (:func:`support_solve`, timed), and how many times that floor nnn-fix
takes: the share of its time spent finding the supports. The goals: nnn-fix ≤ 3× faiss as called (≤
5× at λ1 = 0.03, λ2 = 1.0: ``GOALS``), and against faiss's BLAS path ≤ 3× at λ1 = 0.1 and ≤ 8× at
λ1 = 0.01, λ2 = 0.1 (``BLAS_GOALS``, at every thread count); every point says whether its goals
hold and, where not, how far it is. The table at the end lists each figure as measured in this run.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import numpy as np
import torch

from harness.run.runner import DEFAULT_K
from retrievers.fista import lipschitz, solve_full
from retrievers.fista.passes import FAISS_BLAS_FROM, faiss_blas
from retrievers.nnn import NNNParams, exact_solve

GRID = (0.01, 0.03, 0.06, 0.1, 0.3, 0.6, 1.0)
GOAL = 3.0
# the points with a goal of their own: (λ1, λ2) → ratio (the supports near 1,000 of the λ2 = 1.0 corner)
GOALS = {(0.03, 1.0): 5.0}
# the goals of the ratio to faiss's BLAS path at every thread count: (λ1, λ2) → ratio
BLAS_GOALS = {(0.1, 0.1): 3.0, (0.01, 0.1): 8.0}


def goal_for(l1: float, l2: float) -> float:
    """The goal of the ratio at (λ1, λ2): ``GOALS`` where listed, else ``GOAL``."""
    return GOALS.get((l1, l2), GOAL)


def blas_goal_for(l1: float, l2: float) -> float | None:
    """The goal of the ratio to faiss's BLAS path at (λ1, λ2) (``BLAS_GOALS``), or None."""
    return BLAS_GOALS.get((l1, l2))


def parse_threads(spec: str) -> list[int | None]:
    """``--threads``: comma-separated counts ≥ 1 or ``default`` (None: the counts the process
    started with)."""
    out: list[int | None] = []
    for part in (p.strip() for p in spec.split(",")):
        if part == "default":
            out.append(None)
        elif part.isdigit() and int(part) >= 1:
            out.append(int(part))
        else:
            raise SystemExit(f"--threads: expected counts ≥ 1 or 'default', got {part!r}")
    if not out:
        raise SystemExit("--threads: give at least one count")
    return out


@contextlib.contextmanager
def using_threads(n: int | None) -> Iterator[str]:
    """Run a block with ``n`` threads in torch's intra-op pool and in every BLAS and OpenMP pool
    of the process (faiss's included); None: as they are. Yields the block's label."""
    from threadpoolctl import ThreadpoolController

    if n is None:
        yield f"default ({torch.get_num_threads()} threads)"
        return
    prev = torch.get_num_threads()
    with ThreadpoolController().limit(limits=n):
        torch.set_num_threads(n)
        try:
            yield f"{n} thread{'s' if n > 1 else ''}"
        finally:
            torch.set_num_threads(prev)


def make_data(n: int, d: int, b: int, seed: int, device: torch.device, per_cluster: int = 100,
              spread: float = 1.0, noise: float = 0.1) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    nc = max(1, n // per_cluster)
    centres = torch.nn.functional.normalize(torch.randn(nc, d, generator=g), dim=1)
    D = torch.empty(n, d)
    step = 1 << 17
    for s in range(0, n, step):  # chunked to keep the temporaries small at n = 1M
        m = min(step, n - s)
        lab = torch.randint(0, nc, (m,), generator=g)
        blk = torch.randn(m, d, generator=g).mul_(spread / math.sqrt(d)).add_(centres[lab])
        D[s:s + m] = torch.nn.functional.normalize(blk, dim=1)
    k = torch.randint(2, 5, (b,), generator=g)
    pick = torch.randint(0, n, (b, 4), generator=g)
    w = (torch.arange(4)[None, :] < k[:, None]).float()
    Q = (D[pick] * w[:, :, None]).sum(1) + noise * torch.randn(b, d, generator=g) / math.sqrt(d)
    Q = torch.nn.functional.normalize(Q, dim=1)
    return D.to(device), Q.to(device)


def timed(fn: Callable[[], Any], device: torch.device) -> tuple[Any, float]:
    if device.type == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - t0


def torch_topk(D: torch.Tensor, Q: torch.Tensor, k: int, chunk: int = 256) -> torch.Tensor:
    out = []
    for s in range(0, Q.shape[0], chunk):
        out.append(torch.topk(Q[s:s + chunk] @ D.T, k, dim=1).indices)
    return torch.cat(out)


def support_solve(D: np.ndarray, Q: np.ndarray, supports: list[np.ndarray], l1: float, l2: float,
                  threads: int = 1) -> list[np.ndarray]:
    """Each query's residual from its support S alone, with the active set fixed at S (the
    stationarity conditions ``x_S = (D_S r − λ1)/λ2``, ``r = q − D_Sᵀx_S``), in the smaller of
    the two forms: for |S| ≤ d the |S| × |S| system ``(λ2 I + D_S D_Sᵀ) x_S = D_S q − λ1`` and
    ``r = q − D_Sᵀx_S``; above d the d × d system ``(λ2 I + D_SᵀD_S) r = λ2 q + λ1 D_Sᵀ1`` by
    the Newton half's kernels (:mod:`retrievers.fista._blas`): one gather of S's rows, one
    product, one Cholesky factorisation, two triangular solves, in float32. The least
    per-query work of any solver that ends on these supports: what the exact solve would cost
    beyond its corpus passes if it knew the supports from the start. With ``threads`` > 1 the
    queries are shared among that many threads, each calling one-thread BLAS (as the Newton
    half's workers do)."""
    if threads > 1 and len(Q) > 1:
        from concurrent.futures import ThreadPoolExecutor

        from threadpoolctl import ThreadpoolController

        # thread k takes queries k, k + threads, ... and its residuals go back to those places
        with ThreadpoolController().limit(limits=1), ThreadPoolExecutor(threads) as ex:
            done = list(ex.map(lambda k: support_solve(D, Q[k::threads], supports[k::threads], l1, l2),
                               range(threads)))
        out: list[np.ndarray] = [np.zeros(0)] * len(Q)
        for k, rs in enumerate(done):
            out[k::threads] = rs
        return out
    from scipy.linalg import cho_factor, cho_solve

    from retrievers.fista._blas import potrf_upper, syrk_upper, trsv_upper

    d = D.shape[1]
    M = np.empty((d, d), dtype=np.float32, order="F")
    U = np.empty((d, d), dtype=np.float32, order="F")
    out = []
    for q, S in zip(Q, supports):
        DS = np.take(D, S, axis=0)
        if len(S) <= d:
            G = DS @ DS.T
            G.flat[::len(S) + 1] += l2
            x = cho_solve(cho_factor(G, check_finite=False), DS @ q - l1, check_finite=False)
            out.append(q.astype(np.float64) - (x @ DS).astype(np.float64))
            continue
        M.fill(0.0)
        np.fill_diagonal(M, l2)
        syrk_upper(M, DS, 1.0)
        if not potrf_upper(M, U):
            raise np.linalg.LinAlgError("λ2 I + D_SᵀD_S is not positive definite in float32")
        rhs = (l2 * q + l1 * DS.sum(0)).astype(np.float32)
        out.append(trsv_upper(U, trsv_upper(U, rhs, True), False).astype(np.float64))
    return out


def compare(a, b) -> str:
    """How two sparse solutions differ: support mismatches (with their largest coefficient) and
    the largest coefficient difference. At KKT tolerance ε a document whose exact coefficient is
    of order ε may be in one support and not the other; both are ε-optimal."""
    A, B = a.to_dense(), b.to_dense()
    mismatch = (A > 0) != (B > 0)
    nm = int(mismatch.sum())
    big = float(torch.where(mismatch, torch.maximum(A, B), 0.0).max()) if nm else 0.0
    diff = float((A - B).abs().max())
    supp = "identical supports" if nm == 0 else f"{nm} support differences (coefficients ≤ {big:.1e})"
    return f"{supp}, max |dx| {diff:.1e}"


def goal_note(ratio: float, goal: float = GOAL) -> str:
    return f"≤ {goal:g}x: holds" if ratio <= goal else f"≤ {goal:g}x: MISSED by {ratio / goal:.2f}x ({ratio:.2f}x)"


@dataclass
class Point:
    threads: str
    n: int
    l1: float
    l2: float
    queries: int
    t_faiss: float  # best of the paired runs
    t_nnn: float
    ratios: list[float]  # per pair
    ratios_blas: list[float]  # per pair, to faiss on its BLAS path
    support_mean: float
    support_max: int
    passes: float
    kkt_max: float
    tol: float
    t_blas: float = 0.0  # faiss on its BLAS path, best of the paired runs
    t_support: float = math.nan  # support_solve on the final supports, best of two runs (table points)
    support_gap: float = math.nan  # the largest |r − r_solution| of those residuals

    @property
    def floor(self) -> float:
        """Two corpus passes (the dense one and one that certifies: each at least the BLAS path)
        plus the d-space work on the final supports: a lower estimate of any exact solve of this
        formulation that ends on these supports."""
        return 2 * self.t_blas + self.t_support

    @property
    def ratio(self) -> float:
        return self.t_nnn / self.t_faiss

    @property
    def median(self) -> float:
        return float(np.median(self.ratios))

    @property
    def median_blas(self) -> float:
        return float(np.median(self.ratios_blas))


class Bench:
    def __init__(self, n: int, args: argparse.Namespace, device: torch.device):
        import faiss

        self.n, self.args, self.device = n, args, device
        d, B = args.dim, args.queries
        (D, Q), t_data = timed(lambda: make_data(n, d, B, args.seed, device), device)
        print(f"\n== n = {n:,} documents, {B:,} queries, d = {d} ==", flush=True)
        print(f"data generated in {t_data:.1f} s ({n // 100:,} clusters); D is {D.numel() * 4 / 2**30:.2f} GiB")
        self.D, self.Q = D, Q
        self.Qn = np.ascontiguousarray(Q.cpu().numpy())
        self.index = faiss.IndexFlatIP(d)
        self.index.add(np.ascontiguousarray(D.cpu().numpy()))
        self.index.search(self.Qn[:16], 10)  # warm-up
        exact_solve(D, Q[:16], NNNParams(l1=0.1, l2=0.1), DEFAULT_K)
        self.points: list[Point] = []
        self.threads = "default"  # the label of the thread count the points are run at

    def pair(self, l1: float, l2: float, nq: int, repeat: int, floor: bool = False) -> Point:
        """``repeat`` alternating runs of faiss and of nnn-fix (as the retriever runs it) on the
        first nq queries (faiss's BLAS path the best of three runs in each: one slow pass of the
        floor would flatter a ratio), then the full-corpus KKT check of the last nnn-fix
        solution (and with ``floor``, :meth:`support_floor` on it)."""
        p = NNNParams(l1=l1, l2=l2)
        Q, Qn = self.Q[:nq], self.Qn[:nq]
        tf, tb, tn = [], [], []
        sol = None
        for _ in range(repeat):
            tf.append(timed(lambda: self.index.search(Qn, 10), torch.device("cpu"))[1])
            with faiss_blas(max(nq, FAISS_BLAS_FROM)):  # the floor: its best of three (a pass is cheap)
                tb.append(min(timed(lambda: self.index.search(Qn, 10), torch.device("cpu"))[1] for _ in range(3)))
            sol, t = timed(lambda: exact_solve(self.D, Q, p, DEFAULT_K), self.device)
            tn.append(t)
        assert sol is not None
        kkt = float(sol.kkt(self.D, Q, l1, l2, chunk=self.args.chunk).max()) if nq else 0.0
        st = sol.stats
        pt = Point(self.threads, self.n, l1, l2, nq, min(tf), min(tn), [b / a for a, b in zip(tf, tn)],
                   [b / a for a, b in zip(tb, tn)], st["support_mean"],
                   st["support_max"], st["corpus_passes"], kkt, p.tol)
        pt.t_blas = min(tb)
        if floor and nq:
            pt.t_support, pt.support_gap = self.support_floor(sol, nq, l1, l2)
        self.points.append(pt)
        self.last_stats = st
        return pt

    def support_floor(self, sol: Any, nq: int, l1: float, l2: float) -> tuple[float, float]:
        """:func:`support_solve` on the supports of ``sol`` (the first nq queries) with torch's
        thread count, timed (best of two runs), and how far its residuals are from the solution's
        own ``q − Dᵀx``."""
        Dn = np.ascontiguousarray(self.D.cpu().numpy())
        lists = sol.lists()
        supports = [idx for idx, _ in lists]
        best, R = math.inf, []
        for _ in range(2):
            R, t = timed(lambda: support_solve(Dn, self.Qn[:nq], supports, l1, l2, torch.get_num_threads()),
                         torch.device("cpu"))
            best = min(best, t)
        gap = 0.0
        for q, (idx, val), r in zip(self.Qn[:nq].astype(np.float64), lists, R):
            own = q - val.astype(np.float64) @ Dn[idx].astype(np.float64)
            gap = max(gap, float(np.abs(own - r).max()))
        return best, gap

    def table_points(self, l1s: list[float], l2: float) -> None:
        a = self.args
        print(f"-- nnn-fix exact (tol {NNNParams().tol:g}) / faiss exact top-10, λ2 = {l2}, {a.queries} queries,"
              f" {a.repeat} paired runs each (nnn-fix as the retriever runs it at k = {DEFAULT_K}),"
              f" {self.threads} --")
        for l1 in l1s:
            pt = self.pair(l1, l2, a.queries, a.repeat, floor=self.device.type == "cpu")
            st = self.last_stats
            pairs = " ".join(f"{r:.2f}" for r in pt.ratios)
            print(f"λ1 = {l1:<5} faiss {pt.t_faiss:7.2f} s (BLAS path {pt.t_blas:.2f} s)"
                  f"  nnn-fix {pt.t_nnn:7.2f} s  ratio {pt.ratio:5.2f}x"
                  f" (best/best), per pair {pairs}, median {pt.median:.2f}x"
                  f"  [{goal_note(pt.median, goal_for(pt.l1, pt.l2))}]; vs BLAS {pt.median_blas:.2f}x"
                  f"{blas_note(pt)}", flush=True)
            print(f"    support mean {st['support_mean']:.1f} (max {st['support_max']}); corpus passes per query"
                  f" {st['corpus_passes']:.2f} (the dense pass + guards); guard fired for {st['guard_fired']}"
                  f" queries, {st['certified_by_bound']} certified from a pass's band without another pass;"
                  f" guard passes per query {st['rounds_hist'][:-1]}, fallbacks {st['fallback']};"
                  f" working-set solves mean {st['solves_mean']:.1f}, active-set iterations mean"
                  f" {st['iterations_mean']:.1f}; Newton half: {st.get('newton_queries', 0)} queries,"
                  f" {st.get('newton_steps', 0) / max(st.get('newton_queries', 0), 1):.1f} steps and"
                  f" {st.get('newton_factorisations', 0) / max(st.get('newton_queries', 0), 1):.1f} factorisations"
                  f" a query; certificate: full-corpus KKT residual max {pt.kkt_max:.1e}"
                  f" (tol {pt.tol:g}) -> {'CERTIFIED' if pt.kkt_max < pt.tol else 'NOT CERTIFIED'}", flush=True)
            if not math.isnan(pt.t_support):
                print(f"    floor of this formulation: two corpus passes (2 × the BLAS path, {2 * pt.t_blas:.2f} s)"
                      f" + the d-space work on the final supports ({pt.t_support:.2f} s: gather, M, factor,"
                      f" solve; residuals within {pt.support_gap:.1e} of the solution's) = {pt.floor:.2f} s,"
                      f" {pt.floor / pt.t_blas:.2f}x the BLAS path; nnn-fix takes {pt.t_nnn / pt.floor:.2f}x"
                      f" the floor", flush=True)

    def sweep(self, l1s: list[float], l2s: list[float],
              settings: list[int | None]) -> dict[str, dict[tuple[float, float], Point]]:
        """Every (λ1, λ2) at every thread count of ``settings``, the counts back to back at each
        point (so that a drift in the machine's speed over the sweep moves all counts alike);
        a summary per count. Returns the points by count label, then by (λ1, λ2)."""
        a = self.args
        nq = min(a.sweep_queries or a.queries, a.queries)
        grids: dict[str, dict[tuple[float, float], Point]] = {}
        print(f"\n-- λ sweep: {len(l1s)} × {len(l2s)} points, {nq} queries, {a.sweep_repeat} pair(s) per point"
              f" and thread count, the counts in turn at each point --")
        for l2 in l2s:
            for l1 in l1s:
                for t in settings:
                    with using_threads(t) as label:
                        self.threads = label
                        pt = self.pair(l1, l2, nq, a.sweep_repeat)
                    grids.setdefault(label, {})[l1, l2] = pt
                    print(f"λ1 = {l1:<5} λ2 = {l2:<5} {label:>20}  ratio {pt.median:6.2f}x (vs BLAS"
                          f" {pt.median_blas:6.2f}x)  support mean {pt.support_mean:7.1f} (max"
                          f" {pt.support_max:5d})  passes {pt.passes:4.2f}  KKT max {pt.kkt_max:.1e}"
                          f" {'certified' if pt.kkt_max < pt.tol else 'NOT CERTIFIED'}"
                          f"  [{goal_note(pt.median, goal_for(pt.l1, pt.l2))}]{blas_note(pt)}",
                          flush=True)
        for label, grid in grids.items():
            print(f"\n-- the sweep at {label} --")
            self.summary(grid, l1s, l2s)
        return grids

    def summary(self, grid: dict[tuple[float, float], Point], l1s: list[float], l2s: list[float]) -> None:
        """The ratio tables of one thread count's sweep and its points within their goals."""
        if len(l2s) > 1:
            print("ratio nnn-fix / faiss (rows λ2, columns λ1):")
            print("  λ2 \\ λ1 " + "".join(f"{l1:>8}" for l1 in l1s))
            for l2 in l2s:
                print(f"  {l2:<7} " + "".join(f"{grid[l1, l2].median:8.2f}" for l1 in l1s))
            print("ratio nnn-fix / faiss on its BLAS path (rows λ2, columns λ1):")
            print("  λ2 \\ λ1 " + "".join(f"{l1:>8}" for l1 in l1s))
            for l2 in l2s:
                print(f"  {l2:<7} " + "".join(f"{grid[l1, l2].median_blas:8.2f}" for l1 in l1s))
        missed = [p for p in grid.values() if p.median > goal_for(p.l1, p.l2)]
        print(f"sweep at n = {self.n:,}: {len(grid) - len(missed)}/{len(grid)} points within their goal"
              + (f"; worst {max(p.median for p in missed):.2f}x (λ1 = {max(missed, key=lambda p: p.median).l1},"
                 f" λ2 = {max(missed, key=lambda p: p.median).l2})" if missed else "")
              + f"; all {'certified' if all(p.kkt_max < p.tol for p in grid.values()) else 'NOT all certified'}")

    def full_corpus(self) -> None:
        a, D, Q, n = self.args, self.D, self.Q, self.n
        B = a.queries
        T = NNNParams().iters
        t_faiss = timed(lambda: self.index.search(self.Qn, 10), torch.device("cpu"))[1]  # beside the block
        blk = min(a.full_queries, B)
        its = min(T, a.full_iters if a.full_iters else (T if n <= 200_000 else 10))
        ex = min(a.exact_queries, B) if n <= 200_000 else 0
        if blk <= 0 and ex <= 0:
            print("full-corpus FISTA: skipped (--full-queries 0, and no tol-mode queries at this size)")
            return
        L, t_L = timed(lambda: lipschitz(D, 0.1), self.device)
        if blk <= 0:
            print("full-corpus FISTA iters mode: skipped (--full-queries 0)")
        else:
            _, t_it = timed(lambda: solve_full(D, Q[:blk], 0.1, 0.1, iters=its, L=L), self.device)
            est = t_it * (T / its) * (B / blk)
            print(f"full-corpus FISTA T={T} (iters mode, λ1 = λ2 = 0.1) {est:9.2f} s   ratio {est / t_faiss:6.1f}x vs"
                  f" faiss ({t_faiss:.2f} s, timed beside it)   [ESTIMATE: {blk} queries x {its} iterations took"
                  f" {t_it:.2f} s, scaled x{T / its:g} (iterations) x{B / blk:g} (queries); L = {L:.1f} took"
                  f" {t_L:.1f} s]")
        if ex <= 0:
            print("full-corpus FISTA tol mode: skipped at this size; the full-corpus KKT check is the certificate")
            return
        full_tol, t_ft = timed(lambda: solve_full(D, Q[:ex], 0.1, 0.1, tol=NNNParams().tol, L=L), self.device)
        fs = full_tol.stats
        print(f"full-corpus FISTA tol (polish + restart, λ1 = λ2 = 0.1) {t_ft * B / ex:9.2f} s   ratio"
              f" {t_ft * B / ex / t_faiss:6.1f}x vs faiss   [ESTIMATE: {ex} queries took {t_ft:.2f} s, scaled"
              f" x{B / ex:g}; iterations mean {fs['iterations_mean']:.0f}; converged {fs['converged']}/{ex}]")
        sub = exact_solve(D, Q[:ex], NNNParams(l1=0.1, l2=0.1), DEFAULT_K)
        print(f"    nnn-fix exact vs full-corpus tol solve on those {ex} queries: {compare(sub, full_tol)}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="10000,100000,1000000", help="corpus sizes, comma-separated")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--queries-large", type=int, default=0,
                    help="queries above 200k documents (0: --queries); said in the output")
    ap.add_argument("--quick", action="store_true", help="small run: n = 20000, 200 queries, λ1 line only")
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--l2", type=float, default=0.1, help="λ2 of the table points")
    ap.add_argument("--l1-points", default="0.1,0.05,0.03,0.01", help="λ1 of the table points, n ≤ 200k")
    ap.add_argument("--l1-points-large", default="0.1", help="λ1 of the table points above 200k")
    ap.add_argument("--sweep", choices=("grid", "cross", "l1", "none"), default="l1",
                    help="grid: all 49 (λ1, λ2) of the paper's grid; l1: the λ1 grid at λ2 = --l2;"
                         " cross: that and the λ2 grid at λ1 = 0.03")
    ap.add_argument("--sweep-large", choices=("grid", "cross", "l1", "none"), default="l1",
                    help="--sweep above 200k")
    ap.add_argument("--sweep-queries", type=int, default=0, help="queries per sweep point (0: all)")
    ap.add_argument("--sweep-repeat", type=int, default=1)
    ap.add_argument("--chunk", type=int, default=128, help="queries per chunk of the KKT check")
    ap.add_argument("--full-queries", type=int, default=100, help="query block of the full-corpus fixed-T timing")
    ap.add_argument("--full-iters", type=int, default=0,
                    help="iterations of the T timed (0: all T at n ≤ 200k, 10 above)")
    ap.add_argument("--exact-queries", type=int, default=20,
                    help="queries solved by full-corpus tol-mode FISTA (timing + exactness check), n ≤ 200k")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeat", type=int, default=3, help="paired runs of faiss and nnn-fix per table point")
    ap.add_argument("--repeat-large", type=int, default=1, help="--repeat above 200k")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", default="1,default",
                    help="thread counts every point is run at, in turn: counts ≥ 1 or 'default' (the process's)")
    args = ap.parse_args(argv)
    settings = parse_threads(args.threads)
    sizes = [int(s) for s in args.sizes.split(",") if s]
    if args.quick:
        sizes, args.queries, args.full_queries, args.exact_queries = [20000], 200, 50, 20
    device = torch.device(args.device)
    import faiss

    print(f"NNN decoding timing: device {device}, torch {torch.__version__} ({torch.get_num_threads()} threads),"
          f" faiss {faiss.__version__} ({faiss.omp_get_max_threads()} threads)")
    p = NNNParams()
    print(f"nnn-fix defaults: tol = {p.tol:g} (KKT residual), candidates M = {p.candidates}, query chunk"
          f" {p.query_chunk}, fixed-T iters = {p.iters}; runner k = {DEFAULT_K}")
    all_points: list[Point] = []
    for n in sizes:
        large = n > 200_000
        a = argparse.Namespace(**vars(args))
        if large:
            a.queries = args.queries_large or args.queries
            a.repeat = args.repeat_large
            if a.queries != args.queries:
                print(f"\n(above 200k documents: {a.queries} queries instead of {args.queries}, to bound time"
                      " and memory)")
        b = Bench(n, a, device)
        l1s = [float(x) for x in (args.l1_points_large if large else args.l1_points).split(",") if x]
        mode = "l1" if args.quick else (args.sweep_large if large else args.sweep)
        for t in settings:
            with using_threads(t) as label:
                b.threads = label
                print(f"\n-- {label} --")
                b.table_points(l1s, args.l2)
        grids: dict[str, dict[tuple[float, float], Point]] = {}
        if mode == "grid":
            grids = b.sweep(list(GRID), list(GRID), settings)
        elif mode in ("l1", "cross"):
            grids = b.sweep(list(GRID), [args.l2], settings)
            if mode == "cross":
                for label, more in b.sweep([0.03], [l2 for l2 in GRID if l2 != args.l2], settings).items():
                    grids.setdefault(label, {}).update(more)
        if len(grids) > 1:
            thread_comparison(n, grids)
        b.threads = "default"
        b.full_corpus()
        all_points += b.points
        del b

    print("\n== the figures of this run (nnn-fix exact / faiss exact top-10; median of the paired ratios) ==")
    print("| threads | n | queries | λ1 | λ2 | support (mean) | passes | ratio | goal | vs BLAS | goal vs BLAS |"
          " floor vs BLAS | certified |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    seen = set()
    for pt in all_points:
        key = (pt.threads, pt.n, pt.l1, pt.l2)
        if key in seen:
            continue
        seen.add(key)
        g = goal_for(pt.l1, pt.l2)
        gb = blas_goal_for(pt.l1, pt.l2)
        blas_goal = "" if gb is None else (f"≤ {gb:g}x: " + ("holds" if pt.median_blas <= gb
                                                             else f"missed by {pt.median_blas / gb:.2f}x"))
        print(f"| {pt.threads} | {pt.n:,} | {pt.queries} | {pt.l1} | {pt.l2} | {pt.support_mean:.1f} |"
              f" {pt.passes:.2f} | {pt.median:.2f}x |"
              f" ≤ {g:g}x: {'holds' if pt.median <= g else f'missed by {pt.median / g:.2f}x'} |"
              f" {pt.median_blas:.2f}x | {blas_goal} |"
              f" {'—' if math.isnan(pt.t_support) else f'{pt.floor / pt.t_blas:.2f}x'} |"
              f" {'yes' if pt.kkt_max < pt.tol else 'NO'} (KKT {pt.kkt_max:.1e}) |")


def thread_comparison(n: int, grids: dict[str, dict[tuple[float, float], Point]]) -> None:
    """One line per sweep point run at every thread count: the ratios (to faiss as called and to
    its BLAS path), nnn-fix's time and the BLAS path's at each count, and whether nnn-fix took
    longer at a count above one than at one thread (and whether faiss's BLAS path did too: then
    the machine, not the solver, gave the extra threads nothing)."""
    labels = list(grids)
    keys = [k for k in grids[labels[0]] if all(k in grids[lab] for lab in labels)]
    if not keys:
        return
    base = next((lab for lab in labels if lab.startswith("1 thread")), labels[0])
    print(f"\n-- n = {n:,}: the sweep at each thread count (ratio / vs BLAS / nnn-fix seconds / BLAS path"
          f" seconds); 'slower': nnn-fix took longer than at {base} --")
    head = "  λ1     λ2    " + "".join(f" | {lab:>35}" for lab in labels) + " | slower than " + base
    print(head)
    slower_points = slower_alone = 0
    for k in keys:
        cells = "".join(f" | {grids[lab][k].median:6.2f}x {grids[lab][k].median_blas:7.2f}x"
                        f" {grids[lab][k].t_nnn:7.2f} s {grids[lab][k].t_blas:6.2f} s" for lab in labels)
        p1 = grids[base][k]
        slow = [lab for lab in labels if lab != base and grids[lab][k].t_nnn > p1.t_nnn]
        also = [lab for lab in slow if grids[lab][k].t_blas > p1.t_blas]
        slower_points += bool(slow)
        slower_alone += bool(set(slow) - set(also))
        note = "no" if not slow else ("yes: " + ", ".join(f"{lab} (+{grids[lab][k].t_nnn / p1.t_nnn - 1:.1%})"
                                                          for lab in slow)
                                      + (" (faiss's BLAS path slower too)" if len(also) == len(slow) else ""))
        print(f"  {k[0]:<6} {k[1]:<6}{cells} | {note}")
    print(f"points slower with more threads than with {base}: {slower_points}/{len(keys)}"
          f" ({slower_alone} of them where faiss's BLAS path was not slower)")


def blas_note(pt: Point) -> str:
    """The point's goal against faiss's BLAS path (``BLAS_GOALS``), where it has one."""
    g = blas_goal_for(pt.l1, pt.l2)
    return "" if g is None else f"  [vs BLAS {goal_note(pt.median_blas, g)}]"


if __name__ == "__main__":
    main()
