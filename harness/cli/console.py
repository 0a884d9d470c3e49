"""What every verb shares: the two consoles (messages on stderr, results on stdout, both plain
text: labels, queries, file names and errors may hold square brackets, never read as markup), the
tables on stdout fitted to its width (:func:`fit_table`), the home folder and its results store,
progress display, :func:`fail`, and the option parsing that several verbs share (``--param``,
``--config``, ``[llm]``, suites, ``--ray``)."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import io
import itertools
import os
import sys
import threading
import time
import tomllib
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn, Optional, Sequence

from rich.cells import cell_len
from rich.console import Console, RenderableType
from rich.measure import Measurement
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Column, Table
from rich.text import Text

from ..data.readers import default_data_dir, default_home, missing_files
from ..core.errors import UserError
from ..core.registry import RegistryError, get_benchmark_loader, get_suite
from ..run.runner import Runner, Settings
from ..store.results import Store
from ..store.results import open_store as store_at

PIPE_WIDTH = 160  # the width of stdout when it is no terminal and COLUMNS is not set (a log, a pipe)
TEXT_MIN_WIDTH = 12  # a text column is abbreviated or wrapped down to this width (its own min_width if larger)


def output_width() -> int:
    """The width the results on stdout are fitted to, read when they are printed: ``COLUMNS`` when
    it is a positive number, else the terminal's width, else :data:`PIPE_WIDTH`."""
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    stream = sys.stdout
    try:
        if stream.isatty():
            return os.get_terminal_size(stream.fileno()).columns or PIPE_WIDTH
    except (AttributeError, OSError, ValueError):
        pass
    return PIPE_WIDTH


@dataclasses.dataclass
class Fitted:
    """A table fitted to a width: the table to print, the headers of the columns left out to fit
    in the table's order (a column removed for being empty is not named), and the width that shows
    every column."""

    table: Table
    left_out: list[str]
    width: int
    needs: int

    def note(self, hint: str = "") -> str:
        """The line printed under a table that lost columns: which, and how to see them."""
        if not self.left_out:
            return ""
        how = f"a terminal of {self.needs} columns shows them (COLUMNS={self.needs})"
        return (f"left out to fit {self.width} columns: {', '.join(self.left_out)}; {how}"
                + (f"; {hint}" if hint else ""))


_MEASURE = Console(width=10_000, file=io.StringIO(), markup=False, highlight=False, emoji=False)


def _plain(cell: RenderableType) -> Optional[str]:
    if isinstance(cell, str):
        return cell
    if isinstance(cell, Text):
        return cell.plain
    return None


def _empty(cell: RenderableType) -> bool:
    text = _plain(cell)
    return text is not None and not text.strip()


def _cell_width(cell: RenderableType) -> int:
    """How wide ``cell`` prints on one line per line of its text."""
    text = _plain(cell)
    if text is not None:
        return max((cell_len(line) for line in text.splitlines()), default=0)
    return Measurement.get(_MEASURE, _MEASURE.options, cell).maximum


def _longest_word(cell: RenderableType) -> int:
    text = _plain(cell)
    return max((cell_len(w) for w in text.split()), default=0) if text is not None else _cell_width(cell)


def _is_whole(column: Column) -> bool:
    """A column printed whole or not at all: a figure column (right-justified)."""
    return column.justify == "right"


