"""``tune`` and ``sweep``: score grids of retriever parameters (the best on a validation split, or
every point for the sensitivity plots)."""

from __future__ import annotations

import itertools
import os
from pathlib import Path
from typing import Optional

import typer
from rich.table import Table

from ..data.manifest import write_json_atomic
from ..measures import format_value
from ..core.registry import parse_key_values
from ..run.runner import DEFAULT_K, Settings
from ..store.results import open_store as store_at
from .console import check_depth, console, fail, home_dir, make_runner, out, progress_for
from .options import DataDirOpt, DeviceOpt, HomeOpt, RayOpt, SeedOpt


def tune(
    retriever: str = typer.Argument(..., help="Retriever id (e.g. nnn-fix, mmr)."),
    benchmark: str = typer.Option(..., "--benchmark", "-b", help="Benchmark id; its :dev split is used."),
    grid: list[str] = typer.Option(None, "--grid", "-g", help="KEY=V1,V2,... (repeatable): values to try."),
    param: list[str] = typer.Option(None, "--param", "-p", help="KEY=VALUE held fixed (repeatable)."),
    measure: str = typer.Option("Comp@5", "--measure", "-m", help="Measure to optimise on the validation split."),
    split: str = typer.Option("dev", "--split", help="Validation split name."),
    seed: SeedOpt = 0,
    out_file: Optional[Path] = typer.Option(None, "--out", "-o", help="Write the best setting as a --config TOML table."),
    label: Optional[str] = typer.Option(None, "--label", help="Name of the tuned variant in the TOML (default: the retriever id)."),
    data_dir: DataDirOpt = None,
    device: DeviceOpt = None,
    home: HomeOpt = None,
    ray: RayOpt = None,
) -> None:
    """Grid-search retriever parameters on the validation split (never the test split) and write
    the best setting as TOML for `beyondsim run --config`. Grid points are not stored as results."""
    from ..run.tuning import grid_search, parse_grid, tuning_split

    try:
        g = parse_grid(list(grid or []))
        fixed = parse_key_values(param, strip_values=True)
        bname = tuning_split(benchmark, split)
    except ValueError as e:  # a grid or split the tuner cannot take
        fail(str(e))
    settings = Settings(home=home_dir(home), data_dir=data_dir, device=device, bootstrap=0)
    t = Table(title=f"{retriever} on {bname}: {measure} over {len(list(itertools.product(*g.values())))} grid points",
              title_justify="left")
    for c in (*g, measure, "search s"):
        t.add_column(c, justify="right")
    with store_at(settings.home) as store, progress_for(console) as progress:
        runner = make_runner(settings, store, progress, lambda m: None, ray)
        if ray is not None:
            runner.prefetch_grid(retriever, bname, g, fixed, seed)  # every grid point at once
        result = grid_search(runner, retriever, bname, g, measure, fixed=fixed, seed=seed,
                             on_point=lambda p: t.add_row(*[str(v) for v in p.params.values()],
                                                          format_value(measure, p.value), f"{p.search_s:.1f}"))
    out.print(t)
    best = ", ".join(f"{k}={v}" for k, v in result.best.params.items())
    out.print(f"best on {result.benchmark}: {best} ({measure} = {format_value(measure, result.best.value)})", highlight=False)
    log_dir = settings.home / "tuning"
    log_dir.mkdir(parents=True, exist_ok=True)
    log_path = log_dir / f"{retriever}__{result.benchmark.replace('/', '_').replace(':', '_')}.json"
    write_json_atomic(log_path, result.to_dict())
    if out_file is not None:
        tmp = Path(str(out_file) + ".tmp")
        tmp.write_text(result.to_toml(label), encoding="utf-8")
        os.replace(tmp, out_file)
        out.print(f"best setting written to {out_file} (use: beyondsim run {label or retriever} --config {out_file})",
                  highlight=False)
    console.print(f"every grid point: {log_path}", highlight=False)


def sweep(
    retriever: str = typer.Argument(..., help="Retriever id (e.g. coder-seq, coder-union)."),
    benchmark: list[str] = typer.Option(..., "--benchmark", "-b", help="Benchmark id (repeatable); any split."),
    grid: list[str] = typer.Option(None, "--grid", "-g", help="KEY=V1,V2,... or KEY=START:STOP:STEP (repeatable)."),
    param: list[str] = typer.Option(None, "--param", "-p", help="KEY=VALUE held fixed (repeatable)."),
    show: list[str] = typer.Option(None, "--show", "-m", help="Measures to print (default: R@10 and FVR@10)."),
    seed: SeedOpt = 0,
    k: int = typer.Option(DEFAULT_K, "--k", help="Ranking depth evaluated."),
    out_file: Optional[Path] = typer.Option(None, "--out", "-o", help="Also write the sweep as JSON here."),
    data_dir: DataDirOpt = None,
    device: DeviceOpt = None,
    home: HomeOpt = None,
    ray: RayOpt = None,
) -> None:
    """Score a grid of parameters (CoDeR's appendix F sensitivity heatmaps: alpha × tau, alpha ×
    percentile) and keep every point's measures in the results store's sweep table for the reports.
    Sweep points are sensitivity data, not leaderboard results."""
    from ..run.tuning import parse_grid, sweep as run_sweep

    k = check_depth(k)
    try:
        g = parse_grid(list(grid or []))
        fixed = parse_key_values(param, strip_values=True)
    except ValueError as e:
        fail(str(e))
    shown = list(show or ["R@10", "FVR@10"])
    settings = Settings(home=home_dir(home), data_dir=data_dir, device=device, bootstrap=0, k=k)
    n_points = len(list(itertools.product(*g.values())))
    with store_at(settings.home) as store, progress_for(console) as progress:
        runner = make_runner(settings, store, progress, lambda m: None, ray)
        for bname in benchmark:
            if ray is not None:
                runner.prefetch_grid(retriever, bname, g, fixed, seed)  # every grid point at once
            t = Table(title=f"{retriever} on {bname}: {n_points} grid points", title_justify="left")
            for c in (*g, *shown, "search s"):
                t.add_column(c, justify="right")
            try:
                data = run_sweep(runner, retriever, bname, g, fixed=fixed, seed=seed,
                                 on_point=lambda p: t.add_row(*[str(v) for v in p.params.values()],
                                                              *[format_value(m, p.measures.get(m)) for m in shown],
                                                              f"{p.search_s:.1f}"))
            finally:
                runner.close()
            key = store.save_sweep(data)
            out.print(t)
            console.print(f"sweep stored in {store.path} (sweep {key})", highlight=False, soft_wrap=True)
            if out_file is not None:
                target = out_file if len(benchmark) == 1 else out_file.with_name(
                    f"{out_file.stem}__{data['benchmark'].replace('/', '_').replace(':', '_')}{out_file.suffix}")
                write_json_atomic(target, data)
