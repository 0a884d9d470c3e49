"""The ``beyondsim`` command line: the app, the table of its verbs and the one error handler.

The composition root: the only part of ``harness`` that imports ``reports`` (in
:mod:`harness.cli.cmd_board`). Each verb group is a module (``cmd_run``: run, submit, train;
``cmd_tune``: tune, sweep; ``cmd_evaluate``: evaluate, pool; ``cmd_results``: export, import, verify, breakdown; ``cmd_board``:
leaderboard, audit; ``cmd_data``; ``cmd_llm``; ``cmd_reference``: reference, reproduce;
``cmd_list``); what they share is in :mod:`harness.cli.console` and :mod:`harness.cli.options`.

Errors: a :class:`harness.core.errors.UserError` (bad input, configuration or data, a retriever that
breaks the protocol) is printed as one plain line, ``error: …``, exit code 2 (or the code the
command gave :func:`~harness.cli.console.fail`). An exception raised inside the user's own code (a
submitted retriever, its parameter class) is reported as theirs: its type and message, then only
the frames of their files; exit code 1. Anything else is a bug of ours and propagates with its
traceback. ``--traceback`` or ``BEYONDSIM_TRACEBACK=1`` prints the whole traceback in both cases.
"""

from __future__ import annotations

import os

# OpenMP's idle workers (libgomp: torch's and faiss's pools) spin for a while after every parallel
# region by default, and between the many short regions of a run (encoder batches, small kernels, the
# Python work between them) that spinning takes the core the working thread needs. Waiting passively
# changes no figure and saves CPU time and wall time (the demo on 2 cores in a fresh home: 484 → 403–430
# CPU s, 5:25 → 4:28–4:49 wall).
# libgomp reads it when it loads, so it is set before anything imports torch; a value the user set is kept.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

import contextlib
import importlib.util
import site
import sysconfig
import traceback
from pathlib import Path
from typing import Any, Callable, Iterator

import typer
from rich.text import Text
from typer.core import TyperGroup

from .. import __version__
from ..core.errors import UserError
from ..core.registry import command_apps
from . import cmd_board, cmd_data, cmd_evaluate, cmd_list, cmd_llm, cmd_reference, cmd_results, cmd_run, cmd_tune
from .console import (CommandError, LineProgress, RichProgress, console, fail, home_dir, open_store, out,  # noqa: F401
                     progress_for)
from .options import TYPER_SETTINGS

TRACEBACK_ENV = "BEYONDSIM_TRACEBACK"
# the packages whose frames are ours, not the user's (besides the standard library and site-packages)
OUR_PACKAGES = ("harness", "retrievers", "benchmarks", "reports")


