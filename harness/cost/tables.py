"""The tables of ``beyondsim audit`` (the command line's edge of harness/cost/audit.py, which keeps
the sums): rich tables, CSV and JSON of the audit rows, the paper view and the projection."""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, Sequence

from rich.table import Table

from .audit import STORED, Audit, Projection
from .figures import Money, dollars, finite

# -- output ----------------------------------------------------------------------------------------

def usd_text(row: Mapping[str, Any], name: str = "usd") -> str:
    """``$0.0123``; ``≥ $0.0123`` when the $ of some calls is unknown; ``unknown`` when no $ is known."""
    return Money.from_fields(row, name).text()


def partial_text(row: Mapping[str, Any], key: str, nd: int = 2) -> str:
    """``row[key]``; ``≥ known`` when some of its terms are unknown; ``unknown`` when none is known."""
    if row.get(key) is not None:
        return _num(row[key], nd)
    known = row.get(f"{key}_known")
    return f"≥ {_num(known, nd)}" if known else "unknown"


def _num(v: Any, nd: int = 2) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:,.{nd}f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


_FULL = [("offline_s", "offline s"), ("online_s", "online s"), ("run_total_s", "run s"), ("qps", "q/s"), ("llm_calls", "calls"),
         ("cache_hits", "hits"), ("billed_calls", "billed"), ("billed_prompt_tokens", "billed in"),
         ("billed_completion_tokens", "billed out"), ("cached_tokens", "cached tok"), ("usd", "$ new")]
_MODEL = [("results", "results"), ("llm_calls", "calls"), ("cache_hits", "cache hits"), ("billed_calls", "billed"),
          ("billed_prompt_tokens", "billed in tok"), ("billed_completion_tokens", "billed out tok"),
          ("cached_tokens", "cached tok"), ("latency_s", "latency s"), ("usd", "$ new")]
CAPTION = ("offline s (fit + index + model loading) and online s (search) are cold: what a fresh machine would spend, "
           "cached embeddings, models, trained encoders and LLM replies counted at what computing them cost; run s: "
           "offline + online seconds this run spent (model loading apart); *: parts came from a cache (json/csv: cached); "
           "calls = (cache) hits + billed; billed in/out (tok): prompt/completion tokens of billed calls; cached tok: "
           "tokens answered from the cache; $ new: spend of billed calls (≥: the known part, when some models have "
           "no price or some replies reported no tokens); unfinished run: billed calls of runs whose result is not "
           "stored (stopped by the budget, failed, killed or replaced)")


# On a terminal too narrow for every column, the command line leaves columns out in these orders
# (``table.drop_order``, read by harness.cli.console.fit_table), and names where to see them all.
FULL_DROP_ORDER = ("cached tok", "billed out", "billed in", "hits", "billed", "q/s", "run s")
MODEL_DROP_ORDER = ("cached tok", "billed out tok", "billed in tok", "latency s", "cache hits", "billed")
FIT_HINT = "every column: `beyondsim audit --format json` or `--format csv`"


def _fit(t: Table, drop_order: Sequence[str] = ()) -> Table:
    t.drop_order = tuple(drop_order)  # type: ignore[attr-defined]
    t.fit_hint = FIT_HINT  # type: ignore[attr-defined]
    return t


def _cell(row: Mapping[str, Any], key: str) -> str:
    if key == "usd":
        return usd_text(row)
    if key == "cached_tokens":
        cp, cc = row["cached_prompt_tokens"], row["cached_completion_tokens"]
        both = {"cached_tokens": None if cp is None or cc is None else cp + cc,
                "cached_tokens_known": row["cached_prompt_tokens_known"] + row["cached_completion_tokens_known"]}
        return partial_text(both, "cached_tokens")
    if f"{key}_known" in row:
        return partial_text(row, key)
    if key == "offline_s" and row.get("cached"):
        return f"{_num(row[key])}*"
    return _num(row[key])


