"""The leaderboard's comparisons as tables for a paper: JSON, Markdown or LaTeX.

One document per suite table (:class:`reports.ranking.SuiteComparison`) and one per benchmark
(:class:`reports.compare.BenchmarkComparison`), named ``suite/<slug>.<ext>`` and
``bench/<slug>.<ext>`` (:func:`documents`). JSON holds every measure of every row: the mean, the
per-seed means, the standard deviation over seeds or the single seed's 95% bootstrap CI, and each
paired test (raw and Holm-adjusted p, win/tie/loss counts); it is strict JSON (a missing or
non-finite number is ``null``). Markdown (GitHub tables) and LaTeX (``booktabs``) tables show a
benchmark's headline measures with the site's marks: the best value of a column in bold, † / ‡
where a row differs from the best comparator / best baseline row. Every string from the store is
escaped for the format it is written in.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from .compare import (BASELINE, COMPARATOR, Aggregate, BenchmarkComparison, ConfigGroup, Leaderboard,
                      SuiteComparison, SuiteRow, measure_higher_is_better)
from .second_stage import REFERENCE_SHOWN, StageRow, StageTable
from .text import fmt_num, measure_decimals, rank_text, round_half_up, slugify

FORMATS = {"json": "json", "md": "md", "latex": "tex"}  # format → file extension
MARKS = {COMPARATOR: "†", BASELINE: "‡"}


# --------------------------------------------------------------------------------------------
# escaping


_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|&~$])")
_TEX_SPECIAL = {
    "\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_", "{": r"\{",
    "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}", ">": r"\textgreater{}",
    "|": r"\textbar{}",
}
_TEX_RE = re.compile("|".join(re.escape(c) for c in _TEX_SPECIAL))


def md_escape(text: str) -> str:
    """Text for a Markdown table cell: markup characters backslash-escaped (``|`` included, which
    would end the cell), line breaks as spaces."""
    return _MD_SPECIAL.sub(r"\\\1", " ".join(str(text).splitlines()))


def tex_escape(text: str) -> str:
    """Text for LaTeX: the ten special characters (and ``<``, ``>``, ``|``, which the default font
    encoding draws as other glyphs) as commands, line breaks as spaces."""
    return _TEX_RE.sub(lambda m: _TEX_SPECIAL[m.group(0)], " ".join(str(text).splitlines()))


# --------------------------------------------------------------------------------------------
# JSON


def _plain(x: Any) -> Any:
    """``x`` with tuples as lists and non-finite numbers as ``None``."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {str(k): _plain(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_plain(v) for v in x]
    return x


def _aggregate_data(agg: Aggregate) -> dict[str, Any]:
    return {"mean": agg.mean, "std": agg.std, "ci": agg.ci, "n": agg.n, "per_seed": agg.values}


def benchmark_data(b: BenchmarkComparison, *, alpha: float, n_resamples: int) -> dict[str, Any]:
    info = b.section.info
    rows = []
    for i, g in enumerate(b.groups):
        measures = {}
        for m in b.measures:
            measures[m] = {**_aggregate_data(g.measure(m)), "tests": [
                {"against": t.kind, "reference": t.yardstick, "p": t.p_raw, "p_holm": t.p_adj, "family": t.family,
                 "significant": t.significant, "better": t.better, "wins": t.wins, "ties": t.ties,
                 "losses": t.losses} for t in b.tests_of(i, m)]}
        rows.append({"label": g.display, "retriever": g.retriever, "spec_hash": g.spec_hash,
                     "benchmark_version": g.benchmark_version, "baseline": b.is_baseline(g), "seeds": g.seeds,
                     "n_queries": g.n_queries, "measures": measures})
    return {
        "benchmark": b.section.display or b.name, "local": b.section.local, "query_slice": b.section.query_slice,
        "task": b.task, "version": info.version if info is not None else None,
        "versions": b.section.versions, "headline": b.headline, "measures": b.measures,
        # (the keys "reference" and "references" name the comparator and the yardstick rows: an
        # output format other tools read, kept as it was)
        "suite": b.suite, "reference": b.comparator, "baselines": b.baselines, "alpha": alpha,
        "n_resamples": n_resamples,
        "references": {m: {kind: b.groups[i].display for kind, i in by_kind.items()} for m, by_kind in b.yardsticks.items()},
        "rows": rows,
    }


def _unranked(r: SuiteRow) -> str:
    return "" if r.ranked else " (chance level)" if r.chance else " (not ranked)"


