"""Inline SVG plots for the static site (docs/design/store.md#the-site): no JavaScript, no network,
no dependency beyond numpy.

Every builder returns one ``<svg>`` element as a string, ready to be placed in a page with Jinja's
``|safe``: all text it embeds (title, axis labels, legend entries, tick and cell labels) is
escaped here with :func:`html.escape`. The output is deterministic: a fixed colour-blind-safe
palette (Okabe–Ito) for series, a single-hue sequential scale (ColorBrewer Blues) for heatmaps and
fixed number formatting. ``None`` and non-finite values are skipped: a line breaks at a gap and a
heatmap cell without a value is drawn hatched with "–". Input with nothing to draw gives a small
SVG that says "no data".

Main elements carry ``data-*`` attributes with the exact values they show (``repr`` of the float),
so tests and scripts can read a plot back without parsing geometry:

* root ``<svg data-plot="line|histogram|heatmap|empty">``;
* ``<g class="plot-area">`` with the data domain (``data-x-min`` …) and its pixel box
  (``data-left``, ``data-right``, ``data-top``, ``data-bottom``);
* line chart: one ``<polyline data-series>`` per unbroken run of points, one
  ``<circle data-series data-x data-y>`` per point;
* histogram: ``<rect class="bar" data-group data-bin data-count data-lo data-hi>`` for every bin
  of every group, ``<line class="vline" data-value>``;
* heatmap: ``<rect class="cell" data-i data-j data-value>`` (``data-value=""`` and
  ``data-missing="true"`` without a value; ``data-best="true"`` on the best cell),
  ``<g class="colorbar" data-min data-max>``.
"""

from __future__ import annotations

import hashlib
import html
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .text import finite

__all__ = ["PALETTE", "heatmap_svg", "histogram_svg", "line_chart_svg", "survival_curve"]

# Okabe & Ito (2008), most distinct first; yellow last (low contrast on white).
PALETTE = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")
# After the palette is used up, the next series repeat it with another dash pattern.
_DASHES = ("", "6 3", "2 2", "8 3 2 3")
# ColorBrewer "Blues" without its near-white first step: light = worse, dark = better.
_SEQUENTIAL = ("#deebf7", "#c6dbef", "#9ecae1", "#6baed6", "#4292c6", "#2171b5", "#08519c", "#08306b")

DASH = "–"
_FONT = 12
_TITLE_FONT = 14
_CHAR_W = 0.6  # approximate glyph width per font-size unit, for layout only
_AXIS = "#333333"
_GRID = "#e3e3e3"
_TEXT = "#222222"
_MISSING = "#eeeeee"


# --------------------------------------------------------------------------------------------
# small helpers


