"""The nine ways a hostile submitter could forge the board's record with files and commands alone
(issue 30), each tried on real runs (bm25 on a tiny BEIR dataset of its own under the data folder):
every one of them failed to forge on the code before these checks and must keep failing now."""

from __future__ import annotations

import copy
import gzip
import json
from pathlib import Path

import pytest

from harness import registry
from harness.record.bundle import write_bundle
from harness.store.results import IMPORTED, Store, result_key
from reports.compare import COMPARATOR, ConfigGroup, compare, significance
from tests.test_cli import invoke, make_beir

BENCH = "beir/tiny-med"


def flat(text: str) -> str:
    return " ".join(text.split())


def rows_of(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def rows_of_gzip(path: Path) -> list[dict]:
    return [json.loads(x) for x in gzip.decompress(path.read_bytes()).decode().splitlines() if x.strip()]


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture
def data(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "data"
    make_beir(root / "beir" / "tiny-med")
    monkeypatch.setenv("BEYONDSIM_DATA", str(root))
    monkeypatch.setenv("BEYONDSIM_HOME", str(tmp_path / "home"))
    return root


@pytest.fixture
def exported(data: Path, tmp_path: Path) -> list[dict]:
    """bm25's own result on the dataset, exported from another home: a content line, a result line."""
    other = tmp_path / "elsewhere"
    assert invoke("run", "bm25", "-b", BENCH, "--home", str(other)).exit_code == 0
    assert invoke("export", str(tmp_path / "dump.jsonl"), "--home", str(other)).exit_code == 0
    rows = rows_of(tmp_path / "dump.jsonl")
    assert [r.get("kind") for r in rows] == ["benchmark_content", None]
    return rows


def figures_only(row: dict, value: float = 0.999) -> dict:
    """A result line with its rankings dropped and every figure rewritten to ``value``."""
    row = copy.deepcopy(row)
    row["rankings"] = {}
    for m in row["measures"].values():
        m.update(mean=value, ci_low=None, ci_high=None)
    row["per_query"] = {m: {q: value for q in col} for m, col in row["per_query"].items()}
    return row


def board_row(home: Path, label: str = "bm25") -> ConfigGroup:
    with Store(home / "results.sqlite") as store:
        (bench,) = [b for b in compare(store, n_resamples=50).benchmarks if b.name == BENCH]
    return next(g for g in bench.groups if g.display == label)


def test_1_a_copied_spec_hash_never_makes_a_figure_reproduced(exported: list[dict], tmp_path: Path) -> None:
    """A figures-only import carrying the spec (and the spec hash) of a configuration that a run of
    the shipped matrix matched used to show as *reproduced*."""
    home = tmp_path / "home"
    assert invoke("run", "bm25", "-b", BENCH).exit_code == 0
    row = exported[1]
    with Store(home / "results.sqlite") as store:
        store.save_reproductions([{"spec_hash": row["spec_hash"], "retriever": "bm25", "label": "bm25",
                                   "benchmark": BENCH, "benchmark_version": row["benchmark_version"],
                                   "measure": "nDCG@10", "expected": row["measures"]["nDCG@10"]["mean"],
                                   "tolerance": 0.01, "got": row["measures"]["nDCG@10"]["mean"], "status": "OK",
                                   "kind": "reference", "source": "t"}], shipped=True)
    forged = figures_only(row)
    forged["label"] = "bm25 (claimed)"
    other_spec = dict(forged, label="bm25 (k1=9)", spec={"retriever": "bm25", "params": {**row["spec"]["params"],
                                                                                          "k1": 9.0}})
    path = write_rows(tmp_path / "forged.jsonl", [forged, other_spec])
    assert invoke("import", str(path)).exit_code == 0
    assert board_row(home, "bm25 (claimed)").trust == "reported"
    assert board_row(home, "bm25").trust == "reproduced"  # the user's own run
    # a spec hash copied onto another spec is derived again from the spec on import
    claimed = board_row(home, "bm25 (k1=9)")
    assert claimed.trust == "reported" and claimed.spec_hash != row["spec_hash"]


def test_2_an_import_never_pre_empts_the_users_own_run(exported: list[dict], tmp_path: Path) -> None:
    """An import under the key of a run the user will make used to turn that run into "result exists"
    with the imported figures shown as cached."""
    home = tmp_path / "home"
    path = write_rows(tmp_path / "pre-empt.jsonl", [figures_only(exported[1])])
    assert invoke("import", str(path)).exit_code == 0
    res = invoke("run", "bm25", "-b", BENCH)
    assert res.exit_code == 0 and "result exists" not in res.output, res.output
    key = exported[1]["key"]
    with Store(home / "results.sqlite") as store:
        mine, theirs = store.get(key), store.get(key, slot=IMPORTED)
    assert mine.measures["nDCG@10"].mean == exported[1]["measures"]["nDCG@10"]["mean"] != 0.999
    assert theirs.measures["nDCG@10"].mean == 0.999  # kept apart, not over the user's
    assert board_row(home).measure("nDCG@10").mean == mine.measures["nDCG@10"].mean
    res = invoke("run", "bm25", "-b", BENCH)  # the second run skips on the user's own result
    assert "result exists" in res.output


def test_3_an_import_with_a_later_date_never_hides_the_users_row(exported: list[dict], tmp_path: Path) -> None:
    """Same label, spec hash and seed, another key (another depth), a date in 2099: the board used to
    show the imported figures in place of the user's."""
    home = tmp_path / "home"
    assert invoke("run", "bm25", "-b", BENCH).exit_code == 0
    forged = figures_only(exported[1])
    forged.update(k=50, key="f" * 24, created_at="2099-01-01T00:00:00+00:00")
    assert invoke("import", str(write_rows(tmp_path / "later.jsonl", [forged]))).exit_code == 0
    row = board_row(home)
    assert row.measure("nDCG@10").mean == exported[1]["measures"]["nDCG@10"]["mean"] != 0.999
    assert row.trust == "reproduced"


def test_5_a_damaged_bundle_is_skipped_and_the_site_still_written(exported: list[dict], tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A truncated gzip bundle used to abort every leaderboard ("Aborted!", no site); a zlib-corrupt
    or non-UTF-8 one gave a traceback."""
    assert invoke("run", "bm25", "-b", BENCH).exit_code == 0
    good = gzip.compress("".join(json.dumps(r) + "\n" for r in exported).encode())
    damaged = {"truncated": good[: len(good) // 2],
               "zlib": good[:20] + bytes(b ^ 0xFF for b in good[20:60]) + good[60:],
               "latin-1": gzip.compress("caf\xe9\n".encode("latin-1"))}
    monkeypatch.setenv("BEYONDSIM_REFERENCE", "1")
    for name, payload in damaged.items():
        bundle = tmp_path / f"{name}.jsonl.gz"
        bundle.write_bytes(payload)
        monkeypatch.setattr(registry, "reference_files", lambda b=bundle: {"bundle": b})
        site = tmp_path / f"site-{name}"
        res = invoke("leaderboard", "--out", str(site))
        assert res.exit_code == 0, (name, res.output)
        lines = [x for x in res.output.splitlines() if str(bundle.name) in x]
        assert lines and "not imported" in flat(res.output) and "Traceback" not in res.output, (name, res.output)
        assert (site / "index.html").exists() and (site / "bench").is_dir(), name


def test_6_verify_and_import_of_a_corrupt_gzip_fail_in_one_line(exported: list[dict], tmp_path: Path) -> None:
    good = gzip.compress("".join(json.dumps(r) + "\n" for r in exported).encode())
    bad = tmp_path / "results.jsonl.gz"
    bad.write_bytes(good[:20] + bytes(b ^ 0xFF for b in good[20:60]) + good[60:])
    for verb in ("verify", "import"):
        res = invoke(verb, str(bad))
        assert res.exit_code == 2, (verb, res.output)
        assert f"{bad}: damaged gzip data" in flat(res.output) and len(res.output.strip().splitlines()) == 1, res.output
    assert not (tmp_path / "home" / "results.sqlite").exists()


def test_7_after_the_bundle_the_users_own_run_stays_theirs(exported: list[dict], tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """The bundle's row had the key of the user's later run: the run skipped, --no-reference had no
    page for the benchmark, and the next bundle deleted the row."""
    home = tmp_path / "home"
    bundle = tmp_path / "bundle.jsonl.gz"
    with Store(tmp_path / "elsewhere" / "results.sqlite") as store:
        write_bundle(store, bundle, depth=10)  # as `beyondsim reference bundle` writes it
    monkeypatch.setattr(registry, "reference_files", lambda: {"bundle": bundle})
    monkeypatch.setenv("BEYONDSIM_REFERENCE", "1")
    res = invoke("leaderboard", "--out", str(tmp_path / "site"))
    assert "1 result(s) imported (1 verified" in flat(res.output), res.output
    res = invoke("run", "bm25", "-b", BENCH)
    assert res.exit_code == 0 and "result exists" not in res.output, res.output
    res = invoke("leaderboard", "--out", str(tmp_path / "mine"), "--no-reference")
    assert res.exit_code == 0 and list((tmp_path / "mine" / "bench").glob("beir*tiny-med*.html")), res.output
    newer = rows_of_gzip(bundle)
    newer[1]["label"] = "bm25 (next bundle)"
    bundle.write_bytes(gzip.compress("".join(json.dumps(r) + "\n" for r in newer).encode()))
    res = invoke("leaderboard", "--out", str(tmp_path / "site"))
    assert "1 of an older bundle replaced" in flat(res.output), res.output
    with Store(home / "results.sqlite") as store:
        assert store.get(exported[1]["key"]) is not None  # the user's own result survived the new bundle
        assert [r.label for r in store.results()] == ["bm25", "bm25 (next bundle)"]


def test_8_imported_content_never_replaces_the_benchmarks_own(exported: list[dict], tmp_path: Path) -> None:
    """A content line (matching version) with rewritten texts and flipped judgments used to be stored
    and shown in the user's own drill-downs."""
    home = tmp_path / "home"
    content = copy.deepcopy(exported[0])
    content["queries"][0]["text"] = "attacker's text"
    for r in content["qrels"]:
        r["violating"] = not r["violating"]
    path = write_rows(tmp_path / "content.jsonl", [content])
    res = invoke("import", str(path))
    assert res.exit_code == 2, res.output
    problem = [x for x in res.output.splitlines() if "differs from the local copy" in x]
    assert len(problem) == 1 and f"{path}:1: drill-down content of benchmark {BENCH}" in problem[0], res.output
    assert not (home / "results.sqlite").exists() or not Store(home / "results.sqlite").queries_of(
        content["benchmark_version"])
    assert invoke("import", str(write_rows(tmp_path / "same.jsonl", [exported[0]]))).exit_code == 0  # identical: fine
    assert invoke("run", "bm25", "-b", BENCH).exit_code == 0
    with Store(home / "results.sqlite") as store:
        texts = [q["text"] for q in store.queries_of(content["benchmark_version"])]
        _, violating = store.qrels_of(content["benchmark_version"])
    assert "attacker's text" not in texts and not violating


def test_8b_content_of_a_benchmark_not_here_is_replaced_by_a_run_here(exported: list[dict], tmp_path: Path,
                                                                       data: Path) -> None:
    """Where the benchmark is not on disk the file's content is kept until the user's own run, which
    writes the benchmark's own."""
    home = tmp_path / "home"
    hidden = tmp_path / "hidden"
    (data / "beir" / "tiny-med").rename(hidden)
    content = copy.deepcopy(exported[0])
    content["queries"][0]["text"] = "attacker's text"
    res = invoke("import", str(write_rows(tmp_path / "c.jsonl", [content, exported[1]])))
    assert res.exit_code == 0, res.output
    with Store(home / "results.sqlite") as store:
        assert "attacker's text" in [q["text"] for q in store.queries_of(content["benchmark_version"])]
    hidden.rename(data / "beir" / "tiny-med")
    assert invoke("run", "bm25", "-b", BENCH).exit_code == 0
    with Store(home / "results.sqlite") as store:
        assert "attacker's text" not in [q["text"] for q in store.queries_of(content["benchmark_version"])]


def test_9_a_reported_row_is_never_the_significance_yardstick(exported: list[dict], tmp_path: Path) -> None:
    """A figures-only row of the comparator retriever with per-query values of 1.0 used to become the
    † yardstick: every checked row was marked worse than it."""
    home = tmp_path / "home"
    assert invoke("run", "bm25", "-b", BENCH).exit_code == 0
    claimed = figures_only(exported[1], 1.0)
    claimed.update(label="dense (claimed)", spec={"retriever": "dense", "params": {"model": "claimed"}})
    assert invoke("import", str(write_rows(tmp_path / "claimed.jsonl", [claimed]))).exit_code == 0
    with Store(home / "results.sqlite") as store:
        (bench,) = [b for b in compare(store, n_resamples=200).benchmarks if b.name == BENCH]
    groups = bench.groups
    assert {g.display: g.trust for g in groups} == {"bm25": "reproduced", "dense (claimed)": "reported"}
    tests, yardsticks = significance(groups, bench.per_query, ["nDCG@10"], comparator="dense", n_resamples=200)
    assert yardsticks["nDCG@10"] == {} and tests == {}
    # the same figures, verified on nDCG@10, are a yardstick
    for g in groups:
        if g.display == "dense (claimed)":
            g.records[0].extra["origin"]["verified"] = {"measures": ["nDCG@10"]}
            g.trust = "verified"
    _, yardsticks = significance(groups, bench.per_query, ["nDCG@10"], comparator="dense", n_resamples=200)
    assert groups[yardsticks["nDCG@10"][COMPARATOR]].display == "dense (claimed)"


def test_verify_never_reads_or_prints_a_folder_a_file_names(exported: list[dict], tmp_path: Path) -> None:
    """A results file naming a folder (the one holding a user's keys) made verify load it and print
    what it found there: a leak in a public CI log."""
    keys = tmp_path / "secret-keys"
    keys.mkdir()
    (keys / "id_rsa").write_text("PRIVATE")
    row = copy.deepcopy(exported[1])
    row["benchmark"] = str(keys)
    row["benchmark_info"] = None
    res = invoke("verify", str(write_rows(tmp_path / "probe.jsonl", [row])))
    assert res.exit_code == 1, res.output
    assert str(tmp_path) not in res.output.replace(str(tmp_path / "probe.jsonl"), "") and "id_rsa" not in res.output
    assert "local folder 'secret-keys'" in flat(res.output) and "never read" in flat(res.output)


def test_an_import_gets_the_key_its_spec_gives(exported: list[dict], tmp_path: Path) -> None:
    row = copy.deepcopy(exported[1])
    row["key"], row["spec_hash"] = "k" * 24, "copied-hash"
    assert invoke("import", str(write_rows(tmp_path / "rekeyed.jsonl", [row]))).exit_code == 0
    with Store(tmp_path / "home" / "results.sqlite") as store:
        (rec,) = store.results()
    assert rec.key == exported[1]["key"] and rec.spec_hash == exported[1]["spec_hash"]
    assert rec.key == result_key(rec.spec_hash, rec.benchmark_version, rec.seed, rec.k, rec.harness_version)


def test_pages_isolate_ids_and_say_which_figures_were_checked(exported: list[dict], tmp_path: Path) -> None:
    """A label with a right-to-left override is shown in elements the stylesheet isolates; a verified
    row says which of its figures were checked."""
    from tests.dom import parse

    rlo = "\u05e9\u05dc\u05d5\u05dd 2"  # right-to-left text in a label (control characters are refused)
    row = copy.deepcopy(exported[1])
    row["label"] = rlo
    path = write_rows(tmp_path / "rtl.jsonl", [exported[0], row])
    assert invoke("verify", str(path), "--import").exit_code == 0
    assert invoke("leaderboard", "--out", str(tmp_path / "site"), "--no-reference").exit_code == 0
    html = (tmp_path / "site" / "index.html").read_text(encoding="utf-8")
    isolated = {"a", "span", "td", "th", "dt", "dd", "li", "h1", "h2", "h3", "caption", "figcaption", "summary", "code",
                "p", "bdi", "text"}  # (text: a plot's label in SVG)
    rule = next(x for x in html.split("}") if "unicode-bidi: isolate" in x)
    assert {t.strip() for t in rule.split("{")[0].split("*/")[-1].split(",")} == isolated
    holders = [n for n in parse(html).iter() if n.tag not in ("title", "script")
               and any(isinstance(c, str) and rlo in c for c in n.children)]
    assert holders and all(n.tag in isolated for n in holders), [n.tag for n in holders]
    (page,) = (tmp_path / "site" / "bench").glob("beir*tiny-med*.html")
    cell = parse(page.read_text(encoding="utf-8")).by_id("results").find("td", "trust")
    assert "figures checked here: " in cell.attrs["title"] and "nDCG@10" in cell.attrs["title"]


def test_a_store_made_before_slots_keeps_every_result_in_its_slot(tmp_path: Path) -> None:
    """A store whose results table keys each result once (``key UNIQUE``) is rebuilt when opened:
    each row in the slot its origin gives, its child rows kept, and an own result can then be saved
    beside an import of the same key."""
    import sqlite3

    from harness.store import results as store_mod

    old_schema = (store_mod.SCHEMA.replace("  key TEXT NOT NULL,", "  key TEXT NOT NULL UNIQUE,")
                  .replace(",\n  slot TEXT NOT NULL DEFAULT 'own',\n  UNIQUE (key, slot)", ""))
    path = tmp_path / "old.sqlite"
    db = sqlite3.connect(path)
    db.executescript(old_schema)
    for rid, (key, extra) in enumerate([("mine", "{}"), ("theirs", '{"origin": {"kind": "import"}}')], 1):
        db.execute("INSERT INTO results VALUES (?,?,'bm25','bm25','h','{}','b','v',0,10,'x','2026',1,0,'{}','{}',?)",
                   (rid, key, extra))
        db.execute("INSERT INTO query_measures VALUES (?, 'nDCG@10', 'q1', 0.5)", (rid,))
    db.commit()
    db.close()
    with Store(path) as store:
        assert store.has("mine") and not store.has("theirs") and store.has("theirs", IMPORTED)
        theirs = store.get("theirs", slot=IMPORTED, full=True)
        assert theirs.per_query == {"nDCG@10": {"q1": 0.5}}
        theirs.extra = {}  # the user's own run of the same key
        assert store.save(theirs) and store.has("theirs") and store.has("theirs", IMPORTED)
