"""A method's citation, declared once with its registered metadata (``register(..., citation=...)``
in harness/core/registry.py) and written as one BibTeX entry for the pages and the data files.

Only what a retriever's declaration states is written: a field left empty is left out of the
entry, never filled in. Text is escaped for BibTeX (braces balanced, ``\\``, ``%``, ``&``, ``$``,
``#``, ``_`` escaped), so a value cannot end the entry early.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_KEY = re.compile(r"[A-Za-z][A-Za-z0-9_:-]{0,63}")
_SPECIAL = str.maketrans({"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "%": r"\%", "&": r"\&",
                          "$": r"\$", "#": r"\#", "_": r"\_", "~": r"\textasciitilde{}", "^": r"\^{}"})


def bibtex_escape(text: str) -> str:
    """``text`` as a BibTeX field value (inside braces): specials escaped, whitespace collapsed."""
    return " ".join(str(text).split()).translate(_SPECIAL)


@dataclass(frozen=True)
class Citation:
    """What a paper's reference list says of it. ``entry``: the BibTeX type (``article``,
    ``inproceedings``, ``book``, ``misc``); ``venue`` goes to ``journal`` (article), ``booktitle``
    (inproceedings), ``publisher`` (book) or ``howpublished`` (misc); ``authors`` are as the source
    writes them, ``others`` adds "and others" where the source abbreviates with "et al."."""

    key: str
    title: str
    authors: tuple[str, ...] = ()
    others: bool = False
    year: int | None = None
    entry: str = "misc"
    venue: str = ""
    pages: str = ""
    eprint: str = ""  # an arXiv id
    doi: str = ""
    note: str = ""

    def __post_init__(self) -> None:
        if not _KEY.fullmatch(self.key):
            raise ValueError(f"citation key {self.key!r}: letters, digits, _ : - only, starting with a letter")
        if self.entry not in ("article", "inproceedings", "book", "misc"):
            raise ValueError(f"citation {self.key}: entry type {self.entry!r} is not article, inproceedings, "
                             "book or misc")
        if not self.title.strip():
            raise ValueError(f"citation {self.key}: no title")

    def fields(self) -> dict[str, str]:
        """The entry's fields in order, only those declared."""
        venue_field = {"article": "journal", "inproceedings": "booktitle", "book": "publisher",
                       "misc": "howpublished"}[self.entry]
        authors = list(self.authors) + (["others"] if self.others else [])
        out = {"title": self.title, "author": " and ".join(authors), "year": str(self.year or ""),
               venue_field: self.venue, "pages": self.pages.replace("–", "--"), "doi": self.doi, "note": self.note}
        if self.eprint:
            out.update({"eprint": self.eprint, "archivePrefix": "arXiv"})
        return {k: v for k, v in out.items() if v}

    def bibtex(self) -> str:
        """One ``@type{key, field = {value}, ...}`` entry."""
        body = ",\n".join(f"  {k} = {{{bibtex_escape(v)}}}" for k, v in self.fields().items())
        return f"@{self.entry}{{{self.key},\n{body}\n}}\n"
