"""``beyondsim export DIR --format trec``: one TREC run file per stored result and, beside it, its
run metadata in the ir_metadata format (https://www.ir-metadata.org: a YAML document whose sections
follow the PRIMAD model — platform, implementation, method, data — as TIREx and CLEF LongEval ask
of submitted runs).

``<benchmark>__<label>__k<N>__<spec hash>__seed<N>.trec`` holds the ranking (:func:`file_stems`:
each part cut, with a short hash of it, so that a name is at most :data:`MAX_NAME_BYTES` bytes;
never starting with a dot or a dash; the result key added when two results would still share a
name); ``….ir-metadata.yml`` holds:

* ``tag`` (the run tag of the TREC file) and ``research goal.description``;
* ``platform``: ``hardware.cpu.architecture``, ``hardware.gpu.model`` (on a GPU),
  ``operating system.platform``, ``software.libraries`` (Python, the harness, torch,
  sentence-transformers, … with their versions), ``software.retrieval toolkit``;
* ``implementation``: ``executable.cmd`` (the ``beyondsim run`` line that recomputes the run),
  ``source.lang``, ``source.commit`` and ``source.package`` where the retriever's provenance has them;
* ``method``: ``automatic``, ``retrieval`` (the retriever, its family, its parameters, its paper's
  citation key), ``models`` (parameters, dimension and max tokens of its encoders, where recorded);
* ``data``: ``test collection`` (name, version, queries) and ``training data`` (the splits it
  trained on);
* ``resources`` (this harness's addition, which the format's extensibility allows, as TIREx's tracker
  adds its own): cold and this run's offline/online seconds, LLM calls, tokens and dollars
  (harness/cost/figures.py).

A benchmark read from a folder is named by its folder name, never by the path it was run from;
nothing in the file names a local folder or an API key (results never store one). A TREC run file's
fields are separated by white space, so a result whose query or document ids hold white space
cannot be written as one: the export refuses it, naming the result and the id, before it writes
any file.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path
from typing import Any, Iterable, Mapping, Optional, Sequence

from ..cost.figures import Costs
from ..core.errors import UserError
from ..store.exchange import base_name, names_folder, plain
from ..store.results import slot_of
from ..core.ledger import call_totals
from ..models.facts import FACTS_KEY
from ..store.provenance import run_command
from ..core.registry import registered_info

METADATA_SUFFIX = ".ir-metadata.yml"
RUN_SUFFIX = ".trec"
MAX_NAME_BYTES = 200  # a file name, suffix included (file systems allow 255; the temporary file adds a few)
_HASH = 8  # hex digits of the hash that keeps a cut part of a name unique


class TrecExportError(UserError, ValueError):
    """A result that cannot be written as a TREC run file; nothing was written."""


def where(benchmark: str) -> str:
    """A benchmark as a command names it: a folder by ``./<its folder name>`` (and its query slice)."""
    if not names_folder(benchmark):
        return benchmark
    last = re.split(r"[\\/]", base_name(benchmark).rstrip("/\\"))[-1]
    return f"./{last}{benchmark[len(base_name(benchmark)):]}"


def _training(extra: Mapping[str, Any]) -> list[dict[str, Any]]:
    t = extra.get("training")
    entries = [t] if isinstance(t, Mapping) else [x for x in t if isinstance(x, Mapping)] if isinstance(t, list) else []
    return [{"name": where(str(e.get("benchmark", ""))), **({"version": str(e["benchmark_version"])}
             if e.get("benchmark_version") else {}), **({"queries": e["queries"]} if isinstance(e.get("queries"), int)
                                                       else {})} for e in entries if e.get("benchmark")]


def metadata(rec: Any, costs: Costs, tag: str) -> dict[str, Any]:
    """The ir_metadata document of one stored result (see the module docstring)."""
    env = rec.environment if isinstance(rec.environment, Mapping) else {}
    prov = rec.provenance if isinstance(rec.provenance, Mapping) else {}
    extra = rec.extra if isinstance(rec.extra, Mapping) else {}
    info = registered_info(rec.retriever)
    libraries = [f"{k} {env[k]}" for k in ("python", "torch", "numpy", "faiss-cpu", "bm25s", "sentence-transformers",
                                           "transformers", "pytrec-eval-terrier") if env.get(k)]
    hardware: dict[str, Any] = {"cpu": {"architecture": str(env.get("machine", ""))}, "device": str(env.get("device", ""))}
    if env.get("gpu"):
        hardware["gpu"] = {"model": str(env["gpu"]), **({"cuda": str(env["cuda"])} if env.get("cuda") else {})}
    source: dict[str, Any] = {"lang": ["Python"]}
    for key, name in (("git_commit", "commit"), ("package", "package"), ("package_version", "package version")):
        if prov.get(key):
            source[name] = str(prov[key])
    citation = getattr(info, "citation", None)
    retrieval = {"name": rec.retriever, "label": rec.label, "spec hash": rec.spec_hash,
                 "params": dict((rec.spec or {}).get("params") or {}), "k": rec.k}
    if getattr(info, "family", ""):
        retrieval["family"] = info.family
    if citation is not None:
        retrieval["reference"] = citation.key
        retrieval["bibtex"] = citation.bibtex()
    c = costs.of(rec)
    calls = call_totals(rec.llm_calls)
    llm = extra.get("llm") if isinstance(extra.get("llm"), Mapping) else {}
    resources = {
        "cold": {"offline s": c.offline_s, "online s": c.online_s, "total s": c.total_s, "model loading s": c.model_s,
                 "cached parts": list(c.cached), "basis": c.cold_basis, **c.cold_usd.fields("usd")},
        "this run": {"offline s": c.run_offline_s, "online s": c.run_online_s, "total s": c.run_total_s,
                     **c.usd.fields("usd")},
        "llm": {"model": str(llm.get("model", "")), "calls": calls["calls"], "cache hits": calls["cache_hits"],
                "prompt tokens": calls["prompt_tokens_known"], "completion tokens": calls["completion_tokens_known"],
                "calls without usage": calls["usage_unknown_calls"]},
    }
    doc: dict[str, Any] = {
        "tag": tag,
        "research goal": {"description": f"{rec.label} ({rec.retriever}) on {where(rec.benchmark)}, seed {rec.seed}, "
                                         f"computed by beyondsim {rec.harness_version}"},
        "platform": {"hardware": hardware, "operating system": {"platform": str(env.get("platform", ""))},
                     "software": {"libraries": libraries,
                                  "retrieval toolkit": [f"beyondsim {env.get('harness', rec.harness_version)}"]}},
        "implementation": {"executable": {"cmd": run_command(rec.spec, where(rec.benchmark), rec.seed, rec.k)},
                           "source": source},
        "method": {"automatic": True, "retrieval": [retrieval],
                   **({"models": list(extra[FACTS_KEY])} if isinstance(extra.get(FACTS_KEY), list) else {})},
        "data": {"test collection": {"name": where(rec.benchmark), "version": rec.benchmark_version,
                                     "queries": rec.n_queries},
                 **({"training data": _training(extra)} if _training(extra) else {})},
        "resources": resources,
    }
    return doc


def _part(text: str, limit: int) -> str:
    """``text`` as one part of a file name: runs of characters other than letters, digits, ``.``,
    ``_`` and ``-`` as ``_``; no leading or trailing ``.``, ``_`` or ``-`` (never a hidden file, never
    an option); at most ``limit`` characters, a longer one cut and ended by a hash of the whole."""
    clean = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._-") or "x"
    if len(clean) <= limit:
        return clean
    digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH]
    return (clean[:max(1, limit - _HASH - 1)].rstrip("._-") or "x") + "-" + digest


def _stem(rec: Any, extra: Sequence[str] = ()) -> str:
    """``<benchmark>__<label>__k<N>[__<extra>…]__<spec hash>__seed<N>``, at most
    :data:`MAX_NAME_BYTES` bytes with the longest suffix: the benchmark and the label share what the
    fixed parts leave (each cut with its hash by :func:`_part`)."""
    fixed = [f"k{int(rec.k)}", *(_part(x, 64) for x in extra), _part(str(rec.spec_hash), 64), f"seed{int(rec.seed)}"]
    room = MAX_NAME_BYTES - len(max(RUN_SUFFIX, METADATA_SUFFIX, key=len)) - sum(map(len, fixed)) - 2 * (len(fixed) + 1)
    bench, label = where(rec.benchmark), str(rec.label)
    label_clean = len(re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("._-") or "x")
    b = _part(bench, max(room // 2, room - label_clean))
    return "__".join([b, _part(label, room - len(b)), *fixed])


def file_stems(records: Sequence[Any]) -> list[str]:
    """One file stem per record (:func:`_stem`), every one unique: records that would share one
    (two results of a configuration on benchmarks whose names differ only in what a file name
    cannot hold, two benchmark or harness versions, a result held both as computed here and as
    imported) get their result key in it, and then their slot."""
    stems = [_stem(r) for r in records]
    for extra in (lambda r: [str(r.key)], lambda r: [str(r.key), slot_of(r.extra)],
                  lambda r: [str(r.key), slot_of(r.extra), str(getattr(r, "id", ""))]):
        seen: dict[str, int] = {}
        for s_ in stems:
            seen[s_] = seen.get(s_, 0) + 1
        if all(n == 1 for n in seen.values()):
            break
        stems = [_stem(r, extra(r)) if seen[s_] > 1 else s_ for r, s_ in zip(records, stems)]
    return stems


def _spaced(ids: Iterable[str]) -> str | None:
    """The first id that a TREC field cannot hold (empty, or holding white space), else ``None``."""
    for x in ids:
        if not x or any(c.isspace() for c in x):
            return x
    return None


def trec_problem(rec: Any, rankings: Mapping[str, Sequence[tuple[str, float]]]) -> str | None:
    """Why ``rec`` cannot be written as a TREC run file (a query or document id a field cannot
    hold), as one line naming the result and the id; ``None`` when it can."""
    what = f"result {plain(rec.key)} ({plain(rec.label)} on {plain(where(rec.benchmark))}, seed {rec.seed})"
    q = _spaced(rankings)
    if q is not None:
        return (f"{what}: query id {q!r} holds white space (or is empty), which a TREC run file's fields, "
                "separated by white space, cannot hold")
    for qid, ranking in rankings.items():
        d = _spaced(doc for doc, _ in ranking)
        if d is not None:
            return (f"{what}: document id {d!r} (query {qid!r}) holds white space (or is empty), which a TREC run "
                    "file's fields, separated by white space, cannot hold")
    return None


def export_trec(store: Any, out_dir: Path, benchmark: Optional[str] = None,
                retriever: Optional[str] = None) -> tuple[int, list[Path]]:
    """Write every stored result (filtered by ``benchmark`` / ``retriever``) as a TREC run file and its
    ir_metadata file (:func:`file_stems` names them), each through a temporary file; returns the
    number of results and the files written. Every result is checked first: one whose ids a TREC
    file cannot hold refuses the export (:class:`TrecExportError`, one line per such result) before
    any file is written."""
    import yaml

    from ..core.types import Run

    records = list(store.results(benchmark=benchmark, retriever=retriever))
    problems = [p for p in (trec_problem(rec, store.rankings(rec.id)) for rec in records) if p]
    if problems:
        raise TrecExportError(f"cannot export {len(problems)} result(s) as TREC run files; nothing was written (-b/-r "
                              "export the others):\n" + "\n".join(f"  - {p}" for p in problems))
    out_dir.mkdir(parents=True, exist_ok=True)
    costs = Costs(store.results()) if records else None
    written: list[Path] = []
    for rec, stem in zip(records, file_stems(records)):
        tag = re.sub(r"\s+", "_", rec.label) or "run"
        path = out_dir / f"{stem}{RUN_SUFFIX}"
        meta = out_dir / f"{stem}{METADATA_SUFFIX}"
        text = ("# ir_metadata (https://www.ir-metadata.org) of the run in " + path.name
                + "; 'resources' is beyondsim's addition (cold and this run's cost)\n"
                + yaml.safe_dump(metadata(rec, costs, tag), sort_keys=False, allow_unicode=False, width=120))
        for target, write in ((path, lambda tmp: Run(store.rankings(rec.id)).to_trec(tmp, tag=tag)),
                              (meta, lambda tmp: tmp.write_text(text, encoding="utf-8"))):
            tmp = target.with_name(f".{target.name}.tmp")
            try:
                write(tmp)
                os.replace(tmp, target)
            finally:
                tmp.unlink(missing_ok=True)
            written.append(target)
    return len(records), written
