"""The reference tables of ``docs/reference/``, written from the registered metadata.

``python -m harness.record.docs_tables [DIR]`` (``make docs``) writes three Markdown files into ``DIR``
(default ``docs/reference`` under the current directory):

* ``retrievers.md`` — every retriever an entry point of the project's own distribution registers
  (group ``beyondsim.retrievers``): its name, family, description, paper, what it trains on, its
  parameters with their defaults, and its citation key;
* ``benchmarks.md`` — every concrete benchmark its loaders list (``variants()``, group
  ``beyondsim.benchmarks``): task, headline measures, relevance threshold, description, source,
  licence, and the benchmarks that score its queries under a paper's protocol;
* ``measures.md`` — every registered measure family (:mod:`harness.measures`): direction, what
  its mean is averaged over, what a benchmark needs for it, decimals, chance level, description;
  and the measures each task family gets by default.

Only the project's distribution is read, never an in-process registration or another installed
package's entry point, so the tables are the same wherever they are written. They hold no
timestamp and no machine path, and every list is sorted (measures keep their registration order,
the order of the pages' columns), so writing them twice gives the same bytes;
``tests/test_docs.py`` regenerates them in memory and compares them with the committed files.
"""

from __future__ import annotations

import dataclasses
import sys
from importlib.metadata import entry_points, packages_distributions
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .. import measures
from ..data.readers import default_home
from ..core.registry import BENCHMARK_GROUP, FOLDER_LOADER, RETRIEVER_GROUP, retriever_info

OUT_DIR = Path("docs") / "reference"
HEADER = "<!-- Written by `python -m harness.record.docs_tables` (`make docs`) from the registered metadata; do not edit. -->"


def _distribution() -> str:
    """The name of the distribution that installs this package (the project's own)."""
    names = packages_distributions().get(__name__.split(".")[0]) or ["beyondsim"]
    return sorted(names)[0]


def _own_entry_points(group: str) -> list[Any]:
    dist = _distribution()
    return sorted((ep for ep in entry_points(group=group) if ep.dist is not None and ep.dist.name == dist),
                  key=lambda ep: ep.name)


def portable(text: Any) -> str:
    """``text`` with this machine's paths named as a user would write them: the home of the store
    (a loader's description may say where it writes) as ``$BEYONDSIM_HOME``, the user's home as
    ``~``."""
    s = str(text)
    for path, name in ((str(default_home()), "$BEYONDSIM_HOME"), (str(Path.home()), "~")):
        if len(path) > 1:
            s = s.replace(path, name)
    return s


def cell(text: Any) -> str:
    """``text`` as one Markdown table cell: one line, pipes escaped, no machine path."""
    return " ".join(portable(text).split()).replace("|", "\\|")


def code(text: Any) -> str:
    """``text`` as inline code in a table cell (a backtick inside takes a longer fence)."""
    s = " ".join(portable(text).split()).replace("|", "\\|")
    fence = "``" if "`" in s else "`"
    return f"{fence}{s}{fence}" if s else ""


