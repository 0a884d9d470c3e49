"""Shared fixtures. Every test runs with outbound network connections refused, so any code
path that would reach a hub or a dataset server fails loudly instead of passing by luck."""

from __future__ import annotations

import importlib.util
import io
import os
import socket
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# Under pytest-xdist (`make test` runs a worker per CPU) each worker gets its share of the cores
# for the OpenMP/BLAS pools of torch, numpy and faiss: pools sized for the whole machine in every
# worker oversubscribe it, and their spinning threads then slow every worker down. Set before any
# of those libraries is imported; a value already in the environment wins.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    _share = str(max(1, (os.cpu_count() or 1) // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ.setdefault(_var, _share)

# The shipped reference bundle stays out of the tests' leaderboards (they assert on their own rows);
# the tests of the bundle itself (test_reference, the demo) turn it back on with `with_reference`.
os.environ.setdefault("BEYONDSIM_REFERENCE", "0")

# The CLI's tables are fitted to COLUMNS (harness.cli.console.output_width). pytest-xdist's workers
# inherit COLUMNS=80 from the terminal pytest reports to, which is not the width of what a test
# reads: the CLI under test prints as to a pipe (PIPE_WIDTH) unless a test sets a width itself
# (tests/test_terminal_tables.py).
os.environ.pop("COLUMNS", None)

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


@pytest.fixture
def with_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    """The leaderboard brings in the reference results by default, as it does outside the tests."""
    monkeypatch.setenv("BEYONDSIM_REFERENCE", "1")


class NetworkBlocked(RuntimeError):
    pass


def _is_local(address: object) -> bool:
    if isinstance(address, (str, bytes)):  # AF_UNIX
        return True
    if isinstance(address, tuple) and address:
        host = str(address[0])
        return host in ("localhost", "::1") or host.startswith("127.")
    return False


@pytest.fixture(autouse=True)
def no_network(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    attempts: list[object] = []
    real_connect = socket.socket.connect
    real_connect_ex = socket.socket.connect_ex

    def guard(self: socket.socket, address: object, _real=real_connect):  # type: ignore[no-untyped-def]
        if not _is_local(address):
            attempts.append(address)
            raise NetworkBlocked(f"test tried to open a network connection to {address!r}")
        return _real(self, address)

    def guard_ex(self: socket.socket, address: object, _real=real_connect_ex):  # type: ignore[no-untyped-def]
        if not _is_local(address):
            attempts.append(address)
            raise NetworkBlocked(f"test tried to open a network connection to {address!r}")
        return _real(self, address)

    monkeypatch.setattr(socket.socket, "connect", guard)
    monkeypatch.setattr(socket.socket, "connect_ex", guard_ex)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")
    return attempts


@pytest.fixture
def shared_data() -> Path:
    if not SHARED_DATA.is_dir():
        pytest.skip(f"real benchmark data not found at {SHARED_DATA}")
    return SHARED_DATA


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    monkeypatch.setenv("BEYONDSIM_HOME", str(h))
    return h


@pytest.fixture(scope="session")
def share_embeddings(tmp_path_factory: pytest.TempPathFactory) -> Callable[[Path], Path]:
    """``share_embeddings(home)`` points ``home``'s embedding cache at one cache for the whole
    session (the models and everything else stay the home's own) and returns ``home``. The slow
    tests encode the same corpora with MiniLM (SciFact, NegConstraint), minutes each on a CPU; the
    cache is keyed by model and texts and written atomically, so sharing it changes no result. Under
    pytest-xdist the workers share one cache (beside their own temporary folders): an entry is
    computed under a lock (harness/models/pool.py), so a worker that needs it meanwhile waits and
    reads it."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent / "embeddings-shared"
        shared.mkdir(exist_ok=True)
    else:
        shared = tmp_path_factory.mktemp("embeddings")

    def share(home: Path) -> Path:
        (home / "cache").mkdir(parents=True, exist_ok=True)
        (home / "cache" / "embeddings").symlink_to(shared, target_is_directory=True)
        return home

    return share


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory):
    """An encoder pool (CPU) with an embedding cache shared by the tests of one module."""
    from harness.models.pool import EncoderPool

    return EncoderPool(tmp_path_factory.mktemp("cache"), "cpu")


@pytest.fixture
def ctx(pool):
    """A run context on the CPU over the module's encoder pool."""
    from harness.protocols import RunContext

    return RunContext(seed=0, device="cpu", encoders=pool, cache_dir=pool.cache_dir)


def tarball_with_member(path: Path, member: str) -> Path:
    """A .tar.gz at ``path`` holding one two-byte file named ``member`` (for unsafe-path tests)."""
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(member)
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    return path


# --------------------------------------------------------------------------------------------
# headless browser (Playwright's sync API over the system Chromium; no browser is downloaded)

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# URL schemes that never leave the machine; any other request counts as external
LOCAL_SCHEMES = ("file:", "data:", "blob:", "about:")


def _browser_missing() -> str | None:
    if importlib.util.find_spec("playwright") is None:
        return "playwright is not installed (pip install -e '.[test]')"
    if not os.access(CHROMIUM, os.X_OK):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium)"
    return None


