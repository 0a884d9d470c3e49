"""``beyondsim reference``: build, bundle and import the reference results (:mod:`harness.reference`)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table
from rich.text import Text

from .cli_options import DataDirOpt, DeviceOpt, HomeOpt

reference_app = typer.Typer(help="The reference results shipped with the project: build them, write the bundle, "
                            "import it.", no_args_is_help=True, rich_markup_mode=None)

OnlyOpt = typer.Option(None, "--only", help="Only the configurations whose label matches this fnmatch pattern "
                       "('dense*'), or the benchmarks that match it; LABEL@BENCHMARK for both "
                       "('coder-*@beir/scifact').")


def _files() -> dict[str, Path]:
    from .cli import fail
    from .registry import RegistryError, reference_files

    try:
        files = reference_files()
    except RegistryError as e:
        fail(str(e))
    if "plan" not in files:
        fail("no reference plan is installed (entry point group beyondsim.reference)")
    return files


def _jobs(only: Optional[str], data_dir: Optional[Path]):  # type: ignore[no-untyped-def]
    from .cli import _missing_on_disk, fail
    from .data import default_data_dir
    from .reference import PlanError, jobs, load_plan
    from .registry import suites

    files = _files()
    root = default_data_dir(data_dir)
    try:
        plan = load_plan(files["plan"])
        return plan, jobs(plan, suites(), lambda b: not _missing_on_disk(b, root), only)
    except PlanError as e:
        fail(str(e))


def build_home(home: Path) -> Path:
    """Where the reference results are built: a store of their own beside the user's."""
    return home / "reference"


@reference_app.command("build")
def build(
    only: Optional[str] = OnlyOpt,
    dry_run: bool = typer.Option(False, "--dry-run", help="Print what would run, run nothing."),
    data_dir: DataDirOpt = None,
    device: DeviceOpt = None,
    home: HomeOpt = None,
) -> None:
    """Run the reference plan into its own store ($BEYONDSIM_HOME/reference/results.sqlite), sharing
    the embedding and LLM caches. Resumable: finished results are kept, so chunks (--only) and
    interrupted builds add up; `reference bundle` then writes the bundle."""
    from .cli import console, fail, home_dir, progress_for
    from .registry import RegistryError, make_spec
    from .runner import Runner, Settings
    from .store import Store

    plan, todo = _jobs(only, data_dir)
    specs = {}
    try:
        for j in todo:
            c = j.config
            specs[id(j)] = make_spec(c.retriever, c.params, label=c.label if c.label != c.retriever else "")
    except (RegistryError, ValueError) as e:
        fail(f"reference plan: {e}")
    for j in todo:
        c = j.config
        what = f"{c.display}: {len(j.benchmarks)} benchmark(s) × seeds {c.seeds}" + (
            f", first {c.max_queries} queries" if c.max_queries else "")
        console.print(what + (f" (not on disk: {', '.join(j.skipped)})" if j.skipped else ""), soft_wrap=True)
    if dry_run:
        return
    root = home_dir(home)
    store = Store(build_home(root) / "results.sqlite")
    t0 = time.perf_counter()
    with store:
        for j in todo:
            c = j.config
            if not j.benchmarks:
                continue
            settings = Settings(home=root, data_dir=data_dir, device=device, max_queries=c.max_queries)
            with progress_for(console) as progress, Runner(settings, store, progress,
                                                    log=lambda m: console.print(m, soft_wrap=True)) as runner:
                runner.run([specs[id(j)]], j.benchmarks, list(c.seeds))
                if runner.budget_stop:
                    fail(f"stopped: {runner.budget_stop}", 3)
    console.print(f"reference build: {time.perf_counter() - t0:,.0f} s; `beyondsim reference status` shows what is "
                  "done, `beyondsim reference bundle` writes the bundle", soft_wrap=True)


@reference_app.command("status")
def status(only: Optional[str] = OnlyOpt, data_dir: DataDirOpt = None, home: HomeOpt = None) -> None:
    """How much of the reference plan the build store holds, per configuration."""
    from .cli import home_dir, out
    from .reference import summary
    from .store import Store

    plan, todo = _jobs(only, data_dir)
    path = build_home(home_dir(home)) / "results.sqlite"
    with Store(path) as store:
        rows = summary(store, plan, todo)
    t = Table(title=f"reference plan ({path})")
    for col in ("configuration", "results", "not on disk", "note"):
        t.add_column(col)
    for r in rows:
        style = "green" if r["done"] == r["wanted"] else "yellow"
        t.add_row(Text(r["label"]), Text(f"{r['done']}/{r['wanted']}", style=style), Text(", ".join(r["skipped"])),
                  Text(r["note"]))
    out.print(t)


