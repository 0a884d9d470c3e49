"""``data``: the benchmark data on disk (status, checksums, a folder's check) and the diagnostic sets
built from a corpus."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table
from rich.text import Text

from ..data.readers import default_data_dir
from ..core.errors import UserError
from ..core.registry import builder_names, get_benchmark_loader, get_builder, load_benchmark, stored_benchmark_name
from .console import console, fail, home_dir, out
from .options import TYPER_SETTINGS, DataDirOpt, HomeOpt, SeedOpt, online_option

data_app = typer.Typer(help="Benchmark data on disk.", **TYPER_SETTINGS)


_STATE_STYLE = {"present": "green", "unlisted": "yellow", "modified": "red", "missing": "dim", "error": "red"}


def _counts_text(c: dict[str, int]) -> str:
    if not c:
        return "–"
    parts = [f"{c.get('queries', 0):,} q", f"{c.get('documents', 0):,} docs", f"{c.get('judged_pairs', 0):,} judged"]
    if c.get("violating_pairs"):
        parts.append(f"{c['violating_pairs']:,} violating")
    if c.get("queries") != c.get("judged_queries") and "judged_queries" in c:
        parts[0] += f" ({c['judged_queries']:,} judged)"
    return ", ".join(parts)


@data_app.command("status")
def data_status(
    names: list[str] = typer.Argument(None, help="Benchmarks to show (default: every registered one)."),
    data_dir: DataDirOpt = None,
    recount: bool = typer.Option(False, "--recount", help="Load each present benchmark and count it (slower)."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table."),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Also show folders, missing files and sources."),
) -> None:
    """Every benchmark: present or missing, where its files are looked for, checksum, counts,
    license and source. Counts come from the manifest when the checksums match (or --recount)."""
    from ..data.manifest import statuses

    root = default_data_dir(data_dir)
    try:
        rows = statuses(root, names or None, recount=recount)
    except ValueError as e:  # a manifest that cannot be read
        fail(str(e))
    if as_json:
        out.print_json(data={"data_dir": str(root), "benchmarks": [r.to_dict() for r in rows]})
        return
    t = Table(title=f"data directory: {root}", title_justify="left", show_lines=verbose)
    cols = ["benchmark", "status", "counts", "sha256", "license"] + (["where", "source"] if verbose else [])
    for c in cols:
        t.add_column(c, overflow="fold")
    for r in rows:
        state = Text(r.state, style=_STATE_STYLE.get(r.state, "white"))
        if r.missing and verbose:
            state.append("\n" + "\n".join(f"– {m}" for m in r.missing[:4]))
        if r.problems:
            state.append("\n" + "\n".join(r.problems[:4]))
        counts = _counts_text(r.counts) + (" (manifest)" if r.counts_from == "manifest" and r.state == "missing" else "")
        cells = [r.name, state, counts, r.checksum[:12], r.license]
        if verbose:
            cells += [r.where, r.source]
        t.add_row(*cells)
    out.print(t)
    if not verbose:
        console.print("--verbose shows where files are looked for, missing files and sources; --json gives everything",
                      highlight=False)


@data_app.command("verify")
def data_verify(
    names: list[str] = typer.Argument(None, help="Benchmarks to verify (default: every present one)."),
    data_dir: DataDirOpt = None,
    recount: bool = typer.Option(False, "--recount", help="Also load each benchmark and compare counts and content version."),
) -> None:
    """Check the files on disk against the manifest's SHA-256 checksums; exit 1 on any mismatch.
    Benchmarks named explicitly must be present."""
    from ..data.manifest import statuses

    root = default_data_dir(data_dir)
    try:
        rows = statuses(root, names or None, recount=recount)
    except ValueError as e:  # a manifest that cannot be read
        fail(str(e))
    bad = 0
    for r in rows:
        if r.state == "missing" and not names:
            continue
        ok = r.state == "present"
        bad += not ok
        label = {"present": "OK", "unlisted": "NOT IN MANIFEST", "missing": "MISSING"}.get(r.state, r.state.upper())
        style = "green" if ok else "red"
        out.print(Text(f"{label:>16}", style=style) + Text(f" {r.name}  ({len(r.files)} files"
                                                            f"{', recounted' if recount and ok else ''})"))
        for p in [*r.missing, *r.problems]:
            out.print(f"{'':>18}{p}")
    checked = sum(1 for r in rows if r.state != "missing" or names)
    out.print(f"{checked - bad} of {checked} verified", highlight=False)
    if bad:
        raise typer.Exit(1)


@data_app.command("manifest")
def data_manifest(
    names: list[str] = typer.Argument(None, help="Benchmarks to include (default: every present one)."),
    data_dir: DataDirOpt = None,
    out_file: Optional[Path] = typer.Option(None, "--out", "-o", help="Write here (default: stdout)."),
) -> None:
    """Record the checksums and counts of what the data directory holds now (loads each benchmark)."""
    from ..data.manifest import make_manifest, write_json_atomic

    root = default_data_dir(data_dir)
    try:
        doc = make_manifest(root, names or None)
    except ValueError as e:  # a manifest that cannot be read
        fail(str(e))
    if out_file is None:
        sys.stdout.write(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    else:
        write_json_atomic(out_file, doc)
        console.print(f"manifest of {len(doc['benchmarks'])} benchmarks written to {out_file}", highlight=False)


@data_app.command("check")
def data_check(
    folder: Path = typer.Argument(..., help="A benchmark folder: BEIR layout or diagnostic layout."),
    split: str = typer.Option("test", "--split", help="The qrels split to read (qrels/<split>.tsv)."),
) -> None:
    """Validate a benchmark folder: the layout it is read as, its counts, the task it is scored as,
    the measures a run computes, and what is wrong (file:line). Exit 1 when it does not load."""
    from ..data.readers import benchmark_warnings
    from ..run.runner import measures_for

    path = folder.expanduser().resolve()
    if not path.is_dir():
        fail(f"not a folder: {folder}", 1)
    name = str(path) if split == "test" else f"{path}:{split}"
    try:
        loader, bname = get_benchmark_loader(name)
        stored = stored_benchmark_name(name)
    except (UserError, ValueError) as e:  # exit code 1: the folder does not load
        fail(str(e), 1)
    layout = getattr(loader, "layout", None)
    out.print(f"folder:   {path} ({split} split)", soft_wrap=True)
    if callable(layout):
        out.print(f"layout:   {layout(bname)}", soft_wrap=True)
    try:
        bench = load_benchmark(name, default_data_dir())
    except (UserError, ValueError) as e:  # reported as the check's finding
        out.print(f"problem:  {e}", soft_wrap=True)
        out.print("result:   does not load; fix the problem above and check again", soft_wrap=True)
        raise typer.Exit(1)
    st = bench.stats()
    in_source = bench.notes.get("queries_in_source")
    queries = in_source if isinstance(in_source, int) else st["queries"]
    out.print(f"counts:   documents {st['documents']:,}, queries {queries:,} (judged {st['judged_queries']:,}), "
              f"judged pairs {st['judged_pairs']:,}, violating pairs {st['violating_pairs']:,}", soft_wrap=True)
    with_viol = sum(1 for v in bench.judgments.violating.values() if v)
    why = (f"queries with a violating document: {with_viol:,}, so V@k and FVR@k apply" if bench.task == "constraint"
           else "no violating documents, so V@k and FVR@k do not apply (see the README on constraint benchmarks)")
    out.print(f"task:     {bench.task} ({why}); a document graded >= {bench.relevance_threshold} is relevant",
              soft_wrap=True)
    out.print(f"measures: {', '.join(measures_for(bench))}", soft_wrap=True)
    out.print(f"name:     {stored} (version {bench.version})", soft_wrap=True)
    for w in benchmark_warnings(bench):
        out.print(f"warning:  {w}", soft_wrap=True)
    out.print(f"result:   loads; run it with: beyondsim run bm25 -b {stored}", soft_wrap=True)


@data_app.command("build-diagnostics")
def build_diagnostics(
    corpus: str = typer.Option("beir/scifact", "--corpus", help="Benchmark (or BEIR folder path) whose corpus to build from."),
    sets: list[str] = typer.Option(None, "--set", help="Which sets to build (repeatable; default: all builders)."),
    out_dir: Optional[Path] = typer.Option(None, "--out", help="Output folder; each set goes to <out>/<set>/ "
                                           "(default: $BEYONDSIM_HOME/diagnostics, where diag/<set> finds it)."),
    seed: SeedOpt = 0,
    max_queries: int = typer.Option(104, "--max-queries", help="Queries per set (0 = every candidate)."),
    data_dir: DataDirOpt = None,
    online: Annotated[bool, online_option(
        "Allow fetching the corpus and WordNet from their official sources.")] = False,
    home: HomeOpt = None,
) -> None:
    """Build the CoDeR antonym / negation / exclusion diagnostic sets from any corpus."""
    root = default_data_dir(data_dir)
    target = out_dir or home_dir(home) / "diagnostics"
    chosen = list(sets) if sets else builder_names()
    builders = {n: get_builder(n) for n in chosen}
    bench = load_benchmark(corpus, root, online)
    source = f"{bench.name} (version {bench.version}, {len(bench.corpus):,} documents)"
    t = Table(title=f"diagnostic sets built from {bench.name}", title_justify="left")
    for c in ("set", "queries", "passages", "source docs", "sat / neutral / viol", "written to"):
        t.add_column(c)
    for n, build in builders.items():
        try:
            built = build(bench.corpus, seed=seed, max_queries=max_queries or None, source=source,
                          data_dir=root, online=online)
        except (LookupError, ValueError, OSError) as e:  # WordNet missing, too few candidates, I/O
            fail(f"building {n!r}: {e}")
        folder = Path(target) / n
        built.write(folder)
        st = built.stats()
        grades = st.get("judged", {})
        t.add_row(n, str(st.get("queries")), str(st.get("passages")), str(st.get("source_documents", "")),
                  " / ".join(str(grades.get(g, "")) for g in ("2", "1", "0")), str(folder))
    out.print(t)
    console.print("run them by name (diag/<set>) when written to the default folder, or by path "
                  "(beyondsim run RETRIEVER --benchmark <folder>)", highlight=False)