def require_browser() -> None:
    """Skip the calling test when no browser can run; fail instead with BEYONDSIM_REQUIRE_BROWSER=1."""
    missing = _browser_missing()
    if missing is None:
        return
    if os.environ.get("BEYONDSIM_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{missing}, and BEYONDSIM_REQUIRE_BROWSER=1 forbids skipping", pytrace=False)
    pytest.skip(missing)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if "browser_page" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def _chromium() -> Iterator[Any]:
    """One headless Chromium for the session; skipped (or failed with BEYONDSIM_REQUIRE_BROWSER=1)
    when Playwright or the system Chromium is missing."""
    require_browser()
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    try:
        browser = pw.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS, headless=True)
        try:
            yield browser
        finally:
            browser.close()
    finally:
        pw.stop()


@pytest.fixture
def browser_page(_chromium: Any) -> Iterator[Any]:
    """A Playwright page (sync API) in a fresh browser context.

    Besides the page API it carries what the page did, for the test to assert on:

    * ``page.console_errors``: text of every ``console`` message of type ``error``;
    * ``page.page_errors``: message of every uncaught exception (``pageerror``);
    * ``page.external_requests``: URL of every request whose scheme is not ``file:``, ``data:``,
      ``blob:`` or ``about:``. Such requests are recorded and then aborted, so nothing leaves
      the machine.

    Open a local page with ``page.goto(path.as_uri())``.
    """
    context = _chromium.new_context()
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.console_errors = []
    page.page_errors = []
    page.external_requests = []

    def is_local(url: str) -> bool:
        return url.lower().startswith(LOCAL_SCHEMES)

    def on_console(msg: Any) -> None:
        if msg.type == "error":
            page.console_errors.append(msg.text)

    def on_request(request: Any) -> None:
        if not is_local(request.url):
            page.external_requests.append(request.url)

    def on_route(route: Any) -> None:
        if is_local(route.request.url):
            route.continue_()
        else:
            route.abort("blockedbyclient")

    page.on("console", on_console)
    page.on("pageerror", lambda exc: page.page_errors.append(str(exc)))
    page.on("request", on_request)
    context.route("**/*", on_route)
    try:
        yield page
    finally:
        context.close()



# --------------------------------------------------------------------------------------------
# screenshots taken by browser tests, listed at the end of the test output

_SCREENSHOTS = pytest.StashKey[list]()


@pytest.fixture
def screenshot_log(request: pytest.FixtureRequest) -> list[Path]:
    """Append the path of every screenshot a test writes; the run's summary lists them."""
    return request.config.stash.setdefault(_SCREENSHOTS, [])


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Under pytest-xdist a worker hands its list to the controller, which prints the summary."""
    out = getattr(session.config, "workeroutput", None)
    if out is not None:
        out["screenshots"] = [str(p) for p in session.config.stash.get(_SCREENSHOTS, [])]


@pytest.hookimpl(optionalhook=True)  # a pytest-xdist hook: the controller, when a worker ends
def pytest_testnodedown(node: Any, error: Any) -> None:
    shots = getattr(node, "workeroutput", {}).get("screenshots", [])
    node.config.stash.setdefault(_SCREENSHOTS, []).extend(map(Path, shots))


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    shots = config.stash.get(_SCREENSHOTS, [])
    if shots:
        terminalreporter.section("screenshots")
        for p in shots:
            size = p.stat().st_size if p.exists() else 0
            terminalreporter.write_line(f"{p} ({size:,} bytes)")
