"""The pages of the static site, one module each. Every module has ``render(site)``, which writes
its pages from the comparison objects in ``site.board`` (:class:`reports.compare.Leaderboard`)
through :meth:`reports.pages.common.Site.page`."""

from __future__ import annotations

from . import benchmark, drilldown, efficiency, overview, retriever

PAGES = (benchmark, efficiency, retriever, drilldown, overview)

__all__ = ["PAGES"]
