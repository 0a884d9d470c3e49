"""The reference results that ship with the project, and what reproducing them must give.

Files (entry point group ``beyondsim.reference``, name ``builtin``; :data:`FILES`):

* ``plan.toml``: which configurations (retriever, parameters, seeds) run on which benchmarks to
  make the reference results, with the slice and the reason where a method runs on fewer queries;
* ``bundle.jsonl.gz``: those results as one compressed export (per-query measures, top-10
  rankings, spec, provenance, environment, ledger), made by ``beyondsim reference build``;
* ``expected.toml``: the reproduction matrix, ``(retriever spec, benchmark, measure) → expected
  value ± tolerance``, from the reference runs and, where a paper reports a figure on the same data
  and model, the published figure with its source table (``beyondsim reproduce``).
"""

from __future__ import annotations

from pathlib import Path

HERE = Path(__file__).resolve().parent
FILES = {"plan": HERE / "plan.toml", "bundle": HERE / "bundle.jsonl.gz", "expected": HERE / "expected.toml"}