class _Commands(TyperGroup):
    """The app's command group: every verb runs inside :func:`reporting_errors`. The verbs of
    installed packages are added when the command line is built, not when this package is
    imported, so a package's verbs may import :mod:`harness.cli.options` (:func:`plugin_commands`)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        for verb, command in plugin_commands():
            if verb not in self.commands:
                self.add_command(command, verb)

    def invoke(self, ctx: Any) -> Any:
        with reporting_errors(bool(ctx.params.get("show_traceback"))):
            return super().invoke(ctx)


app = typer.Typer(cls=_Commands, add_completion=False,
                  help="beyondsim — benchmark harness for retrieval beyond semantic similarity.", **TYPER_SETTINGS)


@app.callback()
def _options(
    show_traceback: bool = typer.Option(False, "--traceback", envvar=TRACEBACK_ENV,
                                        help=f"On an error, print the whole traceback (or set {TRACEBACK_ENV}=1)."),
) -> None:
    """beyondsim — benchmark harness for retrieval beyond semantic similarity."""


@contextlib.contextmanager
def reporting_errors(full: bool = False) -> Iterator[None]:
    """Print a :class:`UserError` as one line, or an exception raised in the user's own code as
    theirs (:func:`user_frames`), and exit non-zero; let anything else through."""
    try:
        yield
    except (typer.Exit, typer.Abort, typer.exceptions.TyperException):
        raise
    except UserError as e:
        if full:
            _print_traceback(e)
        console.print(Text("error: ", style="bold red") + Text(str(e)), soft_wrap=True)
        raise typer.Exit(getattr(e, "exit_code", 2)) from None
    except Exception as e:
        frames = user_frames(e.__traceback__)
        if not frames:
            raise
        if full:
            _print_traceback(e)
        else:
            console.print(Text("error: ", style="bold red") + Text(f"your code raised {type(e).__name__}: {e}"),
                          soft_wrap=True)
            for f in frames:
                console.print(Text(f"  {f.filename}:{f.lineno}, in {f.name}"), soft_wrap=True)
                if f.line:
                    console.print(Text(f"    {f.line.strip()}"), soft_wrap=True)
            console.print(f"(--traceback or {TRACEBACK_ENV}=1 prints the whole traceback)", soft_wrap=True)
        raise typer.Exit(1) from None


def _print_traceback(e: BaseException) -> None:
    console.print(Text("".join(traceback.format_exception(e)).rstrip("\n")), soft_wrap=True)


def _our_roots() -> list[Path]:
    roots = []
    for name in OUR_PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec is not None:
            roots += [Path(p).resolve() for p in spec.submodule_search_locations or ()]
    paths = sysconfig.get_paths()
    places = [paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")]
    places += [*getattr(site, "getsitepackages", lambda: [])(), getattr(site, "getusersitepackages", lambda: "")()]
    return roots + [Path(p).resolve() for p in places if p]


def is_user_file(filename: str, roots: list[Path] | None = None) -> bool:
    """Whether a frame's file is the user's: a real file outside our packages, the standard
    library and site-packages."""
    if not filename or filename.startswith("<"):
        return False
    path = Path(filename).resolve()
    return not any(path == r or r in path.parents for r in (roots if roots is not None else _our_roots()))


def user_frames(tb: Any) -> list[traceback.FrameSummary]:
    """The frames of ``tb`` (outermost first) that run the user's code (:func:`is_user_file`)."""
    roots = _our_roots()
    return [f for f in traceback.extract_tb(tb) if is_user_file(f.filename, roots)]


# The verbs, in the order `beyondsim --help` lists them.
app.command()(cmd_run.run)
app.command()(cmd_run.submit)
app.command()(cmd_evaluate.evaluate)
app.command()(cmd_board.leaderboard)
app.command()(cmd_board.audit)
app.command()(cmd_tune.tune)
app.command()(cmd_tune.sweep)
app.command()(cmd_results.breakdown)
app.command("export")(cmd_results.export_cmd)
app.command("import")(cmd_results.import_cmd)
app.command("verify")(cmd_results.verify_cmd)
app.command()(cmd_run.train)
app.command()(cmd_reference.reproduce)


@app.command()
def version() -> None:
    """Print the harness version."""
    out.print(__version__)


app.add_typer(cmd_list.list_app, name="list")
app.add_typer(cmd_data.data_app, name="data")
app.add_typer(cmd_llm.llm_app, name="llm")
app.add_typer(cmd_reference.reference_app, name="reference")
app.add_typer(cmd_evaluate.pool_app, name="pool")


def _failed_command(error: str) -> Callable[[], None]:
    def command() -> None:
        fail(error)

    return command


def plugin_commands() -> list[tuple[str, Any]]:
    """``(verb, command)`` for the verbs of installed packages (entry point group
    ``beyondsim.commands``), each a typer app under its entry point's name; one that fails to load
    becomes a verb that says why."""
    rows = []
    for verb, commands, error in command_apps():
        if commands is None:
            failed = typer.Typer(add_completion=False, **TYPER_SETTINGS)
            failed.command(verb, help=f"Failed to load: {error}")(_failed_command(error))
            command = typer.main.get_command(failed)
        else:
            command = typer.main.get_group(commands)
        command.name = verb
        rows.append((verb, command))
    return rows


def main() -> None:  # pragma: no cover
    app()
