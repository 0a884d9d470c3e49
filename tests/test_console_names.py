"""Names of any length or character, and the console as a new user meets it: labels are bounded
before any work, page names are bounded and stable, every user string is printed as plain text,
help texts keep their bracketed words, a log gets progress lines, hints name real options, and a
typo gets "did you mean"."""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path

import pytest
import typer
from rich.console import Console

from harness.cli import LineProgress, RichProgress, app, progress_for
from harness.data import MissingDataError
from harness.registry import MAX_LABEL_CHARS, RegistryError, get_retriever_class, get_suite, load_benchmark
from harness.store.results import Store
from reports.site import SLUG_CHARS, slugify
from tests.test_cli import invoke, make_beir

MARKUP_LABEL = "[bold red]mine[/] [/] [link=x]"


def _variant_config(tmp_path: Path, name: str) -> Path:
    cfg = tmp_path / "variants.toml"
    cfg.write_text(f'[retrievers."{name}"]\nretriever = "bm25"\n')
    return cfg


def test_markup_in_a_label_is_printed_as_text_by_run_audit_and_the_site(tmp_path: Path, home: Path) -> None:
    data = make_beir(tmp_path / "tiny")
    cfg = _variant_config(tmp_path, MARKUP_LABEL)
    res = invoke("run", MARKUP_LABEL, "-c", str(cfg), "-b", str(data), "--k", "5")
    assert res.exit_code == 0, res.output
    assert MARKUP_LABEL in res.output
    [rec] = Store(home / "results.sqlite").results()
    assert rec.label == MARKUP_LABEL
    res = invoke("audit")
    assert res.exit_code == 0, res.output
    assert "[bold" in res.output and "[link=x]" in res.output  # printed (and wrapped), never parsed
    res = invoke("leaderboard", "--out", str(tmp_path / "site"))
    assert res.exit_code == 0, res.output
    page = next((tmp_path / "site" / "retriever").glob("bold-red-mine*.html"))
    assert "[bold red]mine[/] [/] [link=x]" in page.read_text()


@pytest.mark.parametrize("bad, why", [("x" * (MAX_LABEL_CHARS + 1), "at most 200"),
                                      ("tab\there", "U+0009"), ("bell\x07", "U+0007")])
def test_a_label_that_cannot_name_a_page_is_refused_before_any_work(tmp_path: Path, home: Path, bad: str,
                                                                   why: str) -> None:
    data = make_beir(tmp_path / "tiny")
    cfg = tmp_path / "v.toml"
    cfg.write_text('[retrievers."%s"]\nretriever = "bm25"\n' % bad.replace("\t", "\\t").replace("\x07", "\\u0007"))
    res = invoke("run", bad, "-c", str(cfg), "-b", str(data))
    assert res.exit_code == 2
    assert why in res.output
    assert len(res.output) < 2000  # the name is cut in the message
    assert not (home / "results.sqlite").exists() or Store(home / "results.sqlite").results() == []
    res = invoke("submit", "bm25", "--label", bad, "-b", str(data))
    assert res.exit_code == 2 and why in res.output


def test_a_stored_label_too_long_for_a_file_name_still_renders(tmp_path: Path, home: Path) -> None:
    """A store written before labels were bounded: 600 characters, more than any file system allows in
    one name. Every page name stays bounded, and a second render writes the same names."""
    data = make_beir(tmp_path / "tiny")
    assert invoke("run", "bm25", "dense", "-b", str(data), "--k", "5").exit_code == 0
    long_a, long_b = "a" * 590 + "-first", "a" * 590 + "-second"  # equal up to the cut
    with sqlite3.connect(home / "results.sqlite") as db:
        db.execute("UPDATE results SET label = ? WHERE retriever = 'bm25'", (long_a,))
        db.execute("UPDATE results SET label = ? WHERE retriever = 'dense'", (long_b,))
    site = tmp_path / "site"
    res = invoke("leaderboard", "--out", str(site))
    assert res.exit_code == 0, res.output
    names = sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html"))
    assert max(len(part) for n in names for part in n.split("/")) <= SLUG_CHARS + len(".html")
    mine = [n for n in names if n.startswith("retriever/aaaa") and n.count("/") == 1]
    assert len(mine) == 2  # two labels, two pages
    assert invoke("leaderboard", "--out", str(site)).exit_code == 0
    assert sorted(p.relative_to(site).as_posix() for p in site.rglob("*.html")) == names


