"""The tables the command line prints, at terminal widths 80, 120 and 200: real runs of bm25 (three
configurations) and the chance retriever on two diagnostic sets of the constraint suite, through
the CLI. No line is wider than the terminal, no column is empty, every figure printed is the
stored value formatted (a figure is printed whole or its column is left out, and the line under
the table says which were left out), and a run ends with each suite's top 3 in the leaderboard's
order and the path of the board."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest
from rich.cells import cell_len
from rich.table import Table
from typer.testing import CliRunner

from harness.cli import app
from harness.measures import format_value
from harness.store.results import Store

from tests.conftest import SHARED_DATA

console_mod = importlib.import_module("harness.cli.console")

WIDTHS = (80, 120, 200)
BENCHMARKS = ("diag/antonym", "diag/negation")
LONG = "a-rather-long-configuration-label-of-bm25"
RETRIEVERS = ("bm25", "random", "bm25-flat", LONG)
CONFIG = f"""
[retrievers.bm25-flat]
retriever = "bm25"
k1 = 0.3
b = 0.1

[retrievers.{LONG}]
retriever = "bm25"
k1 = 2.0
"""

pytestmark = pytest.mark.skipif(not all((SHARED_DATA / "diag" / b.split("/")[1]).is_dir() for b in BENCHMARKS),
                                reason=f"the diagnostic sets are not in {SHARED_DATA}")


def invoke(width: int, *args: str) -> str:
    res = CliRunner().invoke(app, list(args), env={"COLUMNS": str(width), "BEYONDSIM_REFERENCE": "0"},
                             catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return res.stdout


def run_args(home: Path, site: Path, config: Path) -> list[str]:
    args = ["run", *RETRIEVERS, "-c", str(config), "--data-dir", str(SHARED_DATA), "--home", str(home),
            "--leaderboard", str(site)]
    for b in BENCHMARKS:
        args += ["-b", b]
    return args


@pytest.fixture(scope="module")
def first_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, str]:
    """A fresh home after one run at width 80 (nothing cached): home, site, config, stdout."""
    root = tmp_path_factory.mktemp("terminal")
    config = root / "config.toml"
    config.write_text(CONFIG, encoding="utf-8")
    home, site = root / "home", root / "site"
    text = invoke(80, *run_args(home, site, config))
    return home, site, config, text


# --------------------------------------------------------------------------------------------
# reading a printed table back


def tables_in(text: str) -> list[dict]:
    """Every box table of ``text``: its title, headers (wrapped headers joined), body rows (cells
    stripped; a row goes on over the lines whose first cell is blank, its cells joined with spaces),
    and the lines after it up to the next table (joined, single-spaced)."""
    lines = text.splitlines()
    out: list[dict] = []
    i = 0
    while i < len(lines):
        if not lines[i].lstrip().startswith("┏"):
            i += 1
            continue
        title = lines[i - 1].strip() if i else ""
        head: list[list[str]] = []
        rows: list[list[str]] = []
        cur: list[list[str]] | None = None
        i += 1
        while not lines[i].lstrip().startswith("└"):
            line = lines[i].strip()
            if line.startswith("┃"):
                head.append([c.strip() for c in line[1:-1].split("┃")])
            elif line.startswith("│"):
                cells = [c.strip() for c in line[1:-1].split("│")]
                if cur is None or cells[0]:  # a row's first line; a wrapped cell continues under a blank label
                    cur = [[c] for c in cells]
                    rows.append(cur)  # type: ignore[arg-type]
                else:
                    for part, c in zip(cur, cells):
                        part.append(c)
            else:
                cur = None
            i += 1
        headers = [" ".join(p for p in parts if p) for parts in zip(*head)]
        body = [[" ".join(p for p in cell if p) for cell in row] for row in rows]
        j = i + 1
        after: list[str] = []
        while j < len(lines) and not (j + 1 < len(lines) and lines[j + 1].lstrip().startswith("┏")):
            after.append(lines[j])
            j += 1
        out.append({"title": title, "headers": headers, "rows": body, "after": " ".join(" ".join(after).split())})
        i = j
    return out


def check_lines(text: str, width: int) -> None:
    assert text.strip()
    for line in text.splitlines():
        assert cell_len(line) <= width, (width, line)


def check_no_empty_column(table: dict) -> None:
    for k, header in enumerate(table["headers"]):
        assert any(row[k] for row in table["rows"]), f"column {header!r} of {table['title']} is empty"


def label_of(cell: str, labels: set[str]) -> str:
    """The label a (possibly abbreviated, ``…``) cell shows: exactly one label starts with it."""
    if cell in labels:
        return cell
    assert cell.endswith("…"), cell
    [label] = [x for x in labels if x.startswith(cell[:-1])]
    return label


# --------------------------------------------------------------------------------------------
# beyondsim run


def check_run_output(text: str, width: int, store: Store, site: Path, cached: bool) -> None:
    check_lines(text, width)
    tables = tables_in(text)
    assert [t["title"] for t in tables] == list(BENCHMARKS)
    for t in tables:
        check_no_empty_column(t)
        recs = {r.label: r for r in store.results(benchmark=t["title"])}
        assert len(t["rows"]) == len(RETRIEVERS) and set(recs) == set(RETRIEVERS)
        measures = next(iter(recs.values())).measures
        headline = [m for m in store_headline(store, t["title"]) if m in measures]  # as the benchmark orders them
        full = ["retriever", "seed", *headline, "index s", "search s", *(["status"] if cached else [])]
        shown = t["headers"]
        assert shown[0] == "retriever" and shown[2] == headline[0]  # the label and the first measure are kept
        assert [h for h in full if h in shown] == shown  # no column is made up or moved
        for row in t["rows"]:
            rec = recs[label_of(row[0], set(recs))]
            for header, cell in zip(shown[1:], row[1:]):
                if header == "seed":
                    want = str(rec.seed)
                elif header in ("index s", "search s"):
                    want = f"{rec.phases[header.split()[0]]['wall_s']:.1f}"
                elif header == "status":
                    want = "cached"
                else:
                    want = format_value(header, rec.measures[header].mean)
                assert cell == want, (header, rec.label, cell, want)
        left = [h for h in full if h not in shown]
        if left:
            assert t["after"].startswith(f"left out to fit {width} columns: {', '.join(left)}; a terminal of "), \
                t["after"]
            needs = int(re.search(r"COLUMNS=(\d+)", t["after"]).group(1))
            assert needs > width
        else:
            assert "left out" not in t["after"]
    check_tops(text, store, site)


def store_headline(store: Store, benchmark: str) -> list[str]:
    [info] = [b for b in store.benchmarks() if b.name == benchmark]
    return list(info.default_measures)


def check_tops(text: str, store: Store, site: Path) -> None:
    """The run's last lines: the constraint suite's top 3 as the leaderboard ranks them, then the board."""
    from reports.compare import compare

    [suite] = [s for s in compare(store).suites if s.name == "constraint"]
    ranked = suite.ranked[:3]
    assert len(ranked) == 3 and all(r.label != "random" for r in ranked)  # the chance row is never ranked
    assert any(r.chance and r.label == "random" for r in suite.rows)
    lines = [" ".join(line.split()) for line in text.strip().splitlines()]
    board = re.sub(r"\s+", "", "".join(text.strip().splitlines()[-2:]))
    assert board.endswith(f"leaderboard:{(site / 'index.html').resolve()}"), board
    start = next(i for i, line in enumerate(lines) if line.startswith("suite constraint: top 3 by Sat@10"))
    assert lines[start] == ("suite constraint: top 3 by Sat@10 (mean over "
                            + ", ".join(suite.headline_benchmarks) + ")")
    for i, r in enumerate(ranked, 1):
        lo, hi = r.rank
        want = f"{i}. {r.label} {format_value('Sat@10', r.means['Sat@10'])} rank {lo}" + (f"–{hi}" if hi != lo else "")
        assert lines[start + i] == want


def test_a_fresh_run_at_80_columns(first_run) -> None:
    home, site, _, text = first_run
    with Store(home / "results.sqlite") as store:
        check_run_output(text, 80, store, site, cached=False)
    assert "status" not in text and "cached" not in text  # nothing cached: no status column at all
    assert "left out to fit 80 columns" in " ".join(text.split())  # eight measures do not fit 80 columns


@pytest.mark.parametrize("width", WIDTHS)
def test_a_rerun_at_each_width(first_run, width: int) -> None:
    home, site, config, _ = first_run
    text = invoke(width, *run_args(home, site, config))
    with Store(home / "results.sqlite") as store:
        check_run_output(text, width, store, site, cached=True)
    if width == 200:
        assert "left out" not in text


def test_the_label_is_abbreviated_before_a_figure_is_left_out(first_run) -> None:
    home, site, config, _ = first_run
    wide = tables_in(invoke(200, *run_args(home, site, config)))[0]
    narrow = tables_in(invoke(80, *run_args(home, site, config)))[0]
    assert LONG in [row[0] for row in wide["rows"]]
    assert LONG not in [row[0] for row in narrow["rows"]]
    assert any(row[0].endswith("…") and LONG.startswith(row[0][:-1]) for row in narrow["rows"])


# --------------------------------------------------------------------------------------------
# the other tables


@pytest.mark.parametrize("width", WIDTHS)
def test_the_audit_prints_whole_figures_at_each_width(first_run, width: int) -> None:
    home = first_run[0]
    [full] = tables_in(invoke(1000, "audit", "--home", str(home)))
    text = invoke(width, "audit", "--home", str(home))
    check_lines(text, width)
    [t] = tables_in(text)
    check_no_empty_column(t)
    assert len(t["rows"]) == len(full["rows"]) and t["headers"][:2] == ["retriever", "benchmark"]
    for k, header in enumerate(t["headers"][2:], 2):
        col = full["headers"].index(header)
        assert [row[k] for row in t["rows"]] == [row[col] for row in full["rows"]], header
    left = [h for h in full["headers"] if h not in t["headers"]]
    if left:
        needs = re.search(r"COLUMNS=(\d+)", t["after"]).group(1)
        assert t["after"].endswith(f"left out to fit {width} columns: {', '.join(left)}; a terminal of {needs} "
                                   f"columns shows them (COLUMNS={needs}); every column: "
                                   "`beyondsim audit --format json` or `--format csv`"), t["after"]
        assert "cached tok" in left  # the drop order of harness/cost/tables.py: the least needed first
    assert not any("…" in cell for row in full["rows"] for cell in row)


@pytest.mark.parametrize("width", WIDTHS)
def test_list_tables_fit(width: int) -> None:
    for what in ("suites", "trainers", "retrievers"):
        text = invoke(width, "list", what)
        check_lines(text, width)
        for t in tables_in(text):
            check_no_empty_column(t)


def test_fit_table_removes_empty_columns_and_keeps_figures_whole() -> None:
    t = Table(title="plan")
    for c in ("configuration", "results", "not on disk", "note"):
        t.add_column(c)
    t.add_column("mean", justify="right")
    t.add_row("bm25", "3/9", "", "", "0.123456")
    t.add_row("dense", "9/9", "", "", "12.5")
    # configuration 13 wide (12 at least), results 7, mean 8; 2 of padding each and 4 borders: 38 in
    # all, 37 at least
    fitted = console_mod.fit_table(t, 40)
    assert [c.header for c in fitted.table.columns] == ["configuration", "results", "mean"]
    assert [c.width for c in fitted.table.columns] == [13, 7, 8]
    assert fitted.left_out == [] and fitted.needs == 37  # an empty column is removed, not reported as left out
    text = print_at(fitted.table, 40)
    assert "0.123456" in text and "12.5" in text and max(map(cell_len, text.splitlines())) == 38
    narrow = console_mod.fit_table(t, 36)  # the figure is left out rather than cut
    assert narrow.left_out == ["mean"] and narrow.needs == 37
    assert [c.header for c in narrow.table.columns] == ["configuration", "results"]
    assert narrow.note().startswith("left out to fit 36 columns: mean; a terminal of 37 columns shows them")
    squeezed = console_mod.fit_table(t, 26)  # the text column gives up its width before anything more goes
    assert [c.width for c in squeezed.table.columns] == [12, 7] and squeezed.left_out == ["mean"]
    assert "…" not in print_at(fitted.table, 40)


def print_at(table: Table, width: int) -> str:
    import io

    from rich.console import Console

    buf = io.StringIO()
    Console(file=buf, width=width, markup=False, highlight=False).print(table)
    return buf.getvalue()


def test_the_width_follows_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "97")
    assert console_mod.output_width() == 97
    monkeypatch.setenv("COLUMNS", "wide")
    assert console_mod.output_width() == console_mod.PIPE_WIDTH  # not a terminal (pytest captures stdout)
