"""What every table row says about its configuration besides its figures: the ``beyondsim``
command that reproduces it, the BibTeX of its method's paper (declared once with the method's
registered metadata, harness/core/registry.py), what it trained on and whether that overlaps the test
side of the benchmark, the facts of the models it used (recorded with each result by
harness/models/facts.py), and the tags the pages' filters read (:func:`tags`: the method's family,
whether it calls an LLM, its encoder, its trust level, its training). The overview, benchmark,
retriever and efficiency pages and their data files read them from here, so a row says the same on
each."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from harness.core.citation import Citation
from harness.core.leakage import family
from harness.models.facts import FACTS_KEY, facts_text, fmt_params
from harness.store.provenance import run_command
from harness.registry import registered_info

from ..compare import ConfigGroup, is_local, local_display
from ..text import DASH


def citation(retriever: str) -> Citation | None:
    """The registered citation of ``retriever``'s method; None for a method of no paper or a class
    this installation does not know."""
    info = registered_info(retriever)
    return getattr(info, "citation", None)


def bibtex(retriever: str) -> str:
    c = citation(retriever)
    return c.bibtex() if c is not None else ""


def where(benchmark: str) -> str:
    """A benchmark as a command names it: a folder benchmark by its own folder name, never the path
    it was run from (which may name a temporary directory or a user's home)."""
    return f"./{local_display(benchmark)}" if is_local(benchmark) else benchmark


def command(groups: Sequence[ConfigGroup]) -> str:
    """The ``beyondsim run`` line that recomputes ``groups`` (one configuration on one benchmark or
    several): its newest spec, every benchmark, its highest seed and depth."""
    if not groups:
        return ""
    rec = max((g.newest for g in groups), key=lambda r: (r.created_at, r.id or 0))
    benches = [where(g.newest.benchmark) for g in groups]
    return run_command(rec.spec, benches[0] if len(benches) == 1 else benches,
                       max(s for g in groups for s in g.seeds), rec.k)


def _entries(training: Any) -> list[Mapping[str, Any]]:
    if isinstance(training, Mapping):
        return [training]
    if isinstance(training, list):
        return [t for t in training if isinstance(t, Mapping)]
    return []


def training(groups: Iterable[ConfigGroup]) -> dict[str, Any]:
    """What a row trained on and whether it overlaps the test side of the benchmarks it is scored
    on: ``text`` (the splits of ``extra["training"]`` with their query counts, else the method's
    registered ``trains_on``, else "" for nothing trained), ``overlap`` (one line per overlap: a
    split of the same benchmark family as the test — ``nevir:train`` for ``nevir`` — or ids the
    result records as shared, ``shared_ids`` in a training entry) and ``flag``. A flag never moves
    a row: the reader decides."""
    groups = list(groups)
    splits: dict[str, str] = {}
    overlap: list[str] = []
    registered = ""
    for g in groups:
        info = registered_info(g.retriever)
        registered = registered or str(getattr(info, "trains_on", "") or "")
        test = g.benchmark
        for r in g.records:
            for t in _entries(r.extra.get("training") if isinstance(r.extra, Mapping) else None):
                name = str(t.get("benchmark") or "")
                if not name:
                    continue
                q = t.get("queries")
                splits.setdefault(name, f"{name} ({q:,} queries)" if isinstance(q, int) else name)
                shared = t.get("shared_ids")
                n_shared = len(shared) if isinstance(shared, list) else shared if isinstance(shared, int) else 0
                why = ""
                if name == test:
                    why = f"trained on {name}, the benchmark it is scored on"
                elif family(name) == family(test):
                    why = f"{name} is of the same benchmark family as {test} (held-out in-domain)"
                if n_shared:
                    why = (why + "; " if why else "") + f"{n_shared:,} ids shared with {test}"
                if why and why not in overlap:
                    overlap.append(why)
    text = "; ".join(splits.values()) or registered
    return {"text": text, "shown": text or DASH, "registered": registered, "overlap": overlap,
            "flag": bool(overlap), "title": "; ".join(overlap)}


def model_facts(groups: Iterable[ConfigGroup]) -> list[dict[str, Any]]:
    """The facts of the models a row's results recorded (``extra["model_facts"]``), one per model,
    newest result first; empty when none was recorded (results stored before it, or no model)."""
    out: dict[str, dict[str, Any]] = {}
    recs = sorted((r for g in groups for r in g.records), key=lambda r: (r.created_at, r.id or 0), reverse=True)
    for r in recs:
        facts = r.extra.get(FACTS_KEY) if isinstance(r.extra, Mapping) else None
        for f in facts if isinstance(facts, list) else []:
            if isinstance(f, Mapping) and f.get("model"):
                out.setdefault(str(f["model"]), dict(f))
    return list(out.values())


def facts_cell(groups: Iterable[ConfigGroup]) -> dict[str, Any]:
    facts = model_facts(groups)
    return {"facts": facts, "value": "; ".join(facts_text(f) for f in facts) or DASH}


def data_fields(groups: Sequence[ConfigGroup]) -> dict[str, Any]:
    """The row facts as columns of a table's CSV/JSON."""
    t = training(groups)
    facts = model_facts(groups)
    return {"command": command(groups), "trained_on": t["text"], "training_overlap": t["title"],
            "model_facts": "; ".join(facts_text(f) for f in facts),
            "bibtex": bibtex(groups[0].retriever) if groups else ""}


def view(groups: Sequence[ConfigGroup]) -> dict[str, Any]:
    """The row facts for a template: ``command``, ``bibtex``, ``training``, ``facts``."""
    return {"command": command(groups), "bibtex": bibtex(groups[0].retriever) if groups else "",
            "training": training(groups), "facts": facts_cell(groups)}


def uses_llm(groups: Sequence[ConfigGroup]) -> bool:
    """Whether a row's results called an LLM: the runner recorded one for them (``extra["llm"]``),
    else its method registered ``uses_llm=True`` (a rule that depends on the parameters counts only
    through what the runner recorded)."""
    if any(g.llm for g in groups):
        return True
    info = registered_info(groups[0].retriever) if groups else None
    flag = getattr(info, "uses_llm", False)
    return flag is True


def method_family(groups: Sequence[ConfigGroup]) -> str:
    """The kind of method a row is, as its retriever registered it (``family``: "lexical", "dense",
    …); "unregistered" for a class this installation does not know, "unknown" when none is declared."""
    info = registered_info(groups[0].retriever) if groups else None
    if info is None:
        return "unregistered"
    return str(getattr(info, "family", "") or "unknown")


def encoder_size(groups: Sequence[ConfigGroup]) -> str:
    """The parameter count of a row's encoder (``22.7M``), from the model facts its results recorded
    (the fact of the encoder role, else the first model's); "" when none was recorded."""
    facts = model_facts(groups)
    chosen = next((f for f in facts if f.get("role") == "encoder"), facts[0] if facts else None)
    if chosen is None or not chosen.get("parameters"):
        return ""
    return fmt_params(chosen.get("parameters"))


TAG_SEPARATOR = "|"  # between the values of one data-* attribute a row has several of (data-trained)


def tags(groups: Sequence[ConfigGroup], *, label: str, trust: str, encoder: str, llm: str) -> dict[str, str]:
    """The ``data-*`` attributes the pages' filters read on a row (``templates/_sort.js``): ``family``,
    ``llm`` (``yes``/``no``), ``encoder`` (its short name, ``none``), ``trust``, ``trained`` (``none``,
    or ``trained`` and, when it overlaps the test side, ``|overlap``) and ``search`` (the text the
    search box matches: label, retriever, family, encoder, LLM, training; lower case)."""
    t = training(groups)
    fam = method_family(groups)
    trained = "none" if not t["text"] else "trained" + (TAG_SEPARATOR + "overlap" if t["flag"] else "")
    retriever = groups[0].retriever if groups else ""
    search = " ".join(x for x in (label, retriever, fam, encoder, llm, t["text"]) if x).lower()
    return {"family": fam, "llm": "yes" if uses_llm(groups) else "no", "encoder": encoder or "none",
            "trust": trust, "trained": trained, "search": search}