def _esc(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _y_axis_label(label: str, top: float, bottom: float) -> str:
    """The y-axis title, rotated, centred on the plot's height at the left edge."""
    cy = (top + bottom) / 2
    return (f'<text class="axis-label" x="14" y="{_px(cy)}" text-anchor="middle" '
            f'transform="rotate(-90 14 {_px(cy)})">{_esc(label)}</text>')


def _px(x: float) -> str:
    """A pixel coordinate: two decimals at most, no trailing zeros, never ``-0``."""
    s = f"{x:.2f}".rstrip("0").rstrip(".")
    return "0" if s in ("-0", "") else s


def _num(x: float) -> str:
    """An exact value for a data-* attribute."""
    return repr(float(x))


def _text_w(text: str, size: float = _FONT) -> float:
    return len(text) * size * _CHAR_W


def _color(index: int) -> tuple[str, str]:
    return PALETTE[index % len(PALETTE)], _DASHES[(index // len(PALETTE)) % len(_DASHES)]


def _uid(kind: str, payload: Any) -> str:
    """A deterministic element id (the same plot gives the same id; different plots differ)."""
    return f"bs-{kind}-" + hashlib.sha1(repr(payload).encode()).hexdigest()[:10]


def _nice_step(span: float, target: int) -> float:
    raw = span / max(target, 1)
    mag = 10.0 ** math.floor(math.log10(raw))
    for m in (1.0, 2.0, 2.5, 5.0, 10.0):
        if raw <= m * mag * (1 + 1e-9):
            return m * mag
    return 10.0 * mag


def _decimals(step: float) -> int:
    d = 0
    while d < 12 and abs(step * 10**d - round(step * 10**d)) > 1e-6 * max(1.0, step * 10**d):
        d += 1
    return d


def _ticks(lo: float, hi: float, target: int = 6, integer: bool = False) -> tuple[list[float], int]:
    """Round tick values inside ``[lo, hi]`` and the number of decimals to print them with."""
    if not hi > lo:
        return [lo], _decimals(abs(lo)) if lo else 0
    step = _nice_step(hi - lo, target)
    if integer:
        step = max(1.0, round(step))
    first = math.ceil(lo / step - 1e-9)
    last = math.floor(hi / step + 1e-9)
    ticks = [round(i * step, 12) for i in range(first, last + 1)]
    return ticks, _decimals(step)


def _nice_domain(lo: float, hi: float, target: int = 6) -> tuple[float, float]:
    """``[lo, hi]`` widened to round tick values (a degenerate range gets a unit around it)."""
    if not hi > lo:
        pad = abs(lo) * 0.1 or 1.0
        lo, hi = lo - pad, hi + pad
    step = _nice_step(hi - lo, target)
    return math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step


def _fmt_tick(v: float, decimals: int) -> str:
    s = f"{v:.{decimals}f}"
    return s[1:] if s.startswith("-") and float(s) == 0 else s


def _fmt_label(v: float | str) -> str:
    """A heatmap axis label: strings as they are, numbers compactly (``0.30000000000000004`` → 0.3)."""
    if isinstance(v, str):
        return v
    if isinstance(v, (int, np.integer)) and not isinstance(v, bool):
        return str(int(v))
    try:
        f = float(v)
    except (TypeError, ValueError):
        return str(v)
    if not math.isfinite(f):
        return DASH
    return f"{f:g}"


def _open(kind: str, width: float, height: float, title: str, extra: str = "") -> list[str]:
    t = _esc(title)
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {_px(width)} {_px(height)}" '
        f'width="{_px(width)}" height="{_px(height)}" role="img" aria-label="{t}" '
        f'class="plot plot-{kind}" data-plot="{kind}" font-size="{_FONT}"{extra}>',
        f"<title>{t}</title>",
    ]


def _title(parts: list[str], title: str, width: float) -> None:
    parts.append(
        f'<text class="title" x="{_px(width / 2)}" y="20" text-anchor="middle" '
        f'font-size="{_TITLE_FONT}" font-weight="600" fill="{_TEXT}">{_esc(title)}</text>'
    )


def _no_data(title: str, width: int) -> str:
    w, h = max(160, min(int(width), 320)), 60
    parts = _open("empty", w, h, f"{title}: no data" if title else "no data", ' data-empty="true"')
    if title:
        parts.append(
            f'<text class="title" x="{_px(w / 2)}" y="22" text-anchor="middle" font-weight="600" '
            f'fill="{_TEXT}">{_esc(title)}</text>'
        )
    parts.append(
        f'<text class="no-data" x="{_px(w / 2)}" y="{42 if title else 34}" text-anchor="middle" '
        f'fill="#777777">no data</text>'
    )
    parts.append("</svg>")
    return "\n".join(parts)


class _Scale:
    """Linear map from a data interval to a pixel interval (pixel order may be reversed)."""

    def __init__(self, d0: float, d1: float, p0: float, p1: float):
        self.d0, self.d1, self.p0, self.p1 = d0, d1, p0, p1

    def __call__(self, v: float) -> float:
        if self.d1 == self.d0:
            return (self.p0 + self.p1) / 2
        return self.p0 + (v - self.d0) * (self.p1 - self.p0) / (self.d1 - self.d0)


def _plot_area(parts: list[str], x: _Scale, y: _Scale) -> None:
    parts.append(
        f'<g class="plot-area" data-x-min="{_num(x.d0)}" data-x-max="{_num(x.d1)}" '
        f'data-y-min="{_num(y.d0)}" data-y-max="{_num(y.d1)}" data-left="{_px(x.p0)}" '
        f'data-right="{_px(x.p1)}" data-top="{_px(y.p1)}" data-bottom="{_px(y.p0)}">'
    )


def _axes(
    parts: list[str],
    x: _Scale,
    y: _Scale,
    x_label: str,
    y_label: str,
    *,
    y_integer: bool = False,
    x_target: int = 6,
    x_log: bool = False,
) -> None:
    """Grid, axes, ticks and labels; ``x_log``: the x scale maps log10 of the values, ticks at the
    powers of ten (labelled with the values, ``data-value`` the value)."""
    left, right, bottom, top = x.p0, x.p1, y.p0, y.p1
    yt, yd = _ticks(y.d0, y.d1, 5, integer=y_integer)
    xt, xd = _ticks(x.d0, x.d1, x_target)
    if x_log:
        xt, xd = [float(e) for e in range(math.ceil(x.d0), math.floor(x.d1) + 1)], 0
    parts.append('<g class="grid">')
    for v in yt:
        py = _px(y(v))
        parts.append(f'<line x1="{_px(left)}" y1="{py}" x2="{_px(right)}" y2="{py}" stroke="{_GRID}"/>')
    parts.append("</g>")
    parts.append(f'<g class="axis axis-y" fill="{_TEXT}">')
    for v in yt:
        py = y(v)
        parts.append(f'<line x1="{_px(left - 4)}" y1="{_px(py)}" x2="{_px(left)}" y2="{_px(py)}" stroke="{_AXIS}"/>')
        parts.append(
            f'<text x="{_px(left - 7)}" y="{_px(py + 4)}" text-anchor="end" '
            f'data-value="{_num(v)}">{_esc(_fmt_tick(v, yd))}</text>'
        )
    parts.append(f'<line x1="{_px(left)}" y1="{_px(top)}" x2="{_px(left)}" y2="{_px(bottom)}" stroke="{_AXIS}"/>')
    if y_label:
        parts.append(_y_axis_label(y_label, top, bottom))
    parts.append("</g>")
    parts.append(f'<g class="axis axis-x" fill="{_TEXT}">')
    for v in xt:
        px = x(v)
        value = 10 ** v if x_log else v
        label = f"{value:g}" if x_log else _fmt_tick(v, xd)
        parts.append(f'<line x1="{_px(px)}" y1="{_px(bottom)}" x2="{_px(px)}" y2="{_px(bottom + 4)}" stroke="{_AXIS}"/>')
        parts.append(
            f'<text x="{_px(px)}" y="{_px(bottom + 17)}" text-anchor="middle" '
            f'data-value="{_num(value)}">{_esc(label)}</text>'
        )
    parts.append(f'<line x1="{_px(left)}" y1="{_px(bottom)}" x2="{_px(right)}" y2="{_px(bottom)}" stroke="{_AXIS}"/>')
    if x_label:
        parts.append(
            f'<text class="axis-label" x="{_px((left + right) / 2)}" y="{_px(bottom + 36)}" '
            f'text-anchor="middle">{_esc(x_label)}</text>'
        )
    parts.append("</g>")


def _y_margin(lo: float, hi: float, integer: bool = False) -> float:
    ticks, d = _ticks(lo, hi, 5, integer=integer)
    longest = max((len(_fmt_tick(v, d)) for v in ticks), default=1)
    return 30 + _text_w("0" * longest) + 10


def _legend_layout(labels: list[str], left: float, right: float) -> tuple[list[tuple[float, int]], int]:
    """(x offset, row) per entry, flowing left to right, and the number of rows."""
    pos: list[tuple[float, int]] = []
    x, row = left, 0
    for text in labels:
        w = 26 + _text_w(text) + 16
        if x > left and x + w > right:
            x, row = left, row + 1
        pos.append((x, row))
        x += w
    return pos, (row + 1 if labels else 0)


_LEGEND_ROW = 18


def _legend_frame(legend_text: list[str], left: float, width: int, height: int
                  ) -> tuple[float, float, float, float, list[tuple[float, int]]]:
    """The frame of a plot whose legend sits below it: the plot box's right, top and bottom, the
    SVG's height (``height``, or taller when the legend needs more room) and each legend entry's
    (x offset, row) from :func:`_legend_layout`."""
    right = width - 16
    legend_pos, legend_rows = _legend_layout(legend_text, left, right)
    legend_h = legend_rows * _LEGEND_ROW + (6 if legend_rows else 0)
    top = 34
    total_h = max(float(height), top + 120 + 46 + legend_h)
    bottom = total_h - 46 - legend_h
    return right, top, bottom, total_h, legend_pos


# --------------------------------------------------------------------------------------------
# survival curve


def survival_curve(first_violating_ranks: Sequence[float], k: int) -> list[float]:
    """S(r) for r = 0..k: the share of queries whose first violating rank is greater than r.

    ``first_violating_ranks`` holds FVR@k per query (``k + 1`` when the top k hold no violation),
    so S(0) = 1 and S(k) is the share of queries with no violation in the top k. ``None`` and NaN
    are skipped; an input with nothing left gives ``[]``.
    """
    if k < 0:
        raise ValueError(f"k must be >= 0, got {k}")
    ranks = np.array([float(r) for r in first_violating_ranks if r is not None], dtype=float)
    ranks = ranks[~np.isnan(ranks)]
    if ranks.size == 0:
        return []
    n = ranks.size
    return [float(np.count_nonzero(ranks > r)) / n for r in range(k + 1)]


# --------------------------------------------------------------------------------------------
# line chart


def line_chart_svg(
    series: Sequence[tuple[str, Sequence[float], Sequence[float]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    y_range: tuple[float, float] | None = (0.0, 1.0),
    width: int = 560,
    height: int = 340,
) -> str:
    """One polyline with point markers per ``(label, xs, ys)`` series, axes, ticks and a legend.

    Points whose x or y is ``None``/non-finite are skipped and the line breaks there. The x axis
    spans the data; the y axis spans ``y_range``, widened to round ticks around any value that
    falls outside it, or round ticks around the data when ``y_range`` is ``None``. The legend sits
    below the plot; the SVG grows taller when the legend needs more room than ``height`` leaves.
    """
    runs: list[tuple[str, list[list[tuple[float, float]]]]] = []
    for label, xs, ys in series:
        xs, ys = list(xs), list(ys)
        if len(xs) != len(ys):
            raise ValueError(f"series {label!r}: {len(xs)} x values but {len(ys)} y values")
        segs: list[list[tuple[float, float]]] = [[]]
        for xv, yv in zip(xs, ys):
            if finite(xv) and finite(yv):
                segs[-1].append((float(xv), float(yv)))
            elif segs[-1]:
                segs.append([])
        runs.append((str(label), [s for s in segs if s]))
    points = [p for _, segs in runs for s in segs for p in s]
    if not points:
        return _no_data(title, width)

    xs_all = [p[0] for p in points]
    ys_all = [p[1] for p in points]
    x0, x1 = min(xs_all), max(xs_all)
    if x0 == x1:
        x0, x1 = x0 - 1, x1 + 1
    if y_range is None:
        y0, y1 = _nice_domain(min(ys_all), max(ys_all), 5)
    else:
        y0, y1 = float(y_range[0]), float(y_range[1])
        if not y1 > y0:
            raise ValueError(f"y_range must be increasing, got {y_range}")
        if min(ys_all) < y0 or max(ys_all) > y1:
            y0, y1 = _nice_domain(min(min(ys_all), y0), max(max(ys_all), y1), 5)

    legend_text = [label if segs else f"{label} (no data)" for label, segs in runs]
    left = _y_margin(y0, y1)
    right, top, bottom, total_h, legend_pos = _legend_frame(legend_text, left, width, height)

    xs_ = _Scale(x0, x1, left, right)
    ys_ = _Scale(y0, y1, bottom, top)
    parts = _open("line", width, total_h, title)
    _title(parts, title, width)
    _plot_area(parts, xs_, ys_)
    _axes(parts, xs_, ys_, x_label, y_label)
    r = 2.5 if len(points) <= 400 else 1.5
    for idx, (label, segs) in enumerate(runs):
        color, dash = _color(idx)
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        lab = _esc(label)
        parts.append(f'<g class="series" data-series="{lab}">')
        for seg in segs:
            pts = " ".join(f"{_px(xs_(a))},{_px(ys_(b))}" for a, b in seg)
            parts.append(
                f'<polyline data-series="{lab}" points="{pts}" fill="none" stroke="{color}" '
                f'stroke-width="2" stroke-linejoin="round"{dash_attr}/>'
            )
        for seg in segs:
            for a, b in seg:
                parts.append(
                    f'<circle data-series="{lab}" data-x="{_num(a)}" data-y="{_num(b)}" '
                    f'cx="{_px(xs_(a))}" cy="{_px(ys_(b))}" r="{r}" fill="{color}"/>'
                )
        parts.append("</g>")
    parts.append("</g>")

    parts.append(f'<g class="legend" fill="{_TEXT}">')
    ly0 = bottom + 46 + 6
    for idx, ((lx, row), text) in enumerate(zip(legend_pos, legend_text)):
        color, dash = _color(idx)
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        cy = ly0 + row * _LEGEND_ROW + _LEGEND_ROW / 2
        parts.append(f'<g class="legend-item" data-series="{_esc(runs[idx][0])}">')
        parts.append(
            f'<line x1="{_px(lx)}" y1="{_px(cy)}" x2="{_px(lx + 20)}" y2="{_px(cy)}" '
            f'stroke="{color}" stroke-width="2"{dash_attr}/>'
        )
        parts.append(f'<circle cx="{_px(lx + 10)}" cy="{_px(cy)}" r="2.5" fill="{color}"/>')
        parts.append(f'<text x="{_px(lx + 26)}" y="{_px(cy + 4)}">{_esc(text)}</text>')
        parts.append("</g>")
    parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------
# histogram


def histogram_svg(
    groups: Sequence[tuple[str, Sequence[float]]],
    *,
    title: str,
    x_label: str,
    bins: int = 30,
    width: int = 560,
    height: int = 340,
    vline: float | None = 0.0,
) -> str:
    """Overlaid semi-transparent histograms of ``(label, values)`` groups on shared bin edges.

    The edges are ``numpy.histogram_bin_edges`` over the finite values of all groups, so the
    counts are those of ``numpy.histogram`` on each group with those edges. The legend gives each
    group's mean and n (finite values). A dashed vertical line marks ``vline`` (none when it is
    ``None``); the x axis is widened to show it.
    """
    if bins < 1:
        raise ValueError(f"bins must be >= 1, got {bins}")
    clean: list[tuple[str, np.ndarray]] = []
    for label, values in groups:
        arr = np.array([float(v) for v in values if finite(v)], dtype=float)
        clean.append((str(label), arr))
    non_empty = [a for _, a in clean if a.size]
    if not non_empty:
        return _no_data(title, width)
    edges = np.histogram_bin_edges(np.concatenate(non_empty), bins=bins)
    counts = [np.histogram(a, bins=edges)[0] if a.size else np.zeros(len(edges) - 1, dtype=int) for _, a in clean]
    max_count = max(int(c.max()) for c in counts)

    x0, x1 = float(edges[0]), float(edges[-1])
    ref = float(vline) if finite(vline) else None
    if ref is not None:
        x0, x1 = min(x0, ref), max(x1, ref)
    y0, y1 = 0.0, float(max(max_count, 1))
    yt, _ = _ticks(y0, y1, 5, integer=True)
    if yt and yt[-1] < y1:
        y1 = yt[-1] + (yt[1] - yt[0] if len(yt) > 1 else 1.0)

    legend_text = []
    for label, a in clean:
        if a.size:
            legend_text.append(f"{label} (mean {float(a.mean()):.3f}, n={a.size})")
        else:
            legend_text.append(f"{label} (n=0)")
    left = _y_margin(y0, y1, integer=True)
    right, top, bottom, total_h, legend_pos = _legend_frame(legend_text, left, width, height)

    xs_ = _Scale(x0, x1, left, right)
    ys_ = _Scale(y0, y1, bottom, top)
    parts = _open("histogram", width, total_h, title, f' data-bins="{len(edges) - 1}"')
    _title(parts, title, width)
    _plot_area(parts, xs_, ys_)
    _axes(parts, xs_, ys_, x_label, "count", y_integer=True)
    for idx, ((label, a), c) in enumerate(zip(clean, counts)):
        color, _ = _color(idx)
        lab = _esc(label)
        mean = f' data-mean="{_num(a.mean())}"' if a.size else ""
        parts.append(f'<g class="group" data-group="{lab}" data-n="{a.size}"{mean}>')
        for b, cnt in enumerate(c):
            lo, hi = float(edges[b]), float(edges[b + 1])
            px0, px1 = xs_(lo), xs_(hi)
            py = ys_(float(cnt))
            parts.append(
                f'<rect class="bar" data-group="{lab}" data-bin="{b}" data-count="{int(cnt)}" '
                f'data-lo="{_num(lo)}" data-hi="{_num(hi)}" x="{_px(px0)}" y="{_px(py)}" '
                f'width="{_px(max(px1 - px0, 0.0))}" height="{_px(bottom - py)}" fill="{color}" '
                f'fill-opacity="0.4" stroke="{color}" stroke-opacity="0.8" stroke-width="0.75"/>'
            )
        parts.append("</g>")
    if ref is not None:
        vx = _px(xs_(ref))
        parts.append(
            f'<line class="vline" data-value="{_num(ref)}" x1="{vx}" y1="{_px(top)}" x2="{vx}" '
            f'y2="{_px(bottom)}" stroke="{_AXIS}" stroke-width="1.25" stroke-dasharray="5 4"/>'
        )
    parts.append("</g>")

    parts.append(f'<g class="legend" fill="{_TEXT}">')
    ly0 = bottom + 46 + 6
    for idx, ((lx, row), text) in enumerate(zip(legend_pos, legend_text)):
        color, _ = _color(idx)
        cy = ly0 + row * _LEGEND_ROW + _LEGEND_ROW / 2
        parts.append(f'<g class="legend-item" data-group="{_esc(clean[idx][0])}">')
        parts.append(
            f'<rect x="{_px(lx + 3)}" y="{_px(cy - 6)}" width="14" height="12" fill="{color}" '
            f'fill-opacity="0.4" stroke="{color}"/>'
        )
        parts.append(f'<text x="{_px(lx + 26)}" y="{_px(cy + 4)}">{_esc(text)}</text>')
        parts.append("</g>")
    parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts)


# --------------------------------------------------------------------------------------------
# heatmap


def _hex_rgb(color: str) -> tuple[int, int, int]:
    return int(color[1:3], 16), int(color[3:5], 16), int(color[5:7], 16)


def _ramp(t: float) -> str:
    """The sequential colour at ``t`` in [0, 1] (0 = light, 1 = dark)."""
    t = min(1.0, max(0.0, t)) * (len(_SEQUENTIAL) - 1)
    i = min(int(t), len(_SEQUENTIAL) - 2)
    f = t - i
    a, b = _hex_rgb(_SEQUENTIAL[i]), _hex_rgb(_SEQUENTIAL[i + 1])
    r, g, bl = (round(a[c] + (b[c] - a[c]) * f) for c in range(3))
    return f"#{r:02x}{g:02x}{bl:02x}"


def _luminance(color: str) -> float:
    def lin(c: int) -> float:
        s = c / 255
        return s / 12.92 if s <= 0.04045 else ((s + 0.055) / 1.055) ** 2.4

    r, g, b = _hex_rgb(color)
    return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)


def _text_on(fill: str) -> str:
    """Black or white, whichever contrasts more with ``fill`` (WCAG contrast ratio)."""
    lum = _luminance(fill)
    return "#000000" if (lum + 0.05) / 0.05 >= 1.05 / (lum + 0.05) else "#ffffff"


def heatmap_svg(
    x_values: Sequence[float | str],
    y_values: Sequence[float | str],
    z: Sequence[Sequence[float | None]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    higher_is_better: bool = True,
    value_format: str = "{:.3f}",
    width: int = 560,
    height: int = 420,
) -> str:
    """A grid of coloured cells, ``z[i][j]`` at (``y_values[i]``, ``x_values[j]``).

    Sequential single-hue scale over the finite values, darker = better (``higher_is_better``
    decides which end is better); each cell prints its value with ``value_format`` in black or
    white for contrast, cells without a value are hatched grey with "–". The best cell (first in
    row-major order on ties) is outlined. A colour bar at the right gives the min and max. When
    every ``y_values`` entry is a number, row 0 is at the bottom (an axis); otherwise at the top.
    """
    nx, ny = len(x_values), len(y_values)
    if nx == 0 or ny == 0:
        return _no_data(title, width)
    if len(z) != ny or any(len(row) != nx for row in z):
        raise ValueError(f"z must have {ny} rows of {nx} values")
    vals: list[list[float | None]] = [[float(v) if finite(v) else None for v in row] for row in z]
    known = [v for row in vals for v in row if v is not None]
    vmin = min(known) if known else 0.0
    vmax = max(known) if known else 0.0
    best: tuple[int, int] | None = None
    if known:
        target = vmax if higher_is_better else vmin
        best = next((i, j) for i in range(ny) for j in range(nx) if vals[i][j] == target)

    xl = [_fmt_label(v) for v in x_values]
    yl = [_fmt_label(v) for v in y_values]
    numeric_y = all(not isinstance(v, str) for v in y_values)

    top = 34
    left = 24 + max(_text_w(s) for s in yl) + 10
    bar_w = 14
    bar_labels = [value_format.format(v) for v in (vmin, vmax)] if known else []
    right = width - (bar_w + 22 + max((_text_w(s) for s in bar_labels), default=0) + 12)
    if right - left < 40 * nx:
        right = left + 40 * nx
    total_w = max(float(width), right + bar_w + 22 + max((_text_w(s) for s in bar_labels), default=0) + 12)
    cell_w = (right - left) / nx
    rotate = max(_text_w(s) for s in xl) > cell_w - 4
    if rotate:  # a rotated first label reaches left of its cell
        reach = max(_text_w(s) for s in xl) * 0.71 - cell_w / 2 + 8
        if reach > left:
            right += reach - left
            left = reach
            total_w = max(total_w, right + bar_w + 22 + max((_text_w(s) for s in bar_labels), default=0) + 12)
    x_tick_h = (max(_text_w(s) for s in xl) * 0.71 + 12) if rotate else 16
    bottom = float(height) - (x_tick_h + 28)
    if bottom - top < 18 * ny:
        bottom = top + 18 * ny
    total_h = bottom + x_tick_h + 28
    cell_h = (bottom - top) / ny

    def row_y(i: int) -> float:
        return bottom - (i + 1) * cell_h if numeric_y else top + i * cell_h

    hatch = _uid("hatch", (title, list(map(str, x_values)), list(map(str, y_values)), vals))
    extra = f' data-higher-is-better="{"true" if higher_is_better else "false"}"'
    parts = _open("heatmap", total_w, total_h, title, extra)
    parts.append(
        f'<defs><pattern id="{hatch}" width="6" height="6" patternUnits="userSpaceOnUse" '
        f'patternTransform="rotate(45)"><rect width="6" height="6" fill="{_MISSING}"/>'
        f'<line x1="0" y1="0" x2="0" y2="6" stroke="#bbbbbb" stroke-width="2"/></pattern></defs>'
    )
    _title(parts, title, total_w)
    parts.append(
        f'<g class="plot-area" data-left="{_px(left)}" data-right="{_px(right)}" '
        f'data-top="{_px(top)}" data-bottom="{_px(bottom)}">'
    )
    # one font size for every cell value, small enough to fit the widest
    texts = [[DASH if v is None else value_format.format(v) for v in row] for row in vals]
    longest = max(len(t) for row in texts for t in row)
    cell_font = min(float(_FONT), cell_h * 0.5, (cell_w - 4) / (longest * _CHAR_W))
    show_text = cell_font >= 7

    for i in range(ny):
        for j in range(nx):
            v = vals[i][j]
            x, y = left + j * cell_w, row_y(i)
            tip = _esc(f"{y_label} {yl[i]}, {x_label} {xl[j]}: {texts[i][j]}")
            if v is None:
                fill, attrs = f"url(#{hatch})", ' data-value="" data-missing="true"'
                ink = "#555555"
            else:
                span = vmax - vmin
                if span > 0:
                    t = (v - vmin) / span if higher_is_better else (vmax - v) / span
                else:
                    t = 0.5
                fill = _ramp(t)
                attrs = f' data-value="{_num(v)}"' + (' data-best="true"' if best == (i, j) else "")
                ink = _text_on(fill)
            parts.append(
                f'<rect class="cell" data-i="{i}" data-j="{j}"{attrs} x="{_px(x)}" y="{_px(y)}" '
                f'width="{_px(cell_w)}" height="{_px(cell_h)}" fill="{fill}" stroke="#ffffff" '
                f'stroke-width="1"><title>{tip}</title></rect>'
            )
            if show_text:
                parts.append(
                    f'<text class="cell-value" data-i="{i}" data-j="{j}" x="{_px(x + cell_w / 2)}" '
                    f'y="{_px(y + cell_h / 2 + cell_font * 0.35)}" text-anchor="middle" '
                    f'font-size="{_px(cell_font)}" fill="{ink}">{_esc(texts[i][j])}</text>'
                )
    if best is not None:
        bi, bj = best
        x, y = left + bj * cell_w, row_y(bi)
        parts.append(
            f'<rect class="best" x="{_px(x + 1.5)}" y="{_px(y + 1.5)}" width="{_px(cell_w - 3)}" '
            f'height="{_px(cell_h - 3)}" fill="none" stroke="#000000" stroke-width="3"/>'
        )
        parts.append(
            f'<rect class="best" x="{_px(x + 3.5)}" y="{_px(y + 3.5)}" width="{_px(max(cell_w - 7, 0))}" '
            f'height="{_px(max(cell_h - 7, 0))}" fill="none" stroke="#ffffff" stroke-width="1"/>'
        )
    parts.append("</g>")

    # axes: tick labels centred on the cells
    parts.append(f'<g class="axis axis-y" fill="{_TEXT}">')
    for i, s in enumerate(yl):
        cy = row_y(i) + cell_h / 2
        parts.append(f'<text x="{_px(left - 6)}" y="{_px(cy + 4)}" text-anchor="end" data-i="{i}">{_esc(s)}</text>')
    if y_label:
        parts.append(_y_axis_label(y_label, top, bottom))
    parts.append("</g>")
    parts.append(f'<g class="axis axis-x" fill="{_TEXT}">')
    for j, s in enumerate(xl):
        cx = left + (j + 0.5) * cell_w
        if rotate:
            ty = bottom + 12
            parts.append(
                f'<text x="{_px(cx)}" y="{_px(ty)}" text-anchor="end" data-j="{j}" '
                f'transform="rotate(-45 {_px(cx)} {_px(ty)})">{_esc(s)}</text>'
            )
        else:
            parts.append(f'<text x="{_px(cx)}" y="{_px(bottom + 16)}" text-anchor="middle" data-j="{j}">{_esc(s)}</text>')
    if x_label:
        parts.append(
            f'<text class="axis-label" x="{_px((left + right) / 2)}" y="{_px(bottom + x_tick_h + 20)}" '
            f'text-anchor="middle">{_esc(x_label)}</text>'
        )
    parts.append("</g>")

    # colour bar: max at the top, min at the bottom; the dark end is the better one
    if known:
        bx = right + 16
        grad = _uid("ramp", (hatch, higher_is_better))
        n = len(_SEQUENTIAL) - 1
        stops = "".join(
            f'<stop offset="{_px(k / n)}" stop-color="{_SEQUENTIAL[k if higher_is_better else n - k]}"/>'
            for k in range(n + 1)
        )
        parts.append(
            f'<g class="colorbar" data-min="{_num(vmin)}" data-max="{_num(vmax)}">'
            f'<defs><linearGradient id="{grad}" x1="0" y1="1" x2="0" y2="0">{stops}</linearGradient></defs>'
        )
        parts.append(
            f'<rect x="{_px(bx)}" y="{_px(top)}" width="{bar_w}" height="{_px(bottom - top)}" '
            f'fill="url(#{grad})" stroke="{_AXIS}" stroke-width="0.75"/>'
        )
        parts.append(
            f'<text x="{_px(bx + bar_w + 4)}" y="{_px(top + 9)}" fill="{_TEXT}" '
            f'data-value="{_num(vmax)}">{_esc(bar_labels[1])}</text>'
        )
        parts.append(
            f'<text x="{_px(bx + bar_w + 4)}" y="{_px(bottom)}" fill="{_TEXT}" '
            f'data-value="{_num(vmin)}">{_esc(bar_labels[0])}</text>'
        )
        parts.append("</g>")
    parts.append("</svg>")
    return "\n".join(parts)
