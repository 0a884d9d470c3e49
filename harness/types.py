"""``harness.types``, the public name of :mod:`harness.core.types` (the data types) that plug-ins import.

This module is that module: importing it puts :mod:`harness.core.types` in its place, so an attribute
set through either name (a test's monkeypatch, a registration) is seen through both.
"""

import sys

from .core import types as _module

sys.modules[__name__] = _module
