"""How long steps report their progress: the :class:`Progress` protocol, and :class:`NullProgress`,
which reports nothing. The command line supplies a console one; the encoder pool and the
retrievers only call ``track``."""

from __future__ import annotations

import contextlib
from typing import Callable, Iterator, Protocol


class Progress(Protocol):
    def track(self, total: int, description: str) -> contextlib.AbstractContextManager[Callable[[int], None]]: ...


class NullProgress:
    """A progress reporter that reports nothing (tests, library use)."""

    @contextlib.contextmanager
    def track(self, total: int, description: str) -> Iterator[Callable[[int], None]]:
        yield lambda n=1: None
