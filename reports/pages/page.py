"""What every page module shares: the Jinja environment, the site being written (its folder,
page names and the pages written so far) and the small cell and header builders.

Every string that comes from the store is user-controlled and goes through Jinja's autoescaping;
the only ``|safe`` in the templates inserts the SVG strings :mod:`reports.plots` builds (which
escape their own text). File names and anchors derived from names are slugs (``[a-z0-9-]``).
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from jinja2 import Environment, PackageLoader, StrictUndefined

from harness.measures import parse_measure
from harness.store import trust as _trust
from harness.store.results import Store

from ..compare import Leaderboard, measure_higher_is_better
from ..rows import trust_class, trust_description, trust_rank
from ..text import finite, slugify

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"


def environment() -> Environment:
    env = Environment(
        loader=PackageLoader("reports", "templates"),
        autoescape=True,
        undefined=StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )
    # the trust levels as harness.store.trust declares them, read when a page is rendered: a level
    # added there gets its badge, its order and its legend with no change here
    env.filters["trust_class"] = trust_class
    env.filters["trust_sort"] = trust_sort
    env.filters["trust_description"] = lambda level: (trust_description(level)
                                                      or "a trust level this board does not describe")
    env.globals["trust_title"] = trust_title
    return env


def trust_sort(level: str) -> str:
    """A trust cell's ``data-value``: its level's place in :data:`harness.store.trust.LEVELS` (best
    first), so a sort by the column orders the levels as they are declared, not alphabetically."""
    return f"{trust_rank(level):02d} {level}"


def trust_title() -> str:
    """The trust column's title, naming every level in order."""
    levels = [str(x) for x in _trust.LEVELS]
    words = levels[0] if len(levels) == 1 else ", ".join(levels[:-1]) + " or " + levels[-1]
    return f"how its figures were checked: {words}"


def checked_text(checked: frozenset[str] | None) -> str:
    """Which of a row's figures were checked here (:attr:`reports.rows.ConfigGroup.checked`)."""
    from harness.measures import sort_key

    if checked is None:
        return "every figure computed by this harness here"
    if not checked:
        return "no figure checked here"
    return "figures checked here: " + ", ".join(sorted(checked, key=sort_key))


def trust_view(site: "Site", level: str, groups: Sequence[Any]) -> dict[str, Any]:
    """A row's trust cell: its level (the badge), and what the badge opens (``text``, one line each):
    what the level means,
    which figures were checked here on every seed of ``groups`` (the row's
    :class:`reports.rows.ConfigGroup` rows), and the rows of the shipped reproduction matrix that
    recomputed them (:meth:`Site.matrix_rows`), each with its benchmark, measure, figure and status."""
    sets = [g.checked for g in groups]
    known = [c for c in sets if c is not None]
    checked = None if not known else frozenset.intersection(*known)
    matrix = []
    for g in groups:
        for r in g.records:
            for m in site.matrix_rows(r.spec_hash, r.benchmark_version):
                got = m.get("got")
                matrix.append({"benchmark": str(m["benchmark"]), "measure": str(m["measure"]),
                               "got": f"{float(got):.4f}" if finite(got) else "–",
                               "expected": f"{float(m['expected']):.4f}" if finite(m.get("expected")) else "–",
                               "status": str(m["status"]), "run": str(m["run_id"])})
    matrix = list({(x["benchmark"], x["measure"], x["run"]): x for x in matrix}.values())
    checked_line = checked_text(checked) if groups else ""
    description = trust_description(level) or "a trust level this board does not describe"
    lines = [f"{level}: {description}."] + ([f"{checked_line}."] if checked_line else [])
    if matrix:
        lines.append(f"Recomputed by the shipped reproduction matrix (beyondsim reproduce, run {matrix[0]['run']}):")
        lines += [f"• {m['benchmark']} · {m['measure']}: {m['got']} against {m['expected']} expected, {m['status']}"
                  for m in matrix]
    return {"level": level, "class": trust_class(level), "sort": trust_sort(level), "description": description,
            "checked": checked_line, "matrix": matrix, "text": "\n".join(lines),
            "title": f"{level}: {checked_line}" if checked_line else level}


def filter_view(form_id: str, tables: Sequence[str], rows: Sequence[Mapping[str, str]]) -> dict[str, Any] | None:
    """The filter bar over ``tables`` (their ids; ``templates/_sort.js`` hides the rows that do not
    match): the values its menus offer, from the ``data-*`` tags of their ``rows``
    (:func:`reports.pages.rowfacts.tags`); ``None`` without rows."""
    if not rows:
        return None
    return {"id": form_id, "tables": " ".join(tables), "count": len(rows),
            "family": sorted({r["family"] for r in rows}, key=str.lower),
            "trust": trust_levels(r["trust"] for r in rows),
            "encoder": sorted({r["encoder"] for r in rows}, key=lambda e: (e == "none", e.lower())),
            "overlap": any("overlap" in r["trained"].split("|") for r in rows)}


