"""Two processes writing one results store: a key is stored once (the second writer sees it and
keeps it), a forced save replaces it in one transaction, and a fresh store can be created by two
processes at once. Real processes, real SQLite files."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
from pathlib import Path

from harness.store.results import MeasureValue, ResultRecord, Store
from tests.factories import llm_call, make_record

KEY = "k" * 24
QIDS = ("q1", "q2", "q3")


def version(i: int) -> ResultRecord:
    """Version ``i`` of the one result: every part of it says ``i``, so a mix would show."""
    return make_record(
        f"v{i}", retriever="bm25", key=KEY, spec_hash="h" * 16, benchmark="b", benchmark_version="bv", k=5,
        harness_version="0", n_queries=3,
        measures={"nDCG@10": MeasureValue(i / 100, 3), f"only-v{i}": MeasureValue(1.0, 3)},
        per_query={"nDCG@10": {q: i / 100 for q in QIDS}},
        phases={"search": {"wall_s": float(i), "cpu_s": float(i), "items": 3}},
        llm_calls=[llm_call(None, model=f"m{i}", prompt_tokens=i, completion_tokens=i, purpose="x")],
        rankings={q: [(f"d{i}", 1.0)] for q in QIDS},
    )


def _save(path: str, i: int, replace: bool, barrier: mp.synchronize.Barrier | None, out: mp.Queue) -> None:
    try:
        if barrier is not None:
            barrier.wait(30)
        with Store(path) as store:  # opened after the barrier: the first open of a fresh store races too
            out.put((i, "wrote" if store.save(version(i), replace=replace) else "kept"))
    except Exception as e:  # noqa: BLE001 - reported to the parent, which fails the test with it
        out.put((i, f"{type(e).__name__}: {e}"))


def run_processes(path: Path, jobs: list[tuple[int, bool]], *, together: bool) -> dict[int, str]:
    """Run one process per ``(version, replace)``; ``together``: all released at once by a barrier,
    else one after the other. Returns what each reported: wrote, kept, or its exception."""
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    barrier = ctx.Barrier(len(jobs)) if together else None
    procs = [ctx.Process(target=_save, args=(str(path), i, replace, barrier, out)) for i, replace in jobs]
    if together:
        for p in procs:
            p.start()
    for p in procs:
        if not together:
            p.start()
            p.join(60)
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    return dict(out.get(timeout=5) for _ in jobs)


def stored_versions(path: Path) -> list[int]:
    """For every table, the versions its rows of the one result come from (all equal when the
    stored result is whole)."""
    with Store(path) as store:
        [rec] = store.results(full=True)
        assert rec.key == KEY
        i = int(rec.label[1:])
        seen = {i}
        seen |= {int(m.split("v")[1]) for m in rec.measures if m.startswith("only-v")}
        seen |= {round(v * 100) for col in rec.per_query.values() for v in col.values()}
        seen |= {round(rec.measures["nDCG@10"].mean * 100), int(rec.phases["search"]["wall_s"])}
        seen |= {int(c["model"][1:]) for c in rec.llm_calls}
        seen |= {int(d[1:]) for r in rec.rankings.values() for d, _ in r}
        assert len(rec.measures) == 2 and len(rec.llm_calls) == 1 and len(rec.rankings) == 3
    with sqlite3.connect(path) as db:  # no orphaned rows of a replaced version
        for table in ("measures", "query_measures", "phases", "llm_calls", "rankings"):
            assert db.execute(f"SELECT COUNT(*) FROM {table} WHERE result_id NOT IN (SELECT id FROM results)"
                              ).fetchone() == (0,), table
    return sorted(seen)


def test_two_processes_saving_one_key_store_it_once(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"  # not created yet: both processes open it at once
    got = run_processes(path, [(1, False), (2, False)], together=True)
    assert sorted(got.values()) == ["kept", "wrote"], got  # no exception: the second keeps the first's result
    winner = next(i for i, what in got.items() if what == "wrote")
    assert stored_versions(path) == [winner]


def test_a_forced_save_replaces_the_stored_result_in_one_transaction(tmp_path: Path) -> None:
    path = tmp_path / "results.sqlite"
    got = run_processes(path, [(1, False), (2, True), (3, False)], together=False)
    assert got == {1: "wrote", 2: "wrote", 3: "kept"}  # 2 replaced 1; 3 found 2 and kept it
    assert stored_versions(path) == [2]
    # many forced saves at once: each replaces the whole result, so one whole version is left
    got = run_processes(path, [(i, True) for i in range(4, 10)], together=True)
    assert set(got.values()) == {"wrote"}, got
    [left] = stored_versions(path)
    assert left in range(4, 10)
