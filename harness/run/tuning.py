"""Hyperparameter selection on a validation split (``beyondsim tune``).

A grid over retriever parameters is evaluated on ``<benchmark>:dev`` — never on the test split —
and the combination with the best value of one measure wins (ties: the earlier grid point,
i.e. the order the values were given in). The result is data: a JSON log of every grid point
and a TOML table ``[retrievers.<name>]`` that ``beyondsim run --config`` reads, so the tuned
setting is then scored on the test split like any other.

Tuning runs are not written to the results store: they are selection, not results.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ..measures import parse_measure
from ..core.registry import RetrieverSpec, make_spec
from .runner import Runner
from ..core.types import Benchmark

TUNE_SPLITS = ("dev", "validation", "val")


def tuning_split(benchmark: str, split: str = "dev") -> str:
    """``toollens`` → ``toollens:dev``; refuses to tune on anything but a validation split."""
    if split not in TUNE_SPLITS:
        raise ValueError(f"tuning uses a validation split ({', '.join(TUNE_SPLITS)}), not {split!r}")
    base, sep, given = benchmark.partition(":")
    if sep and given != split:
        raise ValueError(f"tune on the validation split: give the benchmark without a split (or '{base}:{split}'), "
                         f"not {benchmark!r}")
    return f"{base}:{split}"


def expand_range(text: str) -> list[str]:
    """``"0:1:0.25"`` → ``["0", "0.25", "0.5", "0.75", "1"]``: START:STOP:STEP, both ends included,
    values rounded to the step's decimals (so 0.1 steps give 0.3, not 0.30000000000000004)."""
    parts = text.split(":")
    if len(parts) != 3:
        raise ValueError(f"bad range {text!r}; use START:STOP:STEP")
    try:
        start, stop, step = (float(x) for x in parts)
    except ValueError:
        raise ValueError(f"bad range {text!r}; START, STOP and STEP must be numbers") from None
    if step <= 0 or stop < start:
        raise ValueError(f"bad range {text!r}; STEP must be > 0 and STOP ≥ START")
    n = int(math.floor((stop - start) / step + 1e-9)) + 1
    if n > 10_000:
        raise ValueError(f"range {text!r} has {n} values; at most 10,000")
    decimals = max((len(x.split(".")[1]) if "." in x else 0) for x in parts)
    vals = [round(start + i * step, decimals) for i in range(n)]
    return [str(int(v)) if decimals == 0 else repr(v) for v in vals]


def parse_grid(items: Sequence[str]) -> dict[str, list[str]]:
    """``["l1=0.01,0.1", "l2=0.1"]`` → ``{"l1": ["0.01", "0.1"], "l2": ["0.1"]}``; a value
    ``START:STOP:STEP`` expands to the inclusive range (``alpha=0:1:0.1`` → 11 values). Values are
    coerced to the parameter's type by the registry."""
    grid: dict[str, list[str]] = {}
    for item in items:
        key, eq, values = item.partition("=")
        key = key.strip()
        vals = []
        for v in values.split(","):
            v = v.strip()
            if v.count(":") == 2:
                vals += expand_range(v)
            elif v:
                vals.append(v)
        if not eq or not key or not vals:
            raise ValueError(f"bad --grid {item!r}; use KEY=V1,V2,...")
        if key in grid:
            raise ValueError(f"--grid names {key!r} twice")
        grid[key] = vals
    if not grid:
        raise ValueError("give at least one --grid KEY=V1,V2,...")
    return grid


@dataclass
class GridPoint:
    params: dict[str, Any]
    value: float
    measures: dict[str, float] = field(default_factory=dict)
    search_s: float = 0.0


@dataclass
class TuneResult:
    retriever: str
    benchmark: str
    benchmark_version: str
    measure: str
    points: list[GridPoint]
    best: GridPoint
    fixed: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "retriever": self.retriever, "benchmark": self.benchmark, "benchmark_version": self.benchmark_version,
            "measure": self.measure, "fixed": self.fixed, "best": self.best.__dict__,
            "points": [p.__dict__ for p in self.points],
        }

    def to_toml(self, label: str | None = None) -> str:
        """A ``--config`` table with the fixed and the tuned parameters."""
        name = label or self.retriever
        lines = [f"# tuned on {self.benchmark} (version {self.benchmark_version}) by {self.measure} = "
                 f"{self.best.value:.4f}", f"[retrievers.{_toml_key(name)}]"]
        if label and label != self.retriever:
            lines.append(f"retriever = {_toml_value(self.retriever)}")
        for k, v in {**self.fixed, **self.best.params}.items():
            lines.append(f"{_toml_key(k)} = {_toml_value(v)}")
        return "\n".join(lines) + "\n"


