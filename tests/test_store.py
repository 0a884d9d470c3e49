"""The results store when its file is damaged, cannot be written or fills the disk: one
:class:`StoreError` naming the file (never a SQLite traceback), reading still works where writing
cannot, and a failed write loses nothing that was stored before it."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

import harness.store.results as store_mod
from harness.core.errors import UserError
from harness.store.results import MeasureValue, Store, StoreError, open_store
from reports.compare import compare
from tests.factories import make_record, make_store

QIDS = [f"q{i}" for i in range(20)]


def filled(home: Path, n: int = 30) -> list[str]:
    """A store in ``home`` with ``n`` results (rankings and per-query values, so it spans many
    pages); returns their keys."""
    recs = [make_record(f"r{i}", benchmark="nevir", measures={"nDCG@10": MeasureValue(i / n, len(QIDS))},
                        per_query={"nDCG@10": {q: i / n for q in QIDS}},
                        rankings={q: [(f"d{j}", float(-j)) for j in range(20)] for q in QIDS}) for i in range(n)]
    make_store(home, recs).close()
    return [r.key for r in recs]


def one_line_naming(err: BaseException, path: Path) -> None:
    text = str(err)
    assert isinstance(err, UserError) and "\n" not in text and str(path) in text, text
    assert "Traceback" not in text


@pytest.mark.parametrize("damage", ["truncated", "random"])
@pytest.mark.parametrize("readonly", [False, True])
def test_a_damaged_store_is_one_line_naming_the_file(tmp_path: Path, damage: str, readonly: bool) -> None:
    filled(tmp_path)
    path = tmp_path / "results.sqlite"
    if damage == "truncated":
        os.truncate(path, 8192)
    else:
        path.write_bytes(os.urandom(64 * 1024))
    with pytest.raises(StoreError) as info:
        with open_store(tmp_path, readonly=readonly) as store:
            store.results(full=True)
    one_line_naming(info.value, path)
    assert info.value.reason == "damaged" and "damaged" in str(info.value)


def test_damage_found_while_reading_is_a_store_error_too(tmp_path: Path) -> None:
    filled(tmp_path)
    path = tmp_path / "results.sqlite"
    with Store(path) as store:
        pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    os.truncate(path, (pages // 2) * 4096)  # the schema is intact, half the rows' pages are gone
    with pytest.raises(StoreError) as info:
        with Store(path) as store:
            for rec in store.results():
                store.per_query(int(rec.id or 0))
                store.rankings(int(rec.id or 0))
    one_line_naming(info.value, path)


def unwritable(monkeypatch: pytest.MonkeyPatch, path: Path) -> None:
    """``path`` cannot be written here (the tests may run as root, whom file modes do not stop)."""
    real = store_mod.writable
    monkeypatch.setattr(store_mod, "writable", lambda p: False if Path(p) == path else real(p))


def test_a_store_that_cannot_be_written_is_opened_read_only_and_still_read(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    keys = filled(tmp_path, 5)
    path = tmp_path / "results.sqlite"
    with Store(path) as store:
        before = {r.key: r.measures["nDCG@10"].mean for r in store.results()}
        board = [g.display for b in compare(store, n_resamples=50).benchmarks for g in b.groups]
    unwritable(monkeypatch, path)
    with open_store(tmp_path) as store:
        assert store.readonly
        assert {r.key: r.measures["nDCG@10"].mean for r in store.results()} == before
        assert sorted(r.key for r in store.results()) == sorted(keys)
        assert [g.display for b in compare(store, n_resamples=50).benchmarks for g in b.groups] == board
        for write in (lambda: store.save(make_record("new", benchmark="nevir")), lambda: store.delete(keys[0]),
                      lambda: store.set_meta("x", 1)):
            with pytest.raises(StoreError) as info:
                write()
            one_line_naming(info.value, path)
            assert info.value.reason == "readonly" and "read-only" in str(info.value)
    with Store(path) as store:
        assert sorted(r.key for r in store.results()) == sorted(keys)


def test_a_read_only_home_without_a_store_reads_as_empty(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    unwritable(monkeypatch, tmp_path / "results.sqlite")
    with open_store(tmp_path) as store:
        assert store.readonly and store.results() == [] and store.benchmarks() == []
    assert not (tmp_path / "results.sqlite").exists()


def test_a_file_opened_read_only_is_never_written(tmp_path: Path) -> None:
    filled(tmp_path, 3)
    path = tmp_path / "results.sqlite"
    data = path.read_bytes()
    with Store(path, readonly=True) as store:
        assert len(store.results()) == 3
        with pytest.raises(StoreError):
            store.save(make_record("new"))
    assert path.read_bytes() == data


def test_a_full_disk_rolls_the_write_back_and_keeps_what_was_stored(tmp_path: Path) -> None:
    keys = filled(tmp_path, 3)
    path = tmp_path / "results.sqlite"
    big = make_record("big", benchmark="nevir", measures={"nDCG@10": MeasureValue(0.5, 2000)},
                      per_query={"nDCG@10": {f"q{i}": 0.5 for i in range(2000)}},
                      rankings={f"q{i}": [(f"d{j}", 1.0) for j in range(50)] for i in range(2000)})
    with Store(path) as store:
        pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
        store._conn.execute(f"PRAGMA max_page_count={pages}")  # SQLite: "database or disk is full"
        with pytest.raises(StoreError) as info:
            store.save(big)
        one_line_naming(info.value, path)
        assert info.value.reason == "full" and "rolled back" in str(info.value)
        assert not store._conn.in_transaction
        assert not store.has(big.key) and sorted(r.key for r in store.results()) == sorted(keys)
    with Store(path) as store:
        assert sorted(r.key for r in store.results()) == sorted(keys)
        assert store._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert store.save(big)  # with room again, the same write succeeds


def test_a_failed_commit_is_rolled_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = filled(tmp_path, 2)
    with Store(tmp_path / "results.sqlite") as store:
        class FailingCommit:
            def __init__(self, conn: sqlite3.Connection):
                self._real = conn

            def commit(self) -> None:
                raise sqlite3.OperationalError("database or disk is full")

            def __getattr__(self, name: str):  # type: ignore[no-untyped-def]
                return getattr(self._real, name)

        real = store._conn
        store._conn = FailingCommit(real)  # type: ignore[assignment]
        with pytest.raises(StoreError):
            store.save(make_record("late", benchmark="nevir"))
        store._conn = real
        assert not real.in_transaction
        assert sorted(r.key for r in store.results()) == sorted(keys)


def test_other_sqlite_errors_are_not_hidden(tmp_path: Path) -> None:
    """A constraint broken by our own code is a bug: it propagates as SQLite raised it."""
    with make_store(tmp_path) as store:
        with pytest.raises(sqlite3.IntegrityError) as info:
            with store.transaction() as db:
                db.execute("INSERT INTO measures VALUES (?,?,?,?,?,?)", (999, "m", 0.5, 1, None, None))
        assert not isinstance(info.value, StoreError)
