"""Static leaderboard site and paper tables rendered from the results store (DESIGN.md §9)."""

from .compare import Leaderboard, compare, summary_rows
from .site import render_site

__all__ = ["Leaderboard", "compare", "render_site", "summary_rows"]
