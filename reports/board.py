"""The leaderboard as files: the static site or the paper tables, from a results store
(docs/design/store.md#the-site). The command line calls :func:`write_board`; bringing the shipped
reference results into the store first is the engine's (:func:`harness.record.bundle.ensure_imported`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

from harness.store.results import ResultRecord, Store

from .compare import compare
from .site import render_site
from .tables import combined, write_tables

FORMATS = ("html", "md", "latex", "json")


def write_board(store: Store, out_dir: Path, fmt: str = "html", *,
                include: Callable[[ResultRecord], bool] | None = None, force: bool = False) -> list[Path]:
    """Write the leaderboard of ``store`` in ``fmt``: the site (returns ``[index.html]``), or the
    tables of :mod:`reports.tables` into ``out_dir`` (returns the files written), or to stdout
    when ``out_dir`` is ``-`` (returns ``[]``). ``include``: the results shown (all when ``None``);
    ``force``: write the site into a folder that is not one (:func:`reports.site.render_site`)."""
    if fmt not in FORMATS:
        raise ValueError(f"the board's format must be one of {', '.join(FORMATS)}, not {fmt!r}")
    if fmt == "html":
        return [render_site(store, out_dir, include=include, force=force)]
    board = compare(store, include=include)
    if str(out_dir) == "-":
        sys.stdout.write(combined(board, fmt))
        return []
    return write_tables(board, fmt, out_dir)
