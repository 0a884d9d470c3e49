"""Performance scripts, run by hand (``python -m tests.perf.fista``): they time retrievers, so they
live with the tests rather than in ``benchmarks`` (which never imports ``retrievers``). Their file
names do not match ``test_*.py``, so pytest does not collect them."""
