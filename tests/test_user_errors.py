"""Inputs a new user gets wrong, each answered by one line (or, for a bug in their own retriever,
their frames only) and a non-zero exit, before any work where the input can be checked up front."""

from __future__ import annotations

import functools
import gzip
import json
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

import harness.cli.cmd_board as cmd_board
from harness.cli import app, is_user_file
from harness.core.errors import UserError
from harness.store.results import Store
from reports.site import MANIFEST
from tests.test_cli import make_beir

USER_RETRIEVER = '''
import numpy as np


class Broken:
    """index works, search multiplies matrices of the wrong shapes."""

    def index(self, corpus, ctx):
        self.n = len(corpus)

    def search(self, queries, k, ctx):
        a = np.ones((len(queries), 3))
        return self.scores(a)

    def scores(self, a):
        return a @ np.ones((4, 2))  # the bug
'''

RAISES_AT_IMPORT = '''
import os

SETTING = os.environ["BEYONDSIM_SURELY_UNSET_SETTING"]  # a KeyError while the module is imported


class Retriever:
    def index(self, corpus, ctx):
        pass

    def search(self, queries, k, ctx):
        return {}
'''


def invoke(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, list(args), catch_exceptions=False, env=env)


def flat(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture
def data(tmp_path: Path) -> Path:
    return make_beir(tmp_path / "tiny")


@pytest.fixture
def user_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest):
    """Write a module into a folder on sys.path; ``(name, path)``."""
    made: list[str] = []

    def write(name: str, source: str) -> Path:
        folder = tmp_path / "user_code"
        folder.mkdir(exist_ok=True)
        path = folder / f"{name}.py"
        path.write_text(textwrap.dedent(source))
        monkeypatch.syspath_prepend(str(folder))
        made.append(name)
        return path

    yield write
    for name in made:
        sys.modules.pop(name, None)


# --------------------------------------------------------------------------------------------
# a bug in the user's retriever


def test_a_bug_in_a_users_retriever_prints_their_frames_only(data: Path, home: Path, user_module) -> None:
    path = user_module("ue_matmul", USER_RETRIEVER)
    res = invoke("run", "ue_matmul:Broken", "-b", str(data), "--k", "5")
    assert res.exit_code == 1, res.output
    lines = res.output.splitlines()
    assert [ln for ln in lines if ln.startswith("error: ")] == [next(ln for ln in lines if ln.startswith("error: "))]
    assert "error: your code raised ValueError: matmul" in res.output
    src = path.read_text().splitlines()
    search_line = next(i for i, t in enumerate(src, 1) if "return self.scores(a)" in t)
    bug_line = next(i for i, t in enumerate(src, 1) if "# the bug" in t)
    assert f"{path}:{search_line}, in search" in res.output
    assert f"{path}:{bug_line}, in scores" in res.output
    assert "return a @ np.ones((4, 2))" in res.output  # the source line
    assert "harness" not in res.output.replace(str(home), "") and "numpy" not in res.output
    assert "Traceback" not in res.output


@pytest.mark.parametrize("how", ["option", "env"])
def test_traceback_prints_the_whole_traceback(data: Path, home: Path, user_module, how: str) -> None:
    path = user_module(f"ue_matmul_{how}", USER_RETRIEVER)
    args = ["run", f"ue_matmul_{how}:Broken", "-b", str(data), "--k", "5"]
    res = invoke("--traceback", *args) if how == "option" else invoke(*args, env={"BEYONDSIM_TRACEBACK": "1"})
    assert res.exit_code == 1, res.output
    assert "Traceback (most recent call last)" in res.output
    assert "harness/run/runner.py" in res.output.replace("\\", "/")  # our frames too
    assert str(path) in res.output and "ValueError: matmul" in res.output


def test_a_user_error_is_one_plain_line_and_a_bug_of_ours_propagates(monkeypatch: pytest.MonkeyPatch) -> None:
    import harness.cli.cmd_list as cmd_list

    monkeypatch.setattr(cmd_list, "suites", lambda: (_ for _ in ()).throw(UserError("no [bold]suites[/] here")))
    res = invoke("list", "suites")
    assert res.exit_code == 2 and res.output.strip() == "error: no [bold]suites[/] here"
    monkeypatch.setattr(cmd_list, "suites", functools.partial(int, "a bug of ours"))  # raised with no user frame
    with pytest.raises(ValueError, match="a bug of ours"):
        invoke("list", "suites")


def test_frames_of_the_standard_library_site_packages_and_our_packages_are_not_the_users(tmp_path: Path) -> None:
    import json as stdlib_module

    import numpy
    import harness.run.runner

    assert not is_user_file(stdlib_module.__file__)
    assert not is_user_file(numpy.__file__)
    assert not is_user_file(harness.run.runner.__file__)
    assert not is_user_file("<frozen importlib._bootstrap>")
    assert is_user_file(str(tmp_path / "mine.py"))