@reference_app.command("bundle")
def bundle(
    out_path: Optional[Path] = typer.Option(None, "--out", "-o", help="Bundle file (default: the installed "
                                            "benchmarks/reference/bundle.jsonl.gz)."),
    add: bool = typer.Option(False, "--add", help="Add the build store's results to the existing bundle (one with "
                             "the same key is replaced) instead of writing the build store alone: for a "
                             "build of part of the plan (--only)."),
    home: HomeOpt = None,
) -> None:
    """Write the build store as the bundle: gzip-compressed JSON lines, rankings cut to the plan's
    depth (top 10), per-query measures, spec, provenance, environment and ledger kept."""
    from .cli import console, fail, home_dir
    from .exchange import ExchangeError
    from .reference import add_to_bundle, load_plan, write_bundle
    from .store import Store

    files = _files()
    target = out_path or files["bundle"]
    path = build_home(home_dir(home)) / "results.sqlite"
    if not path.exists():
        fail(f"no reference build at {path}: run `beyondsim reference build` first")
    plan = load_plan(files["plan"])
    with Store(path) as store:
        try:
            if add:
                if not target.exists():
                    fail(f"--add: no bundle at {target} to add to")
                added, replaced = add_to_bundle(store, target, depth=plan.depth, plan=plan)
            else:
                n = write_bundle(store, target, depth=plan.depth, plan=plan)
        except (ExchangeError, OSError, ValueError) as e:
            fail(f"{target}: {e}")
    what = f"added {added} result(s) and replaced {replaced}" if add else f"wrote {n} result(s)"
    console.print(f"{what} in {target} ({target.stat().st_size / 1e6:.1f} MB)", soft_wrap=True)


@reference_app.command("import")
def import_(
    force: bool = typer.Option(False, "--force", help="Import again even if this bundle is in the store."),
    bundle_path: Optional[Path] = typer.Option(None, "--bundle", help="Another bundle file."),
    data_dir: DataDirOpt = None,
    home: HomeOpt = None,
) -> None:
    """Bring the reference bundle into the results store (the leaderboard does it by default):
    each result verified against the benchmark here where it is on disk, marked as reference."""
    from .cli import console, fail, open_store
    from .data import default_data_dir

    path = bundle_path or _files().get("bundle")
    if path is None or not Path(path).exists():
        fail(f"no reference bundle at {path}")
    with open_store(home) as store:
        report = import_bundle(store, Path(path), default_data_dir(data_dir), force=force)
    if report is None:
        raise typer.Exit(1)
    console.print(describe(report), soft_wrap=True)


def import_bundle(store, path: Path, data_dir: Path, *, force: bool = False):  # type: ignore[no-untyped-def]
    """:func:`harness.reference.ensure_imported` with its messages on the console."""
    from .cli import console
    from .exchange import ExchangeError
    from .reference import ensure_imported

    try:
        report = ensure_imported(store, path, data_dir, force=force,
                                 log=lambda m: console.print(m, soft_wrap=True))
    except (ExchangeError, OSError) as e:
        console.print(Text("warning: ", style="bold yellow") + Text(f"reference bundle {path} not imported: {e}"),
                      soft_wrap=True)
        return None
    for d in report.differences:
        console.print(Text("note: ", style="bold") + Text(f"differs from the reference: {d}"), soft_wrap=True)
    for r in report.refused:
        console.print(Text("warning: ", style="bold yellow") + Text(r), soft_wrap=True)
    for r in report.unverified[:20]:
        console.print(Text("reported, not verified: ", style="bold yellow") + Text(r), soft_wrap=True)
    if len(report.unverified) > 20:
        console.print(f"… and {len(report.unverified) - 20} more not verified", soft_wrap=True)
    return report


def describe(report) -> str:  # type: ignore[no-untyped-def]
    if report.skipped:
        return f"reference bundle {report.bundle} is in the store already"
    return (f"reference bundle {report.bundle}: {report.added} result(s) imported ({report.verified} verified, "
            f"{report.reported} reported), {report.present} already in the store"
            + (f", {report.replaced_old} of an older bundle replaced" if report.replaced_old else "")
            + (f", {len(report.refused)} refused" if report.refused else ""))
