"""The trade-off scatter: one measure against another (a violation measure against topical quality),
each configuration a point that links to its row, the Pareto frontier drawn, the chance level
marked. Inline SVG, with the conventions of :mod:`reports.plots` (escaped text, ``data-*``
attributes with the exact values, deterministic output):

* root ``<svg data-plot="scatter">``;
* ``<a class="point" href="…"><circle data-label data-x data-y data-kind data-frontier/></a>`` per
  point (``data-kind``: ``ranked``, ``apart`` or ``chance``; ``data-frontier="true"`` on the
  frontier);
* ``<polyline class="frontier">`` through the frontier's points, in x order;
* ``<line class="chance-line" data-axis="x|y" data-value>`` at the chance row's value on each axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .plots import _TEXT, _axes, _esc, _num, _open, _plot_area, _px, _Scale, _title, _no_data, _y_margin
from .text import finite

_FRONTIER = "#D55E00"
_RANKED = "#0072B2"
_APART = "#999999"
_CHANCE = "#000000"


@dataclass(frozen=True)
class Point:
    label: str
    x: float | None
    y: float | None
    href: str = ""
    kind: str = "ranked"  # "ranked", "apart" (shown, not ranked) or "chance"


def pareto_front(points: Sequence[tuple[float, float]], x_higher: bool, y_higher: bool) -> list[int]:
    """Indices of the points no other point dominates (at least as good on both axes and better on
    one), in order of x from worst to best; of equal points, the first."""
    def better_eq(a: float, b: float, higher: bool) -> bool:
        return a >= b if higher else a <= b

    out = []
    for i, (xi, yi) in enumerate(points):
        dominated = False
        for j, (xj, yj) in enumerate(points):
            if j == i:
                continue
            if better_eq(xj, xi, x_higher) and better_eq(yj, yi, y_higher) and (
                    (xj, yj) != (xi, yi) or j < i):
                dominated = True
                break
        if not dominated:
            out.append(i)
    return sorted(out, key=lambda i: points[i][0] if x_higher else -points[i][0])


_LABEL = 10


def _label_text(p: Point) -> str:
    return f"{p.label} (chance)" if p.kind == "chance" else p.label


def _place_labels(pts: Sequence[Point], px: Sequence[float], py: Sequence[float], front: set[int],
                  box: tuple[float, float, float, float]) -> list[tuple[float, float, str] | None]:
    """Where each point's label goes (x, y, text-anchor), or None where every place beside the
    point would cover another label or point: the chance point and the frontier's first, then
    the others; a point without a label keeps its tooltip."""
    left, right, top, bottom = box
    taken: list[tuple[float, float, float, float]] = [(x - 5, y - 5, x + 5, y + 5) for x, y in zip(px, py)]
    out: list[tuple[float, float, str] | None] = [None] * len(pts)
    order = sorted(range(len(pts)), key=lambda i: (pts[i].kind != "chance", i not in front, i))
    for i in order:
        w, h = len(_label_text(pts[i])) * _LABEL * 0.6, _LABEL
        for dx, dy, anchor in ((7, 4, "start"), (-7, 4, "end"), (0, -8, "middle"), (0, 15, "middle")):
            x, y = px[i] + dx, py[i] + dy
            x0 = x if anchor == "start" else x - w if anchor == "end" else x - w / 2
            rect = (x0, y - h + 2, x0 + w, y + 2)
            if rect[0] < left - 30 or rect[2] > right or rect[1] < top - 10 or rect[3] > bottom + 10:
                continue
            if any(rect[0] < b[2] and b[0] < rect[2] and rect[1] < b[3] and b[1] < rect[3]
                   for j, b in enumerate(taken) if j != i):
                continue
            taken.append(rect)
            out[i] = (x, y, anchor)
            break
    return out


LOG_SPAN = 100.0  # an x range at least this many times wide (largest / smallest) gets a log scale


def scatter_svg(points: Sequence[Point], *, title: str, x_label: str, y_label: str, x_higher: bool,
                y_higher: bool, width: int = 680, height: int = 440, x_log: bool | None = False) -> str:
    """Each point with a finite x and y, its label beside it, linked to ``href``; the Pareto
    frontier of the points that are not the chance level; dashed lines at the chance point's x and
    y. Axes span [0, 1] widened to the data; with ``x_log`` (``None``: when every x is positive and
    they span :data:`LOG_SPAN` or more) the x axis is log10, from the power of ten below the
    smallest x to the one above the largest (``data-x-scale="log"`` on the root; ``data-x`` keeps
    the values)."""
    pts = [p for p in points if finite(p.x) and finite(p.y) and (not x_log or float(p.x) > 0)]  # type: ignore[arg-type]
    if not pts:
        return _no_data(title, width)
    raw_x = [float(p.x) for p in pts]  # type: ignore[arg-type]
    if x_log is None:
        x_log = min(raw_x) > 0 and max(raw_x) >= LOG_SPAN * min(raw_x)
    xs = [math.log10(x) for x in raw_x] if x_log else raw_x
    ys = [float(p.y) for p in pts]  # type: ignore[arg-type]
    if x_log:
        x0, x1 = math.floor(min(xs)), max(math.ceil(max(xs)), math.floor(min(xs)) + 1)
    else:
        x0, x1 = min(0.0, min(xs)), max(1.0, max(xs))
    y0, y1 = min(0.0, min(ys)), max(1.0, max(ys))
    left = _y_margin(y0, y1)
    right = width - 120  # room for the labels of the rightmost points
    top, bottom = 34, height - 46
    sx, sy = _Scale(x0, x1, left, right), _Scale(y0, y1, bottom, top)
    parts = _open("scatter", width, height, title, ' data-x-scale="log"' if x_log else "")
    _title(parts, title, width)
    _plot_area(parts, sx, sy)
    _axes(parts, sx, sy, x_label + (" (log scale)" if x_log else ""), y_label, x_log=bool(x_log))
    chance = next((p for p in pts if p.kind == "chance"), None)
    if chance is not None:
        ci = pts.index(chance)
        cx, cy = xs[ci], ys[ci]
        parts.append(f'<line class="chance-line" data-axis="x" data-value="{_num(raw_x[ci])}" x1="{_px(sx(cx))}" '
                     f'y1="{_px(top)}" x2="{_px(sx(cx))}" y2="{_px(bottom)}" stroke="{_CHANCE}" '
                     f'stroke-dasharray="2 3"/>')
        parts.append(f'<line class="chance-line" data-axis="y" data-value="{_num(cy)}" x1="{_px(left)}" '
                     f'y1="{_px(sy(cy))}" x2="{_px(right)}" y2="{_px(sy(cy))}" stroke="{_CHANCE}" '
                     f'stroke-dasharray="2 3"/>')
    real = [i for i, p in enumerate(pts) if p.kind != "chance"]
    front = {real[i] for i in pareto_front([(xs[j], ys[j]) for j in real], x_higher, y_higher)}
    ordered = sorted(front, key=lambda i: xs[i])
    if len(ordered) > 1:
        line = " ".join(f"{_px(sx(xs[i]))},{_px(sy(ys[i]))}" for i in ordered)
        parts.append(f'<polyline class="frontier" points="{line}" fill="none" stroke="{_FRONTIER}" '
                     f'stroke-width="1.5" stroke-dasharray="6 3"/>')
    labels = _place_labels(pts, [sx(x) for x in xs], [sy(y) for y in ys], front, (left, right + 110, top, bottom))
    for i, p in enumerate(pts):
        px, py = sx(xs[i]), sy(ys[i])
        color = _CHANCE if p.kind == "chance" else _APART if p.kind == "apart" else _RANKED
        lab = _esc(p.label)
        on = i in front
        circle = (f'<circle data-label="{lab}" data-x="{_num(raw_x[i])}" data-y="{_num(ys[i])}" data-kind="{_esc(p.kind)}"'
                  f' data-frontier="{"true" if on else "false"}" cx="{_px(px)}" cy="{_px(py)}" r="{5 if on else 4}"'
                  f' fill="{"none" if p.kind == "chance" else color}" stroke="{_FRONTIER if on else color}"'
                  f' stroke-width="{2 if on or p.kind == "chance" else 1}"><title>{lab}: {_esc(x_label)} '
                  f'{raw_x[i]:.3f}, {_esc(y_label)} {ys[i]:.3f}</title></circle>')
        text = ""
        if labels[i] is not None:
            tx, ty, anchor = labels[i]
            text = (f'<text x="{_px(tx)}" y="{_px(ty)}" text-anchor="{anchor}" fill="{_TEXT}" font-size="{_LABEL}">'
                    f'{_esc(_label_text(p))}</text>')
        if p.href:
            parts.append(f'<a class="point" href="{_esc(p.href)}">{circle}{text}</a>')
        else:
            parts.append(f'<g class="point">{circle}{text}</g>')
    parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts)
