"""The pages of the static site, one module each. Every module has ``render(site)``, which writes
its pages from the comparison objects in ``site.board`` (:class:`reports.compare.Leaderboard`)
through :meth:`reports.pages.page.Site.page`."""

from __future__ import annotations

from . import benchmark, drilldown, efficiency, overview, reproduction, retriever

PAGES = (reproduction, benchmark, efficiency, retriever, drilldown, overview)  # reproduction first: it sets the nav link

__all__ = ["PAGES"]