def trust_levels(levels: Iterable[str]) -> list[str]:
    """The distinct trust levels of a table, best first (as :data:`harness.store.trust.LEVELS` orders
    them; a level it does not declare last)."""
    return sorted(set(levels), key=lambda t: (trust_rank(t), t))


def sort_script() -> str:
    """The text of the one inline script every page carries (column sorting)."""
    return (TEMPLATES / "_sort.js").read_text(encoding="utf-8")


def write(path: Path, text: str) -> None:
    """Write ``text`` through a temporary file, so a reader never sees half a page."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


@dataclass
class Site:
    """The site being written: where, the names of its pages, and what was written so far."""

    out_dir: Path
    store: Store  # benchmark content and rankings for the drill-down pages
    board: Leaderboard
    title: str
    generated_at: _dt.datetime
    env: Environment = field(default_factory=environment)
    retriever_slugs: dict[str, str] = field(default_factory=dict)  # label → page name
    drilldowns: dict[int, str] = field(default_factory=dict)  # result id → path from the site root
    sweep_slugs: dict[str, str] = field(default_factory=dict)  # sweep-only benchmark → page name
    written: set[str] = field(default_factory=set)
    _matrix: dict[tuple[str, str], list[dict[str, Any]]] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        used: set[str] = set()
        self.retriever_slugs = {label: slugify(label, used) for label in self.board.labels()}
        per_label: dict[str, set[str]] = {}
        for b in self.board.benchmarks:
            for g in b.groups:
                names = per_label.setdefault(g.display, set())
                for r in g.records:
                    name = slugify(f"{b.slug}-seed{r.seed}", names)
                    self.drilldowns[int(r.id or 0)] = f"retriever/{self.retriever_slugs[g.display]}/{name}.html"
        bench_used = {b.slug for b in self.board.benchmarks} | {s.slug for s in self.board.second_stage.only}
        self.sweep_slugs = {name: slugify(name, bench_used) for name in self.board.sweep_only}

    def matrix_rows(self, spec_hash: str, benchmark_version: str) -> list[dict[str, Any]]:
        """The reference rows of the latest run of the shipped reproduction matrix that recomputed
        the configuration ``spec_hash`` on ``benchmark_version`` (what made an imported row
        *reproduced*, :func:`harness.store.trust.matched_figures`); read from the store once."""
        if self._matrix is None:
            self._matrix = {}
            for r in self.store.reproductions(shipped=True):
                if r.get("kind", "reference") == "reference":
                    self._matrix.setdefault((str(r["spec_hash"]), str(r["benchmark_version"])), []).append(r)
        return self._matrix.get((spec_hash, benchmark_version), [])

    @property
    def common(self) -> dict[str, Any]:
        """What every template is given besides its own page's view."""
        now = self.generated_at.astimezone(_dt.timezone.utc)
        return {
            "title": self.title,
            "generated": now.strftime("%Y-%m-%d %H:%M UTC"),
            "generated_iso": now.isoformat(timespec="seconds"),
            "n_results": len(self.board.all_records),
            "harness_versions": self.board.harness_versions,
        }

    def data_files(self, stem: str, rows: Sequence[Mapping[str, Any]], fields: Sequence[str] | None = None,
                   **meta: Any) -> dict[str, str]:
        """Write a table's figures as ``data/<stem>.csv`` and ``data/<stem>.json`` (``{"rows": …}``
        with ``meta``; CSV cells that a spreadsheet would read as a formula neutralised) and return
        their paths from the site root, for the links next to the table."""
        from harness.cost.tables import to_csv

        names = list(fields or (rows[0].keys() if rows else []))
        clean = [{k: r.get(k) for k in names} for r in rows]
        rel = {"csv": f"data/{stem}.csv", "json": f"data/{stem}.json"}
        write(self.out_dir / rel["csv"], to_csv(clean, names or ["empty"]))
        write(self.out_dir / rel["json"], json.dumps({"table": stem, **meta, "columns": names, "rows": clean},
                                                     indent=1, default=str, ensure_ascii=True) + "\n")
        self.written.update(rel.values())
        return rel

    def page(self, template: str, rel: str, **ctx: Any) -> None:
        """Render ``template`` to ``rel`` (a path from the site root; links inside it are relative)."""
        root = "../" * rel.count("/")
        write(self.out_dir / rel, self.env.get_template(template).render(**self.common, root=root, **ctx))
        self.written.add(rel)


