"""The ``browser_page`` fixture (tests/conftest.py): a local page runs its inline script and is
seen to stay offline; external requests, console errors and uncaught exceptions are recorded.
Without a browser the fixture skips, or fails when BEYONDSIM_REQUIRE_BROWSER=1."""

from __future__ import annotations

from pathlib import Path

import conftest
import pytest


def write(path: Path, body: str) -> Path:
    path.write_text(
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8"><title>t</title></head>\n'
        f"<body>{body}</body></html>\n"
    )
    return path


@pytest.mark.browser
def test_local_page_runs_script_offline(browser_page, tmp_path):
    page = write(
        tmp_path / "ok.html",
        '<p id="msg">before</p><script>document.getElementById("msg").textContent = "after";</script>',
    )
    browser_page.goto(page.as_uri())
    assert browser_page.text_content("#msg") == "after"
    assert browser_page.external_requests == []
    assert browser_page.console_errors == []
    assert browser_page.page_errors == []


@pytest.mark.browser
def test_external_request_and_errors_are_recorded(browser_page, tmp_path):
    page = write(
        tmp_path / "bad.html",
        "<script>"
        'fetch("http://example.com").catch(() => {}).finally(() => { document.body.dataset.done = "1"; });'
        'console.error("x");'
        "</script>"
        '<script>throw new Error("boom");</script>',
    )
    browser_page.goto(page.as_uri())
    browser_page.wait_for_selector("body[data-done='1']", state="attached")
    assert browser_page.external_requests == ["http://example.com/"]
    assert "x" in browser_page.console_errors
    assert any("boom" in e for e in browser_page.page_errors)


def test_missing_browser_skips_or_fails(monkeypatch, tmp_path):
    monkeypatch.setattr(conftest, "CHROMIUM", tmp_path / "no-chromium")
    monkeypatch.delenv("BEYONDSIM_REQUIRE_BROWSER", raising=False)
    with pytest.raises(pytest.skip.Exception, match="no Chromium"):
        conftest.require_browser()
    monkeypatch.setenv("BEYONDSIM_REQUIRE_BROWSER", "1")
    with pytest.raises(pytest.fail.Exception, match="BEYONDSIM_REQUIRE_BROWSER=1"):
        conftest.require_browser()
