"""The measures moved to :mod:`harness.measures`; this name stays importable for code written
against it (``from harness.metrics import evaluate``)."""

from .measures import *  # noqa: F401,F403
from .measures import __all__  # noqa: F401
