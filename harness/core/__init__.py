"""The vocabulary every other layer speaks: errors, the data types, the registry of retrievers and
benchmarks, the retriever protocols, citations, progress, training-data leakage checks, the ledger
of phases, and deterministic top-k. Imports nothing of ``harness`` outside this package."""
