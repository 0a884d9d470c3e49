"""Parameter sweeps (``beyondsim sweep``) as grids for the sensitivity charts: data only, no
SVG. A one-parameter sweep over numbers gives a line per measure; every pair of swept parameters
gives a grid per measure, each cell the mean over the points at that pair of values (and so over
the other swept parameters, when there are more than two)."""

from __future__ import annotations

import itertools
import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from .compare import measure_sort_key
from .text import finite

# Charted measures: these when a sweep has them, else its first two.
SWEEP_MEASURES = ("R@10", "FVR@10")


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


@dataclass
class SweepChart:
    """One measure of a sweep: over one numeric parameter (``line[j]`` at ``x[j]``, ``None`` where
    no point has it) or over two (``z[i][j]`` at ``y[i]``, ``x[j]``; with more than two swept
    parameters, each cell is the mean over the others, and ``averaged`` is set)."""

    measure: str
    x_name: str
    x: list[float | str]
    line: list[float | None] = field(default_factory=list)
    y_name: str = ""
    y: list[float | str] = field(default_factory=list)
    z: list[list[float | None]] = field(default_factory=list)
    averaged: bool = False

    @property
    def heatmap(self) -> bool:
        return bool(self.y_name)


@dataclass
class SweepGrid:
    """One stored sweep with at least one chart."""

    retriever: str
    benchmark_version: str
    seed: Any
    k: Any
    fixed: dict[str, Any]
    charts: list[SweepChart]


def _axis_value(v: Any) -> float | str:
    return v if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def _same(a: Any, b: Any) -> bool:
    return a == b or json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _sweep_measures(points: Sequence[Mapping[str, Any]]) -> list[str]:
    present = {m for p in points for m, v in (p.get("measures") or {}).items() if finite(v)}
    chosen = [m for m in SWEEP_MEASURES if m in present]
    return chosen or sorted(present, key=measure_sort_key)[:2]


def sweep_grids(sweeps: Sequence[Mapping[str, Any]]) -> list[SweepGrid]:
    """The grids of each sweep; sweeps without any chart are left out."""
    out = []
    for d in sweeps:
        axes = d.get("axes") or {}
        points = d.get("points") or []
        if not isinstance(axes, dict) or not axes or not points:
            continue
        names = list(axes)
        measures = _sweep_measures(points)
        charts = []
        if len(names) == 1:
            a = names[0]
            xs = [_axis_value(v) for v in axes[a]]
            if all(isinstance(x, (int, float)) for x in xs):
                for m in measures:
                    ys = [_mean([float(p["measures"][m]) for p in points if _same(p["params"].get(a), v)
                                 and finite(p["measures"].get(m))]) for v in axes[a]]
                    if any(y is not None for y in ys):
                        charts.append(SweepChart(m, a, xs, line=ys))
        for a, b in itertools.combinations(names, 2):
            for m in measures:
                z: list[list[float | None]] = []
                for yv in axes[b]:
                    row: list[float | None] = []
                    for xv in axes[a]:
                        vals = [float(p["measures"][m]) for p in points
                                if _same(p["params"].get(a), xv) and _same(p["params"].get(b), yv)
                                and finite((p.get("measures") or {}).get(m))]
                        row.append(_mean(vals))
                    z.append(row)
                if all(v is None for row in z for v in row):
                    continue
                charts.append(SweepChart(m, a, [_axis_value(v) for v in axes[a]], y_name=b,
                                         y=[_axis_value(v) for v in axes[b]], z=z, averaged=len(names) > 2))
        if charts:
            out.append(SweepGrid(str(d.get("retriever", "")), str(d.get("benchmark_version", "")),
                                 d.get("seed", 0), d.get("k", ""), dict(d.get("fixed") or {}), charts))
    return out
