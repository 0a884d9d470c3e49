"""reports/plots.py: the inline SVG builders, read back through their data-* attributes."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from reports.plots import PALETTE, heatmap_svg, histogram_svg, line_chart_svg, survival_curve

NS = "{http://www.w3.org/2000/svg}"
NASTY = '<script>alert(1)</script> & "quotes"'


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == NS + "svg"
    assert root.get("role") == "img"
    assert root.get("viewBox", "").startswith("0 0 ")
    assert root[0].tag == NS + "title"
    return root


def find(root: ET.Element, tag: str, **attrs: str) -> list[ET.Element]:
    return [e for e in root.iter(NS + tag) if all(e.get(k.replace("_", "-")) == v for k, v in attrs.items())]


def plot_area(root: ET.Element) -> ET.Element:
    (area,) = [g for g in root.iter(NS + "g") if g.get("class") == "plot-area"]
    return area


# --------------------------------------------------------------------------------------------
# survival curve


def test_survival_curve_hand_computed():
    # ranks 1 and 3 violate at those ranks; 11 = k + 1: no violation in the top 10
    s = survival_curve([1, 3, 11, 11], 10)
    assert s == [1.0, 0.75, 0.75, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5]
    assert len(s) == 11


def test_survival_curve_skips_missing_and_edge_cases():
    assert survival_curve([2, None, math.nan, 2, 4], 3) == [1.0, 1.0, 1 / 3, 1 / 3]
    assert survival_curve([], 10) == []
    assert survival_curve([None, math.nan], 5) == []
    assert survival_curve([1, 1], 0) == [1.0]
    assert survival_curve([1, 1], 2) == [1.0, 0.0, 0.0]
    with pytest.raises(ValueError):
        survival_curve([1], -1)


# --------------------------------------------------------------------------------------------
# line chart


def test_line_chart_points_map_linearly_and_lines_break_at_gaps():
    surv = survival_curve([1, 3, 11, 11], 10)
    svg = line_chart_svg(
        [("bm25", list(range(11)), surv), ("dense", [0, 1, 2, 3, 4], [1.0, 0.9, None, 0.6, math.inf])],
        title="Violation survival",
        x_label="rank r",
        y_label="S(r)",
    )
    root = parse(svg)
    assert root.get("data-plot") == "line"
    area = plot_area(root)
    assert float(area.get("data-y-min")) == 0.0 and float(area.get("data-y-max")) == 1.0
    top, bottom = float(area.get("data-top")), float(area.get("data-bottom"))
    left, right = float(area.get("data-left")), float(area.get("data-right"))

    pts = find(root, "circle", data_series="bm25")
    assert [float(c.get("data-y")) for c in pts] == surv
    assert [float(c.get("data-x")) for c in pts] == list(range(11))
    by_x = {float(c.get("data-x")): c for c in pts}
    # y: value 1.0 at the top, 0.5 halfway down; x: 0 at the left, 10 at the right
    assert float(by_x[0].get("cy")) == pytest.approx(top, abs=0.01)
    assert float(by_x[3].get("cy")) == pytest.approx((top + bottom) / 2, abs=0.01)
    assert float(by_x[1].get("cy")) == pytest.approx(bottom - 0.75 * (bottom - top), abs=0.01)
    assert float(by_x[0].get("cx")) == pytest.approx(left, abs=0.01)
    assert float(by_x[10].get("cx")) == pytest.approx(right, abs=0.01)

    assert len(find(root, "polyline", data_series="bm25")) == 1
    dense_lines = find(root, "polyline", data_series="dense")
    assert [len(p.get("points").split()) for p in dense_lines] == [2, 1]  # None and inf skipped
    assert len(find(root, "circle", data_series="dense")) == 3
    strokes = {p.get("data-series"): p.get("stroke") for p in root.iter(NS + "polyline")}
    assert strokes == {"bm25": PALETTE[0], "dense": PALETTE[1]}
    legend = [t.text for g in root.iter(NS + "g") if g.get("class") == "legend" for t in g.iter(NS + "text")]
    assert legend == ["bm25", "dense"]


def test_line_chart_fit_range_and_deterministic():
    args = ([("a", [0, 1, 2], [-3.0, 7.5, 2.0])],)
    kw = dict(title="t", x_label="x", y_label="y", y_range=None)
    svg = line_chart_svg(*args, **kw)
    assert svg == line_chart_svg(*args, **kw)
    area = plot_area(parse(svg))
    y0, y1 = float(area.get("data-y-min")), float(area.get("data-y-max"))
    assert y0 <= -3.0 and y1 >= 7.5 and y1 - y0 <= 15
    # a fixed range is widened to show values outside it
    area = plot_area(parse(line_chart_svg(*args, title="t", x_label="x", y_label="y")))
    assert float(area.get("data-y-min")) <= -3.0 and float(area.get("data-y-max")) >= 7.5


def test_line_chart_empty_and_mismatched():
    for series in ([], [("a", [], [])], [("a", [1, 2], [None, math.nan])]):
        root = parse(line_chart_svg(series, title="Survival", x_label="x", y_label="y"))
        assert root.get("data-plot") == "empty"
        assert "no data" in ET.tostring(root, encoding="unicode")
    with pytest.raises(ValueError):
        line_chart_svg([("a", [1, 2], [1])], title="t", x_label="x", y_label="y")


# --------------------------------------------------------------------------------------------
# histogram


def test_histogram_counts_match_numpy():
    rng = np.random.default_rng(7)
    a = rng.normal(0.3, 0.4, 200)
    b = np.concatenate([rng.normal(-0.2, 0.2, 120), [np.nan, np.inf]])
    svg = histogram_svg([("bm25", a), ("dense", b)], title="Score separation", x_label="margin", bins=12)
    root = parse(svg)
    assert root.get("data-plot") == "histogram" and root.get("data-bins") == "12"
    b_fin = b[np.isfinite(b)]
    edges = np.histogram_bin_edges(np.concatenate([a, b_fin]), bins=12)
    for label, values in (("bm25", a), ("dense", b_fin)):
        bars = sorted(find(root, "rect", data_group=label), key=lambda r: int(r.get("data-bin")))
        assert [int(r.get("data-count")) for r in bars] == np.histogram(values, bins=edges)[0].tolist()
        assert [float(r.get("data-lo")) for r in bars] == edges[:-1].tolist()
        assert sum(int(r.get("data-count")) for r in bars) == len(values)
        (grp,) = [g for g in root.iter(NS + "g") if g.get("class") == "group" and g.get("data-group") == label]
        assert int(grp.get("data-n")) == len(values)
        assert float(grp.get("data-mean")) == pytest.approx(float(np.mean(values)))
    legend = [t.text for g in root.iter(NS + "g") if g.get("class") == "legend" for t in g.iter(NS + "text")]
    assert legend == [f"bm25 (mean {a.mean():.3f}, n=200)", f"dense (mean {b_fin.mean():.3f}, n=120)"]
    # bar heights scale with counts from the baseline
    area = plot_area(root)
    bottom, top = float(area.get("data-bottom")), float(area.get("data-top"))
    y_max = float(area.get("data-y-max"))
    for r in find(root, "rect", data_group="bm25"):
        h = int(r.get("data-count")) / y_max * (bottom - top)
        assert float(r.get("height")) == pytest.approx(h, abs=0.02)
    (vline,) = find(root, "line", data_value="0.0")
    assert vline.get("stroke-dasharray")


def test_histogram_vline_outside_data_and_none():
    root = parse(histogram_svg([("a", [2.0, 3.0, 3.5])], title="t", x_label="x", bins=3, vline=0.0))
    assert float(plot_area(root).get("data-x-min")) <= 0.0
    root = parse(histogram_svg([("a", [2.0, 3.0, 3.5])], title="t", x_label="x", bins=3, vline=None))
    assert not [e for e in root.iter(NS + "line") if e.get("class") == "vline"]


def test_histogram_empty_groups():
    assert parse(histogram_svg([], title="t", x_label="x")).get("data-plot") == "empty"
    assert parse(histogram_svg([("a", [None, math.nan])], title="t", x_label="x")).get("data-plot") == "empty"
    root = parse(histogram_svg([("a", [1.0, 1.0]), ("b", [])], title="t", x_label="x", bins=4))
    assert [int(r.get("data-count")) for r in find(root, "rect", data_group="b")] == [0, 0, 0, 0]
    assert sum(int(r.get("data-count")) for r in find(root, "rect", data_group="a")) == 2


# --------------------------------------------------------------------------------------------
# heatmap


def cells(root: ET.Element) -> dict[tuple[int, int], ET.Element]:
    return {
        (int(r.get("data-i")), int(r.get("data-j"))): r
        for r in root.iter(NS + "rect")
        if r.get("class") == "cell"
    }


def test_heatmap_best_cell_and_missing():
    z = [[0.41, 0.52, None], [0.47, math.nan, 0.38]]
    root = parse(heatmap_svg([0.1, 0.5, 1.0], [10, 20], z, title="nDCG@10", x_label="alpha", y_label="k"))
    c = cells(root)
    assert len(c) == 6
    (best,) = [k for k, r in c.items() if r.get("data-best") == "true"]
    assert best == (0, 1)
    assert float(c[(0, 1)].get("data-value")) == 0.52
    for k in ((0, 2), (1, 1)):
        assert c[k].get("data-missing") == "true" and c[k].get("data-value") == ""
        assert c[k].get("fill").startswith("url(#")
    labels = {
        (int(t.get("data-i")), int(t.get("data-j"))): t for t in root.iter(NS + "text") if t.get("class") == "cell-value"
    }
    assert labels[(0, 2)].text == "–" and labels[(1, 1)].text == "–" and labels[(0, 0)].text == "0.410"
    (bar,) = [g for g in root.iter(NS + "g") if g.get("class") == "colorbar"]
    assert float(bar.get("data-min")) == 0.38 and float(bar.get("data-max")) == 0.52
    # darker = better: the max is the darkest cell, the min the lightest
    def lum(r: ET.Element) -> int:
        h = r.get("fill")
        return sum(int(h[i : i + 2], 16) for i in (1, 3, 5))

    assert lum(c[(0, 1)]) < lum(c[(0, 0)]) < lum(c[(1, 2)])
    # contrasting text: white on the darkest cell, black on the lightest
    assert labels[(0, 1)].get("fill") == "#ffffff" and labels[(1, 2)].get("fill") == "#000000"
    # numeric rows read as an axis: row 0 (k=10) below row 1 (k=20)
    assert float(c[(0, 0)].get("y")) > float(c[(1, 0)].get("y"))


def test_heatmap_lower_is_better():
    z = [[3.0, 1.5], [2.0, 4.0]]
    svg = heatmap_svg(
        ["a", "b"], ["x", "y"], z, title="FVR", x_label="m", y_label="b", higher_is_better=False, value_format="{:.1f}"
    )
    root = parse(svg)
    c = cells(root)
    assert [k for k, r in c.items() if r.get("data-best") == "true"] == [(0, 1)]
    assert root.get("data-higher-is-better") == "false"
    fills = {k: r.get("fill") for k, r in c.items()}
    assert fills[(0, 1)] == "#08306b" and fills[(1, 1)] == "#deebf7"


def test_heatmap_all_missing_and_empty():
    root = parse(heatmap_svg([1, 2], ["a"], [[None, math.nan]], title="t", x_label="x", y_label="y"))
    assert all(r.get("data-missing") == "true" for r in cells(root).values())
    assert not [g for g in root.iter(NS + "g") if g.get("class") == "colorbar"]
    assert parse(heatmap_svg([], [], [], title="t", x_label="x", y_label="y")).get("data-plot") == "empty"
    with pytest.raises(ValueError):
        heatmap_svg([1, 2], ["a"], [[1.0]], title="t", x_label="x", y_label="y")


# --------------------------------------------------------------------------------------------
# escaping


def test_all_text_is_escaped():
    svgs = [
        line_chart_svg([(NASTY, [0, 1], [0.2, 0.4])], title=NASTY, x_label=NASTY, y_label=NASTY),
        histogram_svg([(NASTY, [0.1, 0.2, -0.3])], title=NASTY, x_label=NASTY, bins=3),
        heatmap_svg([NASTY, 1.5], [NASTY], [[0.5, None]], title=NASTY, x_label=NASTY, y_label=NASTY),
        line_chart_svg([], title=NASTY, x_label=NASTY, y_label=NASTY),
    ]
    for svg in svgs:
        assert "<script" not in svg and '"quotes"' not in svg and "& " not in svg
        assert "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &quot;quotes&quot;" in svg
        root = parse(svg)
        assert NASTY in root[0].text
    # labels round-trip through the XML parser in data attributes too
    root = parse(svgs[0])
    assert find(root, "polyline", data_series=NASTY)
