"""Static leaderboard site rendered from the results store (DESIGN.md §9)."""

from .site import render_site, summary_rows

__all__ = ["render_site", "summary_rows"]