# --------------------------------------------------------------------------------------------
# a module that raises while it is imported


def test_a_module_that_raises_at_import_is_one_line_on_the_command_line(data: Path, home: Path, user_module) -> None:
    user_module("ue_import_cli", RAISES_AT_IMPORT)
    res = invoke("run", "ue_import_cli:Retriever", "-b", str(data))
    assert res.exit_code == 2, res.output
    assert res.output.count("error: ") == 1 and "Traceback" not in res.output
    text = flat(res.output)
    assert "cannot import module 'ue_import_cli'" in text and "KeyError" in text
    assert "BEYONDSIM_SURELY_UNSET_SETTING" in text
    assert not (home / "results.sqlite").exists()


def test_a_module_that_raises_at_import_is_one_line_in_a_config(data: Path, home: Path, user_module,
                                                                 tmp_path: Path) -> None:
    user_module("ue_import_cfg", RAISES_AT_IMPORT)
    cfg = tmp_path / "c.toml"
    cfg.write_text('[retrievers.mine]\nretriever = "ue_import_cfg:Retriever"\n')
    res = invoke("run", "mine", "-c", str(cfg), "-b", str(data))
    assert res.exit_code == 2, res.output
    text = flat(res.output)
    assert "cannot import module 'ue_import_cfg'" in text and "KeyError" in text and "Traceback" not in text


def test_submit_lists_a_module_that_raises_at_import_with_its_other_problems(data: Path, home: Path,
                                                                             user_module) -> None:
    user_module("ue_import_submit", RAISES_AT_IMPORT)
    res = invoke("submit", "ue_import_submit:Retriever", "-b", str(data), "--label", "x" * 300)
    assert res.exit_code == 2, res.output
    text = flat(res.output)
    assert "retriever 'ue_import_submit:Retriever' cannot be submitted" in text
    assert "- cannot import module 'ue_import_submit'" in text and "KeyError" in text
    assert "at most 200 are allowed" in text  # the label, the other problem
    assert "Traceback" not in text and not (home / "results.sqlite").exists()


# --------------------------------------------------------------------------------------------
# --k, --seeds, parameters: refused before any work


@pytest.mark.parametrize("k", ["0", "-3", str(2**63)])
def test_a_depth_out_of_range_is_refused_before_any_work(data: Path, home: Path, k: str) -> None:
    res = invoke("run", "bm25", "-b", str(data), "--k", k)
    assert res.exit_code == 2, res.output
    assert flat(res.output) == f"error: --k must be between 1 and {2**31 - 1}, not {k}"
    assert not (home / "results.sqlite").exists()


@pytest.mark.parametrize("seeds", ["0", "-5"])
def test_no_seed_to_run_is_refused(data: Path, home: Path, seeds: str) -> None:
    res = invoke("run", "bm25", "-b", str(data), "--seeds", seeds)
    assert res.exit_code == 2, res.output
    assert flat(res.output) == f"error: --seeds must be at least 1, not {seeds}"
    assert not (home / "results.sqlite").exists()


@pytest.mark.parametrize("param, expected", [
    ("bm25.stemmer=123", "bm25.stemmer: '123' is not one of 'arabic',"),
    ("bm25.k1=nan", "bm25.k1: must be a finite number, not nan"),
    ("bm25.k1=inf", "bm25.k1: must be a finite number, not inf"),
    ("bm25.b=-inf", "bm25.b: must be a finite number, not -inf"),
])
def test_every_parameter_value_is_checked_before_any_work(data: Path, home: Path, param: str, expected: str) -> None:
    res = invoke("run", "bm25", "-b", str(data), "-p", param)
    assert res.exit_code == 2, res.output
    text = flat(res.output)
    assert text.startswith("error: ") and expected in text and "Traceback" not in text
    if "stemmer" in param:
        assert "'english'" in text  # the choices are named
    assert not (home / "results.sqlite").exists()


