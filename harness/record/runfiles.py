"""``beyondsim export DIR --format trec``: one TREC run file per stored result and, beside it, its
run metadata in the ir_metadata format (https://www.ir-metadata.org: a YAML document whose sections
follow the PRIMAD model — platform, implementation, method, data — as TIREx and CLEF LongEval ask
of submitted runs).

``<benchmark>__<label>__<spec hash>__seed<N>.trec`` holds the ranking; ``….ir-metadata.yml`` holds:

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
nothing in the file names a local folder or an API key (results never store one).
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any, Mapping, Optional

from ..cost.figures import Costs
from ..store.exchange import base_name, names_folder
from ..core.ledger import call_totals
from ..models.facts import FACTS_KEY
from ..store.provenance import run_command
from ..core.registry import registered_info

METADATA_SUFFIX = ".ir-metadata.yml"


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


def export_trec(store: Any, out_dir: Path, benchmark: Optional[str] = None, retriever: Optional[str] = None) -> int:
    """Write every stored result (filtered by ``benchmark`` / ``retriever``) as a TREC run file and its
    ir_metadata file, each through a temporary file; the number of results written."""
    import yaml

    from ..core.types import Run

    out_dir.mkdir(parents=True, exist_ok=True)
    records = list(store.results(benchmark=benchmark, retriever=retriever))
    costs = Costs(store.results()) if records else None
    n = 0
    for rec in records:
        stem = "__".join(re.sub(r"[^A-Za-z0-9._-]+", "_", x).strip("_") or "x"
                         for x in (where(rec.benchmark), rec.label, rec.spec_hash, f"seed{rec.seed}"))
        tag = re.sub(r"\s+", "_", rec.label) or "run"
        path = out_dir / f"{stem}.trec"
        tmp = path.with_name(f".{path.name}.tmp")
        Run(store.rankings(rec.id)).to_trec(tmp, tag=tag)
        os.replace(tmp, path)
        meta = out_dir / f"{stem}{METADATA_SUFFIX}"
        tmp = meta.with_name(f".{meta.name}.tmp")
        text = ("# ir_metadata (https://www.ir-metadata.org) of the run in " + path.name
                + "; 'resources' is beyondsim's addition (cold and this run's cost)\n"
                + yaml.safe_dump(metadata(rec, costs, tag), sort_keys=False, allow_unicode=False, width=120))
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, meta)
        n += 1
    return n