def test_slugs_are_bounded_stable_and_unique() -> None:
    used: set[str] = set()
    assert slugify("diag/antonym", used) == "diag-antonym"  # short names stay readable
    clash = slugify("diag antonym", used)
    assert clash != "diag-antonym" and clash.startswith("diag-antonym-")
    assert slugify("diag antonym", set(["diag-antonym"])) == clash  # the same name whatever came before
    long = slugify("é" + "z" * 1000)
    assert len(long) == SLUG_CHARS and re.fullmatch(r"[a-z0-9-]+", long)
    assert slugify("z" * 1000) != slugify("z" * 999)


def test_help_texts_keep_bracketed_words() -> None:
    res = invoke("run", "--help")
    assert "[retrievers.NAME]" in res.output
    res = invoke("llm", "info", "--help")
    assert "[llm]" in res.output


def test_a_log_gets_plain_progress_lines(capsys: pytest.CaptureFixture[str]) -> None:
    console = Console(stderr=True, markup=False, highlight=False, force_terminal=False)
    assert isinstance(progress_for(console), LineProgress)
    assert isinstance(progress_for(Console(force_terminal=True)), RichProgress)
    with LineProgress(console, interval=0.05) as progress:
        with progress.track(4, "dense [x]: encoding corpus") as advance:
            advance(1)
            time.sleep(0.3)
            advance(2)
            time.sleep(0.15)
    err = capsys.readouterr().err
    lines = err.splitlines()
    assert any(re.fullmatch(r"dense \[x\]: encoding corpus: 1/4 \(25%\), \d+ s", ln) for ln in lines), err
    assert re.fullmatch(r"dense \[x\]: encoding corpus: 3/4 \(75%\), \d+ s \(done\)", lines[-1]), err


def test_the_hint_for_a_missing_diagnostic_set_names_real_options(tmp_path: Path) -> None:
    with pytest.raises(MissingDataError) as e:
        load_benchmark("diag/antonym", tmp_path / "empty")
    hint = str(e.value)
    commands = re.findall(r"beyondsim data build-diagnostics[^.;'\n]*", hint)
    options = {o for c in commands for o in re.findall(r"--[a-z-]+", c)}
    assert options  # the hint names options
    click_cmd = typer.main.get_command(app)
    build = click_cmd.commands["data"].commands["build-diagnostics"]  # type: ignore[attr-defined]
    known = {o for p in build.params for o in p.opts if o.startswith("--")}
    assert options <= known, options - known


@pytest.mark.parametrize("lookup, typo, meant", [
    (get_retriever_class, "bm52", "'bm25'"),
    (get_retriever_class, "nnnfix", "'nnn-fix'"),
    (get_suite, "constrant", "'constraint'"),
    (lambda n: load_benchmark(n, Path("/nonexistent")), "negconstrant", "'negconstraint'"),
    (lambda n: load_benchmark(n, Path("/nonexistent")), "diag/antonyms", "'diag/antonym'"),
])
def test_a_typo_gets_did_you_mean(lookup, typo: str, meant: str) -> None:
    with pytest.raises(RegistryError, match=f"Did you mean {re.escape(meant)}"):
        lookup(typo)


def test_a_huge_unknown_name_is_cut_in_the_message(home: Path) -> None:
    res = invoke("run", "q" * 100_000, "-b", "nevir")
    assert res.exit_code == 2
    assert "100000 characters" in res.output and len(res.output) < 2000
