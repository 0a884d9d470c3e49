"""The errors a user can fix.

:class:`UserError` is the base of every error the engine raises for something the user can act
on — bad input files, bad configuration or parameters, a retriever that breaks the protocol, a
store that cannot be opened. The command line prints one of these as one line (the message
names the file, line and field where there is one) and exits non-zero; any other exception is a
bug and propagates with its traceback. A subclass keeps the builtin it used to be (``ValueError``,
``LookupError``, …) as a second base, so code that catches those still does.
"""

from __future__ import annotations


class UserError(Exception):
    """Something the user can fix; its message is printed as one line, without a traceback."""