def suite_data(s: SuiteComparison) -> dict[str, Any]:
    names = {b.name: b.display or b.name for b in s.benchmarks}
    return {
        "suite": s.name, "description": s.description, "headline": s.measures,
        "benchmarks": [b.display or b.name for b in s.benchmarks],
        "headline_benchmarks": [names[b] for b in s.headline_benchmarks],
        "rows": [{"label": r.label, "coverage": r.coverage, "ranked": r.ranked,
                  "rank": list(r.rank) if r.rank else None, "chance": r.chance, "why_not_ranked": r.why_apart,
                  "missing": [names[b] for b in r.missing],
                  "measures": {m: {"mean": r.means[m], "benchmarks": r.counts[m]} for m in s.measures},
                  "per_benchmark": {names[b]: v for b, v in r.per_benchmark.items()}} for r in s.rows],
    }


def _stage_listed(r: StageRow) -> str:
    return "reference" if r.reference else "ranked" if r.ranked else "apart"


def stage_data(t: StageTable, names: dict[str, str], bench: str | None = None) -> dict[str, Any]:
    """A second-stage table (:mod:`reports.second_stage`): on ``bench`` (each row's aggregate, with
    its CI or std), or over a suite's benchmarks (means over its headline benchmarks)."""
    rows = []
    for r in t.rows:
        row: dict[str, Any] = {"label": r.label, "kind": r.kind, "listed": _stage_listed(r),
                               "rank": list(r.rank) if r.rank else None, "why_not_ranked": r.why, "trust": r.trust,
                               "seeds": sorted({x.seed for x in r.records})}
        if bench is not None and bench in r.groups:
            row["measures"] = {m: _aggregate_data(r.groups[bench].measure(m)) for m in t.measures}
        else:
            row["measures"] = {m: {"mean": r.means.get(m)} for m in t.measures}
            row["missing"] = [names.get(b, b) for b in r.missing]
        rows.append(row)
    return {
        "pool": t.pool_name, "suite": t.suite, "measures": t.measures, "rank_measure": t.rank_measure,
        "relevance": t.relevance, "headline_benchmarks": [names.get(b, b) for b in t.headline_benchmarks],
        "pools": {names.get(b, b): {k: m.get(k) for k in ("hash", "depth", "first_stage_label", "queries",
                                                            "candidates", "ceiling")}
                  for b, m in t.pools.items()},
        "left_out": dict(t.left_out), "rows": rows,
    }


def to_json(data: Any) -> str:
    return json.dumps(_plain(data), indent=1, ensure_ascii=False, allow_nan=False) + "\n"


# --------------------------------------------------------------------------------------------
# table cells, shared by Markdown and LaTeX


@dataclass
class _Cell:
    value: str  # the mean, as on the site ("–" when missing)
    best: bool  # the best value of its column (after rounding)
    marks: list[str]  # COMPARATOR / BASELINE: the significant tests
    std: str = ""  # over seeds, with several
    ci: tuple[str, str] | None = None  # a single seed's 95% bootstrap CI


def _cells(b: BenchmarkComparison) -> list[list[_Cell]]:
    measures = b.headline
    aggs = [[g.measure(m) for m in measures] for g in b.groups]
    best = []
    for j, m in enumerate(measures):
        vals = [round_half_up(row[j].mean, measure_decimals(m)) for row in aggs if row[j].mean is not None]
        best.append((max(vals) if measure_higher_is_better(m) else min(vals)) if vals else None)
    table = []
    for i, row in enumerate(aggs):
        cells = []
        for j, (m, agg) in enumerate(zip(measures, row)):
            dec = measure_decimals(m)
            cell = _Cell(fmt_num(agg.mean, dec),
                         agg.mean is not None and round_half_up(agg.mean, dec) == best[j],
                         [t.kind for t in b.tests_of(i, m) if t.significant])
            if agg.mean is not None and agg.std is not None:
                cell.std = fmt_num(agg.std, dec)
            elif agg.mean is not None and agg.ci is not None:
                cell.ci = (fmt_num(agg.ci[0], 2), fmt_num(agg.ci[1], 2))
            cells.append(cell)
        table.append(cells)
    return table


def _queries(g: ConfigGroup) -> str:
    nq = g.n_queries
    return "–".join(f"{n:,}" for n in ([nq[0], nq[-1]] if len(nq) > 1 else nq))


def _arrow(m: str) -> str:
    return "↑" if measure_higher_is_better(m) else "↓"