def unique_id(base: str, used: set[str]) -> str:
    """``base`` as an element id not yet in ``used`` (which it updates): ``base``, else ``base-2``,
    ``base-3``, … (the first free), so no two rows of a page share an anchor."""
    out, i = base, 2
    while out in used:
        out, i = f"{base}-{i}", i + 1
    used.add(out)
    return out


# --------------------------------------------------------------------------------------------
# cells and headers


def raw(x: float | None) -> str:
    """A ``data-value``: the number as Python writes it, empty when missing."""
    return repr(float(x)) if finite(x) else ""


def mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def fmt_count(x: float) -> str:
    return f"{int(round(x)):,}" if abs(x - round(x)) < 1e-9 else f"{x:,.1f}"


def json_dump(v: Any) -> str:
    return json.dumps(v, sort_keys=True, default=str, ensure_ascii=False)


def json_value(v: Any) -> str:
    return v if isinstance(v, str) else json_dump(v)


def _described(m: str) -> tuple[str, int | None, str, str] | None:
    """``(family, cutoff, description, averaged over)`` of a measure the harness knows; the
    description without its own "(higher/lower is better)", which the pages say apart."""
    try:
        meas = parse_measure(m)
    except ValueError:
        return None
    text = str(getattr(meas, "description", "") or "")
    text = re.sub(r"\s*\((higher|lower) is better\)", "", text).strip()
    return str(meas.family), getattr(meas, "k", None), text, str(getattr(meas, "averaged_over", "") or "")


def definition(m: str) -> str:
    """What measure ``m`` is, in one line for a reader: its family's description with the cutoff
    filled in, and what its mean is taken over; empty for a name the harness does not know."""
    d = _described(m)
    if d is None or not d[2]:
        return ""
    _, k, text, over = d
    if k:
        text = text.replace("top k", f"top {k}").replace("k + 1", f"{k + 1}")
    return f"{text}; averaged over {over}" if over else text


def legend(measures: Sequence[str]) -> list[dict[str, str]]:
    """The measures of a table with their definitions, for the legend under it: one entry per
    measure family (``V@k, k = 1, 2, 10``), in column order, only for what the table shows."""
    families: dict[str, list[str]] = {}
    for m in measures:
        d = _described(m)
        key = d[0] if d is not None and d[1] is not None else m
        if m not in families.setdefault(key, []):
            families[key].append(m)
    out = []
    for key, names in families.items():
        m = names[0]
        higher = measure_higher_is_better(m)
        d = _described(m)
        if len(names) == 1 or d is None:
            name, text = m, definition(m)
        else:
            ks = sorted(int(_described(n)[1] or 0) for n in names)  # type: ignore[index]
            name = f"{key}@k (k = {', '.join(map(str, ks))})"
            text = f"{d[2]}; averaged over {d[3]}" if d[3] else d[2]
        meas = parse_measure(m) if d is not None else None
        chance = (f"Chance level {meas.chance:g}: {meas.chance_why}"
                  if meas is not None and meas.chance is not None else "")
        out.append({"name": name, "members": " ".join(names), "chance": chance,
                    "definition": text or "a measure this version of the harness does not describe",
                    "direction": "higher is better" if higher else "lower is better", "arrow": "↑" if higher else "↓"})
    return out


def rank_title(rank: tuple[int, int] | None, measure: str | None) -> str:
    if rank is None:
        return "not ranked"
    lo, hi = rank
    if lo == hi:
        return f"rank {lo}: {measure} significantly different from every other ranked row (paired tests, Holm-adjusted)"
    return (f"rank {lo} to {hi}: on {measure}, not significantly different from the rows it could trade "
            "places with (paired randomisation tests, Holm-adjusted over all pairs)")


def header(m: str, *, sort: str = "num", headline: bool = False, n_note: str = "", n_title: str = "",
           aria: str = "") -> dict[str, Any]:
    higher = measure_higher_is_better(m)
    d = definition(m)
    return {
        "name": m,
        "arrow": "↑" if higher else "↓",
        "direction": ("higher is better" if higher else "lower is better") + (f" · {m}: {d}" if d else ""),
        "n_note": n_note,
        "n_title": n_title,
        "sort": sort,
        "headline": headline,
        "aria": aria,
    }


def initial_aria(m: str | None) -> str:
    """The ``aria-sort`` of the column a table is rendered ordered by (best first)."""
    if m is None:
        return ""
    return "descending" if measure_higher_is_better(m) else "ascending"

