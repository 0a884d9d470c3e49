"""The reference results: a plan built into its own store, written as a compressed bundle, and
brought into a user's store by the leaderboard (once per bundle), verified against the benchmark
here, shown beside the user's own rows and left out with --no-reference."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from harness import registry
from harness.record.bundle import META_KEY, bundle_id, load_plan, PlanError
from harness.store.results import Store
from harness.store.trust import is_reference, trust_of
from tests.dom import parse
from tests.test_cli import invoke, make_beir
from tests.test_site import table_rows


BENCH = "beir/tiny-med"
DEPTH = 5  # the bundle's rankings: as deep as the corpus, so every headline figure can be recomputed


def install_plan(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, note: str = "a second configuration",
                 more: str = "") -> dict[str, Path]:
    """A plan of bm25 (two configurations, the second with ``note``, then ``more``, TOML in which
    ``{bench}`` is the benchmark) on a tiny BEIR dataset of its own (``beir/tiny-med`` under the
    data folder: a bundle naming a folder path is never read), installed as the reference files."""
    data = make_beir(tmp_path / "data" / "beir" / "tiny-med")
    monkeypatch.setenv("BEYONDSIM_DATA", str(tmp_path / "data"))
    files = {"plan": tmp_path / "ref" / "plan.toml", "bundle": tmp_path / "ref" / "bundle.jsonl.gz",
             "expected": tmp_path / "ref" / "expected.toml"}
    files["plan"].parent.mkdir()
    bench = json.dumps(BENCH)
    files["plan"].write_text(f'''
depth = {DEPTH}
[[config]]
retriever = "bm25"
benchmarks = [{bench}]

[[config]]
retriever = "bm25"
label = "bm25 (k1=0.5)"
params = {{ k1 = 0.5 }}
benchmarks = [{bench}]
note = {json.dumps(note)}
''' + more.replace("{bench}", bench), encoding="utf-8")
    monkeypatch.setattr(registry, "reference_files", lambda: dict(files))
    monkeypatch.setenv("BEYONDSIM_REFERENCE", "1")  # the leaderboard's default, as outside the tests
    return {**files, "data": data}


@pytest.fixture
def reference(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    return install_plan(tmp_path, monkeypatch)


def build_bundle(reference: dict[str, Path], home: Path) -> None:
    res = invoke("reference", "build", "--home", str(home))
    assert res.exit_code == 0, res.output
    res = invoke("reference", "status", "--home", str(home))
    assert res.exit_code == 0 and res.output.count("1/1") == 2, res.output
    res = invoke("reference", "bundle", "--home", str(home))
    assert res.exit_code == 0 and "wrote 2 result(s)" in res.output, res.output


def test_build_bundle_import_and_show(reference: dict[str, Path], tmp_path: Path, monkeypatch) -> None:
    build_home = tmp_path / "builder"
    build_bundle(reference, build_home)
    with gzip.open(reference["bundle"], "rt", encoding="utf-8") as f:
        lines = [json.loads(x) for x in f]
    results = [d for d in lines if d.get("kind") is None]
    assert len(results) == 2 and all(len(r) <= DEPTH for d in results for r in d["rankings"].values())
    assert all(d["per_query"] for d in results)  # per-query measures of the full ranking are kept
    # the same results give the same bytes (no time stamp in the gzip header)
    first = reference["bundle"].read_bytes()
    assert invoke("reference", "bundle", "--home", str(build_home)).exit_code == 0
    assert reference["bundle"].read_bytes() == first

    # a user's own run of one configuration, then the leaderboard: the bundle comes in once
    user = tmp_path / "user"
    monkeypatch.setenv("BEYONDSIM_HOME", str(user))
    assert invoke("run", "bm25", "-b", BENCH).exit_code == 0
    site = tmp_path / "site"
    res = invoke("leaderboard", "--out", str(site))
    assert res.exit_code == 0, res.output
    flat = " ".join(res.output.split())
    # the bundle's bm25 row is kept apart from the user's own result of the same key, never over it
    assert "2 result(s) imported (2 verified, 0 reported), 0 already in the store" in flat, flat
    assert "differs from the reference" not in flat  # the user's bm25 computed the same figures
    with Store(user / "results.sqlite") as store:
        recs = {(r.label, is_reference(r.extra)): r for r in store.results()}
        assert store.get_meta(META_KEY) == bundle_id(reference["bundle"])
        assert store.get(recs[("bm25", False)].key).extra == recs[("bm25", False)].extra  # run's own slot
    assert sorted(recs) == [("bm25", False), ("bm25", True), ("bm25 (k1=0.5)", True)]
    assert trust_of(recs[("bm25", False)].extra) == "reproduced"
    assert trust_of(recs[("bm25 (k1=0.5)", True)].extra) == "verified"
    root = parse((site / "index.html").read_text(encoding="utf-8"))
    _, rows = table_rows(root.by_id("overview-other"))
    trust = {r[0].find("a").text().strip(): r[4].text().strip() for r in rows}
    assert trust == {"bm25": "reproduced", "bm25 (k1=0.5)": "verified"}
    # the configuration's note from the plan is marked beside its row
    assert [r[0].find("sup", "note-mark").attrs.get("title") for r in rows if "note" in r[0].text()] == \
        ["a second configuration"]

    # a second leaderboard imports nothing; --no-reference leaves the reference rows out of the pages
    res = invoke("leaderboard", "--out", str(site))
    assert res.exit_code == 0 and "imported" not in res.output
    res = invoke("leaderboard", "--out", str(site), "--no-reference")
    assert res.exit_code == 0
    root = parse((site / "index.html").read_text(encoding="utf-8"))
    _, rows = table_rows(root.by_id("overview-other"))
    assert [r[0].text().strip() for r in rows] == ["bm25"]


def test_the_environment_turns_the_default_off(reference: dict[str, Path], tmp_path: Path, monkeypatch) -> None:
    """BEYONDSIM_REFERENCE=0 leaves the shipped bundle out unless --reference asks for it."""
    build_bundle(reference, tmp_path / "builder")
    monkeypatch.setenv("BEYONDSIM_HOME", str(tmp_path / "user"))
    assert invoke("run", "bm25", "-b", BENCH).exit_code == 0
    monkeypatch.setenv("BEYONDSIM_REFERENCE", "0")
    res = invoke("leaderboard", "--out", str(tmp_path / "site"))
    assert res.exit_code == 0 and "imported" not in res.output, res.output
    with Store(tmp_path / "user" / "results.sqlite") as store:
        assert [r.label for r in store.results()] == ["bm25"] and store.get_meta(META_KEY) is None
    res = invoke("leaderboard", "--out", str(tmp_path / "site"), "--reference")
    assert res.exit_code == 0 and "2 result(s) imported" in " ".join(res.output.split()), res.output


def test_a_new_bundle_replaces_the_old_reference_rows(reference: dict[str, Path], tmp_path: Path,
                                                       monkeypatch) -> None:
    build_bundle(reference, tmp_path / "builder")
    user = tmp_path / "user"
    monkeypatch.setenv("BEYONDSIM_HOME", str(user))
    assert invoke("reference", "import").exit_code == 0
    with Store(user / "results.sqlite") as store:
        assert len(store.results()) == 2
    # the plan loses a configuration: the new bundle replaces the old one's rows
    plan = reference["plan"].read_text(encoding="utf-8")
    reference["plan"].write_text(plan.split("[[config]]\nretriever = \"bm25\"\nlabel")[0], encoding="utf-8")
    with Store(tmp_path / "builder" / "reference" / "results.sqlite") as b:
        b.delete(next(r.key for r in b.results() if r.label == "bm25 (k1=0.5)"))
    assert invoke("reference", "bundle", "--home", str(tmp_path / "builder")).exit_code == 0
    res = invoke("reference", "import")
    flat = " ".join(res.output.split())
    assert res.exit_code == 0 and "1 result(s) imported (1 verified" in flat and "2 of an older bundle replaced" in flat
    with Store(user / "results.sqlite") as store:
        assert [r.label for r in store.results()] == ["bm25"]


def test_plan_errors_name_the_configuration_and_field(tmp_path: Path) -> None:
    p = tmp_path / "plan.toml"
    p.write_text('[[config]]\nretriever = "bm25"\n[[config]]\nretriever = "dense"\nseeds = "x"\nmax_queries = 0\n')
    with pytest.raises(PlanError) as e:
        load_plan(p)
    text = str(e.value)
    assert f"{p}: config 2: seeds:" in text and f"{p}: config 2: max_queries:" in text
    p.write_text('[[config]]\nretriver = "bm25"\n')
    with pytest.raises(PlanError, match="config 1: retriver: unknown field; the fields are retriever, label"):
        load_plan(p)


def test_the_shipped_plan_names_registered_retrievers_only() -> None:
    files = registry.reference_files()
    plan = load_plan(files["plan"])
    names = set(registry.retriever_names())
    assert plan.config and {c.retriever for c in plan.config} <= names
    for c in plan.config:
        registry.make_spec(c.retriever, c.params, label=c.label)


def test_the_plans_notes_travel_with_the_bundle_and_are_shown_as_text(tmp_path: Path, monkeypatch) -> None:
    """A configuration's note (why it is a slice or a capped run) is written into each of its
    bundled results and shown beside its rows, as text; a page whose rows are all documented
    slices says so instead of calling them a smoke run."""
    capped = 'capped for a CPU: <b>3 epochs</b> & "2,048" queries'
    files = install_plan(tmp_path, monkeypatch, note=capped, more='''
[[config]]
retriever = "bm25"
label = "bm25 (slice)"
params = { k1 = 0.9 }
benchmarks = [{bench}]
max_queries = 2
note = "the first 2 queries only"
''')
    build = tmp_path / "builder"
    assert invoke("reference", "build", "--home", str(build)).exit_code == 0
    res = invoke("reference", "bundle", "--home", str(build))
    assert res.exit_code == 0 and "wrote 3 result(s)" in res.output, res.output
    with gzip.open(files["bundle"], "rt", encoding="utf-8") as f:
        notes = {d["label"]: (d["extra"].get("reference") or {}).get("note") for d in map(json.loads, f)
                 if d.get("kind") is None}
    assert notes == {"bm25": None, "bm25 (k1=0.5)": capped, "bm25 (slice)": "the first 2 queries only"}

    monkeypatch.setenv("BEYONDSIM_HOME", str(tmp_path / "user"))
    site = tmp_path / "site"
    res = invoke("leaderboard", "--out", str(site))
    assert res.exit_code == 0, res.output
    html = (site / "index.html").read_text(encoding="utf-8")
    assert "<b>3 epochs</b>" not in html  # a note is text, never markup
    root = parse(html)
    _, rows = table_rows(root.by_id("overview-other"))
    marks = {r[0].find("a").text().strip(): r[0] for r in rows}
    assert "note" not in marks["bm25"].text() and marks["bm25 (k1=0.5)"].find("sup", "note-mark").attrs["title"] == capped
    assert capped in html.replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").replace("&#34;", '"')
    slice_pages = [p for p in (site / "bench").glob("*.html") if "first 2 queries" in p.read_text(encoding="utf-8")]
    assert slice_pages, sorted(p.name for p in (site / "bench").glob("*.html"))
    text = slice_pages[0].read_text(encoding="utf-8")
    assert "A documented slice" in text and "A smoke run" not in text and "the first 2 queries only" in text


def test_a_partial_build_is_added_to_the_bundle(tmp_path: Path, monkeypatch) -> None:
    """`--only LABEL@BENCHMARK` builds one configuration on one benchmark; `bundle --add` adds its
    result to the bundle (a rebuilt key replaced, nothing else touched) and the result imports verified."""
    files = install_plan(tmp_path, monkeypatch, more='''
[[config]]
retriever = "bm25"
label = "bm25 (b=0.3)"
params = { b = 0.3 }
benchmarks = [{bench}]
''')
    first = tmp_path / "first"
    res = invoke("reference", "build", "--home", str(first), "--only", "bm25")
    assert res.exit_code == 0 and "bm25: 1 benchmark(s)" in res.output and "(b=0.3)" not in res.output, res.output
    assert invoke("reference", "bundle", "--home", str(first)).exit_code == 0
    with gzip.open(files["bundle"], "rt", encoding="utf-8") as f:
        before = [json.loads(x) for x in f]

    second = tmp_path / "second"
    res = invoke("reference", "build", "--home", str(second), "--only", "bm25 (b=*@beir/tiny-*", "--dry-run")
    assert res.exit_code == 0 and "bm25 (b=0.3): 1 benchmark(s)" in res.output and "k1" not in res.output, res.output
    res = invoke("reference", "build", "--home", str(second), "--only", "bm25 (b=0.3)@nothing-here", "--dry-run")
    assert res.exit_code == 0 and "(b=0.3)" not in res.output, res.output
    assert invoke("reference", "build", "--home", str(second), "--only", "bm25 (b=*@beir/*").exit_code == 0
    assert invoke("reference", "build", "--home", str(second), "--only", "bm25").exit_code == 0  # a rebuild
    res = invoke("reference", "bundle", "--home", str(second), "--add")
    assert res.exit_code == 0 and "added 1 result(s) and replaced 1" in " ".join(res.output.split()), res.output
    with gzip.open(files["bundle"], "rt", encoding="utf-8") as f:
        after = [json.loads(x) for x in f]
    keys = [d["key"] for d in after if "key" in d]
    assert keys[:1] == [d["key"] for d in before if "key" in d] and len(keys) == 2 == len(set(keys))
    assert [d["label"] for d in after if "key" in d] == ["bm25", "bm25 (b=0.3)"]
    (content,) = [d for d in after if d.get("kind") == "benchmark_content"]
    ranked = {d for x in after if "key" in x for r in x["rankings"].values() for d, _ in r}
    assert ranked <= {d["docid"] for d in content["documents"]}
    # status counts the bundle beside the build store: the first store holds bm25 only, the bundle both
    res = invoke("reference", "status", "--home", str(first))
    assert res.exit_code == 0 and "in the bundle" in res.output and res.output.count("1/1") == 3, res.output
    # the added result comes in verified, like the rest
    monkeypatch.setenv("BEYONDSIM_HOME", str(tmp_path / "user"))
    res = invoke("reference", "import")
    assert res.exit_code == 0, res.output
    with Store(tmp_path / "user" / "results.sqlite") as store:
        assert sorted((r.label, trust_of(r.extra)) for r in store.results()) == \
            [("bm25", "verified"), ("bm25 (b=0.3)", "verified")]
    # --add without a bundle to add to is refused, and writes nothing
    files["bundle"].unlink()
    res = invoke("reference", "bundle", "--home", str(second), "--add")
    assert res.exit_code != 0 and "no bundle" in res.output and not files["bundle"].exists()


def test_a_slice_and_the_whole_set_under_one_label_keep_their_own_note_and_tolerance(tmp_path: Path,
                                                                                    monkeypatch) -> None:
    """Two configurations of one label, one on the whole benchmark and one on its first 2 queries
    (as DEO runs): each bundled result carries its own configuration's note, and each reproduction
    row its tolerance and reason — whichever of them the plan lists first."""
    from harness.record.bundle import bundle_rows

    for slice_first in (False, True):
        root = tmp_path / f"slice-first-{slice_first}"
        whole = '''
[[config]]
retriever = "bm25"
label = "bm25 (k1=0.9)"
params = { k1 = 0.9 }
benchmarks = [{bench}]
note = "every query"
tolerance = 0.01
reason = "the whole set"
'''
        part = whole.replace("every query", "the first 2 queries").replace("0.01", "0.05").replace(
            "the whole set", "a slice").replace("benchmarks = [{bench}]", "benchmarks = [{bench}]\nmax_queries = 2")
        root.mkdir()
        files = install_plan(root, monkeypatch, more=(part + whole) if slice_first else (whole + part))
        build = root / "builder"
        assert invoke("reference", "build", "--home", str(build)).exit_code == 0
        res = invoke("reference", "bundle", "--home", str(build))
        assert res.exit_code == 0 and "wrote 4 result(s)" in res.output, res.output
        with gzip.open(files["bundle"], "rt", encoding="utf-8") as f:
            notes = {d["benchmark"]: d["extra"]["reference"]["note"] for d in map(json.loads, f)
                     if d.get("kind") is None and d["label"] == "bm25 (k1=0.9)"}
        assert notes == {BENCH: "every query", f"{BENCH}[:2]": "the first 2 queries"}
        rows = [r for r in bundle_rows(files["plan"], files["bundle"]) if r.label == "bm25 (k1=0.9)"]
        got = {(r.benchmark, r.tolerance, r.reason.rsplit("tolerance: ", 1)[1]) for r in rows
               if not r.measure.startswith("FVR@")}
        assert got == {(BENCH, 0.01, "the whole set"), (f"{BENCH}[:2]", 0.05, "a slice")}
        if not slice_first:
            continue
        # a partial build added later: the results it does not rebuild take the plan's notes as they are now
        files["plan"].write_text(files["plan"].read_text(encoding="utf-8").replace(
            'note = "every query"', 'note = "every query, said again"'), encoding="utf-8")
        again = root / "again"
        assert invoke("reference", "build", "--home", str(again), "--only", "bm25").exit_code == 0
        res = invoke("reference", "bundle", "--home", str(again), "--add")
        assert res.exit_code == 0, res.output
        with gzip.open(files["bundle"], "rt", encoding="utf-8") as f:
            notes = {(d["label"], d["benchmark"]): (d["extra"].get("reference") or {}).get("note")
                     for d in map(json.loads, f) if d.get("kind") is None}
        assert notes == {("bm25", BENCH): None, ("bm25 (k1=0.5)", BENCH): "a second configuration",
                         ("bm25 (k1=0.9)", BENCH): "every query, said again",
                         ("bm25 (k1=0.9)", f"{BENCH}[:2]"): "the first 2 queries"}
