"""``python -m harness.cli``: the ``beyondsim`` command."""

from . import main

main()