def audit_table(audit: Audit, title: str) -> Table:
    """The grouped audit as a table: a subtotal row per retriever with two or more benchmarks
    (``--by pair``) and a total row."""
    labels = {"pair": ["retriever", "benchmark"], "retriever": ["retriever"], "benchmark": ["benchmark"],
              "model": ["model"]}[audit.by]
    cols = _MODEL if audit.by == "model" else [("results", "results"), *_FULL]
    t = Table(title=title, title_justify="left", caption=CAPTION, caption_justify="left")
    for lab in labels:  # names are kept whole (up to 30 characters); the number columns wrap their headers
        names = [str(r.get(lab, "")) for r in audit.rows] + ["all benchmarks"] * bool(audit.subtotals)
        t.add_column(lab, min_width=min(30, max(map(len, names), default=0)))
    for key, head in cols:  # dollars are kept whole
        t.add_column(head, justify="right", min_width=len("≥ $0.0000") if key == "usd" else None)

    def label_cells(row: Mapping[str, Any], kind: str) -> list[str]:
        if kind == "total":
            return ["total"] + [""] * (len(labels) - 1)
        if kind == "subtotal":
            return [row["retriever"], "all benchmarks"]
        cells = [str(row[lab]) for lab in labels]
        if row.get("status", STORED) != STORED:
            cells[-1] = f"{cells[-1]} ({row['status']})".lstrip()
        return cells

    for i, row in enumerate(audit.rows):
        last_of_retriever = audit.by == "pair" and (i + 1 == len(audit.rows) or
                                                    audit.rows[i + 1]["retriever"] != row["retriever"])
        sub = audit.subtotals.get(row["retriever"]) if last_of_retriever else None
        t.add_row(*label_cells(row, "row"), *[_cell(row, k) for k, _ in cols],
                  end_section=last_of_retriever and sub is None)
        if sub is not None:
            t.add_row(*label_cells(sub, "subtotal"), *[_cell(sub, k) for k, _ in cols], style="italic", end_section=True)
    if audit.total is not None:
        if audit.by != "pair":
            t.add_section()
        t.add_row(*label_cells(audit.total, "total"), *[_cell(audit.total, k) for k, _ in cols], style="bold")
    return _fit(t, MODEL_DROP_ORDER if audit.by == "model" else FULL_DROP_ORDER)


def paper_table(rows: Sequence[Mapping[str, Any]], settings: Sequence[str], title: str) -> Table:
    """:func:`harness.cost.audit.paper_rows` as a table: a row per method, a column per setting (cold
    seconds · $ of new spend · tokens K, or why the cell is empty), and the total."""
    t = Table(title=title, title_justify="left", caption="each cell: cold seconds (offline + online, model loading "
              "included) · $ new spend · tokens K (cache hits included); mean over seeds; *: cold cost derived for "
              "results stored before cached artefacts recorded their cost; a total with missing settings is a lower "
              "bound (≥)", caption_justify="left")
    t.add_column("method")
    for s in settings:
        t.add_column(s, justify="right")
    t.add_column("total", justify="right")
    for r in rows:
        cells = []
        for s in settings:
            c = r["settings"][s]
            if c["time_s"] is None:
                cells.append(c["missing"])
                continue
            cells.append(f"{_num(c['time_s'])}{'*' if c['cold_basis'] else ''} s · {usd_text(c)} · "
                         f"{partial_text(c, 'tokens_k', 1)}K")
        total = f"{partial_text(r, 'time_s')} s · {usd_text(r)} · {partial_text(r, 'tokens_k', 1)}K"
        if r["missing"]:
            total += f" (missing {len(r['missing'])})"
        t.add_row(r["method"], *cells, total)
    return _fit(t, tuple(reversed(settings)))  # the settings from the right; the total is kept longest


def rates_table(p: Projection) -> Table:
    t = Table(title="measured per-query rates (LLM calls priced at current prices, cache hits included)",
              title_justify="left")
    for head in ("retriever", "queries", "s/query", "calls/query", "tokens/query", "$/query", "offline s/doc",
                 "measured on"):
        t.add_column(head, justify="left" if head in ("retriever", "measured on") else "right")
    for r in p.rates:
        usd = "–" if r["usd_known_per_query"] is None else (
            dollars(r["usd_per_query"]) if r["usd_per_query"] is not None else
            (f"≥ {dollars(r['usd_known_per_query'])}" if r["usd_known_per_query"] else "unknown"))
        tokens = partial_text(r, "tokens_per_query", 1) if r["queries"] else "–"
        t.add_row(r["retriever"], _num(r["queries"]), _num(r["online_s_per_query"], 4), _num(r["llm_calls_per_query"]),
                  tokens, usd, _num(r["offline_s_per_document"], 6),
                  ", ".join(f"{b} ({n:,})" for b, n in r["measured_on"].items()) or "–")
    return _fit(t)


def projection_table(p: Projection, title: str) -> Table:
    t = Table(title=title, title_justify="left")
    for head in ("retriever", "benchmark", "queries", "documents", "online s", "offline s", "total s", "LLM calls",
                 "tokens K", "$ (no cache)", "offline from"):
        t.add_column(head, justify="left" if head in ("retriever", "benchmark", "offline from") else "right")

    def secs(v: float | None, known: float | None = None, unmeasured: str = "unmeasured") -> str:
        if v is not None:
            return _num(v)
        return f"≥ {known:,.2f}" if known else unmeasured

    by_retriever = {r["retriever"]: r for r in p.totals}
    for i, r in enumerate(p.rows):
        t.add_row(r["retriever"], r["benchmark"], _num(r["queries"]), _num(r["documents"]), _num(r["online_s"]),
                  secs(r["offline_s"]), secs(r["total_s"], None, "unknown"), _num(r["llm_calls"], 1),
                  partial_text(r, "tokens_k", 1), usd_text(r), r["offline_basis"])
        last = i + 1 == len(p.rows) or p.rows[i + 1]["retriever"] != r["retriever"]
        if last:
            s = by_retriever[r["retriever"]]
            t.add_row(s["retriever"], s["benchmark"], _num(s["queries"]), _num(s["documents"]), _num(s["online_s"]),
                      secs(s["offline_s"], s["offline_s_known"]),
                      secs(s["total_s"], s["online_s"] + s["offline_s_known"], "unknown"), _num(s["llm_calls"], 1),
                      partial_text(s, "tokens_k", 1), usd_text(s), s["offline_basis"], style="bold", end_section=True)
    return _fit(t)


