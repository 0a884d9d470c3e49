"""Performance scripts (run by hand; not benchmarks in the registry sense)."""
