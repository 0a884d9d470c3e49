"""Benchmark loaders, diagnostic sets and suites for beyondsim.

Each loader is a class with ``info(name)`` and ``load(name, data_dir, online=False)`` (see
``harness.data.BenchmarkLoader``), registered through the ``beyondsim.benchmarks`` entry points.
Shared reading and validation code lives in :mod:`benchmarks.loader`.
"""

from pathlib import Path

MANIFEST = Path(__file__).resolve().parent / "manifest.json"
"""Expected checksums and counts of the released files (``beyondsim data verify``); regenerate
with ``beyondsim data manifest --out benchmarks/manifest.json``."""