def fit_table(table: Table, width: int, drop_order: Sequence[str] = ()) -> Fitted:
    """``table`` made to print within ``width`` columns, its figures never cut.

    A column whose every body cell is empty is removed. A figure column (right-justified) keeps
    the width of its widest cell: its header may wrap at spaces (not with ``no_wrap``), its cells
    never do; when the columns do not fit even so, whole columns are left out, first those named in
    ``drop_order`` (headers, in that order), then the others from the right (never the first).
    A text column gives up width before any column is left out: down to :data:`TEXT_MIN_WIDTH` (or
    its own ``min_width``), with its own overflow (a column with ``no_wrap`` and
    ``overflow="ellipsis"`` is abbreviated, the others wrap). The widths are fixed on the returned
    table, so the console never squeezes it further."""
    columns = list(table.columns)
    if table.row_count:
        columns = [c for c in columns if not all(_empty(x) for x in c.cells)]
    headers = [(_plain(c.header) or "") for c in columns]

    def natural(c: Column) -> int:
        body = max((_cell_width(x) for x in c.cells), default=0)
        w = max(body, _cell_width(c.header))
        return min(w, c.max_width) if c.max_width is not None and not _is_whole(c) else w

    def least(c: Column) -> int:
        body = max((_cell_width(x) for x in c.cells), default=0)
        if _is_whole(c):  # a header that may not wrap is kept whole too
            return max(body, _cell_width(c.header) if c.no_wrap else _longest_word(c.header), 1)
        return max(1, min(natural(c), max(c.min_width or 0, TEXT_MIN_WIDTH)))

    _, right, _, left = table.padding
    box_edges = 2 if table.box and table.show_edge else 0

    def total(ws: Sequence[int]) -> int:
        n = len(ws)
        pads = n * (left + right) - ((left + right) if not table.pad_edge and n else 0)
        return sum(ws) + pads + box_edges + (n - 1 if table.box and n else 0)

    mins = {id(c): least(c) for c in columns}
    nats = {id(c): max(natural(c), mins[id(c)]) for c in columns}
    needs = total([mins[id(c)] for c in columns])
    order = [h for h in drop_order if h in headers]
    order += [h for h in reversed(headers[1:]) if h not in order]
    kept = list(columns)
    left_out: list[str] = []
    while total([mins[id(c)] for c in kept]) > width and order and len(kept) > 1:
        h = order.pop(0)
        kept = [c for c in kept if (_plain(c.header) or "") != h]
        left_out.append(h)
    left_out.sort(key=headers.index)  # named in the table's order
    widths = {id(c): mins[id(c)] for c in kept}
    slack = width - total(list(widths.values()))
    words = {id(c): min(nats[id(c)], max([_longest_word(x) for x in c.cells] + [_longest_word(c.header)]))
             for c in kept}
    # the width given back: first to the text columns up to their longest word (a text wraps at its
    # spaces before a word is cut), then up to their whole text, then to the figures' headers; a
    # column at a time, the narrowest first, so that no column takes all the room
    for whole, goal in ((False, words), (False, nats), (True, nats)):
        while slack > 0:
            short = [c for c in kept if _is_whole(c) == whole and widths[id(c)] < goal[id(c)]]
            if not short:
                break
            widths[id(min(short, key=lambda c: widths[id(c)]))] += 1
            slack -= 1
    fitted = copy.copy(table)
    fitted.columns = [dataclasses.replace(c, width=widths[id(c)], min_width=None, max_width=None, _index=i)
                      for i, c in enumerate(kept)]
    return Fitted(fitted, left_out, width, needs)


class ResultsConsole(Console):
    """The console of stdout: every line is printed at :func:`output_width`, and every table
    through :func:`fit_table` first, with the line that names the columns it left out (a table may
    name the order to leave them out in as ``table.drop_order`` and how to see them as
    ``table.fit_hint``)."""

    def print(self, *objects: Any, **kwargs: Any) -> None:  # type: ignore[override]
        self.width = output_width()
        if not any(isinstance(o, Table) for o in objects):
            super().print(*objects, **kwargs)
            return
        for o in objects:
            if not isinstance(o, Table):
                super().print(o, **kwargs)
                continue
            fitted = fit_table(o, self.width, getattr(o, "drop_order", ()))
            super().print(fitted.table, **kwargs)
            if fitted.left_out:
                super().print(fitted.note(getattr(o, "fit_hint", "")), highlight=False)


# Every string printed goes out as plain text: labels, queries, file names and errors may hold
# square brackets, which must never be read as console markup. Styles come from Text objects.
console = Console(stderr=True, markup=False, highlight=False, emoji=False)
out = ResultsConsole(width=PIPE_WIDTH, markup=False, highlight=False, emoji=False)


def home_dir(home: Optional[Path] = None) -> Path:
    h = default_home(home)
    h.mkdir(parents=True, exist_ok=True)
    return h


def open_store(home: Optional[Path] = None) -> Store:
    """The results store of ``home`` (default :func:`harness.data.default_home`)."""
    return store_at(home_dir(home))