def projection_notes(p: Projection) -> list[str]:
    """Which measurements each estimate comes from, and what could not be projected."""
    notes = []
    for r in p.rates:
        if not r["queries"]:
            continue
        parts = [f"{r['retriever']}: per-query rates from {r['queries']:,} queries "
                 f"({', '.join(f'{b}: {n:,}' for b, n in r['measured_on'].items())})"]
        if r["offline_measured_on"]:
            parts.append("offline seconds measured on " + ", ".join(
                f"{b} ({n} result{'s' if n > 1 else ''})" for b, n in r["offline_measured_on"].items()))
        else:
            parts.append("no offline seconds measured")
        if r["documents_measured"]:
            parts.append(f"per-document offline rate from {r['documents_measured']:,} indexed documents")
        notes.append("; ".join(parts))
        if r["unpriced_models"]:
            notes.append(f"{r['retriever']}: no price for model(s) {r['unpriced_models'].replace(';', ', ')}: "
                         "its $ is unknown (add the model to a prices file: --prices)")
        if r["calls_without_usage"]:
            n = r["calls_without_usage"]
            notes.append(f"{r['retriever']}: {n:,g} recorded LLM call{'s' if n != 1 else ''} reported no token counts: "
                         "its tokens and $ are unknown (≥: the known part)")
    for source, how in (("store", "the results store"), ("registry", "the benchmark files on disk")):
        names = list(dict.fromkeys(r["benchmark"] for r in p.rows if r["counts_from"] == source))
        if names:
            notes.append(f"query and document counts from {how}: {', '.join(names)}")
    capped: dict[str, list[str]] = {}
    for r in p.rows:
        if r.get("per_document_capped"):
            capped.setdefault(r["retriever"], []).append(r["benchmark"])
    for label, names in capped.items():
        notes.append(f"{label}: LLM calls made once per document capped at the corpus size on {', '.join(names)} "
                     "(each is made at most once per document, however many queries retrieve it)")
    for x in p.not_projected:
        what = f"benchmark {x['benchmark']}" if "benchmark" in x else f"retriever {x['retriever']}"
        notes.append(f"not projected: {what}: {x['reason']}")
    return notes


def to_json(obj: Any) -> str:
    """``obj`` as strict JSON: a figure that is not a finite number (NaN, ±inf) is written as null,
    never as the ``NaN`` token most JSON readers refuse."""
    return json.dumps(finite(obj), indent=2, ensure_ascii=False, allow_nan=False) + "\n"


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def csv_cell(v: Any) -> Any:
    """A CSV cell: ``None`` empty; finite numbers unchanged; anything else as its text, which, when
    a spreadsheet would read it as a formula (it starts with ``=``, ``+``, ``-``, ``@``, a tab or a
    carriage return: ``-inf`` too), is prefixed with ``'``."""
    if v is None:
        return ""
    if not isinstance(v, bool) and (isinstance(v, int) or (isinstance(v, float) and math.isfinite(v))):
        return v
    text = v if isinstance(v, str) else str(v)
    return "'" + text if text[:1] in FORMULA_STARTS else text


def to_csv(rows: Sequence[Mapping[str, Any]], fields: Sequence[str] | None = None) -> str:
    """Rows as CSV; the header is ``fields``, else the first row's keys. Every cell, the header's
    too (a column may be named by a measure or a key read from a file), goes through
    :func:`csv_cell`."""
    names = list(fields or (rows[0].keys() if rows else ["retriever"]))
    lines = [[csv_cell(str(k)) for k in names], *([csv_cell(r.get(k)) for k in names] for r in rows)]
    return "".join(",".join(map(_quoted, cells)) + "\n" for cells in lines)


def _quoted(cell: Any) -> str:
    """One CSV field as the csv module's minimal quoting writes it, a carriage return included
    among what is quoted (the csv module leaves a lone one bare with a ``\\n`` line end, which
    splits the row for every reader)."""
    text = str(cell)
    return f'"{text.replace(chr(34), chr(34) * 2)}"' if any(c in text for c in ',"\r\n') else text


def projection_csv(p: Projection) -> str:
    fields = ["kind", "retriever", "benchmark", "queries", "documents", "counts_from", "online_s", "offline_s",
              "offline_s_known", "total_s", "offline_basis", "per_document_capped", "llm_calls", "prompt_tokens",
              "completion_tokens",
              "tokens_k", "tokens_k_known", "usage_unknown_calls", "usd", "usd_known", "usd_unknown_calls",
              "unpriced_models"]
    rows = [{"kind": "benchmark", **r} for r in p.rows] + [{"kind": "total", **r} for r in p.totals]
    return to_csv(rows, fields)