def test_a_parameter_from_a_config_is_checked_the_same_way(data: Path, home: Path, tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[retrievers.mine]\nretriever = "bm25"\nk1 = nan\n')
    res = invoke("run", "mine", "-c", str(cfg), "-b", str(data))
    assert res.exit_code == 2 and "bm25.k1: must be a finite number, not nan" in flat(res.output), res.output
    assert not (home / "results.sqlite").exists()


def test_a_stemmer_among_the_choices_runs(data: Path, home: Path) -> None:
    res = invoke("run", "bm25", "-b", str(data), "-p", "bm25.stemmer=english", "--k", "5")
    assert res.exit_code == 0, res.output


def test_an_unknown_measure_is_refused_before_any_work(data: Path, home: Path) -> None:
    res = invoke("run", "bm25", "-b", str(data), "-m", "nDCG@x")
    assert res.exit_code == 2 and flat(res.output).startswith("error: ") and "Traceback" not in res.output
    assert not (home / "results.sqlite").exists()


# --------------------------------------------------------------------------------------------
# leaderboard --out


def test_the_site_refuses_a_folder_that_is_not_a_site_unless_forced(home: Path, tmp_path: Path) -> None:
    mine = tmp_path / "mine"
    (mine / "bench").mkdir(parents=True)
    (mine / "index.html").write_text("my own page")
    (mine / "bench" / "notes.html").write_text("my notes")
    res = invoke("leaderboard", "--out", str(mine))
    assert res.exit_code == 2, res.output
    assert "is not a leaderboard site" in flat(res.output) and "--force" in res.output
    assert (mine / "index.html").read_text() == "my own page" and not (mine / MANIFEST).exists()

    res = invoke("leaderboard", "--out", str(mine), "--force")
    assert res.exit_code == 0, res.output
    assert (mine / "index.html").read_text() != "my own page" and (mine / MANIFEST).exists()
    assert (mine / "bench" / "notes.html").read_text() == "my notes"  # not the site's: kept
    res = invoke("leaderboard", "--out", str(mine))  # a site now: rendered again without --force
    assert res.exit_code == 0, res.output
    assert (mine / "bench" / "notes.html").read_text() == "my notes"


def test_the_site_never_replaces_a_file_it_did_not_write(home: Path, tmp_path: Path) -> None:
    site = tmp_path / "site"
    assert invoke("leaderboard", "--out", str(site)).exit_code == 0
    manifest = json.loads((site / MANIFEST).read_text())
    page = "efficiency.html"
    assert page in manifest["pages"]
    manifest["pages"].remove(page)  # as if the user had put their own file there
    (site / MANIFEST).write_text(json.dumps(manifest))
    (site / page).write_text("mine")
    res = invoke("leaderboard", "--out", str(site))
    assert res.exit_code == 2, res.output
    assert "efficiency.html" in res.output and "nothing was changed" in flat(res.output)
    assert (site / page).read_text() == "mine"
    assert not list(site.glob(".beyondsim-site-*"))  # the staging folder is gone


def test_the_site_refuses_a_file_as_its_folder(home: Path, tmp_path: Path) -> None:
    target = tmp_path / "board.html"
    target.write_text("x")
    res = invoke("leaderboard", "--out", str(target))
    assert res.exit_code == 2, res.output
    assert flat(res.output) == f"error: {target} is a file, not a folder: give a folder for the site"
    assert target.read_text() == "x"


def test_a_read_only_store_builds_the_site_without_importing_the_bundle(home: Path, tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch,
                                                                       with_reference: None) -> None:
    opened: list[Store] = []

    def read_only(h=None):  # type: ignore[no-untyped-def]
        store = Store(home / "results.sqlite")
        store.readonly = True  # type: ignore[attr-defined]
        opened.append(store)
        return store

    monkeypatch.setattr(cmd_board, "open_store", read_only)
    res = invoke("leaderboard", "--out", str(tmp_path / "site"))
    assert res.exit_code == 0, res.output
    assert "read-only: the reference bundle is not imported" in flat(res.output)
    assert opened and Store(home / "results.sqlite").results() == []
    assert (tmp_path / "site" / "index.html").exists()


# --------------------------------------------------------------------------------------------
# import reads gzip


def test_import_and_verify_read_a_gzipped_export(data: Path, home: Path, tmp_path: Path) -> None:
    assert invoke("run", "bm25", "-b", str(data), "--k", "5").exit_code == 0
    plain = tmp_path / "out.jsonl"
    assert invoke("export", str(plain)).exit_code == 0
    for name in ("out.jsonl.gz", "out-compressed.jsonl"):  # the bytes tell, not the name
        packed = tmp_path / name
        packed.write_bytes(gzip.compress(plain.read_bytes()))
        other = tmp_path / f"home-{name}"
        res = invoke("import", str(packed), "--home", str(other), "--data-dir", str(tmp_path))
        assert res.exit_code == 0, res.output
        assert "imported 1 result(s)" in res.output
        assert len(Store(other / "results.sqlite").results()) == 1
        res = invoke("verify", str(packed), "--data-dir", str(tmp_path))  # read; a folder is never recomputed
        assert f"{packed}:2: result" in flat(res.output) and "did not verify" in res.output, res.output
    damaged = tmp_path / "damaged.jsonl.gz"
    damaged.write_bytes(gzip.compress(plain.read_bytes())[:40])
    res = invoke("import", str(damaged), "--home", str(tmp_path / "h3"))
    assert res.exit_code == 2 and "damaged gzip data" in res.output