class RichProgress:
    """Rich progress bars for every loop that reports through ``ctx.progress``."""

    def __init__(self, console: Console):
        self._p = Progress(TextColumn("{task.description}", style="bold", markup=False), BarColumn(),
                           MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(), console=console,
                           transient=True)

    def __enter__(self) -> "RichProgress":
        self._p.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._p.stop()

    @contextlib.contextmanager
    def track(self, total: int, description: str) -> Iterator[Callable[[int], None]]:
        task = self._p.add_task(description, total=total)
        try:
            yield lambda n=1: self._p.advance(task, n)
        finally:
            self._p.remove_task(task)


class LineProgress:
    """Progress for a log file or a pipe: every ``interval`` seconds one plain line per loop that is
    still running (``dense: encoding corpus: 1,024/5,183 (20%), 31 s``), and a closing line for a
    loop that outlived one interval, so a long step is never silent."""

    def __init__(self, console: Console, interval: float = 10.0):
        self._console, self._interval = console, interval
        self._tasks: dict[int, list[Any]] = {}  # id -> [description, total, done, start]
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None
        self._ids = itertools.count()

    def __enter__(self) -> "LineProgress":
        self._thread = threading.Thread(target=self._tick, name="beyondsim-progress", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @staticmethod
    def _line(description: str, total: int, done: int, elapsed: float) -> str:
        share = f" ({100 * done / total:.0f}%)" if total else ""
        return f"{description}: {done:,}/{total:,}{share}, {elapsed:.0f} s"

    def _tick(self) -> None:
        while not self._stop.wait(self._interval):
            with self._lock:
                lines = [self._line(d, t, n, time.monotonic() - t0) for d, t, n, t0 in self._tasks.values()]
            for line in lines:
                self._console.print(line, soft_wrap=True)

    @contextlib.contextmanager
    def track(self, total: int, description: str) -> Iterator[Callable[[int], None]]:
        tid = next(self._ids)
        state = [description, total, 0, time.monotonic()]
        with self._lock:
            self._tasks[tid] = state

        def advance(n: int = 1) -> None:
            with self._lock:
                state[2] += n

        try:
            yield advance
        finally:
            with self._lock:
                del self._tasks[tid]
            elapsed = time.monotonic() - state[3]
            if elapsed >= self._interval:
                self._console.print(self._line(description, total, state[2], elapsed) + " (done)", soft_wrap=True)


def progress_for(console: Console) -> "RichProgress | LineProgress":
    """Bars on a terminal; plain lines every few seconds in a log or a pipe
    (``BEYONDSIM_PROGRESS_INTERVAL`` seconds, default 10)."""
    if console.is_terminal:
        return RichProgress(console)
    try:
        interval = float(os.environ.get("BEYONDSIM_PROGRESS_INTERVAL", "10"))
    except ValueError:
        interval = 10.0
    return LineProgress(console, max(interval, 0.05))


class CommandError(UserError):
    """A command's own refusal (a bad option, nothing to do); exits with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.exit_code = exit_code


def fail(msg: str, code: int = 2) -> NoReturn:
    """Stop the command: the app's error handler prints ``error: msg`` and exits with ``code``."""
    raise CommandError(msg, code)


def check_choice(flag: str, value: str, choices: tuple[str, ...]) -> str:
    """``value`` when it is one of ``choices``, else the command stops with one line naming ``flag``,
    the choices and what was given (printed as plain text)."""
    if value not in choices:
        fail(f"{flag} must be one of {', '.join(choices)} (got {value!r})")
    return value


def warn(msg: str) -> None:
    console.print(Text("warning: ", style="bold yellow") + Text(msg), soft_wrap=True)


def log_line(msg: str) -> None:
    """A progress message of the engine, printed as plain text."""
    console.print(msg, highlight=False, markup=False, soft_wrap=True)


def parse_params(items: list[str], config: dict[str, Any]) -> dict[str, dict[str, Any]]:
    params: dict[str, dict[str, Any]] = {k: dict(v) for k, v in config.get("retrievers", {}).items()}
    for item in items:
        name_key, eq, value = item.partition("=")
        name, dot, key = name_key.partition(".")
        if not eq or not dot or not key:
            fail(f"--param {item!r}: expected RETRIEVER.KEY=VALUE, e.g. dense.model=all-MiniLM-L6-v2")
        params.setdefault(name, {})[key] = value
    return params


def load_config(path: Optional[Path]) -> dict[str, Any]:
    if path is None:
        return {}
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except FileNotFoundError:
        fail(f"config file {path} does not exist")
    except tomllib.TOMLDecodeError as e:
        fail(f"{path}: invalid TOML: {e}")
    return {}


def make_runner(settings: Settings, store: Store, progress: Any, log: Callable[[str], None],
                 ray: Optional[str] = None) -> Runner:
    """The local runner, or with ``ray`` one that sends the jobs to that Ray cluster."""
    if ray is None:
        return Runner(settings, store, progress, log=log)
    from ..run.distributed import RayRunner, RayUnavailable

    try:
        return RayRunner(settings, store, progress, log=log, address=ray)
    except RayUnavailable as e:
        store.close()
        fail(str(e))


def resolve_llm_settings(cfg: dict[str, Any], path: Optional[Path], **overrides: Any) -> Any:
    from ..models.llm import LLMSettings

    table = cfg.get("llm", {})
    if not isinstance(table, dict):
        fail(f"{path}: [llm] must be a table")
    try:
        return LLMSettings.resolve(table, **overrides)
    except (TypeError, ValueError) as e:
        fail(f"{path or 'LLM settings'}: {e}")


def missing_on_disk(name: str, root: Path) -> bool:
    try:
        loader, bname = get_benchmark_loader(name)
    except RegistryError:
        return False  # let the run report it
    check = getattr(loader, "missing_files", None)
    return bool(check(bname, root)) if callable(check) else bool(missing_files(root, loader.info(bname).files))


def add_suite_benchmarks(suite: str, benches: list[str], data_dir: Optional[Path], online: bool) -> dict[str, Any]:
    """Append the benchmarks of ``suite`` to ``benches`` (those absent on disk are skipped with a
    note unless ``online``); return the suite."""
    s = get_suite(suite)
    root = default_data_dir(data_dir)
    absent: list[str] = []
    for b in s["benchmarks"]:
        if b in benches:
            continue
        if not online and missing_on_disk(b, root):
            absent.append(b)
            continue
        benches.append(b)
    if absent:
        console.print(f"suite {suite!r}: skipping {len(absent)} benchmark(s) not on disk in {root}: "
                      f"{', '.join(absent)} (see `beyondsim data status`; --online fetches those with an online source)",
                      highlight=False, soft_wrap=True)
    return s


MAX_K = 2**31 - 1  # the deepest ranking a run may ask for (an index type of every backend)
MAX_SEED = 2**32 - 1  # numpy's and torch's seeds are unsigned 32-bit


def check_depth(k: int) -> int:
    """``--k``: a ranking depth from 1 to :data:`MAX_K`, refused before any work."""
    if not 1 <= k <= MAX_K:
        fail(f"--k must be between 1 and {MAX_K}, not {k}")
    return k


def check_seeds(seeds: Optional[int], seed: Optional[list[int]] = None) -> Optional[list[int]]:
    """``--seeds N`` (at least 1) or explicit ``--seed`` values (0 to :data:`MAX_SEED`), refused
    before any work; the explicit seeds when given, else ``range(N)`` (``None`` when neither is)."""
    for s in seed or ():
        if not 0 <= s <= MAX_SEED:
            fail(f"--seed must be between 0 and {MAX_SEED}, not {s}")
    if seed:
        return list(seed)
    if seeds is None:
        return None
    if seeds < 1:
        fail(f"--seeds must be at least 1, not {seeds}")
    if seeds > MAX_SEED:
        fail(f"--seeds must be at most {MAX_SEED}, not {seeds}")
    return list(range(seeds))


def reference_pins() -> dict[str, dict[str, str]]:
    """The content hashes the installed reference plan pins for its named pools (none when no plan
    is installed or it does not read)."""
    from ..core.registry import RegistryError, reference_files
    from ..record.matrix import load_plan

    try:
        plan = reference_files().get("plan")
        return load_plan(plan).pins() if plan else {}
    except (RegistryError, UserError, OSError):
        return {}
