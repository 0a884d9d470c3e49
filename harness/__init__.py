"""beyondsim engine: types, registry, runner, measures, ledger, store, CLI."""

__version__ = "0.2.0"
