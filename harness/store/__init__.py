"""The results store and what travels with a result: the SQLite store and its schema upgrades,
export/import files, provenance, and the trust levels derived from a result's origin. Imports
``core``, ``data``, ``measures`` and ``models``."""
