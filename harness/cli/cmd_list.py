"""``list``: the registered retrievers, benchmarks, suites and trainers."""

from __future__ import annotations

import dataclasses

import typer
from rich.table import Table
from rich.text import Text

from ..data.readers import default_data_dir, missing_files
from ..core.registry import (RegistryError, benchmark_variants, get_retriever_class, get_trainer, params_class,
                             retriever_info, retriever_names, suites, trainer_names)
from ..run.submit import origin
from .console import out
from .options import TYPER_SETTINGS, DataDirOpt

list_app = typer.Typer(help="List retrievers, benchmarks or suites.", **TYPER_SETTINGS)


@list_app.command("retrievers")
def list_retrievers() -> None:
    """Every registered retriever: its family, what it does, its paper, its class and parameters."""
    t = Table(title="retrievers")
    t.add_column("id", no_wrap=True)
    t.add_column("family", max_width=16)
    for c in ("description", "paper", "class", "parameters (defaults)"):
        t.add_column(c, overflow="fold")
    for n in retriever_names():
        try:
            cls = get_retriever_class(n)
            ps = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(params_class(cls)))
        except RegistryError as e:
            t.add_row(n, "", "", "", Text("failed to load", style="red"), str(e))
            continue
        info = retriever_info(cls)
        t.add_row(n, info.family, info.description, info.paper, origin(cls), ps)
    out.print(t)


@list_app.command("benchmarks")
def list_benchmarks(data_dir: DataDirOpt = None) -> None:
    """Every registered benchmark (each split and family member), its task and whether it is on disk."""
    root = default_data_dir(data_dir)
    t = Table(title=f"benchmarks (data dir: {root})")
    for c in ("id", "task", "on disk", "description"):
        t.add_column(c)
    for n, loader, err in benchmark_variants():
        if loader is None:
            t.add_row(n, "?", Text("failed to load", style="red"), err)
            continue
        try:
            info = loader.info(n)
            missing = loader.missing_files(n, root) if hasattr(loader, "missing_files") else \
                missing_files(root, info.files)
        except (ValueError, OSError) as e:
            t.add_row(n, "?", Text("error", style="red"), str(e))
            continue
        t.add_row(n, info.task, "missing" if missing else "yes", info.description[:100])
    out.print(t)


@list_app.command("suites")
def list_suites() -> None:
    t = Table(title="suites")
    for c in ("suite", "benchmarks", "retrievers", "description"):
        t.add_column(c)
    for n, s in sorted(suites().items()):
        t.add_row(n, ", ".join(s["benchmarks"]), ", ".join(s.get("retrievers", [])), s.get("description", ""))
    out.print(t)


@list_app.command("trainers")
def list_trainers() -> None:
    """Trainable artifacts (`beyondsim train NAME`)."""
    t = Table("name", "description", "parameters")
    for n in trainer_names():
        try:
            tr = get_trainer(n)
        except RegistryError as e:
            t.add_row(n, Text(str(e), style="red"), "")
            continue
        fields = ", ".join(f"{f.name}={f.default!r}" for f in dataclasses.fields(tr.Params))
        t.add_row(n, getattr(tr, "description", ""), fields)
    out.print(t)
