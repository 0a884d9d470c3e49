"""Retriever adapters: one module per method family, each behind the harness protocol."""
