"""beyondsim engine: types, registry, runner, metrics, ledger, store, CLI."""

__version__ = "0.1.0"