def table(columns: Sequence[str], rows: Iterable[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return lines


def _default(f: dataclasses.Field) -> str:
    if f.default is not dataclasses.MISSING:
        return repr(f.default)
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return repr(f.default_factory())  # type: ignore[misc]
    return "(required)"


def _params(pcls: type) -> str:
    fields = dataclasses.fields(pcls) if dataclasses.is_dataclass(pcls) else ()
    return "<br>".join(code(f"{f.name}={_default(f)}") for f in fields) or "(none)"


def _page(title: str, intro: str, body: list[str]) -> str:
    return "\n".join([HEADER, "", f"# {title}", "", intro, "", *body]).rstrip() + "\n"


# ---------------------------------------------------------------------------------------------


def retrievers_md() -> str:
    rows = []
    for ep in _own_entry_points(RETRIEVER_GROUP):
        cls = ep.load()
        info = retriever_info(cls)
        trains = cell(info.trains_on) if info.trains_on else "–"
        if info.trainer:
            trains += f" (artifact: `beyondsim train {info.trainer}`, parameter {code(info.artifact_param)})"
        llm = info.uses_llm
        uses = "yes" if llm is True else "by parameters" if callable(llm) else "no"
        cite = code(info.citation.key) if info.citation else "–"
        rows.append([code(ep.name), cell(info.family), cell(info.description), cell(info.paper), cite, uses,
                     trains, code(ep.value), _params(getattr(cls, "Params", None) or type(None))])
    intro = ("Every registered retriever, from what it declares with `@register` (harness/core/registry.py). "
             "`beyondsim list retrievers` shows the same; a parameter is set with "
             "`-p NAME.KEY=VALUE` on the command line. The BibTeX entries are in `retrievers/citations.py`; "
             "the methods' notes are in [docs/methods](../methods/).")
    cols = ["name", "family", "description", "paper", "citation", "LLM", "trains on", "class", "parameters (defaults)"]
    return _page("Retrievers", intro, table(cols, rows))


def _loaders() -> list[tuple[str, type]]:
    out = []
    for ep in _own_entry_points(BENCHMARK_GROUP):
        if ep.name != FOLDER_LOADER:
            out.append((ep.name, ep.load()))
    return out


def benchmarks_md() -> str:
    rows, seen = [], set()
    loaders = _loaders()
    for ep_name, loader in loaders:
        variants: Callable[[], Iterable[str]] | None = getattr(loader, "variants", None)
        names = list(variants()) if callable(variants) else ([] if ep_name.endswith("/*") else [ep_name])
        for name in names:
            if name in seen:
                continue
            seen.add(name)
            info = loader.info(name)
            protocols = getattr(loader, "protocol_variants", None)
            other = protocols(name) if callable(protocols) else {}
            rows.append((name, [
                code(name), code(f"{loader.__module__}:{loader.__qualname__}"), cell(info.task),
                ", ".join(code(m) for m in info.default_measures) or "–",
                str(info.relevance_threshold), cell(info.description), cell(info.source),
                cell(info.license),
                "<br>".join(f"{code(k)}: {cell(v)}" for k, v in sorted(other.items())) or "–"]))
    rows.sort(key=lambda r: r[0])
    loader_rows = [[code(n), code(f"{c.__module__}:{c.__qualname__}"), cell(getattr(c, "task", ""))]
                   for n, c in loaders]
    intro = ("Every benchmark the project's loaders list (each split and family member), from the loaders' "
             "metadata (entry point group `beyondsim.benchmarks`). A benchmark's *version* is the "
             "fingerprint of its content, computed when it loads, so it is not listed here. The default "
             "measures are the loader's (`default_measures`); every result also gets its task family's measures "
             "([measures.md](measures.md#defaults-by-task)). A document is relevant for R, MAP, P, RR and "
             "Comp when its grade reaches the relevance threshold. Any BEIR-format folder also runs as a "
             "benchmark when given by path (the `folder` loader).")
    body = ["## Loaders", "", *table(["entry point", "class", "task"], loader_rows), "", "## Benchmarks", "",
            *table(["name", "loader class", "task", "default measures", "relevance threshold", "description", "source",
                    "licence", "scored under a paper's protocol by"], [r for _, r in rows])]
    return _page("Benchmarks", intro, body)


def measures_md() -> str:
    rows = []
    for cls in measures.families():
        name = f"{cls.family}@k" if cls.has_cutoff else cls.family
        chance = "–" if cls.chance is None else f"{cls.chance:g}" + (f" ({cell(cls.chance_why)})" if cls.chance_why else "")
        rows.append([code(name), "higher" if cls.higher_is_better else "lower", cell(cls.averaged_over),
                     ", ".join(sorted(cls.needs)) or "–", str(cls.decimals), chance, cell(cls.description),
                     code(cls.__module__)])
    defaults = [[code(task), ", ".join(code(m) for m in ms)] for task, ms in sorted(measures.TASK_DEFAULTS.items())]
    intro = ("Every registered measure family (harness/measures/), in the order the pages show their columns. "
             "A name with `@k` takes a cutoff (`nDCG@10`). *Better* is the direction in which a figure "
             "improves; a mean over a subset of the queries is shown with its count. The design is in "
             "[docs/design/measures.md](../design/measures.md).")
    body = [*table(["measure", "better", "averaged over", "needs", "decimals", "chance", "description", "module"],
                   rows), "", "## Defaults by task", "",
            "The measures every result of a task family gets, besides its benchmark's own headline measures "
            "(`TASK_DEFAULTS`).", "", *table(["task", "measures"], defaults)]
    return _page("Measures", intro, body)


PAGES: dict[str, Callable[[], str]] = {"retrievers.md": retrievers_md, "benchmarks.md": benchmarks_md,
                                       "measures.md": measures_md}


def render() -> dict[str, str]:
    """Each file name of ``docs/reference/`` with its text."""
    return {name: page() for name, page in PAGES.items()}


def write(out_dir: Path = OUT_DIR) -> list[Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render().items():
        path = out_dir / name
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    for path in write(Path(args[0]) if args else OUT_DIR):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
