"""The ``beyondsim`` verbs of the method packages (entry point group ``beyondsim.commands``):
``beyondsim deo agreement`` and ``beyondsim coder wordnet``. A command only parses its options and
prints; the work is done by the method's module, imported when the command runs, so mounting these
verbs costs the CLI no import of torch or a model."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Optional

import typer

from harness.cli.console import fail as _fail
from harness.cli.options import TYPER_SETTINGS, DataDirOpt, HomeOpt, LlmBaseUrlOpt, LlmModelOpt

deo_app = typer.Typer(help="DEO's query decomposers.", **TYPER_SETTINGS)
coder_app = typer.Typer(help="CoDeR's compatibility-encoder training data.", **TYPER_SETTINGS)


@deo_app.command("agreement")
def deo_agreement(
    benchmark: list[str] = typer.Option(..., "--benchmark", "-b", help="Benchmark whose queries are decomposed "
                                        "(repeatable)."),
    max_queries: Optional[int] = typer.Option(None, "--max-queries", help="Only the first N judged queries."),
    max_tokens: Optional[int] = typer.Option(None, "--max-tokens", help="Reply length of a decomposition "
                                             "(default: the deo retriever's)."),
    json_schema: str = typer.Option("auto", "--json-schema", help="auto, on or off: constrain the reply to the "
                                    "decomposition's JSON schema."),
    llm_base_url: LlmBaseUrlOpt = None,
    llm_model: LlmModelOpt = None,
    data_dir: DataDirOpt = None,
    home: HomeOpt = None,
    rows: Optional[Path] = typer.Option(None, "--rows", help="Also write per-query rows here (JSON lines)."),
) -> None:
    """How often the rule-based decomposer (deo-rules) agrees with the LLM's (deo) on a benchmark's
    queries, as JSON; the LLM replies come from the shared cache when a deo run already asked them."""
    from harness.data import default_data_dir, default_home
    from harness.models.llm import LLMClient, LLMSettings
    from harness.registry import load_benchmark

    from .deo import DeoParams, decomposer_agreement

    if json_schema not in ("auto", "on", "off"):
        _fail(f"--json-schema must be auto, on or off, not {json_schema!r}")
    root = default_data_dir(data_dir)
    benches = [load_benchmark(name, root) for name in benchmark]
    try:
        settings = LLMSettings.resolve({}, base_url=llm_base_url, model=llm_model)
    except ValueError as e:  # the LLM settings
        _fail(str(e))
    if max_queries:
        benches = [b.head(max_queries) for b in benches]
    params = DeoParams(json_schema=json_schema, **({} if max_tokens is None else {"max_tokens": max_tokens}))
    with LLMClient(settings, cache_path=default_home(home) / "cache" / "llm.sqlite") as llm, \
            (open(rows, "w", encoding="utf-8") if rows else contextlib.nullcontext()) as rows_file:
        summary = decomposer_agreement(benches, llm, params, rows_file)
    typer.echo(json.dumps(summary, indent=2, default=str))


@coder_app.command("wordnet")
def wordnet_triplets(
    out: Path = typer.Option(..., "--out", help="Output folder."),
    nltk_data: Optional[Path] = typer.Option(None, "--nltk-data", help="Folder holding corpora/wordnet, or "
                                             "nltk_data-wordnet.tar.gz."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Where a --nltk-data tarball is extracted "
                                             "(default $BEYONDSIM_HOME/nltk_data)."),
    download: bool = typer.Option(False, "--download", help="nltk.download('wordnet') if not found."),
    seed: int = typer.Option(42, "--seed", help="Seed of the per-anchor sampling and the train/val split."),
    val_ratio: float = typer.Option(0.1, "--val-ratio", help="Share of anchors held out for validation."),
    max_pos_per_anchor: int = typer.Option(10, "--max-pos-per-anchor"),
    max_neg_per_anchor: int = typer.Option(10, "--max-neg-per-anchor"),
    max_triplets_per_anchor: int = typer.Option(20, "--max-triplets-per-anchor"),
) -> None:
    """Build CoDeR's stage-1 word-level triplets (synonym positive, antonym hard negative) from
    WordNet, with the antonym and synonym pairs they come from."""
    from . import coder_wordnet as cw

    try:
        n = cw.build_stage1_files(out, nltk_data=nltk_data, cache_dir=cache_dir, download=download, seed=seed,
                                  val_ratio=val_ratio, max_pos_per_anchor=max_pos_per_anchor,
                                  max_neg_per_anchor=max_neg_per_anchor,
                                  max_triplets_per_anchor=max_triplets_per_anchor)
    except (cw.WordNetUnavailable, ValueError) as e:
        _fail(str(e))
    typer.echo(f"antonym pairs:  {n['antonym_pairs']:>8,}  -> {out / cw.ANT_FILE}")
    typer.echo(f"synonym pairs:  {n['synonym_pairs']:>8,}  -> {out / cw.SYN_FILE}")
    typer.echo(f"train triplets: {n['train_triplets']:>8,}  ({n['train_anchors']:,} anchors) -> {out / cw.TRAIN_FILE}")
    typer.echo(f"val triplets:   {n['val_triplets']:>8,}  ({n['val_anchors']:,} anchors) -> {out / cw.VAL_FILE}")
