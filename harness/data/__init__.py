"""Benchmark data: the data directory, the strict readers (every bad input names file, line and
field), the data manifest, WordNet and the shared stopword list. Imports only ``core``.

``harness.data`` is a public name for benchmark plug-ins: the readers' names are importable from it.
"""

from .readers import (DataError, MissingDataError, default_data_dir, default_home, missing_files, require_files,
                      not_utf8, read_lines, iter_jsonl, read_json, get_field, read_qrels_tsv, read_pairs_tsv,
                      parse_grade, benchmark_warnings, DatasetInfo, BenchmarkLoader)
from ..core.types import BenchmarkMeta