def _toml_key(k: str) -> str:
    return k if k.replace("-", "").replace("_", "").isalnum() else json.dumps(k)


def _toml_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)) and not (isinstance(v, float) and not math.isfinite(v)):
        return repr(v)
    return json.dumps(str(v))


def _grid_specs(runner: Runner, retriever: str, benchmark: str, grid: Mapping[str, Sequence[Any]],
                fixed: Mapping[str, Any]) -> tuple[Benchmark, list[RetrieverSpec]]:
    """The benchmark and one spec per combination of ``grid`` (plus ``fixed``), in grid order."""
    overlap = set(fixed) & set(grid)
    if overlap:
        raise ValueError(f"parameters both fixed and in the grid: {', '.join(sorted(overlap))}")
    bench, _ = runner.load_benchmark(benchmark)
    keys = list(grid)
    return bench, [make_spec(retriever, {**fixed, **dict(zip(keys, combo))})
                   for combo in itertools.product(*grid.values())]


def _score_grid(runner: Runner, bench: Benchmark, specs: Sequence[RetrieverSpec], keys: Sequence[str], seed: int,
                value: Callable[[Any], float], on_point: Callable[[GridPoint], None] | None) -> list[GridPoint]:
    """Score every spec on ``bench`` (no per-result analysis: grid points are not stored as
    results); ``value(record)`` is the point's selection value."""
    points: list[GridPoint] = []
    for spec in specs:
        rec = runner.run_one(spec, bench, seed, analyse=False)
        point = GridPoint({k: spec.params[k] for k in keys}, value(rec),
                          {k: v.mean for k, v in rec.measures.items() if v.mean is not None},
                          rec.phases.get("search", {}).get("wall_s", 0.0))
        points.append(point)
        if on_point:
            on_point(point)
    return points


def sweep(runner: Runner, retriever: str, benchmark: str, grid: Mapping[str, Sequence[Any]], *,
          fixed: Mapping[str, Any] | None = None, seed: int = 0,
          on_point: Callable[[GridPoint], None] | None = None) -> dict[str, Any]:
    """Every combination of ``grid`` scored on ``benchmark`` (any split: this is sensitivity
    analysis, CoDeR's appendix F heatmaps, not selection) with every measure the benchmark computes.
    Returns the data the results store keeps (:meth:`Store.save_sweep`); nothing enters the
    results table."""
    fixed = dict(fixed or {})
    bench, specs = _grid_specs(runner, retriever, benchmark, grid, fixed)
    keys = list(grid)
    points = _score_grid(runner, bench, specs, keys, seed, lambda rec: float("nan"), on_point)
    return {"retriever": retriever, "benchmark": bench.name, "benchmark_version": bench.version, "seed": seed,
            "k": runner.s.k, "task": bench.task, "fixed": {k: specs[0].params[k] for k in fixed},
            "axes": {k: list(dict.fromkeys(spec.params[k] for spec in specs)) for k in keys},
            "spec": dict(specs[0].params),
            "points": [{"params": p.params, "measures": p.measures, "search_s": p.search_s} for p in points]}


def grid_search(runner: Runner, retriever: str, benchmark: str, grid: Mapping[str, Sequence[Any]],
                measure: str, *, fixed: Mapping[str, Any] | None = None, seed: int = 0,
                on_point: Callable[[GridPoint], None] | None = None) -> TuneResult:
    """Evaluate every combination of ``grid`` (plus ``fixed``) on ``benchmark`` and pick the best
    by ``measure`` (its direction from the measure: lower is better for V@k)."""
    m = parse_measure(measure)
    fixed = dict(fixed or {})
    bench, specs = _grid_specs(runner, retriever, benchmark, grid, fixed)

    def value(rec: Any) -> float:
        if m.name not in rec.measures:
            rec_measures = ", ".join(rec.measures)
            raise ValueError(f"measure {m.name!r} was not computed on {bench.name} (computed: {rec_measures})")
        v = rec.measures[m.name].mean
        return float("nan") if v is None else float(v)

    points = _score_grid(runner, bench, specs, list(grid), seed, value, on_point)
    fixed = {k: specs[0].params[k] for k in fixed}  # as coerced to the parameter types
    sign = 1.0 if m.higher_is_better else -1.0
    scored = [p for p in points if p.value == p.value]
    if not scored:
        raise ValueError(f"no grid point produced a value of {m.name}")
    best = max(scored, key=lambda p: sign * p.value)  # max keeps the first of equal values
    return TuneResult(retriever, bench.name, bench.version, m.name, points, best, fixed)
