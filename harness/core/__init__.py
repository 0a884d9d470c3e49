"""The vocabulary every other layer speaks: errors, the data types (with ``BenchmarkMeta``), the
registry of retrievers, benchmarks, suites and the other entry-point groups, the retriever protocols
and ``RunContext``, citations, progress, training-data leakage checks, the ledger of phases and LLM
calls, deterministic top-k (``topk``) and atomic folder replacement (``files``). Imports nothing of
``harness`` outside this package."""
