"""``harness.protocols``, the public name of :mod:`harness.core.protocols` (the retriever protocols) that plug-ins import.

This module is that module: importing it puts :mod:`harness.core.protocols` in its place, so an attribute
set through either name (a test's monkeypatch, a registration) is seen through both.
"""

import sys

from .core import protocols as _module

sys.modules[__name__] = _module