def _legend(b: BenchmarkComparison, code: Callable[[str], str], alpha: float, n_resamples: int) -> str:
    parts = []
    if b.comparator:
        parts.append(f"{MARKS[COMPARATOR]} differs from the best {code(b.comparator)} row")
    if b.baselines:
        parts.append(f"{MARKS[BASELINE]} from the best baseline row ({', '.join(code(x) for x in b.baselines)})")
    tests = (f"{' and '.join(parts)}: Holm-adjusted p < {alpha}, two-sided paired randomisation test on "
             f"per-query values ({n_resamples:,} sign flips). " if parts else "")
    return ("Mean over the judged queries; [95% bootstrap CI] with one seed, ± the standard deviation over "
            f"seeds with several. Bold: the best value of a column. {tests}↑ higher is better, ↓ lower is better.")


# --------------------------------------------------------------------------------------------
# Markdown


def _md_code(text: str) -> str:
    """Inline code, unless the text holds a backtick (then escaped plain text)."""
    return f"`{text}`" if "`" not in text else md_escape(text)


def _md_row(cells: list[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def markdown_benchmark(b: BenchmarkComparison, *, alpha: float, n_resamples: int) -> str:
    info = b.section.info
    lines = [f"## {md_escape(b.section.display or b.name)}", ""]
    meta = [md_escape(b.task)] + ([f"version {_md_code(info.version)}"] if info is not None else [])
    lines += [", ".join(meta), ""]
    head = ["retriever"] + [f"{md_escape(m)} {_arrow(m)}" for m in b.headline] + ["seeds", "queries"]
    lines += [_md_row(head), "|" + "---|" + "--:|" * (len(head) - 1)]
    for g, cells in zip(b.groups, _cells(b)):
        out = [md_escape(g.display)]
        for c in cells:
            text = f"**{c.value}**" if c.best else c.value
            text += "".join(MARKS[k] for k in c.marks)
            if c.std:
                text += f" ± {c.std}"
            elif c.ci:
                text += f" [{c.ci[0]}, {c.ci[1]}]"
            out.append(text)
        out += [str(len(g.records)), _queries(g)]
        lines.append(_md_row(out))
    lines += ["", _legend(b, _md_code, alpha, n_resamples), ""]
    return "\n".join(lines)


def markdown_suite(s: SuiteComparison) -> str:
    lines = [f"## {md_escape(s.name)}", ""]
    if s.description:
        lines += [md_escape(s.description), ""]
    head = (["retriever", "rank"] + [f"{md_escape(m)} {_arrow(m)}" for m in s.measures] + ["benchmarks"]
            + [md_escape(b.display or b.name) for b in s.benchmarks])
    lines += [_md_row(head), "|" + "---|" + "--:|" * (len(head) - 1)]
    first = s.first or ""
    n_core = len(s.headline_benchmarks)
    for r in s.rows:
        label = md_escape(r.label) + _unranked(r)
        lines.append(_md_row([label, rank_text(r.rank)] + [fmt_num(r.means[m], measure_decimals(m)) for m in s.measures]
                             + [f"{n_core - len(r.missing)}/{n_core}"]
                             + [fmt_num(r.per_benchmark[b.name], measure_decimals(first)) for b in s.benchmarks]))
    note = ("Headline columns: the mean over the same headline benchmarks for every ranked row ("
            + ", ".join(md_escape(b.display or b.name) for b in s.benchmarks if b.name in s.headline_benchmarks)
            + "); a row not run on all of them is not ranked and has none. Rank: an interval where paired tests "
            "(Holm-adjusted) cannot separate a row from its neighbours; the chance level and rows below it on "
            "relevance are not ranked.")
    if s.first:
        note += f" Benchmark columns: {md_escape(s.first)}."
    lines += ["", note, ""]
    return "\n".join(lines)


def _stage_cells(t: StageTable, r: StageRow, bench: str | None) -> list[tuple[str, str]]:
    """``(value, ci or ± std)`` per column of a second-stage row, as the pages write them."""
    out = []
    for m in t.measures:
        dec = measure_decimals(m)
        extra = ""
        if bench is not None and bench in r.groups:
            agg = r.groups[bench].measure(m)
            if agg.mean is not None and agg.std is not None:
                extra = f"± {fmt_num(agg.std, dec)}"
            elif agg.mean is not None and agg.ci is not None:
                extra = f"[{fmt_num(agg.ci[0], 2)}, {fmt_num(agg.ci[1], 2)}]"
        out.append((fmt_num(r.means.get(m), dec), extra))
    return out


def _stage_rank(r: StageRow) -> str:
    if r.reference:
        return REFERENCE_SHOWN.get(r.kind, "reference")
    return rank_text(r.rank) if r.rank else "not ranked"


STAGE_NOTE = ("Rerankers reordering a frozen candidate pool, ranked by {first}; the reference rows (the pool in its "
              "own order, shuffled, and in its oracle order: the ceiling) are never ranked.")


def markdown_stage(t: StageTable, title: str, bench: str | None = None) -> str:
    lines = [f"## {md_escape(title)}", ""]
    head = ["reranker", "rank"] + [f"{md_escape(m)} {_arrow(m)}" for m in t.measures]
    lines += [_md_row(head), "|" + "---|" + "--:|" * (len(head) - 1)]
    for r in t.rows:
        cells = [f"{v} {e}".strip() for v, e in _stage_cells(t, r, bench)]
        why = f" ({md_escape(r.why.split(':')[0])})" if r.why else ""
        lines.append(_md_row([md_escape(r.label) + why, md_escape(_stage_rank(r))] + cells))
    lines += ["", STAGE_NOTE.format(first=md_escape(t.rank_measure or "name"))]
    lines += [md_escape(n) for n in t.notes()]
    return "\n".join(lines + [""])


def latex_stage(t: StageTable, title: str, label: str, bench: str | None = None) -> str:
    head = ["Reranker", "Rank"] + [_tex_measure(m) for m in t.measures]
    rows = []
    for r in t.rows:
        cells = [_tex_num(v) + (f" {{\\scriptsize {_tex_num(e)}}}" if e.startswith("[") else
                                f" $\\pm$ {_tex_num(e[2:])}" if e else "") for v, e in _stage_cells(t, r, bench)]
        why = f" ({r.why.split(':')[0]})" if r.why else ""
        rows.append([tex_escape(r.label + why), tex_escape(_stage_rank(r)).replace("–", "--")] + cells)
    caption = tex_escape(f"{title}. " + STAGE_NOTE.format(first=t.rank_measure or "name"))
    return _tex_table(caption, label, head, rows)


# --------------------------------------------------------------------------------------------
# LaTeX


_TEX_MARKS = {COMPARATOR: r"\textsuperscript{\dag}", BASELINE: r"\textsuperscript{\ddag}"}


def _tex_measure(m: str) -> str:
    return f"{tex_escape(m)} $\\{'uparrow' if measure_higher_is_better(m) else 'downarrow'}$"


def _tex_num(text: str) -> str:
    return text.replace("–", "--")


def _tex_table(caption: str, label: str, head: list[str], rows: list[list[str]]) -> str:
    lines = [
        "\\begin{table}[t]",
        "  \\centering",
        f"  \\caption{{{caption}}}",
        f"  \\label{{tab:{label}}}",
        f"  \\begin{{tabular}}{{l{'r' * (len(head) - 1)}}}",
        "    \\toprule",
        "    " + " & ".join(head) + " \\\\",
        "    \\midrule",
    ]
    lines += ["    " + " & ".join(r) + " \\\\" for r in rows]
    lines += ["    \\bottomrule", "  \\end{tabular}", "\\end{table}", ""]
    return "\n".join(lines)


def latex_benchmark(b: BenchmarkComparison, *, alpha: float, n_resamples: int) -> str:
    head = ["Retriever"] + [_tex_measure(m) for m in b.headline] + ["Seeds", "Queries"]
    rows = []
    for g, cells in zip(b.groups, _cells(b)):
        out = [tex_escape(g.display)]
        for c in cells:
            text = f"\\textbf{{{_tex_num(c.value)}}}" if c.best else _tex_num(c.value)
            text += "".join(_TEX_MARKS[k] for k in c.marks)
            if c.std:
                text += f" $\\pm$ {_tex_num(c.std)}"
            elif c.ci:
                text += f" {{\\scriptsize [{_tex_num(c.ci[0])}, {_tex_num(c.ci[1])}]}}"
            out.append(text)
        out += [str(len(g.records)), _tex_num(_queries(g)).replace(",", "{,}")]
        rows.append(out)
    legend = (tex_escape(_legend(b, str, alpha, n_resamples))
              .replace("†", r"\dag{}").replace("‡", r"\ddag{}").replace("±", r"$\pm$")
              .replace("↑", r"$\uparrow$").replace("↓", r"$\downarrow$"))
    return _tex_table(f"{tex_escape(b.section.display or b.name)}. {legend}", f"beyondsim-{b.slug}", head, rows)


def latex_suite(s: SuiteComparison, slug: str) -> str:
    head = (["Retriever", "Rank"] + [_tex_measure(m) for m in s.measures] + ["Benchmarks"]
            + [tex_escape(b.display or b.name) for b in s.benchmarks])
    first = s.first or ""
    n_core = len(s.headline_benchmarks)
    rows = [[tex_escape(r.label + _unranked(r)), rank_text(r.rank).replace("–", "--")]
            + [_tex_num(fmt_num(r.means[m], measure_decimals(m))) for m in s.measures]
            + [f"{n_core - len(r.missing)}/{n_core}"]
            + [_tex_num(fmt_num(r.per_benchmark[b.name], measure_decimals(first))) for b in s.benchmarks]
            for r in s.rows]
    caption = (f"{tex_escape(s.name)}: headline measures, the mean over the same headline benchmarks for every "
               "ranked row (a row not run on all of them is not ranked)")
    if s.first:
        caption += f"; benchmark columns: {tex_escape(s.first)}"
    return _tex_table(caption + ".", f"beyondsim-suite-{slug}", head, rows)


# --------------------------------------------------------------------------------------------
# documents


def _suite_text(s: SuiteComparison, slug: str, fmt: str) -> str:
    if fmt == "json":
        return to_json(suite_data(s))
    return markdown_suite(s) if fmt == "md" else latex_suite(s, slug)


def _benchmark_text(b: BenchmarkComparison, fmt: str, alpha: float, n_resamples: int) -> str:
    if fmt == "json":
        return to_json(benchmark_data(b, alpha=alpha, n_resamples=n_resamples))
    render = markdown_benchmark if fmt == "md" else latex_benchmark
    return render(b, alpha=alpha, n_resamples=n_resamples)


def documents(board: Leaderboard, fmt: str) -> list[tuple[str, str]]:
    """``(relative path, text)`` of every table in ``fmt`` (a key of :data:`FORMATS`): the suite
    tables first, in overview order, then the benchmarks, in page order."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown table format {fmt!r}: expected one of {', '.join(FORMATS)}")
    ext = FORMATS[fmt]
    out = []
    used: set[str] = set()
    for s in board.suites:
        slug = slugify(s.name, used)
        out.append((f"suite/{slug}.{ext}", _suite_text(s, slug, fmt)))
    for b in board.benchmarks:
        out.append((f"bench/{b.slug}.{ext}", _benchmark_text(b, fmt, board.alpha, board.n_resamples)))
    names = _names(board)
    for slug, title, t, bench in _stage_tables(board):
        text = (to_json(stage_data(t, names, bench)) if fmt == "json" else markdown_stage(t, title, bench)
                if fmt == "md" else latex_stage(t, title, f"beyondsim-{slug}", bench))
        out.append((f"second-stage/{slug}.{ext}", text))
    return out


def _names(board: Leaderboard) -> dict[str, str]:
    names = {b.name: b.section.display or b.name for b in board.benchmarks}
    names.update({s.name: s.display or s.name for s in board.second_stage.only})
    return names


def _stage_tables(board: Leaderboard) -> list[tuple[str, str, StageTable, str | None]]:
    """``(file slug, title, table, benchmark or None)`` of every second-stage table: the suites' first
    (per pool name), then each benchmark's (per pool)."""
    names = _names(board)
    used: set[str] = set()
    out: list[tuple[str, str, StageTable, str | None]] = []
    for suite in board.second_stage.suites:
        for t in suite.tables:
            out.append((slugify(f"suite-{suite.name}-{t.pool_name}", used),
                        f"{suite.name}: second stage on {t.pool_name}", t, None))
    for bench, tables in board.second_stage.tables.items():
        for t in tables:
            shown = names.get(bench, bench)
            out.append((slugify(f"{shown}-{t.pool_name}-{t.pool_hash[:8]}", used),
                        f"{shown}: second stage on {t.pool_name} ({t.pool_hash})", t, bench))
    return out


def combined(board: Leaderboard, fmt: str) -> str:
    """Every table in one text: JSON as one object ``{"suites": [...], "benchmarks": [...]}``,
    Markdown and LaTeX as the documents one after another."""
    if fmt == "json":
        data: dict[str, Any] = {"suites": [suite_data(s) for s in board.suites],
                                "benchmarks": [benchmark_data(b, alpha=board.alpha, n_resamples=board.n_resamples)
                                               for b in board.benchmarks]}
        stage = _stage_tables(board)
        if stage:  # (a board with no second-stage result keeps the shape it had)
            names = _names(board)
            data["second_stage"] = [stage_data(t, names, bench) for _, _, t, bench in stage]
        return to_json(data)
    return "\n".join(text for _, text in documents(board, fmt))


def write_tables(board: Leaderboard, fmt: str, out_dir: Path) -> list[Path]:
    """Write :func:`documents` under ``out_dir``; return the paths written."""
    paths = []
    for rel, text in documents(board, fmt):
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        paths.append(path)
    return paths
