"""Static leaderboard site and paper tables rendered from the results store (docs/design/store.md#the-site)."""

from .compare import Leaderboard, compare, summary_rows
from .site import render_site

__all__ = ["Leaderboard", "compare", "render_site", "summary_rows"]
